// local_server.h: `anvil agent --endpoint local`: a small real model served on
// loopback by anvil.local_model (llama-cpp-python; vLLM's endpoints, token ids and
// log-probabilities included), for running the harness against real model output
// without a GPU or an API key.
#pragma once

#include <cstddef>
#include <filesystem>
#include <string>

namespace anvil {

struct LocalServerOptions {
  std::string python;     // the interpreter with llama_cpp installed; empty: found as documented in the .cpp
  std::string model_path; // a GGUF file; empty: the Gemma 3 270M Q4_K_M from PyPI
  int context = 8192;     // n_ctx
  int threads = 0;        // n_threads; 0: the server's default (half the cores)
  int startup_timeout_s = 120;  // measured: ~2-3 s on two cores
  std::string alias = "gemma-3-270m";   // the model name the server answers to
  std::string chat_template;  // a Jinja file; empty: the GGUF's, else anvil's for its architecture
};

// A running server; stopped (its process group killed) on destruction.
class LocalServer {
 public:
  LocalServer() = default;
  ~LocalServer();
  LocalServer(const LocalServer&) = delete;
  LocalServer& operator=(const LocalServer&) = delete;

  // Starts the server and waits until it answers GET /v1/models. Returns false
  // with *err saying exactly what is missing and how to install it, or the
  // server's last log lines when it exited. Call from a thread that outlives
  // the server: the server gets SIGTERM when that thread ends.
  bool start(const LocalServerOptions& opts, std::string* err);
  // Kills the server's process group, reaps it and removes its log.
  void stop();
  // The last lines of the server's log (why it stopped answering), "" if none.
  std::string log_tail(size_t lines = 20) const;

  std::string base_url() const { return base_url_; }  // http://127.0.0.1:PORT/v1
  std::string model() const { return model_; }        // the model name the server answers to
  int pid() const { return pid_; }

 private:
  enum class Start { kReady, kPortTaken, kFailed };
  Start start_once(const LocalServerOptions& opts, const std::string& python, const std::string& model,
                   std::string* err);

  int pid_ = -1;
  std::string base_url_;
  std::string model_;
  std::filesystem::path log_dir_;  // the server's output (server.log)
};

}  // namespace anvil
