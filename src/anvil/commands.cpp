#include "anvil/commands.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstring>

#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <iostream>
#include <map>
#include <mutex>
#include <optional>
#include <thread>

#include "anvil/agent/local_server.h"
#include "anvil/bench/compare.h"
#include "anvil/env/cache_layout.h"
#include "anvil/env/outcome.h"
#include "anvil/env/task.h"
#include "anvil/env/toolchain.h"
#include "anvil/serve/http_server.h"
#include "anvil/util/fs.h"
#include "anvil/util/json_text.h"
#include "anvil/util/strings.h"
#include "anvil/util/thread_pool.h"

namespace anvil {

namespace {

// Loads the environment or prints why not.
bool environment(Environment* env) {
  try {
    *env = load_environment();
    sweep_stale_tmp(env->cache);  // what a killed anvil left in tmp/ a day ago or more
    return true;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "anvil: %s\n", e.what());
    return false;
  }
}

void print_task_error(const nlohmann::json& probe) {
  std::string file = probe.value("file", std::string("?"));
  std::string cause = probe.value("cause", std::string("unknown cause"));
  // The probe's causes already name the file.
  std::fprintf(stderr, "task_error: %s\n", cause.find(file) == std::string::npos ? (file + ": " + cause).c_str()
                                                                                 : cause.c_str());
  std::string detail = trim(probe.value("detail", std::string()));
  if (!detail.empty() && detail != trim(cause)) std::fprintf(stderr, "%s\n", detail.c_str());
}

// "[task, scaled]"
std::string bracketed(const nlohmann::json& names) {
  std::vector<std::string> parts;
  for (const auto& n : names) parts.push_back(n.is_string() ? n.get<std::string>() : json_text(n));
  return "[" + join(parts, ", ") + "]";
}

// The lines `anvil vet` prints for one task.
std::string vet_lines(const std::string& label, const std::string& status, const VetResult& r) {
  std::string s = label + ": ";
  if (status == "error") return s + "error: " + replace_all(r.error, "\n", "\n  ") + "\n";
  s += status == "ok" ? "ok" : "flagged: " + join(r.flags(), ", ");
  s += r.cached ? " (cached)\n" : "\n";
  for (const char* kind : {"flags", "notes"}) {
    for (const auto& f : r.report.value(kind, nlohmann::json::array())) {
      s += std::string("  ") + (std::string(kind) == "notes" ? "note: " : "") + f.value("flag", std::string("?")) +
           " " + bracketed(f.value("distributions", nlohmann::json::array())) + ": " +
           f.value("detail", std::string()) + "\n";
    }
  }
  return s;
}

// The tasks of a command over many (vet, baselines): a GPU present for cuda, torch present,
// `target` listed; nullopt once stderr says why (`on_cpu`: what
// to do without a GPU).
std::optional<std::vector<std::string>> many_tasks(const char* command, const Environment& env,
                                                   const std::string& target, Device device,
                                                   const char* on_cpu) {
  if (device == Device::Cuda && env.gpus.empty()) {
    std::fprintf(stderr, "anvil %s: no GPU found: %s\n", command, on_cpu);
    return std::nullopt;
  }
  if (!env.torch.present) {
    std::fprintf(stderr, "anvil %s: %s\n", command, env.probe_error.c_str());
    return std::nullopt;
  }
  std::string err;
  auto specs = list_tasks(env, target, &err);
  if (!specs) std::fprintf(stderr, "anvil %s: %s\n", command, err.c_str());
  return specs;
}

}  // namespace

int cmd_init(const InitArgs& a) {
  Environment env;
  if (!environment(&env)) return 2;
  std::string err;
  auto task = load_task(env, a.task, &err);
  if (!task) {
    std::fprintf(stderr, "task_error: %s\n", err.c_str());
    return 1;
  }
  std::string signature;
  if (a.check) {
    nlohmann::json probe;
    try {
      probe = probe_task(env, *task, /*run_forward=*/false);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "anvil: %s\n", e.what());
      return 2;
    }
    if (!probe.value("ok", false)) {
      print_task_error(probe);
      return 1;
    }
    signature = probe["model"].value("init_signature", std::string());
  }
  std::error_code ec;
  if (fs::exists(a.dir, ec) && !fs::is_empty(a.dir, ec) && !a.force) {
    std::fprintf(stderr, "anvil: %s exists and is not empty (use --force to overwrite its fixed files)\n",
                 a.dir.c_str());
    return 2;
  }
  if (!create_workdir(env, *task, a.dir, signature, a.force, &err)) {
    std::fprintf(stderr, "anvil: %s\n", err.c_str());
    return 2;
  }
  auto starter = write_starter(env, a.dir, &err);
  if (!starter) {
    std::fprintf(stderr, "anvil: %s\n", err.c_str());
    return 2;
  }
  std::printf("initialized %s for task %s\n", a.dir.c_str(), task->name.c_str());
  if (!starter->empty()) {
    std::printf("  %s: a starter kernel (cuda_extension.scale_shift(x, a, b, config) = x * a + b) to replace\n",
                join(*starter, ", ").c_str());
  }
  std::printf("next: write ModelNew in %s/model_new.py, then `anvil build %s` and `anvil eval --candidate %s`\n",
              a.dir.c_str(), a.dir.c_str(), a.dir.c_str());
  return 0;
}

int cmd_build(const BuildArgs& a) {
  Environment env;
  if (!environment(&env)) return 2;
  // A single-file candidate (KernelBench's model_new.py): its load_inline modules, read without running
  // it, built into the cache its evaluation will find them in (what `anvil bench` does ahead).
  std::error_code ec;
  BuildReport r;
  if (!fs::is_regular_file(a.dir, ec)) {
    r = build_workdir(env, a.dir, a.opts);
  } else if (auto ahead = prebuild(env, a.dir, a.opts)) {
    r = *ahead;
  } else {
    r.error_kind = "workdir_error";
    r.error = a.dir + " is a file but not a single-file candidate (a .py file)";
  }
  if (a.json) {
    std::printf("%s\n", json_text(r.to_json(), 2).c_str());
  } else {
    std::fputs(r.summary().c_str(), r.ok ? stdout : stderr);
  }
  if (r.ok) return 0;
  return r.error_kind == "environment_error" ? 2 : 1;
}

