// tools.h: the agent's tool box: OpenAI function schemas and their dispatch.
//
// Tools (flat JSON arguments): bash, read_file, write_file, edit_file, glob,
// todo_write, compile, verify, profile, tune, profile_reference (where this
// host judges: not under a cluster's workers), ncu_profile (only where Nsight
// Compute is installed and a GPU is present) and finish. compile, verify,
// profile and tune are the protected harness (the build service and the
// evaluator of src/anvil/env/): they answer in compact text (compiler errors
// as file:line, the mismatch report, times against eager and torch.compile and
// the reward it would earn; tune, one judged evaluation per launch
// configuration); their verdicts are advisory, the episode's reward comes from
// a fresh evaluation after it ends. profile_reference measures the task's
// reference (env/reference_profile.h). Every answer is cut to a limit, saying
// what was cut.
//
// Arguments are checked against the schema before a tool runs: a missing
// required argument or a wrong type comes back as an error result, never an
// exception.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "anvil/agent/file_tools.h"
#include "anvil/agent/sandbox.h"
#include "anvil/env/eval.h"
#include "anvil/env/toolchain.h"

namespace anvil {

// The most launch configurations one tune call tries (each a judged evaluation).
inline constexpr size_t kMaxTuneConfigs = 16;

// A fixed set of interchangeable resources (the GPUs of a host, or CPU slots
// for builds and CPU evaluations), shared by concurrent episodes. acquire()
// blocks until one is free and returns its index (an index given N times is
// N slots of one device: `anvil serve --overlap N`); while callers of a higher
// priority wait, no lower one is served (`anvil serve`: an agent's verify ahead
// of a queued evaluation), but for one turn after every kMaxSkips grants that
// passed a lower waiter over (no caller waits for ever).
class Slots {
 public:
  explicit Slots(std::vector<int> ids);
  int acquire(int priority = 0);
  // As acquire, but giving up (nullopt) at `deadline` or once *cancel is true: a tool call waits for
  // a device only while its episode lasts.
  std::optional<int> acquire_until(int priority, std::optional<std::chrono::steady_clock::time_point> deadline,
                                   const std::atomic<bool>* cancel);
  void release(int id);
  size_t size() const { return total_; }
  // Seconds `id` has been held by at least one caller, summed (a hold under way counted to this
  // moment; overlapping holds of one id count once).
  double held_seconds(int id);
  // Callers waiting now at `priority`.
  int waiting(int priority);

  struct Hold {  // RAII
    Slots* slots;
    int id;
    ~Hold() { if (slots) slots->release(id); }
  };

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<int> free_;
  std::map<int, int, std::greater<int>> waiting_;  // priority -> callers waiting
  std::map<int, int> holders_;                                  // id -> callers holding it now
  std::map<int, std::chrono::steady_clock::time_point> since_;  // id -> when its first holder took it (held ones)
  std::map<int, double> held_s_;                                // id -> seconds held before
  static constexpr int kMaxSkips = 4;
  int skips_ = 0;  // grants in a row that passed a lower waiter over
  size_t total_;
};

struct ToolOptions {
  std::filesystem::path workdir;
  std::string task;                    // FILE or DATASET#ROW (the pristine reference the harness uses)
  EvalOptions eval;                    // the verify/profile template (device, preset, timing, timeouts...)
  std::chrono::milliseconds bash_timeout{180000};
  size_t max_output = 12000;           // characters of one tool answer (cut head and tail)
  bool ncu = true;                     // offer ncu_profile when possible
  Slots* gpus = nullptr;               // evaluations take one (its id is the GPU index); null: no queue
  // verify and profile judged elsewhere (`anvil serve --ray`: on a cluster's worker) instead of by
  // evaluate() on `gpus`; given the options evaluate() would get.
  std::function<EvalResult(const EvalOptions&)> remote;
  Slots* builds = nullptr;             // compile takes one; null: no queue
  int gpu_priority = 0;                // of this box's evaluations among the gpus' other users
  bool bash_gpu = false;               // the shell sees the GPUs (unscheduled: beside whatever `gpus` schedules)
  // The episode's wall clock: no tool call runs past it (each call's timeout is at most what is
  // left, and a call made after it runs nothing).
  std::optional<std::chrono::steady_clock::time_point> deadline;
  // Once true (another thread's: a session's DELETE, the server's stop), the episode is over: a
  // running bash or ncu_profile is killed within 100 ms, and no further call runs.
  const std::atomic<bool>* cancel = nullptr;
};

struct ToolOutcome {
  std::string text;          // the tool message's content
  bool error = false;        // the call failed (bad arguments, tool error)
  std::string error_kind;    // bad_arguments | tool_error | refused | wall_clock
  bool out_of_time = false;  // the episode's wall clock ran out before or during the call
  bool finish = false;       // the finish tool was called
  nlohmann::json detail;     // machine-readable extras for the trajectory (an eval result's summary, ...)
  double seconds = 0;
};

class ToolBox {
 public:
  ToolBox(const Environment& env, ToolOptions opts);

