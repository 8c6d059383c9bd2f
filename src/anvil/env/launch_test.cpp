#include "anvil/env/launch.h"

#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <thread>

#include "anvil/util/fs.h"
#include "support/peak_memory.h"

namespace anvil {
namespace {

using std::chrono::seconds;
using Clock = LockWaits::Clock;

SubprocessOptions with_waits(int waits, seconds timeout) {
  SubprocessOptions so;
  so.timeout = timeout;
  nlohmann::json request = {{"gpu_lock", "/cache/locks/gpu0.lock"}};
  if (waits == 2) request["prepare"] = "together";
  exclude_lock_waits(so, request, true);
  EXPECT_EQ(so.lock_waits, waits);
  return so;
}

TEST(LockWaits, OnlyTheJudgesOwnWaitsAreLeftOut) {
  SubprocessOptions so;
  so.timeout = seconds(600);
  exclude_lock_waits(so, {{"device", "cuda"}}, true);  // no lock: nothing is waited for, none left out
  EXPECT_EQ(so.lock_waits, 0);
  nlohmann::json together = {{"gpu_lock", "/l"}, {"prepare", "together"}};
  exclude_lock_waits(so, together, true);  // its taking and its parking, both before candidate code exists
  EXPECT_EQ(so.lock_waits, 2);
  exclude_lock_waits(so, together, false);  // (never so: together needs defenses) one at most
  EXPECT_EQ(so.lock_waits, 1);
  exclude_lock_waits(so, {{"gpu_lock", "/l"}}, false);  // taken before the candidate's code is imported
  EXPECT_EQ(so.lock_waits, 1);
  EXPECT_EQ(so.lock_wait_cap, kLockWaitCeiling);  // 32 timeouts of 600 s: more than the ceiling
}

TEST(LockWaits, AnAnnouncedWaitMovesTheDeadlineByItsLength) {
  LockWaits w(with_waits(2, seconds(10)));
  Clock::time_point t0{};
  EXPECT_EQ(w.told(true, t0), Clock::duration::zero());
  EXPECT_EQ(w.ongoing(t0 + seconds(7)), seconds(7));  // under way: the deadline waits with it
  EXPECT_EQ(w.told(false, t0 + seconds(7)), seconds(7));
  EXPECT_EQ(w.ongoing(t0 + seconds(9)), Clock::duration::zero());
  EXPECT_EQ(w.told(true, t0 + seconds(20)), Clock::duration::zero());  // the second (a parked one's)
  EXPECT_EQ(w.told(false, t0 + seconds(23)), seconds(3));
  EXPECT_EQ(w.total(t0 + seconds(30)), seconds(10));
}

TEST(LockWaits, OnlyTheFirstWaitsCountAndAnEndWithoutABeginningIsNothing) {
  LockWaits w(with_waits(1, seconds(10)));
  Clock::time_point t0{};
  EXPECT_EQ(w.told(false, t0 + seconds(5)), Clock::duration::zero());  // no wait began
  w.told(true, t0 + seconds(5));
  EXPECT_EQ(w.told(false, t0 + seconds(6)), seconds(1));
  w.told(true, t0 + seconds(8));  // a second wait (say, announced by candidate code in the judge's process)
  EXPECT_EQ(w.ongoing(t0 + seconds(100)), Clock::duration::zero());
  EXPECT_EQ(w.told(false, t0 + seconds(100)), Clock::duration::zero());
  EXPECT_EQ(w.total(t0 + seconds(100)), seconds(1));
}

TEST(LockWaits, AWaitThatNeverEndsCountsAtMostTheCap) {
  SubprocessOptions so = with_waits(2, seconds(10));
  EXPECT_EQ(so.lock_wait_cap, seconds(10) * kLockWaitTimeouts);  // under the ceiling
  LockWaits w(so);
  Clock::time_point t0{};
  w.told(true, t0);
  EXPECT_EQ(w.ongoing(t0 + seconds(100000)), so.lock_wait_cap);  // then the timeout counts again
  EXPECT_EQ(w.told(false, t0 + seconds(100000)), so.lock_wait_cap);
  w.told(true, t0 + seconds(100001));
  EXPECT_EQ(w.ongoing(t0 + seconds(100010)), Clock::duration::zero());
}

TEST(LockWaits, NoneWithoutWaits) {
  LockWaits w(SubprocessOptions{});
  Clock::time_point t0{};
  w.told(true, t0);
  EXPECT_EQ(w.ongoing(t0 + seconds(5)), Clock::duration::zero());
  EXPECT_EQ(w.told(false, t0 + seconds(5)), Clock::duration::zero());
}

// A zygote that answers one request as the real one does (python/anvil/zygote.py): the runner's
// output and report written to the files the request names, then its exit status on the socket.
// What it writes is the test's: `write(output_path, report_path)`.
class FakeZygote {
 public:
  template <typename Write>
  FakeZygote(const fs::path& dir, Write write) : socket_((dir / "z.sock").string()) {
    std::string e;
    write_file_atomic(socket_ + ".token", "secret\n", &e, 0600);
    listener_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::snprintf(addr.sun_path, sizeof addr.sun_path, "%s", socket_.c_str());
    bound_ = ::bind(listener_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 && ::listen(listener_, 1) == 0;
    if (!bound_) return;
    thread_ = std::thread([this, write] {
      int fd = ::accept(listener_, nullptr, nullptr);
      if (fd < 0) return;
      std::string line;
      char c;
      while (::read(fd, &c, 1) == 1 && c != '\n') line += c;
      auto msg = nlohmann::json::parse(line, nullptr, false);
      if (msg.is_object()) write(msg["output_path"].get<std::string>(), msg["report_path"].get<std::string>());
      std::string status = "{\"exit_code\": 0, \"signal\": 0}\n";
      (void)!::write(fd, status.data(), status.size());
      ::close(fd);
    });
  }
  ~FakeZygote() {
    if (thread_.joinable()) thread_.join();
    ::close(listener_);
  }
  bool bound() const { return bound_; }
  const std::string& socket() const { return socket_; }

 private:
  std::string socket_;
  int listener_ = -1;
  bool bound_ = false;
  std::thread thread_;
};

// A candidate's process writes to the runner's output: a seek to 4 GiB and one byte made a sparse
// log that anvil read whole (the server went from 16 MiB to 4 GiB of resident memory). Its last
// max_output bytes are read, and what was left out is counted; the report is read from its start.
TEST(ZygoteClient, AHugeSparseOutputLogCostsItsTail) {
  fs::path dir = make_temp_dir(fs::temp_directory_path(), "zygote");
  FakeZygote zygote(dir, [](const std::string& output, const std::string& report) {
    int fd = ::open(output.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    (void)!::ftruncate(fd, 4ll << 30);
    (void)!::pwrite(fd, "the last line\n", 14, 4ll << 30);
    ::close(fd);
    std::string e;
    write_file_atomic(report, std::string(3 << 20, ' ') + "{}", &e);
  });
  ASSERT_TRUE(zygote.bound());
  SubprocessOptions so;
  so.timeout = seconds(60);
  so.max_output = 1 << 20;
  ASSERT_TRUE(reset_peak_memory());
  uint64_t before = peak_memory_bytes();
  bool ended_at_report = false;
  SubprocessResult r = run_in_zygote(zygote.socket(), PyModule::kRunner, nlohmann::json::object(), so, dir, &ended_at_report);
  ASSERT_TRUE(r.started) << r.error;
  EXPECT_LT(peak_memory_bytes() - before, 64ull << 20) << "the output log was read whole";
  EXPECT_EQ(r.output.size(), 1u << 20);
  EXPECT_EQ(r.output.substr(r.output.size() - 14), "the last line\n");
  EXPECT_EQ(r.output_left_out, (4ull << 30) + 14 - (1 << 20));
  EXPECT_EQ(r.fd3_output.size(), 1u << 20);  // as a pipe's would be: its first max_output bytes
  EXPECT_EQ(r.fd3_output.find_first_not_of(' '), std::string::npos);
  EXPECT_EQ(r.fd3_left_out, (3u << 20) + 2 - (1 << 20));
  remove_tree(dir);
}

}  // namespace
}  // namespace anvil
