// local_server.h: `anvil agent --endpoint local`: a small real model served on
// loopback by llama.cpp's OpenAI-compatible server (llama-cpp-python), for
// running the harness against real model output without a GPU or an API key.
#pragma once

#include <filesystem>
#include <string>

namespace anvil {

struct LocalServerOptions {
  std::string python;     // the interpreter with llama_cpp installed; empty: found as documented in the .cpp
  std::string model_path; // a GGUF file; empty: the Gemma 3 270M Q4_K_M from PyPI
  int context = 8192;     // n_ctx
  int threads = 0;        // 0: the server's default
  int startup_timeout_s = 120;
  std::string alias = "gemma-3-270m";   // the model name the server answers to
  std::string chat_format = "chatml-function-calling";  // llama-cpp-python's; see local_server.cpp
};

// A running server; stopped (its process group killed) on destruction.
class LocalServer {
 public:
  LocalServer() = default;
  ~LocalServer();
  LocalServer(const LocalServer&) = delete;
  LocalServer& operator=(const LocalServer&) = delete;

  // Starts the server and waits until it answers GET /v1/models. Returns false
  // with *err saying exactly what is missing and how to install it.
  bool start(const LocalServerOptions& opts, std::string* err);
  void stop();

  std::string base_url() const { return base_url_; }  // http://127.0.0.1:PORT/v1
  std::string model() const { return model_; }        // the model name the server answers to
  int pid() const { return pid_; }

 private:
  int pid_ = -1;
  std::string base_url_;
  std::string model_;
  std::filesystem::path log_dir_;  // the server's output (server.log)
};

}  // namespace anvil
