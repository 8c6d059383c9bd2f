#include "anvil/env/cache_layout.h"

#include <sys/stat.h>

#include <ctime>
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
      // Anvil's record of each workdir's task (the workdir's own copy is its user's to rewrite): kept,
      // so `anvil eval --candidate DIR` still knows DIR's task after a clear.
      {CacheArea::kWorkdirs, "workdirs", "the task of each workdir anvil init made", false},
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

size_t sweep_stale_tmp(const std::filesystem::path& cache, std::chrono::seconds age) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const time_t before = time(nullptr) - static_cast<time_t>(age.count());
  std::vector<fs::path> stale;
  for (const auto& entry : fs::directory_iterator(cache_dir(cache, CacheArea::kTmp), ec)) {
    struct stat st;  // the entry's own time (a link's, never its target's)
    if (::lstat(entry.path().c_str(), &st) == 0 && st.st_mtime < before) stale.push_back(entry.path());
  }
  size_t removed = 0;
  for (const auto& p : stale) removed += fs::remove_all(p, ec) > 0 ? 1 : 0;
  return removed;
}

}  // namespace anvil
