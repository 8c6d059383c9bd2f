// vet.cpp: runs python/anvil/vet.py on one task, isolated, and caches its report.
#include "anvil/env/vet.h"

#include <sys/resource.h>

#include <chrono>
#include <stdexcept>

#include "anvil/env/cache_layout.h"
#include "anvil/env/eval.h"
#include "anvil/env/launch.h"
#include "anvil/util/fs.h"
#include "anvil/util/hash.h"
#include "anvil/util/json_text.h"
#include "anvil/util/strings.h"
#include "anvil/util/subprocess.h"
#include "anvil/util/thread_pool.h"

namespace anvil {

namespace {

constexpr const char* kVetFormat = "anvil-vet-v1";
constexpr const char* kProtocol = "anvil.vet/1";
constexpr size_t kTailLines = 8;

// The Python files whose behaviour a vetting report depends on.
const char* const kVetSources[] = {"python/anvil/vet.py", "python/anvil/stress.py", "python/anvil/evidence.py",
                                   "python/anvil/task_probe.py", "python/anvil/_cli.py"};

fs::path cache_path(const Environment& env, const std::string& key) { return cache_dir(env, CacheArea::kVet) / (key + ".json"); }

// The report of a cache entry, or null if there is none (or it is unreadable).
nlohmann::json read_cached(const fs::path& path) {
  auto text = read_file(path);
  if (!text) return nullptr;
  auto j = nlohmann::json::parse(*text, nullptr, false);
  if (!j.is_object() || j.value("protocol", std::string()) != kProtocol || j.value("status", std::string()) != "done") {
    return nullptr;
  }
  return j;
}

// Messages name the task as given (`spec`), not its private copy (`file`).
void name_task(nlohmann::json& j, const std::string& file, const std::string& spec) {
  if (j.is_string()) {
    j = replace_all(j.get<std::string>(), file, spec);
  } else if (j.is_object() || j.is_array()) {
    for (auto& v : j) name_task(v, file, spec);
  }
}

SubprocessOptions vet_process(const Environment& env, const VetOptions& opts, const fs::path& dir,
                              const nlohmann::json& request) {
  SubprocessOptions so;
  so.cwd = dir;
  so.stdin_data = json_text(request);
  so.merge_stderr = false;
  so.capture_fd3 = true;
  so.max_output = 1 << 20;
  so.timeout = opts.timeout;
  exclude_lock_waits(so, request, false);
  so.max_rss_bytes = opts.memory_limit_bytes;
  so.rlimits = {{RLIMIT_CORE, 0}};
  so.new_network = network_isolation_available();
  so.env = runner_environment(env);
  so.clear_env = true;
  if (opts.device == Device::Cuda) so.env["CUDA_VISIBLE_DEVICES"] = std::to_string(opts.gpu);
  return so;
}

// The vetting process's run: forked from the zygote when one answers (no torch import to wait
// for), else a fresh process (launch_python's rule).
SubprocessResult run_vetting(const Environment& env, const VetOptions& opts, const fs::path& dir,
                             const nlohmann::json& request) {
  SubprocessOptions so = vet_process(env, opts, dir, request);
  Launch launched = launch_python(env, PyModule::kVet, opts.zygote, request, so, dir);
  if (!launched.zygote) return launched.result;
  launched.result.err_output = launched.result.output;  // the zygote's child has one output file for both
  return launched.result;
}

// Why a finished process gave no usable report, in a line or a few.
std::string no_report(const SubprocessResult& r, const VetOptions& opts) {
  if (r.timed_out) {
    return "vetting did not finish within " + std::to_string(opts.timeout.count()) +
           " s and was killed (a reference too slow for this device, or one that never returns)";
  }
  if (r.memory_exceeded) {
    return "vetting used more than " + std::to_string(opts.memory_limit_bytes >> 30) + " GiB of memory and was killed";
  }
  std::string tail = trim(tail_lines(r.err_output, kTailLines));
  return "anvil.vet ended without a report (" + r.describe() + ")" + (tail.empty() ? "" : ":\n" + tail);
}

}  // namespace

bool VetResult::flagged() const {
  return ok && report.is_object() && !report.value("flags", nlohmann::json::array()).empty();
}

const char* VetResult::status() const { return !ok ? "error" : flagged() ? "flagged" : "ok"; }

std::vector<std::string> VetResult::flags() const {
  std::vector<std::string> out;
  if (!report.is_object()) return out;
  for (const auto& f : report.value("flags", nlohmann::json::array())) out.push_back(f.value("flag", std::string()));
  return out;
}

std::string vet_key(const Environment& env, const Task& task, const VetOptions& opts) {
  Hasher h;
  h.add("format", kVetFormat)
      .add("task", task.hash)
      .add("env", env.fingerprint)
      .add("device", to_string(opts.device))
      .add("gpu", opts.device == Device::Cuda && !env.gpus.empty() ? env.gpus[0].name + "|" + env.driver : "cpu")
      .add("tolerance", json_text(tolerance_preset(opts.preset)))
      .add("seed", std::to_string(opts.seed));
  for (const char* rel : kVetSources) h.add(rel, hash_file(env.home / rel).value_or("missing"));
  return h.hex();
}

VetResult vet_task(const Environment& env, const Task& task, const VetOptions& opts) {
  VetResult res;
  auto fail = [&](const std::string& why) {
    res.ok = false;
    res.error = why;
    return res;
  };
  nlohmann::json tolerance;
  try {
    tolerance = tolerance_preset(opts.preset);
  } catch (const std::exception& e) {
    return fail(e.what());
  }
  if (opts.device == Device::Cuda && env.gpus.empty()) {
    return fail("no GPU found: vet on the CPU (--device cpu) or on a GPU host");
  }
  if (!env.torch.present) return fail(env.probe_error.empty() ? "torch is not available" : env.probe_error);

  std::string key = vet_key(env, task, opts);
  fs::path entry = cache_path(env, key);
  if (opts.use_cache) {
    nlohmann::json cached = read_cached(entry);
    if (!cached.is_null()) {
      res.ok = true;
      res.cached = true;
      res.report = cached;
      return res;
    }
  }

  // The task's source in a private directory, as the runner sees it.
  TempDir scratch;
  try {
    scratch = TempDir(cache_dir(env, CacheArea::kTmp), "vet");
  } catch (const std::exception& e) {
    return fail(e.what());
  }
  const fs::path& dir = scratch.path();
  fs::path file = dir / "model.py";
  std::string err;
  if (!write_file_atomic(file, task.code, &err, 0444)) return fail(err);

  nlohmann::json request = {{"protocol", kProtocol},
                            {"task_file", file.string()},
                            {"device", to_string(opts.device)},
                            {"seed", opts.seed},
                            {"tolerance", tolerance}};
  if (opts.device == Device::Cuda) {  // shared, but exclusive for vet_many's alone pass; never while a measurement times
    request["gpu_lock"] = gpu_lock_path(env, opts.gpu).string();
    request["gpu_lock_shared"] = !opts.gpu_alone;
  }
  auto launched = std::chrono::steady_clock::now();
  SubprocessResult r = run_vetting(env, opts, dir, request);
  res.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - launched).count();
  if (!r.started) return fail("cannot run " + env.python.string() + ": " + r.error);
  nlohmann::json report = r.timed_out || r.memory_exceeded ? nlohmann::json(nullptr)
                                                            : nlohmann::json::parse(r.fd3_output, nullptr, false);
  if (!report.is_object()) return fail(no_report(r, opts));

