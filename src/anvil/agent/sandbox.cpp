// sandbox.cpp: confining the agent's shell commands.
//
// Both methods give the command the same world: a read-only file system but
// for the workdir (and a private /tmp), the protected files bound read-only,
// the anvil cache hidden, no network, its own PID namespace (when its first
// process exits, everything it started dies, so a background job cannot hold
// the output pipe open or outlive the timeout), and a clean environment.
//
// Method "namespaces" (no bwrap, e.g. the GPU host): the child unshares user
// (when not root), mount, network, IPC and PID namespaces, then forks the
// shell as PID 1 of the new namespace, which sets up the mounts (a recursive
// read-only mount_setattr over the whole tree, then the workdir made writable
// again), drops every capability and sets no_new_privs before exec. Set-up
// errors travel back over a close-on-exec pipe and are reported by name.
#include "anvil/agent/sandbox.h"

#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <linux/capability.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "anvil/util/fs.h"
#include "anvil/util/subprocess.h"

#ifndef SYS_mount_setattr
#define SYS_mount_setattr 442
#endif

namespace anvil {

namespace {

struct MountAttr {
  uint64_t attr_set, attr_clr, propagation, userns_fd;
};
constexpr uint64_t kAttrRdonly = 0x1;
constexpr unsigned kAtRecursive = 0x8000;

std::string cache_dir() {
  if (const char* c = std::getenv("ANVIL_CACHE"); c && *c) return c;
  if (const char* h = std::getenv("HOME"); h && *h) return std::string(h) + "/.cache/anvil";
  return "";
}

std::vector<std::string> clean_env(const SandboxOptions& o) {
  std::vector<std::string> env = {"PATH=/usr/local/cuda/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                                  "HOME=" + o.workdir.string(), "LANG=C.UTF-8", "TERM=dumb", "TMPDIR=/tmp"};
  if (const char* p = std::getenv("PATH"); p && *p) env[0] = std::string("PATH=") + p;
  for (const char* k : {"CUDA_VISIBLE_DEVICES", "CUDA_HOME", "LD_LIBRARY_PATH", "ANVIL_PYTHON", "NVIDIA_VISIBLE_DEVICES"}) {
    if (const char* v = std::getenv(k); v && *v) env.push_back(std::string(k) + "=" + v);
  }
  for (const auto& e : o.env) env.push_back(e);
  return env;
}

std::vector<std::string> existing_protected(const SandboxOptions& o) {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& f : o.read_only) {
    fs::path p = o.workdir / f;
    if (fs::exists(p, ec) && !fs::is_symlink(p, ec)) out.push_back(fs::canonical(p, ec).string());
  }
  return out;
}

bool bwrap_works() {
  static std::once_flag once;
  static bool works = false;
  std::call_once(once, [] {
    if (find_program("bwrap").empty()) return;
    SubprocessOptions so;
    so.timeout = std::chrono::seconds(10);
    SubprocessResult r = run_subprocess({"bwrap", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc",
                                         "--unshare-net", "--unshare-pid", "--die-with-parent", "true"},
                                        so);
    works = r.ok();
  });
  return works;
}

// Writes the failing step and errno to the error pipe and exits.
[[noreturn]] void die(int fd, const char* step) {
  std::string msg = std::string("sandbox: ") + step + ": " + std::strerror(errno);
  if (write(fd, msg.data(), msg.size()) < 0) {
  }
  _exit(126);
}

bool write_text(const char* path, const std::string& text) {
  int fd = open(path, O_WRONLY | O_CLOEXEC);
  if (fd < 0) return false;
  bool ok = write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  close(fd);
  return ok;
}

// In the child: the confinement of method "namespaces", then exec. Never returns.
[[noreturn]] void confine_and_exec(const std::string& command, const SandboxOptions& o, int errfd,
                                   const std::vector<std::string>& ro_files, const std::string& cache,
                                   const std::vector<std::string>& env) {
  uid_t uid = getuid();
  gid_t gid = getgid();
  int flags = CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWPID;
  if (uid != 0) flags |= CLONE_NEWUSER;
  if (unshare(flags) != 0) die(errfd, uid != 0 ? "unshare(user, mount, net, ipc, pid)" : "unshare(mount, net, ipc, pid)");
  if (uid != 0) {
    if (!write_text("/proc/self/setgroups", "deny")) die(errfd, "write /proc/self/setgroups");
    if (!write_text("/proc/self/uid_map", std::to_string(uid) + " " + std::to_string(uid) + " 1"))
      die(errfd, "write /proc/self/uid_map");
    if (!write_text("/proc/self/gid_map", std::to_string(gid) + " " + std::to_string(gid) + " 1"))
      die(errfd, "write /proc/self/gid_map");
  }
  // The shell is PID 1 of the new PID namespace; this process waits for it.
  pid_t shell = fork();
  if (shell < 0) die(errfd, "fork");
  if (shell > 0) {
    close(errfd);
    int st = 0;
    while (waitpid(shell, &st, 0) < 0 && errno == EINTR) {
    }
    if (WIFSIGNALED(st)) _exit(128 + WTERMSIG(st));
    _exit(WIFEXITED(st) ? WEXITSTATUS(st) : 1);
  }
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  std::string wd = o.workdir.string();
  // A handle on the workdir first: the private /tmp (or the hidden cache) may cover its path.
  int wdfd = open(wd.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (wdfd < 0) die(errfd, "open the workdir");
  if (mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) die(errfd, "make / private");
  if (mount("tmpfs", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, "size=1g,mode=1777") != 0) die(errfd, "mount tmpfs on /tmp");
  if (!cache.empty() && access(cache.c_str(), F_OK) == 0 && wd.rfind(cache, 0) != 0) {
    if (mount("tmpfs", cache.c_str(), "tmpfs", MS_NOSUID | MS_NODEV, "size=1m,mode=0755") != 0)
      die(errfd, "hide the anvil cache");
  }
  std::error_code ec;
  fs::create_directories(wd, ec);  // its path inside the new /tmp, when it lives under /tmp
  std::string handle = "/proc/self/fd/" + std::to_string(wdfd);
  if (mount(handle.c_str(), wd.c_str(), nullptr, MS_BIND | MS_REC, nullptr) != 0) die(errfd, "bind the workdir");
  close(wdfd);
  MountAttr ro{kAttrRdonly, 0, 0, 0};
  if (syscall(SYS_mount_setattr, AT_FDCWD, "/", kAtRecursive, &ro, sizeof ro) != 0)
    die(errfd, "mount_setattr(/, read-only, recursive)");
  MountAttr rw{0, kAttrRdonly, 0, 0};
  if (syscall(SYS_mount_setattr, AT_FDCWD, wd.c_str(), kAtRecursive, &rw, sizeof rw) != 0)
    die(errfd, "mount_setattr(workdir, writable)");
  if (syscall(SYS_mount_setattr, AT_FDCWD, "/tmp", 0, &rw, sizeof rw) != 0) die(errfd, "mount_setattr(/tmp, writable)");
  for (const auto& f : ro_files) {
    if (mount(f.c_str(), f.c_str(), nullptr, MS_BIND, nullptr) != 0) die(errfd, "bind a protected file");
    if (syscall(SYS_mount_setattr, AT_FDCWD, f.c_str(), 0, &ro, sizeof ro) != 0)
      die(errfd, "mount_setattr(protected file, read-only)");
  }
  // A fresh /proc for the new PID namespace (its processes only); keep the old one if that fails.
  mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, nullptr);
  if (chdir(wd.c_str()) != 0) die(errfd, "chdir to the workdir");
  // No way back: no capabilities, no privilege gain through exec.
  for (int cap = 0; cap <= 63; ++cap) prctl(PR_CAPBSET_DROP, cap, 0, 0, 0);
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) die(errfd, "prctl(PR_SET_NO_NEW_PRIVS)");
  __user_cap_header_struct hdr{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[2] = {};
  if (syscall(SYS_capset, &hdr, data) != 0) die(errfd, "capset(none)");
  std::vector<char*> envp;
  for (const auto& e : env) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
  const char* argv[] = {"bash", "-c", command.c_str(), nullptr};
  execve("/bin/bash", const_cast<char* const*>(argv), envp.data());
  die(errfd, "exec /bin/bash");
}

std::vector<std::string> bwrap_argv(const std::string& command, const SandboxOptions& o,
                                    const std::vector<std::string>& ro_files, const std::string& cache) {
  std::string wd = o.workdir.string();
  std::vector<std::string> a = {"bwrap",          "--ro-bind",      "/",       "/",          "--dev-bind",
                                "/dev",           "/dev",           "--proc",  "/proc",      "--tmpfs",
                                "/tmp",           "--bind",         wd,        wd,           "--unshare-net",
                                "--unshare-ipc",  "--unshare-pid",  "--unshare-uts", "--die-with-parent",
                                "--new-session", "--cap-drop", "ALL"};
  for (const auto& f : ro_files) a.insert(a.end(), {"--ro-bind", f, f});
  std::error_code ec;
  if (!cache.empty() && fs::exists(cache, ec) && wd.rfind(cache, 0) != 0) a.insert(a.end(), {"--tmpfs", cache});
  a.insert(a.end(), {"--chdir", wd, "--", "/bin/bash", "-c", command});
  return a;
}

}  // namespace

std::string sandbox_method(std::string* why) {
  const char* forced = std::getenv("ANVIL_SANDBOX");
  std::string f = forced ? forced : "";
  if (f == "bubblewrap") {
    if (bwrap_works()) return "bubblewrap";
    if (why) *why = "ANVIL_SANDBOX=bubblewrap, but bwrap is missing or does not work here";
    return "";
  }
  if (f == "namespaces") return "namespaces";
  if (!f.empty() && why) *why = "ANVIL_SANDBOX=" + f + " is not a method (bubblewrap or namespaces)";
  if (!f.empty()) return "";
  return bwrap_works() ? "bubblewrap" : "namespaces";
}

SandboxResult run_sandboxed(const std::string& command, const SandboxOptions& opts_in) {
  SandboxResult res;
  auto t0 = std::chrono::steady_clock::now();
  SandboxOptions o = opts_in;
  std::error_code ec;
  o.workdir = fs::canonical(o.workdir, ec);
  if (ec || !fs::is_directory(o.workdir, ec)) {
    res.error = "sandbox: the workdir " + opts_in.workdir.string() + " does not exist";
    return res;
  }
  std::string why;
  std::string method = sandbox_method(&why);
  if (method.empty()) {
    res.error = "sandbox: " + why;
    return res;
  }
  res.how = method;
  std::vector<std::string> ro = existing_protected(o);
  std::string cache = cache_dir();
  if (!cache.empty()) cache = fs::weakly_canonical(cache, ec).string();
  std::vector<std::string> env = clean_env(o);
  std::vector<std::string> argv;
  if (method == "bubblewrap") argv = bwrap_argv(command, o, ro, cache);

  int out[2], errp[2];
  if (pipe2(out, O_CLOEXEC) != 0 || pipe2(errp, O_CLOEXEC) != 0) {
    res.error = std::string("sandbox: pipe: ") + std::strerror(errno);
    return res;
  }
  pid_t pid = fork();
  if (pid < 0) {
    res.error = std::string("sandbox: fork: ") + std::strerror(errno);
    return res;
  }
  if (pid == 0) {
    setpgid(0, 0);
    int null = open("/dev/null", O_RDONLY);
    dup2(null, 0);
    dup2(out[1], 1);
    dup2(out[1], 2);
    for (int sig = 1; sig < NSIG; ++sig) signal(sig, SIG_DFL);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    if (method == "bubblewrap") {
      std::vector<char*> av, envp;
      for (auto& a : argv) av.push_back(a.data());
      av.push_back(nullptr);
      for (auto& e : env) envp.push_back(e.data());
      envp.push_back(nullptr);
      std::string bwrap = find_program("bwrap").string();
      execve(bwrap.c_str(), av.data(), envp.data());
      die(errp[1], "exec bwrap");
    }
    confine_and_exec(command, o, errp[1], ro, cache, env);
  }
  close(out[1]);
  close(errp[1]);
  auto deadline = t0 + o.timeout;
  bool killed = false;
  char buf[65536];
  while (true) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0 && !killed) {
      kill(-pid, SIGKILL);
      kill(pid, SIGKILL);
      killed = true;
      res.timed_out = true;
    }
    pollfd p{out[0], POLLIN, 0};
    int n = poll(&p, 1, killed ? 1000 : static_cast<int>(std::min<long>(left.count(), 1000)));
    if (n < 0 && errno == EINTR) continue;
    if (n == 0) {
      if (killed) break;  // nothing more will come
      continue;
    }
    ssize_t r = read(out[0], buf, sizeof buf);
    if (r <= 0) break;
    res.output_bytes += static_cast<size_t>(r);
    if (res.output.size() < o.max_output) {
      res.output.append(buf, std::min<size_t>(static_cast<size_t>(r), o.max_output - res.output.size()));
    }
  }
  close(out[0]);
  int st = 0;
  while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
  }
  std::string setup_error;
  ssize_t r = read(errp[0], buf, sizeof buf - 1);
  if (r > 0) setup_error.assign(buf, static_cast<size_t>(r));
  close(errp[0]);
  res.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (!setup_error.empty()) {
    res.error = setup_error;
    return res;
  }
  res.started = true;
  if (WIFEXITED(st)) {
    res.exit_code = WEXITSTATUS(st);
  } else if (WIFSIGNALED(st)) {
    res.signal = WTERMSIG(st);
  }
  return res;
}

}  // namespace anvil
