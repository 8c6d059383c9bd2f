// reference_profile.h: where a task's reference spends its time, before anyone writes a kernel: eager
// and torch.compile timed as the judge times its baselines, the kernels each launches with their
// share of the GPU's time, the work of one call (FLOPs, the fewest bytes it must move) and the
// roofline floor from the GPU's measured peaks. python/anvil/reference_profile.py measures (in a
// process of its own, forked from the warm zygote when one answers, the GPU's lock exclusive where
// asked); this side runs it, caches its report per task, GPU, driver, torch and method, and turns it
// into the text the agent's profile_reference tool and `anvil task profile` show.
#pragma once

#include <chrono>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "anvil/env/eval.h"
#include "anvil/env/task.h"
#include "anvil/env/toolchain.h"

namespace anvil {

// The rows of kernels (ops on the CPU) a report keeps per model; the text shows the first `top`.
inline constexpr size_t kReferenceProfileRows = 50;

struct ReferenceProfileOptions {
  Device device = Device::Cuda;
  int gpu = 0;                           // which GPU (CUDA_VISIBLE_DEVICES) on "cuda"
  std::string compile_mode = "default";  // torch.compile's mode; "none": eager alone
  // As EvalOptions: the baselines' method, and the time the reward compares (events | kernel-sum).
  int warmup = timing_defaults().warmup;  // share/protocol.json's timing
  int calls = timing_defaults().calls;
  int input_sets = timing_defaults().input_sets;
  bool allow_tf32 = false;
  TimingMethod timing = TimingMethod::kEvents;
  bool gpu_lock = false;                 // take the GPU's lock (eval.h gpu_lock_path) exclusive while it measures
  bool use_cache = true;
  std::string zygote = "auto";           // launch.h: "auto", "none" or a socket's path
  std::chrono::seconds timeout{600};
  size_t memory_limit_bytes = 64ull << 30;
};

// The options an evaluation's options imply (the agent's profile_reference: the episode's own).
ReferenceProfileOptions reference_profile_options(const EvalOptions& eval, const Environment& env);

struct ReferenceProfile {
  bool ok = false;
  std::string error;       // why not, when !ok
  bool task_error = false;  // !ok because the task itself fails (its reference raises, or it cannot be loaded)
  std::string unclean;     // ok, but not kept in the cache: why (a disturbed measurement, as baselines.h's rule)
  nlohmann::json report;   // anvil.reference-profile/1 (python/anvil/reference_profile.py)
  bool cached = false;
  double seconds = 0;      // the measuring process's wall time (0 when cached)
};

// The cache key: the task's code, the device (GPU model, driver), torch, the method and anvil's
// measuring sources.
std::string reference_profile_key(const Environment& env, const Task& task, const ReferenceProfileOptions& opts);

// A report is kept in the cache only when its times are clean by the baselines' rule (baselines.h
// unclean_baseline: on a GPU, an interquartile spread within 10% of the median): a profile disturbed
// by other work on the machine (another episode's shell on the GPU, say) would mislead every later
// episode of the task. Why not, or "" when clean.
std::string unclean_reference_profile(const nlohmann::json& report);

ReferenceProfile profile_reference(const Environment& env, const Task& task, const ReferenceProfileOptions& opts);

// The report as the agent reads it: the times and what the next milestones take (reward.h, from the
// time the reward compares), the work and the floor, then the first `top` kernels of each model by
// their share of the GPU's time.
std::string reference_profile_text(const nlohmann::json& report, size_t top = 8);

}  // namespace anvil
