#include "anvil/env/eval.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/wait.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <map>
#include <cstdio>
#include <random>
#include <stdexcept>
#include <thread>

#include "anvil/env/baselines.h"
#include "anvil/env/cache_layout.h"
#include "anvil/env/diagnostics.h"
#include "anvil/env/launch.h"
#include "anvil/env/outcome.h"
#include "anvil/env/reward.h"
#include "anvil/env/task.h"
#include "anvil/env/vet.h"
#include "anvil/env/workdir.h"
#include "anvil/util/fs.h"
#include "anvil/util/hash.h"
#include "anvil/util/json_text.h"
#include "anvil/util/strings.h"
#include "anvil/util/syscall_filter.h"
#include "anvil/util/subprocess.h"

namespace anvil {

namespace {

constexpr const char* kSchema = "anvil.eval/1";
constexpr size_t kTailLines = 30;

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

std::optional<double> number_at(const nlohmann::json& j, const char* key) {
  if (!j.is_object() || !j.contains(key) || !j[key].is_number()) return std::nullopt;
  return j[key].get<double>();
}

// Copies the candidate (without build outputs) into `dst`.
bool copy_candidate(const fs::path& src, const fs::path& dst, std::string* err, bool* refused = nullptr) {
  // Regular files only, bounded (env/workdir.h): a FIFO, a symlink out or a 3 GB sparse file in
  // the candidate is skipped or refused, never read into memory.
  return copy_candidate_files(src, dst, err, refused);
}

std::string gpu_name(const Environment& env, int gpu) {
  return gpu >= 0 && gpu < static_cast<int>(env.gpus.size()) ? env.gpus[gpu].name : "unknown";
}

// The request's defenses.roofline: what the options give, the rest from the cache if there.
nlohmann::json roofline_request(const Environment& env, const EvalOptions& opts, Device device) {
  nlohmann::json roofline = nlohmann::json::object();
  if (opts.roofline_bandwidth > 0) roofline["bandwidth_bytes_per_s"] = opts.roofline_bandwidth;
  if (opts.roofline_flops > 0) roofline["flops_per_s"] = opts.roofline_flops;
  if (device != Device::Cuda || roofline.size() == 2) return roofline;
  if (auto text = read_file(roofline_cache_path(env, opts.gpu))) {
    nlohmann::json cached = nlohmann::json::parse(*text, nullptr, false);  // corrupt: measured again
    if (cached.is_object()) {
      for (const char* key : {"bandwidth_bytes_per_s", "flops_per_s"})
        if (!roofline.contains(key) && number_at(cached, key)) roofline[key] = cached[key];
      roofline["cached"] = true;
    }
  }
  return roofline;
}

// Keeps what the judge measured (never what the options gave) for the next evaluation.
void remember_roofline(const Environment& env, const EvalOptions& opts, const nlohmann::json& measured) {
  if (opts.roofline_bandwidth > 0 || opts.roofline_flops > 0 || !measured.is_object() ||
      !measured.value("measured", false) || !number_at(measured, "bandwidth_bytes_per_s") ||
      !number_at(measured, "flops_per_s"))
    return;
  nlohmann::json entry = {{"bandwidth_bytes_per_s", measured["bandwidth_bytes_per_s"]},
                          {"flops_per_s", measured["flops_per_s"]},
                          {"gpu", gpu_name(env, opts.gpu)},
                          {"driver", env.driver},
                          {"torch", env.torch.version}};
  std::string err;
  write_file_atomic(roofline_cache_path(env, opts.gpu), json_text(entry, 1), &err);
}

// Whether `text` at `pos` starts a bare "model_new.py" (not the end of a longer path or name).
bool bare_model_new_at(const std::string& text, size_t pos) {
  if (pos == 0) return true;
  char c = text[pos - 1];
  return !(std::isalnum(static_cast<unsigned char>(c)) || c == '/' || c == '_' || c == '.' || c == '-');
}

}  // namespace

std::string UserPaths::operator()(std::string text) const {
  for (const auto& [from, to] : map) text = replace_all(std::move(text), from, to);
  if (single_file.empty()) return text;
  static constexpr std::string_view kName = "model_new.py";
  std::string out;
  size_t pos = 0;
  for (size_t at; (at = text.find(kName, pos)) != std::string::npos; pos = at + kName.size()) {
    out.append(text, pos, at - pos);
    out += bare_model_new_at(text, at) ? single_file : std::string(kName);
  }
  out.append(text, pos, std::string::npos);
  return out;
}

void UserPaths::apply(nlohmann::json& j) const {
  if (j.is_string()) {
    j = (*this)(j.get<std::string>());
  } else if (j.is_structured()) {
    for (auto& item : j) apply(item);
  }
}

UserPaths user_paths(const fs::path& private_dir, const std::string& candidate, bool single_file,
                     const std::string& task_file) {
  UserPaths p;
  std::string priv = private_dir.string();
  fs::path cand(candidate);
  std::string dir = single_file ? (cand.parent_path().empty() ? "." : cand.parent_path().string())
                                : cand.lexically_normal().string();
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  p.map = {{priv + "/candidate/model_new.py", single_file ? candidate : dir + "/model_new.py"},
           {priv + "/candidate", dir},
           {priv + "/harness/model.py", task_file.empty() ? std::string("<task>") : task_file},
           {priv + "/harness", "<harness>"},
           {priv, "<evaluation>"}};
  if (single_file) p.single_file = candidate;
  return p;
}

namespace {

// The output's last lines; when more was written than is kept, a first line says how much.
std::string clean_tail(const SubprocessResult& r, const UserPaths& paths) {
  std::string tail = tail_lines(paths(r.output), kTailLines);
  if (r.output_left_out == 0) return tail;
  return "(" + human_size(r.output_left_out) + " of the output left out; " + human_size(r.output.size()) +
         " kept)\n" + tail;
}

}  // namespace

EvalResult evaluated_elsewhere(const nlohmann::json& json) {
  EvalResult r;
  r.json = json;
  r.error_kind = EvalError::kRunner;
  auto name = json.is_object() ? json.value("outcome", nlohmann::json()) : nlohmann::json();
  auto outcome = name.is_string() ? outcome_named(name.get<std::string>()) : std::nullopt;
  auto reward = json.is_object() ? json.value("reward", nlohmann::json()) : nlohmann::json();
  if (!outcome || !reward.is_number_integer()) {
    r.error = "the evaluation came back with no outcome or reward anvil knows";
    return r;
  }
  const Outcome o = outcome.value_or(Outcome::kRuntimeError);
  const int value = reward.get<int>();
  if (value < -1 || value == 0 || value > kMaxReward || (o != Outcome::kOk && value != -1) || (o == Outcome::kOk && value < 1)) {
    r.error = "the evaluation came back with reward " + std::to_string(value) + " for outcome " + outcome_name(o);
    return r;
  }
  r.evaluated = true;
  r.outcome = o;
  r.reward = value;
  return r;
}

std::string EvalResult::summary() const {
  if (!evaluated) return "could not evaluate: " + error + "\n";
  const auto& j = json;
  std::string s = j["task"].value("name", std::string("?")) + ": " + outcome_name(outcome) + ", reward " +
                  std::to_string(reward);
  const auto& t = j["timing"];
  auto ms = [](const nlohmann::json& v) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.4g ms", v.get<double>());
    return std::string(buf);
  };
  auto x = [](const nlohmann::json& v) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.2fx", v.get<double>());
    return std::string(buf);
  };
  if (t.is_object() && t.contains("candidate_ms") && t["candidate_ms"].is_number()) {
    s += " | candidate " + ms(t["candidate_ms"]);
    if (t["eager_ms"].is_number()) s += ", eager " + ms(t["eager_ms"]) + " (" + x(t["speedup_eager"]) + ")";
    if (t["compile_ms"].is_number()) s += ", compile " + ms(t["compile_ms"]) + " (" + x(t["speedup_compile"]) + ")";
    s += " [" + t.value("method", std::string()) + "]";
  }
  const auto& v = j["verify"];
  if (v.is_object() && v.contains("passed")) {
    s += " | " + std::to_string(v.value("passed", 0)) + "/" + std::to_string(v.value("trials", 0)) +
         " trials passed (" + v.value("preset", std::string()) + ")";
  }
  s += "\n";
  std::string msg = j.value("message", std::string());
  if (!msg.empty()) s += msg + (ends_with(msg, "\n") ? "" : "\n");
  return s;
}

