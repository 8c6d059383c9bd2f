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
#include <optional>
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

namespace {

// What the child needs, made before fork: after it the child allocates nothing.
struct Launch {
  std::vector<std::string> envs;
  std::vector<char*> argv, env;
  std::string exe, cwd;
  int ns_flags = 0;
  char uid_map[64] = {}, gid_map[64] = {};
};

// Fills `l` from argv and opts; returns the reason it cannot, or "".
std::string prepare_launch(const std::vector<std::string>& argv, const SubprocessOptions& opts, Launch& l) {
  if (argv.empty()) return "empty command";
  for (const auto& a : argv) l.argv.push_back(const_cast<char*>(a.c_str()));
  l.argv.push_back(nullptr);
  for (char** e = opts.clear_env ? nullptr : environ; e && *e; ++e) {
    std::string kv = *e;
    std::string key = kv.substr(0, kv.find('='));
    if (opts.env.count(key) == 0) l.envs.push_back(kv);
  }
  for (const auto& [k, v] : opts.env) l.envs.push_back(k + "=" + v);
  for (auto& e : l.envs) l.env.push_back(e.data());
  l.env.push_back(nullptr);
  std::filesystem::path exe = find_program(argv[0]);
  if (exe.empty()) return "program not found: " + argv[0];
  l.exe = exe.string();
  l.cwd = opts.cwd.string();
  // The PID namespace (and, when not root, the user namespace that lets us make it).
  l.ns_flags = (opts.new_network ? CLONE_NEWNET : 0) | (opts.new_pid_namespace ? CLONE_NEWPID : 0);
  if (l.ns_flags & CLONE_NEWPID && ::geteuid() != 0) l.ns_flags |= CLONE_NEWUSER;
  std::snprintf(l.uid_map, sizeof l.uid_map, "%d %d 1", static_cast<int>(::geteuid()), static_cast<int>(::geteuid()));
  std::snprintf(l.gid_map, sizeof l.gid_map, "%d %d 1", static_cast<int>(::getegid()), static_cast<int>(::getegid()));
  return "";
}

// The pipes between the two processes ([0] read end, [1] write end; -1: not made).
struct Pipes {
  int out[2] = {-1, -1}, err[2] = {-1, -1}, in[2] = {-1, -1}, fd3[2] = {-1, -1}, exec[2] = {-1, -1};