int cmd_build_sources(const BuildSourcesArgs& a) {
  Environment env;
  if (!environment(&env)) {
    std::printf("%s\n", json_text(nlohmann::json{{"ok", false}, {"error_kind", "environment_error"},
                                                 {"error", "cannot load anvil's environment"}})
                             .c_str());
    return 2;
  }
  BuildReport r = build_sources(env, a.spec, a.opts);
  nlohmann::json j = r.to_json();
  j["cached"] = r.ok && r.compiled() == 0 && r.link_cached;
  std::printf("%s\n", json_text(j).c_str());
  if (r.ok) return 0;
  return r.error_kind == "environment_error" ? 2 : 1;
}

int cmd_task_show(const TaskShowArgs& a) {
  Environment env;
  if (!environment(&env)) return 2;
  std::string err;
  auto task = load_task(env, a.task, &err);
  if (!task) {
    if (a.json) {
      std::printf("%s\n", json_text(nlohmann::json{{"ok", false}, {"outcome", outcome_name(Outcome::kTaskError)},
                                                   {"file", a.task}, {"cause", err}},
                                    2)
                              .c_str());
    } else {
      std::fprintf(stderr, "task_error: %s\n", err.c_str());
    }
    return 1;
  }
  nlohmann::json probe;
  try {
    probe = probe_task(env, *task, a.forward);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "anvil: %s\n", e.what());
    return 2;
  }
  probe["name"] = task->name;
  probe["hash"] = task->hash;
  if (!task->meta.empty()) probe["meta"] = task->meta;
  if (a.json) {
    std::printf("%s\n", json_text(probe, 2).c_str());
  } else if (!probe.value("ok", false)) {
    print_task_error(probe);
  } else {
    std::printf("task %s (%s)\n", task->name.c_str(), task->hash.substr(0, 12).c_str());
    std::printf("  Model%s\n", probe["model"].value("init_signature", std::string("(...)")).c_str());
    for (const auto& p : probe["model"].value("parameters", nlohmann::json::array())) {
      std::printf("  parameter %s %s %s\n", p.value("name", std::string()).c_str(), json_text(p["shape"]).c_str(),
                  p.value("dtype", std::string()).c_str());
    }
    for (const auto& i : probe.value("inputs", nlohmann::json::array())) std::printf("  input %s\n", json_text(i).c_str());
    if (probe.contains("output")) std::printf("  output %s\n", json_text(probe["output"]).c_str());
  }
  return probe.value("ok", false) ? 0 : 1;
}

int cmd_task_profile(const TaskProfileArgs& a) {
  Environment env;
  if (!environment(&env)) return 2;
  std::string err;
  auto task = load_task(env, a.task, &err);
  if (!task) {
    std::fprintf(stderr, "task_error: %s\n", err.c_str());
    return 1;
  }
  ReferenceProfileOptions o = a.opts;
  o.device = device_or_default(a.device, env);
  ReferenceProfile p = profile_reference(env, *task, o);
  if (!p.ok) {
    std::fprintf(stderr, "%s: %s\n", p.task_error ? "task_error" : "anvil task profile", p.error.c_str());
    return p.task_error ? 1 : 2;
  }
  if (a.json) {
    p.report["task"] = {{"spec", task->spec}, {"name", task->name}, {"hash", task->hash}};
    p.report["cached"] = p.cached;
    std::printf("%s\n", json_text(p.report, 2).c_str());
  } else {
    std::printf("task %s (%s)%s\n%s", task->name.c_str(), task->hash.substr(0, 12).c_str(), p.cached ? ", cached" : "",
                reference_profile_text(p.report, a.top).c_str());
  }
  return 0;
}

int cmd_eval(const EvalArgs& a) {
  Environment env;
  if (!environment(&env)) return 2;
  EvalOptions opts = a.opts;
  if (opts.task.empty()) {
    std::string err;
    auto task = workdir_task(env, opts.candidate, &err);
    if (!task) {
      std::fprintf(stderr, "anvil eval: %s\n", err.c_str());
      return 2;
    }
    opts.task = *task;
  }
  EvalResult r = evaluate(env, opts);
  if (!r.evaluated) {
    if (a.json) {
      std::printf("%s\n", json_text(nlohmann::json{{"schema", "anvil.eval/1"},
                                                   {"evaluated", false},
                                                   {"error_kind", eval_error_name(r.error_kind)},
                                                   {"error", r.error}},
                                    2)
                               .c_str());
    }
    std::fprintf(stderr, "anvil eval: could not evaluate (%s error): %s\n", eval_error_name(r.error_kind), r.error.c_str());
    return 2;
  }
  std::string text = json_text(r.json, 2) + "\n";
  if (!a.out.empty()) {
    std::string err;
    if (!write_file_atomic(a.out, text, &err)) std::fprintf(stderr, "anvil eval: %s\n", err.c_str());
  }
  if (a.json) {
    std::fputs(text.c_str(), stdout);
  } else {
    std::fputs(r.summary().c_str(), stdout);
  }
  // 0: the candidate was judged, whatever its outcome; 1: the task is at fault (no verdict on the
  // candidate); 2 (above): anvil could not evaluate.
  return r.outcome == Outcome::kTaskError ? 1 : 0;
}

