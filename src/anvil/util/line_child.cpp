#include "anvil/util/line_child.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>

#include "anvil/util/subprocess.h"

extern char** environ;

namespace anvil {

std::unique_ptr<LineChild> LineChild::start(const std::vector<std::string>& argv,
                                            const std::map<std::string, std::string>& env,
                                            const std::filesystem::path& stderr_log, std::string* err) {
  // Everything the child needs is made before fork(): between fork and exec a child of a threaded
  // process may only make async-signal-safe calls.
  std::vector<std::string> args = argv;
  std::vector<char*> av;
  for (auto& a : args) av.push_back(a.data());
  av.push_back(nullptr);
  std::map<std::string, std::string> merged;
  for (char** e = environ; *e; ++e) {
    std::string kv = *e;
    size_t eq = kv.find('=');
    if (eq != std::string::npos) merged[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  for (const auto& [k, v] : env) merged[k] = v;
  std::vector<std::string> env_strings;
  for (const auto& [k, v] : merged) env_strings.push_back(k + "=" + v);
  std::vector<char*> ev;
  for (auto& e : env_strings) ev.push_back(e.data());
  ev.push_back(nullptr);
  int to_child[2], from_child[2];
  if (pipe2(to_child, O_CLOEXEC) != 0) {
    *err = std::string("cannot make a pipe: ") + std::strerror(errno);
    return nullptr;
  }
  if (pipe2(from_child, O_CLOEXEC) != 0) {
    *err = std::string("cannot make a pipe: ") + std::strerror(errno);
    ::close(to_child[0]);
    ::close(to_child[1]);
    return nullptr;
  }
  int log = ::open(stderr_log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
  if (log < 0) {
    *err = "cannot open " + stderr_log.string() + ": " + std::strerror(errno);
    for (int fd : {to_child[0], to_child[1], from_child[0], from_child[1]}) ::close(fd);
    return nullptr;
  }
  const pid_t parent = getpid();
  pid_t pid = fork();
  if (pid < 0) {
    *err = std::string("fork failed: ") + std::strerror(errno);
    for (int fd : {to_child[0], to_child[1], from_child[0], from_child[1], log}) ::close(fd);
    return nullptr;
  }
  if (pid == 0) {
    setpgid(0, 0);
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() != parent) _exit(126);
    dup2(to_child[0], 0);
    dup2(from_child[1], 1);
    dup2(log, 2);
    if (syscall(SYS_close_range, 3U, ~0U, 0U) != 0) {  // a kernel before 5.9
      for (int fd = 3; fd < 65536; ++fd) ::close(fd);
    }
    execve(av[0], av.data(), ev.data());
    const char msg[] = "exec failed\n";
    ssize_t ignored = write(2, msg, sizeof msg - 1);
    (void)ignored;
    _exit(127);
  }
  setpgid(pid, pid);  // also here, so kill(-pid) works before the child has run
  register_child_group(pid);
  ::close(to_child[0]);
  ::close(from_child[1]);
  ::close(log);
  std::unique_ptr<LineChild> c(new LineChild());
  c->pid_ = pid;
  c->in_ = to_child[1];
  c->out_ = from_child[0];
  return c;
}

LineChild::~LineChild() {
  close_stdin();
  if (pid_ > 0) {
    // Waited for without reaping (WNOWAIT): while it is a zombie its group id is still its own, so
    // what it left in the group is killed, never another group that took the id.
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    siginfo_t info{};
    while (waitid(P_PID, static_cast<id_t>(pid_), &info, WEXITED | WNOHANG | WNOWAIT) == 0 && info.si_pid == 0 &&
           std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    kill(-pid_, SIGKILL);
    int status = 0;
    waitpid(pid_, &status, 0);
    unregister_child_group(pid_);
  }
  if (out_ >= 0) ::close(out_);
}

bool LineChild::write_line(const std::string& line) {
  std::lock_guard<std::mutex> g(write_mu_);
  if (in_ < 0) return false;
  std::string data = line + "\n";
  size_t off = 0;
  while (off < data.size()) {
    ssize_t n = ::write(in_, data.data() + off, data.size() - off);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    off += static_cast<size_t>(n);
  }
  return true;
}

std::optional<std::string> LineChild::read_line() {
  for (;;) {
    size_t nl = buffer_.find('\n');
    if (nl != std::string::npos) {
      std::string line = buffer_.substr(0, nl);
      buffer_.erase(0, nl + 1);
      return line;
    }
    char chunk[65536];
    ssize_t n = ::read(out_, chunk, sizeof chunk);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return std::nullopt;
    buffer_.append(chunk, static_cast<size_t>(n));
  }
}

void LineChild::close_stdin() {
  std::lock_guard<std::mutex> g(write_mu_);
  if (in_ >= 0) ::close(in_);
  in_ = -1;
}

}  // namespace anvil