  bool open(const SubprocessOptions& opts) {
    if (pipe(out) != 0 || pipe(exec) != 0 || (!opts.merge_stderr && pipe(err) != 0) ||
        (opts.stdin_data && pipe(in) != 0) || (opts.capture_fd3 && pipe(fd3) != 0)) {
      return false;
    }
    fcntl(exec[1], F_SETFD, FD_CLOEXEC);
    return true;
  }
  // The parent's side: the child's ends closed.
  void close_child_ends() {
    for (int fd : {out[1], exec[1], err[1], fd3[1], in[0]}) {
      if (fd >= 0) close(fd);
    }
  }
  void close_parent_ends() {
    for (int fd : {out[0], err[0], in[1], fd3[0]}) {
      if (fd >= 0) close(fd);
    }
  }
};

// The child's side of fork: tells the parent why through the exec pipe, and ends.
[[noreturn]] void child_failed(const Pipes& p, int e) {
  (void)!write(p.exec[1], &e, sizeof e);
  _exit(127);
}

// In the new PID namespace this process stays outside as a relay: it waits for its child (PID 1
// there) and ends as it did. Returns in the child.
void relay_pid_namespace(const Pipes& p) {
  pid_t inner = fork();
  if (inner < 0) child_failed(p, errno);
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

// The child after fork: its descriptors, limits and namespaces, then the program. Allocates nothing.
[[noreturn]] void exec_child(const Launch& l, const Pipes& p, const SubprocessOptions& opts) {
  setpgid(0, 0);
  if (opts.stdin_data) {
    dup2(p.in[0], 0);
  } else {
    int devnull = ::open("/dev/null", O_RDONLY);
    if (devnull >= 0) dup2(devnull, 0);
  }
  dup2(p.out[1], 1);
  dup2(opts.merge_stderr ? p.out[1] : p.err[1], 2);
  if (p.fd3[1] >= 0) {
    if (p.fd3[1] == 3) {
      fcntl(3, F_SETFD, 0);
    } else {
      dup2(p.fd3[1], 3);
    }
  }
  for (const auto& [resource, value] : opts.rlimits) {
    struct rlimit rl = {static_cast<rlim_t>(value), static_cast<rlim_t>(value)};
    setrlimit(resource, &rl);
  }
  if (l.ns_flags != 0 && unshare(l.ns_flags) != 0) child_failed(p, errno);
  if (l.ns_flags & CLONE_NEWUSER) {
    auto put = [](const char* path, const char* text) {
      int fd = ::open(path, O_WRONLY | O_CLOEXEC);
      bool ok = fd >= 0 && ::write(fd, text, std::strlen(text)) == static_cast<ssize_t>(std::strlen(text));
      if (fd >= 0) ::close(fd);
      return ok;
    };
    if (!put("/proc/self/setgroups", "deny") || !put("/proc/self/uid_map", l.uid_map) ||
        !put("/proc/self/gid_map", l.gid_map)) {
      child_failed(p, errno ? errno : EPERM);
    }
  }
  if (opts.new_pid_namespace) relay_pid_namespace(p);
  if (!l.cwd.empty() && chdir(l.cwd.c_str()) != 0) child_failed(p, errno);
  // Close every other descriptor the parent may hold.
  for (int fd = opts.capture_fd3 ? 4 : 3; fd < 1024; ++fd) {
    if (fd != p.exec[1]) close(fd);
  }
  execve(l.exe.c_str(), l.argv.data(), l.env.data());
  child_failed(p, errno);
}

// The errno the child sent when its exec failed, or nullopt once the exec succeeded (the pipe
// closed with nothing in it).
std::optional<int> exec_failure(Pipes& p) {
  int e = 0;
  ssize_t got;
  do {
    got = read(p.exec[0], &e, sizeof e);
  } while (got < 0 && errno == EINTR);
  close(p.exec[0]);
  if (got == sizeof e) return e;
  return std::nullopt;
}

// The parent's loop: the child's stdin written, its outputs read (at most max_output each), its
// exit, deadline and resident memory watched. Ends when every output pipe has closed, the child
// is reaped and its descendants' grace is over, or the group is killed.
void pump(pid_t pid, Pipes& p, const SubprocessOptions& opts, std::chrono::steady_clock::time_point deadline,
          SubprocessResult& r, int& status, bool& reaped) {
  size_t in_off = 0;
  // fds: 0 stdout, 1 stderr, 2 stdin (write), 3 the report pipe.
  int fds[4] = {p.out[0], p.err[0], p.in[1], p.fd3[0]};
  std::string* sinks[4] = {&r.output, &r.err_output, nullptr, &r.fd3_output};
  auto next_rss_check = std::chrono::steady_clock::now();
  // Once the child itself has exited, descendants that still hold its pipes
  // (a compiler's helpers, a backgrounded process) get a short grace period.
  std::chrono::steady_clock::time_point drain_until;
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
    if (!reaped && opts.cancel && opts.cancel->load()) {
      r.cancelled = true;
      kill(-pid, SIGKILL);
      break;
    }
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
        uint64_t dropped = static_cast<size_t>(rd) > room ? static_cast<size_t>(rd) - room : 0;
        if (i == 0) r.output_left_out += dropped;
        if (i == 3) r.fd3_left_out += dropped;
      } else if (rd == 0 || (errno != EAGAIN && errno != EINTR)) {
        close(fds[i]);
        fds[i] = -1;
      }
    }
  }
  for (int i = 0; i < 4; ++i) {
    if (fds[i] >= 0) close(fds[i]);
  }
}

}  // namespace

SubprocessResult run_subprocess(const std::vector<std::string>& argv, const SubprocessOptions& opts) {
  SubprocessResult r;
  auto t0 = std::chrono::steady_clock::now();
  Launch launch;
  r.error = prepare_launch(argv, opts, launch);
  if (!r.error.empty()) return r;
  Pipes pipes;
  if (!pipes.open(opts)) {
    r.error = std::string("pipe: ") + std::strerror(errno);
    return r;
  }
  pid_t pid = fork();
  if (pid < 0) {
    r.error = std::string("fork: ") + std::strerror(errno);
    return r;
  }
  if (pid == 0) exec_child(launch, pipes, opts);
  setpgid(pid, pid);
  register_child_group(pid);
  pipes.close_child_ends();
  if (std::optional<int> e = exec_failure(pipes)) {
    kill(-pid, SIGKILL);
    waitpid(pid, nullptr, 0);
    unregister_child_group(pid);
    pipes.close_parent_ends();
    r.error = "cannot run " + launch.exe + (launch.cwd.empty() ? "" : " in " + launch.cwd) + ": " + std::strerror(*e);
    return r;
  }
  r.started = true;

  for (int fd : {pipes.out[0], pipes.err[0], pipes.fd3[0], pipes.in[1]}) {
    if (fd >= 0) set_cloexec_nonblock(fd);
  }
  if (pipes.in[1] >= 0) signal(SIGPIPE, SIG_IGN);
  bool reaped = false;
  int status = 0;
  pump(pid, pipes, opts, t0 + opts.timeout, r, status, reaped);
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
