#include "anvil/util/subprocess.h"

#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <vector>

extern char** environ;

namespace anvil {

std::string SubprocessResult::describe() const {
  if (!started) return "could not start: " + error;
  if (timed_out) return "timed out after " + std::to_string(static_cast<int>(seconds + 0.5)) + " s";
  if (signal != 0) return "killed by signal " + std::to_string(signal) + " (" + strsignal(signal) + ")";
  return "exit code " + std::to_string(exit_code);
}

std::filesystem::path find_program(const std::string& name) {
  if (name.find('/') != std::string::npos) {
    return ::access(name.c_str(), X_OK) == 0 ? std::filesystem::path(name) : std::filesystem::path();
  }
  const char* path = std::getenv("PATH");
  std::string p = path ? path : "/usr/local/bin:/usr/bin:/bin";
  size_t start = 0;
  while (start <= p.size()) {
    size_t end = p.find(':', start);
    if (end == std::string::npos) end = p.size();
    std::string dir = p.substr(start, end - start);
    if (dir.empty()) dir = ".";
    std::filesystem::path candidate = std::filesystem::path(dir) / name;
    struct stat st;
    if (::stat(candidate.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(candidate.c_str(), X_OK) == 0) {
      return candidate;
    }
    start = end + 1;
  }
  return {};
}

bool network_isolation_available() {
  static std::once_flag once;
  static bool available = false;
  std::call_once(once, [] {
    pid_t pid = fork();
    if (pid == 0) _exit(unshare(CLONE_NEWNET) == 0 ? 0 : 1);
    int status = 0;
    if (pid > 0 && waitpid(pid, &status, 0) == pid) available = WIFEXITED(status) && WEXITSTATUS(status) == 0;
  });
  return available;
}

size_t resident_bytes(int pid) {
  char path[64];
  std::snprintf(path, sizeof path, "/proc/%d/statm", static_cast<int>(pid));
  FILE* f = std::fopen(path, "r");
  if (!f) return 0;
  unsigned long size = 0, resident = 0;
  int n = std::fscanf(f, "%lu %lu", &size, &resident);
  std::fclose(f);
  return n == 2 ? static_cast<size_t>(resident) * static_cast<size_t>(sysconf(_SC_PAGESIZE)) : 0;
}

size_t tree_resident_bytes(int pid) {
  size_t total = 0;
  std::vector<int> todo = {pid};
  for (size_t guard = 0; !todo.empty() && guard < 100000; ++guard) {
    int p = todo.back();
    todo.pop_back();
    total += resident_bytes(p);
    char dir[64];
    std::snprintf(dir, sizeof dir, "/proc/%d/task", p);
    std::error_code ec;
    for (auto it = std::filesystem::directory_iterator(dir, ec); !ec && it != std::filesystem::directory_iterator();
         it.increment(ec)) {
      FILE* f = std::fopen((it->path() / "children").c_str(), "r");
      if (!f) continue;
      int child;
      while (std::fscanf(f, "%d", &child) == 1) todo.push_back(child);
      std::fclose(f);
    }
  }
  return total;
}

// ---------------------------------------------------------------------------------------------
// Stopping cleanly: the groups to kill (a fixed table, read from a signal handler).

namespace {
constexpr int kMaxGroups = 1024;
std::atomic<int> g_groups[kMaxGroups];
}  // namespace

void register_child_group(int pgid) {
  for (auto& slot : g_groups) {
    int expected = 0;
    if (slot.compare_exchange_strong(expected, pgid)) return;
  }
}

void unregister_child_group(int pgid) {
  for (auto& slot : g_groups) {
    int expected = pgid;
    if (slot.compare_exchange_strong(expected, 0)) return;
  }
}

void kill_child_groups() {
  for (auto& slot : g_groups) {
    int pgid = slot.load();
    if (pgid > 0) ::kill(-pgid, SIGKILL);
  }
}

namespace {
void stop_handler(int sig) {
  kill_child_groups();
  ::signal(sig, SIG_DFL);
  ::raise(sig);
}
}  // namespace

void install_stop_handler() {
  struct sigaction sa {};
  sa.sa_handler = stop_handler;
  sigemptyset(&sa.sa_mask);
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) sigaction(sig, &sa, nullptr);
}

namespace {

void set_cloexec_nonblock(int fd) {
  fcntl(fd, F_SETFD, FD_CLOEXEC);
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
}
}  // namespace

SubprocessResult run_subprocess(const std::vector<std::string>& argv, const SubprocessOptions& opts) {
  SubprocessResult r;
  if (argv.empty()) {
    r.error = "empty command";
    return r;
  }
  auto t0 = std::chrono::steady_clock::now();

  // Everything the child needs is prepared before fork: no allocation after it.
  std::vector<char*> cargv;
  for (const auto& a : argv) cargv.push_back(const_cast<char*>(a.c_str()));
  cargv.push_back(nullptr);
  std::vector<std::string> envs;
  for (char** e = opts.clear_env ? nullptr : environ; e && *e; ++e) {
    std::string kv = *e;
    std::string key = kv.substr(0, kv.find('='));
    if (opts.env.count(key) == 0) envs.push_back(kv);
  }
  for (const auto& [k, v] : opts.env) envs.push_back(k + "=" + v);
  std::vector<char*> cenv;
  for (auto& e : envs) cenv.push_back(e.data());
  cenv.push_back(nullptr);
  std::filesystem::path exe = find_program(argv[0]);
  if (exe.empty()) {
    r.error = "program not found: " + argv[0];
    return r;
  }
  std::string exe_s = exe.string();
  std::string cwd_s = opts.cwd.string();
  // The PID namespace (and, when not root, the user namespace that lets us make it).
  bool as_root = ::geteuid() == 0;
  int ns_flags = (opts.new_network ? CLONE_NEWNET : 0) | (opts.new_pid_namespace ? CLONE_NEWPID : 0);
  if (ns_flags & CLONE_NEWPID && !as_root) ns_flags |= CLONE_NEWUSER;
  char uid_map[64], gid_map[64];
  std::snprintf(uid_map, sizeof uid_map, "%d %d 1", static_cast<int>(::geteuid()), static_cast<int>(::geteuid()));
  std::snprintf(gid_map, sizeof gid_map, "%d %d 1", static_cast<int>(::getegid()), static_cast<int>(::getegid()));

  int out_pipe[2], err_pipe[2] = {-1, -1}, in_pipe[2] = {-1, -1}, fd3_pipe[2] = {-1, -1}, exec_pipe[2];
  if (pipe(out_pipe) != 0 || pipe(exec_pipe) != 0 || (!opts.merge_stderr && pipe(err_pipe) != 0) ||
      (opts.stdin_data && pipe(in_pipe) != 0) || (opts.capture_fd3 && pipe(fd3_pipe) != 0)) {
    r.error = std::string("pipe: ") + std::strerror(errno);
    return r;
  }
  fcntl(exec_pipe[1], F_SETFD, FD_CLOEXEC);

  pid_t pid = fork();
  if (pid < 0) {
    r.error = std::string("fork: ") + std::strerror(errno);
    return r;
  }
  if (pid == 0) {
    setpgid(0, 0);
    if (opts.stdin_data) {
      dup2(in_pipe[0], 0);
    } else {
      int devnull = ::open("/dev/null", O_RDONLY);
      if (devnull >= 0) dup2(devnull, 0);
    }
    dup2(out_pipe[1], 1);
    dup2(opts.merge_stderr ? out_pipe[1] : err_pipe[1], 2);
    if (fd3_pipe[1] >= 0) {
      if (fd3_pipe[1] == 3) {
        fcntl(3, F_SETFD, 0);
      } else {
        dup2(fd3_pipe[1], 3);
      }
    }
    for (const auto& [resource, value] : opts.rlimits) {
      struct rlimit rl = {static_cast<rlim_t>(value), static_cast<rlim_t>(value)};
      setrlimit(resource, &rl);
    }
    if (ns_flags != 0 && unshare(ns_flags) != 0) {
      int e = errno;
      (void)!write(exec_pipe[1], &e, sizeof e);
      _exit(127);
    }
    if (ns_flags & CLONE_NEWUSER) {
      auto put = [](const char* path, const char* text) {
        int fd = ::open(path, O_WRONLY | O_CLOEXEC);
        bool ok = fd >= 0 && ::write(fd, text, std::strlen(text)) == static_cast<ssize_t>(std::strlen(text));
        if (fd >= 0) ::close(fd);
        return ok;
      };
      if (!put("/proc/self/setgroups", "deny") || !put("/proc/self/uid_map", uid_map) ||
          !put("/proc/self/gid_map", gid_map)) {
        int e = errno ? errno : EPERM;
        (void)!write(exec_pipe[1], &e, sizeof e);
        _exit(127);
      }
    }
    if (opts.new_pid_namespace) {
      // This process stays outside as a relay; its child is PID 1 of the new namespace.
      pid_t inner = fork();
      if (inner < 0) {
        int e = errno;
        (void)!write(exec_pipe[1], &e, sizeof e);
        _exit(127);
      }
      if (inner > 0) {
        for (int fd = 0; fd < 1024; ++fd) close(fd);
        int st = 0;
        while (waitpid(inner, &st, 0) < 0 && errno == EINTR) {
        }
        if (WIFSIGNALED(st)) {
          signal(WTERMSIG(st), SIG_DFL);
          kill(getpid(), WTERMSIG(st));
        }
        _exit(WIFEXITED(st) ? WEXITSTATUS(st) : 127);
      }
      prctl(PR_SET_PDEATHSIG, SIGKILL);
    }
    if (!cwd_s.empty() && chdir(cwd_s.c_str()) != 0) {
      int e = errno;
      (void)!write(exec_pipe[1], &e, sizeof e);
      _exit(127);
    }
    // Close every other descriptor the parent may hold.
    for (int fd = opts.capture_fd3 ? 4 : 3; fd < 1024; ++fd) {
      if (fd != exec_pipe[1]) close(fd);
    }
    execve(exe_s.c_str(), cargv.data(), cenv.data());
    int e = errno;
    (void)!write(exec_pipe[1], &e, sizeof e);
    _exit(127);
  }
  setpgid(pid, pid);
  register_child_group(pid);
  close(out_pipe[1]);
  close(exec_pipe[1]);
  if (err_pipe[1] >= 0) close(err_pipe[1]);
  if (fd3_pipe[1] >= 0) close(fd3_pipe[1]);
  if (in_pipe[0] >= 0) close(in_pipe[0]);

  int exec_errno = 0;
  ssize_t got;
  do {
    got = read(exec_pipe[0], &exec_errno, sizeof exec_errno);
  } while (got < 0 && errno == EINTR);
  close(exec_pipe[0]);
  if (got == sizeof exec_errno) {
    kill(-pid, SIGKILL);
    waitpid(pid, nullptr, 0);
    unregister_child_group(pid);
    close(out_pipe[0]);
    if (err_pipe[0] >= 0) close(err_pipe[0]);
    if (in_pipe[1] >= 0) close(in_pipe[1]);
    if (fd3_pipe[0] >= 0) close(fd3_pipe[0]);
    r.error = "cannot run " + exe_s + (cwd_s.empty() ? "" : " in " + cwd_s) + ": " + std::strerror(exec_errno);
    return r;
  }
  r.started = true;

  set_cloexec_nonblock(out_pipe[0]);
  if (err_pipe[0] >= 0) set_cloexec_nonblock(err_pipe[0]);
  if (fd3_pipe[0] >= 0) set_cloexec_nonblock(fd3_pipe[0]);
  size_t in_off = 0;
  if (in_pipe[1] >= 0) {
    set_cloexec_nonblock(in_pipe[1]);
    signal(SIGPIPE, SIG_IGN);
  }
  // fds: 0 stdout, 1 stderr, 2 stdin (write), 3 the report pipe.
  int fds[4] = {out_pipe[0], err_pipe[0], in_pipe[1], fd3_pipe[0]};
  std::string* sinks[4] = {&r.output, &r.err_output, nullptr, &r.fd3_output};
  auto next_rss_check = std::chrono::steady_clock::now();
  // Once the child itself has exited, descendants that still hold its pipes
  // (a compiler's helpers, a backgrounded process) get a short grace period.
  bool reaped = false;
  int status = 0;
  std::chrono::steady_clock::time_point drain_until;
  auto deadline = t0 + opts.timeout;
  char buf[65536];
  while (fds[0] >= 0 || fds[1] >= 0 || fds[3] >= 0) {
    struct pollfd pfds[4];
    int n = 0, map[4];
    for (int i = 0; i < 4; ++i) {
      if (fds[i] < 0) continue;
      pfds[n] = {fds[i], static_cast<short>(i == 2 ? POLLOUT : POLLIN), 0};
      map[n++] = i;
    }
    int wait_ms = -1;
    if (opts.timeout.count() > 0) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) {
        r.timed_out = true;
        kill(-pid, SIGKILL);
        break;
      }
      wait_ms = static_cast<int>(left.count());
    }
    if (!reaped && waitpid(pid, &status, WNOHANG) == pid) {
      reaped = true;
      drain_until = std::chrono::steady_clock::now() + std::chrono::milliseconds(500);
    }
    if (reaped) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(drain_until - std::chrono::steady_clock::now());
      if (left.count() <= 0) break;
      wait_ms = wait_ms < 0 ? static_cast<int>(left.count()) : std::min(wait_ms, static_cast<int>(left.count()));
    } else {
      wait_ms = wait_ms < 0 ? 200 : std::min(wait_ms, 200);  // poll for the child's exit
    }
    if (opts.max_rss_bytes > 0 && !reaped) {
      auto now = std::chrono::steady_clock::now();
      if (now >= next_rss_check) {
        size_t rss = tree_resident_bytes(pid);
        r.peak_rss_bytes = std::max(r.peak_rss_bytes, rss);
        if (rss > opts.max_rss_bytes) {
          r.memory_exceeded = true;
          kill(-pid, SIGKILL);
          break;
        }
        next_rss_check = now + std::chrono::milliseconds(100);
      }
      wait_ms = wait_ms < 0 ? 100 : std::min(wait_ms, 100);
    }
    int pr = poll(pfds, n, wait_ms);
    if (pr < 0 && errno == EINTR) continue;
    if (pr <= 0) continue;
    for (int k = 0; k < n; ++k) {
      int i = map[k];
      if (pfds[k].revents == 0) continue;
      if (i == 2) {
        const std::string& data = *opts.stdin_data;
        ssize_t w = write(fds[2], data.data() + in_off, data.size() - in_off);
        if (w > 0) in_off += static_cast<size_t>(w);
        if (w < 0 && errno != EAGAIN && errno != EINTR) in_off = data.size();
        if (in_off >= data.size()) {
          close(fds[2]);
          fds[2] = -1;
        }
        continue;
      }
      ssize_t rd = read(fds[i], buf, sizeof buf);
      if (rd > 0) {
        std::string& sink = *sinks[i];
        size_t room = opts.max_output > sink.size() ? opts.max_output - sink.size() : 0;
        sink.append(buf, std::min(room, static_cast<size_t>(rd)));
      } else if (rd == 0 || (errno != EAGAIN && errno != EINTR)) {
        close(fds[i]);
        fds[i] = -1;
      }
    }
  }
  for (int i = 0; i < 4; ++i) {
    if (fds[i] >= 0) close(fds[i]);
  }
  if (!reaped) {
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
  }
  // Nothing of the group may outlive the call (a backgrounded grandchild, say).
  kill(-pid, SIGKILL);
  unregister_child_group(pid);
  if (WIFEXITED(status)) r.exit_code = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) r.signal = WTERMSIG(status);
  if (r.timed_out) r.signal = 0;
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

}  // namespace anvil
