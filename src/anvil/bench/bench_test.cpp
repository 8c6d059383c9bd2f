// bench_test.cpp: `anvil bench` end to end on the CPU: real tasks, real
// builds, real evaluations through the installed binary; then resuming a
// finished and a killed run, the reports, and the comparison.
#include "anvil/bench/bench.h"

#include <signal.h>
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <map>
#include <thread>

#include <gtest/gtest.h>

#include "support/replay_fixture.h"
#include "support/test_env.h"
#include "anvil/util/fs.h"
#include "anvil/util/strings.h"
#include "anvil/util/subprocess.h"

namespace anvil {
namespace {

using Json = nlohmann::json;
const std::string kSource = ANVIL_SOURCE_DIR;

void write(const fs::path& p, const std::string& text) {
  std::string err;
  ASSERT_TRUE(write_file_atomic(p, text, &err)) << err;
}

// Task 01 of the examples at a small size (and a distinct scale, so each task
// has its own hash and baselines).
std::string chain_task(int rows, int cols, const char* scale) {
  std::string text = *read_file(kSource + "/examples/tasks/01_elementwise_chain.py");
  text = replace_all(text, "ROWS = 4096", "ROWS = " + std::to_string(rows));
  text = replace_all(text, "COLS = 4096", "COLS = " + std::to_string(cols));
  return replace_all(text, "SCALE = 1.5", std::string("SCALE = ") + scale);
}

// The sources of a candidate folder (not its build outputs).
void copy_candidate(const fs::path& from, const fs::path& to) {
  for (const auto& e : fs::recursive_directory_iterator(from)) {
    fs::path rel = fs::relative(e.path(), from);
    std::string r = rel.string();
    if (!e.is_regular_file() || starts_with(r, "build") || ends_with(r, ".so")) continue;
    write(to / rel, *read_file(e.path()));
  }
}

struct Suite3 {
  fs::path root = make_temp_dir(fs::temp_directory_path(), "anvil-bench-test");
  fs::path tasks = root / "tasks", sol = root / "sol", out = root / "run";
  Suite3() {
    const fs::path good = kSource + "/examples/candidates/01_elementwise_chain/cpu";
    write(tasks / "level1" / "1_ChainSmall.py", chain_task(64, 256, "1.25"));
    write(tasks / "level1" / "2_ChainWide.py", chain_task(32, 512, "2.0"));
    write(tasks / "level1" / "3_ChainMissing.py", chain_task(16, 128, "0.75"));
    fs::create_symlink(root / "gone.py", tasks / "level1" / "4_Gone.py");
    write(tasks / "level2" / "1_Chain.py", chain_task(48, 256, "0.5"));
    copy_candidate(good, sol / "level1" / "1_ChainSmall" / "cpu");
    // A source no earlier run has built: its evaluation compiles nothing only if the prebuild built it.
    fs::path k = sol / "level1" / "1_ChainSmall" / "cpu" / "kernels" / "elementwise_chain.cpp";
    write(k, *read_file(k) + "// " + root.filename().string() + "\n");
    copy_candidate(kSource + "/examples/broken/wrong_math/cpu", sol / "level1" / "2_ChainWide" / "cpu");
    write(sol / "level1" / "9_Extra.py", "# a solution of no task\n");
    copy_candidate(good, sol / "level2" / "1_Chain" / "cpu");
  }
  ~Suite3() { remove_tree(root); }
  std::vector<std::string> argv(std::vector<std::string> extra = {}) const {
    std::vector<std::string> a = {ANVIL_BINARY, "bench", "--tasks", tasks.string(), "--solutions", sol.string(),
                                  "--out", out.string(), "--device", "cpu", "--compile-mode", "none", "--calls", "3",
                                  "--warmup", "1", "--input-sets", "2", "--trials", "2", "--seed", "7",
                                  "--timeout", "180", "--no-progress", "--json"};
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
  }
};

SubprocessOptions quick() {
  SubprocessOptions so;
  so.timeout = std::chrono::minutes(10);
  so.merge_stderr = false;
  so.env["ANVIL_CACHE"] = ANVIL_TEST_CACHE_DIR;
  return so;
}

Json parse(const SubprocessResult& r) {
  try {
    return Json::parse(r.output);
  } catch (const std::exception& e) {
    ADD_FAILURE() << "not JSON: " << e.what() << "\n" << r.output << "\n" << r.err_output;
    return Json::object();
  }
}

TEST(Bench, SuiteEndToEndWithMissingExtraUnreadableThenResumeReportCompare) {
  test_environment();
  Suite3 s;
  SubprocessResult r = run_subprocess(s.argv({"--overlap", "3"}), quick());
  ASSERT_EQ(r.exit_code, 0) << r.describe() << "\n" << r.err_output;
  Json res = parse(r);
  ASSERT_EQ(res.value("schema", ""), "anvil.bench/1");
  const Json& all = res["overall"];
  EXPECT_EQ(all["tasks"], 4);
  EXPECT_EQ(all["outcomes"]["ok"], 2) << all.dump();
  EXPECT_EQ(all["outcomes"]["wrong_answer"], 1) << all.dump();
  EXPECT_EQ(all["outcomes"]["missing"], 1) << all.dump();
  EXPECT_DOUBLE_EQ(all["pass_rate"].get<double>(), 0.5);
  EXPECT_TRUE(all["faster_than_compile_rate"].is_null());  // --compile-mode none
  ASSERT_EQ(res["levels"].size(), 2u);
  EXPECT_EQ(res["levels"][0]["level"], "level1");
  EXPECT_EQ(res["levels"][0]["metrics"]["tasks"], 3);
  EXPECT_EQ(res["levels"][1]["metrics"]["tasks"], 1);
  const Json& p = res["problems"];
  ASSERT_EQ(p["missing"].size(), 1u);
  EXPECT_EQ(p["missing"][0]["name"], "ChainMissing");
  ASSERT_EQ(p["extra"].size(), 1u);
  EXPECT_NE(p["extra"][0]["path"].get<std::string>().find("9_Extra.py"), std::string::npos);
  ASSERT_EQ(p["unreadable"].size(), 1u);
  EXPECT_NE(p["unreadable"][0]["reason"].get<std::string>().find("broken symbolic link"), std::string::npos);
  EXPECT_TRUE(p["not_evaluated"].empty());
  EXPECT_EQ(res["run"]["evaluated"], 3);
  EXPECT_EQ(res["run"]["resumed"], 0);
  EXPECT_EQ(res["run"]["missing"], 1);
  EXPECT_EQ(res["run"]["overlap"], 1);  // on a CPU one at a time, whatever --overlap says
  EXPECT_EQ(res["run"]["prebuild"]["candidates"], 3) << res["run"].dump();
  EXPECT_EQ(res["run"]["prebuild"]["failed"], 0) << res["run"].dump();
  EXPECT_GE(res["run"]["prebuild"]["compiled"], 1) << res["run"].dump();
  EXPECT_EQ(res["fingerprint"]["device"], "cpu");
  EXPECT_EQ(res["fingerprint"]["preset"], "strict");
  // No agent, no model usage: no tokens, no cost, no prices anywhere (docs/bench.md).
  EXPECT_FALSE(all.contains("usage")) << all.dump();
  EXPECT_FALSE(res["levels"][0]["metrics"].contains("usage"));
  EXPECT_FALSE(res["run"].contains("pricing"));
  EXPECT_FALSE(res["rules"].contains("tokens"));
  for (const auto& row : res["tasks"]) EXPECT_FALSE(row.contains("usage") || row.contains("cost_usd")) << row.dump();
  // Every row points at its record, which holds the full evaluation.
  for (const auto& row : res["tasks"]) {
    auto rec = read_file(s.out / row["record"].get<std::string>());
    ASSERT_TRUE(rec) << row.dump();
    Json j = Json::parse(*rec);
    EXPECT_EQ(j["schema"], "anvil.bench-task/1");
    EXPECT_EQ(j["outcome"], row["outcome"]);
    if (row["outcome"] != "missing") {
      EXPECT_EQ(j["eval"]["schema"], "anvil.eval/1");
      EXPECT_EQ(j["eval"]["build"]["compiled"], 0) << row.dump() << " was built again when evaluated";
    }
  }
  auto md = read_file(s.out / "report.md");
  auto html = read_file(s.out / "report.html");
  ASSERT_TRUE(md && html);
  EXPECT_NE(md->find("ChainWide"), std::string::npos);
  EXPECT_NE(html->find("<svg"), std::string::npos);

  // The same command again is refused; with --resume nothing is evaluated again.
  std::string before = *read_file(s.out / "tasks/level1/1_ChainSmall.json");
  SubprocessResult again = run_subprocess(s.argv(), quick());
  EXPECT_EQ(again.exit_code, 2);
  EXPECT_NE(again.err_output.find("add --resume"), std::string::npos) << again.err_output;
  SubprocessResult resumed = run_subprocess(s.argv({"--resume"}), quick());
  ASSERT_EQ(resumed.exit_code, 0) << resumed.err_output;
  Json rj = parse(resumed);
  EXPECT_EQ(rj["run"]["evaluated"], 0);
  EXPECT_EQ(rj["run"]["resumed"], 3);
  EXPECT_EQ(rj["run"]["missing"], 1);
  EXPECT_EQ(*read_file(s.out / "tasks/level1/1_ChainSmall.json"), before);
  EXPECT_EQ(rj["overall"], res["overall"]);
  // --resume --out DIR alone (docs/bench.md): the run's own command again.
  SubprocessResult alone = run_subprocess({ANVIL_BINARY, "bench", "--resume", "--out", s.out.string()}, quick());
  ASSERT_EQ(alone.exit_code, 0) << alone.err_output;
  EXPECT_EQ(parse(alone)["run"]["resumed"], 3) << alone.output;
  EXPECT_EQ(parse(alone)["overall"], res["overall"]);
  SubprocessResult nowhere = run_subprocess({ANVIL_BINARY, "bench", "--resume", "--out", (s.out / "none").string()}, quick());
  EXPECT_EQ(nowhere.exit_code, 2);
  EXPECT_NE(nowhere.err_output.find("no benchmark run in"), std::string::npos) << nowhere.err_output;
  // Other settings are another run.
  SubprocessResult other = run_subprocess(s.argv({"--resume", "--preset", "paper"}), quick());
  EXPECT_EQ(other.exit_code, 2);
  EXPECT_NE(other.err_output.find("the settings differ"), std::string::npos) << other.err_output;

  // The report is recomputed from the records alone.
  fs::remove(s.out / "results.json");
  SubprocessResult rep = run_subprocess({ANVIL_BINARY, "bench", "report", s.out.string(), "--json"}, quick());
  ASSERT_EQ(rep.exit_code, 0) << rep.err_output;
  EXPECT_EQ(parse(rep)["overall"], res["overall"]);
  // Prices price an agent's tokens: a run of --solutions has none to price.
  SubprocessResult priced = run_subprocess(
      {ANVIL_BINARY, "bench", "report", s.out.string(), "--price-input", "1", "--price-output", "2"}, quick());
  EXPECT_EQ(priced.exit_code, 2);
  EXPECT_NE(priced.err_output.find("this run has no agent"), std::string::npos) << priced.err_output;

  // A run compared with itself changes nothing; against a copy where a task
  // lost its solution, that task is listed.
  fs::path copy = s.root / "run-b";
  fs::copy(s.out, copy, fs::copy_options::recursive);
  Json rec = Json::parse(*read_file(copy / "tasks/level2/1_Chain.json"));
  rec["outcome"] = "compile_error";
  rec["correct"] = false;
  rec["reward"] = -1;
  write(copy / "tasks/level2/1_Chain.json", rec.dump());
  // run-b's results.json still holds the old numbers (compare reads results): recompute them first.
  SubprocessResult rep_b = run_subprocess({ANVIL_BINARY, "bench", "report", copy.string()}, quick());
  ASSERT_EQ(rep_b.exit_code, 0) << rep_b.err_output;
  SubprocessResult cmp = run_subprocess({ANVIL_BINARY, "bench", "compare", s.out.string(), copy.string(), "--json"}, quick());
  ASSERT_EQ(cmp.exit_code, 0) << cmp.err_output;
  Json c = parse(cmp);
  ASSERT_EQ(c["changed"].size(), 1u) << c.dump(1);
  EXPECT_EQ(c["changed"][0]["name"], "Chain");
  EXPECT_EQ(c["changed"][0]["change"], "lost");
  EXPECT_EQ(c["summary"]["lost"], 1);
  EXPECT_TRUE(c["setup_differences"].empty());
}

// KernelBench single files (load_inline) are built on every core before any evaluation (issue 56):
// each evaluation then finds its module in the build cache and compiles nothing. A file whose
// load_inline sources are computed is not read ahead: its record says why, and its evaluation builds.
TEST(Bench, SingleFilesAreBuiltAheadSoTheirEvaluationsCompileNothing) {
  test_environment();
  fs::path root = make_temp_dir(fs::temp_directory_path(), "anvil-bench-ahead");
  const fs::path files = kSource + "/examples/kernelbench/cpu";
  // A nonce in the C++ text: sources no earlier run has built.
  std::string nonce = "#include <torch/extension.h>\n// " + root.filename().string() + "\n";
  auto solution = [&](const std::string& name) {
    return replace_all(*read_file(files / name), "#include <torch/extension.h>\n", nonce);
  };
  write(root / "tasks" / "level1" / "1_Add.py", *read_file(files / "add_model.py"));
  write(root / "tasks" / "level1" / "2_FuseGelu.py", *read_file(files / "fuse_gelu_model.py"));
  write(root / "tasks" / "level1" / "3_AddComputed.py", *read_file(files / "add_model.py"));
  write(root / "sol" / "level1" / "1_Add.py", solution("add_model_new.py"));
  write(root / "sol" / "level1" / "2_FuseGelu.py", solution("fuse_gelu_model_new.py"));
  std::string computed = replace_all(solution("add_model_new.py"), "cpp_sources=[cpp_src, source]",
                                     "cpp_sources=[cpp_src, source.replace(\"a[i] + b[i]\", \"b[i] + a[i]\")]");
  ASSERT_NE(computed, solution("add_model_new.py"));
  write(root / "sol" / "level1" / "3_AddComputed.py", computed);
  SubprocessResult r = run_subprocess({ANVIL_BINARY, "bench", "--tasks", (root / "tasks").string(), "--solutions",
                                       (root / "sol").string(), "--out", (root / "run").string(), "--device", "cpu",
                                       "--protocol", "kernelbench", "--compile-mode", "none", "--calls", "3",
                                       "--warmup", "1", "--input-sets", "2", "--trials", "2", "--timeout", "300",
                                       "--no-progress", "--json"},
                                      quick());
  ASSERT_EQ(r.exit_code, 0) << r.describe() << "\n" << r.err_output;
  Json res = parse(r);
  EXPECT_EQ(res["overall"]["outcomes"]["ok"], 3) << res["overall"].dump();
  EXPECT_EQ(res["run"]["prebuild"]["candidates"], 2) << res["run"].dump();
  for (const auto& row : res["tasks"]) {
    Json rec = Json::parse(*read_file(root / "run" / row["record"].get<std::string>()));
    const Json& ahead = rec["build_ahead"];
    const Json& build = rec["eval"]["build"];
    ASSERT_TRUE(ahead.is_object() && build.is_object()) << rec.dump();
    EXPECT_EQ(build["mode"], "load_inline");
    EXPECT_EQ(build["modules"], 1) << build.dump();
    if (rec["name"] == "AddComputed") {
      EXPECT_EQ(ahead["units"], 0) << ahead.dump();
      ASSERT_EQ(ahead["not_ahead"].size(), 1u) << ahead.dump();
      EXPECT_NE(ahead["not_ahead"][0].get<std::string>().find("line "), std::string::npos) << ahead.dump();
      EXPECT_GE(build["compiled"], 1) << "built inside its evaluation: " << build.dump();
    } else {
      EXPECT_EQ(ahead["ok"], true) << ahead.dump();
      EXPECT_EQ(ahead["units"], 1) << ahead.dump();
      EXPECT_EQ(ahead["compiled"], 1) << ahead.dump();
      EXPECT_EQ(build["compiled"], 0) << rec["name"] << " was built again when evaluated: " << build.dump();
    }
  }
  remove_tree(root);
}

TEST(Bench, AKilledRunResumesWithoutEvaluatingAFinishedTaskAgain) {
  test_environment();
  Suite3 s;
  // Three tasks with good solutions, no problems.
  fs::remove(s.tasks / "level1" / "4_Gone.py");
  fs::remove(s.sol / "level1" / "9_Extra.py");
  copy_candidate(kSource + "/examples/candidates/01_elementwise_chain/cpu", s.sol / "level1" / "3_ChainMissing" / "cpu");
  fs::remove_all(s.sol / "level1" / "2_ChainWide");
  copy_candidate(kSource + "/examples/candidates/01_elementwise_chain/cpu", s.sol / "level1" / "2_ChainWide" / "cpu");
  std::vector<std::string> args = s.argv();
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    setpgid(0, 0);
    setenv("ANVIL_CACHE", ANVIL_TEST_CACHE_DIR, 1);
    std::vector<char*> av;
    for (auto& a : args) av.push_back(a.data());
    av.push_back(nullptr);
    int devnull = ::open("/dev/null", O_WRONLY);
    dup2(devnull, 1);
    dup2(devnull, 2);
    execv(av[0], av.data());
    _exit(127);
  }
  // Kill the whole run as soon as its first record is written.
  auto deadline = std::chrono::steady_clock::now() + std::chrono::minutes(5);
  fs::path first;
  while (first.empty() && std::chrono::steady_clock::now() < deadline) {
    std::error_code ec;
    for (const char* r : {"level1/1_ChainSmall.json", "level1/2_ChainWide.json", "level1/3_ChainMissing.json",
                          "level2/1_Chain.json"}) {
      if (fs::exists(s.out / "tasks" / r, ec)) first = s.out / "tasks" / r;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  kill(-pid, SIGKILL);
  int st = 0;
  waitpid(pid, &st, 0);
  ASSERT_FALSE(first.empty()) << "no record within 5 minutes";
  std::error_code ec;
  ASSERT_FALSE(fs::exists(s.out / "results.json", ec)) << "the run finished before it was killed";
  std::string kept = *read_file(first);
  int settled = 0;
  for (const auto& e : fs::recursive_directory_iterator(s.out / "tasks")) settled += e.is_regular_file() ? 1 : 0;
  ASSERT_LT(settled, 4);

  SubprocessResult r = run_subprocess(s.argv({"--resume"}), quick());
  ASSERT_EQ(r.exit_code, 0) << r.describe() << "\n" << r.err_output;
  Json res = parse(r);
  EXPECT_EQ(res["run"]["resumed"], settled);
  EXPECT_EQ(res["run"]["missing"], 0);
  EXPECT_EQ(res["run"]["evaluated"], 4 - settled);
  std::string why;  // every record's verdict, should one not be ok
  for (const auto& e : fs::recursive_directory_iterator(s.out / "tasks")) {
    if (!e.is_regular_file()) continue;
    Json rec = Json::parse(read_file(e.path()).value_or("{}"), nullptr, false);
    why += e.path().filename().string() + ": " + rec.dump().substr(0, 3000) + "\n";
  }
  EXPECT_EQ(res["overall"]["outcomes"]["ok"], 4) << res["overall"].dump() << "\n" << why;
  EXPECT_EQ(*read_file(first), kept);  // the finished task was not evaluated again
}

// The agent in place of solutions: a scripted model (tests/replay_server.py,
// a real HTTP server) writes the bundled CPU solution through the tools in
// every episode; each task's record is its episode's final evaluation.
TEST(Bench, AgentEpisodesAreJudgedPerTaskAndResumeKeepsThem) {
  test_environment();
  Suite3 s;
  fs::remove(s.tasks / "level1" / "4_Gone.py");
  fs::remove_all(s.tasks / "level2");
  fs::remove(s.tasks / "level1" / "3_ChainMissing.py");
  std::string dir = kSource + "/examples/candidates/01_elementwise_chain/cpu/";
  Json writes = Json::array();
  for (const char* f : {"kernels/elementwise_chain.cpp", "kernels/elementwise_chain_binding.cpp", "kernels/parallel.h",
                        "model_new.py"}) {
    writes.push_back({{"name", "write_file"}, {"arguments", {{"path", f}, {"content", *read_file(dir + f)}}}});
  }
  Json turns = Json::array({{{"content", nullptr}, {"tool_calls", writes}},
                            {{"content", nullptr}, {"tool_calls", {{{"name", "compile"}, {"arguments", Json::object()}}}}},
                            {{"content", nullptr}, {"tool_calls", {{{"name", "finish"}, {"arguments", Json::object()}}}}}});
  ReplayServer server({{"turns", turns}}, s.root / "server");
  ASSERT_GT(server.port(), 0);
  write(s.root / "skill.md", "You write kernels.\n");
  std::vector<std::string> args = {ANVIL_BINARY, "bench", "--tasks", s.tasks.string(), "--agent", "--endpoint",
                                   server.url(), "--model", "replay", "--concurrency", "2", "--skill",
                                   (s.root / "skill.md").string(), "--max-tokens", "256", "--out", s.out.string(),
                                   "--device", "cpu", "--compile-mode", "none", "--calls", "3", "--warmup", "1",
                                   "--input-sets", "2", "--trials", "2", "--no-progress", "--json"};
  SubprocessResult r = run_subprocess(args, quick());
  ASSERT_EQ(r.exit_code, 0) << r.describe() << "\n" << r.err_output << "\n" << r.output.substr(0, 4000);
  Json res = parse(r);
  EXPECT_EQ(res["overall"]["tasks"], 2);
  EXPECT_EQ(res["overall"]["outcomes"]["ok"], 2) << res["tasks"].dump(1);
  EXPECT_EQ(res["run"]["agent"]["model"], "replay");
  EXPECT_EQ(res["run"]["evaluated"], 2);
  Json rec = Json::parse(*read_file(s.out / "tasks/level1/2_ChainWide.json"));
  EXPECT_EQ(rec["episode"], "agent/level1/2_ChainWide/sample-0");
  EXPECT_EQ(rec["turns"], 3);
  EXPECT_TRUE(fs::exists(s.out / "agent/level1/2_ChainWide/sample-0/trajectory.json"));
  auto chats = [&] {  // chat requests (the model check before a run is a GET of /v1/models)
    size_t n = 0;
    for (const auto& q : server.requests()) n += q.dump().find("\"messages\"") != std::string::npos ? 1 : 0;
    return n;
  };
  size_t requests = chats();
  EXPECT_EQ(requests, 6u);
  // The model's tokens, as its server counted them: each record's are its trajectory's counters,
  // and the totals their sums. No prices were given: no cost, not a cost of 0.
  long prompt = 0, completion = 0;
  for (const auto& row : res["tasks"]) {
    Json traj = Json::parse(*read_file(s.out / row["episode"].get<std::string>() / "trajectory.json"));
    const Json& c = traj["counters"];
    EXPECT_EQ(row["usage"], (Json{{"turns", 3}, {"reported_turns", 3}, {"prompt_tokens", c["prompt_tokens"]},
                                  {"completion_tokens", c["completion_tokens"]}}))
        << row.dump();
    EXPECT_GT(c["prompt_tokens"].get<long>(), 0);
    prompt += c["prompt_tokens"].get<long>();
    completion += c["completion_tokens"].get<long>();
    EXPECT_TRUE(row["cost_usd"].is_null());
  }
  const Json& u = res["overall"]["usage"];
  EXPECT_EQ(u["episodes"], 2);
  EXPECT_EQ(u["turns"], 6);
  EXPECT_EQ(u["prompt_tokens"], prompt);
  EXPECT_EQ(u["completion_tokens"], completion);
  EXPECT_TRUE(u["cost_usd"].is_null());
  EXPECT_TRUE(res["run"]["pricing"].is_null());
  EXPECT_EQ(res["levels"][0]["metrics"]["usage"], u);
  EXPECT_NE(read_file(s.out / "report.md")->find("| overall | 2 | 6 | 6 | " + std::to_string(prompt) + " | " +
                                                 std::to_string(completion) + " |\n"),
            std::string::npos);
  // Prices given afterwards price the same tokens, and stay with the run.
  SubprocessResult rep = run_subprocess(
      {ANVIL_BINARY, "bench", "report", s.out.string(), "--price-input", "3", "--price-output", "15", "--json"}, quick());
  ASSERT_EQ(rep.exit_code, 0) << rep.err_output;
  Json priced = parse(rep);
  EXPECT_EQ(priced["run"]["pricing"], (Json{{"input_usd_per_mtok", 3.0}, {"output_usd_per_mtok", 15.0}}));
  EXPECT_NEAR(priced["overall"]["usage"]["cost_usd"].get<double>(), (prompt * 3.0 + completion * 15.0) / 1e6, 1e-12);
  args.push_back("--resume");
  SubprocessResult again = run_subprocess(args, quick());
  ASSERT_EQ(again.exit_code, 0) << again.err_output;
  Json aj = parse(again);
  EXPECT_EQ(aj["run"]["evaluated"], 0);
  EXPECT_EQ(chats(), requests);  // no episode ran again
  EXPECT_EQ(aj["overall"]["usage"], priced["overall"]["usage"]);  // the prices kept, the tokens not counted twice
}

// The bundled examples as a suite (a flat folder) against their CPU candidates: the
// run a new user makes first, and what the GPU host runs with the CUDA ones.
TEST(Bench, BundledExamplesCpuVariantsAllPass) {
  test_environment();
  fs::path out = make_temp_dir(fs::temp_directory_path(), "anvil-bench-examples");
  fs::path run = out / "run";
  SubprocessResult r = run_subprocess({ANVIL_BINARY, "bench", "--tasks", kSource + "/examples/tasks", "--solutions",
                                       kSource + "/examples/candidates", "--variant", "cpu", "--device", "cpu",
                                       "--compile-mode", "none", "--calls", "3", "--warmup", "1", "--input-sets", "2",
                                       "--trials", "2", "--out", run.string(), "--no-progress", "--json"},
                                      quick());
  ASSERT_EQ(r.exit_code, 0) << r.describe() << "\n" << r.err_output;
  Json res = parse(r);
  const Json& all = res["overall"];
  EXPECT_EQ(all["tasks"], 6);
  EXPECT_EQ(all["outcomes"]["ok"], 6) << all.dump();
  EXPECT_DOUBLE_EQ(all["pass_rate"].get<double>(), 1.0);
  EXPECT_GE(all["mean_reward"].get<double>(), 1.0);
  for (const char* kind : {"missing", "extra", "unreadable", "not_evaluated"})
    EXPECT_TRUE(res["problems"][kind].empty()) << kind << ": " << res["problems"].dump();
  ASSERT_EQ(res["tasks"].size(), 6u);
  for (const auto& row : res["tasks"]) {
    EXPECT_EQ(row["outcome"], "ok") << row.dump();
    Json rec = Json::parse(*read_file(run / row["record"].get<std::string>()));
    EXPECT_TRUE(ends_with(rec["solution"].get<std::string>(), "/cpu")) << rec["solution"];
    EXPECT_GT(rec["speedup_eager"].get<double>(), 0.0) << row.dump();
  }
  auto html = read_file(run / "report.html");
  ASSERT_TRUE(html);
  EXPECT_NE(html->find("<svg"), std::string::npos);
  // By kernel family too, the family found from each task's ops (python -m anvil.family).
  std::map<std::string, long> families;
  for (const auto& f : res["families"]) families[f["family"].get<std::string>()] = f["metrics"]["tasks"].get<long>();
  EXPECT_EQ(families, (std::map<std::string, long>{{"GEMM", 2}, {"convolution", 1}, {"elementwise/activation", 1},
                                                   {"reduction/normalization", 2}}))
      << res["families"].dump();
  EXPECT_EQ(res["tasks"][3]["family"], "GEMM") << res["tasks"][3].dump();  // 04_gemm_bias_relu
  auto md = read_file(run / "report.md");
  ASSERT_TRUE(md);
  EXPECT_NE(md->find("## By kernel family"), std::string::npos);
  EXPECT_NE(md->find("| GEMM | 2 | 100.0% |"), std::string::npos) << *md;
  EXPECT_NE(html->find("<h2>By kernel family</h2>"), std::string::npos);
  remove_tree(out);
}

TEST(Bench, UsageErrorsAreOneClearLine) {
  SubprocessResult r = run_subprocess({ANVIL_BINARY, "bench", "--tasks", kSource + "/examples/tasks"}, quick());
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err_output.find("give one of --solutions DIR or --agent"), std::string::npos) << r.err_output;
  r = run_subprocess({ANVIL_BINARY, "bench", "report", "/nonexistent-run"}, quick());
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err_output.find("not a benchmark run"), std::string::npos) << r.err_output;
  r = run_subprocess({ANVIL_BINARY, "bench", "--tasks", "/nonexistent-tasks", "--solutions", "/tmp"}, quick());
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err_output.find("/nonexistent-tasks: no such file or folder"), std::string::npos) << r.err_output;
  r = run_subprocess({ANVIL_BINARY, "bench", "--tasks", "/nonexistent-tasks", "--solutions", "/tmp", "--overlap", "0"},
                     quick());
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err_output.find("--overlap: Value 0 not in range 1 to 16"), std::string::npos) << r.err_output;
}

