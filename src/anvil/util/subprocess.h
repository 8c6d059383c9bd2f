// subprocess.h: run a program, capture its output, enforce a wall-clock limit.
//
// The child runs in its own process group; on timeout the whole group is
// killed (SIGKILL), so grandchildren (nvcc's cicc, ptxas, ...) die too.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace anvil {

struct SubprocessOptions {
  std::filesystem::path cwd;  // empty: inherit
  // Extra or replaced environment variables (merged over the parent's, or the whole environment
  // with clear_env: nothing of the caller's, such as an API key, reaches the child).
  std::map<std::string, std::string> env;
  bool clear_env = false;
  std::chrono::milliseconds timeout{0};  // 0: none
  size_t max_output = 16 << 20;           // bytes of output kept (the rest is dropped)
  std::optional<std::string> stdin_data;  // written to the child's stdin, then closed
  bool merge_stderr = true;               // stderr into the same capture as stdout
  // Isolation for untrusted children (the evaluation runner):
  bool capture_fd3 = false;     // give the child a pipe on fd 3 and collect what it writes
  bool new_network = false;     // run in a fresh network namespace (no network); see network_isolation_available
  // Run the program as PID 1 of a new PID namespace (with a user namespace when not root), behind
  // a relay process that waits for it and ends with its status: when the group is killed, or the
  // program ends, every process it started ends too, whatever it did to leave the group.
  bool new_pid_namespace = false;
  std::vector<std::pair<int, long>> rlimits;  // (RLIMIT_*, value) set in the child
  size_t max_rss_bytes = 0;     // kill the group when the child's resident memory exceeds this (0: no limit)
  // Waits for the GPU's lock that the timeout does not count: the first `lock_waits` the runner
  // announces (anvil.zygote's {"lock": "waiting"|"held"}; a fresh process announces none), at most
  // `lock_wait_cap` in all. Honoured by run_in_zygote (env/launch.h).
  int lock_waits = 0;
  std::chrono::milliseconds lock_wait_cap{0};
  // Once *cancel is true (another thread's: a session's DELETE, the server's stop), the child's
  // group is killed within 200 ms and the result says cancelled.
  const std::atomic<bool>* cancel = nullptr;
};

struct SubprocessResult {
  bool started = false;  // false: the program could not be run (see error)
  std::string error;     // why it could not be run
  int exit_code = -1;    // valid when exited normally
  int signal = 0;        // terminating signal, or 0
  bool timed_out = false;
  bool cancelled = false;  // killed because *SubprocessOptions::cancel became true
  std::string output;    // stdout (and stderr when merged)
  std::string err_output;  // stderr when not merged
  std::string fd3_output;  // what the child wrote to fd 3 (capture_fd3)
  // Bytes past max_output that were not kept: of output (its first max_output bytes are; a runner
  // forked from the zygote keeps its last: env/launch.h), and of fd 3 (its first are).
  uint64_t output_left_out = 0, fd3_left_out = 0;
  bool memory_exceeded = false;  // killed for exceeding max_rss_bytes
  size_t peak_rss_bytes = 0;     // the child's largest resident set seen (polled)
  double lock_wait_seconds = 0;  // time the timeout did not count: waits for the GPU's lock (lock_waits)
  double seconds = 0;

  bool ok() const { return started && !timed_out && signal == 0 && exit_code == 0; }
  // "exit code 1", "killed by signal 11 (Segmentation fault)", "timed out after 10 s"
  std::string describe() const;
};

SubprocessResult run_subprocess(const std::vector<std::string>& argv, const SubprocessOptions& opts = {});

// Whether this process may create network namespaces (root, or user
// namespaces allowed). Probed once with a throwaway child.
bool network_isolation_available();

// Resident memory of a process in bytes (from /proc); 0 if it is gone.
size_t resident_bytes(int pid);

// Resident memory of a process and all its descendants, in bytes.
size_t tree_resident_bytes(int pid);

// Process groups to kill if this process is told to stop (SIGINT, SIGTERM, SIGHUP): a child's
// group is registered while it runs (run_subprocess does it for every child; the evaluator for a
// runner a zygote forked). install_stop_handler() makes those signals kill every registered group
// with SIGKILL and then end this process as the signal would have.
void register_child_group(int pgid);
void unregister_child_group(int pgid);
void install_stop_handler();
// SIGKILL to every registered group now (async-signal-safe).
void kill_child_groups();

// Finds a program on PATH (or checks a path with a slash); empty if not found.
std::filesystem::path find_program(const std::string& name);

}  // namespace anvil
