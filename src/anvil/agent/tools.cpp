// tools.cpp: the tool box's schemas, argument checks and the harness tools.
//
// compile builds the workdir in place (the agent may import the module in its
// own tests); verify and profile go through evaluate(), which copies the
// workdir privately and judges it against the task's pristine reference, so
// nothing the agent changed outside kernels/ and model_new.py takes effect.
// Evaluations hold a GPU slot (one timed evaluation per GPU at a time);
// builds hold a build slot.
#include "anvil/agent/tools.h"

#include "anvil/env/cache_layout.h"
#include "anvil/agent/ncu_report.h"
#include "anvil/env/reward.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "anvil/env/build.h"
#include "anvil/env/confine.h"
#include "anvil/env/reference_profile.h"
#include "anvil/env/task.h"
#include "anvil/util/fs.h"
#include "anvil/util/json_text.h"
#include "anvil/util/line_child.h"
#include "anvil/util/strings.h"
#include "anvil/util/subprocess.h"

namespace anvil {

namespace {

using Json = nlohmann::json;
using Clock = std::chrono::steady_clock;

double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

Json fn(const std::string& name, const std::string& description, Json properties, Json required) {
  return {{"type", "function"},
          {"function",
           {{"name", name},
            {"description", description},
            {"parameters",
             {{"type", "object"}, {"properties", properties}, {"required", required}, {"additionalProperties", false}}}}}};
}

Json str_prop(const std::string& d) { return {{"type", "string"}, {"description", d}}; }
Json int_prop(const std::string& d) { return {{"type", "integer"}, {"description", d}}; }

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

std::optional<double> num(const Json& j, const char* key) {
  if (!j.is_object() || !j.contains(key) || !j[key].is_number()) return std::nullopt;
  return j[key].get<double>();
}

// ncu runs in the jail, without capabilities: where the driver keeps the GPU's performance counters
// for administrators (NVreg_RestrictProfilingToAdminUsers=1), it cannot profile, so the tool is not
// offered (the model would only meet ERR_NVGPUCTRPERM).
bool counters_for_admins_only() {
  auto params = read_file("/proc/driver/nvidia/params");
  return params && params->find("RmProfilingAdminOnly: 1") != std::string::npos;
}

bool ncu_available(const Environment& env) {
  if (env.gpus.empty() || counters_for_admins_only()) return false;
  std::error_code ec;
  return fs::exists(env.cuda_home / "bin" / "ncu", ec) || !find_program("ncu").empty();
}

}  // namespace

std::string valid_utf8(const std::string& s) {
  // nlohmann::json throws on invalid UTF-8 when dumping, and a model server
  // would reject it: bytes that are not UTF-8 become U+FFFD.
  std::string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    size_t n = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xe ? 3 : (c >> 3) == 0x1e ? 4 : 0;
    bool ok = n > 0 && i + n <= s.size();
    for (size_t k = 1; ok && k < n; ++k) ok = (static_cast<unsigned char>(s[i + k]) >> 6) == 0x2;
    if (ok && n == 2 && c < 0xc2) ok = false;  // overlong
    if (ok) {
      out.append(s, i, n);
      i += n;
    } else {
      out += "\xEF\xBF\xBD";
      ++i;
    }
  }
  return out;
}

// ---- Slots ------------------------------------------------------------------------------------

Slots::Slots(std::vector<int> ids) : free_(std::move(ids)) { total_ = free_.size(); }

int Slots::acquire(int priority) { return *acquire_until(priority, std::nullopt, nullptr); }

std::optional<int> Slots::acquire_until(int priority, std::optional<std::chrono::steady_clock::time_point> deadline,
                                        const std::atomic<bool>* cancel) {
  std::unique_lock<std::mutex> lock(mu_);
  waiting_[priority] += 1;
  // The highest waiting priority goes first; but after kMaxSkips grants in a row that passed a
  // lower waiter over, the lower ones go first once (none waits for ever).
  auto mine = [&] {
    if (free_.empty()) return false;
    bool top = waiting_.begin()->first <= priority;
    bool lower_waits = waiting_.rbegin()->first < waiting_.begin()->first;
    if (skips_ >= kMaxSkips && lower_waits) return !top;
    return top;
  };
  auto given_up = [&] {
    return (cancel && cancel->load()) || (deadline && std::chrono::steady_clock::now() >= *deadline);
  };
  if (!deadline && !cancel) {
    cv_.wait(lock, mine);
  } else {
    // A cancel is another thread's flag, not a notification: looked at every 100 ms.
    while (!mine() && !given_up()) cv_.wait_for(lock, std::chrono::milliseconds(100));
    if (!mine()) {
      if (--waiting_[priority] == 0) waiting_.erase(priority);
      cv_.notify_all();  // a lower waiter this one held back may go now
      return std::nullopt;
    }
  }
  bool passed_over = waiting_.rbegin()->first < priority;
  skips_ = passed_over ? skips_ + 1 : 0;
  if (--waiting_[priority] == 0) waiting_.erase(priority);
  // Of the free ones, the id fewest callers hold (a device's N slots fill evenly across devices).
  auto pick = std::min_element(free_.begin(), free_.end(), [&](int a, int b) { return holders_[a] < holders_[b]; });
  int id = *pick;
  free_.erase(pick);
  if (holders_[id]++ == 0) since_[id] = std::chrono::steady_clock::now();
  if (!free_.empty()) cv_.notify_all();  // another slot: the next waiter in order
  return id;
}

