// jail.h: run one program confined: the one door for code anvil does not trust.
//
// The program sees a fresh root file system holding only what it is given:
//   the system directories   read-only (/usr, /bin, /lib*, /opt, /sys, as the config's view lists)
//   /etc                     only the entries the view lists (ld.so.cache, passwd, ...)
//   toolchain paths          read-only (Python prefixes, CUDA, anvil's include/, ...)
//   binds                    the caller's files and directories, read-only or writable
//   hidden paths             an empty read-only directory where they would be visible
//   /dev                     null zero full random urandom tty (+ the GPU nodes when asked)
//   /tmp, /dev/shm           private tmpfs of a fixed size
//   /proc                    its own, with the kernel's knobs read-only and a few entries masked
// and nothing else of the host (/root, /home, /work, /var, /run, the anvil cache...). It runs in
// new mount, PID, IPC, UTS and (unless asked) network namespaces, as the config's unprivileged
// uid:gid when anvil is root (else as the user, mapped by a user namespace), with no capabilities,
// no_new_privs, the caller's rlimits and a cap on processes, a clean environment and a new session; when it exits or the
// wall-clock timeout kills it, everything it started dies with it (PID 1 of its namespace ends).
//
// Two methods draw the same picture: "namespaces" (anvil's own: open_tree/move_mount into a tmpfs,
// pivot_root; needs nothing installed: the GPU host has no bwrap) and "bubblewrap" (bwrap's
// options; as root, setpriv drops to the unprivileged uid inside, since bwrap's --uid would map it
// to root's kuid). namespaces is preferred where it works (it execs nothing: cheaper per compile);
// ANVIL_SANDBOX=bubblewrap|namespaces forces one. Every set-up step that fails is reported by name
// ("sandbox: pivot_root: Invalid argument") and the program does not run: never unconfined.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace anvil {

// What of the host's own system a program sees, read-only.
struct SystemView {
  std::vector<std::string> dirs;  // directories bound whole (or recreated, when a symlink)
  std::vector<std::string> etc;   // names under /etc ("python3*": a prefix)
};

// The shared constants of the confinement, as share/sandbox.json holds them (one home for them:
// the Python judge reads the same file).
struct JailConfig {
  unsigned uid = 0, gid = 0;              // who the program is when anvil is root
  // An episode's own users when anvil is root: [episode_uid_base, + episode_uid_span), one drawn per
  // workdir (episode_uid), so one episode's processes never count against another's limit.
  unsigned episode_uid_base = 0, episode_uid_span = 0;
  // An episode's shell: each process's private memory (RLIMIT_DATA) and each file's size (RLIMIT_FSIZE).
  uint64_t shell_data_bytes = 0, shell_file_bytes = 0;
  SystemView system;                      // system_dirs and etc: the view of every door but the builds
  SystemView build;                       // build: the compilers', the assembler's and the linker's view
  uint64_t tmp_bytes = 0, shm_bytes = 0;  // sizes of the private /tmp and /dev/shm
  uint64_t processes = 0;                 // RLIMIT_NPROC: processes and threads (see JailLimits)
  std::vector<std::string> dev;           // names under /dev always present
  std::vector<std::string> gpu_dev;       // names under /dev added when the GPU is asked for
  std::vector<std::string> proc_read_only;  // names under /proc bound read-only
  std::vector<std::string> proc_masked;     // names under /proc covered (by /dev/null or an empty dir)
};

// A user of its own for an episode's workdir and shell, drawn from config's episode range.
unsigned episode_uid(const JailConfig& config);

// Reads a config file; false with *err naming the file and what is wrong.
bool load_jail_config(const std::filesystem::path& file, JailConfig* out, std::string* err);

struct JailBind {
  std::filesystem::path path;  // a host file or directory, bound at the same path; it must exist
  bool writable = false;
};

