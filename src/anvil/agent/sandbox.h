// sandbox.h: the agent's `bash` tool: one shell command, confined.
//
// The command runs with the workdir as its only writable place (the rest of
// the file system read-only, a private /tmp and /dev/shm), no network, its own
// session and PID namespace (everything it started dies with it, and on
// timeout), and output cut to a limit. bubblewrap (bwrap) is used where it
// works; otherwise anvil confines the shell itself with Linux namespaces (user
// when not root, mount, network, IPC, UTS, PID; read-only bind mounts; no
// capabilities). The workdir's protected files (model.py, binding.cpp,
// binding_registry.h) are bound read-only inside it, and the anvil cache is
// hidden. sandbox.cpp draws the whole picture.
#pragma once

#include <chrono>
#include <filesystem>
#include <string>
#include <vector>

namespace anvil {

struct SandboxOptions {
  std::filesystem::path workdir;       // the only writable directory, and the cwd
  std::chrono::milliseconds timeout{180000};  // then the whole command is killed (0: no limit)
  size_t max_output = 1 << 20;         // bytes kept from the output (stdout and stderr merged)
  bool network = false;                // true: keep the host's network (and /run)
  std::vector<std::string> read_only;  // workdir-relative files bound read-only (protected), those that exist
  std::vector<std::string> env;        // extra "NAME=value" for the shell (replacing a variable of that name)
};

struct SandboxResult {
  bool started = false;  // the command ran (false: it did not run at all; see error)
  std::string error;     // why it could not run: "sandbox: <step>: <reason>"
  int exit_code = -1;    // the shell's; a command killed by signal N gives 128+N, as in the shell
  int signal = 0;        // the signal that ended the sandbox itself (SIGKILL after a timeout)
  bool timed_out = false;
  std::string output;    // stdout+stderr, at most max_output bytes
  size_t output_bytes = 0;  // what the command wrote in all (more than output.size() when cut)
  double seconds = 0;
  std::string how;       // "bubblewrap" | "namespaces"
};

// Runs `bash -c command` confined as above, with the workdir as cwd, HOME=workdir,
// a small clean environment (PATH, LANG=C.UTF-8, TERM=dumb, TMPDIR=/tmp, the
// CUDA and Python variables that are set, opts.env) and stdin from /dev/null.
// Never runs the command unconfined: a set-up step that fails is the error.
SandboxResult run_sandboxed(const std::string& command, const SandboxOptions& opts);

// How commands would be confined here: "bubblewrap", "namespaces", or "" (no
// confinement possible: run_sandboxed then refuses, with the reason in *why).
// Each method is probed once per process with a trivial command; bubblewrap is
// preferred. ANVIL_SANDBOX=bubblewrap|namespaces forces one (read at each call).
std::string sandbox_method(std::string* why = nullptr);

}  // namespace anvil