int cmd_vet(const VetArgs& a) {
  Environment env;
  if (!environment(&env)) return 2;
  VetOptions o;
  o.device = device_or_default(a.device, env);
  o.preset = a.preset;
  o.seed = a.seed;
  o.timeout = std::chrono::seconds(a.timeout_s);
  o.use_cache = a.use_cache;
  try {
    tolerance_preset(o.preset);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "anvil vet: %s\n", e.what());
    return 2;
  }
  auto specs = many_tasks("vet", env, a.target, o.device, "vet on the CPU with --device cpu, or on a GPU host");
  if (!specs) return 2;
  std::error_code ec;
  bool is_dir = fs::is_directory(a.target, ec);
  // Tasks are vetted `jobs` at a time; those whose report the others' memory decided, alone after
  // them (vet_many). Lines are printed in the tasks' order.
  auto t0 = std::chrono::steady_clock::now();
  auto since_start = [&](std::chrono::steady_clock::time_point t) {
    return std::round(std::chrono::duration<double>(t - t0).count() * 1000) / 1000;
  };
  size_t n = specs->size();
  unsigned jobs = static_cast<unsigned>(std::max(1, a.jobs > 0 ? a.jobs : o.device == Device::Cuda ? kVetJobsCuda : 1));
  std::vector<VetItem> items(n);
  for (size_t i = 0; i < n; ++i) items[i].spec = (*specs)[i];
  std::vector<bool> ready(n, false);
  std::mutex mu;
  std::condition_variable cv;
  auto finished = [&](size_t i) {
    std::lock_guard<std::mutex> lock(mu);
    ready[i] = true;
    cv.notify_all();
  };
  std::thread pool([&] { vet_many(env, items, o, jobs, finished); });
  std::map<std::string, int> counts = {{"ok", 0}, {"flagged", 0}, {"error", 0}};
  std::map<std::string, int> by_flag;
  int cached = 0;
  nlohmann::json tasks = nlohmann::json::array();
  for (size_t i = 0; i < n; ++i) {
    {
      std::unique_lock<std::mutex> lock(mu);
      cv.wait(lock, [&] { return ready[i]; });
    }
    const VetItem& item = items[i];
    const VetResult& r = item.result;
    const std::string& spec = item.spec;
    std::string label = is_dir                ? fs::path(spec).lexically_relative(a.target).string()
                        : item.task.has_value() ? item.task->name
                                                : task_name_of(spec);
    std::string status = r.status();
    ++counts[status];
    cached += r.cached ? 1 : 0;
    for (const auto& f : r.flags()) ++by_flag[f];
    nlohmann::json names = r.flags();
    tasks.push_back({{"spec", spec},
                     {"name", item.task ? item.task->name : task_name_of(spec)},
                     {"hash", item.task ? nlohmann::json(item.task->hash) : nlohmann::json(nullptr)},
                     {"status", status},
                     {"flags", names},
                     {"error", r.ok ? nlohmann::json(nullptr) : nlohmann::json(r.error)},
                     {"cached", r.cached},
                     {"seconds", r.seconds},
                     {"started_s", since_start(item.started)},
                     {"ended_s", since_start(item.ended)},
                     {"report", r.report}});
    if (!a.json) {
      std::fputs(vet_lines(label, status, r).c_str(), stdout);
      std::fflush(stdout);
    }
  }
  pool.join();
  int total = static_cast<int>(specs->size());
  if (a.json) {
    nlohmann::json doc = {{"target", a.target},
                          {"device", to_string(o.device)},
                          {"preset", o.preset},
                          {"seed", o.seed},
                          {"tasks", tasks},
                          {"summary",
                           {{"tasks", total},
                            {"ok", counts["ok"]},
                            {"flagged", counts["flagged"]},
                            {"errors", counts["error"]},
                            {"cached", cached},
                            {"flags", by_flag}}}};
    std::printf("%s\n", json_text(doc, 2).c_str());
  } else {
    std::string line = "vetted " + std::to_string(total) + (total == 1 ? " task" : " tasks") + " on " + to_string(o.device) +
                       " (preset " + o.preset + "): " + std::to_string(counts["ok"]) + " ok, " +
                       std::to_string(counts["flagged"]) + " flagged, " + std::to_string(counts["error"]) +
                       (counts["error"] == 1 ? " error" : " errors");
    if (cached) line += "; " + std::to_string(cached) + " from the cache";
    std::string flags;
    for (const auto& [flag, n] : by_flag) flags += (flags.empty() ? "" : ", ") + flag + " " + std::to_string(n);
    if (!flags.empty()) line += "; " + flags;
    std::printf("%s\n", line.c_str());
  }
  if (counts["error"] > 0) return 2;
  return counts["flagged"] > 0 ? 1 : 0;
}