  // The tools array of a chat-completions request.
  const nlohmann::json& schemas() const { return schemas_; }
  std::vector<std::string> names() const;
  bool has(const std::string& name) const;

  // Runs one call; `args` is the parsed arguments object.
  ToolOutcome call(const std::string& name, const nlohmann::json& args);

  // What must survive a resume (the todo list).
  nlohmann::json state() const;
  void restore(const nlohmann::json& state);

  const ToolOptions& options() const { return opts_; }
  void set_deadline(std::chrono::steady_clock::time_point t) { opts_.deadline = t; }

 private:
  ToolOutcome bash(const nlohmann::json& a);
  ToolOutcome compile(const nlohmann::json& a);
  ToolOutcome evaluate_tool(const nlohmann::json& a, bool timed);
  ToolOutcome ncu_profile(const nlohmann::json& a);
  ToolOutcome profile_reference(const nlohmann::json& a);
  ToolOutcome tune(const nlohmann::json& a);
  // verify's and profile's evaluation of the workdir (the options' template, this task and workdir).
  EvalOptions workdir_evaluation(bool timed) const;
  // One evaluation, within the episode's wall clock: on a GPU the queue gives, or by the remote judge.
  EvalResult judge(EvalOptions o);
  JailResult run_ncu(const std::vector<std::string>& argv, const std::filesystem::path& task_dir, int gpu);
  // A slot of `slots` (-1 without any), waited for only while the episode lasts: nullopt once its
  // wall clock runs out or it is ended (not_taken then answers the call).
  std::optional<int> take(Slots* slots, int priority) const;
  ToolOutcome not_taken(const std::string& tool) const;
  // Why the episode stopped a call while it waited: ended, or its wall clock ran out.
  std::string stop_reason() const;
  // The shorter of `limit` and what is left of the episode's wall clock (*cut: the clock's).
  std::chrono::milliseconds capped(std::chrono::milliseconds limit, bool* cut) const;
  bool out_of_time() const;
  bool ended() const { return opts_.cancel && opts_.cancel->load(); }  // *cancel set: the episode is over

  const Environment& env_;
  ToolOptions opts_;
  std::string config_error_;
  const JailConfig* config_;               // share/sandbox.json (null: every jailed tool says why)
  std::vector<std::filesystem::path> toolchain_;  // read-only in the shell's and ncu's jails
  FileTools files_;
  TodoList todos_;
  nlohmann::json schemas_;
};

// Checks `args` against a function schema's parameters (required names,
// JSON types of the known properties, no unknown ones). Returns "" when
// valid, else what is wrong, for the model to read.
std::string check_arguments(const nlohmann::json& parameters, const nlohmann::json& args);

// `s` with every byte that is not part of valid UTF-8 replaced by U+FFFD.
std::string valid_utf8(const std::string& s);

// Compact text of an anvil.eval/1 result for the model.
std::string eval_text(const nlohmann::json& result, bool timed);

}  // namespace anvil