void Slots::release(int id) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto held = holders_.find(id);
    if (held == holders_.end() || held->second <= 0) return;  // never granted (a Hold of -1: nothing taken)
    auto it = since_.find(id);
    if (--holders_[id] == 0 && it != since_.end()) {
      held_s_[id] += std::chrono::duration<double>(std::chrono::steady_clock::now() - it->second).count();
      since_.erase(it);
    }
    free_.push_back(id);
  }
  cv_.notify_all();  // every waiter checks its priority
}

int Slots::waiting(int priority) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = waiting_.find(priority);
  return it == waiting_.end() ? 0 : it->second;
}

double Slots::held_seconds(int id) {
  std::lock_guard<std::mutex> lock(mu_);
  double s = held_s_.count(id) ? held_s_[id] : 0.0;
  auto it = since_.find(id);
  if (it != since_.end()) s += std::chrono::duration<double>(std::chrono::steady_clock::now() - it->second).count();
  return s;
}

// ---- argument checks --------------------------------------------------------------------------

std::string check_arguments(const Json& parameters, const Json& args) {
  if (!args.is_object()) return "the arguments must be a JSON object, not " + std::string(args.type_name());
  const Json& props = parameters.value("properties", Json::object());
  for (const auto& r : parameters.value("required", Json::array())) {
    std::string name = r.get<std::string>();
    if (!args.contains(name)) {
      return "missing required argument '" + name + "' (" + props[name].value("type", std::string("?")) + ")";
    }
  }
  for (auto it = args.begin(); it != args.end(); ++it) {
    if (!props.contains(it.key())) {
      std::vector<std::string> known;
      for (auto p = props.begin(); p != props.end(); ++p) known.push_back(p.key());
      return "unknown argument '" + it.key() + "' (this tool takes: " + (known.empty() ? "no arguments" : join(known, ", ")) +
             ")";
    }
    std::string type = props[it.key()].value("type", std::string());
    const Json& v = it.value();
    bool ok = type.empty() || (type == "string" && v.is_string()) || (type == "integer" && v.is_number_integer()) ||
              (type == "number" && v.is_number()) || (type == "boolean" && v.is_boolean()) ||
              (type == "array" && v.is_array()) || (type == "object" && v.is_object());
    // Models often send integers as numbers with a zero fraction ("limit": 50.0).
    if (!ok && type == "integer" && v.is_number_float() && std::floor(v.get<double>()) == v.get<double>()) ok = true;
    if (!ok) return "argument '" + it.key() + "' must be " + type + ", not " + v.type_name();
  }
  return "";
}

// ---- evaluation text --------------------------------------------------------------------------

std::string eval_text(const Json& r, bool timed) {
  std::string outcome = r.value("outcome", std::string("?"));
  std::string message = trim(r.value("message", std::string()));
  std::string s;
  if (outcome != "ok") {
    s = "FAILED: " + outcome + " (reward -1)\n";
    if (!message.empty()) s += message + "\n";
    if (outcome == "hack_suspected" && r.contains("reason")) s += "reason: " + json_text(r["reason"]) + "\n";
    return s;
  }
  const Json& v = r.value("verify", Json::object());
  s = "CORRECT: passed " + std::to_string(v.value("passed", 0)) + " of " + std::to_string(v.value("trials", 0)) +
      " checks on fresh random inputs (seed " + (v.contains("seed") ? json_text(v["seed"]) : "?") + ", tolerance preset " +
      v.value("preset", std::string("?")) + ")\n";
  if (!timed) return s + "timing not measured: call profile for times against eager and torch.compile\n";
  const Json& t = r.value("timing", Json::object());
  auto cand = num(t, "candidate_ms"), eager = num(t, "eager_ms"), comp = num(t, "compile_ms");
  auto se = num(t, "speedup_eager"), sc = num(t, "speedup_compile");
  s += "time (" + t.value("method", std::string("?")) + ", median of " + std::to_string(t.value("calls", 0)) +
       " calls): yours " + (cand ? fmt("%.4f ms", *cand) : "not measured");
  s += ", eager " + (eager ? fmt("%.4f ms", *eager) : std::string("n/a")) + (se ? " (" + fmt("%.2fx", *se) + ")" : "");
  s += ", torch.compile " + (comp ? fmt("%.4f ms", *comp) : std::string("n/a")) +
       (sc ? " (" + fmt("%.2fx", *sc) + ")" : "") + "\n";
  int reward = r.value("reward", -1);
  s += "reward if the episode ended now: " + std::to_string(reward) + " of 3";
  if (reward < 3) {
    double need = kFasterThreshold;
    if (se && *se <= need) s += " (to earn 2: " + more_than_faster() + " than eager)";
    else if (sc && *sc <= need) s += " (to earn 3: " + more_than_faster() + " than torch.compile too)";
    else if (!comp) s += " (no torch.compile baseline here, so at most 2)";
  }
  s += "\n";
  // Where the candidate's GPU time goes, when the judge's profiler listed kernels.
  const Json& cand_t = t.value("candidate", Json::object());
  if (cand_t.contains("kernel_sum_ms") && cand_t["kernel_sum_ms"].is_number()) {
    s += "GPU kernel time per call (profiler sum): " + fmt("%.4f ms", cand_t["kernel_sum_ms"].get<double>()) + "\n";
  }
  if (!message.empty()) s += "note: " + message + "\n";
  return s;
}

