// cache_layout.h: every area of anvil's cache ($ANVIL_CACHE, default_cache_dir()) in one place:
// its directory, what it holds, and whether `anvil cache clear` removes it. Code that writes under
// the cache names its area here (cache_dir); a test fails on a cache path built anywhere else.
#pragma once

#include <chrono>
#include <cstddef>
#include <filesystem>
#include <vector>

namespace anvil {

struct Environment;

enum class CacheArea {
  kObjects,      // compiled translation units, by content (build.h)
  kManifests,    // a build's inputs -> its outputs (build.h)
  kModules,      // linked extension modules (build.h)
  kRuntime,      // anvil's runtime library, built once per toolchain (build.h; read by the judge)
  kEnv,          // the environment probe's result (toolchain.h)
  kTmp,          // private copies of one evaluation, vetting, build or task probe
  kBaselines,    // eager and torch.compile baselines (baselines.h)
  kRoofline,     // a GPU's measured peaks (baselines.h)
  kVet,          // vetting reports (vet.h)
  kReference,    // references' profiles (reference_profile.h)
  kKernelNames,  // kernel names read from compiled modules (python/anvil/evidence.py)
  kZygote,       // the warm zygotes' sockets and tokens (launch.h)
  kLocks,        // lock files: builds, the GPU lock of `anvil baselines`
  kServe,        // `anvil serve`'s default state: its durable store, requests and sessions
  kWorkdirs,     // the task each workdir `anvil init` made is judged against (workdir.h)
};

struct CacheAreaInfo {
  CacheArea area;
  const char* dir;    // under the cache
  const char* holds;  // one line, for `anvil cache stats`
  // Removed by `anvil cache clear`. Not: the service's store (accepted requests, sessions), the
  // zygotes' sockets (running processes answer there) and the lock files (held ones must stay one file).
  bool cleared;
};

// Every area, in the order `anvil cache stats` lists them.
const std::vector<CacheAreaInfo>& cache_areas();
const CacheAreaInfo& cache_area(CacheArea area);

// The area's directory under `cache` (env.cache).
std::filesystem::path cache_dir(const std::filesystem::path& cache, CacheArea area);
std::filesystem::path cache_dir(const Environment& env, CacheArea area);

// What a killed anvil leaves in tmp/ (every exit it sees removes its own directories): an entry
// whose last change is older than this is no live process's. No evaluation, build or tool call lasts
// near it.
constexpr std::chrono::hours kStaleTmpAge{24};

// Removes the entries of `cache`'s tmp/ area last changed more than `age` ago; returns how many.
// Every command that loads the environment sweeps once (commands.cpp), as `anvil cache clear` does
// all of tmp/.
size_t sweep_stale_tmp(const std::filesystem::path& cache, std::chrono::seconds age = kStaleTmpAge);

}  // namespace anvil
