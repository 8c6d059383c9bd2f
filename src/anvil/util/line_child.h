// line_child.h: a long-lived child that speaks JSON lines (or any lines) on its stdin and stdout.
//
// The child runs in a process group of its own, registered for the stop handler
// (kill_child_groups), with stderr appended to a log file, and dies with this process
// (PR_SET_PDEATHSIG SIGTERM, even when this one is killed with SIGKILL). Writes are serialized
// (several threads may send); one reader reads.
#pragma once

#include <sys/types.h>

#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace anvil {

class LineChild {
 public:
  // Starts argv[0] (a path) with `env` over this process's environment; nullptr and *err when it
  // cannot be started.
  static std::unique_ptr<LineChild> start(const std::vector<std::string>& argv,
                                          const std::map<std::string, std::string>& env,
                                          const std::filesystem::path& stderr_log, std::string* err);
  ~LineChild();  // closes its stdin, waits up to a few seconds for it to end, then kills its group
  LineChild(const LineChild&) = delete;
  LineChild& operator=(const LineChild&) = delete;

  bool write_line(const std::string& line);  // false when the child no longer reads
  std::optional<std::string> read_line();    // blocks; nullopt at the end of its output
  void close_stdin();
  pid_t pid() const { return pid_; }

 private:
  LineChild() = default;
  pid_t pid_ = -1;
  int in_ = -1, out_ = -1;
  std::mutex write_mu_;
  std::string buffer_;
};

}  // namespace anvil