// ---- the tool box -----------------------------------------------------------------------------

ToolBox::ToolBox(const Environment& env, ToolOptions opts)
    : env_(env), opts_(std::move(opts)), config_(sandbox_config(env, &config_error_)), toolchain_(toolchain_paths(env)) {
  files_.workdir = opts_.workdir;
  schemas_ = Json::array();
  schemas_.push_back(fn("bash",
                        "Run a shell command in the workdir (bash -c). Sandboxed: no network, the workdir is the only "
                        "writable place, /tmp is private, the command is killed at its timeout. Output is cut to "
                        "the first and last part when long.",
                        {{"command", str_prop("the command line")},
                         {"timeout_s", int_prop("seconds before the command is killed (default 180, at most 600)")}},
                        {"command"}));
  schemas_.push_back(fn("read_file", "Read a text file of the workdir, with line numbers.",
                        {{"path", str_prop("path relative to the workdir")},
                         {"offset", int_prop("first line to show, 1-based (default 1)")},
                         {"limit", int_prop("how many lines (default 2000)")}},
                        {"path"}));
  schemas_.push_back(fn("write_file", "Create or replace a file of the workdir with the given content.",
                        {{"path", str_prop("path relative to the workdir")}, {"content", str_prop("the whole file")}},
                        {"path", "content"}));
  schemas_.push_back(fn("edit_file",
                        "Replace an exact piece of a file: old_string must occur exactly once (or set replace_all). "
                        "Fails, changing nothing, when it is missing or not unique.",
                        {{"path", str_prop("path relative to the workdir")},
                         {"old_string", str_prop("the exact text to replace, whitespace included")},
                         {"new_string", str_prop("the replacement")},
                         {"replace_all", {{"type", "boolean"}, {"description", "replace every occurrence"}}}},
                        {"path", "old_string", "new_string"}));
  schemas_.push_back(fn("glob", "List the workdir's files matching a pattern (**, *, ?, [...]).",
                        {{"pattern", str_prop("e.g. kernels/*.cu or **/*.py")},
                         {"path", str_prop("a subdirectory to search from (default: the workdir)")}},
                        {"pattern"}));
  schemas_.push_back(fn("todo_write", "Replace your task list (a short plan you keep up to date).",
                        {{"todos",
                          {{"type", "array"},
                           {"description", "the whole list"},
                           {"items",
                            {{"type", "object"},
                             {"properties",
                              {{"content", {{"type", "string"}}},
                               {"status", {{"type", "string"}, {"enum", {"pending", "in_progress", "completed"}}}}}},
                             {"required", {"content", "status"}}}}}}},
                        {"todos"}));
  schemas_.push_back(fn("compile",
                        "Build kernels/ into cuda_extension (cached; compiler errors come back as file:line).", Json::object(),
                        Json::array()));
  schemas_.push_back(fn("verify",
                        "Build a private copy and check ModelNew against the reference Model on several fresh random "
                        "inputs, with the anti-hacking checks. Says CORRECT or what is wrong.",
                        Json::object(), Json::array()));
  schemas_.push_back(fn("profile",
                        "verify, then time your ModelNew against eager PyTorch and torch.compile, and say which reward "
                        "the workdir would earn now.",
                        Json::object(), Json::array()));
  schemas_.push_back(fn("tune",
                        "Judge the workdir once per launch configuration, as profile does (verify, then time against "
                        "eager and torch.compile), with ModelNew's integer attribute config set to each value after it "
                        "is constructed; a table of outcomes and times, and the fastest correct value. ModelNew.__init__ "
                        "must set self.config and forward pass it to your launchers. The final judgement uses the "
                        "value ModelNew sets itself: write the best one into model_new.py.",
                        {{"configs",
                          {{"type", "array"},
                           {"description", "1 to " + std::to_string(kMaxTuneConfigs) +
                                               " distinct integers from 0 to 2^31-1, the values to try"},
                           {"items", {{"type", "integer"}}}}}},
                        {"configs"}));
  if (!opts_.remote) {  // measured on this host's GPU: not offered where a cluster's workers judge
    schemas_.push_back(fn("profile_reference",
                          "Profile model.py's Model before you write a kernel: eager and torch.compile timed as profile "
                          "times them, the kernels each launches with their share of the GPU time, the FLOPs and the "
                          "fewest bytes a call must move, the roofline floor from this GPU's measured peaks, and the "
                          "times the next rewards take. Cached per task: calling it first costs little.",
                          {{"top", int_prop("how many kernels to list per model, by time (default 8)")}}, Json::array()));
  }
  if (opts_.ncu && ncu_available(env_)) {
    schemas_.push_back(fn("ncu_profile",
                          "Profile one forward call with Nsight Compute: for the top kernels, time, achieved memory "
                          "bandwidth, compute and memory throughput (% of peak), occupancy and the limiter. Of your "
                          "ModelNew (compile first) or of model.py's Model (target reference).",
                          {{"top", int_prop("how many kernels to show, by time (default 5)")},
                           {"target", {{"type", "string"},
                                       {"enum", {"model_new", "reference"}},
                                       {"description", "model_new (default) or reference"}}}},
                          Json::array()));
  }
  schemas_.push_back(fn("finish",
                        "End the episode. The workdir as it is then is rebuilt and judged from scratch; call it when "
                        "your best version is in place.",
                        {{"summary", str_prop("what you did and what you expect")}}, Json::array()));
}

