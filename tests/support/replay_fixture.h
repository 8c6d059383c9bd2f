// tests/support/replay_fixture.h: tests/replay_server.py as a real server
// process on loopback, for the tests that drive the model client and whole
// episodes over real HTTP.
#pragma once

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>

#include "anvil/util/fs.h"
#include "anvil/util/strings.h"

namespace anvil {

class ReplayServer {
 public:
  // Writes `script` to dir/script.json and starts the server; port() is 0 when it could not start.
  ReplayServer(const nlohmann::json& script, const std::filesystem::path& dir) {
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    script_ = dir / "script.json";
    log_ = dir / "requests.jsonl";
    std::filesystem::remove(log_, ec);
    std::string err;
    write_file_atomic(script_, script.dump(1), &err);
    int out[2];
    if (pipe(out) != 0) return;
    pid_ = fork();
    if (pid_ == 0) {
      setpgid(0, 0);
      dup2(out[1], 1);
      close(out[0]);
      close(out[1]);
      std::string server = std::string(ANVIL_SOURCE_DIR) + "/tests/replay_server.py";
      execlp("python3", "python3", server.c_str(), "--script", script_.c_str(), "--port", "0", "--log", log_.c_str(),
             static_cast<char*>(nullptr));
      _exit(127);
    }
    close(out[1]);
    FILE* f = fdopen(out[0], "r");
    char line[128] = {0};
    if (f && std::fgets(line, sizeof line, f)) {
      std::string s = trim(line);
      if (starts_with(s, "PORT ")) port_ = std::stoi(s.substr(5));
    }
    if (f) std::fclose(f);
  }
  ~ReplayServer() {
    if (pid_ > 0) {
      kill(-pid_, SIGKILL);
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }
  ReplayServer(const ReplayServer&) = delete;
  ReplayServer& operator=(const ReplayServer&) = delete;

  int port() const { return port_; }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_) + "/v1"; }
  // The requests the server received, one JSON object per line.
  std::vector<nlohmann::json> requests() const {
    std::vector<nlohmann::json> out;
    for (const auto& line : split_lines(read_file(log_).value_or(""))) {
      if (!trim(line).empty()) out.push_back(nlohmann::json::parse(line));
    }
    return out;
  }

 private:
  std::filesystem::path script_, log_;
  int pid_ = -1;
  int port_ = 0;
};

}  // namespace anvil
