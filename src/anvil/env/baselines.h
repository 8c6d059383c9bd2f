// baselines.h: what the evaluator keeps between evaluations: the eager and torch.compile baselines
// of a task, and a GPU's measured peaks (the roofline floor's).
//
// A baseline is kept per task, GPU, driver, torch, CUDA, flags and timing settings, with its spread
// and what the judge saw of the machine while measuring it. It is used again only when it was
// measured clean: on a GPU, samples that agree (interquartile spread within kMaxSpreadGpu of the
// median) and no other process on the GPU; on any device, measuring threads that seldom waited for
// a CPU (from the kernel's schedstat: not more than kMaxRunQueueShare of the wall time, and
// kMinRunQueueMs, for the timed calls and for the judge's batch: a wait that long could have
// stretched the baseline by more than a tenth; the candidate's processes all gone); with defenses, the judge's batch measured
// with it. Otherwise the next evaluation measures it again, so a loaded machine cannot change a
// later reward. (CPU baselines, for tests on a shared host, are not held to the spread: their load
// is the run queue's.)
#pragma once

#include <filesystem>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "anvil/env/device.h"
#include "anvil/env/toolchain.h"

namespace anvil {

inline constexpr double kMaxSpreadGpu = 0.10;  // (p75 - p25) / median of a clean GPU baseline
inline constexpr double kMaxRunQueueShare = 0.10;  // of the wall time spent runnable, waiting for a CPU,
inline constexpr double kMinRunQueueMs = 5.0;       // and at least this long: shorter is a VM's scheduling
                                                    // noise (up to 3.4 ms seen on a quiet 2-vCPU VM)

std::string baseline_key(const Environment& env, const std::string& task_hash, const nlohmann::json& request,
                         Device device);
std::filesystem::path baseline_path(const Environment& env, const std::string& key);

// Why a measured baseline (the runner's timing entry for eager or compile) must not be kept, or
// nullopt when it is clean. `needs_batch`: eager's entry must carry the judge's batch.
std::optional<std::string> unclean_baseline(const nlohmann::json& timing, Device device, bool needs_batch);

// The cached entries of a key that may be used ({} when none): entries written clean only.
nlohmann::json load_baselines(const std::filesystem::path& path);

// The GPU's measured peaks (the roofline floor's), per GPU model, driver and torch.
std::filesystem::path roofline_cache_path(const Environment& env, int gpu);

}  // namespace anvil
