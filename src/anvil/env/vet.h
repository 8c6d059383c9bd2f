// vet.h: task vetting: does the task's check tell a real kernel from a
// degenerate one?
//
// `python -m anvil.vet` (python/anvil/vet.py, docs/vet.md) runs the reference
// on the task's own inputs and on signed, scaled and heavy-tailed variants,
// and flags a task whose output is all zero, below 10x atol, constant, equal
// to an input, or independent of the input. It runs as the evaluation runner
// does: its own process group, a timeout, a memory limit and no network. The
// report is cached under <cache>/vet/, keyed by the task's hash, the
// environment, the device, the tolerance, the seed and vet.py itself.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "anvil/env/task.h"
#include "anvil/env/toolchain.h"

namespace anvil {

struct VetOptions {
  std::string device = "cpu";     // "cpu" or "cuda"
  int gpu = 0;                    // which GPU (CUDA_VISIBLE_DEVICES) on "cuda"
  std::string preset = "strict";  // tolerance preset (tolerance_preset in eval.h)
  uint32_t seed = 0;              // base seed: inputs of seed+1 and seed+2
  std::chrono::seconds timeout{600};
  size_t memory_limit_bytes = 64ull << 30;  // resident memory of the vetting process
  bool use_cache = true;
};

struct VetResult {
  bool ok = false;         // true: `report` holds a finished vetting (status "done")
  std::string error;       // why not, when !ok (a broken task, a timeout, the environment)
  nlohmann::json report;   // the anvil.vet/1 report (docs/vet.md); on a task error, its error report
  bool cached = false;     // the report came from the cache

  bool flagged() const;                  // ok and at least one flag
  std::vector<std::string> flags() const;  // the flags' names, in report order
};

// Vets one task (see above). Never throws; problems come back in `error`.
VetResult vet_task(const Environment& env, const Task& task, const VetOptions& opts);

// The cache key of a vetting: SHA-256 over the task's hash, the environment's
// fingerprint, the device (and GPU model), the tolerance, the seed and the
// vetting code. Throws std::invalid_argument for an unknown preset.
std::string vet_key(const Environment& env, const Task& task, const VetOptions& opts);

}  // namespace anvil
