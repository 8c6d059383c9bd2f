// compare_test.cpp: two results side by side.
#include "anvil/bench/compare.h"

#include <gtest/gtest.h>

#include "anvil/bench/metrics.h"

namespace anvil {
namespace {

using Json = nlohmann::json;

Json row(const char* level, long id, const char* name, const char* outcome, int reward, Json eager) {
  return {{"level", level}, {"id", id}, {"name", name}, {"outcome", outcome}, {"correct", std::string(outcome) == "ok"},
          {"reward", reward}, {"speedup_eager", eager}, {"speedup_compile", nullptr}};
}

Json results(const char* out, const char* gpu, std::vector<Json> rows) {
  std::vector<Json> l1, l2;
  for (const auto& r : rows) (r["level"] == "level1" ? l1 : l2).push_back(r);
  return {{"schema", "anvil.bench/1"},
          {"run", {{"out", out}, {"agent", nullptr}}},
          {"fingerprint", {{"gpu", {{"name", gpu}, {"count", 1}}}, {"torch", "2.11.0"}}},
          {"levels", {{{"level", "level1"}, {"metrics", compute_metrics(l1)}},
                      {{"level", "level2"}, {"metrics", compute_metrics(l2)}}}},
          {"overall", compute_metrics(rows)},
          {"tasks", rows}};
}

TEST(Compare, ChangesPerTaskAndLevelAndTheSetupDifference) {
  Json a = results("runs/base", "NVIDIA H100", {row("level1", 1, "ReLU", "ok", 2, 2.0),
                                                row("level1", 2, "GELU", "wrong_answer", -1, nullptr),
                                                row("level2", 1, "Fused", "ok", 3, 4.0),
                                                row("level2", 2, "Only_A", "ok", 1, 1.0)});
  Json b = results("runs/new/", "NVIDIA H200", {row("level1", 1, "ReLU", "ok", 2, 4.0),
                                                row("level1", 2, "GELU", "ok", 1, 1.0),
                                                row("level2", 1, "Fused", "timeout", -1, nullptr),
                                                row("level2", 3, "Only_B", "ok", 1, 1.0)});
  Json c = compare_results(a, b);
  EXPECT_EQ(c["a"]["label"], "base");
  EXPECT_EQ(c["b"]["label"], "new");
  ASSERT_TRUE(c["setup_differences"].contains("gpu"));
  EXPECT_FALSE(c["setup_differences"].contains("torch"));
  EXPECT_EQ(c["summary"]["gained"], 1);
  EXPECT_EQ(c["summary"]["lost"], 1);
  EXPECT_EQ(c["summary"]["both_correct"], 1);
  EXPECT_DOUBLE_EQ(c["summary"]["geomean_b_over_a"].get<double>(), 2.0);
  ASSERT_EQ(c["tasks"].size(), 5u);
  EXPECT_EQ(c["tasks"][3]["change"], "only_in_a");
  EXPECT_EQ(c["tasks"][4]["change"], "only_in_b");
  EXPECT_EQ(c["changed"].size(), 5u - 1u);  // all but ReLU (same reward, faster)
  ASSERT_EQ(c["levels"].size(), 3u);
  EXPECT_EQ(c["levels"][2]["level"], "overall");
  EXPECT_DOUBLE_EQ(c["levels"][0]["a"]["pass_rate"].get<double>(), 0.5);
  EXPECT_DOUBLE_EQ(c["levels"][0]["b"]["pass_rate"].get<double>(), 1.0);
  std::string md = render_comparison(c);
  EXPECT_NE(md.find("The setups differ"), std::string::npos);
  EXPECT_NE(md.find("| pass | 50.0% | 100.0% | +50.0 pt |"), std::string::npos) << md;
  EXPECT_NE(md.find("| level2/1_Fused | ok r3 4.00xe | timeout r-1 | lost |"), std::string::npos) << md;
}

TEST(Compare, ARunWithItselfHasNoChanges) {
  Json a = results("x", "G", {row("level1", 1, "A|B", "ok", 2, 2.0)});
  Json c = compare_results(a, a);
  EXPECT_TRUE(c["changed"].empty());
  std::string md = render_comparison(c);
  EXPECT_NE(md.find("No task changed"), std::string::npos);
  EXPECT_NE(md.find("A\\|B"), std::string::npos);  // a cell's | is escaped
}

}  // namespace
}  // namespace anvil