namespace {

// What the options say of every request (a bad one: its error).
struct Settings {
  Protocol protocol;
  std::string preset;
  nlohmann::json tolerance;
};

std::optional<std::string> settle(const Environment& env, const EvalOptions& opts, Settings* s) {
  try {
    s->protocol = protocol_named(opts.protocol);
    s->preset = effective_preset(opts.preset, s->protocol);
    s->tolerance = tolerance_preset(s->preset);
  } catch (const std::exception& e) {
    return std::string(e.what());
  }
  if (opts.trials < 1 || opts.calls < 1 || opts.warmup < 0 || opts.input_sets < 1) {
    return std::string("trials, calls and input sets must be at least 1");
  }
  if (opts.config && (*opts.config < 0 || *opts.config > kMaxConfig)) {
    return "config " + std::to_string(*opts.config) + ": a launch configuration is an integer from 0 to 2^31-1";
  }
  if (!env.torch.present) return env.probe_error;
  return std::nullopt;
}

// The runner's request (docs/runner-protocol.md). Its timing.measure is ["candidate"] when timing
// is asked for: the baselines' cache key is taken from it as built here, before the baselines to
// measure are added, for an evaluation and for `anvil baselines` alike.
nlohmann::json runner_request(const Environment& env, const EvalOptions& opts, const Settings& s,
                              const fs::path& task_file, const fs::path& candidate_dir, const std::string& kind,
                              Device device, uint32_t seed) {
  std::error_code ec;
  nlohmann::json measure = opts.measure_time ? nlohmann::json::array({"candidate"}) : nlohmann::json::array();
  nlohmann::json request = {
      {"protocol", "anvil.runner/1"},
      {"task_file", task_file.string()},
      {"candidate_dir", candidate_dir.string()},
      {"candidate_kind", kind},
      {"device", to_string(device)},
      {"seed", seed},
      {"trials", opts.trials},
      {"rules", s.protocol.rules()},
      {"tolerance", s.tolerance},
      {"flags",
       {{"allow_tf32", opts.allow_tf32},
        {"cudnn_allow_tf32", opts.allow_tf32 || s.protocol.cudnn_allow_tf32},
        {"cudnn_benchmark", false},
        {"cudnn_deterministic", false}}},
      {"timing",
       {{"measure", measure},
        {"warmup", opts.warmup},
        {"calls", opts.calls},
        {"input_sets", opts.input_sets},
        {"flush_l2", opts.flush_l2 && device == Device::Cuda},
        {"kernel_sum", opts.kernel_sum && device == Device::Cuda},
        // the baselines' kernel sums only where the reward compares them (a profiled pass per model)
        {"baseline_kernel_sum", opts.kernel_sum && opts.timing != TimingMethod::kEvents && device == Device::Cuda},
        {"hide_launch", opts.hide_launch && device == Device::Cuda},
        {"compile_mode", opts.compile_mode}}}};
  if (opts.config) request["config"] = *opts.config;  // not in the baselines' key: it changes only the candidate
  // The jail's system-call filter for the candidate's process too (python/anvil/confine.py installs
  // it last, after its own namespaces are made): one program, built here (util/syscall_filter.h).
  if (const SyscallFilter& f = jail_syscall_filter(); f.ok()) {
    request["syscall_filter"] = base64_encode(std::string_view(reinterpret_cast<const char*>(f.program.data()),
                                                               f.program.size() * sizeof(sock_filter)));
  }
  if (opts.defenses) {
    fs::path cuobjdump = env.cuda_home / "bin" / "cuobjdump";
    request["defenses"] = {{"enabled", true},
                           {"policy", s.protocol.policy()},
                           {"allow_lower_precision", opts.allow_lower_precision},
                           {"roofline", roofline_request(env, opts, device)},
                           {"cuobjdump", fs::exists(cuobjdump, ec) ? nlohmann::json(cuobjdump.string())
                                                                   : nlohmann::json(nullptr)}};
    request["stress"] = {{"trials", opts.stress_trials}};  // vet's rules join it (plan)
  } else {
    request["defenses"] = false;
  }
  return request;
}

// How the runner (or a warm-up) is started: limits, environment, network, GPU; `isolation`
// receives what the result says of it.
SubprocessOptions runner_options(const Environment& env, const EvalOptions& opts, const fs::path& private_dir,
                                 const nlohmann::json& request, Device device, nlohmann::json* isolation) {
  SubprocessOptions so;
  so.cwd = private_dir;  // never the candidate's directory
  so.stdin_data = json_text(request);
  so.capture_fd3 = true;
  so.merge_stderr = true;
  so.max_output = 1 << 20;
  so.timeout = opts.timeout;
  so.cancel = opts.cancel;
  exclude_lock_waits(so, request, opts.defenses);
  so.max_rss_bytes = opts.memory_limit_bytes;
  so.rlimits = {{RLIMIT_FSIZE, static_cast<long>(opts.file_size_limit_bytes)}, {RLIMIT_CORE, 0}};
  so.new_network = network_isolation_available();
  so.env = runner_environment(env);
  so.clear_env = true;
  so.new_pid_namespace = true;
  if (device == Device::Cuda) so.env["CUDA_VISIBLE_DEVICES"] = std::to_string(opts.gpu);
  if (isolation) {
    *isolation = {{"process", "PID 1 of its own PID namespace (every process of the evaluation ends with it), "
                              "its group killed whole on timeout, on its memory limit or when anvil is stopped"},
                  {"network", so.new_network ? "none (own network namespace)" : "not isolated (namespaces unavailable)"},
                  {"environment", "allow-listed variables only"},
                  {"timeout_s", opts.timeout.count()},
                  {"memory_limit_bytes", opts.memory_limit_bytes},
                  {"file_size_limit_bytes", opts.file_size_limit_bytes},
                  {"gpu", device == Device::Cuda ? nlohmann::json(opts.gpu) : nlohmann::json(nullptr)}};
  }
  return so;
}

// " (not counting N s of waiting for the GPU's lock)" when its timeout left out such waits, else "".
std::string lock_wait_note(const SubprocessResult& r) {
  if (r.lock_wait_seconds < 0.05) return "";
  char buf[96];
  std::snprintf(buf, sizeof buf, " (not counting %.1f s of waiting for the GPU's lock)", r.lock_wait_seconds);
  return buf;
}

// The report on fd 3: an object, or null when there is none or it is corrupt.
nlohmann::json parse_report(const SubprocessResult& r) {
  try {
    if (!trim(r.fd3_output).empty()) {
      nlohmann::json report = nlohmann::json::parse(r.fd3_output);
      if (report.is_object()) return report;
    }
  } catch (const std::exception&) {
  }
  return nullptr;
}

// Keeps the baselines measured now in the cache at `bpath` when they were measured clean
// (baselines.h); null entries are not kept. Returns a note for each one not kept.
std::vector<std::string> keep_baselines(const fs::path& bpath, Device device, bool defenses,
                                        const std::string& task_name, const nlohmann::json& env_facts,
                                        const nlohmann::json& eager, const nlohmann::json& compile) {
  nlohmann::json store = nlohmann::json::object();
  if (auto text = read_file(bpath)) store = nlohmann::json::parse(*text, nullptr, false);
  if (!store.is_object()) store = nlohmann::json::object();
  std::vector<std::string> unkept;
  bool changed = false;
  auto keep = [&](const char* name, nlohmann::json t, bool needs_batch) {
    if (!number_at(t, "median_ms")) return;
    auto why = unclean_baseline(t, device, needs_batch);
    t["clean"] = !why;
    if (why) unkept.push_back(std::string(name) + " baseline not kept for later evaluations: " + *why);
    // A concurrent evaluation may have kept a clean one meanwhile: an unclean one never replaces it.
    if (why && store.contains(name) && store[name].is_object() && store[name].value("clean", false)) return;
    store[name] = t;
    changed = true;
  };
  if (!eager.is_null()) keep("eager", eager, defenses);
  if (!compile.is_null()) keep("compile", compile, false);
  if (changed) {
    store["task"] = task_name;
    store["env"] = env_facts;
    std::string err;
    write_file_atomic(bpath, json_text(store, 1), &err);
  }
  return unkept;
}

}  // namespace

