// Tests of the reward's time rule (reward.h) and of which baselines are kept (baselines.h): pure
// functions, no compiler or torch.
#include <gtest/gtest.h>

#include "anvil/env/baselines.h"
#include "anvil/env/reward.h"

namespace anvil {
namespace {

TEST(Reward, AClaimThatAgreesWithTheJudgesClockIsTheTime) {
  // The candidate's batch is twice as fast as eager's; its claim says 2.0x too.
  TimeBound b = bound_time(1.0, 0.55, 1.1, 2.0);
  ASSERT_TRUE(b.vouched_ms);
  EXPECT_NEAR(*b.vouched_ms, 1.0 / (1 + kBatchSlack), 1e-12);
  EXPECT_EQ(b.candidate_ms, 1.0);
  EXPECT_FALSE(b.limited);
  EXPECT_FALSE(b.forged);
}

TEST(Reward, NoSpeedUpBeyondTheJudgesClockPlusTheSlack) {
  // The batch shows the candidate as fast as eager; the claim says 5x. The time used gives at most
  // 1 + slack, which stays below the "more than 5% faster" line.
  TimeBound b = bound_time(0.4, 1.0, 1.0, 2.0);
  EXPECT_TRUE(b.limited);
  EXPECT_FALSE(b.forged);
  double speedup = 2.0 / b.candidate_ms;
  EXPECT_NEAR(speedup, 1 + kBatchSlack, 1e-12);
  EXPECT_EQ(milestone_reward(true, speedup, std::nullopt), 1);
}

TEST(Reward, AClaimFarBelowTheBoundIsForged) {
  EXPECT_TRUE(bound_time(0.001, 1.0, 1.0, 2.0).forged);
  EXPECT_FALSE(bound_time(0.5, 1.0, 1.0, 2.0).forged);  // within kForgedRatio: launch and cache effects
}

TEST(Reward, ForgeryIsJudgedAtEagersFastestCall) {
  // A loaded machine: eager's median 20x its fastest call. The bound (what the reward uses) keeps the
  // median, whose noise the speed-up cancels; the verdict of forgery takes the fastest call.
  TimeBound b = bound_time(0.15, 1.0, 1.0, 20.0, 1.0);
  EXPECT_NEAR(*b.vouched_ms, 20.0 / (1 + kBatchSlack), 1e-9);
  EXPECT_NEAR(*b.floor_ms, 1.0 / (1 + kBatchSlack), 1e-9);
  EXPECT_TRUE(b.limited);
  EXPECT_FALSE(b.forged);
  EXPECT_TRUE(bound_time(0.15, 1.0, 1.0, 20.0).forged);  // without the fastest call, the median judges
  EXPECT_TRUE(bound_time(0.01, 1.0, 1.0, 20.0, 1.0).forged);
  EXPECT_TRUE(bound_time(0.15, 1.0, 1.0, 20.0, 30.0).forged);  // the smaller of the two judges
  EXPECT_NEAR(*bound_time(0.15, 1.0, 1.0, 20.0, 30.0).floor_ms, 20.0 / (1 + kBatchSlack), 1e-9);
}

TEST(Reward, WithoutBothBatchesNothingIsVouched) {
  EXPECT_FALSE(bound_time(1.0, std::nullopt, 1.0, 2.0).vouched_ms);
  EXPECT_FALSE(bound_time(1.0, 1.0, std::nullopt, 2.0).vouched_ms);
  EXPECT_FALSE(bound_time(1.0, 1.0, 1.0, std::nullopt).vouched_ms);
}

TEST(Reward, NextMilestone) {
  EXPECT_NE(next_milestone_hint(1).find("eager"), std::string::npos);
  EXPECT_NE(next_milestone_hint(2).find("torch.compile"), std::string::npos);
  EXPECT_EQ(next_milestone_hint(3), "");
}

nlohmann::json timing(double p25, double median, double p75) {
  return {{"median_ms", median}, {"p25_ms", p25}, {"p75_ms", p75}, {"batch", {{"per_call_ms", median}}}};
}

TEST(Baselines, ACleanGpuBaselineIsKept) { EXPECT_FALSE(unclean_baseline(timing(0.99, 1.0, 1.02), "cuda", true)); }

TEST(Baselines, ANoisyGpuBaselineIsNot) {
  auto why = unclean_baseline(timing(0.9, 1.0, 1.3), "cuda", true);
  ASSERT_TRUE(why);
  EXPECT_NE(why->find("spread 40%"), std::string::npos) << *why;
}

TEST(Baselines, AnotherProcessOnTheGpuMakesItUnclean) {
  auto t = timing(1.0, 1.0, 1.0);
  t["load"] = {{"other_gpu_processes", 1}};
  auto why = unclean_baseline(t, "cuda", true);
  ASSERT_TRUE(why);
  EXPECT_NE(why->find("1 other process"), std::string::npos);
  t["load"]["other_gpu_processes"] = nullptr;  // NVML could not tell: the spread decides
  EXPECT_FALSE(unclean_baseline(t, "cuda", true));
}

TEST(Baselines, EagerNeedsTheJudgesBatchWithDefenses) {
  auto t = timing(1.0, 1.0, 1.0);
  t.erase("batch");
  EXPECT_TRUE(unclean_baseline(t, "cuda", true));
  EXPECT_FALSE(unclean_baseline(t, "cuda", false));
}

TEST(Baselines, TheCpuIsNotHeldToTheSpread) { EXPECT_FALSE(unclean_baseline(timing(0.5, 1.0, 2.0), "cpu", true)); }

TEST(Baselines, ACandidateStillExitingMakesItUnclean) {
  auto t = timing(1.0, 1.0, 1.0);
  t["load"] = {{"candidate_gone", true}};
  EXPECT_FALSE(unclean_baseline(t, "cpu", true));
  t["load"]["candidate_gone"] = nullptr;  // not a defended evaluation: nothing to wait for
  EXPECT_FALSE(unclean_baseline(t, "cpu", true));
  t["load"]["candidate_gone"] = false;
  auto why = unclean_baseline(t, "cpu", true);
  ASSERT_TRUE(why);
  EXPECT_NE(why->find("still exiting"), std::string::npos) << *why;
}

TEST(Baselines, ALoadedMachineMakesItUncleanOnAnyDevice) {
  for (const char* device : {"cpu", "cuda"}) {
    auto t = timing(1.0, 1.0, 1.0);
    t["load"] = {{"run_queue_share", 0.02}, {"run_queue_ms", 9.0}};
    t["batch"]["run_queue_share"] = 0.01;
    t["batch"]["run_queue_ms"] = 0.4;
    EXPECT_FALSE(unclean_baseline(t, device, true)) << device;
    t["load"]["run_queue_share"] = 0.35;
    auto why = unclean_baseline(t, device, true);
    ASSERT_TRUE(why) << device;
    EXPECT_NE(why->find("timed calls waited for a CPU 35% of their time, 9.0 ms"), std::string::npos) << *why;
    t["load"]["run_queue_ms"] = 3.4;  // a large share of a short span: scheduling noise
    EXPECT_FALSE(unclean_baseline(t, device, true)) << device;
    t["load"]["run_queue_share"] = nullptr;  // the kernel did not say: not held against it
    t["batch"]["run_queue_share"] = 0.5;
    t["batch"]["run_queue_ms"] = 20.0;
    why = unclean_baseline(t, device, true);
    ASSERT_TRUE(why) << device;
    EXPECT_NE(why->find("judge's batch waited for a CPU 50%"), std::string::npos) << *why;
  }
}

}  // namespace
}  // namespace anvil