std::vector<std::string> ToolBox::names() const {
  std::vector<std::string> out;
  for (const auto& s : schemas_) out.push_back(s["function"]["name"].get<std::string>());
  return out;
}

bool ToolBox::has(const std::string& name) const {
  for (const auto& s : schemas_) {
    if (s["function"]["name"] == name) return true;
  }
  return false;
}

Json ToolBox::state() const { return {{"todos", todos_.items}}; }

void ToolBox::restore(const Json& state) {
  if (state.is_object() && state.contains("todos") && state["todos"].is_array()) todos_.items = state["todos"];
}

ToolOutcome ToolBox::call(const std::string& name, const Json& args) {
  auto t0 = Clock::now();
  ToolOutcome out;
  const Json* schema = nullptr;
  for (const auto& s : schemas_) {
    if (s["function"]["name"] == name) schema = &s;
  }
  if (!schema) {
    out.error = true;
    out.error_kind = "unknown_tool";
    out.text = "error: there is no tool named '" + name + "'; the tools are: " + join(names(), ", ");
    return out;
  }
  std::string bad = check_arguments((*schema)["function"]["parameters"], args);
  if (!bad.empty()) {
    out.error = true;
    out.error_kind = "bad_arguments";
    out.text = "error: " + name + ": " + bad;
    return out;
  }
  if (ended()) {
    out.error = true;
    out.error_kind = "ended";
    out.text = "error: " + name + " was not run: the episode was ended";
    return out;
  }
  if (out_of_time()) {
    out.error = out.out_of_time = true;
    out.error_kind = "wall_clock";
    out.text = "error: " + name + " was not run: the episode's wall-clock budget has run out";
    return out;
  }
  auto from_file_tool = [&](const ToolResult& r) {
    ToolOutcome o;
    o.text = r.text;
    o.error = r.error;
    if (r.error) o.error_kind = "tool_error";
    return o;
  };
  try {
    if (name == "bash") {
      out = bash(args);
    } else if (name == "read_file") {
      out = from_file_tool(files_.read_file(args["path"], args.value("offset", 1L), args.value("limit", 2000L)));
    } else if (name == "write_file") {
      out = from_file_tool(files_.write_file(args["path"], args["content"]));
    } else if (name == "edit_file") {
      out = from_file_tool(files_.edit_file(args["path"], args["old_string"], args["new_string"],
                                            args.value("replace_all", false)));
    } else if (name == "glob") {
      out = from_file_tool(files_.glob(args["pattern"], args.value("path", std::string())));
    } else if (name == "todo_write") {
      out = from_file_tool(todos_.write(args["todos"]));
    } else if (name == "compile") {
      out = compile(args);
    } else if (name == "verify") {
      out = evaluate_tool(args, false);
    } else if (name == "profile") {
      out = evaluate_tool(args, true);
    } else if (name == "ncu_profile") {
      out = ncu_profile(args);
    } else if (name == "profile_reference") {
      out = profile_reference(args);
    } else if (name == "tune") {
      out = tune(args);
    } else if (name == "finish") {
      out.finish = true;
      out.text = "finished: the workdir will now be rebuilt and judged";
    }
  } catch (const std::exception& e) {  // a tool must never take the episode down
    out = ToolOutcome{};
    out.error = true;
    out.error_kind = "tool_error";
    out.text = "error: " + name + " failed inside anvil: " + e.what();
  }
  out.text = valid_utf8(cut_text(out.text, opts_.max_output * 2 / 3, opts_.max_output / 3));
  out.seconds = since(t0);
  out.out_of_time = out.out_of_time || out_of_time();
  return out;
}

bool ToolBox::out_of_time() const { return opts_.deadline && Clock::now() >= *opts_.deadline; }

std::chrono::milliseconds ToolBox::capped(std::chrono::milliseconds limit, bool* cut) const {
  *cut = false;
  if (!opts_.deadline) return limit;
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(*opts_.deadline - Clock::now());
  if (left >= limit) return limit;
  *cut = true;
  return std::max(left, std::chrono::milliseconds(1));
}