namespace {

// The runner as anvil starts it: forked from the warm zygote or a fresh process (env/launch.h).
class PythonRunner : public RunnerLauncher {
 public:
  Launch launch(const Environment& env, const EvalOptions& opts, const nlohmann::json& request,
                const SubprocessOptions& so, const fs::path& scratch) const override {
    return launch_python(env, PyModule::kRunner, opts.zygote_socket, request, so, scratch);
  }
};

// One evaluation as its stages fill it in: prepare (the options, the task, the candidate's private
// copy), build, vet, plan (the runner's request and the baselines it measures), run, interpret (the
// runner's end and report as an outcome) and score (times, bound, speed-ups, reward). A stage that
// ends the evaluation returns its result; the private copy goes with the Evaluation.
struct Evaluation {
  Evaluation(const Environment& e, const EvalOptions& o) : env(e), opts(o), t0(Clock::now()) {}
  ~Evaluation() {
    if (!private_dir.empty()) remove_tree(private_dir);
  }
  Evaluation(const Evaluation&) = delete;
  Evaluation& operator=(const Evaluation&) = delete;

  const Environment& env;
  const EvalOptions& opts;
  Clock::time_point t0;
  EvalResult res;
  UserPaths paths;  // the private copies' names, once made, mapped back to the user's in every answer
  Settings settings;
  std::optional<Task> task;
  fs::path private_dir, work, harness;
  bool is_dir = false;
  std::string kind;    // workdir | file
  Device device = Device::Cpu;  // settled by build()
  double build_seconds = 0;
  std::string vet_note;
  nlohmann::json stress_rules;  // vet's rule of each stress distribution for this task (python/anvil/stress.py)
  uint32_t seed = 0;
  nlohmann::json request;
  fs::path bpath;
  nlohmann::json baselines;
  bool have_eager = false, have_compile = false, want_compile = false;
  SubprocessResult ran;
  nlohmann::json report;  // the runner's, or null
  std::string gpu_lock_note;  // how the GPU's lock was held (lock_gpu); empty: none taken