namespace {

// `o` with `spec` as its task.
EvalOptions with_task(const EvalOptions& o, const std::string& spec) {
  EvalOptions t = o;
  t.task = spec;
  return t;
}

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

// `anvil baselines`' phase one: the compile caches of the tasks still to measure, warmed `jobs` at a
// time (nothing is timed, so they may share the GPU); what the document says of it (`warm`).
// *peaks: each warmed task's measured peak on the GPU (measure_baselines' warm_peak_bytes).
nlohmann::json warm_up(const Environment& env, const EvalOptions& o, const std::vector<std::string>& specs, int jobs,
                       std::chrono::steady_clock::time_point t0, bool quiet, std::map<std::string, uint64_t>* peaks) {
  // One that ran out of the GPU's memory beside the others is tried again alone afterwards; one that
  // still fails is compiled cold when measured.
  nlohmann::json warm = {{"jobs", jobs}, {"tasks", 0}, {"failed", nlohmann::json::array()}, {"again", 0},
                         {"seconds", 0.0}};
  if (jobs > 1 && o.compile_mode != "none") {
    auto tw = std::chrono::steady_clock::now();
    std::vector<std::string> todo;
    for (const auto& spec : specs) {
      if (!o.use_baseline_cache || !baselines_cached(env, with_task(o, spec))) todo.push_back(spec);
    }
    // The largest sources first (a model's compilation grows with it: a level-3 network's takes
    // minutes, an operator's seconds), so that the longest start before the pool is busy with the
    // short ones, not after them.
    std::vector<uintmax_t> size(todo.size(), 0);
    for (size_t i = 0; i < todo.size(); ++i) {
      std::error_code ec;
      uintmax_t b = fs::file_size(todo[i], ec);  // a dataset's row: 0 (its order kept)
      size[i] = ec ? 0 : b;
    }
    std::vector<size_t> order(todo.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::stable_sort(order.begin(), order.end(), [&](size_t x, size_t y) { return size[x] > size[y]; });
    std::vector<std::string> sorted;
    for (size_t i : order) sorted.push_back(todo[i]);
    todo = std::move(sorted);
    std::vector<WarmResult> warmed(todo.size());
    std::vector<std::pair<double, double>> window(todo.size());  // (started_s, ended_s) of its last try
    auto warm_one = [&](size_t i) {
      window[i].first = seconds_since(t0);
      warmed[i] = warm_compile_caches(env, with_task(o, todo[i]));
      window[i].second = seconds_since(t0);
    };
    std::vector<std::function<void()>> work;
    for (size_t i = 0; i < todo.size(); ++i) work.push_back([&, i] { warm_one(i); });
    run_parallel(work, static_cast<unsigned>(std::min<size_t>(jobs, std::max<size_t>(todo.size(), 1))));
    nlohmann::json windows = nlohmann::json::array();
    for (size_t i = 0; i < todo.size(); ++i) {
      if (warmed[i].memory_limited) {
        warm_one(i);
        warm["again"] = warm["again"].get<int>() + 1;
      }
      if (!warmed[i].error.empty()) warm["failed"].push_back({{"spec", todo[i]}, {"why", warmed[i].error}});
      if (warmed[i].peak_bytes > 0) (*peaks)[todo[i]] = warmed[i].peak_bytes;
      windows.push_back({{"spec", todo[i]}, {"started_s", window[i].first}, {"ended_s", window[i].second}});
    }
    warm["windows"] = windows;
    warm["tasks"] = todo.size();
    warm["seconds"] = seconds_since(tw);
    if (!quiet && !todo.empty()) {
      std::printf("warmed torch.compile's caches of %zu task(s), %d at a time, in %.1f s (%zu failed: they compile "
                  "when measured)\n", todo.size(), jobs, warm["seconds"].get<double>(), warm["failed"].size());
      std::fflush(stdout);
    }
  }
  return warm;
}

// One line per task of `anvil baselines` (without --json): its status, figures and time, then its message.
void print_baselines_row(const std::string& label, const BaselinesResult& r) {
  auto ms = [&](const char* key) {
    char buf[48];
    if (!r.json.contains(key) || !r.json[key].is_number()) return std::string("-");
    std::snprintf(buf, sizeof buf, "%.4g ms", r.json[key].get<double>());
    return std::string(buf);
  };
  std::string line = label + "  " + baselines_status_name(r.status);
  if (r.status == BaselinesResult::Status::kCached || r.status == BaselinesResult::Status::kMeasured ||
      r.status == BaselinesResult::Status::kUnclean) {
    line += "  eager " + ms("eager_ms") + ", compile " + ms("compile_ms");
  }
  char took[32];
  std::snprintf(took, sizeof took, "  (%.1f s)", r.json.contains("seconds") ? r.json["seconds"].value("total", 0.0) : 0.0);
  line += took;
  std::printf("%s\n", line.c_str());
  for (const auto& m : split_lines(r.message)) std::printf("    %s\n", m.c_str());
  std::fflush(stdout);
}

// A measurement tried again alone keeps its first try: status, message, window, figures and phases.
nlohmann::json first_try_of(const BaselinesResult& r) {
  const nlohmann::json& was = r.json;
  nlohmann::json first = {{"status", baselines_status_name(r.status)},
                          {"message", r.message},
                          {"started_s", was.value("started_s", 0.0)},
                          {"ended_s", was.value("ended_s", 0.0)}};
  for (const char* key : {"eager_ms", "compile_ms", "eager", "compile", "seconds"}) {
    if (was.contains(key)) first[key] = was[key];  // its figures and phases, whatever the retry gives
  }
  return first;
}

nlohmann::json baselines_summary(std::map<std::string, int>& counts, size_t n, double seconds) {
  return {{"tasks", n},
          {"measured", counts["measured"]},
          {"cached", counts["cached"]},
          {"not_kept", counts["not_kept"]},
          {"task_errors", counts["task_error"]},
          {"errors", counts["error"]},
          {"seconds", seconds}};
}

}  // namespace

int cmd_baselines(const BaselinesArgs& a) {
  Environment env;
  if (!environment(&env)) return 2;
  EvalOptions o = a.opts;
  o.measure_time = true;
  o.device = device_or_default(o.device, env);
  auto specs = many_tasks("baselines", env, a.target, *o.device,
                          "measure CPU baselines with --device cpu, or run on a GPU host");
  if (!specs) return 2;
  std::error_code ec;
  bool is_dir = fs::is_directory(a.target, ec);
  auto label = [&](const std::string& spec) {
    return is_dir ? fs::path(spec).lexically_relative(a.target).string() : spec;
  };
  auto t0 = std::chrono::steady_clock::now();
  auto seconds = seconds_since;
  auto task_options = [&](const std::string& spec) { return with_task(o, spec); };
  size_t n = specs->size();
  // Phase one: the compile caches of the tasks still to measure, warmed `jobs` at a time.
  int jobs = a.jobs > 0 ? a.jobs : o.device == Device::Cuda ? kWarmJobsCuda : 1;
  std::map<std::string, uint64_t> peaks;
  nlohmann::json warm = warm_up(env, o, *specs, jobs, t0, a.json, &peaks);
  auto peak_of = [&](const std::string& spec) {
    auto it = peaks.find(spec);
    return it == peaks.end() ? uint64_t{0} : it->second;
  };
  // Phase two: `overlap` measurements at once, one of them timing on the GPU at a time (the GPU
  // lock), the others preparing (together: a wave on the GPU, the lock shared; alone: their host
  // work only); on the CPU one at a time (the CPU is what is measured). Retries: below.
  bool together = o.device == Device::Cuda && o.defenses && a.prepare == Prepare::kTogether;
  int overlap = o.device != Device::Cuda ? 1 : a.overlap > 0 ? a.overlap : together ? kOverlapTogetherCuda : kOverlapCuda;
  Prepare prepare = together ? Prepare::kTogether : Prepare::kAlone;
  // The GPU's lock, exclusive, on a GPU whatever the overlap: no vetting or warm-up (shared) of
  // another command runs while one of these times.
  std::string lock = o.device == Device::Cuda ? gpu_lock_path(env, o.gpu).string() : std::string();
  std::vector<BaselinesResult> results(n);
  std::vector<bool> ready(n, false);
  std::mutex mu;
  std::condition_variable cv;
  std::vector<std::function<void()>> work;
  for (size_t i = 0; i < n; ++i) {
    work.push_back([&, i] {
      double started = seconds(t0);
      BaselinesResult r = measure_baselines(env, task_options((*specs)[i]), lock, prepare, peak_of((*specs)[i]));
      r.json["started_s"] = started;
      r.json["ended_s"] = seconds(t0);
      std::lock_guard<std::mutex> g(mu);
      results[i] = std::move(r);
      ready[i] = true;
      cv.notify_all();
    });
  }
  std::thread pool([&] { run_parallel(work, static_cast<unsigned>(std::min<size_t>(overlap, std::max<size_t>(n, 1)))); });
  std::map<std::string, int> counts;
  nlohmann::json tasks = nlohmann::json::array();
  int again = 0;
  std::vector<nlohmann::json> rows(n);
  auto report = [&](size_t i) {
    const std::string& spec = (*specs)[i];
    BaselinesResult& r = results[i];
    const char* status = baselines_status_name(r.status);
    ++counts[status];
    r.json["spec"] = spec;
    rows[i] = r.json;
    if (!a.json) print_baselines_row(label(spec), r);
  };
  // Measured once more, alone, once all the others are done (nothing else on the GPU, parked or
  // not): a task not kept beside others, or one that failed in a wave (its memory beside the
  // others' may have been what ran out; a task's own error fails again).
  std::vector<size_t> later;
  for (size_t i = 0; i < n; ++i) {
    {
      std::unique_lock<std::mutex> g(mu);
      cv.wait(g, [&] { return ready[i]; });
    }
    const BaselinesResult& r = results[i];
    bool failed_in_wave = together && (r.status == BaselinesResult::Status::kError ||
                                       r.status == BaselinesResult::Status::kTaskError);
    if ((r.status == BaselinesResult::Status::kUnclean && overlap > 1) || failed_in_wave) {
      later.push_back(i);
    } else {
      report(i);
    }
  }
  pool.join();
  for (size_t i : later) {
    nlohmann::json first = first_try_of(results[i]);
    double started = seconds(t0);
    results[i] = measure_baselines(env, task_options((*specs)[i]), lock, Prepare::kAlone);
    results[i].json["started_s"] = started;
    results[i].json["ended_s"] = seconds(t0);
    results[i].json["first_try"] = first;
    ++again;
    report(i);
  }
  for (auto& row : rows) tasks.push_back(std::move(row));
  int failed = counts["task_error"] + counts["error"];
  double total = seconds(t0);
  if (a.json) {
    nlohmann::json doc = {{"target", a.target},
                          {"device", to_string(*o.device)},
                          {"compile_mode", o.compile_mode},
                          {"warm", warm},
                          {"overlap", overlap},
                          {"prepare", together ? "together" : "alone"},
                          {"origin_monotonic", std::chrono::duration<double>(t0.time_since_epoch()).count()},
                          {"measured_again", again},
                          {"tasks", tasks},
                          {"summary", baselines_summary(counts, n, total)}};
    std::printf("%s\n", json_text(doc, 2).c_str());
  } else {
    std::printf("baselines of %zu task(s) on %s: %d measured, %d cached, %d not kept, %d failed (%.1f s)\n", n,
                to_string(*o.device), counts["measured"], counts["cached"], counts["not_kept"], failed, total);
  }
  if (counts["error"] > 0 && counts["error"] == static_cast<int>(n)) return 2;
  return failed + counts["not_kept"] > 0 ? 1 : 0;
}

int cmd_rft(const RftArgs& a) {
  RftResult r = run_rft(a.opts);
  if (r.status != 0) {
    std::fprintf(stderr, "anvil rft: %s\n", r.error.c_str());
    return r.status;
  }
  for (const auto& bad : r.summary["unreadable_files"]) {
    std::fprintf(stderr, "anvil rft: skipped %s: %s\n", bad["source"].get<std::string>().c_str(),
                 bad["error"].get<std::string>().c_str());
  }
  if (a.json) {
    std::printf("%s\n", json_text(r.summary).c_str());
  } else {
    std::fputs(rft_table(r.summary).c_str(), stdout);
  }
  return 0;
}

int cmd_synth(const SynthArgs& a) {
  Environment env;
  if (!environment(&env)) return 2;
  SynthResult r = run_synth(env, a.opts);
  if (r.status == 2) {
    std::fprintf(stderr, "anvil synth: %s\n", r.error.c_str());
    return 2;
  }
  if (a.json) {
    std::printf("%s\n", json_text(r.summary).c_str());
  } else {
    std::fputs(synth_table(r.summary).c_str(), stdout);
    std::printf("wrote %s (and its .summary.json, .html; the journal %s)\n", a.opts.out.string().c_str(),
                r.summary["run"].value("journal", "").c_str());
  }
  if (r.status == 1) std::fprintf(stderr, "anvil synth: %s\n", r.error.c_str());
  return r.status;
}

int cmd_env(bool json, bool refresh) {
  Environment env;
  try {
    EnvOptions o;
    o.refresh = refresh;
    env = load_environment(o);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "anvil: %s\n", e.what());
    return 2;
  }
  nlohmann::json j = env.to_json();
  if (json) {
    std::printf("%s\n", json_text(j, 2).c_str());
    return 0;
  }
  auto line = [](const char* k, const std::string& v) { std::printf("%-8s %s\n", k, v.empty() ? "(not found)" : v.c_str()); };
  line("home", env.home.string());
  line("cache", env.cache.string());
  line("nvcc", env.nvcc.found() ? env.nvcc.path.string() + " (" + env.nvcc.version + ")" : "");
  line("c++", env.cxx.found() ? env.cxx.path.string() + " (" + env.cxx.version + ")" : "");
  line("python", env.python.string() + (env.python_version.empty() ? "" : " (" + env.python_version + ")"));
  line("torch", env.torch.present ? env.torch.version + (env.torch.cuda.empty() ? " (CPU)" : " (CUDA " + env.torch.cuda + ")") : "");
  line("cudnn", env.cudnn.found() ? env.cudnn.include_dir.string() : "");
  std::string gpus;
  for (const auto& g : env.gpus) gpus += (gpus.empty() ? "" : ", ") + g.name + " (sm " + g.capability + ")";
  line("gpus", gpus.empty() ? "none" : gpus);
  if (!env.probe_error.empty()) line("problem", env.probe_error);
  return env.probe_error.empty() ? 0 : 2;
}

