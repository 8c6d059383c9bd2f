#include "anvil/env/launch.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <thread>

#include "anvil/env/cache_layout.h"
#include "anvil/util/fs.h"
#include "anvil/util/hash.h"
#include "anvil/util/json_text.h"
#include "anvil/util/strings.h"

extern char** environ;

namespace anvil {

namespace {

using Clock = std::chrono::steady_clock;

// Variables of this process the runner keeps: how the machine, CUDA, torch and the compilers are
// set up. Nothing else: an API key, a token or a password variable never reaches it.
constexpr const char* kKeepNames[] = {"PATH", "HOME", "USER", "LOGNAME", "LANG", "LANGUAGE", "TERM", "TMPDIR", "TZ",
                                      "LD_LIBRARY_PATH", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "XDG_CACHE_HOME",
                                      "CC", "CXX", "CUDAHOSTCXX", "ANVIL_ARCH", "ANVIL_SANDBOX"};
constexpr const char* kKeepPrefixes[] = {"LC_", "CUDA_", "NVIDIA_", "TORCH_", "TORCHINDUCTOR_", "TRITON_", "PYTORCH_",
                                         "NCCL_", "NVSHMEM_"};
constexpr const char* kSecretMarks[] = {"KEY", "TOKEN", "SECRET", "PASSWORD", "CREDENTIAL"};

bool kept(const std::string& name) {
  for (const char* mark : kSecretMarks) {
    if (name.find(mark) != std::string::npos) return false;
  }
  for (const char* n : kKeepNames) {
    if (name == n) return true;
  }
  for (const char* p : kKeepPrefixes) {
    if (starts_with(name, p)) return true;
  }
  return false;
}

// The absolute entries of the caller's PYTHONPATH (where a torch may be installed); the runner runs
// isolated (-I), so they reach sys.path only through the bootstrap, after anvil's own directory.
std::string extra_python_path() {
  const char* pp = std::getenv("PYTHONPATH");
  std::vector<std::string> keep;
  for (const auto& p : split(pp ? pp : "", ':')) {
    if (!p.empty() && p[0] == '/') keep.push_back(p);
  }
  return join(keep, ":");
}

// `python -I -c BOOTSTRAP`: anvil's package first, the caller's PYTHONPATH after it, never the
// working directory.
std::string bootstrap(const char* module) {
  return std::string("import os, sys; sys.path[:0] = [os.environ['ANVIL_PYDIR']]; "
                     "sys.path += [p for p in os.environ.get('ANVIL_EXTRA_PYTHONPATH', '').split(':') if p]; "
                     "from anvil import ") +
         module + "; " + module + ".entry()";
}

// A connected Unix-domain stream socket, or -1.
int connect_unix(const std::string& path) {
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::snprintf(addr.sun_path, sizeof addr.sun_path, "%s", path.c_str());
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

bool zygote_answers(const std::string& path) {
  int fd = connect_unix(path);
  if (fd >= 0) ::close(fd);
  return fd >= 0;
}

std::string token_path(const std::string& socket_path) { return socket_path + ".token"; }

std::string new_token() {
  unsigned char bytes[32];
  size_t got = 0;
  while (got < sizeof bytes) {
    ssize_t n = ::getrandom(bytes + got, sizeof bytes - got, 0);
    if (n <= 0) break;
    got += static_cast<size_t>(n);
  }
  static const char* hex = "0123456789abcdef";
  std::string out;
  for (unsigned char b : bytes) {
    out += hex[b >> 4];
    out += hex[b & 15];
  }
  return out;
}

const char* module_name(PyModule m) {
  switch (m) {
    case PyModule::kVet: return "vet";
    case PyModule::kWarm: return "warm";
    case PyModule::kReferenceProfile: return "reference_profile";
    case PyModule::kRunner: break;
  }
  return "runner";
}

double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

}  // namespace

std::map<std::string, std::string> runner_environment(const Environment& env) {
  std::map<std::string, std::string> out;
  for (char** e = environ; *e; ++e) {
    std::string kv = *e;
    size_t eq = kv.find('=');
    if (eq != std::string::npos && kept(kv.substr(0, eq))) out[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  if (!out.count("PATH")) out["PATH"] = "/usr/local/bin:/usr/bin:/bin";
  out["ANVIL_HOME"] = env.home.string();
  out["ANVIL_PYDIR"] = (env.home / "python").string();
  out["ANVIL_EXTRA_PYTHONPATH"] = extra_python_path();
  out["ANVIL_CACHE"] = env.cache.string();
  out["ANVIL_PYTHON"] = env.python.string();
  out["PYTHONUNBUFFERED"] = "1";
  out["PYTHONDONTWRITEBYTECODE"] = "1";
  // torch.cuda.is_available() answered by NVML, not by starting the driver: the zygote imports
  // torch._inductor (which asks) and must fork children that can still start CUDA (zygote.py).
  out["PYTORCH_NVML_BASED_CUDA_CHECK"] = "1";
  std::error_code ec;
  fs::path self = env.anvil_program.empty() ? fs::read_symlink("/proc/self/exe", ec) : env.anvil_program;
  if (!ec) out["ANVIL_BIN"] = self.string();
  return out;
}

SubprocessResult run_python_fresh(const Environment& env, PyModule module, const SubprocessOptions& so) {
  SubprocessOptions o = so;
  o.clear_env = true;
  o.new_pid_namespace = true;
  o.capture_fd3 = true;
  return run_subprocess({env.python.string(), "-I", "-c", bootstrap(module_name(module))}, o);
}

void exclude_lock_waits(SubprocessOptions& so, const nlohmann::json& request, bool defenses) {
  bool locked = request.is_object() && request.contains("gpu_lock") && request["gpu_lock"].is_string();
  bool together = request.is_object() && request.value("prepare", std::string("alone")) == "together";
  so.lock_waits = !locked ? 0 : together && defenses ? 2 : 1;
  so.lock_wait_cap = std::min<std::chrono::milliseconds>(so.timeout * kLockWaitTimeouts, kLockWaitCeiling);
}

LockWaits::LockWaits(const SubprocessOptions& so) : left_(so.lock_waits), cap_(so.lock_wait_cap) {}

Clock::duration LockWaits::told(bool waiting, Clock::time_point now) {
  if (waiting) {
    if (!since_ && left_ > 0) since_ = now;
    return Clock::duration::zero();
  }
  if (!since_) return Clock::duration::zero();
  Clock::duration d = std::min<Clock::duration>(now - *since_, cap_ - counted_);
  counted_ += d;
  since_.reset();
  --left_;
  return d;
}

Clock::duration LockWaits::ongoing(Clock::time_point now) const {
  return since_ ? std::min<Clock::duration>(now - *since_, cap_ - counted_) : Clock::duration::zero();
}

Clock::duration LockWaits::total(Clock::time_point now) const { return counted_ + ongoing(now); }

SubprocessResult run_in_zygote(const std::string& socket_path, PyModule module, const nlohmann::json& request,
                               const SubprocessOptions& so, const fs::path& scratch, bool* ended_at_report) {
  SubprocessResult r;
  auto t0 = Clock::now();
  auto token = read_file(token_path(socket_path));
  int fd = token ? connect_unix(socket_path) : -1;
  if (fd < 0) {
    r.error = "cannot connect to the zygote at " + socket_path;
    return r;
  }
  fs::path report = scratch / "report.json", output = scratch / "output.log";
  nlohmann::json rl = nlohmann::json::object();
  for (const auto& [res, value] : so.rlimits) rl[res == RLIMIT_FSIZE ? "fsize" : "core"] = value;
  nlohmann::json msg = {{"token", trim(*token)},         {"module", module_name(module)}, {"request", request},
                        {"cwd", so.cwd.string()},        {"env", so.env},
                        {"report_path", report.string()}, {"output_path", output.string()},
                        {"rlimits", rl},                 {"network", so.new_network}};
  std::string line = json_text(msg) + "\n";
  if (::send(fd, line.data(), line.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(line.size())) {
    r.error = "cannot send the request to the zygote";
    ::close(fd);
    return r;
  }
  std::string buf;
  int pid = 0;
  nlohmann::json status;
  std::string refused;
  bool reported = false;  // the runner's report is complete: its process need not be waited for
  auto deadline = t0 + so.timeout;
  LockWaits waits(so);
  bool killed = false;
  while (true) {
    size_t nl;
    while ((nl = buf.find('\n')) != std::string::npos) {
      auto j = nlohmann::json::parse(buf.substr(0, nl), nullptr, false);
      buf.erase(0, nl + 1);
      if (j.is_object() && j.contains("exit_code")) status = j;
      else if (j.is_object() && j.value("report", false)) reported = true;
      else if (j.is_object() && j.contains("lock")) deadline += waits.told(j["lock"] == "waiting", Clock::now());
      else if (j.is_object() && j.contains("error")) refused = j["error"].is_string() ? j["error"].get<std::string>() : "refused";
      else if (j.is_object() && j.contains("pid")) {
        pid = j["pid"].get<int>();
        register_child_group(pid);  // the relay's group: the runner (PID 1 of its namespace) is in it
      }
    }
    if (!status.is_null() || !refused.empty()) break;
    if (reported && pid > 0 && !killed) {
      // Done: the group goes now, without waiting for its CUDA teardown (the zygote reaps it).
      ::kill(-pid, SIGKILL);
      status = {{"pid", pid}, {"exit_code", 0}, {"signal", 0}};
      break;
    }
    if (pid > 0 && !killed) {
      if (so.cancel && so.cancel->load()) {
        r.cancelled = true;
        killed = true;
        ::kill(-pid, SIGKILL);
      } else if (so.timeout.count() > 0 && Clock::now() >= deadline + waits.ongoing(Clock::now())) {
        r.timed_out = true;
        killed = true;
        ::kill(-pid, SIGKILL);
      } else if (so.max_rss_bytes > 0) {
        size_t rss = tree_resident_bytes(pid);
        r.peak_rss_bytes = std::max(r.peak_rss_bytes, rss);
        if (rss > so.max_rss_bytes) {
          r.memory_exceeded = true;
          killed = true;
          ::kill(-pid, SIGKILL);
        }
      }
    }
    pollfd p = {fd, POLLIN, 0};
    if (::poll(&p, 1, 100) > 0) {
      char chunk[4096];
      ssize_t n = ::recv(fd, chunk, sizeof chunk, 0);
      if (n <= 0) break;  // the zygote went away
      buf.append(chunk, static_cast<size_t>(n));
    }
  }
  ::close(fd);
  if (pid > 0) {
    ::kill(-pid, SIGKILL);
    unregister_child_group(pid);
  }
  if (!refused.empty()) {
    r.error = "the zygote refused the request: " + refused;
    return r;
  }
  if (status.is_null()) {
    r.error = "the zygote closed the connection without a result";
    return r;
  }
  r.started = true;
  r.lock_wait_seconds = std::chrono::duration<double>(waits.total(Clock::now())).count();
  *ended_at_report = reported;
  r.signal = killed ? 0 : status.value("signal", 0);
  r.exit_code = status["exit_code"].is_number() ? status["exit_code"].get<int>() : -1;
  // Both files are the runner's to write (and its output the candidate's too: a seek to 4 GiB and
  // one byte make a sparse log of 4 GiB): each is read up to max_output, the report from its start
  // as a pipe's would be, the output from its end.
  std::string why;
  r.fd3_output = read_head(report, so.max_output, &why, &r.fd3_left_out).value_or("");
  r.output = read_tail(output, so.max_output, &why, &r.output_left_out).value_or("");
  r.seconds = since(t0);
  return r;
}

Launch launch_python(const Environment& env, PyModule module, const std::string& zygote, const nlohmann::json& request,
                     const SubprocessOptions& so, const fs::path& scratch) {
  Launch l;
  l.socket = zygote;
  if (l.socket == "auto") l.socket = ensure_zygote(env, &l.zygote_error);
  if (l.socket.empty() || l.socket == "none") {
    l.result = run_python_fresh(env, module, so);
    return l;
  }
  l.zygote = true;
  l.result = run_in_zygote(l.socket, module, request, so, scratch, &l.ended_at_report);
  if (!l.result.started && !l.result.error.empty()) {
    // The zygote could not run it (it could not fork: the host's memory; or it went away): whatever
    // it started is killed, and a fresh process runs it instead.
    l.zygote_error = l.result.error;
    l.zygote = false;
    l.ended_at_report = false;
    l.result = run_python_fresh(env, module, so);
  }
  return l;
}

std::string ensure_zygote(const Environment& env, std::string* err) {
  Hasher h;
  h.add("env", env.fingerprint).add("cache", env.cache.string()).add("python", env.python.string());
  // The zygote has anvil's Python package loaded (its modules, and the list of modules it imports
  // ahead: compile_modules.txt): a changed package needs a new one.
  std::error_code dec;
  for (const auto& entry : fs::directory_iterator(env.home / "python" / "anvil", dec)) {
    if (entry.path().extension() != ".py" && entry.path().filename() != "compile_modules.txt") continue;
    std::error_code tec;
    auto mtime = fs::last_write_time(entry.path(), tec);
    h.add(entry.path().filename().string(), std::to_string(mtime.time_since_epoch().count()) + ":" +
                                                std::to_string(fs::file_size(entry.path(), tec)));
  }
  std::string name = "zygote-" + h.hex().substr(0, 16) + ".sock";
  fs::path dir = cache_dir(env, CacheArea::kZygote);
  if ((dir / name).string().size() >= sizeof(sockaddr_un{}.sun_path)) {
    dir = fs::temp_directory_path() / ("anvil-" + std::to_string(getuid()));  // socket paths are short
  }
  std::error_code ec;
  fs::create_directories(dir, ec);
  struct stat st {};
  if (::chmod(dir.c_str(), 0700) != 0 || ::lstat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode) ||
      st.st_uid != ::geteuid()) {
    *err = "the zygote's directory " + dir.string() + " is not a directory of this user only";
    return "";
  }
  fs::path sock = dir / name;
  if (zygote_answers(sock.string()) && read_file(token_path(sock.string()))) return sock.string();
  FileLock lock(dir / (name + ".lock"));
  if (zygote_answers(sock.string()) && read_file(token_path(sock.string()))) return sock.string();
  std::string token = new_token();
  if (!write_file_atomic(token_path(sock.string()), token, err, 0600)) return "";
  fs::path log = dir / (name + ".log");
  // Everything the child needs, prepared before fork.
  std::map<std::string, std::string> zenv = runner_environment(env);
  zenv.erase("CUDA_VISIBLE_DEVICES");  // each child sets its own GPU
  std::vector<std::string> env_strings;
  for (const auto& [k, v] : zenv) env_strings.push_back(k + "=" + v);
  std::vector<char*> cenv;
  for (auto& e : env_strings) cenv.push_back(e.data());
  cenv.push_back(nullptr);
  // The token by its file's path, never in the environment or the command line: every process the
  // zygote forks (a candidate's among them) can read its own /proc/self/environ and cmdline.
  std::string python = env.python.string(), socket_path = sock.string(), code = bootstrap("zygote");
  std::string token_file = token_path(socket_path);
  std::vector<char*> argv = {python.data(), const_cast<char*>("-I"), const_cast<char*>("-c"), code.data(),
                             const_cast<char*>("--socket"), socket_path.data(), const_cast<char*>("--token-file"),
                             token_file.data(), const_cast<char*>("--idle-exit"), const_cast<char*>("600"), nullptr};
  pid_t pid = fork();
  if (pid < 0) {
    *err = "fork failed";
    return "";
  }
  if (pid == 0) {
    // Detach twice so the zygote outlives this process and is no one's zombie.
    setsid();
    if (fork() != 0) _exit(0);
    int out = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    int in = ::open("/dev/null", O_RDONLY);
    if (in >= 0) dup2(in, 0);
    if (out >= 0) {
      dup2(out, 1);
      dup2(out, 2);
    }
    for (int fd = 3; fd < 1024; ++fd) close(fd);
    if (::chdir("/") != 0) _exit(127);
    execve(python.c_str(), argv.data(), cenv.data());
    _exit(127);
  }
  waitpid(pid, nullptr, 0);
  for (int i = 0; i < 1200; ++i) {  // torch's import: seconds
    if (zygote_answers(sock.string())) return sock.string();
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  *err = "the zygote did not start within 60 s (log: " + log.string() + "): " + tail_of_log(log, 5);
  return "";
}

}  // namespace anvil