  nlohmann::json& j() { return res.json; }
  // anvil could not evaluate (environment, usage): no outcome.
  EvalResult fail(EvalError kind, const std::string& why) {
    res.evaluated = false;
    res.error_kind = kind;
    res.error = paths(why);
    paths.apply(res.json);
    return res;
  }
  // The candidate judged: `outcome` (a reward only when ok).
  EvalResult finish(Outcome outcome, const std::string& message) {
    res.outcome = outcome;
    if (outcome != Outcome::kOk) res.reward = -1;
    // A reason stays only as one of this outcome's names (outcome.h): a report's is passed on from
    // what the candidate's own process said of itself, and may be anything, an object included.
    const nlohmann::json& reason = j()["reason"];
    if (!reason.is_string() || !reason_of(outcome, reason.get<std::string>())) j()["reason"] = nullptr;
    j()["outcome"] = outcome_name(outcome);
    j()["message"] = message;
    j()["reward"] = res.reward;
    if (outcome != Outcome::kOk) j()["correct"] = false;
    paths.apply(res.json);
    res.evaluated = true;
    return res;
  }
};

using End = std::optional<EvalResult>;

End prepare(Evaluation& e) {
  e.j() = {{"schema", kSchema},
           {"task", nullptr},
           {"candidate", {{"path", e.opts.candidate}}},
           {"outcome", nullptr},
           {"reason", nullptr},
           {"reward", -1},
           {"correct", false},
           {"message", ""},
           {"verify", nullptr},
           {"timing", nullptr},
           {"build", nullptr},
           {"env", nullptr},
           {"isolation", nullptr},
           {"seconds", nullptr},
           {"output_tail", ""}};
  if (auto bad = settle(e.env, e.opts, &e.settings)) return e.fail(EvalError::kUsage, *bad);
  e.j()["protocol"] = e.settings.protocol.rules();
  if (e.opts.config) e.j()["candidate"]["config"] = *e.opts.config;  // the tune tool's value, not ModelNew's own

  std::string err;
  e.task = load_task(e.env, e.opts.task, &err);
  if (!e.task) return e.fail(EvalError::kUsage, err);  // no such file or row: usage, like a missing candidate (exit 2)
  e.j()["task"] = {{"spec", e.task->spec}, {"name", e.task->name}, {"hash", e.task->hash}};

  // The candidate: a private copy.
  std::error_code ec;
  fs::path cand(e.opts.candidate);
  e.is_dir = fs::is_directory(cand, ec);
  bool is_file = !e.is_dir && fs::is_regular_file(cand, ec);
  if (!e.is_dir && !is_file) return e.fail(EvalError::kUsage, "candidate " + e.opts.candidate + " does not exist");
  e.kind = e.is_dir ? "workdir" : "file";
  try {
    e.private_dir = make_temp_dir(cache_dir(e.env, CacheArea::kTmp), "eval");
  } catch (const std::exception& ex) {
    return e.fail(EvalError::kEnvironment, ex.what());
  }
  e.work = e.private_dir / "candidate";
  e.harness = e.private_dir / "harness";
  e.paths = user_paths(e.private_dir, e.opts.candidate, !e.is_dir, e.task->row < 0 ? e.task->spec : std::string());
  if (e.is_dir) {
    bool refused = false;
    if (!copy_candidate(cand, e.work, &err, &refused)) {  // too large: the candidate's doing, judged (reward -1)
      return refused ? e.finish(Outcome::kLoadError, "the candidate cannot be judged: " + err)
                     : e.fail(EvalError::kEnvironment, "cannot copy the candidate: " + err);
    }
  } else if (!copy_single_file_candidate(cand, e.work, &err)) {
    return e.fail(EvalError::kEnvironment, "cannot copy the candidate: " + err);
  }
  if (!write_file_atomic(e.harness / "model.py", e.task->code, &err, 0444)) return e.fail(EvalError::kEnvironment, err);
  return std::nullopt;
}

// A workdir built through the cache (its device from the build); the device settled.
End build(Evaluation& e) {
  std::error_code ec;
  if (e.is_dir) {
    if (!fs::is_regular_file(e.work / "model_new.py", ec)) {
      e.j()["candidate"]["kind"] = e.kind;
      return e.finish(Outcome::kLoadError, "the candidate has no model_new.py: it must define class ModelNew(nn.Module) with "
                                    "Model's constructor signature, calling cuda_extension's functions");
    }
    BuildReport b = build_workdir(e.env, e.work, e.opts.build);
    e.build_seconds = b.seconds;
    e.j()["build"] = {{"ok", b.ok},           {"mode", b.mode},         {"device", to_string(b.device)}, {"arch", b.arch},
                      {"seconds", b.seconds}, {"compiled", b.compiled()}, {"units", b.units.size()},
                      {"diagnostics", b.diagnostics}};
    // The binding mode, once the scan found one (a workdir it refused, with no kernels/ say, has none:
    // the schema allows only fast and compat).
    if (!b.mode.empty()) e.j()["candidate"]["mode"] = b.mode;
    if (!b.ok) {
      e.j()["candidate"]["kind"] = e.kind;
      if (b.error_kind == "environment_error") return e.fail(EvalError::kEnvironment, b.error);
      return e.finish(Outcome::kCompileError, b.error_kind == "compile_error" ? b.diagnostics : b.error);
    }
    e.device = e.opts.device ? *e.opts.device : b.device.value_or(Device::Cuda);
  } else {
    e.device = device_or_default(e.opts.device, e.env);
  }
  e.j()["candidate"]["kind"] = e.kind;
  e.j()["candidate"]["device"] = to_string(e.device);
  if (e.device == Device::Cuda && e.env.gpus.empty()) {
    return e.fail(EvalError::kEnvironment, "no GPU found: " + e.opts.candidate + " is a CUDA candidate; evaluate it on a GPU host, or evaluate "
                  "its CPU variant here");
  }
  return std::nullopt;
}

// Task vetting (cached per task and environment): a degenerate task is named in the result.
void vet(Evaluation& e) {
  if (!e.opts.vet) return;
  VetOptions vo;
  vo.device = e.device;
  vo.gpu = e.opts.gpu;
  vo.preset = e.settings.preset;
  VetResult v = vet_task(e.env, *e.task, vo);
  if (!v.ok) {
    e.j()["task"]["vet_error"] = v.error;
    return;
  }
  e.stress_rules = v.report.value("stress", nlohmann::json::object());
  e.j()["task"]["flags"] = v.report.value("flags", nlohmann::json::array());
  e.j()["task"]["vet_notes"] = v.report.value("notes", nlohmann::json::array());
  for (const auto& f : e.j()["task"]["flags"]) {
    e.vet_note += (e.vet_note.empty() ? "" : "; ") + f.value("flag", std::string()) + ": " +
                  f.value("detail", std::string());
  }
  if (!e.vet_note.empty()) e.vet_note = "the task is degenerate (a trivial answer may pass): " + e.vet_note;
}

// The runner's request, and the baselines it measures: those not cached clean per task, GPU,
// driver, torch, CUDA, flags and timing method.
void plan(Evaluation& e) {
  const EvalOptions& opts = e.opts;
  e.seed = opts.seed ? *opts.seed : static_cast<uint32_t>(std::random_device{}() & 0x7fffffff);
  e.request = runner_request(e.env, opts, e.settings, e.harness / "model.py", e.work, e.kind, e.device, e.seed);
  if (e.request.contains("stress") && e.stress_rules.is_object() && !e.stress_rules.empty()) {
    e.request["stress"]["rules"] = e.stress_rules;
  }
  std::string bkey = baseline_key(e.env, e.task->hash, e.request, e.device);
  e.bpath = baseline_path(e.env, bkey);
  e.baselines = opts.use_baseline_cache ? load_baselines(e.bpath) : nlohmann::json::object();
  e.have_eager = e.baselines.is_object() && e.baselines.contains("eager");
  e.have_compile = e.baselines.is_object() && e.baselines.contains("compile");
  e.want_compile = opts.compile_mode != "none";
  if (!opts.measure_time) {
    e.have_eager = e.have_compile = e.want_compile = false;
    return;
  }
  if (!e.have_eager) e.request["timing"]["measure"].push_back("eager");
  if (e.want_compile && !e.have_compile) e.request["timing"]["measure"].push_back("compile");
  // What the judge needs to tell whether its batch holds the claim down (reward.h): it times the
  // batch again while it does.
  const char* claim_field = timing_method_field(opts.timing);
  nlohmann::json bound = {{"slack", kBatchSlack}, {"claim", claim_field}};
  if (e.have_eager) {
    const nlohmann::json& eager = e.baselines["eager"];
    if (auto ms = number_at(eager, claim_field)) bound["eager_ms"] = *ms;
    if (eager.contains("batch")) {
      if (auto pc = number_at(eager["batch"], "per_call_ms")) bound["eager_batch_per_call_ms"] = *pc;
    }
  }
  e.request["timing"]["bound"] = bound;
}

// The GPU's lock, when the options ask for it (EvalOptions::gpu_lock): named in the request, and how
// it was held in the result.
void lock_gpu(Evaluation& e) {
  if (e.device != Device::Cuda || !e.opts.gpu_lock) return;
  bool together = *e.opts.gpu_lock == Prepare::kTogether && e.opts.defenses;
  e.request["gpu_lock"] = gpu_lock_path(e.env, e.opts.gpu).string();
  if (together) e.request["prepare"] = "together";
  e.gpu_lock_note = together ? "prepared beside the others of its wave (the GPU's lock shared), then the lock "
                               "exclusive for everything timed and everything the candidate ran"
                             : "exclusive from CUDA's start to the end";
}

// The runner, started as the options say (or by opts.runner), and what it left: its end and report.
End run(Evaluation& e) {
  nlohmann::json isolation;
  SubprocessOptions so = runner_options(e.env, e.opts, e.private_dir, e.request, e.device, &isolation);
  e.j()["isolation"] = isolation;
  if (!e.gpu_lock_note.empty()) e.j()["isolation"]["gpu_lock"] = e.gpu_lock_note;
  static const PythonRunner python_runner;
  const RunnerLauncher& runner = e.opts.runner ? *e.opts.runner : python_runner;
  auto tr = Clock::now();
  Launch launched = runner.launch(e.env, e.opts, e.request, so, e.private_dir);
  e.ran = std::move(launched.result);
  if (!launched.zygote_error.empty()) e.j()["isolation"]["zygote_error"] = launched.zygote_error;  // then fresh
  e.j()["isolation"]["runner"] =
      launched.zygote ? "forked from the warm zygote at " + launched.socket : "fresh process";
  e.j()["isolation"]["ended"] =
      launched.ended_at_report ? "at its report (killed then, its teardown not waited for)" : "at its exit";
  e.j()["output_tail"] = clean_tail(e.ran, e.paths);
  e.j()["seconds"] = {{"build", e.build_seconds}, {"run", since(tr)}, {"total", since(e.t0)}};
  if (!e.ran.started) return e.fail(EvalError::kRunner, "cannot start the runner (" + e.env.python.string() + "): " + e.ran.error);
  e.report = parse_report(e.ran);  // a corrupt report is the same as none
  return std::nullopt;
}

// The runner's end and report as the candidate's outcome: every end but a correct candidate's.
End interpret(Evaluation& e) {
  const SubprocessResult& r = e.ran;
  nlohmann::json& j = e.j();
  const nlohmann::json& report = e.report;
  // What a process that died said last: its Python stack when it crashed (anvil's frames left out),
  // else its output's last lines.
  auto last_words = [&] {
    std::string crash = python_crash(e.paths(r.output), {(e.env.home / "python" / "anvil").string() + "/",
                                                         "/torch/nn/modules/module.py", "/threading.py"});
    return crash.empty() ? tail_lines(j["output_tail"].get<std::string>(), 8) : crash;
  };
  if (report.is_object()) {
    j["env"] = report.value("env", nlohmann::json());
    if (report.contains("defenses")) {
      j["defenses"] = report["defenses"];
      // The candidate's process's host-memory limit (RLIMIT_DATA, python/anvil/confine.py), as isolation says it.
      const nlohmann::json& sandbox = j["defenses"].value("sandbox", nlohmann::json());
      if (sandbox.is_object() && sandbox.contains("memory") && j["isolation"].is_object()) {
        j["isolation"]["candidate_memory"] = sandbox["memory"];
      }
    }
    if (e.device == Device::Cuda) {
      remember_roofline(e.env, e.opts,
                        j.value("defenses", nlohmann::json::object()).value("roofline", nlohmann::json()));
    }
    if (report.contains("hack")) j["hack"] = report["hack"];
    if (report.contains("reason")) j["reason"] = report["reason"];
    if (report.contains("seconds") && report["seconds"].is_object()) j["seconds"]["runner"] = report["seconds"];
    if (!e.is_dir && report.contains("builds") && report["builds"].is_array()) {
      // A single file's load_inline modules, built by its judge: compiled 0 where each was in the
      // build cache already (built ahead, or by an earlier evaluation).
      bool ok = true;
      int compiled = 0;
      double seconds = 0;
      for (const auto& b : report["builds"]) {
        if (!b.is_object()) continue;
        ok = ok && b.value("ok", false) == true;
        if (b.contains("compiled") && b["compiled"].is_number_integer()) compiled += b["compiled"].get<int>();
        if (b.contains("seconds") && b["seconds"].is_number()) seconds += b["seconds"].get<double>();
      }
      j["build"] = {{"ok", ok}, {"mode", "load_inline"}, {"modules", report["builds"].size()},
                    {"compiled", compiled}, {"seconds", seconds}};
    }
    j["verify"] = report.value("verify", nlohmann::json());
    if (j["verify"].is_object()) {
      j["verify"]["preset"] = e.settings.preset;
      j["verify"]["seed"] = e.seed;
      j["verify"]["trials"] = e.opts.trials;
      j["verify"]["tolerance"] = e.settings.tolerance;
    }
  }
  if (report.is_object() && report.value("status", std::string()) != "done") {
    // The runner could not do its work (a bad request, no device): not the candidate's fault.
    e.res.memory_limited = report.value("memory_limited", false) == true;
    return e.fail(EvalError::kRunner, "the runner could not evaluate: " + report.value("message", std::string("no reason given")) +
                  (report.value("detail", std::string()).empty()
                       ? ""
                       : "\n" + tail_lines(report.value("detail", std::string()), 8)));
  }
  if (r.cancelled) return e.fail(EvalError::kCancelled, "the evaluation was ended by its caller (the episode ended)");
  if (r.timed_out) {
    return e.finish(Outcome::kTimeout, "the evaluation did not finish within " + std::to_string(e.opts.timeout.count()) +
                                   " s" + lock_wait_note(r) + " and was killed (a kernel or loop that never ends?)");
  }
  if (r.memory_exceeded) {
    return e.finish(Outcome::kRuntimeError, "the evaluation used more than " +
                                         std::to_string(e.opts.memory_limit_bytes >> 30) +
                                         " GiB of memory and was killed");
  }
  if (!report.is_object() && r.fd3_left_out > 0) {
    return e.finish(Outcome::kRuntimeError, "the evaluation's report was larger than " + human_size(r.fd3_output.size()) +
                                                " (" + human_size(r.fd3_left_out) + " more were left out) and could not be read\n" +
                                                last_words());
  }
  if (!report.is_object()) {
    std::string how = r.signal ? "was killed by signal " + std::to_string(r.signal) + " (" + strsignal(r.signal) + ")"
                               : "exited with code " + std::to_string(r.exit_code);
    return e.finish(Outcome::kRuntimeError, "the candidate's process " + how + " before the evaluation finished\n" +
                                         last_words());
  }
  if (report["outcome"].is_null()) return std::nullopt;  // correct: scored next
  // A name a runner may not report (or none) is the candidate's process misbehaving: runtime_error.
  std::optional<Outcome> named =
      outcome_named(report["outcome"].is_string() ? report["outcome"].get<std::string>() : std::string());
  Outcome outcome = named && runner_reports(*named) ? *named : Outcome::kRuntimeError;
  std::string message = report.value("message", std::string());
  std::string detail = report.value("detail", std::string());
  if (report.value("reason", nlohmann::json()) == "process_died") {
    // The candidate's process died: its Python stack, when it crashed, without anvil's frames;
    // else what it printed last.
    message += "\n" + last_words();
  } else if (outcome == Outcome::kHackSuspected || outcome == Outcome::kWrongAnswer) {
    // The message says it; the detail (every finding) stays in the report's hack object.
  } else if (!detail.empty() && detail.find(message) == std::string::npos) {
    message += "\n" + tail_lines(detail, 12);
  } else if (!detail.empty()) {
    message = tail_lines(detail, 12);
  }
  return e.finish(outcome, message);
}

std::optional<double> batch_per_call(const nlohmann::json& t) {
  return t.is_object() && t.contains("batch") ? number_at(t["batch"], "per_call_ms") : std::nullopt;
}

nlohmann::json or_null(std::optional<double> v) { return v ? nlohmann::json(*v) : nlohmann::json(nullptr); }

// The hack object of a claim the judge's clock proves forged (b.forged, on a GPU), with its evidence.
nlohmann::json forged_timing(const TimeBound& b, const nlohmann::json& cand_t, const nlohmann::json& eager_t,
                             std::optional<double> eager_ms) {
  char buf[360];
  std::snprintf(buf, sizeof buf, "the candidate's process claimed %.4g ms per call, but the judge's own clock "
                "allows no less than %.4g ms even at eager's fastest call (more than %.0fx apart): the timing "
                "was forged",
                b.claimed_ms, *b.floor_ms, kForgedRatio);
  nlohmann::json cand_batch = cand_t.value("batch", nlohmann::json::object());
  return {{"reason", "timing_forged"},
          {"reasons", {{{"reason", "timing_forged"}, {"message", buf}}}},
          {"evidence",
           {{"claimed_ms", b.claimed_ms},
            {"vouched_ms", *b.vouched_ms},
            {"floor_ms", *b.floor_ms},
            {"candidate_batch_per_call_ms", or_null(batch_per_call(cand_t))},
            {"candidate_timed_batches", cand_batch.value("timed_batches", nlohmann::json())},
            {"eager_batch_per_call_ms", or_null(batch_per_call(eager_t))},
            {"eager_ms", or_null(eager_ms)},
            {"eager_min_ms", or_null(number_at(eager_t, "min_ms"))}}}};
}

// A correct candidate: its time (the claim bounded by the judge's clock, reward.h), the speed-ups,
// the milestone reward, the notes; the baselines measured now kept when clean.
EvalResult score(Evaluation& e) {
  const EvalOptions& opts = e.opts;
  nlohmann::json& j = e.j();
  j["correct"] = true;
  const nlohmann::json& timing = e.report.value("timing", nlohmann::json::object());
  const char* field = timing_method_field(opts.timing);
  nlohmann::json cand_t = timing.value("candidate", nlohmann::json());
  nlohmann::json eager_t = e.have_eager ? e.baselines["eager"] : timing.value("eager", nlohmann::json());
  nlohmann::json compile_t = !e.want_compile ? nlohmann::json(nullptr)
                             : e.have_compile ? e.baselines["compile"]
                                              : timing.value("compile", nlohmann::json());
  if (e.have_eager) eager_t["cached"] = true;
  if (e.have_compile && e.want_compile) compile_t["cached"] = true;
  auto claimed_ms = number_at(cand_t, field);
  auto eager_ms = number_at(eager_t, field);
  auto compile_ms = number_at(compile_t, field);
  auto per_call = batch_per_call;
  auto opt = or_null;
  std::optional<double> cand_ms;
  const bool credited = speed_credited(e.device);  // reward.h: no speed credit on a CPU
  nlohmann::json bound = nullptr;
  if (claimed_ms && *claimed_ms > 0) {
    TimeBound b = bound_time(*claimed_ms, per_call(cand_t), per_call(eager_t), eager_ms, number_at(eager_t, "min_ms"));
    // A forgery is decided where the judge's clock is the device's own (a GPU); on a CPU no speed is
    // credited at all, so a gap between the claim and the clock there changes nothing.
    if (opts.defenses && b.forged && credited) {
      j["reason"] = "timing_forged";
      j["hack"] = forged_timing(b, cand_t, eager_t, eager_ms);
      return e.finish(Outcome::kHackSuspected, j["hack"]["reasons"][0]["message"].get<std::string>());
    }
    if (opts.defenses && !b.vouched_ms) {
      bound = {{"claimed_ms", b.claimed_ms}, {"vouched_ms", nullptr}, {"limited_by", "no judge's batch"}};
    } else {
      cand_ms = b.candidate_ms;
      bound = {{"claimed_ms", b.claimed_ms},
               {"vouched_ms", opt(b.vouched_ms)},
               {"slack", kBatchSlack},
               {"limited_by", b.limited ? "the judge's batch" : "the claim"}};
      if (b.floor_ms) bound["floor_ms"] = *b.floor_ms;
    }
  }
  std::optional<double> se, sc;
  if (cand_ms && *cand_ms > 0) {
    if (eager_ms) se = *eager_ms / *cand_ms;
    if (compile_ms) sc = *compile_ms / *cand_ms;
  }
  j["timing"] = {{"method", timing_method_name(opts.timing)},
                 {"candidate_ms", opt(cand_ms)},
                 {"eager_ms", opt(eager_ms)},
                 {"compile_ms", opt(compile_ms)},
                 {"speedup_eager", opt(se)},
                 {"speedup_compile", opt(sc)},
                 {"bound", bound},
                 {"compile_mode", opts.compile_mode},
                 {"candidate", cand_t},
                 {"eager", eager_t},
                 {"compile", compile_t},
                 {"calls", opts.calls},
                 {"warmup", opts.warmup},
                 {"input_sets", opts.input_sets},
                 {"flush_l2", opts.flush_l2 && e.device == Device::Cuda},
                 {"hide_launch", opts.hide_launch && e.device == Device::Cuda},
                 {"speed_credited", credited}};
  e.res.reward = milestone_reward(true, credited ? se : std::nullopt, credited ? sc : std::nullopt);
  std::string note;
  if (!opts.measure_time) note = "verified only: timing was not asked for, so no speed reward";
  else if (!claimed_ms) note = "the candidate's time was not measured; no speed reward";
  else if (!cand_ms) note = "the judge's clock could not time the candidate against eager; no speed reward";
  else if (!compile_ms && e.want_compile) note = "torch.compile baseline unavailable: " +
                                                 compile_t.value("error", std::string("not measured"));
  if (!credited) {
    note += (note.empty() ? "" : "\n") + std::string(kNoSpeedCreditNote);
  } else if (cand_ms && bound.is_object() && bound.value("limited_by", std::string()) == "the judge's batch") {
    char buf[256];
    std::snprintf(buf, sizeof buf, "the candidate's own timing (%.4g ms) is faster than the judge's clock allows: "
                  "%.4g ms used", *claimed_ms, *cand_ms);
    note += (note.empty() ? "" : "\n") + std::string(buf);
  }
  if (opts.use_baseline_cache && opts.measure_time) {
    for (const auto& u : keep_baselines(e.bpath, e.device, opts.defenses, e.task->name, j["env"],
                                        e.have_eager ? nlohmann::json(nullptr) : eager_t,
                                        e.want_compile && !e.have_compile ? compile_t : nlohmann::json(nullptr))) {
      note += (note.empty() ? "" : "\n") + u;
    }
  }
  j["seconds"]["total"] = since(e.t0);
  if (!e.vet_note.empty()) note = note.empty() ? e.vet_note : note + "\n" + e.vet_note;
  return e.finish(Outcome::kOk, note);
}

// One evaluation; *seed: the seed its runner was given (unset when none ran).
EvalResult evaluate_once(const Environment& env, const EvalOptions& opts, std::optional<uint32_t>* seed) {
  Evaluation e(env, opts);
  if (End end = prepare(e)) return *end;
  if (End end = build(e)) return *end;
  vet(e);
  plan(e);
  *seed = e.seed;
  lock_gpu(e);
  if (End end = run(e)) return *end;
  if (End end = interpret(e)) return *end;
  return score(e);
}

}  // namespace