int cmd_cache(const std::string& action) {
  fs::path cache = default_cache_dir();
  if (action == "clear") {
    std::string kept;
    for (const auto& a : cache_areas()) {
      if (a.cleared) {
        remove_tree(cache_dir(cache, a.area));
      } else {
        kept += std::string(kept.empty() ? "" : ", ") + a.dir + "/ (" + a.holds + ")";
      }
    }
    std::printf("cleared %s; kept %s\n", cache.c_str(), kept.c_str());
    return 0;
  }
  // stats: every area, what it holds and its size
  std::error_code ec;
  for (const auto& a : cache_areas()) {
    size_t files = 0, bytes = 0;
    fs::path dir = cache_dir(cache, a.area);
    for (const auto& rel : list_files(dir)) {
      ++files;
      bytes += static_cast<size_t>(fs::file_size(dir / rel, ec));
    }
    std::printf("%-13s %6zu files %10.1f MB  %s%s\n", a.dir, files, static_cast<double>(bytes) / 1e6, a.holds,
                a.cleared ? "" : " (kept by clear)");
  }
  std::printf("(cache: %s)\n", cache.c_str());
  return 0;
}

namespace {

// runs/<kind>-<UTC time>: where a run goes without --out.
std::string default_run_dir(const char* kind) { return std::string("runs/") + kind + utc_now("-%Y%m%d-%H%M%S"); }

// The model client of `anvil agent` and `anvil bench --agent`: the endpoint
// (or the local server, started here), the API key, and a check that the
// server answers and serves the model, before any episode starts.
struct ModelSetup {
  LocalServer local;
  std::unique_ptr<HttpClient> http;
  std::unique_ptr<ModelClient> client;
};

bool setup_model(const char* cmd, const AgentArgs& a, RunOptions* run, ModelSetup* m) {
  std::string err;
  if (a.endpoint.empty()) {
    std::fprintf(stderr, "anvil %s: --endpoint URL is required (an OpenAI-compatible server, e.g. "
                         "http://127.0.0.1:8000/v1 for vLLM, or `local` for the bundled small model)\n", cmd);
    return false;
  }
  Endpoint ep;
  ep.model = a.model;
  if (a.endpoint == "local") {
    LocalServerOptions lo;
    lo.model_path = a.local_model;
    lo.context = a.local_context;
    std::fprintf(stderr, "starting the local model server (anvil.local_model on llama.cpp, %s)...\n",
                 a.local_model.empty() ? "Gemma 3 270M" : a.local_model.c_str());
    if (!m->local.start(lo, &err)) {
      std::fprintf(stderr, "anvil %s: --endpoint local: %s\n", cmd, err.c_str());
      return false;
    }
    ep.base_url = m->local.base_url();
    run->episode.token_level = a.tokens >= 0;  // its server returns token ids and renders its template
    // The server's context is the episode's: a turn it cut for want of room is not a turn too long.
    run->episode.max_context = std::min<long>(run->episode.max_context, a.local_context);
    if (ep.model.empty()) ep.model = m->local.model();
    std::fprintf(stderr, "local model server at %s serving %s\n", ep.base_url.c_str(), ep.model.c_str());
  } else {
    run->episode.token_level = a.tokens > 0;
    ep.base_url = a.endpoint;
    if (ep.model.empty()) {
      std::fprintf(stderr, "anvil %s: --model NAME is required (the name the server at %s serves)\n", cmd,
                   a.endpoint.c_str());
      return false;
    }
  }
  std::vector<std::string> key_vars = a.api_key_env.empty() ? std::vector<std::string>{"ANVIL_API_KEY", "OPENAI_API_KEY"}
                                                            : std::vector<std::string>{a.api_key_env};
  for (const auto& v : key_vars) {
    const char* k = std::getenv(v.c_str());
    if (k && *k) {
      ep.api_key = k;
      break;
    }
  }
  if (!a.api_key_env.empty() && ep.api_key.empty()) {
    std::fprintf(stderr, "anvil %s: --api-key-env %s: the variable is not set\n", cmd, a.api_key_env.c_str());
    return false;
  }
  m->http = make_http_client();
  RetryPolicy retry;
  retry.max_attempts = std::max(1, a.retries);
  m->client = std::make_unique<ModelClient>(ep, *m->http, retry);
  std::string problem = m->client->check();
  if (!problem.empty()) {
    std::fprintf(stderr, "anvil %s: %s\n", cmd, problem.c_str());
    return false;
  }
  return true;
}

}  // namespace

