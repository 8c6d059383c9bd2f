// sandbox.h: the agent's `bash` tool: one shell command in the jail (util/jail.h).
//
// The command sees the workdir (writable, its cwd and HOME) with the protected files (model.py,
// binding.cpp, binding_registry.h) bound read-only over themselves, the toolchain (the system
// directories, the Python prefixes, CUDA, anvil's include/, the cache's runtime directory) read-only,
// the GPUs, a private /tmp and /dev/shm, and nothing else of the host: not the anvil cache, other
// episodes' workdirs, trajectories, /root, /home or sockets on disk. No network unless asked; its
// own PID namespace (everything it started dies with it, and on timeout); output cut to a limit.
#pragma once

#include <chrono>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "anvil/util/jail.h"

namespace anvil {

struct SandboxOptions {
  std::filesystem::path workdir;       // the only writable directory, and the cwd
  std::chrono::milliseconds timeout{180000};  // then the whole command is killed (0: no limit)
  size_t max_output = 1 << 20;         // bytes kept from the output (stdout and stderr merged)
  bool network = false;                // true: keep the host's network
  bool gpu = true;                     // the GPUs' device files visible
  std::vector<std::string> read_only;  // workdir-relative files bound read-only (protected), those that exist
  std::vector<std::string> env;        // extra "NAME=value" for the shell (replacing a variable of that name)
  const JailConfig* config = nullptr;  // share/sandbox.json (required)
  std::vector<std::filesystem::path> toolchain;  // read-only paths beside the system directories
  std::vector<std::filesystem::path> hide;       // kept out of view where they would show (the anvil cache)
  std::optional<unsigned> uid;  // who the shell is when anvil is root (the episode's own: episode_user)
  const std::atomic<bool>* cancel = nullptr;  // true: the command is killed at once (JailOptions::cancel)
};

using SandboxResult = JailResult;

// Runs `/bin/bash -c command` confined as above, with HOME=workdir, a small clean environment
// (PATH, LANG=C.UTF-8, TERM=dumb, TMPDIR=/tmp, the CUDA and Python variables that are set,
// opts.env) and stdin from /dev/null. Never runs the command unconfined: a set-up step that fails
// is the error ("sandbox: <step>: <reason>").
SandboxResult run_sandboxed(const std::string& command, const SandboxOptions& opts);

}  // namespace anvil