struct JailLimits {            // 0: no limit
  uint64_t address_space = 0;  // RLIMIT_AS, bytes (per process)
  uint64_t cpu_seconds = 0;    // RLIMIT_CPU (per process): SIGXCPU, then SIGKILL 5 s later
  uint64_t file_size = 0;      // RLIMIT_FSIZE, bytes: a larger write fails with SIGXFSZ
  uint64_t data = 0;           // RLIMIT_DATA, bytes (per process): private writable memory (a GPU's
                               // address-space reservations are not counted, unlike RLIMIT_AS)
  // RLIMIT_NPROC, processes and threads (0: the config's `processes`): a fork bomb fails with
  // EAGAIN instead of taking the host's PIDs. Counted per user namespace, so per jail when anvil
  // is not root; as root, for the config's uid on the whole host (every jail's together).
  uint64_t processes = 0;
};

struct JailOptions {
  const JailConfig* config = nullptr;  // required
  const SystemView* view = nullptr;    // the host's system as the program sees it (null: config->system)
  std::filesystem::path cwd = "/";     // inside the jail (a bound directory, or /)
  std::vector<JailBind> binds;
  std::vector<std::filesystem::path> toolchain;  // read-only; missing ones are skipped
  std::vector<std::filesystem::path> hide;       // covered by an empty read-only directory if visible
  bool gpu = false;                    // bind the GPU device nodes (those that exist)
  bool network = false;                // keep the host's network namespace
  std::vector<std::string> env;        // the program's whole environment ("NAME=value")
  std::optional<std::string> stdin_data;  // else stdin is /dev/null
  std::chrono::milliseconds timeout{0};   // wall clock, then everything is killed (0: none)
  size_t max_output = 1 << 20;            // bytes kept of stdout (and of stderr when separate)
  bool merge_stderr = true;               // stderr into output, else into err_output
  JailLimits limits;
  // Who the program is when anvil is root, in place of the config's uid:gid (an episode's own user:
  // its processes counted apart from every other jail's, its files its own). Ignored otherwise.
  std::optional<unsigned> uid;
  // The system-call filter of util/syscall_filter.h (no namespaces, mounts, tracing, kernel code)
  // on the program and all it starts. Off only for a program that makes a jail of its own.
  bool syscall_filter = true;
  // Once *cancel is true (another thread's: a session's DELETE, the server's stop), everything is
  // killed within 100 ms and the result says cancelled.
  const std::atomic<bool>* cancel = nullptr;
};

struct JailResult {
  bool started = false;   // the program ran (false: see error; nothing ran)
  std::string error;      // "sandbox: <step>: <reason>"
  int exit_code = -1;     // the program's; killed by signal N: 128+N, as a shell reports it
  int signal = 0;         // the signal that ended the jail itself (SIGKILL after the timeout)
  bool timed_out = false;
  bool cancelled = false;  // killed because *JailOptions::cancel became true
  std::string output;      // stdout (+ stderr when merged), at most max_output bytes
  std::string err_output;  // stderr when not merged, at most max_output bytes
  size_t output_bytes = 0;  // all the program wrote to stdout (and merged stderr)
  double seconds = 0;
  std::string how;  // "bubblewrap" | "namespaces"

  bool ok() const { return started && !timed_out && signal == 0 && exit_code == 0; }
  // "exit code 1", "killed by signal 9 (Killed)", "timed out after 10 s", or the error.
  std::string describe() const;
};

// Runs argv (argv[0] an absolute path inside the view) confined as above.
JailResult run_jailed(const std::vector<std::string>& argv, const JailOptions& opts);

// How programs would be confined here: "namespaces", "bubblewrap", or "" (no confinement possible:
// run_jailed then refuses, with the reason in *why). Each method is probed once per process with a
// trivial program; ANVIL_SANDBOX=bubblewrap|namespaces forces one (read at each call).
std::string jail_method(const JailConfig& config, std::string* why = nullptr);

// The uid and gid a jailed program runs as: the config's when anvil is root, else anvil's own.
unsigned jail_uid(const JailConfig& config);
unsigned jail_gid(const JailConfig& config);

}  // namespace anvil
