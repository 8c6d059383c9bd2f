// The outcomes' one list against the two other places that name them: the result's JSON Schema
// (every name, no other) and the Python runner's OUTCOMES (those a report may carry).
#include "anvil/env/outcome.h"

#include <gtest/gtest.h>

#include <regex>
#include <set>
#include <string>

#include <nlohmann/json.hpp>

#include "anvil/util/fs.h"

namespace anvil {
namespace {

std::set<std::string> names_where(bool (*keep)(Outcome)) {
  std::set<std::string> out;
  for (Outcome o : kOutcomes) {
    if (keep(o)) out.insert(outcome_name(o));
  }
  return out;
}

TEST(Outcome, TheNamesAreTheSchemasAndEachReadsBack) {
  auto text = read_file(std::string(ANVIL_SOURCE_DIR) + "/schemas/anvil.eval-1.schema.json");
  ASSERT_TRUE(text);
  nlohmann::json schema = nlohmann::json::parse(*text);
  std::set<std::string> in_schema = schema["properties"]["outcome"]["enum"].get<std::set<std::string>>();
  EXPECT_EQ(names_where([](Outcome) { return true; }), in_schema);
  for (Outcome o : kOutcomes) EXPECT_EQ(outcome_named(outcome_name(o)), o) << outcome_name(o);
  EXPECT_FALSE(outcome_named("correct"));
  EXPECT_FALSE(outcome_named(""));
  EXPECT_FALSE(outcome_named("OK"));
}

TEST(Outcome, ThoseARunnerMayReportAreThePythonRunners) {
  auto text = read_file(std::string(ANVIL_SOURCE_DIR) + "/python/anvil/harness.py");
  ASSERT_TRUE(text);
  std::smatch m;
  ASSERT_TRUE(std::regex_search(*text, m, std::regex(R"(\nOUTCOMES = \(([^)]*)\))"))) << "harness.py's OUTCOMES";
  std::set<std::string> python;
  std::string list = m[1];
  std::regex quoted("\"([a-z_]+)\"");
  for (auto it = std::sregex_iterator(list.begin(), list.end(), quoted); it != std::sregex_iterator(); ++it) {
    python.insert((*it)[1]);
  }
  EXPECT_EQ(names_where(runner_reports), python);
}

}  // namespace
}  // namespace anvil