EvalResult evaluate(const Environment& env, const EvalOptions& opts) {
  std::optional<uint32_t> seed;
  EvalResult r = evaluate_once(env, opts, &seed);
  // The GPU ran out of memory beside a wave's memory, the wave's doing as the judge measured it (its
  // report's memory_limited): for the judge's own work, the candidate's process holding no more than
  // its share; or for the candidate's process, holding no more than its share while the parked
  // evaluations held more than was free (anvil.judge memory_short). Never on the candidate's word
  // alone: a second try is a second draw of the judge's secrets.
  if (opts.gpu_lock != Prepare::kTogether || r.evaluated || !r.memory_limited || !seed) return r;
  // Again with the GPU to itself, on the same seed (the weights'; the judge draws its secrets, the trials'
  // seeds among them, afresh).
  EvalOptions alone = opts;
  alone.gpu_lock = Prepare::kAlone;
  alone.seed = seed;
  EvalResult again = evaluate_once(env, alone, &seed);
  if (again.json.is_object()) {
    again.json["isolation"]["first_try"] = {{"message", r.error},
                                            {"why_again", "the GPU ran out of memory beside the evaluations "
                                                          "prepared with it, as the judge measured: run again alone"}};
  }
  return again;
}

const char* eval_error_name(EvalError e) {
  switch (e) {
    case EvalError::kUsage: return "usage";
    case EvalError::kEnvironment: return "environment";
    case EvalError::kRunner: return "runner";
    case EvalError::kCancelled: return "cancelled";
  }
  return "environment";
}

