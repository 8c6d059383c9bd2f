// baselines.h: what the evaluator keeps between evaluations: the eager and torch.compile baselines
// of a task, and a GPU's measured peaks (the roofline floor's).
//
// A baseline is kept per task, GPU, driver, torch, CUDA, flags and timing settings, with its spread
// and what the judge saw of the machine while measuring it. It is used again only when it was
// measured clean: on a GPU, samples that agree (interquartile spread within kMaxSpreadGpu of the
// median) and no other process on the GPU; with defenses, the judge's batch measured with it.
// Otherwise the next evaluation measures it again, so a loaded machine cannot change a later
// reward. (CPU baselines, for tests on a shared host, are not held to the spread.)
#pragma once

#include <filesystem>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "anvil/env/toolchain.h"

namespace anvil {

inline constexpr double kMaxSpreadGpu = 0.10;  // (p75 - p25) / median of a clean GPU baseline

std::string baseline_key(const Environment& env, const std::string& task_hash, const nlohmann::json& request,
                         const std::string& device);
std::filesystem::path baseline_path(const Environment& env, const std::string& key);

// Why a measured baseline (the runner's timing entry for eager or compile) must not be kept, or
// nullopt when it is clean. `needs_batch`: eager's entry must carry the judge's batch.
std::optional<std::string> unclean_baseline(const nlohmann::json& timing, const std::string& device, bool needs_batch);

// The cached entries of a key that may be used ({} when none): entries written clean only.
nlohmann::json load_baselines(const std::filesystem::path& path);

// The GPU's measured peaks (the roofline floor's), per GPU model, driver and torch.
std::filesystem::path roofline_cache_path(const Environment& env, int gpu);

}  // namespace anvil
