#include "anvil/env/cache_layout.h"

#include <stdexcept>

#include "anvil/env/toolchain.h"

namespace anvil {

const std::vector<CacheAreaInfo>& cache_areas() {
  static const std::vector<CacheAreaInfo> areas = {
      {CacheArea::kObjects, "objects", "compiled translation units", true},
      {CacheArea::kManifests, "manifests", "builds' inputs and outputs", true},
      {CacheArea::kModules, "modules", "linked extension modules", true},
      {CacheArea::kRuntime, "runtime", "anvil's runtime library", true},
      {CacheArea::kEnv, "env", "the environment probe", true},
      {CacheArea::kTmp, "tmp", "evaluations' private copies", true},
      {CacheArea::kBaselines, "baselines", "eager and torch.compile baselines", true},
      {CacheArea::kRoofline, "roofline", "GPUs' measured peaks", true},
      {CacheArea::kVet, "vet", "vetting reports", true},
      {CacheArea::kReference, "reference", "references' profiles", true},
      {CacheArea::kKernelNames, "kernel-names", "kernel names of compiled modules", true},
      {CacheArea::kZygote, "zygote", "warm zygotes' sockets", false},
      {CacheArea::kLocks, "locks", "lock files", false},
      {CacheArea::kServe, "serve", "anvil serve's store and requests", false},
  };
  return areas;
}

const CacheAreaInfo& cache_area(CacheArea area) {
  for (const auto& a : cache_areas()) {
    if (a.area == area) return a;
  }
  throw std::logic_error("cache_area: an area missing from cache_areas()");
}

std::filesystem::path cache_dir(const std::filesystem::path& cache, CacheArea area) { return cache / cache_area(area).dir; }

std::filesystem::path cache_dir(const Environment& env, CacheArea area) { return cache_dir(env.cache, area); }

}  // namespace anvil
