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

#include "anvil/env/task.h"
#include "anvil/env/toolchain.h"

namespace anvil {

struct ReferenceProfileOptions {
  std::string device = "cuda";           // "cuda" or "cpu"
  int gpu = 0;                           // which GPU (CUDA_VISIBLE_DEVICES) on "cuda"
  std::string compile_mode = "default";  // torch.compile's mode; "none": eager alone
  int warmup = 10;                       // as EvalOptions: the baselines' method
  int calls = 30;
  int top = 8;                           // kernels (ops on the CPU) listed per model
  bool gpu_lock = false;                 // take the GPU's lock (eval.h gpu_lock_path) exclusive while it measures
  bool use_cache = true;
  std::string zygote = "auto";           // launch.h: "auto", "none" or a socket's path
  std::chrono::seconds timeout{600};
  size_t memory_limit_bytes = 64ull << 30;
};

struct ReferenceProfile {
  bool ok = false;
  std::string error;       // why not, when !ok
  bool task_error = false;  // !ok because the task itself fails (its reference raises, or it cannot be loaded)
  nlohmann::json report;   // anvil.reference-profile/1 (python/anvil/reference_profile.py)
  bool cached = false;
  double seconds = 0;      // the measuring process's wall time (0 when cached)
};

// The cache key: the task's code, the device (GPU model, driver), torch, the method and anvil's
// measuring sources.
std::string reference_profile_key(const Environment& env, const Task& task, const ReferenceProfileOptions& opts);

ReferenceProfile profile_reference(const Environment& env, const Task& task, const ReferenceProfileOptions& opts);

// The report as the agent reads it: the times and what the next milestones take (reward.h), the work
// and the floor, then the kernels of each model by their share of the GPU's time.
std::string reference_profile_text(const nlohmann::json& report);

}  // namespace anvil
