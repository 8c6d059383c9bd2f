// bench.cpp: the benchmark runner: suite, records, scheduling, fingerprint,
// results and reports.
//
// A run directory is the unit of work. bench.json holds the settings and the
// suite as discovered; each task's outcome is one record file, written
// atomically when its evaluation ends, so a killed run loses at most the
// evaluations in flight. results.json and the reports are always recomputed
// from the records, never accumulated, so `anvil bench report` and a resumed
// run give the same numbers as an uninterrupted one.
#include "anvil/bench/bench.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <functional>
#include <cmath>
#include <map>
#include <mutex>
#include <thread>

#include "anvil/agent/model_client.h"
#include "anvil/bench/metrics.h"
#include "anvil/bench/report.h"
#include "anvil/bench/suite.h"
#include "anvil/env/task.h"
#include "anvil/util/fs.h"
#include "anvil/util/json_text.h"
#include "anvil/util/strings.h"
#include "anvil/util/subprocess.h"
#include "anvil/util/thread_pool.h"
#include "anvil_git_rev.h"

namespace anvil {
namespace fs = std::filesystem;
using Json = nlohmann::json;
using Clock = std::chrono::steady_clock;

namespace {

constexpr const char* kRunSchema = "anvil.bench-run/1";
constexpr const char* kTaskSchema = "anvil.bench-task/1";

std::string safe_name(const std::string& s) {
  std::string o;
  for (char c : s) o += (std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-' || c == '_') ? c : '_';
  return o.empty() || o[0] == '.' ? "_" + o : o;
}

fs::path record_rel(const SuiteTask& t) { return fs::path("tasks") / safe_name(t.level) / (safe_name(t.stem) + ".json"); }

Json task_json(const SuiteTask& t) {
  return {{"level", t.level},     {"id", t.id},     {"name", t.name},
          {"stem", t.stem},       {"spec", t.spec}, {"solution", t.solution},
          {"missing_reason", t.missing_reason}, {"family", t.family}};
}

// The kernel family of every task (docs/bench.md, "Kernel families"), from the operations its
// code names: one `python -m anvil.family` over the suite. A task it cannot read is "unknown"; so
// is every task when the helper itself fails, which is said on stderr: the benchmark goes on.
void classify_families(const Environment& env, std::vector<SuiteTask>& tasks) {
  std::vector<std::string> args = {"-m", "anvil.family"};
  for (auto& t : tasks) {
    t.family = "unknown";
    args.push_back(t.spec);
  }
  if (tasks.empty()) return;
  SubprocessResult r = run_python(env, args);
  Json j = Json::parse(r.output, nullptr, false);
  if (!r.ok() || !j.is_object() || !j["tasks"].is_array() || j["tasks"].size() != tasks.size()) {
    std::fprintf(stderr, "anvil bench: the kernel families are unknown: python -m anvil.family failed (%s): %s\n",
                 r.describe().c_str(), tail_lines(r.err_output, 3).c_str());
    return;
  }
  for (size_t i = 0; i < tasks.size(); ++i) tasks[i].family = j["tasks"][i].value("family", std::string("unknown"));
}

SuiteTask task_from_json(const Json& j) {
  SuiteTask t;
  t.level = j.value("level", std::string());
  t.id = j.value("id", 0L);
  t.name = j.value("name", std::string());
  t.stem = j.value("stem", std::string());
  t.spec = j.value("spec", std::string());
  t.solution = j.value("solution", std::string());
  t.missing_reason = j.value("missing_reason", std::string());
  t.family = j.value("family", std::string("unknown"));  // a run made before families: unknown
  return t;
}

Json problems_json(const std::vector<SuiteProblem>& v) {
  Json a = Json::array();
  for (const auto& p : v) a.push_back({{"path", p.path}, {"reason", p.reason}});
  return a;
}

// The settings that make two invocations the same run: a resumed run must
// measure what the first invocation measured.
Json settings_json(const BenchOptions& o, const std::string& variant) {
  const EvalOptions& e = o.eval;
  Json s = {{"tasks", o.tasks},
            {"solutions", o.solutions.empty() ? Json(nullptr) : Json(o.solutions)},
            {"variant", variant},
            {"eval",
             {{"device", to_string(e.device)},
              {"protocol", e.protocol},
              {"preset", effective_preset(e.preset, protocol_named(e.protocol))},
              {"trials", e.trials},
              {"warmup", e.warmup},
              {"calls", e.calls},
              {"input_sets", e.input_sets},
              {"flush_l2", e.flush_l2},
              {"hide_launch", e.hide_launch},
              {"kernel_sum", e.kernel_sum},
              {"timing", timing_method_name(e.timing)},
              {"compile_mode", e.compile_mode},
              {"allow_tf32", e.allow_tf32},
              {"defenses", e.defenses},
              {"vet", e.vet},
              {"allow_lower_precision", e.allow_lower_precision},
              {"timeout_s", e.timeout.count()},
              {"arch", e.build.arch}}}};
  if (o.model) {
    const RunOptions& a = o.agent;
    s["agent"] = {{"endpoint", o.model->endpoint().base_url},
                  {"model", o.model->endpoint().model},
                  {"sampling", a.episode.sampling.to_json()},
                  {"max_turns", a.episode.max_turns},
                  {"max_context", a.episode.max_context},
                  {"wall_clock_s", a.episode.wall_clock.count()}};
  } else {
    s["agent"] = nullptr;
  }
  return s;
}

std::string triton_version(const Environment& env) {
  SubprocessOptions so;
  so.timeout = std::chrono::seconds(60);
  auto r = run_subprocess({env.python.string(), "-c",
                           "import importlib.metadata as m\ntry: print(m.version('triton'))\nexcept Exception: print('')"},
                          so);
  return trim(r.output);
}

std::string timing_text(const EvalOptions& e) {
  std::string s = e.timing == TimingMethod::kKernelSum ? "kernel-sum (the profiler's kernel time per call)" : "events";
  s += ": median of " + std::to_string(e.calls) + " calls after " + std::to_string(e.warmup) + " warm-up, " +
       std::to_string(e.input_sets) + " rotated input sets, L2 " + (e.flush_l2 ? "flushed" : "not flushed") +
       ", host launch latency " + (e.hide_launch ? "hidden" : "counted");
  return s;
}

Json fingerprint_json(const Environment& env, const BenchOptions& o, const std::vector<int>& gpus, bool cpu) {
  Json gpu = nullptr;
  if (!cpu && !gpus.empty() && gpus[0] < static_cast<int>(env.gpus.size())) {
    gpu = {{"name", env.gpus[gpus[0]].name}, {"count", gpus.size()}, {"capability", env.gpus[gpus[0]].capability}};
  }
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  auto str = [](const std::string& s) { return s.empty() ? Json(nullptr) : Json(s); };
  return {{"gpu", gpu},
          {"driver", cpu ? Json(nullptr) : str(env.driver)},
          {"cuda", str(env.torch.cuda)},
          {"nvcc", str(env.nvcc.version)},
          {"torch", str(env.torch.version)},
          {"triton", str(triton_version(env))},
          {"python", str(env.python_version)},
          {"device", cpu ? "cpu" : "cuda"},
          {"compile_mode", o.eval.compile_mode},
          {"tf32", {{"matmul", o.eval.allow_tf32}, {"cudnn", o.eval.allow_tf32}}},
          {"protocol", o.eval.protocol},
          {"preset", effective_preset(o.eval.preset, protocol_named(o.eval.protocol))},
          {"timing", timing_text(o.eval)},
          {"defenses", o.eval.defenses},
          {"anvil", {{"version", "0.1.0"}, {"rev", kAnvilGitRev}}},
          {"host", host},
          {"date", utc_now("%Y-%m-%d")}};
}

// What a resumed run may not change: the setup its numbers were measured on.
std::string fingerprint_difference(const Json& a, const Json& b) {
  for (const char* k : {"gpu", "driver", "cuda", "torch", "triton", "device"}) {
    Json x = a.value(k, Json()), y = b.value(k, Json());
    if (std::string(k) == "gpu" && x.is_object() && y.is_object()) {
      x = x.value("name", Json());
      y = y.value("name", Json());
    }
    if (x != y) return std::string(k) + " was " + json_text(x) + ", is now " + json_text(y);
  }
  return "";
}

Json number_or_null(const Json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_number() ? *it : Json(nullptr);
}

std::string short_message(std::string m) {
  m = replace_all(m, "\n", " ");
  if (m.size() > 300) m = m.substr(0, 297) + "...";
  return m;
}

// The record of one task from its evaluation (or its absence).
Json make_record(const SuiteTask& t, const std::string& status, const Json& eval, const std::string& message,
                 double seconds) {
  Json r = {{"schema", kTaskSchema}, {"level", t.level},     {"id", t.id},           {"name", t.name},
            {"stem", t.stem},        {"task", t.spec},       {"status", status},     {"seconds", seconds},
            {"solution", t.solution.empty() ? Json(nullptr) : Json(t.solution)}};
  if (status == "evaluated") {
    const Json& tm = eval.value("timing", Json::object());
    r["outcome"] = eval.value("outcome", std::string("runtime_error"));
    r["correct"] = eval.value("correct", false);
    r["reward"] = eval.value("reward", -1);
    for (const char* k : {"candidate_ms", "eager_ms", "compile_ms", "speedup_eager", "speedup_compile"}) {
      r[k] = tm.is_object() ? number_or_null(tm, k) : Json(nullptr);
    }
    r["message"] = short_message(eval.value("message", std::string()));
    r["eval"] = eval;
  } else {
    r["outcome"] = status;  // missing | not_evaluated
    r["correct"] = false;
    r["reward"] = -1;
    for (const char* k : {"candidate_ms", "eager_ms", "compile_ms", "speedup_eager", "speedup_compile"}) r[k] = nullptr;
    r["message"] = short_message(message);
    if (!eval.is_null()) r["eval"] = eval;
  }
  return r;
}

std::optional<Json> read_json(const fs::path& p) {
  auto text = read_file(p);
  if (!text) return std::nullopt;
  try {
    return Json::parse(*text);
  } catch (const std::exception&) {
    return std::nullopt;  // a torn or foreign file: the task is evaluated again
  }
}

// A record that settles its task: evaluated, of the solution the suite now names.
bool settled(const std::optional<Json>& r, const SuiteTask& t) {
  return r && r->value("schema", std::string()) == kTaskSchema && r->value("status", std::string()) == "evaluated" &&
         r->value("solution", Json()) == (t.solution.empty() ? Json(nullptr) : Json(t.solution));
}

// The progress display: a bar on a terminal, one line per task otherwise.
class Progress {
 public:
  Progress(size_t total, size_t already, bool on) : total_(total), done_(already), already_(already), on_(on) {
    tty_ = on && isatty(STDERR_FILENO);
    t0_ = Clock::now();
    if (on_) draw("");
  }
  void task_done(const std::string& line, bool ok) {
    std::lock_guard<std::mutex> lock(mu_);
    ++done_;
    (ok ? ok_ : failed_)++;
    draw(line);
  }
  void running(int n) {
    std::lock_guard<std::mutex> lock(mu_);
    running_ = n;
    if (tty_) draw("");
  }
  void finish() {
    if (tty_) std::fprintf(stderr, "\n");
  }

 private:
  void draw(const std::string& event) {
    if (!on_) return;
    double el = std::chrono::duration<double>(Clock::now() - t0_).count();
    size_t now = done_ - already_;
    std::string eta = now > 0 && done_ < total_
                          ? "ETA " + short_duration(el / static_cast<double>(now) * static_cast<double>(total_ - done_))
                          : "";
    const int width = 28;
    int fill = total_ ? static_cast<int>(width * done_ / total_) : width;
    std::string bar = "[" + std::string(fill, '#') + std::string(width - fill, '.') + "]";
    char status[256];
    std::snprintf(status, sizeof status, "%s %zu/%zu  ok %zu  failed %zu  %s  %s", bar.c_str(), done_, total_, ok_,
                  failed_, short_duration(el).c_str(), eta.c_str());
    if (tty_) std::fprintf(stderr, "\r\033[K");
    if (!event.empty()) {
      if (tty_) std::fprintf(stderr, "%s\n", event.c_str());
      else std::fprintf(stderr, "[%zu/%zu] %s%s\n", done_, total_, event.c_str(), eta.empty() ? "" : ("  " + eta).c_str());
    }
    if (tty_) std::fprintf(stderr, "%s", status);
    std::fflush(stderr);
  }
  std::mutex mu_;
  size_t total_, done_, already_, ok_ = 0, failed_ = 0;
  int running_ = 0;
  bool on_, tty_ = false;
  Clock::time_point t0_;
};

std::string speed_text(const Json& rec) {
  std::string s;
  char buf[64];
  for (const char* k : {"speedup_eager", "speedup_compile"}) {
    if (rec.contains(k) && rec[k].is_number()) {
      std::snprintf(buf, sizeof buf, "  %.2fx %s", rec[k].get<double>(), std::string(k).substr(8).c_str());
      s += buf;
    }
  }
  return s;
}

std::string event_line(const Json& rec) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.1f s", rec.value("seconds", 0.0));
  std::string s = rec.value("level", std::string()) + "/" + rec.value("stem", std::string()) + ": " +
                  rec.value("outcome", std::string()) + ", reward " + std::to_string(rec.value("reward", -1)) +
                  speed_text(rec) + "  (" + buf + ")";
  if (!rec.value("correct", false)) {
    std::string m = rec.value("message", std::string());
    if (m.size() > 100) m = m.substr(0, 97) + "...";
    if (!m.empty()) s += "\n    " + m;
  }
  return s;
}

// results.json from bench.json and the records.
Json assemble(const fs::path& out, const Json& run) {
  std::vector<SuiteTask> tasks;
  for (const auto& t : run["suite"]["tasks"]) tasks.push_back(task_from_json(t));
  const Json& s = run["settings"];
  bool agent = s.value("agent", Json()).is_object();
  Json pricing = agent ? run.value("pricing", Json()) : Json();
  Json rows = Json::array();
  Json missing = Json::array(), not_evaluated = Json::array();
  std::vector<std::string> levels;
  std::map<std::string, std::vector<Json>> by_level;
  std::map<std::string, std::vector<Json>> by_family;  // in name order: the same across runs
  std::vector<Json> all;
  for (const auto& t : tasks) {
    fs::path rel = record_rel(t);
    auto rec = read_json(out / rel);
    if (!rec) rec = make_record(t, "not_evaluated", nullptr, "not evaluated: the run stopped before this task", 0);
    Json row = {{"level", t.level},
                {"id", t.id},
                {"name", t.name},
                {"stem", t.stem},
                {"task", t.spec},
                {"family", t.family},
                {"solution", rec->value("solution", Json())},
                {"record", rel.string()}};
    for (const char* k : {"outcome", "correct", "reward", "candidate_ms", "eager_ms", "compile_ms", "speedup_eager",
                          "speedup_compile", "message", "seconds"}) {
      row[k] = rec->value(k, Json());
    }
    if (rec->contains("episode")) row["episode"] = (*rec)["episode"];
    if (agent) {  // what the episode cost: its tokens (null: no episode record) at the run's prices
      row["usage"] = rec->value("usage", Json());
      row["cost_usd"] = task_cost(row["usage"], pricing);
    }
    std::string status = rec->value("status", std::string());
    if (status == "missing") missing.push_back({{"level", t.level}, {"id", t.id}, {"name", t.name}, {"task", t.spec},
                                                {"reason", row["message"]}});
    if (status == "not_evaluated") not_evaluated.push_back({{"level", t.level}, {"id", t.id}, {"name", t.name},
                                                            {"error", row["message"]}});
    if (std::find(levels.begin(), levels.end(), t.level) == levels.end()) levels.push_back(t.level);
    by_level[t.level].push_back(row);
    by_family[t.family].push_back(row);
    all.push_back(row);
    rows.push_back(row);
  }
  // How the evaluations actually timed (the runner's settings: a CPU has no L2
  // flush or launch hiding), from the first record that timed anything.
  Json fingerprint = run["fingerprint"];
  for (const auto& t : tasks) {
    auto rec = read_json(out / record_rel(t));
    if (!rec || !(*rec)["eval"].is_object() || !(*rec)["eval"]["timing"].is_object()) continue;
    const Json& tm = (*rec)["eval"]["timing"];
    if (!tm.contains("method")) continue;
    EvalOptions e;
    try {
      e.timing = timing_method_named(tm.value("method", std::string()));
    } catch (const std::invalid_argument&) {
      continue;  // a record of another anvil's: its method is not one this one knows
    }
    e.calls = tm.value("calls", e.calls);
    e.warmup = tm.value("warmup", e.warmup);
    e.input_sets = tm.value("input_sets", e.input_sets);
    e.flush_l2 = tm.value("flush_l2", e.flush_l2);
    e.hide_launch = tm.value("hide_launch", e.hide_launch);
    fingerprint["timing"] = timing_text(e);
    const Json& ev_env = (*rec)["eval"].value("env", Json::object());
    if (fingerprint.value("device", std::string()) == "cpu" && ev_env.is_object()) {
      fingerprint["cpu"] = ev_env.value("device_name", Json());
    }
    break;
  }
  Json lv = Json::array();
  for (const auto& l : levels) lv.push_back({{"level", l}, {"metrics", compute_metrics(by_level[l])}});
  Json fams = Json::array();
  for (const auto& [f, frows] : by_family) fams.push_back({{"family", f}, {"metrics", compute_metrics(frows)}});
  Json r = {{"schema", "anvil.bench/1"},
            {"run", run.value("last", Json::object())},
            {"fingerprint", fingerprint},
            {"rules", metric_rules(agent)},
            {"levels", lv},
            {"families", fams},
            {"overall", compute_metrics(all)},
            {"tasks", rows},
            {"problems",
             {{"missing", missing},
              {"extra", run["suite"].value("extra", Json::array())},
              {"unreadable", run["suite"].value("unreadable", Json::array())},
              {"not_evaluated", not_evaluated}}}};
  r["run"]["out"] = out.string();
  r["run"]["tasks"] = s["tasks"];
  r["run"]["solutions"] = s["solutions"];
  r["run"]["variant"] = s["variant"];
  r["run"]["agent"] = agent
                          ? Json{{"endpoint", s["agent"]["endpoint"]}, {"model", s["agent"]["model"]}}
                          : Json(nullptr);
  if (agent) r["run"]["pricing"] = pricing;
  return r;
}

bool write_outputs(const fs::path& out, const Json& results, std::string* err) {
  return write_file_atomic(out / "results.json", json_text(results, 1) + "\n", err) &&
         write_file_atomic(out / "report.md", render_markdown(results), err) &&
         write_file_atomic(out / "report.html", render_html(results), err);
}

// With an agent: the episodes (resumable by themselves), then a record per
// task from its trajectory's final evaluation.
void run_agent_tasks(const Environment& env, const BenchOptions& o, const std::vector<SuiteTask>& tasks,
                     const std::vector<int>& gpus, const fs::path& out, size_t* evaluated) {
  RunOptions ro = o.agent;
  ro.tasks.clear();
  ro.dirs.clear();
  for (const auto& t : tasks) {
    ro.tasks.push_back(t.spec);
    ro.dirs.push_back((fs::path(safe_name(t.level)) / safe_name(t.stem)).string());
  }
  ro.samples = 1;
  ro.out = out / "agent";
  ro.resume = true;  // bench.json already decided whether this run may continue
  ro.gpus = gpus;
  ro.progress = o.progress;
  ro.episode.tools.eval = o.eval;
  run_episodes(env, *o.model, ro);
  std::string err;
  for (size_t i = 0; i < tasks.size(); ++i) {
    const SuiteTask& t = tasks[i];
    fs::path ep = ro.out / ro.dirs[i] / "sample-0";
    fs::path rec_path = out / record_rel(t);
    auto old = read_json(rec_path);
    auto traj = read_json(ep / "trajectory.json");
    Json rec;
    if (!traj) {
      rec = make_record(t, "not_evaluated", nullptr, "the episode did not start (see " + ep.string() + ")", 0);
    } else if (traj->value("status", std::string()) != "finished") {
      std::string why = (*traj)["model_error"].is_object()
                            ? (*traj)["model_error"].value("error", std::string("interrupted"))
                            : "the episode is " + traj->value("status", std::string("?"));
      rec = make_record(t, "not_evaluated", nullptr, why, traj->value("seconds", 0.0));
    } else {
      const Json& ev = (*traj)["evaluation"];
      if (ev.is_object() && ev.contains("outcome")) {
        rec = make_record(t, "evaluated", ev, "", traj->value("seconds", 0.0));
      } else {
        rec = make_record(t, "not_evaluated", nullptr,
                          ev.is_object() ? ev.value("error", std::string("no evaluation")) : "no evaluation",
                          traj->value("seconds", 0.0));
      }
    }
    rec["episode"] = (fs::path("agent") / ro.dirs[i] / "sample-0").string();
    Json c = traj ? traj->value("counters", Json::object()) : Json::object();
    rec["turns"] = c.value("turns", 0);
    // An interrupted episode's tokens were spent too: its usage is kept whatever its status.
    rec["usage"] = traj ? episode_usage(*traj) : Json(nullptr);
    if (!(old && old->value("status", std::string()) == "evaluated") && rec["status"] == "evaluated") ++*evaluated;
    write_file_atomic(rec_path, json_text(rec, 1) + "\n", &err);
  }
}

// Builds every pending workdir candidate into the build cache on all cores,
// before any GPU times anything: nvcc competing with a timing loop for the
// CPU would slow the candidates' launches, and one build after another on a
// GPU's slot leaves the GPU idle. Each evaluation then finds its build
// cached. A failed build is left for its evaluation to report.
// What a task's record says of its build ahead (null: nothing to build ahead, a workdir-less path).
Json ahead_json(const std::optional<BuildReport>& b) {
  if (!b) return nullptr;
  Json not_ahead = Json::array();
  for (const auto& w : b->warnings) {
    if (starts_with(w, "not built ahead: ")) not_ahead.push_back(w.substr(17));
  }
  return {{"ok", b->ok}, {"units", b->units.size()}, {"compiled", b->compiled()}, {"seconds", b->seconds},
          {"not_ahead", not_ahead}};
}

// (*ahead)[i]: what pending[i]'s record says of its build ahead (ahead_json).
Json prebuild_all(const Environment& env, const BenchOptions& o, const std::vector<const SuiteTask*>& pending,
                  double* seconds, std::vector<Json>* ahead) {
  auto t0 = Clock::now();
  unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  unsigned workers = std::max(1u, cores / 2);
  BuildOptions bo = o.eval.build;
  if (bo.jobs == 0) bo.jobs = std::max(1u, cores / workers);
  if (o.progress) {
    std::fprintf(stderr, "building %zu candidates (%u at a time)\n", pending.size(), workers);
  }
  std::atomic<int> built{0}, compiled{0}, failed{0};
  std::vector<std::function<void()>> jobs;
  ahead->assign(pending.size(), nullptr);
  for (size_t i = 0; i < pending.size(); ++i) {
    jobs.push_back([&, i] {
      const SuiteTask* t = pending[i];
      std::optional<BuildReport> b;
      try {
        b = prebuild(env, t->solution, bo);
      } catch (const std::exception& e) {  // its evaluation builds it again and says why
        ++failed;
        (*ahead)[i] = {{"ok", false}, {"error", e.what()}};
        return;
      }
      (*ahead)[i] = ahead_json(b);
      if (!b || (b->ok && b->units.empty())) return;  // nothing (it could read) to build
      ++built;
      if (b->compiled() > 0) ++compiled;
      if (!b->ok) ++failed;
    });
  }
  run_parallel(jobs, workers);
  *seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  if (o.progress) {
    std::fprintf(stderr, "built %d candidates in %s (%d compiled, %d from the cache, %d failed)\n", built.load(),
                 short_duration(*seconds).c_str(), compiled.load(), built.load() - compiled.load(), failed.load());
  }
  return {{"candidates", built.load()}, {"compiled", compiled.load()}, {"failed", failed.load()},
          {"workers", workers}, {"seconds", *seconds}};
}

}  // namespace

namespace {

// The run's document in o.out: a new one, or, with --resume, the one there when it was made with the
// same settings on the same setup (else why not, in *err).
std::optional<Json> open_run(const BenchOptions& o, const Json& settings, const Json& fp, std::string* err) {
  std::error_code ec;
  fs::path run_path = o.out / "bench.json";
  if (!fs::exists(run_path, ec)) {
    if (o.resume) {
      *err = "--resume: no benchmark run in " + o.out.string() + " (no bench.json)";
      return std::nullopt;
    }
    return Json{{"schema", kRunSchema},    {"settings", settings},           {"fingerprint", fp},
                {"command", o.command},   {"invocations", Json::array()}};
  }
  if (!o.resume) {
    *err = o.out.string() + " already holds a benchmark run: add --resume to continue it, or choose another --out";
    return std::nullopt;
  }
  auto run = read_json(run_path);
  if (!run || run->value("schema", std::string()) != kRunSchema) {
    *err = run_path.string() + " is not a benchmark run's settings (" + kRunSchema + ")";
    return std::nullopt;
  }
  if ((*run)["settings"] != settings) {
    std::string diff;
    for (auto& [k, v] : settings.items()) {
      if ((*run)["settings"].value(k, Json()) != v) diff += (diff.empty() ? "" : ", ") + k;
    }
    *err = "--resume: the settings differ from the run's in " + o.out.string() + " (" + diff +
           "); run the same command with --resume, or choose another --out";
    return std::nullopt;
  }
  if (std::string d = fingerprint_difference((*run)["fingerprint"], fp); !d.empty()) {
    *err = "--resume: the run was measured on another setup (" + d + "); its numbers cannot be mixed";
    return std::nullopt;
  }
  return run;
}

// Evaluations at once on each GPU: opts.overlap, or its default.
int overlap_of(const BenchOptions& opts, bool cpu) {
  if (cpu) return 1;
  return opts.overlap > 0 ? opts.overlap : kOverlapTogetherCuda;
}

// The pending tasks' solutions evaluated, `overlap` at a time on each of `gpus` (a worker each;
// above one, each evaluation takes the GPU's lock: a wave prepares together, then each is timed
// alone), every record written as it is made; how many were evaluated.
size_t evaluate_pending(const Environment& env, const BenchOptions& opts, const std::vector<const SuiteTask*>& pending,
                        const std::vector<Json>& ahead, const std::vector<int>& gpus, bool cpu, int overlap,
                        Progress& progress) {
  std::atomic<size_t> next{0};
  std::atomic<size_t> n_eval{0};
  auto worker = [&](int gpu) {
    while (true) {
      size_t i = next++;
      if (i >= pending.size()) return;
      const SuiteTask& t = *pending[i];
      EvalOptions eo = opts.eval;
      eo.task = t.spec;
      eo.candidate = t.solution;
      eo.gpu = gpu;
      if (overlap > 1) eo.gpu_lock = Prepare::kTogether;
      auto t0 = Clock::now();
      EvalResult r;
      try {
        r = evaluate(env, eo);
      } catch (const std::exception& e) {  // one task must never take the run down
        r.evaluated = false;
        r.error = std::string("anvil error: ") + e.what();
      }
      double secs = std::chrono::duration<double>(Clock::now() - t0).count();
      Json rec = r.evaluated ? make_record(t, "evaluated", r.json, "", secs)
                             : make_record(t, "not_evaluated", nullptr, r.error, secs);
      rec["gpu"] = cpu ? Json(nullptr) : Json(gpu);
      rec["build_ahead"] = i < ahead.size() ? ahead[i] : Json(nullptr);
      std::string werr;
      write_file_atomic(opts.out / record_rel(t), json_text(rec, 1) + "\n", &werr);
      if (r.evaluated) ++n_eval;
      progress.task_done(event_line(rec) + (werr.empty() ? "" : "\n    cannot write the record: " + werr),
                         rec.value("correct", false));
    }
  };
  std::vector<std::thread> pool;
  for (int g : gpus) {
    for (int k = 0; k < overlap; ++k) pool.emplace_back(worker, g);
  }
  for (auto& th : pool) th.join();
  return n_eval;
}

}  // namespace

std::optional<Json> run_bench(const Environment& env, const BenchOptions& o, std::string* err) {
  auto wall0 = Clock::now();
  std::string started = utc_now();
  if (o.out.empty()) {
    *err = "no run directory (--out)";
    return std::nullopt;
  }
  // Where evaluations run: the GPUs (one at a time each), or CPU slots.
  bool cpu = o.eval.device == Device::Cpu || env.gpus.empty();
  std::vector<int> gpus = o.gpus;
  if (cpu) {
    gpus.assign(1, 0);  // CPU timings are only comparable one at a time
  } else if (gpus.empty()) {
    for (size_t i = 0; i < env.gpus.size(); ++i) gpus.push_back(static_cast<int>(i));
  }
  for (int g : gpus) {
    if (!cpu && (g < 0 || g >= static_cast<int>(env.gpus.size()))) {
      *err = "no GPU " + std::to_string(g) + " (this host has " + std::to_string(env.gpus.size()) + ")";
      return std::nullopt;
    }
  }
  std::string variant = !o.variant.empty() ? o.variant : cpu ? "cpu" : "cuda";
  BenchOptions opts = o;
  if (cpu && !opts.eval.device) opts.eval.device = Device::Cpu;

  auto suite = discover_suite(env, o.tasks, err);
  if (!suite) return std::nullopt;
  classify_families(env, suite->tasks);
  if (!o.model) {
    if (o.solutions.empty()) {
      *err = "nothing to evaluate: give --solutions DIR or --agent";
      return std::nullopt;
    }
    if (!match_solutions(*suite, o.solutions, variant, err)) return std::nullopt;
  }

  // The run directory: new, or the same run continued.
  std::error_code ec;
  fs::path run_path = o.out / "bench.json";
  Json settings = settings_json(opts, variant);
  Json fp = fingerprint_json(env, opts, gpus, cpu);
  auto opened = open_run(o, settings, fp, err);
  if (!opened) return std::nullopt;
  Json run = std::move(*opened);
  if (o.pricing) run["pricing"] = o.pricing->to_json();  // else the prices an earlier invocation gave, if any
  Json suite_j = {{"tasks", Json::array()}, {"unreadable", problems_json(suite->unreadable)},
                  {"extra", problems_json(suite->extra)}};
  for (const auto& t : suite->tasks) suite_j["tasks"].push_back(task_json(t));
  run["suite"] = suite_j;
  fs::create_directories(o.out, ec);
  if (!write_file_atomic(run_path, json_text(run, 1) + "\n", err)) return std::nullopt;

  // What is left to do.
  std::vector<const SuiteTask*> pending;
  size_t resumed = 0, missing = 0;
  for (const auto& t : suite->tasks) {
    fs::path rec_path = o.out / record_rel(t);
    fs::create_directories(rec_path.parent_path(), ec);
    if (!o.model && t.solution.empty()) {
      write_file_atomic(rec_path, json_text(make_record(t, "missing", nullptr, t.missing_reason, 0), 1) + "\n", err);
      ++missing;
      continue;
    }
    if (!o.model && settled(read_json(rec_path), t)) {
      ++resumed;
      continue;
    }
    pending.push_back(&t);
  }

  size_t evaluated = 0;
  int overlap = overlap_of(opts, cpu);
  double build_seconds = 0;
  Json prebuilt = nullptr;
  if (o.model) {
    run_agent_tasks(env, opts, suite->tasks, gpus, o.out, &evaluated);
  } else if (!pending.empty()) {
    if (o.progress && resumed > 0) {
      std::fprintf(stderr, "resuming %s: %zu of %zu tasks already evaluated\n", o.out.string().c_str(), resumed,
                   suite->tasks.size());
    }
    std::vector<Json> ahead;
    if (o.prebuild) prebuilt = prebuild_all(env, opts, pending, &build_seconds, &ahead);
    Progress progress(suite->tasks.size(), resumed + missing, o.progress);
    evaluated = evaluate_pending(env, opts, pending, ahead, gpus, cpu, overlap, progress);
    progress.finish();
  }

  double seconds = std::chrono::duration<double>(Clock::now() - wall0).count();
  Json last = {{"started", started},
               {"finished", utc_now()},
               {"seconds", seconds},
               {"evaluated", evaluated},
               {"resumed", resumed},
               {"missing", missing},
               {"prebuild", prebuilt},
               {"tasks_per_minute", seconds > 0 ? static_cast<double>(evaluated) / (seconds / 60.0) : 0.0},
               {"gpus", cpu ? Json(nullptr) : Json(gpus)},
               {"overlap", o.model ? Json(nullptr) : Json(overlap)}};
  run["last"] = last;
  run["invocations"].push_back(last);
  if (!write_file_atomic(run_path, json_text(run, 1) + "\n", err)) return std::nullopt;
  Json results = assemble(o.out, run);
  if (!write_outputs(o.out, results, err)) return std::nullopt;
  return results;
}

std::optional<Json> bench_report(const fs::path& out, std::string* err, const std::optional<Pricing>& pricing) {
  auto run = read_json(out / "bench.json");
  if (!run || run->value("schema", std::string()) != kRunSchema || !(*run)["suite"].is_object()) {
    *err = out.string() + ": not a benchmark run (no readable bench.json)";
    return std::nullopt;
  }
  if (pricing) {
    if (!(*run)["settings"].value("agent", Json()).is_object()) {
      *err = out.string() + ": --price-input/--price-output price an agent's tokens, and this run has no agent "
                            "(it judged --solutions)";
      return std::nullopt;
    }
    (*run)["pricing"] = pricing->to_json();  // kept: a later report without prices still has the cost
    if (!write_file_atomic(out / "bench.json", run->dump(1) + "\n", err)) return std::nullopt;
  }
  Json results = assemble(out, *run);
  if (!write_outputs(out, results, err)) return std::nullopt;
  return results;
}

namespace {

// "model usage: 40 turns (40 reported), 51200 prompt + 3100 completion tokens; cost $0.2000 (...)"
std::string usage_text(const Json& u, const Json& pricing) {
  std::string s = "model usage: " + std::to_string(u.value("turns", 0L)) + " turns (" +
                  std::to_string(u.value("reported_turns", 0L)) + " reported), ";
  Json prompt = u.value("prompt_tokens", Json()), completion = u.value("completion_tokens", Json());
  Json cost = u.value("cost_usd", Json());
  if (!prompt.is_number()) {
    s += "tokens not reported by the server";
  } else {
    s += json_text(prompt) + " prompt + " + json_text(completion) + " completion tokens";
  }
  char b[160];
  if (cost.is_number() && pricing.is_object()) {
    std::snprintf(b, sizeof b, "; cost $%.4f (at $%g / $%g per million prompt / completion tokens)",
                  cost.get<double>(), pricing.value("input_usd_per_mtok", 0.0),
                  pricing.value("output_usd_per_mtok", 0.0));
    s += b;
  } else if (!pricing.is_object()) {
    s += "; no cost (no --price-input/--price-output)";
  }
  return s;
}

}  // namespace

std::string bench_summary_text(const Json& r) {
  auto pct = [](const Json& v) {
    if (!v.is_number()) return std::string("n/a");
    char b[32];
    std::snprintf(b, sizeof b, "%.1f%%", 100 * v.get<double>());
    return std::string(b);
  };
  auto x = [](const Json& v) {
    if (!v.is_number()) return std::string("n/a");
    char b[32];
    std::snprintf(b, sizeof b, "%.2fx", v.get<double>());
    return std::string(b);
  };
  std::string s;
  auto line = [&](const std::string& name, const Json& m) {
    char b[64];
    std::snprintf(b, sizeof b, "%-10s %4d tasks", name.c_str(), m.value("tasks", 0));
    s += std::string(b) + "  pass " + pct(m["pass_rate"]) + "  >eager " + pct(m["faster_than_eager_rate"]) +
         "  >compile " + pct(m["faster_than_compile_rate"]) + "  geomean " + x(m["geomean"]["eager"]["correct"]) +
         " eager, " + x(m["geomean"]["compile"]["correct"]) + " compile (correct)  mean reward " +
         (m["mean_reward"].is_number() ? std::to_string(m["mean_reward"].get<double>()).substr(0, 5) : "n/a") + "\n";
  };
  for (const auto& l : r["levels"]) line(l["level"].get<std::string>(), l["metrics"]);
  if (r["levels"].size() > 1) line("overall", r["overall"]);
  if (r["overall"].contains("usage")) s += usage_text(r["overall"]["usage"], r["run"].value("pricing", Json())) + "\n";
  const Json& p = r["problems"];
  for (const char* k : {"missing", "extra", "unreadable", "not_evaluated"}) {
    if (!p[k].empty()) {
      s += std::string(k) + ": " + std::to_string(p[k].size()) + "\n";
      for (const auto& e : p[k]) {
        std::string what = e.contains("path") ? e["path"].get<std::string>()
                                              : e["level"].get<std::string>() + "/" + std::to_string(e["id"].get<long>()) +
                                                    "_" + e["name"].get<std::string>();
        std::string why = e.value("reason", e.value("error", std::string()));
        s += "  " + what + ": " + why + "\n";
      }
    }
  }
  const Json& run = r["run"];
  char b[160];
  std::snprintf(b, sizeof b, "evaluated %d now (%d from before) in %s, %.1f tasks/min", run.value("evaluated", 0),
                run.value("resumed", 0), short_duration(run.value("seconds", 0.0)).c_str(),
                run.value("tasks_per_minute", 0.0));
  s += b;
  if (run["prebuild"].is_object()) {
    std::snprintf(b, sizeof b, "; %d candidates built first in %s", run["prebuild"].value("candidates", 0),
                  short_duration(run["prebuild"].value("seconds", 0.0)).c_str());
    s += b;
  }
  s += "\n";
  s += "reports: " + run.value("out", std::string()) + "/report.md, report.html\n";
  return s;
}

std::vector<std::string> bench_command_of(const std::vector<std::string>& after_bench) {
  std::vector<std::string> out;
  for (size_t i = 0; i < after_bench.size(); ++i) {
    const std::string& a = after_bench[i];
    if (a == "--resume" || a.rfind("--out=", 0) == 0) continue;
    if (a == "--out") {
      ++i;  // and its value
      continue;
    }
    out.push_back(a);
  }
  return out;
}

std::optional<std::vector<std::string>> bench_resume_command(const std::vector<std::string>& args, std::string* err) {
  if (args.size() < 3 || args[1] != "bench") return std::nullopt;
  bool resume = false, tasks = false;
  std::string out;
  for (size_t i = 2; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--resume") resume = true;
    if (a == "--tasks" || a.rfind("--tasks=", 0) == 0) tasks = true;
    if (a == "--out" && i + 1 < args.size()) out = args[i + 1];
    if (a.rfind("--out=", 0) == 0) out = a.substr(6);
    if (a == "report" || a == "compare") return std::nullopt;  // the subcommands: not a run
  }
  if (!resume || tasks || out.empty()) return std::nullopt;  // the whole command given again, or a usage error
  fs::path path = fs::path(out) / "bench.json";
  auto run = read_json(path);
  if (!run) {
    *err = "--resume: no benchmark run in " + out + " (no readable bench.json)";
    return std::nullopt;
  }
  const Json command = run->value("command", Json());
  if (!command.is_array() || command.empty() ||
      !std::all_of(command.begin(), command.end(), [](const Json& c) { return c.is_string(); })) {
    *err = "--resume: the run in " + out +
           " does not record its command (an older anvil's run): give its whole command again with --resume";
    return std::nullopt;
  }
  std::vector<std::string> argv = {args[0], "bench"};
  for (const auto& c : command) argv.push_back(c.get<std::string>());
  argv.insert(argv.end(), {"--resume", "--out", out});
  for (const auto& a : bench_command_of({args.begin() + 2, args.end()})) argv.push_back(a);
  return argv;
}

}  // namespace anvil