int cmd_agent(const AgentArgs& a) {
  Environment env;
  if (!environment(&env)) return 2;
  if (a.task.empty() == a.tasks.empty()) {
    std::fprintf(stderr, "anvil agent: give one of --task TASK or --tasks DIR|DATASET\n");
    return 2;
  }
  std::string err;
  RunOptions run = a.run;
  if (!a.task.empty()) {
    run.tasks = {a.task};
  } else {
    auto specs = list_tasks(env, a.tasks, &err);
    if (!specs) {
      std::fprintf(stderr, "anvil agent: %s\n", err.c_str());
      return 2;
    }
    run.tasks = *specs;
  }
  // Every task must load before any episode starts.
  for (const auto& t : run.tasks) {
    if (!load_task(env, t, &err)) {
      std::fprintf(stderr, "anvil agent: task_error: %s\n", err.c_str());
      return 2;
    }
  }

  ModelSetup m;
  if (!setup_model("agent", a, &run, &m)) return 2;
  ModelClient& model = *m.client;
  const Endpoint& ep = model.endpoint();

  run.samples = std::max(1, a.samples);
  run.concurrency = std::max(1, a.concurrency);
  run.gpus = a.gpus;
  run.build_slots = a.build_slots;
  run.resume = a.resume;
  if (!a.out.empty()) {
    run.out = a.out;
  } else {
    if (a.resume) {
      std::fprintf(stderr, "anvil agent: --resume needs --out DIR (the run directory to continue)\n");
      return 2;
    }
    run.out = default_run_dir("agent");
  }
  std::error_code ec;
  if (a.resume && !fs::exists(run.out, ec)) {
    std::fprintf(stderr, "anvil agent: --resume: %s does not exist\n", run.out.c_str());
    return 2;
  }
  std::fprintf(stderr, "anvil agent: %zu task(s) x %d sample(s), concurrency %d, model %s at %s -> %s\n",
               run.tasks.size(), run.samples, run.concurrency, ep.model.c_str(), ep.base_url.c_str(),
               run.out.c_str());
  RunSummary s = run_episodes(env, model, run);
  if (a.json) {
    std::printf("%s\n", json_text(s.json, 2).c_str());
  } else {
    std::printf("%s", s.text().c_str());
    std::printf("trajectories under %s (summary.json)\n", run.out.c_str());
  }
  return s.interrupted + s.failed_to_start > 0 ? 1 : 0;
}

