// sandbox.h: the agent's `bash` tool: one shell command, confined.
//
// The command runs with the workdir as its only writable place (the rest of
// the file system read-only, a private /tmp), no network, its own process
// group killed on timeout, and output cut to a limit. bubblewrap (bwrap) is
// used where installed; otherwise anvil confines the shell itself with Linux
// namespaces (user, mount, network, read-only bind mounts). The workdir's
// protected files (model.py, binding.cpp, binding_registry.h) are bound
// read-only inside it.
#pragma once

#include <chrono>
#include <filesystem>
#include <string>
#include <vector>

namespace anvil {

struct SandboxOptions {
  std::filesystem::path workdir;       // the only writable directory, and the cwd
  std::chrono::milliseconds timeout{180000};
  size_t max_output = 1 << 20;         // bytes kept from the output (stdout and stderr merged)
  bool network = false;
  std::vector<std::string> read_only;  // workdir-relative files bound read-only (protected)
  std::vector<std::string> env;        // extra "NAME=value" for the shell
};

struct SandboxResult {
  bool started = false;
  std::string error;     // why it could not run
  int exit_code = -1;
  int signal = 0;
  bool timed_out = false;
  std::string output;    // stdout+stderr, at most max_output bytes
  size_t output_bytes = 0;  // what the command wrote in all (more than output.size() when cut)
  double seconds = 0;
  std::string how;       // "bubblewrap" | "namespaces"
};

// Runs `bash -c command` confined as above.
SandboxResult run_sandboxed(const std::string& command, const SandboxOptions& opts);

// How commands would be confined here: "bubblewrap", "namespaces", or "" (no
// confinement possible: run_sandboxed then refuses, with the reason in *why).
std::string sandbox_method(std::string* why = nullptr);

}  // namespace anvil
