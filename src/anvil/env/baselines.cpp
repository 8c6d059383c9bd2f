#include "anvil/env/baselines.h"

#include "anvil/env/cache_layout.h"
#include "anvil/util/fs.h"
#include "anvil/util/hash.h"
#include "anvil/util/json_text.h"

#include <cstdio>
#include <utility>

namespace anvil {

namespace {
constexpr const char* kBaselineFormat = "anvil-baseline-v7";  // v2: eager carries the judge's batch; v3: torch on one CPU thread; v4: the run queue's share checked; v5: the batch on the judge's GPU clock; v6: timed without the profiler; v7: timed calls on copies of the base sets (no rolls)

std::optional<double> number_at(const nlohmann::json& j, const char* key) {
  if (!j.is_object() || !j.contains(key) || !j[key].is_number()) return std::nullopt;
  return j[key].get<double>();
}
}  // namespace

std::string baseline_key(const Environment& env, const std::string& task_hash, const nlohmann::json& request,
                         Device device) {
  Hasher h;
  std::string gpu = env.gpus.empty() ? "cpu" : env.gpus[0].name;
  h.add("format", kBaselineFormat)
      .add("task", task_hash)
      .add("device", to_string(device))
      .add("gpu", device == Device::Cuda ? gpu : "cpu")
      .add("driver", env.driver)
      .add("torch", env.torch.version + "|" + env.torch.cuda)
      .add("flags", json_text(request["flags"]))
      .add("timing", json_text(request["timing"]))
      .add("defended", request.value("defenses", nlohmann::json(false)).is_object() ? "1" : "0");
  return h.hex();
}

fs::path baseline_path(const Environment& env, const std::string& key) {
  return cache_dir(env, CacheArea::kBaselines) / (key.substr(0, 2) + "/" + key + ".json");
}

std::optional<std::string> unclean_baseline(const nlohmann::json& timing, Device device, bool needs_batch) {
  auto median = number_at(timing, "median_ms");
  if (!median || *median <= 0) return "not measured";
  auto p25 = number_at(timing, "p25_ms"), p75 = number_at(timing, "p75_ms");
  double limit = kMaxSpreadGpu;
  if (device == Device::Cuda && p25 && p75 && (*p75 - *p25) / *median > limit) {
    char buf[160];
    std::snprintf(buf, sizeof buf, "its samples spread %.0f%% of the median (at most %.0f%% is kept)",
                  100 * (*p75 - *p25) / *median, 100 * limit);
    return std::string(buf);
  }
  const nlohmann::json& load = timing.contains("load") ? timing["load"] : nlohmann::json();
  const nlohmann::json& batch = timing.contains("batch") ? timing["batch"] : nlohmann::json();
  for (const auto& [what, j] : {std::pair<const char*, const nlohmann::json*>{"timed calls", &load},
                                 std::pair<const char*, const nlohmann::json*>{"judge's batch", &batch}}) {
    auto share = number_at(*j, "run_queue_share"), ms = number_at(*j, "run_queue_ms");
    if (share && ms && *share > kMaxRunQueueShare && *ms > kMinRunQueueMs) {
      char buf[240];
      std::snprintf(buf, sizeof buf, "the machine was loaded: its %s waited for a CPU %.0f%% of their time, %.1f ms "
                    "(at most %.0f%% or %.0f ms is kept)", what, 100 * *share, *ms, 100 * kMaxRunQueueShare, kMinRunQueueMs);
      return std::string(buf);
    }
  }
  if (load.is_object() && load.contains("candidate_gone") && load["candidate_gone"] == false) {
    return "the candidate's processes were still exiting while it was measured";
  }
  if (auto others = number_at(load, "other_gpu_processes"); others && *others > 0) {
    return std::to_string(static_cast<int>(*others)) + " other process(es) used the GPU while it was measured";
  }
  if (needs_batch && !(timing.contains("batch") && number_at(timing["batch"], "per_call_ms"))) {
    return "the judge's batch was not measured with it";
  }
  return std::nullopt;
}

nlohmann::json load_baselines(const fs::path& path) {
  nlohmann::json out = nlohmann::json::object();
  auto text = read_file(path);
  if (!text) return out;
  nlohmann::json cached = nlohmann::json::parse(*text, nullptr, false);
  if (!cached.is_object()) return out;  // corrupt: measured again
  for (const char* name : {"eager", "compile"}) {
    if (cached.contains(name) && cached[name].is_object() && cached[name].value("clean", false)) out[name] = cached[name];
  }
  return out;
}

fs::path roofline_cache_path(const Environment& env, int gpu) {
  Hasher h;
  std::string name = gpu >= 0 && gpu < static_cast<int>(env.gpus.size()) ? env.gpus[gpu].name : "unknown";
  h.add("format", "anvil-roofline-v1").add("gpu", name).add("driver", env.driver).add("torch", env.torch.version);
  return cache_dir(env, CacheArea::kRoofline) / (h.hex().substr(0, 24) + ".json");
}

}  // namespace anvil