  name_task(report, file.string(), task.spec);
  res.report = report;
  if (report.value("status", std::string()) != "done") {
    return fail(report.value("message", std::string("anvil.vet gave no reason")));
  }
  res.ok = true;
  res.memory_limited = report.value("memory_limited", false);
  if (report.value("need_bytes", nlohmann::json()).is_number()) res.need_bytes = report["need_bytes"].get<double>();
  if (report.value("gpu_bytes", nlohmann::json()).is_number()) res.gpu_bytes = report["gpu_bytes"].get<double>();
  if (res.memory_limited && opts.shared_gpu) return res;  // decided by the others' memory too: not kept
  if (opts.use_cache && !write_file_atomic(entry, json_text(report, 1) + "\n", &err)) {
    res.report["cache_error"] = err;  // a failed store only costs a re-run
  }
  return res;
}

void vet_many(const Environment& env, std::vector<VetItem>& items, const VetOptions& opts, unsigned jobs,
              const std::function<void(size_t)>& done) {
  jobs = static_cast<unsigned>(std::min<size_t>(std::max(1u, jobs), std::max<size_t>(items.size(), 1)));
  VetOptions shared = opts;
  shared.shared_gpu = jobs > 1;
  std::vector<char> again(items.size(), 0);  // (not vector<bool>: workers write their own items at once)
  std::vector<std::function<void()>> work;
  for (size_t i = 0; i < items.size(); ++i) {
    work.push_back([&, i] {
      VetItem& item = items[i];
      item.started = std::chrono::steady_clock::now();
      std::string err;
      item.task = load_task(env, item.spec, &err);
      if (!item.task) {
        item.result.error = err;
      } else {
        item.result = vet_task(env, *item.task, shared);
        again[i] = item.result.memory_limited && shared.shared_gpu;
      }
      item.ended = std::chrono::steady_clock::now();
      if (!again[i] && done) done(i);
    });
  }
  run_parallel(work, jobs);
  // Again, packed by need; then alone. A run's seconds add to the item's (its cost: every run).
  auto vet_again = [&](size_t i, const VetOptions& o) {
    VetItem& item = items[i];
    double before = item.result.seconds;
    item.result = vet_task(env, *item.task, o);
    item.result.seconds += before;
    item.ended = std::chrono::steady_clock::now();
  };
  // Those whose report said a need within the capacity; the others go alone at once (one that ran
  // alone here would be vetted twice: a shared run's report is not kept).
  std::vector<size_t> packed;
  std::vector<double> weights;
  double capacity = 0;
  for (size_t i = 0; i < items.size(); ++i) {
    const VetResult& r = items[i].result;
    double w = r.need_bytes + kVetProcessBytes, fits = kVetPackShare * r.gpu_bytes;
    if (!again[i] || r.need_bytes <= 0 || r.gpu_bytes <= 0 || w > fits) continue;
    packed.push_back(i);
    weights.push_back(w);
    capacity = std::max(capacity, fits);
  }
  std::vector<std::function<void()>> retries;
  for (size_t i : packed) {
    retries.push_back([&, i] {
      vet_again(i, shared);
      again[i] = items[i].result.memory_limited;
      if (!again[i] && done) done(i);
    });
  }
  if (packed.size() > 1) run_packed(retries, weights, capacity, jobs);
  VetOptions alone = opts;
  alone.shared_gpu = false;
  alone.gpu_alone = opts.device == Device::Cuda;
  for (size_t i = 0; i < items.size(); ++i) {
    if (!again[i]) continue;
    vet_again(i, alone);
    if (done) done(i);
  }
}

}  // namespace anvil