namespace {

// --price-input and --price-output checked: both or neither (a cost of prompt tokens alone would
// pass for the whole cost), each a non-negative number. False with the error said on stderr.
bool read_prices(const char* cmd, const PriceArgs& a, std::optional<Pricing>* pricing) {
  if (!a.input && !a.output) return true;
  if (!a.input || !a.output) {
    std::fprintf(stderr, "anvil %s: %s given without %s: give both (USD per million prompt and completion tokens), "
                         "or neither for no cost\n", cmd, a.input ? "--price-input" : "--price-output",
                 a.input ? "--price-output" : "--price-input");
    return false;
  }
  std::string err;
  auto in = parse_price("--price-input", *a.input, &err);
  auto out = in ? parse_price("--price-output", *a.output, &err) : std::nullopt;
  if (!in || !out) {
    std::fprintf(stderr, "anvil %s: %s\n", cmd, err.c_str());
    return false;
  }
  *pricing = Pricing{*in, *out};
  return true;
}

int print_results(const nlohmann::json& r, bool json) {
  if (json) std::printf("%s\n", json_text(r, 2).c_str());
  else std::printf("%s", bench_summary_text(r).c_str());
  return r["problems"]["not_evaluated"].empty() ? 0 : 1;
}

std::optional<nlohmann::json> load_results(const std::string& path, std::string* err) {
  fs::path p = path;
  std::error_code ec;
  if (fs::is_directory(p, ec)) {
    if (!fs::exists(p / "results.json", ec) && fs::exists(p / "bench.json", ec)) return bench_report(p, err);
    p /= "results.json";
  }
  auto text = read_file(p);
  if (!text) {
    *err = p.string() + ": cannot be read (a benchmark run directory or its results.json)";
    return std::nullopt;
  }
  try {
    auto j = nlohmann::json::parse(*text);
    if (j.value("schema", std::string()) != "anvil.bench/1") {
      *err = p.string() + ": not a benchmark result (schema anvil.bench/1)";
      return std::nullopt;
    }
    return j;
  } catch (const std::exception& e) {
    *err = p.string() + ": malformed JSON: " + e.what();
    return std::nullopt;
  }
}

}  // namespace

int cmd_bench(const BenchArgs& a) {
  Environment env;
  if (!environment(&env)) return 2;
  BenchOptions o = a.opts;
  if (o.tasks.empty()) {
    std::fprintf(stderr, "anvil bench: --tasks DIR|DATASET is required\n");
    return 2;
  }
  try {
    tolerance_preset(effective_preset(o.eval.preset, protocol_named(o.eval.protocol)));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "anvil bench: %s\n", e.what());
    return 2;
  }
  if (a.agent == !o.solutions.empty()) {
    std::fprintf(stderr, "anvil bench: give one of --solutions DIR or --agent (with --endpoint and --model)\n");
    return 2;
  }
  if (!read_prices("bench", a.prices, &o.pricing)) return 2;
  if (o.pricing && !a.agent) {
    std::fprintf(stderr, "anvil bench: --price-input/--price-output price the agent's tokens: give them with --agent\n");
    return 2;
  }
  if (o.out.empty()) {
    if (o.resume) {
      std::fprintf(stderr, "anvil bench: --resume needs --out DIR (the run directory to continue)\n");
      return 2;
    }
    o.out = default_run_dir("bench");
  }
  ModelSetup m;
  if (a.agent) {
    o.agent = a.agent_args.run;
    o.agent.concurrency = std::max(1, a.agent_args.concurrency);
    o.agent.build_slots = a.agent_args.build_slots;
    if (!setup_model("bench", a.agent_args, &o.agent, &m)) return 2;
    o.model = m.client.get();
  }
  std::fprintf(stderr, "anvil bench: %s against %s -> %s\n", o.tasks.c_str(),
               a.agent ? ("the agent (" + m.client->endpoint().model + ")").c_str() : o.solutions.c_str(),
               o.out.c_str());
  std::string err;
  auto r = run_bench(env, o, &err);
  if (!r) {
    std::fprintf(stderr, "anvil bench: %s\n", err.c_str());
    return 2;
  }
  return print_results(*r, a.json);
}

int cmd_bench_report(const std::string& out, bool json, const PriceArgs& prices) {
  std::optional<Pricing> pricing;
  if (!read_prices("bench report", prices, &pricing)) return 2;
  std::string err;
  auto r = bench_report(out, &err, pricing);
  if (!r) {
    std::fprintf(stderr, "anvil bench report: %s\n", err.c_str());
    return 2;
  }
  return print_results(*r, json);
}

int cmd_bench_compare(const std::string& a, const std::string& b, const std::string& out, bool json) {
  std::string err;
  auto ra = load_results(a, &err);
  auto rb = ra ? load_results(b, &err) : std::nullopt;
  if (!ra || !rb) {
    std::fprintf(stderr, "anvil bench compare: %s\n", err.c_str());
    return 2;
  }
  auto c = compare_results(*ra, *rb);
  std::string md = render_comparison(c);
  if (!out.empty() && !write_file_atomic(out, md, &err)) {
    std::fprintf(stderr, "anvil bench compare: %s\n", err.c_str());
    return 2;
  }
  std::printf("%s", json ? (json_text(c, 2) + "\n").c_str() : md.c_str());
  return 0;
}

