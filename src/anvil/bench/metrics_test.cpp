// metrics_test.cpp: the suite metrics on rows with known answers.
#include "anvil/bench/metrics.h"

#include <cmath>
#include <string>
#include <vector>

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

// A trajectory's turns with the usage the server sent (null: none).
Json trajectory(const std::vector<Json>& usages) {
  Json turns = Json::array();
  for (size_t i = 0; i < usages.size(); ++i) turns.push_back({{"index", i}, {"usage", usages[i]}});
  return {{"turns", turns}};
}

Json usage(long turns, long reported, Json prompt, Json completion) {
  return {{"turns", turns}, {"reported_turns", reported}, {"prompt_tokens", prompt}, {"completion_tokens", completion}};
}

TEST(MetricsUsage, AnEpisodesTokensAreSummedOverTheTurnsTheServerReported) {
  Json u = episode_usage(trajectory({{{"prompt_tokens", 1500}, {"completion_tokens", 600}, {"total_tokens", 2100}},
                                     {{"prompt_tokens", 2500}, {"completion_tokens", 400}}}));
  EXPECT_EQ(u, usage(2, 2, 4000, 1000));
  // A server that counts nothing: not reported, never 0.
  Json none = episode_usage(trajectory({nullptr, nullptr, Json::object()}));
  EXPECT_EQ(none, usage(3, 0, nullptr, nullptr));
  // Some turns counted: the sum of those, the others visible in reported_turns.
  EXPECT_EQ(episode_usage(trajectory({{{"prompt_tokens", 7}, {"completion_tokens", 3}}, nullptr})), usage(2, 1, 7, 3));
  // Counts anvil cannot read (a string, a negative) are not counts.
  EXPECT_EQ(episode_usage(trajectory({{{"prompt_tokens", "7"}, {"completion_tokens", -3}}})),
            usage(1, 0, nullptr, nullptr));
  // No turn: nothing was asked of the model, so nothing was spent.
  EXPECT_EQ(episode_usage(trajectory({})), usage(0, 0, 0, 0));
  EXPECT_EQ(episode_usage(Json::object()), usage(0, 0, 0, 0));
}

TEST(MetricsUsage, CostIsTheTokensAtThePricesAndNoneWithoutEither) {
  Json prices = Pricing{2.5, 10}.to_json();
  EXPECT_EQ(prices, (Json{{"input_usd_per_mtok", 2.5}, {"output_usd_per_mtok", 10.0}}));
  EXPECT_DOUBLE_EQ(task_cost(usage(2, 2, 4000, 1000), prices).get<double>(), (4000 * 2.5 + 1000 * 10) / 1e6);
  EXPECT_DOUBLE_EQ(task_cost(usage(0, 0, 0, 0), prices).get<double>(), 0.0);
  EXPECT_TRUE(task_cost(usage(2, 2, 4000, 1000), nullptr).is_null());      // no prices: no cost, not 0
  EXPECT_TRUE(task_cost(usage(3, 0, nullptr, nullptr), prices).is_null());  // not reported
  EXPECT_TRUE(task_cost(nullptr, prices).is_null());                        // no episode
}

TEST(MetricsUsage, TotalsSumWhatWasReportedAndAreAbsentWithoutTheAgent) {
  std::vector<Json> rows = {row("ok", 2, 1.5, nullptr), row("wrong_answer", -1, nullptr, nullptr),
                            row("not_evaluated", -1, nullptr, nullptr), row("ok", 1, 1.0, nullptr)};
  EXPECT_FALSE(compute_metrics(rows).contains("usage"));  // a run of --solutions has none
  EXPECT_TRUE(usage_totals(rows).is_null());
  rows[0]["usage"] = usage(2, 2, 4000, 1000);
  rows[0]["cost_usd"] = 0.02;
  rows[1]["usage"] = usage(3, 0, nullptr, nullptr);  // its server sent no usage
  rows[1]["cost_usd"] = nullptr;
  rows[2]["usage"] = nullptr;  // the episode did not start
  rows[2]["cost_usd"] = nullptr;
  rows[3]["usage"] = usage(1, 1, 10, 5);
  rows[3]["cost_usd"] = 0.001;
  Json m = compute_metrics(rows);
  ASSERT_TRUE(m.contains("usage")) << m.dump();
  const Json& u = m["usage"];
  EXPECT_EQ(u["episodes"], 3);
  EXPECT_EQ(u["turns"], 6);
  EXPECT_EQ(u["reported_turns"], 3);
  EXPECT_EQ(u["prompt_tokens"], 4010);
  EXPECT_EQ(u["completion_tokens"], 1005);
  EXPECT_DOUBLE_EQ(u["cost_usd"].get<double>(), 0.021);
  // Nothing reported anywhere: the sums are null, as is the cost.
  Json n = usage_totals({rows[1], rows[2]});
  EXPECT_EQ(n["episodes"], 1);
  EXPECT_TRUE(n["prompt_tokens"].is_null());
  EXPECT_TRUE(n["completion_tokens"].is_null());
  EXPECT_TRUE(n["cost_usd"].is_null());
  // Tokens without prices: the sums, no cost.
  rows[0]["cost_usd"] = nullptr;
  rows[3]["cost_usd"] = nullptr;
  Json p = usage_totals(rows);
  EXPECT_EQ(p["prompt_tokens"], 4010);
  EXPECT_TRUE(p["cost_usd"].is_null());
}

TEST(MetricsUsage, PricesAreNonNegativeNumbersAndEachBadOneIsNamed) {
  std::string err;
  EXPECT_DOUBLE_EQ(parse_price("--price-input", "3", &err).value(), 3.0);
  EXPECT_DOUBLE_EQ(parse_price("--price-input", "0.15", &err).value(), 0.15);
  EXPECT_DOUBLE_EQ(parse_price("--price-input", "1e-1", &err).value(), 0.1);
  EXPECT_DOUBLE_EQ(parse_price("--price-output", "0", &err).value(), 0.0);
  EXPECT_FALSE(parse_price("--price-input", "-1", &err));
  EXPECT_EQ(err, "--price-input -1: a price cannot be negative (USD per million tokens, e.g. 3 or 0.15)");
  EXPECT_FALSE(parse_price("--price-output", "abc", &err));
  EXPECT_EQ(err, "--price-output 'abc': not a number (USD per million tokens, e.g. 3 or 0.15)");
  for (const char* bad : {"", "3$", "$3", "1,5", "nan", "inf", "0x10", "3 ", "--", "."}) {
    err.clear();
    EXPECT_FALSE(parse_price("--price-input", bad, &err)) << bad;
    EXPECT_NE(err.find("not a number"), std::string::npos) << bad << ": " << err;
  }
  EXPECT_FALSE(parse_price("--price-input", "1e999", &err));
  EXPECT_EQ(err, "--price-input 1e999: out of range (USD per million tokens, e.g. 3 or 0.15)");
}

}  // namespace
}  // namespace anvil
