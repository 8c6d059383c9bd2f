// subprocess.h: run a program, capture its output, enforce a wall-clock limit.
//
// The child runs in its own process group; on timeout the whole group is
// killed (SIGKILL), so grandchildren (nvcc's cicc, ptxas, ...) die too.
#pragma once

#include <chrono>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace anvil {

struct SubprocessOptions {
  std::filesystem::path cwd;  // empty: inherit
  // Extra or replaced environment variables (merged over the parent's).
  std::map<std::string, std::string> env;
  std::chrono::milliseconds timeout{0};  // 0: none
  size_t max_output = 16 << 20;           // bytes of output kept (the rest is dropped)
  std::optional<std::string> stdin_data;  // written to the child's stdin, then closed
  bool merge_stderr = true;               // stderr into the same capture as stdout
};

struct SubprocessResult {
  bool started = false;  // false: the program could not be run (see error)
  std::string error;     // why it could not be run
  int exit_code = -1;    // valid when exited normally
  int signal = 0;        // terminating signal, or 0
  bool timed_out = false;
  std::string output;    // stdout (and stderr when merged)
  std::string err_output;  // stderr when not merged
  double seconds = 0;

  bool ok() const { return started && !timed_out && signal == 0 && exit_code == 0; }
  // "exit code 1", "killed by signal 11 (Segmentation fault)", "timed out after 10 s"
  std::string describe() const;
};

SubprocessResult run_subprocess(const std::vector<std::string>& argv, const SubprocessOptions& opts = {});

// Finds a program on PATH (or checks a path with a slash); empty if not found.
std::filesystem::path find_program(const std::string& name);

}  // namespace anvil