// A command that throws (here compare, on a results.json of the right schema and the wrong shape)
// ends with one line and exit 2, never std::terminate's abort (exit 134 at d62ad83).
TEST(Bench, ACommandThatThrowsExitsTwoWithOneLine) {
  fs::path dir = make_temp_dir(fs::temp_directory_path(), "anvil-bench-shape");
  std::string err;
  for (const char* run : {"a", "b"}) {
    ASSERT_TRUE(write_file_atomic(dir / run / "results.json", "{\"schema\": \"anvil.bench/1\", \"tasks\": 5}\n", &err)) << err;
  }
  SubprocessResult r =
      run_subprocess({ANVIL_BINARY, "bench", "compare", (dir / "a").string(), (dir / "b").string()}, quick());
  EXPECT_EQ(r.signal, 0) << r.err_output;
  EXPECT_EQ(r.exit_code, 2) << r.err_output;
  EXPECT_EQ(r.err_output.rfind("anvil bench: internal error: ", 0), 0u) << r.err_output;
  remove_tree(dir);
}

// A bad price is refused by name before any model is asked anything (the endpoint is never reached).
TEST(Bench, PricesAreCheckedBeforeTheRun) {
  std::vector<std::string> base = {ANVIL_BINARY, "bench", "--tasks", kSource + "/examples/tasks", "--agent",
                                   "--endpoint", "http://127.0.0.1:9/v1", "--model", "m", "--out", "/nonexistent-out"};
  auto refused = [&](std::vector<std::string> extra, const std::string& why) {
    std::vector<std::string> a = base;
    a.insert(a.end(), extra.begin(), extra.end());
    SubprocessResult r = run_subprocess(a, quick());
    EXPECT_EQ(r.exit_code, 2) << r.err_output;
    EXPECT_NE(r.err_output.find(why), std::string::npos) << r.err_output;
    EXPECT_EQ(r.err_output.find("127.0.0.1:9"), std::string::npos) << "the endpoint was tried: " << r.err_output;
  };
  refused({"--price-input=-1", "--price-output", "1"},
          "anvil bench: --price-input -1: a price cannot be negative (USD per million tokens, e.g. 3 or 0.15)");
  refused({"--price-input", "1", "--price-output", "abc"},
          "anvil bench: --price-output 'abc': not a number (USD per million tokens, e.g. 3 or 0.15)");
  refused({"--price-input", "1"}, "anvil bench: --price-input given without --price-output: give both");
  refused({"--price-output", "1"}, "anvil bench: --price-output given without --price-input: give both");
  SubprocessResult r = run_subprocess({ANVIL_BINARY, "bench", "--tasks", kSource + "/examples/tasks", "--solutions",
                                       kSource + "/examples/candidates", "--price-input", "1", "--price-output", "2"},
                                      quick());
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err_output.find("price the agent's tokens: give them with --agent"), std::string::npos) << r.err_output;
}

}  // namespace
}  // namespace anvil