// `anvil serve`'s options checked against this host and made into the service's (the error said on
// stderr, nullopt, when they cannot be).
std::optional<ServeOptions> serve_options(const Environment& env, const ServeArgs& a) {
  ServeOptions so;
  so.defaults = a.opts;
  if (!so.defaults.device) {  // --ray: the cluster's GPUs
    so.defaults.device = env.gpus.empty() && a.ray.address.empty() ? Device::Cpu : Device::Cuda;
  }
  const Device device = *so.defaults.device;
  const bool ray = !a.ray.address.empty();
  if (!ray && (a.ray.workers || !a.ray.python.empty() || !a.ray.anvil.empty())) {
    std::fprintf(stderr, "anvil serve: --ray-workers, --ray-python and --ray-anvil go with --ray ADDRESS\n");
    return std::nullopt;
  }
  if (device == Device::Cuda && ray && env.gpus.empty()) {
    so.gpus = {0};  // none here: the workers judge; sessions' GPU tools answer that this host has none
  } else if (device == Device::Cuda) {
    if (env.gpus.empty()) {
      std::fprintf(stderr, "anvil serve: no GPU found: serve CPU variants with --device cpu, or run on a GPU host\n");
      return std::nullopt;
    }
    so.gpus = a.gpus;
    if (so.gpus.empty()) {
      for (size_t i = 0; i < env.gpus.size(); ++i) so.gpus.push_back(static_cast<int>(i));
    }
    for (int g : so.gpus) {
      if (g < 0 || g >= static_cast<int>(env.gpus.size())) {
        std::fprintf(stderr, "anvil serve: --gpus %d: this host has %zu GPU(s)\n", g, env.gpus.size());
        return std::nullopt;
      }
    }
  }
  if (!env.torch.present) {
    std::fprintf(stderr, "anvil serve: %s\n", env.probe_error.c_str());
    return std::nullopt;
  }
  so.state_dir = a.state.empty() ? cache_dir(env, CacheArea::kServe) : fs::absolute(a.state);
  if (ray) {
    so.ray = a.ray;
    so.ray->device = device;
    so.ray->log = so.state_dir / "ray" / "bridge.log";
    // An evaluation's limit, the one ahead of it on the worker (a session's tool call), a build and
    // the worker's restart.
    so.ray->call_timeout = 2 * so.defaults.timeout + std::chrono::seconds(600);
    // A worker takes what an evaluation here would copy (the candidate's limits), and keeps a done
    // evaluation's row an hour (this server keeps the result).
    std::vector<std::string> worker = {"--max-files", std::to_string(kMaxCandidateFiles), "--max-file-mb",
                                       std::to_string(kMaxCandidateFileBytes >> 20), "--keep-results-hours", "1"};
    so.ray->serve_args.insert(so.ray->serve_args.end(), worker.begin(), worker.end());
  }
  if (ray && a.overlap > 0) {
    std::fprintf(stderr, "anvil serve: --overlap is for this host's GPUs; with --ray each worker judges its lane's evaluations\n");
    return std::nullopt;
  }
  so.overlap = device == Device::Cuda && !ray ? (a.overlap > 0 ? a.overlap : kOverlapTogetherCuda) : 1;
  so.max_queue = a.max_queue;
  so.builders = a.builders;
  so.keep_results = std::chrono::hours(a.keep_results_h);
  so.limits.max_files = a.max_files;
  so.limits.max_file_bytes = a.max_file_mb << 20;
  so.sessions.ttl = std::chrono::seconds(a.session_ttl_s);
  so.sessions.max_ttl = std::max(so.sessions.max_ttl, so.sessions.ttl);
  so.sessions.max_sessions = a.max_sessions;
  so.sessions.bash_gpu = a.bash_gpu;
  return so;
}

int cmd_serve(const ServeArgs& a) {
  Environment env;
  if (!environment(&env)) return 2;
  auto options = serve_options(env, a);
  if (!options) return 2;
  const ServeOptions& so = *options;
  const Device device = *so.defaults.device;
  const bool ray = so.ray.has_value();
  HttpServerOptions ho;
  ho.host = a.host;
  ho.port = static_cast<uint16_t>(a.port);
  ho.max_body = a.max_body_mb << 20;
  const char* token = std::getenv(a.token_env.c_str());
  ho.token = token ? token : "";
  bool loopback = a.host == "127.0.0.1" || a.host == "::1" || starts_with(a.host, "127.");
  if (!loopback && ho.token.empty()) {
    std::fprintf(stderr, "anvil serve: listening on %s (not loopback) needs a token: set %s\n", a.host.c_str(),
                 a.token_env.c_str());
    return 2;
  }
  if (ho.token.empty()) ho.only_user = geteuid();  // loopback, no token: no other local user's code
  // SIGINT and SIGTERM reach a waiter through a pipe (nothing blocked: the processes anvil starts
  // inherit no mask).
  static int stop_pipe[2] = {-1, -1};
  if (pipe2(stop_pipe, O_CLOEXEC) != 0) {
    std::fprintf(stderr, "anvil serve: cannot make a pipe: %s\n", std::strerror(errno));
    return 2;
  }
  struct sigaction sa {};
  sa.sa_handler = [](int sig) {
    char c = static_cast<char>(sig);
    (void)!::write(stop_pipe[1], &c, 1);
  };
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  // Both live to the process's end (never destroyed: the signal waiter may still use them).
  Service& service = *new Service(env, so);
  std::string err;
  if (!service.start(&err)) {
    std::fprintf(stderr, "anvil serve: %s\n", err.c_str());
    return 2;
  }
  HttpServer& server = *new HttpServer(service, ho);
  if (!server.listen(&err)) {
    std::fprintf(stderr, "anvil serve: %s\n", err.c_str());
    service.stop();
    return 2;
  }
  std::string overlap = !ray && so.overlap > 1 ? ", " + std::to_string(so.overlap) + " evaluations at once on each" : "";
  std::printf("anvil serve: http://%s:%u (device %s, %zu lane(s)%s%s; state %s)\n", a.host.c_str(), server.port(),
              to_string(device), service.lanes(), overlap.c_str(), ray ? (" on the Ray cluster at " + a.ray.address).c_str() : "",
              so.state_dir.c_str());
  std::fflush(stdout);
  auto next_signal = [] {
    char c = 0;
    while (::read(stop_pipe[0], &c, 1) < 0 && errno == EINTR) {
    }
  };
  for (int sig : {SIGINT, SIGTERM}) sigaction(sig, &sa, nullptr);
  std::thread waiter([&service, &server, next_signal] {
    next_signal();
    std::fprintf(stderr, "anvil serve: stopping (the evaluations under way finish; a second signal ends now)\n");
    service.drain();
    server.stop();
    next_signal();
    int n = service.release_running();  // not the candidates' doing: their attempts are given back
    kill_child_groups();
    std::fprintf(stderr, "anvil serve: stopped now; %d evaluation(s) under way run again at the next start\n", n);
    _exit(1);
  });
  waiter.detach();  // ends with the process
  server.run();
  service.stop();
  return 0;
}

}  // namespace anvil