const char* baselines_status_name(BaselinesResult::Status s) {
  switch (s) {
    case BaselinesResult::Status::kCached: return "cached";
    case BaselinesResult::Status::kMeasured: return "measured";
    case BaselinesResult::Status::kUnclean: return "not_kept";
    case BaselinesResult::Status::kTaskError: return "task_error";
    case BaselinesResult::Status::kError: break;
  }
  return "error";
}

namespace {

// One task's baselines request, ready to run: the task's private copy (removed with the plan), the
// runner's request of the baselines alone, and where its baselines are cached.
struct BaselinePlan {
  Settings settings;
  std::optional<Task> task;
  Device device = Device::Cpu;
  fs::path private_dir;
  nlohmann::json request;
  fs::path cache_path;
  BaselinePlan() = default;
  BaselinePlan(const BaselinePlan&) = delete;
  BaselinePlan& operator=(const BaselinePlan&) = delete;
  ~BaselinePlan() {
    if (!private_dir.empty()) remove_tree(private_dir);
  }
};

// `copy`: the task's private copy made (for a run); without it, the request and key alone.
std::optional<std::string> plan_baselines(const Environment& env, const EvalOptions& opts, BaselinePlan* p,
                                          bool copy = true) {
  if (auto bad = settle(env, opts, &p->settings)) return bad;
  std::string err;
  p->task = load_task(env, opts.task, &err);
  if (!p->task) return err;
  p->device = device_or_default(opts.device, env);
  if (p->device == Device::Cuda && env.gpus.empty()) {
    return std::string("no GPU found: measure CPU baselines with --device cpu, or run on a GPU host");
  }
  if (copy) {
    try {
      p->private_dir = make_temp_dir(cache_dir(env, CacheArea::kTmp), "baselines");
    } catch (const std::exception& e) {
      return std::string(e.what());
    }
    std::error_code ec;
    fs::create_directories(p->private_dir / "candidate", ec);  // empty: nothing is imported from it
    if (ec) return "cannot create " + (p->private_dir / "candidate").string() + ": " + ec.message();
    if (!write_file_atomic(p->private_dir / "harness" / "model.py", p->task->code, &err, 0444)) return err;
  }
  uint32_t seed = opts.seed ? *opts.seed : static_cast<uint32_t>(std::random_device{}() & 0x7fffffff);
  EvalOptions timed = opts;
  timed.measure_time = true;  // the key of an evaluation that times its candidate (runner_request)
  p->request = runner_request(env, timed, p->settings, p->private_dir / "harness" / "model.py",
                              p->private_dir / "candidate", "none", p->device, seed);
  p->cache_path = baseline_path(env, baseline_key(env, p->task->hash, p->request, p->device));
  p->request["timing"]["measure"] = nlohmann::json::array();
  return std::nullopt;
}

}  // namespace

