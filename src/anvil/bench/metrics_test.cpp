// metrics_test.cpp: the suite metrics on rows with known answers.
#include "anvil/bench/metrics.h"

#include <cmath>

#include <gtest/gtest.h>

namespace anvil {
namespace {

using Json = nlohmann::json;

Json row(const std::string& outcome, int reward, Json eager, Json compile) {
  return {{"outcome", outcome}, {"correct", outcome == "ok"}, {"reward", reward},
          {"speedup_eager", eager}, {"speedup_compile", compile}};
}

TEST(Metrics, KnownAnswers) {
  std::vector<Json> rows = {
      row("ok", 3, 4.0, 2.0),           // faster than both
      row("ok", 2, 1.06, 0.5),          // just over the 5% margin against eager
      row("ok", 1, 1.04, 1.04),         // faster, but not by more than 5%: fast_1 counts it, the rates do not
      row("wrong_answer", -1, nullptr, nullptr),
      row("missing", -1, nullptr, nullptr),
  };
  Json m = compute_metrics(rows);
  EXPECT_EQ(m["tasks"], 5);
  EXPECT_DOUBLE_EQ(m["pass_rate"].get<double>(), 0.6);
  EXPECT_DOUBLE_EQ(m["faster_than_eager_rate"].get<double>(), 0.4);
  EXPECT_DOUBLE_EQ(m["faster_than_compile_rate"].get<double>(), 0.2);
  EXPECT_DOUBLE_EQ(m["fast_p"]["eager"]["0"].get<double>(), 0.6);
  EXPECT_DOUBLE_EQ(m["fast_p"]["eager"]["1"].get<double>(), 0.6);
  EXPECT_DOUBLE_EQ(m["fast_p"]["eager"]["1.5"].get<double>(), 0.2);
  EXPECT_DOUBLE_EQ(m["fast_p"]["eager"]["2"].get<double>(), 0.2);
  EXPECT_DOUBLE_EQ(m["fast_p"]["compile"]["1"].get<double>(), 0.4);
  EXPECT_DOUBLE_EQ(m["fast_p"]["compile"]["2"].get<double>(), 0.0);  // 2.0 is not > 2
  EXPECT_NEAR(m["geomean"]["eager"]["correct"].get<double>(), std::cbrt(4.0 * 1.06 * 1.04), 1e-12);
  EXPECT_NEAR(m["geomean"]["eager"]["all"].get<double>(), std::pow(4.0 * 1.06 * 1.04, 0.2), 1e-12);
  EXPECT_NEAR(m["geomean"]["compile"]["correct"].get<double>(), std::cbrt(2.0 * 0.5 * 1.04), 1e-12);
  EXPECT_DOUBLE_EQ(m["median"]["eager"].get<double>(), 1.06);
  EXPECT_DOUBLE_EQ(m["mean_reward"].get<double>(), (3 + 2 + 1 - 1 - 1) / 5.0);
  EXPECT_EQ(m["outcomes"]["ok"], 3);
  EXPECT_EQ(m["outcomes"]["missing"], 1);
  EXPECT_EQ(m["rewards"]["3"], 1);
  EXPECT_EQ(m["rewards"]["-1"], 2);
  EXPECT_EQ(m["measured"]["compile"], 3);
}

TEST(Metrics, EvenMedianAndTheReportedRewardOfAWrongRowIsIgnored) {
  // A row that is not correct counts -1 whatever reward it carries.
  Json m = compute_metrics({row("ok", 1, 1.0, nullptr), row("ok", 2, 3.0, nullptr), row("timeout", 2, 9.0, nullptr)});
  EXPECT_DOUBLE_EQ(m["median"]["eager"].get<double>(), 2.0);
  EXPECT_DOUBLE_EQ(m["mean_reward"].get<double>(), (1 + 2 - 1) / 3.0);
  EXPECT_EQ(m["rewards"]["-1"], 1);
}

TEST(Metrics, NoCompileTimeMeansCompileMetricsAreUndefinedNotZero) {
  Json m = compute_metrics({row("ok", 2, 2.0, nullptr), row("ok", 1, 1.0, nullptr)});
  EXPECT_TRUE(m["faster_than_compile_rate"].is_null());
  EXPECT_TRUE(m["fast_p"]["compile"].is_null());
  EXPECT_TRUE(m["geomean"]["compile"]["correct"].is_null());
  EXPECT_TRUE(m["median"]["compile"].is_null());
  EXPECT_DOUBLE_EQ(m["faster_than_eager_rate"].get<double>(), 0.5);
}

TEST(Metrics, AllFailedAndEmpty) {
  Json m = compute_metrics({row("compile_error", -1, nullptr, nullptr), row("ok", 1, 0.5, 0.25),
                            row("runtime_error", -1, nullptr, nullptr)});
  EXPECT_NEAR(m["geomean"]["eager"]["all"].get<double>(), std::cbrt(0.5), 1e-12);
  Json failed = row("wrong_answer", -1, nullptr, nullptr);
  failed["eager_ms"] = 1.5;  // the baseline was measured: the rates are 0, not undefined
  Json g = compute_metrics({failed});
  EXPECT_DOUBLE_EQ(g["faster_than_eager_rate"].get<double>(), 0.0);
  EXPECT_DOUBLE_EQ(g["geomean"]["eager"]["all"].get<double>(), 1.0);
  EXPECT_TRUE(g["geomean"]["eager"]["correct"].is_null());
  EXPECT_TRUE(g["faster_than_compile_rate"].is_null());
  Json f = compute_metrics({row("compile_error", -1, nullptr, nullptr)});
  EXPECT_DOUBLE_EQ(f["pass_rate"].get<double>(), 0.0);
  EXPECT_TRUE(f["geomean"]["eager"].is_object());
  EXPECT_TRUE(f["fast_p"]["eager"].is_null());  // no speedup measured at all
  Json e = compute_metrics({});
  EXPECT_EQ(e["tasks"], 0);
  EXPECT_TRUE(e["pass_rate"].is_null());
  EXPECT_TRUE(e["mean_reward"].is_null());
}

}  // namespace
}  // namespace anvil