ToolOutcome ToolBox::bash(const Json& a) {
  ToolOutcome out;
  if (!config_) {
    out.error = true;
    out.error_kind = "tool_error";
    out.text = "error: the command could not run: sandbox: " + config_error_;
    return out;
  }
  SandboxOptions so;
  so.workdir = opts_.workdir;
  long t = a.value("timeout_s", static_cast<long>(opts_.bash_timeout.count() / 1000));
  bool cut = false;
  so.timeout = capped(std::chrono::seconds(std::clamp(t, 1L, 600L)), &cut);
  so.max_output = 1 << 20;
  so.gpu = opts_.bash_gpu;
  so.read_only = files_.protected_files;
  so.config = config_;
  so.toolchain = toolchain_;
  so.hide = {env_.cache};
  so.uid = episode_user(*config_, opts_.workdir);
  so.cancel = opts_.cancel;
  SandboxResult r = run_sandboxed(a["command"].get<std::string>(), so);
  if (!r.started) {
    out.error = true;
    out.error_kind = "tool_error";
    out.text = "error: the command could not run: " + r.error;
    return out;
  }
  std::string status = r.cancelled             ? "killed: the episode was ended"
                       : r.timed_out && cut ? "killed: the episode's wall-clock budget ran out"
                       : r.timed_out ? "killed after " + std::to_string(so.timeout.count() / 1000) + " s (timeout)"
                       : r.signal  ? "killed by signal " + std::to_string(r.signal)
                                   : "exit code " + std::to_string(r.exit_code);
  std::string body = r.output;
  if (r.output_bytes > r.output.size()) {
    body += "\n[... the command wrote " + std::to_string(r.output_bytes) + " bytes; only the first " +
            std::to_string(r.output.size()) + " were kept ...]";
  }
  // Cut here so the status line (at the end) always survives.
  body = cut_text(body, opts_.max_output * 2 / 3 - 200, opts_.max_output / 3 - 200);
  out.text = body + (body.empty() || body.back() == '\n' ? "" : "\n") + "[" + status + "]";
  // A failing command is a result the model reads, not a failed call.
  out.detail = {{"exit_code", r.exit_code}, {"timed_out", r.timed_out}, {"output_bytes", r.output_bytes},
                {"sandbox", r.how}};
  out.out_of_time = r.timed_out && cut;
  return out;
}

std::optional<int> ToolBox::take(Slots* slots, int priority) const {
  if (!slots) return -1;
  return slots->acquire_until(priority, opts_.deadline, opts_.cancel);
}

std::string ToolBox::stop_reason() const {
  return ended() ? "the episode was ended" : "the episode's wall-clock budget ran out while it waited for its turn";
}

ToolOutcome ToolBox::not_taken(const std::string& tool) const {
  ToolOutcome out;
  out.error = true;
  out.error_kind = ended() ? "ended" : "wall_clock";
  out.out_of_time = !ended();
  out.text = "error: " + tool + " stopped: " + stop_reason();
  return out;
}

ToolOutcome ToolBox::compile(const Json&) {
  ToolOutcome out;
  std::optional<int> slot = take(opts_.builds, 0);
  if (!slot) return not_taken("compile");
  Slots::Hold hold{opts_.builds, *slot};
  BuildOptions bo = opts_.eval.build;
  bo.deadline = opts_.deadline;
  BuildReport r = build_workdir(env_, opts_.workdir, bo);
  if (r.ok) {
    out.text = "compiled: " + std::to_string(r.units.size()) + " units (" + std::to_string(r.compiled()) +
               " compiled, the rest cached), " + r.mode + " mode, for " + to_string(r.device) + (r.arch.empty() ? "" : " " + r.arch) +
               ", in " + format_seconds(r.seconds) + " -> cuda_extension.so";
  } else {
    out.error = true;
    out.error_kind = "tool_error";
    out.text = "compile failed (" + r.error_kind + "):\n" + (r.diagnostics.empty() ? r.error : r.diagnostics);
  }
  out.detail = {{"ok", r.ok}, {"units", r.units.size()}, {"compiled", r.compiled()}, {"seconds", r.seconds}};
  return out;
}

EvalOptions ToolBox::workdir_evaluation(bool timed) const {
  EvalOptions o = opts_.eval;
  o.task = opts_.task;
  o.candidate = opts_.workdir.string();
  o.measure_time = timed;
  return o;
}

EvalResult ToolBox::judge(EvalOptions o) {
  // The device first, waited for only while the episode lasts; then the evaluation's own timeouts
  // and the build's units stop at the episode's wall clock as it stands after the wait.
  std::optional<int> gpu = opts_.remote ? -1 : take(opts_.gpus, opts_.gpu_priority);
  if (!gpu) {
    EvalResult r;
    r.error_kind = EvalError::kCancelled;
    r.error = "the evaluation stopped: " + stop_reason();
    return r;
  }
  Slots::Hold hold{opts_.gpus, *gpu};
  bool cut = false;
  o.timeout = std::chrono::duration_cast<std::chrono::seconds>(capped(o.timeout, &cut));
  if (o.timeout.count() < 1) o.timeout = std::chrono::seconds(1);
  o.build.deadline = opts_.deadline;
  o.cancel = opts_.cancel;
  if (opts_.remote) return opts_.remote(o);
  if (*gpu >= 0) o.gpu = *gpu;
  return evaluate(env_, o);
}