bool baselines_cached(const Environment& env, const EvalOptions& opts) {
  BaselinePlan p;
  if (plan_baselines(env, opts, &p, /*copy=*/false)) return false;
  nlohmann::json cached = load_baselines(p.cache_path);
  return cached.contains("eager") && (opts.compile_mode == "none" || cached.contains("compile"));
}

fs::path gpu_lock_path(const Environment& env, int gpu) {
  fs::path dir = cache_dir(env, CacheArea::kLocks);
  std::error_code ec;
  fs::create_directories(dir, ec);  // else the process that opens the file says what is wrong
  return dir / ("gpu" + std::to_string(gpu) + ".lock");
}

BaselinesResult measure_baselines(const Environment& env, const EvalOptions& opts, const std::string& gpu_lock,
                                  Prepare prepare, uint64_t warm_peak_bytes) {
  auto t0 = Clock::now();
  BaselinesResult res;
  nlohmann::json& j = res.json;
  j = {{"task", {{"spec", opts.task}}}, {"status", nullptr}, {"message", ""}, {"device", nullptr},
       {"eager_ms", nullptr}, {"compile_ms", nullptr}, {"eager", nullptr}, {"compile", nullptr},
       {"notes", nlohmann::json::array()}, {"seconds", nullptr}};
  UserPaths paths;
  // total; run (the runner's process); runner (its own clock); judge (its phases)
  nlohmann::json secs = nlohmann::json::object();
  auto done = [&](BaselinesResult::Status status, const std::string& message) {
    res.status = status;
    res.message = paths(message);
    j["status"] = baselines_status_name(status);
    j["message"] = res.message;
    secs["total"] = since(t0);
    j["seconds"] = secs;
    paths.apply(j);
    return std::move(res);
  };
  BaselinePlan p;
  if (auto bad = plan_baselines(env, opts, &p)) return done(BaselinesResult::Status::kError, *bad);
  const Task& task = *p.task;
  j["task"] = {{"spec", task.spec}, {"name", task.name}, {"hash", task.hash}};
  j["device"] = to_string(p.device);
  paths = user_paths(p.private_dir, "", false, task.row < 0 ? task.spec : std::string());
  const char* field = timing_method_field(opts.timing);
  nlohmann::json cached = opts.use_baseline_cache ? load_baselines(p.cache_path) : nlohmann::json::object();
  bool want_compile = opts.compile_mode != "none";
  bool have_eager = cached.contains("eager"), have_compile = cached.contains("compile");
  nlohmann::json& measure = p.request["timing"]["measure"];
  if (!have_eager) measure.push_back("eager");
  if (want_compile && !have_compile) measure.push_back("compile");
  nlohmann::json eager_t = have_eager ? cached["eager"] : nlohmann::json(nullptr);
  nlohmann::json compile_t = have_compile && want_compile ? cached["compile"] : nlohmann::json(nullptr);
  auto figures = [&] {
    j["eager"] = eager_t;
    j["compile"] = compile_t;
    if (auto ms = number_at(eager_t, field)) j["eager_ms"] = *ms;
    if (auto ms = number_at(compile_t, field)) j["compile_ms"] = *ms;
  };
  if (measure.empty()) {
    figures();
    return done(BaselinesResult::Status::kCached, "");
  }
  if (!gpu_lock.empty()) p.request["gpu_lock"] = gpu_lock;
  if (!gpu_lock.empty() && prepare == Prepare::kTogether) {
    p.request["prepare"] = "together";
    // The GPU's size: a large task's room in the wave (the judge's wave_room); unknown, it prepares alone.
    if (opts.gpu >= 0 && opts.gpu < static_cast<int>(env.gpus.size()) && env.gpus[opts.gpu].memory_bytes > 0) {
      p.request["gpu_bytes"] = env.gpus[opts.gpu].memory_bytes;
    }
    if (warm_peak_bytes > 0) p.request["warm_peak_bytes"] = warm_peak_bytes;
  }
  nlohmann::json isolation;
  SubprocessOptions so = runner_options(env, opts, p.private_dir, p.request, p.device, &isolation);
  auto tr = Clock::now();
  Launch launched = launch_python(env, PyModule::kRunner, opts.zygote_socket, p.request, so, p.private_dir);
  const SubprocessResult& r = launched.result;
  isolation["runner"] = launched.zygote ? "forked from the warm zygote at " + launched.socket : "fresh process";
  if (!launched.zygote_error.empty()) isolation["zygote_error"] = launched.zygote_error;
  j["isolation"] = isolation;
  if (!r.started) return done(BaselinesResult::Status::kError, "cannot start the runner: " + r.error);
  nlohmann::json report = parse_report(r);
  secs["run"] = since(tr);
  if (report.is_object()) {
    secs["runner"] = report.value("seconds", nlohmann::json());
    nlohmann::json defenses = report.value("defenses", nlohmann::json::object());
    if (defenses.is_object()) {
      // The judge's own phases (fork, setup, check_reference, eager_batch, quiet_gpu, baselines, ...)
      nlohmann::json phases = defenses.value("seconds", nlohmann::json::object());
      if (phases.is_object() && phases.contains("judge")) secs["judge"] = phases["judge"];
      // How NVML numbered the GPU's processes for the judge (its evidence of others on the GPU)
      if (defenses.contains("gpu_processes_seen")) j["gpu_processes_seen"] = defenses["gpu_processes_seen"];
      // Its set of inputs' size, how it was drawn, a wave's room it took and the judge's peak memory
      if (defenses.contains("inputs")) j["inputs"] = defenses["inputs"];
    }
  }
  if (!report.is_object()) {
    std::string how = r.timed_out ? "did not finish within " + std::to_string(opts.timeout.count()) + " s" +
                                        lock_wait_note(r)
                      : r.memory_exceeded ? "used more than " + std::to_string(opts.memory_limit_bytes >> 30) +
                                                " GiB of memory"
                      : r.signal ? "was killed by signal " + std::to_string(r.signal)
                                 : "exited with code " + std::to_string(r.exit_code);
    return done(BaselinesResult::Status::kError, "the runner " + how + " without a report\n" + tail_lines(r.output, 8));
  }
  if (report.value("status", std::string()) != "done") {
    return done(BaselinesResult::Status::kError, "the runner could not measure: " +
                                                     report.value("message", std::string("no reason given")));
  }
  if (!report["outcome"].is_null()) {
    std::string message = report.value("message", std::string());
    std::string detail = report.value("detail", std::string());
    if (!detail.empty() && detail.find(message) == std::string::npos) message += "\n" + tail_lines(detail, 12);
    bool task_error = report["outcome"] == outcome_name(Outcome::kTaskError);
    return done(task_error ? BaselinesResult::Status::kTaskError : BaselinesResult::Status::kError, message);
  }
  const nlohmann::json& timing = report.value("timing", nlohmann::json::object());
  nlohmann::json new_eager = have_eager ? nlohmann::json(nullptr) : timing.value("eager", nlohmann::json());
  nlohmann::json new_compile =
      want_compile && !have_compile ? timing.value("compile", nlohmann::json()) : nlohmann::json(nullptr);
  if (!have_eager) eager_t = new_eager;
  if (want_compile && !have_compile) compile_t = new_compile;
  figures();
  std::vector<std::string> notes = keep_baselines(p.cache_path, p.device, opts.defenses, task.name,
                                                  report.value("env", nlohmann::json()), new_eager, new_compile);
  bool kept = notes.empty();
  if (want_compile && !number_at(compile_t, "median_ms")) {
    notes.push_back("torch.compile baseline unavailable: " + compile_t.value("error", std::string("not measured")));
  }
  j["notes"] = notes;
  return done(kept ? BaselinesResult::Status::kMeasured : BaselinesResult::Status::kUnclean,
              notes.empty() ? std::string() : join(notes, "\n"));
}

