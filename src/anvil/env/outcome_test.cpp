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

std::set<std::string> reasons_of(Outcome o) {
  std::set<std::string> out;
  for (const Reason& r : kReasons) {
    if (r.outcome == o) out.insert(r.name);
  }
  return out;
}

// The reasons' one list against the schema (every name, and each outcome's), the judge's REASONS
// (hack_suspected's, with anvil's own timing_forged) and docs/anti-hacking.md's section.
TEST(Outcome, TheReasonsAreTheSchemasTheJudgesAndTheDocs) {
  auto text = read_file(std::string(ANVIL_SOURCE_DIR) + "/schemas/anvil.eval-1.schema.json");
  ASSERT_TRUE(text);
  nlohmann::json schema = nlohmann::json::parse(*text);
  std::set<std::string> all;
  for (const Reason& r : kReasons) EXPECT_TRUE(all.insert(r.name).second) << r.name << " twice";
  std::set<std::string> in_schema;
  bool null_allowed = false;
  for (const auto& v : schema["properties"]["reason"]["enum"]) {
    if (v.is_null()) null_allowed = true;
    else in_schema.insert(v.get<std::string>());
  }
  EXPECT_TRUE(null_allowed);
  EXPECT_EQ(all, in_schema);
  for (Outcome o : kOutcomes) {
    std::set<std::string> allowed = in_schema;  // the schema's rule for this outcome, if any
    for (const auto& rule : schema["allOf"]) {
      const auto& when = rule["if"]["properties"]["outcome"];
      bool applies = when.value("const", std::string()) == outcome_name(o);
      for (const auto& name : when.value("enum", nlohmann::json::array())) applies |= name == outcome_name(o);
      if (!applies || !rule.contains("then") || !rule["then"]["properties"].contains("reason")) continue;
      const auto& reason = rule["then"]["properties"]["reason"];
      std::set<std::string> here;
      if (reason.contains("enum")) {
        for (const auto& v : reason["enum"]) {
          if (v.is_string()) here.insert(v.get<std::string>());
        }
      }
      allowed = here;
    }
    EXPECT_EQ(allowed, reasons_of(o)) << outcome_name(o);
    for (const std::string& r : all) EXPECT_EQ(reason_of(o, r), reasons_of(o).count(r) == 1) << outcome_name(o) << " " << r;
  }
  EXPECT_FALSE(reason_of(Outcome::kWrongAnswer, "timed_output_mismatch"));
  EXPECT_FALSE(reason_of(Outcome::kOk, "mismatch"));

  auto judge = read_file(std::string(ANVIL_SOURCE_DIR) + "/python/anvil/judge.py");
  ASSERT_TRUE(judge);
  std::smatch m;
  ASSERT_TRUE(std::regex_search(*judge, m, std::regex(R"(\nREASONS = \(([^)]*)\))"))) << "judge.py's REASONS";
  std::set<std::string> python = {"timing_forged"};  // anvil's own (reward.h)
  std::string list = m[1];
  std::regex quoted("\"([a-z_]+)\"");
  for (auto it = std::sregex_iterator(list.begin(), list.end(), quoted); it != std::sregex_iterator(); ++it) {
    python.insert((*it)[1]);
  }
  EXPECT_EQ(reasons_of(Outcome::kHackSuspected), python);

  auto docs = read_file(std::string(ANVIL_SOURCE_DIR) + "/docs/anti-hacking.md");
  ASSERT_TRUE(docs);
  size_t from = docs->find("## Outcomes and reasons");
  ASSERT_NE(from, std::string::npos);
  std::string section = docs->substr(from, docs->find("\n## ", from + 1) - from);
  for (const std::string& r : all) EXPECT_NE(section.find("`" + r + "`"), std::string::npos) << r << " is not in the docs";
}

}  // namespace
}  // namespace anvil