ToolOutcome ToolBox::evaluate_tool(const Json&, bool timed) {
  ToolOutcome out;
  EvalResult r = judge(workdir_evaluation(timed));
  if (!r.evaluated && r.error_kind == EvalError::kCancelled) return not_taken(timed ? "profile" : "verify");
  if (!r.evaluated) {
    out.error = true;
    out.error_kind = "tool_error";
    out.text = "error: the harness could not evaluate the workdir: " + r.error;
    return out;
  }
  out.text = eval_text(r.json, timed);
  out.detail = {{"outcome", outcome_name(r.outcome)}, {"reward", r.reward}};
  if (r.json.contains("timing") && r.json["timing"].is_object()) {
    for (const char* k : {"candidate_ms", "eager_ms", "compile_ms"}) out.detail[k] = r.json["timing"].value(k, Json());
  }
  if (r.json.contains("worker")) out.detail["worker"] = r.json["worker"];  // judged on a Ray worker
  return out;
}

// ---- tune: one judged evaluation per launch configuration --------------------------------------

namespace {

// How the harness says a ModelNew has no integer config of its own (python/anvil/harness.py
// Harness.set_config; test_agent_tools.py checks both ends): every value would fail alike.
constexpr const char* kNoConfigMessage = "tune needs ModelNew.__init__ to set an integer self.config";

// The configurations asked for, or why they cannot be tried.
std::optional<std::vector<int64_t>> tune_configs(const Json& given, std::string* why) {
  std::vector<int64_t> out;
  if (given.empty() || given.size() > kMaxTuneConfigs) {
    *why = "configs: give 1 to " + std::to_string(kMaxTuneConfigs) + " values (got " + std::to_string(given.size()) + ")";
    return std::nullopt;
  }
  for (const auto& v : given) {
    bool integral = v.is_number_integer() || (v.is_number_float() && std::floor(v.get<double>()) == v.get<double>());
    double d = v.is_number() ? v.get<double>() : -1;
    if (!integral || d < 0 || d > static_cast<double>(kMaxConfig)) {
      *why = "configs: " + json_text(v) + " is not an integer from 0 to 2^31-1";
      return std::nullopt;
    }
    int64_t c = static_cast<int64_t>(d);
    if (std::find(out.begin(), out.end(), c) != out.end()) {
      *why = "configs: " + std::to_string(c) + " is given twice";
      return std::nullopt;
    }
    out.push_back(c);
  }
  return out;
}

std::string opt_fmt(const Json& v, const char* f) { return v.is_number() ? fmt(f, v.get<double>()) : std::string("-"); }

// The table of a tune call: one row per configuration tried, then the fastest correct one.
std::string tune_text(const Json& rows, std::optional<size_t> best, const std::string& first_failure) {
  std::string s = "config        outcome          reward  time          x eager  x compile\n";
  for (const auto& r : rows) {
    char line[256];
    std::snprintf(line, sizeof line, "%-13lld %-16s %6s  %-12s  %7s  %9s\n", static_cast<long long>(r["config"].get<int64_t>()),
                  r["outcome"].get<std::string>().c_str(), r.contains("reward") ? json_text(r["reward"]).c_str() : "-",
                  opt_fmt(r.value("candidate_ms", Json()), "%.4f ms").c_str(),
                  opt_fmt(r.value("speedup_eager", Json()), "%.2fx").c_str(),
                  opt_fmt(r.value("speedup_compile", Json()), "%.2fx").c_str());
    s += line;
  }
  if (best) {
    const Json& b = rows[*best];
    s += "fastest correct: config " + json_text(b["config"]) + " (" + fmt("%.4f ms", b["candidate_ms"].get<double>()) +
         ", reward " + json_text(b["reward"]) + "). The final judgement uses the value ModelNew sets itself: set " +
         "self.config = " + json_text(b["config"]) + " in ModelNew.__init__.\n";
  } else {
    s += "no configuration was correct\n";
  }
  if (!first_failure.empty()) s += "first failure: " + cut_text(first_failure, 600, 200) + "\n";
  return s;
}

}  // namespace

