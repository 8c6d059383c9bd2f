// report_test.cpp: the Markdown and HTML reports over results built here as
// docs/bench.md defines them (metrics from compute_metrics), and the HTML's
// plots rendered for real by a headless Chromium with no network.
#include "anvil/bench/report.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <map>

#include "anvil/bench/metrics.h"
#include "anvil/util/fs.h"
#include "anvil/util/strings.h"
#include "anvil/util/subprocess.h"

namespace anvil {
namespace {

using Json = nlohmann::json;

const std::string kEvilName = "<script>alert(1)</script>&\"";

// One row of `tasks`; a correct row's speedups are baseline ms / candidate ms.
Json row(const std::string& level, long id, const std::string& name, const std::string& outcome, int reward,
         Json cand_ms = nullptr, Json eager_ms = nullptr, Json compile_ms = nullptr, const std::string& message = "") {
  bool ok = outcome == "ok";
  auto ratio = [&](const Json& base) {
    return ok && base.is_number() && cand_ms.is_number() ? Json(base.get<double>() / cand_ms.get<double>()) : Json();
  };
  std::string stem = std::to_string(id) + "_" + name;
  return {{"level", level},
          {"id", id},
          {"name", name},
          {"stem", stem},
          {"task", "tasks/" + level + "/" + stem + ".py"},
          {"solution", outcome == "missing" ? Json() : Json("sol/" + level + "/" + stem)},
          {"outcome", outcome},
          {"correct", ok},
          {"reward", reward},
          {"candidate_ms", ok ? cand_ms : Json()},
          {"eager_ms", eager_ms},
          {"compile_ms", compile_ms},
          {"speedup_eager", ratio(eager_ms)},
          {"speedup_compile", ratio(compile_ms)},
          {"message", message},
          {"seconds", 1.5},
          {"record", "tasks/" + level + "/" + stem + ".json"}};
}

// A whole results.json (anvil.bench/1) around some rows.
Json results(const std::vector<Json>& rows, bool gpu, Json problems = nullptr) {
  std::vector<std::string> levels;
  std::map<std::string, std::vector<Json>> by_level;
  for (const auto& r : rows) {
    std::string l = r["level"];
    if (!by_level.count(l)) levels.push_back(l);
    by_level[l].push_back(r);
  }
  Json lv = Json::array();
  for (const auto& l : levels) lv.push_back({{"level", l}, {"metrics", compute_metrics(by_level[l])}});
  if (problems.is_null()) {
    problems = {{"missing", Json::array()},
                {"extra", Json::array()},
                {"unreadable", Json::array()},
                {"not_evaluated", Json::array()}};
  }
  Json fp = {{"gpu", gpu ? Json{{"name", "NVIDIA H100 80GB HBM3"}, {"count", 1}, {"capability", "9.0"}} : Json()},
             {"driver", gpu ? Json("570.86.15") : Json()},
             {"cuda", gpu ? Json("12.8") : Json()},
             {"torch", "2.11.0"},
             {"triton", gpu ? Json("3.5.0") : Json()},
             {"python", "3.11.2"},
             {"device", gpu ? "cuda" : "cpu"},
             {"compile_mode", gpu ? "default" : "none"},
             {"tf32", {{"matmul", false}, {"cudnn", false}}},
             {"preset", "strict"},
             {"timing", "events: median of 100 calls after 10 warm-up, 4 rotated input sets, L2 flushed"},
             {"anvil", {{"version", "0.1.0"}, {"rev", "abc1234"}}},
             {"host", "gpu-host-7"},
             {"date", "2026-11-22"}};
  return {{"schema", "anvil.bench/1"},
          {"run",
           {{"out", "runs/bench-a"},
            {"tasks", "KernelBench/"},
            {"solutions", "my-solutions/"},
            {"agent", nullptr},
            {"variant", gpu ? "cuda" : "cpu"},
            {"started", "2026-11-22T10:00:00Z"},
            {"finished", "2026-11-22T10:12:30Z"},
            {"seconds", 750.0},
            {"evaluated", 6},
            {"resumed", 2},
            {"tasks_per_minute", 0.48},
            {"gpus", gpu ? Json::array({0}) : Json()}}},
          {"fingerprint", fp},
          {"rules", metric_rules()},
          {"levels", lv},
          {"overall", compute_metrics(rows)},
          {"tasks", rows},
          {"problems", problems}};
}

// Two levels, five correct tasks of eight; with `gpu`, a compile baseline.
//   level1 eager 4.0, 2.0, 1.02 (three bins), compile 2.0, 0.5, 1.01 (three bins)
//   level2 eager 3.0, 3.2 (one bin),          compile 1.5, 1.6 (one bin)
Json suite(bool gpu) {
  auto c = [&](double ms) { return gpu ? Json(ms) : Json(); };
  std::vector<Json> rows = {
      row("level1", 1, "ReLU", "ok", gpu ? 3 : 2, 0.05, 0.2, c(0.1)),
      row("level1", 2, "Softmax", "ok", 2, 0.1, 0.2, c(0.05)),
      row("level1", 3, kEvilName, "ok", 1, 1.0, 1.02, c(1.01)),
      row("level1", 4, "Conv", "wrong_answer", -1, nullptr, 3.0, c(2.0),
          "output 0 differs | max abs diff 0.5 at [3, 7]\nsecond line of the message, which goes on and on "
          "for longer than eighty characters in all"),
      row("level1", 5, "Gemm", "missing", -1, nullptr, nullptr, nullptr, "no solution in my-solutions/level1"),
      row("level2", 1, "Fused", "ok", gpu ? 3 : 2, 1.0, 3.0, c(1.5)),
      row("level2", 2, "Norm", "compile_error", -1, nullptr, 2.0, c(1.0),
          "kernels/norm.cu:20: error: identifier \"hi_clamp\" is undefined"),
      row("level2", 3, "Attn", "not_evaluated", -1, nullptr, nullptr, nullptr, "the runner could not start"),
      row("level2", 4, "Pool", "ok", gpu ? 3 : 2, 1.0, 3.2, c(1.6)),
  };
  Json problems = {
      {"missing",
       {{{"level", "level1"},
         {"id", 5},
         {"name", "Gemm"},
         {"task", "tasks/level1/5_Gemm.py"},
         {"reason", "no solution in my-solutions/level1"}}}},
      {"extra", {{{"path", "my-solutions/level1/9_Extra.py"}, {"reason", "matches no task"}}}},
      {"unreadable", {{{"path", "KernelBench/level1/notes.py"}, {"reason", "not named <id>_<Name>.py"}}}},
      {"not_evaluated", {{{"level", "level2"}, {"id", 3}, {"name", "Attn"}, {"error", "the runner could not start"}}}},
  };
  return results(rows, gpu, problems);
}

Json all_failed() {
  return results({row("level1", 1, "A", "wrong_answer", -1, nullptr, 1.0, 1.0, "wrong"),
                  row("level1", 2, "B", "wrong_answer", -1, nullptr, 1.0, 1.0, "wrong"),
                  row("level1", 3, "C", "timeout", -1, nullptr, 1.0, 1.0, "timed out after 180 s")},
                 true);
}

Json no_tasks() { return results({}, false); }

size_t occurrences(const std::string& s, const std::string& what) {
  size_t n = 0;
  for (size_t at = s.find(what); at != std::string::npos; at = s.find(what, at + what.size())) ++n;
  return n;
}

// The line of a Markdown table whose first cell is `first`.
std::string md_row(const std::string& md, const std::string& first) {
  for (const auto& line : split_lines(md)) {
    if (starts_with(line, "| " + first + " |")) return line;
  }
  return "";
}

TEST(Report, MarkdownHasTheRowsTheSetupAndTheProblems) {
  std::string md = render_markdown(suite(true));
  EXPECT_TRUE(starts_with(md, "# anvil bench: KernelBench/\n")) << md;
  for (const char* s :
       {"NVIDIA H100 80GB HBM3 x 1", "570.86.15", "12.8", "2.11.0", "3.5.0", "3.11.2", "default",
        "matmul off, cuDNN off", "strict", "median of 100 calls", "0.1.0 (abc1234)", "gpu-host-7", "2026-11-22"}) {
    EXPECT_NE(md.find(s), std::string::npos) << s;
  }
  // level1: 3 of 5 correct; 2 faster than eager by 5% (4.0x, 2.0x), 1 faster than compile (2.0x).
  EXPECT_TRUE(
      starts_with(md_row(md, "level1"), "| level1 | 5 | 60.0% | 40.0% | 20.0% | 60.0% | 40.0% | 20.0% / 0.0% |"))
      << md_row(md, "level1");
  EXPECT_TRUE(starts_with(md_row(md, "level2"), "| level2 | 4 | 50.0% | 50.0% | 50.0% |")) << md_row(md, "level2");
  EXPECT_TRUE(starts_with(md_row(md, "overall"), "| overall | 9 | 55.6% |")) << md_row(md, "overall");
  EXPECT_NE(md_row(md, "level1").find("| 2.00x |"), std::string::npos);  // median vs eager of 4, 2, 1.02
  // The outcome counts, the rules, the run facts, every problem list.
  EXPECT_NE(md.find("| level | tasks | ok | faster than both (reward 3) |"), std::string::npos) << md;
  EXPECT_NE(md.find("**geomean_all**"), std::string::npos);
  EXPECT_NE(md.find("750.0 s (13 min)"), std::string::npos);
  EXPECT_NE(md.find("**tasks per minute**: 0.48"), std::string::npos);
  for (const char* s :
       {"### missing", "### extra", "### unreadable", "### not evaluated",
        "`my-solutions/level1/9_Extra.py`: matches no task", "`level2 / 3_Attn`: the runner could not start",
        "`level1 / 5_Gemm (tasks/level1/5_Gemm.py)`: no solution in my-solutions/level1"}) {
    EXPECT_NE(md.find(s), std::string::npos) << s;
  }
  // The task table: pipes escaped, the message on one line and cut.
  std::string conv = md_row(md, "level1 | 4");
  EXPECT_NE(conv.find("| Conv | wrong_answer | -1 | n/a | 3.000 | 2.000 | n/a | n/a |"), std::string::npos) << conv;
  EXPECT_NE(conv.find("output 0 differs \\| max abs diff 0.5 at [3, 7] second line of the"), std::string::npos) << conv;
  EXPECT_TRUE(ends_with(conv, "... |")) << conv;
  EXPECT_NE(md_row(md, "level1 | 1").find("| ReLU | ok | 3 | 0.0500 | 0.2000 | 0.1000 | 4.00x | 2.00x |"),
            std::string::npos)
      << md_row(md, "level1 | 1");
  // A name that looks like HTML is escaped for the reader's Markdown renderer.
  EXPECT_NE(md_row(md, "level1 | 3").find("| \\<script>alert(1)\\</script>&\" | ok |"), std::string::npos)
      << md_row(md, "level1 | 3");
  // Every table line is one line: it starts and ends with a pipe.
  for (const auto& line : split_lines(md)) {
    if (starts_with(line, "|")) {
      EXPECT_TRUE(ends_with(line, "|")) << line;
    }
  }
}

TEST(Report, MarkdownPrintsNaForTheMissingCompileBaselineAndNoneForNoProblems) {
  Json r = suite(false);
  r["problems"] = {{"missing", Json::array()},
                   {"extra", Json::array()},
                   {"unreadable", Json::array()},
                   {"not_evaluated", Json::array()}};
  std::string md = render_markdown(r);
  EXPECT_NE(md.find("none (CPU run)"), std::string::npos);
  // >compile, fast_1 (compile), fast_1.5/2, geomean vs compile, median vs compile: n/a.
  std::string overall = md_row(md, "overall");
  EXPECT_NE(overall.find("| 55.6% | 44.4% | n/a | 55.6% | n/a | n/a / n/a |"), std::string::npos) << overall;
  EXPECT_NE(overall.find("| n/a / n/a | 3.00x | n/a |"), std::string::npos) << overall;
  EXPECT_NE(md.find("## Problems\n\nnone\n"), std::string::npos) << md;
}

// The rule saying why compile metrics are n/a shows only where they are: a CPU run can measure
// torch.compile, and its report said "n/a on CPU runs" beside the figures.
TEST(Report, TheCompileRuleShowsOnlyWhereCompileMetricsAreNa) {
  const std::string why = "compile metrics are n/a: no torch.compile time was measured";
  Json measured = suite(true);
  measured["fingerprint"]["gpu"] = nullptr;
  measured["fingerprint"]["device"] = "cpu";
  EXPECT_EQ(render_markdown(measured).find(why), std::string::npos);
  EXPECT_EQ(render_html(measured).find(why), std::string::npos);
  EXPECT_NE(render_markdown(suite(false)).find(why), std::string::npos);
  EXPECT_NE(render_html(suite(false)).find(why), std::string::npos);
}

Json usage(long turns, long reported, Json prompt, Json completion) {
  return {{"turns", turns}, {"reported_turns", reported}, {"prompt_tokens", prompt}, {"completion_tokens", completion}};
}

// An agent run: level1's two episodes counted by the server, level2's one episode not counted
// (no usage in its answers) and one that never started; with `priced`, at 2.5 and 10 USD per
// million prompt / completion tokens (each counted episode costs 0.02).
Json agent_run(bool priced) {
  std::vector<Json> rows = {
      row("level1", 1, "ReLU", "ok", 2, 0.05, 0.2),
      row("level1", 2, "Softmax", "wrong_answer", -1, nullptr, 0.2, nullptr, "wrong"),
      row("level2", 1, "Fused", "ok", 2, 1.0, 3.0),
      row("level2", 2, "Norm", "not_evaluated", -1, nullptr, nullptr, nullptr, "the episode did not start"),
  };
  Json prices = priced ? Pricing{2.5, 10}.to_json() : Json();
  std::vector<Json> usages = {usage(2, 2, 4000, 1000), usage(3, 3, 6000, 500), usage(4, 0, nullptr, nullptr),
                              nullptr};
  for (size_t i = 0; i < rows.size(); ++i) {
    rows[i]["usage"] = usages[i];
    rows[i]["cost_usd"] = task_cost(usages[i], prices);
  }
  Json r = results(rows, false);
  r["run"]["agent"] = {{"endpoint", "https://api.example.com/v1"}, {"model", "m-large"}};
  r["run"]["solutions"] = nullptr;
  r["run"]["pricing"] = prices;
  r["rules"] = metric_rules(true);
  return r;
}

std::string after(const std::string& s, const std::string& heading) {
  size_t at = s.find(heading);
  return at == std::string::npos ? "" : s.substr(at);
}

TEST(ReportUsage, MarkdownHasTokensAndCostPerLevelAndTaskAndNotReportedWhereTheServerSentNone) {
  std::string md = render_markdown(agent_run(true));
  std::string sec = after(md, "## Model usage\n");
  ASSERT_FALSE(sec.empty()) << md;
  EXPECT_NE(sec.find("| level | episodes | turns | turns reported | prompt tokens | completion tokens | cost (USD) |"),
            std::string::npos)
      << sec;
  EXPECT_EQ(md_row(sec, "level1"), "| level1 | 2 | 5 | 5 | 10000 | 1500 | 0.0400 |");
  EXPECT_EQ(md_row(sec, "level2"), "| level2 | 1 | 4 | 0 | not reported | not reported | not reported |");
  EXPECT_EQ(md_row(sec, "overall"), "| overall | 3 | 9 | 5 | 10000 | 1500 | 0.0400 |");
  EXPECT_NE(sec.find("The server reported 5 of 9 turns: the sums are a lower bound."), std::string::npos) << sec;
  EXPECT_NE(sec.find("Prices: USD 2.5 per million prompt tokens, USD 10 per million completion tokens."),
            std::string::npos)
      << sec;
  // Per task: turns, tokens, cost before the message; n/a for the episode that never started.
  std::string tasks = after(md, "## Tasks\n");
  EXPECT_NE(tasks.find("| x compile | turns | prompt tokens | completion tokens | cost (USD) | message |"),
            std::string::npos)
      << tasks;
  EXPECT_NE(md_row(tasks, "level1 | 1").find("| 2 | 4000 | 1000 | 0.0200 |"), std::string::npos)
      << md_row(tasks, "level1 | 1");
  EXPECT_NE(md_row(tasks, "level2 | 1").find("| 4 | not reported | not reported | not reported |"),
            std::string::npos)
      << md_row(tasks, "level2 | 1");
  EXPECT_NE(md_row(tasks, "level2 | 2").find("| n/a | n/a | n/a | n/a | the episode did not start |"),
            std::string::npos)
      << md_row(tasks, "level2 | 2");
  EXPECT_NE(md.find("**prices**: USD 2.5 per million prompt tokens"), std::string::npos);
  EXPECT_NE(md.find("**tokens**: the agent's prompt and completion tokens"), std::string::npos);
  EXPECT_NE(md.find("**cost_usd**: prompt tokens x the input price"), std::string::npos);
}

TEST(ReportUsage, WithoutPricesThereIsNoCostAndWithoutTheAgentNoUsage) {
  std::string md = render_markdown(agent_run(false));
  EXPECT_EQ(md_row(after(md, "## Model usage\n"), "overall"), "| overall | 3 | 9 | 5 | 10000 | 1500 |");
  EXPECT_EQ(md.find("cost (USD)"), std::string::npos);
  EXPECT_NE(md.find("**prices**: none given (--price-input, --price-output): no cost"), std::string::npos);
  std::string html = render_html(agent_run(false));
  EXPECT_NE(html.find("<h2>Model usage</h2>"), std::string::npos);
  EXPECT_NE(html.find("<b>11500</b><span>tokens (prompt + completion)</span>"), std::string::npos);
  EXPECT_EQ(html.find("cost (USD)"), std::string::npos);
  // A run of --solutions: no usage anywhere.
  for (const std::string& page : {render_markdown(suite(true)), render_html(suite(true))}) {
    for (const char* s : {"Model usage", "prompt tokens", "prices", "cost"}) {
      EXPECT_EQ(page.find(s), std::string::npos) << s;
    }
  }
}

TEST(ReportUsage, HtmlHasTheUsageTableTheCardsAndTheTaskColumns) {
  std::string html = render_html(agent_run(true));
  EXPECT_NE(html.find("<b>$0.0400</b><span>cost (USD)</span>"), std::string::npos);
  EXPECT_NE(html.find("<td class=\"num\">not reported</td>"), std::string::npos);
  EXPECT_NE(html.find("<th class=\"num\">cost (USD)</th>"), std::string::npos);
  EXPECT_NE(html.find(">the episode did not start</td></tr>"), std::string::npos);  // the message: still last
  // Nothing reported at all: not reported, never 0.
  Json none = agent_run(true);
  for (auto& row : none["tasks"]) {
    if (row["usage"].is_object()) row["usage"] = usage(row["usage"]["turns"].get<long>(), 0, nullptr, nullptr);
    row["cost_usd"] = nullptr;
  }
  std::vector<Json> rows(none["tasks"].begin(), none["tasks"].end());
  none["overall"] = compute_metrics(rows);
  std::string page = render_html(none);
  EXPECT_NE(page.find("<b>not reported</b><span>tokens (prompt + completion)</span>"), std::string::npos);
  EXPECT_NE(page.find("<b>not reported</b><span>cost (USD)</span>"), std::string::npos);
  EXPECT_EQ(md_row(after(render_markdown(none), "## Model usage\n"), "overall"),
            "| overall | 3 | 9 | 0 | not reported | not reported | not reported |");
}

TEST(Report, HtmlEscapesEveryTextFromTheResults) {
  Json r = suite(true);
  r["run"]["tasks"] = "suite<&>\"'";
  r["problems"]["extra"][0]["path"] = "sol/<img src=x onerror=alert(1)>.py";
  std::string html = render_html(r);
  EXPECT_EQ(html.find("<script"), std::string::npos);
  EXPECT_EQ(html.find("<img"), std::string::npos);
  EXPECT_NE(html.find("&lt;script&gt;alert(1)&lt;/script&gt;&amp;&quot;"), std::string::npos);
  EXPECT_NE(html.find("<title>anvil bench: suite&lt;&amp;&gt;&quot;&#39;</title>"), std::string::npos);
  // The point's hover text names the task: level / id_Name: speedups.
  EXPECT_NE(
      html.find(
          "<title>level1 / 3_&lt;script&gt;alert(1)&lt;/script&gt;&amp;&quot;: 1.02x eager, 1.01x compile</title>"),
      std::string::npos);
}

// A printed report can say which dot is which: the points farthest from 1x/1x carry their task's
// name (all of them when there are no more than six).
TEST(Report, ScatterLabelsItsOutliers) {
  std::string few = render_html(suite(true));
  EXPECT_EQ(occurrences(few, "class=\"ptl\""), 5u);
  EXPECT_NE(few.find(">1_ReLU</text>"), std::string::npos);
  std::vector<Json> rows;
  for (int i = 1; i <= 20; ++i) rows.push_back(row("level1", i, "T" + std::to_string(i), "ok", 1, 1.0, 1.0 + 0.01 * i, 1.0));
  rows.push_back(row("level1", 21, "Far", "ok", 3, 0.1, 5.0, 4.0));  // 50x and 40x: the farthest
  Json many = suite(true);
  many["tasks"] = rows;
  std::string html = render_html(many);
  EXPECT_EQ(occurrences(html, "class=\"ptl\""), 6u);
  EXPECT_NE(html.find(">21_Far</text>"), std::string::npos);
  EXPECT_NE(html.find(">20_T20</text>"), std::string::npos);  // the next farthest
  EXPECT_EQ(html.find(">1_T1</text>"), std::string::npos);    // 1.01x: unlabelled
}

TEST(Report, HtmlHasOnePointPerCorrectTaskAndTheBreakdownAndHistograms) {
  std::string html = render_html(suite(true));
  EXPECT_EQ(occurrences(html, "class=\"pt\""), 5u);  // the correct tasks
  EXPECT_EQ(occurrences(html, "<circle class=\"pt\""), 5u);
  EXPECT_EQ(occurrences(html, "class=\"seg\""), 5u + 3u + 7u);  // nonzero (level, outcome) pairs
  EXPECT_EQ(occurrences(html, "data-outcome=\"faster_than_both\""), 3u);
  EXPECT_EQ(occurrences(html, "class=\"bar\""), 6u + 2u);
  EXPECT_EQ(occurrences(html, "data-series=\"compile\""), 3u + 1u);
  for (const char* id : {"plot-outcomes", "plot-tasks", "plot-dist-level1", "plot-dist-level2"}) {
    EXPECT_NE(html.find(std::string("<svg class=\"plot\" id=\"") + id + "\""), std::string::npos) << id;
  }
  EXPECT_NE(html.find("level2, vs eager: 2 tasks, 2.83x to 3.36x"), std::string::npos);
  EXPECT_NE(html.find("level1: wrong_answer: 1 of 5 tasks (20.0%)"), std::string::npos);
}

TEST(Report, HtmlOfACpuRunDrawsSortedBarsWithoutACompileSeries) {
  Json r = suite(false);
  ASSERT_TRUE(r["overall"]["fast_p"]["compile"].is_null());
  std::string html = render_html(r);
  EXPECT_EQ(occurrences(html, "<rect class=\"pt\""), 5u);
  EXPECT_EQ(occurrences(html, "<circle"), 0u);
  EXPECT_EQ(occurrences(html, "data-series=\"compile\""), 0u);
  EXPECT_EQ(occurrences(html, "class=\"bar\""), 3u + 1u);
  EXPECT_NE(html.find("sorted"), std::string::npos);
  EXPECT_NE(html.find("n/a"), std::string::npos);
}

TEST(Report, AllFailedAndEmptyRunsRender) {
  std::string failed = render_html(all_failed());
  EXPECT_EQ(occurrences(failed, "class=\"pt\""), 0u);
  EXPECT_EQ(occurrences(failed, "class=\"bar\""), 0u);
  EXPECT_EQ(occurrences(failed, "class=\"seg\""), 4u);
  EXPECT_GE(occurrences(failed, "no correct tasks"), 2u);  // the scatter and the level's histogram
  EXPECT_NE(render_markdown(all_failed()).find("| overall | 3 | 0.0% |"), std::string::npos);

  std::string empty = render_html(no_tasks());
  EXPECT_NE(empty.find("id=\"plot-outcomes\""), std::string::npos);
  EXPECT_NE(empty.find("id=\"plot-tasks\""), std::string::npos);
  EXPECT_NE(empty.find("no tasks"), std::string::npos);
  EXPECT_NE(empty.find("no correct tasks"), std::string::npos);
  std::string md = render_markdown(no_tasks());
  EXPECT_NE(md.find("| overall | 0 | n/a |"), std::string::npos) << md;

  // Not even the keys: still a page and a summary.
  EXPECT_NE(render_html(Json::object()).find("</html>"), std::string::npos);
  EXPECT_NE(render_markdown(Json()).find("# anvil bench"), std::string::npos);
}

TEST(Report, HtmlIsSelfContained) {
  for (const Json& r : {suite(true), suite(false), all_failed(), no_tasks()}) {
    std::string html = render_html(r);
    for (const char* bad : {"http://", "https://", "<script", "<link", "<img", "<iframe", "src=", "url(", "@import",
                            "@font-face", "xlink:href"}) {
      EXPECT_EQ(html.find(bad), std::string::npos) << bad;
    }
    EXPECT_TRUE(starts_with(html, "<!doctype html>"));
    EXPECT_NE(html.find("<style>"), std::string::npos);
  }
}

TEST(Report, LevelIdsAreSafeAndUniqueInHtml) {
  std::vector<Json> rows = {row("level 1", 1, "A", "ok", 2, 1.0, 2.0), row("level/1", 1, "B", "ok", 2, 1.0, 2.0)};
  std::string html = render_html(results(rows, false));
  EXPECT_NE(html.find("id=\"plot-dist-level-1\""), std::string::npos);
  EXPECT_NE(html.find("id=\"plot-dist-level-1-2\""), std::string::npos);
}

// --- the plots in a real browser

// The browser: $ANVIL_CHROMIUM, else chromium, chromium-browser or google-chrome on PATH.
fs::path find_chromium(std::string* why) {
  if (const char* env = std::getenv("ANVIL_CHROMIUM"); env && *env) {
    fs::path p = find_program(env);
    if (p.empty()) *why = std::string("ANVIL_CHROMIUM=") + env + " is not an executable";
    return p;
  }
  for (const char* name : {"chromium", "chromium-browser", "google-chrome"}) {
    if (fs::path p = find_program(name); !p.empty()) return p;
  }
  *why =
      "no chromium, chromium-browser or google-chrome on PATH (install the Debian package chromium, "
      "or set ANVIL_CHROMIUM)";
  return {};
}

// Measures every svg.plot once the page has loaded and writes what it found
// into <pre id="probe">: size, marks (all, and those with a nonzero box),
// text elements, and every resource the page requested.
const char* kProbe = R"(<pre id="probe"></pre>
<script>
window.addEventListener('load', function () {
  var out = {plots: {}, resources: []};
  document.querySelectorAll('svg.plot').forEach(function (svg) {
    function marks(selector) {
      var all = svg.querySelectorAll(selector), drawn = 0;
      all.forEach(function (e) { var b = e.getBoundingClientRect(); if (b.width > 0 && b.height > 0) drawn++; });
      return [all.length, drawn];
    }
    var r = svg.getBoundingClientRect();
    out.plots[svg.id] = {width: r.width, height: r.height, seg: marks('rect.seg'), bar: marks('rect.bar'),
                         pt: marks('.pt'), text: svg.querySelectorAll('text').length};
  });
  performance.getEntriesByType('resource').forEach(function (e) { out.resources.push(e.name); });
  document.getElementById('probe').textContent = JSON.stringify(out);
});
</script>
)";

struct Marks {
  size_t seg = 0, bar = 0, pt = 0;
};

// Renders `results`, loads it in Chromium with the network unreachable, and
// checks each plot: drawn with a nonzero size, and exactly the marks expected
// (every one of them with a nonzero box).
void check_in_browser(const fs::path& chromium, const fs::path& dir, const std::string& name, const Json& results,
                      const std::map<std::string, Marks>& expected) {
  SCOPED_TRACE(name);
  std::string html = render_html(results);
  std::string err;
  ASSERT_TRUE(write_file_atomic(dir / (name + ".html"), html, &err)) << err;
  size_t body = html.rfind("</body>");
  ASSERT_NE(body, std::string::npos);
  fs::path probe_page = dir / (name + ".probe.html");
  ASSERT_TRUE(write_file_atomic(probe_page, html.substr(0, body) + kProbe + html.substr(body), &err)) << err;

  SubprocessOptions so;
  so.timeout = std::chrono::seconds(90);
  so.merge_stderr = false;                         // the DOM on stdout; Chromium's chatter on stderr
  so.new_network = network_isolation_available();  // no network at all where we may; the flags below anyway
  SubprocessResult r = run_subprocess(
      {chromium.string(), "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-extensions",
       "--user-data-dir=" + (dir / "profile").string(), "--host-resolver-rules=MAP * ~NOTFOUND",
       "--proxy-server=127.0.0.1:9", "--dump-dom", "--virtual-time-budget=5000", "file://" + probe_page.string()},
      so);
  ASSERT_TRUE(r.ok()) << chromium << ": " << r.describe() << "\n" << tail_lines(r.err_output, 30);
  const std::string open = "<pre id=\"probe\">";
  size_t a = r.output.find(open);
  ASSERT_NE(a, std::string::npos) << "no probe in the dumped DOM:\n" << r.output.substr(0, 2000);
  size_t b = r.output.find("</pre>", a);
  ASSERT_NE(b, std::string::npos);
  std::string text = r.output.substr(a + open.size(), b - a - open.size());
  text = replace_all(replace_all(replace_all(text, "&lt;", "<"), "&gt;", ">"), "&amp;", "&");
  ASSERT_FALSE(text.empty()) << "the probe did not run (no load event?)\n" << tail_lines(r.err_output, 30);
  Json probe = Json::parse(text);

  EXPECT_EQ(probe["resources"], Json::array()) << "the page requested resources";
  ASSERT_EQ(probe["plots"].size(), expected.size()) << probe.dump(1);
  for (const auto& [id, want] : expected) {
    SCOPED_TRACE(id);
    ASSERT_TRUE(probe["plots"].contains(id)) << probe.dump(1);
    const Json& p = probe["plots"][id];
    EXPECT_GT(p["width"].get<double>(), 200);
    EXPECT_GT(p["height"].get<double>(), 50);
    EXPECT_GT(p["text"].get<int>(), 5);  // a title, tick labels, a legend or a note
    EXPECT_EQ(p["seg"], Json::array({want.seg, want.seg}));
    EXPECT_EQ(p["bar"], Json::array({want.bar, want.bar}));
    EXPECT_EQ(p["pt"], Json::array({want.pt, want.pt}));
  }
}

TEST(Report, PlotsRenderInHeadlessChromiumOffline) {
  std::string why;
  fs::path chromium = find_chromium(&why);
  if (chromium.empty()) {
    const char* skip = std::getenv("ANVIL_SKIP_BROWSER");
    if (skip && std::string(skip) == "1") GTEST_SKIP() << "ANVIL_SKIP_BROWSER=1: " << why;
    FAIL() << "the browser test needs Chromium: " << why << "; set ANVIL_SKIP_BROWSER=1 to skip it";
  }
  fs::path dir = make_temp_dir(fs::temp_directory_path(), "anvil-report-test");
  auto t0 = std::chrono::steady_clock::now();
  check_in_browser(chromium, dir, "gpu", suite(true),
                   {{"plot-outcomes", {15, 0, 0}},
                    {"plot-tasks", {0, 0, 5}},
                    {"plot-dist-level1", {0, 6, 0}},
                    {"plot-dist-level2", {0, 2, 0}}});
  check_in_browser(chromium, dir, "cpu", suite(false),  // no reward 3 without a compile baseline
                   {{"plot-outcomes", {13, 0, 0}},
                    {"plot-tasks", {0, 0, 5}},
                    {"plot-dist-level1", {0, 3, 0}},
                    {"plot-dist-level2", {0, 1, 0}}});
  check_in_browser(chromium, dir, "failed", all_failed(),
                   {{"plot-outcomes", {4, 0, 0}}, {"plot-tasks", {0, 0, 0}}, {"plot-dist-level1", {0, 0, 0}}});
  check_in_browser(chromium, dir, "empty", no_tasks(), {{"plot-outcomes", {0, 0, 0}}, {"plot-tasks", {0, 0, 0}}});
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("[ report  ] 4 pages in %s with %s\n", format_seconds(seconds).c_str(), chromium.c_str());
  if (!HasFailure()) remove_tree(dir);
}

}  // namespace
}  // namespace anvil
