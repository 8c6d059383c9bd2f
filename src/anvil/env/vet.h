// vet.h: task vetting: does the task's check tell a real kernel from a
// degenerate one?
//
// python/anvil/vet.py (docs/vet.md) runs the reference on the task's own
// inputs and on signed, scaled and heavy-tailed variants, and flags a task
// whose output is all zero, below 10x atol, constant, equal to an input, or
// independent of the input. It runs as the evaluation runner does (launch.h):
// forked from the warm zygote or a fresh process, PID 1 of its own PID
// namespace, allow-listed environment, a timeout, a memory limit and no
// network. The
// report is cached under <cache>/vet/, keyed by the task's hash, the
// environment, the device, the tolerance, the seed and vet.py itself.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "anvil/env/device.h"
#include "anvil/env/task.h"
#include "anvil/env/toolchain.h"

namespace anvil {

// Tasks `anvil vet` vets at once on a GPU by default: vetting is a few reference calls, so most of
// a task's time is the process's start and CUDA's (bench/results/kb-vet-*.md); those that run out
// of memory beside the others are vetted again packed by need (vet_many).
inline constexpr int kVetJobsCuda = 8;
// Of the GPU's memory, the share the retries of memory-limited vettings pack their needs into;
// each also counts kVetProcessBytes (its CUDA context, torch's workspaces).
inline constexpr double kVetPackShare = 0.85;
inline constexpr double kVetProcessBytes = 1.5 * (1ull << 30);

struct VetOptions {
  Device device = Device::Cpu;
  int gpu = 0;                    // which GPU (CUDA_VISIBLE_DEVICES) on "cuda"
  std::string preset = "strict";  // tolerance preset (tolerance_preset in eval.h)
  uint32_t seed = 0;              // base seed: inputs of seed+1 and seed+2
  std::chrono::seconds timeout{600};
  size_t memory_limit_bytes = 64ull << 30;  // resident memory of the vetting process
  bool use_cache = true;
  std::string zygote = "auto";    // "auto": fork from the warm zygote (launch.h); "none": a fresh process
  // Other vettings share the GPU: a report that the GPU's free memory decided (memory_limited: a
  // task not vetted, or a distribution skipped, for want of memory) is not cached, and
  // VetResult::memory_limited tells the caller to vet the task again alone.
  bool shared_gpu = false;
  // The GPU's lock (eval.h gpu_lock_path) taken exclusive rather than shared: vet_many's pass of
  // the tasks that ran out of memory beside others, to be alone among anvil's vettings, warm-ups
  // and measurements of baselines. Any other vetting (anvil eval's, one task's) shares it.
  bool gpu_alone = false;
};

struct VetResult {
  bool ok = false;         // true: `report` holds a finished vetting (status "done")
  std::string error;       // why not, when !ok (a broken task, a timeout, the environment)
  nlohmann::json report;   // the anvil.vet/1 report (docs/vet.md); on a task error, its error report
  bool cached = false;     // the report came from the cache
  bool memory_limited = false;  // the GPU's free memory decided part of the report (see shared_gpu)
  double seconds = 0;           // wall time of the vetting process, from its launch to its end
  // What the report says vetting holds on the GPU, and the GPU's size (0: not said): vet_many packs
  // its retries of memory-limited tasks by them.
  double need_bytes = 0, gpu_bytes = 0;

  const char* status() const;            // "ok", "flagged" or "error" (not ok)
  bool flagged() const;                  // ok and at least one flag
  std::vector<std::string> flags() const;  // the flags' names, in report order
};

// Vets one task (see above). Never throws; problems come back in `error`.
VetResult vet_task(const Environment& env, const Task& task, const VetOptions& opts);

// One task of many (vet_many): the spec as given, its task once loaded (none when it could not be:
// result.error says why), and its result.
struct VetItem {
  std::string spec;
  std::optional<Task> task;
  VetResult result;
  std::chrono::steady_clock::time_point started, ended;  // its first vetting's start, its last one's end
};

// Vets `items` `jobs` at a time, sharing the GPU (vetting decides nothing by time, so sharing changes
// no verdict, but for its memory). The items whose report the others' memory decided are vetted
// again once the others are done, as many at a time as their reports' need_bytes fit
// kVetPackShare of the GPU (one whose need is unknown or above that, alone), and any still decided
// so, alone; an item's `seconds` are all its runs'. done(i), from a worker thread, once item i's
// result is final. Never throws.
void vet_many(const Environment& env, std::vector<VetItem>& items, const VetOptions& opts, unsigned jobs,
              const std::function<void(size_t)>& done);

// The cache key of a vetting: SHA-256 over the task's hash, the environment's
// fingerprint, the device (and GPU model), the tolerance, the seed and the
// vetting code. Throws std::invalid_argument for an unknown preset.
std::string vet_key(const Environment& env, const Task& task, const VetOptions& opts);

}  // namespace anvil