ToolOutcome ToolBox::tune(const Json& a) {
  ToolOutcome out;
  std::string why;
  auto configs = tune_configs(a["configs"], &why);
  if (!configs) {
    out.error = true;
    out.error_kind = "bad_arguments";
    out.text = "error: tune: " + why;
    return out;
  }
  Json rows = Json::array();
  std::optional<size_t> best;
  std::string first_failure, stopped;
  for (int64_t c : *configs) {
    if (ended()) {
      stopped = "the episode was ended";
      break;
    }
    if (out_of_time()) {
      out.out_of_time = true;
      stopped = "the episode's wall clock ran out";
      break;
    }
    EvalOptions o = workdir_evaluation(true);
    o.config = c;
    EvalResult r = judge(o);
    Json row = {{"config", c}};
    if (!r.evaluated) {
      row["outcome"] = "not evaluated";
      if (first_failure.empty()) first_failure = "config " + std::to_string(c) + ": " + r.error;
    } else {
      row["outcome"] = outcome_name(r.outcome);
      row["reward"] = r.reward;
      const Json& t = r.json.contains("timing") && r.json["timing"].is_object() ? r.json["timing"] : Json::object();
      for (const char* k : {"candidate_ms", "speedup_eager", "speedup_compile"}) row[k] = t.value(k, Json());
      std::string message = trim(r.json.value("message", std::string()));
      if (r.outcome != Outcome::kOk && first_failure.empty()) {
        first_failure = "config " + std::to_string(c) + ": " + outcome_name(r.outcome) + ": " + message;
      }
      // What no other value can change: the build, or a ModelNew without its own config.
      if (row["outcome"] == "compile_error" ||
          (row["outcome"] == "load_error" && message.find(kNoConfigMessage) != std::string::npos)) {
        stopped = "every value would fail the same way";
        rows.push_back(row);
        break;
      }
      if (row["outcome"] == "ok" && row["candidate_ms"].is_number() &&
          (!best || row["candidate_ms"].get<double>() < rows[*best]["candidate_ms"].get<double>())) {
        best = rows.size();
      }
    }
    rows.push_back(row);
  }
  out.text = tune_text(rows, best, first_failure);
  if (rows.size() < configs->size()) {
    out.text += std::to_string(configs->size() - rows.size()) + " configuration(s) not tried: " + stopped + "\n";
  }
  // One outcome for the episode's record, as verify's and profile's: hack_suspected when any row is
  // (anvil rft drops such an episode), ok when one was correct, else the first row's.
  std::string summary = rows.empty() ? "" : rows[0]["outcome"].get<std::string>();
  for (const auto& r : rows) {
    if (r["outcome"] == "hack_suspected") summary = "hack_suspected";
  }
  if (summary != "hack_suspected" && best) summary = "ok";
  out.detail = {{"rows", rows}, {"best", best ? rows[*best]["config"] : Json()}};
  if (!summary.empty() && summary != "not evaluated") out.detail["outcome"] = summary;
  return out;
}

// ---- profile_reference ------------------------------------------------------------------------

ToolOutcome ToolBox::profile_reference(const Json& a) {
  ToolOutcome out;
  auto task = load_task(env_, opts_.task, &out.text);
  if (!task) {
    out.error = true;
    out.error_kind = "tool_error";
    out.text = "profile_reference: " + out.text;
    return out;
  }
  ReferenceProfileOptions ro = reference_profile_options(opts_.eval, env_);
  size_t top = static_cast<size_t>(std::clamp(a.value("top", 8L), 1L, static_cast<long>(kReferenceProfileRows)));
  // A slot as an evaluation takes one (on the CPU too: the slots keep timings apart there as well).
  std::optional<int> slot = take(opts_.gpus, opts_.gpu_priority);
  if (!slot) return not_taken("profile_reference");
  int gpu = *slot;
  Slots::Hold hold{opts_.gpus, gpu};
  bool cut = false;
  ro.timeout = std::max(std::chrono::seconds(1), std::chrono::duration_cast<std::chrono::seconds>(capped(ro.timeout, &cut)));
  ro.gpu = ro.device == Device::Cuda && gpu >= 0 ? gpu : opts_.eval.gpu;
  ReferenceProfile p = anvil::profile_reference(env_, *task, ro);
  if (!p.ok) {
    out.error = true;
    out.error_kind = "tool_error";
    out.out_of_time = cut && p.error.find("did not finish") != std::string::npos;
    out.text = std::string("profile_reference failed: ") + (p.task_error ? "the reference itself fails: " : "") + p.error;
    return out;
  }
  out.text = reference_profile_text(p.report, top);
  const Json& c = p.report.value("compile", Json());
  out.detail = {{"cached", p.cached},
                {"eager_ms", p.report.value("eager", Json::object()).value("ms", Json())},
                {"compile_ms", c.is_object() ? c.value("ms", Json()) : Json()},
                {"seconds", p.seconds}};
  return out;
}

// ncu and the candidate's code it runs, in the jail: the workdir and the task's copy read-only,
// the GPU, the toolchain (Python, CUDA, anvil's python/), a private /tmp and /dev/shm (ncu keeps
// its lock and its inter-process buffers there), no network.
JailResult ToolBox::run_ncu(const std::vector<std::string>& argv, const fs::path& task_dir, int gpu) {
  JailResult r;
  if (!config_) {
    r.error = "sandbox: " + config_error_;
    return r;
  }
  JailOptions j;
  j.config = config_;
  j.cwd = opts_.workdir;
  j.binds = {{opts_.workdir, false}, {task_dir, false}};
  j.toolchain = toolchain_;
  j.toolchain.push_back(env_.home / "python");  // anvil.ncu_target
  j.hide = {env_.cache};
  j.gpu = true;
  j.env = tool_environment();
  j.env.push_back("PYTHONPATH=" + env_.python_path());
  j.env.push_back("CUDA_VISIBLE_DEVICES=" + std::to_string(gpu));
  bool cut = false;
  j.timeout = capped(std::chrono::seconds(300), &cut);
  j.merge_stderr = false;
  j.max_output = 16 << 20;
  j.uid = episode_user(*config_, opts_.workdir);  // the candidate's code it runs: the episode's processes
  j.cancel = opts_.cancel;
  return run_jailed(argv, j);
}