WarmResult warm_compile_caches(const Environment& env, const EvalOptions& opts) {
  BaselinePlan p;
  if (auto bad = plan_baselines(env, opts, &p)) return {*bad};
  // taken shared (anvil.warm): beside other warm-ups and vettings, never while a measurement times
  if (p.device == Device::Cuda) p.request["gpu_lock"] = gpu_lock_path(env, opts.gpu).string();
  SubprocessOptions so = runner_options(env, opts, p.private_dir, p.request, p.device, nullptr);
  Launch launched = launch_python(env, PyModule::kWarm, opts.zygote_socket, p.request, so, p.private_dir);
  const SubprocessResult& r = launched.result;
  if (!r.started) return {"could not run: " + r.error};
  nlohmann::json report = parse_report(r);
  if (report.is_object() && report.value("status", std::string()) == "done") {
    WarmResult done;
    if (report.contains("peak_bytes") && report["peak_bytes"].is_number_unsigned()) done.peak_bytes = report["peak_bytes"];
    return done;
  }
  UserPaths paths = user_paths(p.private_dir, "", false, p.task->row < 0 ? p.task->spec : std::string());
  if (report.is_object()) {
    return {paths(report.value("message", std::string("no reason given"))), report.value("memory_limited", false)};
  }
  return {paths(r.timed_out ? "timed out" : "exited with code " + std::to_string(r.exit_code) + " without a report")};
}

namespace {

// A single file's load_inline modules, read from its source (python -m anvil.ahead: nothing of it is
// run) and built with build_sources as its evaluation's judge builds them (the same texts and flags,
// so the same cache keys). One report over them all: every module's units (named "NAME/main.cpp"),
// ok when each built; a call that could not be read is a warning ("not built ahead: ..."), left
// for the evaluation to build.
BuildReport prebuild_single_file(const Environment& env, const fs::path& file, const BuildOptions& opts) {
  auto t0 = std::chrono::steady_clock::now();
  BuildReport all;
  all.ok = true;
  all.mode = "load_inline";
  TempDir scratch;
  try {
    scratch = TempDir(cache_dir(env, CacheArea::kTmp), "prebuild");
  } catch (const std::exception& e) {
    all.ok = false;
    all.error_kind = "environment_error";
    all.error = e.what();
    return all;
  }
  // The file is read, never run, but it is anyone's: the reader gets a minute and 4 GiB.
  SubprocessOptions so;
  so.timeout = std::chrono::minutes(1);
  so.merge_stderr = false;
  so.env["PYTHONPATH"] = env.python_path();
  so.rlimits = {{RLIMIT_AS, 4l << 30}};
  SubprocessResult r = run_subprocess({env.python.string(), "-m", "anvil.ahead", "--out",
                                       (scratch.path() / "sources").string(), file.string()},
                                      so);
  nlohmann::json reply;
  try {
    reply = nlohmann::json::parse(r.output);
  } catch (const std::exception&) {
  }
  if (!reply.is_object() || !reply["builds"].is_array()) {
    all.warnings.push_back("not built ahead: the file's load_inline calls could not be read (" +
                           (r.ok() ? std::string("no JSON reply") : r.describe() + ": " + tail_lines(r.err_output, 2)) + ")");
    return all;
  }
  for (const auto& skipped : reply.value("skipped", nlohmann::json::array())) {
    all.warnings.push_back("not built ahead: line " + std::to_string(skipped.value("line", 0)) + ": " +
                           skipped.value("why", std::string("?")));
  }
  auto strings = [](const nlohmann::json& j) {
    std::vector<std::string> v;
    if (j.is_array()) {
      for (const auto& e : j) v.push_back(e.is_string() ? e.get<std::string>() : std::string());
    }
    return v;
  };
  // The judge's `anvil build-sources` takes no --arch: the GPU's (else sm_90a) is its key's.
  BuildOptions as_judged = opts;
  as_judged.arch.clear();
  int i = 0;
  for (const auto& b : reply["builds"]) {
    SourcesSpec spec;
    spec.name = b.value("name", std::string());
    for (const auto& s : strings(b["sources"])) spec.sources.emplace_back(s);
    spec.cflags = strings(b["cflags"]);
    spec.cuda_cflags = strings(b["cuda_cflags"]);
    spec.ldflags = strings(b["ldflags"]);
    spec.include_dirs = strings(b["include_dirs"]);
    spec.out_dir = scratch.path() / ("module-" + std::to_string(i++));
    BuildReport one = build_sources(env, spec, as_judged);
    for (auto u : one.units) {
      u.source = spec.name + "/" + u.source;
      all.units.push_back(u);
    }
    all.device = one.device;
    all.arch = one.arch;
    all.warnings.insert(all.warnings.end(), one.warnings.begin(), one.warnings.end());
    if (!one.ok && all.ok) {
      all.ok = false;
      all.error_kind = one.error_kind;
      all.error = one.error;
      all.diagnostics = one.diagnostics;
    }
  }
  all.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return all;
}

}  // namespace

std::optional<BuildReport> prebuild(const Environment& env, const std::string& candidate, const BuildOptions& opts) {
  std::error_code ec;
  fs::path cand(candidate);
  if (fs::is_regular_file(cand, ec) && cand.extension() == ".py") return prebuild_single_file(env, cand, opts);
  if (!fs::is_directory(cand, ec) || !fs::exists(cand / "model_new.py", ec)) return std::nullopt;
  BuildReport b;
  TempDir scratch;
  try {
    scratch = TempDir(cache_dir(env, CacheArea::kTmp), "prebuild");
  } catch (const std::exception& e) {
    b.error_kind = "environment_error";
    b.error = e.what();
    return b;
  }
  std::string err;
  if (!copy_candidate(cand, scratch.path() / "candidate", &err)) {
    b.error_kind = "workdir_error";
    b.error = "cannot copy the candidate: " + err;
  } else {
    b = build_workdir(env, scratch.path() / "candidate", opts);
  }
  return b;
}

}  // namespace anvil
