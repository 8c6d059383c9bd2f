#include "anvil/env/launch.h"

#include <gtest/gtest.h>

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

}  // namespace
}  // namespace anvil