// Nsight Compute on one forward call (python -m anvil.ncu_target), summarised per kernel.
ToolOutcome ToolBox::ncu_profile(const Json& a) {
  ToolOutcome out;
  fs::path ncu = env_.cuda_home / "bin" / "ncu";
  std::error_code ec;
  if (!fs::exists(ncu, ec)) ncu = find_program("ncu");
  std::optional<int> slot = take(opts_.gpus, opts_.gpu_priority);
  if (!slot) return not_taken("ncu_profile");
  int gpu = *slot;
  Slots::Hold hold{opts_.gpus, gpu};
  // Evaluations that share the GPU (EvalOptions::gpu_lock) time one at a time under its lock:
  // Nsight's replays hold it too, taken as an evaluation prepared alone takes it (after the
  // waves' gate, once nothing is parked: anvil.gpu_hold), within what the call may take.
  bool cut = false;
  auto budget = capped(std::chrono::seconds(300), &cut);
  std::unique_ptr<LineChild> gpu_alone;
  if (opts_.eval.gpu_lock && opts_.eval.device == Device::Cuda) {
    std::string err;
    fs::path lock = gpu_lock_path(env_, gpu >= 0 ? gpu : opts_.eval.gpu);
    auto seconds = std::max<long long>(1, std::chrono::duration_cast<std::chrono::seconds>(budget).count());
    // -I, anvil's package first (as the runner's bootstrap): nothing of the working directory imported.
    gpu_alone = LineChild::start({env_.python.string(), "-I", "-c",
                                  "import os, sys; sys.path[:0] = [os.environ['ANVIL_PYDIR']]; from anvil import gpu_hold; "
                                  "sys.exit(gpu_hold.main(sys.argv[1:]))",
                                  lock.string(), std::to_string(seconds)},
                                 {{"ANVIL_PYDIR", (env_.home / "python").string()}}, cache_dir(env_, CacheArea::kTmp) / "gpu_hold.log",
                                 &err);
    std::optional<std::string> said = gpu_alone ? gpu_alone->read_line() : std::nullopt;
    if (!said || *said != "held") {
      out.error = true;
      out.error_kind = "tool_error";
      out.text = said && *said == "busy" ? "ncu_profile: the GPU stayed busy with other evaluations for the " +
                                               std::to_string(seconds) + " s this call may take; try again later"
                                         : "ncu_profile: cannot take the GPU's lock (" +
                                               (err.empty() ? "anvil.gpu_hold ended without taking it" : err) + ")";
      return out;
    }
  }
  TempDir scratch(cache_dir(env_, CacheArea::kTmp), "ncu");
  const fs::path& task_dir = scratch.path();
  auto task = load_task(env_, opts_.task, &out.text);
  if (!task) {
    out.error = true;
    out.error_kind = "tool_error";
    return out;
  }
  std::string err;
  fs::permissions(task_dir, fs::perms(0755));  // read by the jail's user
  write_file_atomic(task_dir / "model.py", task->code, &err, 0644);
  bool reference = a.value("target", std::string("model_new")) == "reference";
  std::vector<std::string> argv = {ncu.string(), "--csv", "--page", "raw", "--profile-from-start", "off",
                                   "--target-processes", "all", "--metrics", ncu_metrics(), env_.python.string(), "-m",
                                   "anvil.ncu_target", (task_dir / "model.py").string(), opts_.workdir.string()};
  if (reference) argv.push_back("--reference");
  JailResult r = run_ncu(argv, task_dir, gpu >= 0 ? gpu : opts_.eval.gpu);
  if (!r.ok() || r.output.find("\"ID\"") == std::string::npos) {
    out.error = true;
    out.error_kind = "tool_error";
    out.text = "ncu_profile failed (" + r.describe() + "):\n" + tail_lines(r.err_output + "\n" + r.output, 20);
    if (out.text.find("ERR_NVGPUCTRPERM") != std::string::npos) {
      out.text += "\n(this host keeps the GPU's performance counters for administrators; ncu_profile runs "
                  "unprivileged, so it cannot profile here: use profile instead)";
    }
    return out;
  }
  auto report = ncu_report(r.output, static_cast<size_t>(std::max(1L, a.value("top", 5L))));
  if (!report) {
    out.text = std::string("ncu_profile: no kernel was profiled (did ") + (reference ? "Model" : "ModelNew") +
               "'s forward launch any CUDA kernel?)\n" + tail_lines(r.err_output, 10);
    out.error = true;
    out.error_kind = "tool_error";
    return out;
  }
  out.text = (reference ? "Nsight Compute on model.py's Model (the reference):\n" : "") + report->text;
  out.detail = {{"kernels", report->kernels}, {"gpu_ns", report->gpu_ns}, {"target", reference ? "reference" : "model_new"}};
  return out;
}

}  // namespace anvil
