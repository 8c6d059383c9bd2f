// launch.h: how the evaluator starts its runner (python/anvil/runner.py), and vetting its
// python/anvil/vet.py: a fresh process, or a child forked from a warm zygote
// (python/anvil/zygote.py). Either way the runner is PID 1 of a PID
// namespace of its own (killing it ends every process of the evaluation), gets an environment of
// allow-listed variables only (no API keys or tokens of the caller), runs Python isolated (-I: the
// candidate's directory and the caller's working directory are never on sys.path), and is killed
// whole on timeout, on its memory limit, or when anvil itself is told to stop.
//
// The zygote answers only anvil: its socket lies in a directory only this user can open, it checks
// the peer's uid, and every request carries the token anvil gave it at its start (kept beside the
// socket, readable by this user alone).
#pragma once

#include <chrono>
#include <filesystem>
#include <map>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "anvil/env/toolchain.h"
#include "anvil/util/subprocess.h"

namespace anvil {

// The runner's environment: the allow-listed variables of this process's, plus anvil's own.
std::map<std::string, std::string> runner_environment(const Environment& env);

// What a launched process runs: an evaluation (python/anvil/runner.py), a task's vetting
// (python/anvil/vet.py), the warming of its compile caches (python/anvil/warm.py) or the profile of
// its reference (python/anvil/reference_profile.py). Each reads one request on stdin and writes one
// report to fd 3.
enum class PyModule { kRunner, kVet, kWarm, kReferenceProfile };

// A fresh `python -I` process running `module` as PID 1 of a new PID namespace; so: its limits,
// cwd, env, stdin (the request).
SubprocessResult run_python_fresh(const Environment& env, PyModule module, const SubprocessOptions& so);

// The waits for the GPU's lock a runner announces that its timeout does not count
// (SubprocessOptions::lock_waits and lock_wait_cap): the first lock_waits of them, at most the cap in
// all. A wait that begins once they are used up, or an end without a beginning, is not counted.
class LockWaits {
 public:
  using Clock = std::chrono::steady_clock;
  explicit LockWaits(const SubprocessOptions& so);
  // A wait begins (waiting) or ends; returns how far the deadline moves (an ended wait's length).
  Clock::duration told(bool waiting, Clock::time_point now);
  // The wait under way (begun, not yet ended), as far as it counts.
  Clock::duration ongoing(Clock::time_point now) const;
  // Every wait counted so far, the one under way included.
  Clock::duration total(Clock::time_point now) const;

 private:
  int left_;
  Clock::duration cap_;
  Clock::duration counted_{};
  std::optional<Clock::time_point> since_;
};

// The runner's waits for the GPU's lock (timing.GpuLock: its taking, and a parked measurement's wait
// for the GPU alone) that its timeout (so.timeout, set first) does not count: only the judge's own,
// each before any candidate code exists: none without the request's `gpu_lock`; 2 with `prepare`
// "together" and defenses (the judge's process never runs candidate code); else 1 (the lock is taken
// before the candidate's code is imported; a vetting's, a warm-up's). At most kLockWaitTimeouts
// timeouts of them (those ahead on the GPU are each killed at their own timeout: with --overlap 16 at
// most, two waves' worth), and never more than kLockWaitCeiling.
inline constexpr int kLockWaitTimeouts = 32;
inline constexpr std::chrono::hours kLockWaitCeiling{1};
void exclude_lock_waits(SubprocessOptions& so, const nlohmann::json& request, bool defenses);

// The same through the zygote at `socket_path` (ensure_zygote); the report and output go through
// files in `scratch`. *ended_at_report: the process said its report was complete and was killed
// then, without waiting for its teardown. The timeout does not count the waits for the GPU's lock
// the process announces (LockWaits).
SubprocessResult run_in_zygote(const std::string& socket_path, PyModule module, const nlohmann::json& request,
                               const SubprocessOptions& so, const std::filesystem::path& scratch,
                               bool* ended_at_report);

// How launch_python ran its process.
struct Launch {
  SubprocessResult result;
  bool zygote = false;           // forked from the zygote at `socket` (else a fresh process)
  std::string socket;
  bool ended_at_report = false;  // see run_in_zygote
  std::string zygote_error;      // why "auto" found no zygote (a fresh process ran instead)
};

// `module` on `request`: forked from the zygote when `zygote` is "auto" (ensure_zygote) or a
// socket's path; a fresh process when it is "none", no zygote can start, or the zygote could not run
// it (zygote_error says why). The one rule for evaluations and vettings alike.
Launch launch_python(const Environment& env, PyModule module, const std::string& zygote, const nlohmann::json& request,
                     const SubprocessOptions& so, const std::filesystem::path& scratch);

// The socket of this environment's warm zygote, started (detached) if none answers. Returns "" and
// fills *err when one cannot be started.
std::string ensure_zygote(const Environment& env, std::string* err);

}  // namespace anvil
