// Tests of the reward's time rule (reward.h) and of which baselines are kept (baselines.h): pure
// functions, no compiler or torch.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <regex>
#include <string>
#include <vector>

#include "anvil/env/baselines.h"
#include "anvil/env/reward.h"
#include "anvil/util/fs.h"

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

TEST(Baselines, ACleanGpuBaselineIsKept) { EXPECT_FALSE(unclean_baseline(timing(0.99, 1.0, 1.02), Device::Cuda, true)); }

TEST(Baselines, ANoisyGpuBaselineIsNot) {
  auto why = unclean_baseline(timing(0.9, 1.0, 1.3), Device::Cuda, true);
  ASSERT_TRUE(why);
  EXPECT_NE(why->find("spread 40%"), std::string::npos) << *why;
}

TEST(Baselines, AnotherProcessOnTheGpuMakesItUnclean) {
  auto t = timing(1.0, 1.0, 1.0);
  t["load"] = {{"other_gpu_processes", 1}};
  auto why = unclean_baseline(t, Device::Cuda, true);
  ASSERT_TRUE(why);
  EXPECT_NE(why->find("1 other process"), std::string::npos);
  t["load"]["other_gpu_processes"] = nullptr;  // NVML could not tell: the spread decides
  EXPECT_FALSE(unclean_baseline(t, Device::Cuda, true));
}

TEST(Baselines, EagerNeedsTheJudgesBatchWithDefenses) {
  auto t = timing(1.0, 1.0, 1.0);
  t.erase("batch");
  EXPECT_TRUE(unclean_baseline(t, Device::Cuda, true));
  EXPECT_FALSE(unclean_baseline(t, Device::Cuda, false));
}

TEST(Baselines, TheCpuIsNotHeldToTheSpread) { EXPECT_FALSE(unclean_baseline(timing(0.5, 1.0, 2.0), Device::Cpu, true)); }

TEST(Baselines, ACandidateStillExitingMakesItUnclean) {
  auto t = timing(1.0, 1.0, 1.0);
  t["load"] = {{"candidate_gone", true}};
  EXPECT_FALSE(unclean_baseline(t, Device::Cpu, true));
  t["load"]["candidate_gone"] = nullptr;  // not a defended evaluation: nothing to wait for
  EXPECT_FALSE(unclean_baseline(t, Device::Cpu, true));
  t["load"]["candidate_gone"] = false;
  auto why = unclean_baseline(t, Device::Cpu, true);
  ASSERT_TRUE(why);
  EXPECT_NE(why->find("still exiting"), std::string::npos) << *why;
}

TEST(Baselines, ALoadedMachineMakesItUncleanOnAnyDevice) {
  for (Device device : {Device::Cpu, Device::Cuda}) {
    auto t = timing(1.0, 1.0, 1.0);
    t["load"] = {{"run_queue_share", 0.02}, {"run_queue_ms", 9.0}};
    t["batch"]["run_queue_share"] = 0.01;
    t["batch"]["run_queue_ms"] = 0.4;
    EXPECT_FALSE(unclean_baseline(t, device, true)) << to_string(device);
    t["load"]["run_queue_share"] = 0.35;
    auto why = unclean_baseline(t, device, true);
    ASSERT_TRUE(why) << to_string(device);
    EXPECT_NE(why->find("timed calls waited for a CPU 35% of their time, 9.0 ms"), std::string::npos) << *why;
    t["load"]["run_queue_ms"] = 3.4;  // a large share of a short span: scheduling noise
    EXPECT_FALSE(unclean_baseline(t, device, true)) << to_string(device);
    t["load"]["run_queue_share"] = nullptr;  // the kernel did not say: not held against it
    t["batch"]["run_queue_share"] = 0.5;
    t["batch"]["run_queue_ms"] = 20.0;
    why = unclean_baseline(t, device, true);
    ASSERT_TRUE(why) << to_string(device);
    EXPECT_NE(why->find("judge's batch waited for a CPU 50%"), std::string::npos) << *why;
  }
}

// The margin is set by one line (kFasterMargin): every text is made from it, no other source of
// anvil's states a margin of its own, and SKILL.md states reward.h's (a mutation of either side
// fails here).
TEST(Reward, TheMarginIsStatedFromOneLine) {
  const double percent = kFasterMargin * 100;
  char text[64];
  std::snprintf(text, sizeof text, "more than %g%% faster", percent);
  EXPECT_EQ(more_than_faster(), text);
  EXPECT_NEAR(kFasterThreshold, 1 / (1 - kFasterMargin), 1e-15);
  EXPECT_NE(next_milestone_hint(1).find(more_than_faster()), std::string::npos);
  EXPECT_NE(faster_threshold(true).find(faster_threshold()), std::string::npos);

  namespace fs = std::filesystem;
  const std::regex stated(R"(([0-9]+(\.[0-9]+)?)% faster|0\.95\b|1\.0526)");
  std::vector<std::string> elsewhere;
  for (const char* dir : {"src/anvil", "python/anvil"}) {
    for (const auto& entry : fs::recursive_directory_iterator(fs::path(ANVIL_SOURCE_DIR) / dir)) {
      std::string name = entry.path().filename().string();
      std::string ext = entry.path().extension().string();
      if (!entry.is_regular_file() || (ext != ".cpp" && ext != ".h" && ext != ".py")) continue;
      if (name == "reward.h" || name == "reward.cpp" || name.find("_test.") != std::string::npos) continue;
      std::string code = read_file(entry.path()).value_or("");
      for (auto m = std::sregex_iterator(code.begin(), code.end(), stated); m != std::sregex_iterator(); ++m) {
        elsewhere.push_back(entry.path().string() + ": " + m->str());
      }
    }
  }
  EXPECT_TRUE(elsewhere.empty()) << "the reward's margin stated outside reward.h: " << elsewhere.front();

  std::string skill = read_file(fs::path(ANVIL_SOURCE_DIR) / "share/agent/SKILL.md").value_or("");
  ASSERT_FALSE(skill.empty());
  int said = 0;
  const std::regex pct(R"(([0-9]+(\.[0-9]+)?)% faster)"), ratio(R"((0\.[0-9]+)x)");
  for (auto m = std::sregex_iterator(skill.begin(), skill.end(), pct); m != std::sregex_iterator(); ++m, ++said) {
    EXPECT_NEAR(std::stod((*m)[1].str()), percent, 1e-9) << "SKILL.md says " << m->str();
  }
  for (auto m = std::sregex_iterator(skill.begin(), skill.end(), ratio); m != std::sregex_iterator(); ++m, ++said) {
    EXPECT_NEAR(std::stod((*m)[1].str()), 1 - kFasterMargin, 1e-9) << "SKILL.md says " << m->str();
  }
  EXPECT_GE(said, 2) << "SKILL.md no longer states the reward's margin";
}

}  // namespace
}  // namespace anvil
