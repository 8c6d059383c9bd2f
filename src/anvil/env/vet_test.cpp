// Tests of task vetting: vet_task on the bundled examples/vet tasks (each gets
// exactly its flag), the report cache, broken tasks, `anvil vet`'s exit status,
// and how a target (DIR, DATASET) is expanded into tasks. On the CPU.
#include "anvil/env/vet.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>

#include "support/test_env.h"
#include "anvil/util/fs.h"
#include "anvil/util/strings.h"
#include "anvil/util/subprocess.h"

namespace anvil {
namespace {

const std::string kSource = ANVIL_SOURCE_DIR;

class VetTest : public ::testing::Test {
 protected:
  static Environment& env() { return test_environment(); }
  void SetUp() override {
    ASSERT_TRUE(env().torch.present) << env().probe_error;
    dir_ = make_temp_dir(fs::temp_directory_path(), "anvil-vet-test");
  }
  void TearDown() override { remove_tree(dir_); }

  static VetOptions options() {
    VetOptions o;
    o.device = Device::Cpu;
    o.timeout = std::chrono::seconds(300);
    return o;
  }
  static Task task(const std::string& spec) {
    std::string err;
    auto t = load_task(env(), spec, &err);
    EXPECT_TRUE(t) << err;
    return t.value_or(Task{});
  }
  std::string write(const std::string& rel, const std::string& text) {
    std::string e;
    EXPECT_TRUE(write_file_atomic(dir_ / rel, text, &e)) << e;
    return (dir_ / rel).string();
  }
  fs::path dir_;
};

// A healthy task whose source is unique to this run, so the cache starts empty for it.
std::string unique_healthy_task() {
  std::string text = *read_file(kSource + "/examples/vet/healthy.py");
  auto now = std::chrono::system_clock::now().time_since_epoch().count();
  return text + "# run " + std::to_string(now) + " " + std::to_string(::getpid()) + "\n";
}

TEST_F(VetTest, ExamplesGetExactlyTheirFlag) {
  const std::vector<std::pair<std::string, std::string>> cases = {{"zero_output", "zero_output"},
                                                                  {"tiny_output", "tiny_output"},
                                                                  {"constant_output", "constant_output"},
                                                                  {"identity_relu", "equals_input"},
                                                                  {"input_independent", "input_independent"}};
  for (const auto& [example, flag] : cases) {
    VetResult r = vet_task(env(), task(kSource + "/examples/vet/" + example + ".py"), options());
    ASSERT_TRUE(r.ok) << example << ": " << r.error;
    EXPECT_TRUE(r.flagged()) << example;
    EXPECT_EQ(r.flags(), std::vector<std::string>{flag}) << r.report.dump(2);
    EXPECT_EQ(r.report["protocol"], "anvil.vet/1");
    EXPECT_EQ(r.report["flags"][0]["distributions"][0], "task");
    EXPECT_FALSE(r.report["flags"][0].value("detail", std::string()).empty());
  }
  VetResult healthy = vet_task(env(), task(kSource + "/examples/vet/healthy.py"), options());
  ASSERT_TRUE(healthy.ok) << healthy.error;
  EXPECT_FALSE(healthy.flagged()) << healthy.report.dump(2);
  EXPECT_TRUE(healthy.report["notes"].empty()) << healthy.report.dump(2);
  EXPECT_EQ(healthy.report["outputs"][0]["shape"], nlohmann::json({32, 48}));
}

TEST_F(VetTest, ReportsAreCached) {
  Task t = task(write("healthy_unique.py", unique_healthy_task()));
  VetOptions o = options();
  fs::path entry = env().cache / "vet" / (vet_key(env(), t, o) + ".json");
  EXPECT_FALSE(fs::exists(entry));
  VetResult first = vet_task(env(), t, o);
  ASSERT_TRUE(first.ok) << first.error;
  EXPECT_FALSE(first.cached);
  EXPECT_TRUE(fs::exists(entry));
  VetResult second = vet_task(env(), t, o);
  ASSERT_TRUE(second.ok) << second.error;
  EXPECT_TRUE(second.cached);
  EXPECT_EQ(second.report, first.report);
  // Another tolerance, seed or device is another entry; use_cache=false vets again.
  VetOptions paper = o;
  paper.preset = "paper";
  VetOptions seed = o;
  seed.seed = 5;
  VetOptions cuda = o;
  cuda.device = Device::Cuda;
  EXPECT_NE(vet_key(env(), t, paper), vet_key(env(), t, o));
  EXPECT_NE(vet_key(env(), t, seed), vet_key(env(), t, o));
  EXPECT_NE(vet_key(env(), t, cuda), vet_key(env(), t, o));
  VetOptions fresh = o;
  fresh.use_cache = false;
  VetResult third = vet_task(env(), t, fresh);
  ASSERT_TRUE(third.ok) << third.error;
  EXPECT_FALSE(third.cached);
  // A corrupt entry is ignored (and replaced).
  std::string e;
  ASSERT_TRUE(write_file_atomic(entry, "{not json", &e)) << e;
  VetResult fourth = vet_task(env(), t, o);
  ASSERT_TRUE(fourth.ok) << fourth.error;
  EXPECT_FALSE(fourth.cached);
  EXPECT_TRUE(vet_task(env(), t, o).cached);
}

TEST_F(VetTest, BrokenTaskIsAnErrorNamingTheTask) {
  std::string path = write("broken.py", "import torch\nraise ValueError('boom')\n");
  Task t = task(path);
  VetResult r = vet_task(env(), t, options());
  EXPECT_FALSE(r.ok);
  EXPECT_FALSE(r.cached);
  EXPECT_EQ(r.error, path + ": importing the task raised ValueError: boom");
  EXPECT_EQ(r.report["status"], "error");
  EXPECT_NE(r.report["detail"].get<std::string>().find("ValueError: boom"), std::string::npos);
  EXPECT_FALSE(fs::exists(env().cache / "vet" / (vet_key(env(), t, options()) + ".json")));  // errors are not cached
  // A dataset row is named DATASET#ROW.
  nlohmann::json line = {{"ops", {"x"}}, {"data_source", "t"}, {"code", "raise SystemExit(3)\n"}};
  std::string ds = write("ops.jsonl", line.dump() + "\n");
  VetResult row = vet_task(env(), task(ds + "#0"), options());
  EXPECT_FALSE(row.ok);
  EXPECT_EQ(row.error.rfind(ds + "#0: importing the task raised SystemExit", 0), 0u) << row.error;
}

// Forked from the warm zygote or started fresh, a vetting gives the same report, and a broken task
// the same error naming the task.
TEST_F(VetTest, ZygoteAndFreshProcessAgree) {
  Task identity = task(kSource + "/examples/vet/identity_relu.py");
  Task broken = task(write("broken_both.py", "import torch\nraise ValueError('boom')\n"));
  nlohmann::json reports[2];
  int k = 0;
  for (const char* zygote : {"none", "auto"}) {
    VetOptions o = options();
    o.use_cache = false;
    o.zygote = zygote;
    VetResult r = vet_task(env(), identity, o);
    ASSERT_TRUE(r.ok) << zygote << ": " << r.error;
    EXPECT_FALSE(r.memory_limited);
    r.report.erase("seconds");
    reports[k++] = r.report;
    VetResult b = vet_task(env(), broken, o);
    EXPECT_FALSE(b.ok);
    EXPECT_EQ(b.error, broken.spec + ": importing the task raised ValueError: boom") << zygote;
  }
  EXPECT_EQ(reports[0], reports[1]);
  EXPECT_EQ(reports[0]["flags"][0]["flag"], "equals_input");
}

TEST_F(VetTest, BadOptionsAreErrors) {
  Task t = task(kSource + "/examples/vet/healthy.py");
  VetOptions o = options();
  o.preset = "loose";
  EXPECT_EQ(vet_task(env(), t, o).error, "unknown tolerance preset 'loose' (use strict, paper, kernelbench)");
  o = options();
  o.device = Device::Cuda;
  Environment no_gpu = env();
  no_gpu.gpus.clear();
  EXPECT_NE(vet_task(no_gpu, t, o).error.find("no GPU found"), std::string::npos);
}

TEST_F(VetTest, TimeoutIsAnError) {
  std::string path = write("hang.py", "import time\ntime.sleep(60)\n");
  VetOptions o = options();
  o.timeout = std::chrono::seconds(3);
  VetResult r = vet_task(env(), task(path), o);
  EXPECT_FALSE(r.ok);
  EXPECT_NE(r.error.find("did not finish within 3 s"), std::string::npos) << r.error;
}

TEST_F(VetTest, CommandExitStatus) {
  std::string examples = kSource + "/examples/vet";
  SubprocessResult all = run_subprocess({ANVIL_BINARY, "vet", "--device", "cpu", "--json", examples});
  EXPECT_EQ(all.exit_code, 1) << all.output;
  auto j = nlohmann::json::parse(all.output);
  EXPECT_EQ(j["summary"]["tasks"], 6);
  EXPECT_EQ(j["summary"]["ok"], 1);
  EXPECT_EQ(j["summary"]["flagged"], 5);
  EXPECT_EQ(j["summary"]["errors"], 0);
  EXPECT_EQ(j["tasks"][1]["spec"], examples + "/healthy.py");
  EXPECT_EQ(j["tasks"][1]["status"], "ok");
  EXPECT_EQ(j["tasks"][5]["flags"], nlohmann::json({"zero_output"}));
  // Vetted three at a time: the same verdicts, in the same order.
  SubprocessResult par =
      run_subprocess({ANVIL_BINARY, "vet", "--device", "cpu", "--json", "--jobs", "3", "--no-cache", examples});
  EXPECT_EQ(par.exit_code, 1) << par.output;
  auto pj = nlohmann::json::parse(par.output);
  ASSERT_EQ(pj["tasks"].size(), j["tasks"].size());
  for (size_t i = 0; i < j["tasks"].size(); ++i) {
    EXPECT_EQ(pj["tasks"][i]["spec"], j["tasks"][i]["spec"]);
    EXPECT_EQ(pj["tasks"][i]["status"], j["tasks"][i]["status"]);
    EXPECT_EQ(pj["tasks"][i]["flags"], j["tasks"][i]["flags"]);
    // Each vetting process's wall time (--no-cache: each ran), at least its own time inside.
    EXPECT_GE(pj["tasks"][i]["seconds"].get<double>(), pj["tasks"][i]["report"]["seconds"].get<double>());
    // When it ran: its window holds the process's wall time.
    double began = pj["tasks"][i]["started_s"].get<double>(), ended = pj["tasks"][i]["ended_s"].get<double>();
    EXPECT_GE(began, 0);
    EXPECT_GE(ended - began + 0.002, pj["tasks"][i]["seconds"].get<double>());
  }
  SubprocessResult lines = run_subprocess({ANVIL_BINARY, "vet", "--device", "cpu", "--jobs", "4", examples});
  std::vector<std::string> order;
  for (const auto& line : split_lines(lines.output)) {
    if (!line.empty() && line[0] != ' ' && line.find(".py: ") != std::string::npos) order.push_back(line.substr(0, line.find(':')));
  }
  EXPECT_EQ(order, (std::vector<std::string>{"constant_output.py", "healthy.py", "identity_relu.py",
                                             "input_independent.py", "tiny_output.py", "zero_output.py"}))
      << lines.output;
  SubprocessResult nojobs = run_subprocess({ANVIL_BINARY, "vet", "--device", "cpu", "--jobs", "0", examples});
  EXPECT_EQ(nojobs.exit_code, 2) << nojobs.output;

  SubprocessResult healthy = run_subprocess({ANVIL_BINARY, "vet", "--device", "cpu", examples + "/healthy.py"});
  EXPECT_EQ(healthy.exit_code, 0) << healthy.output;
  EXPECT_NE(healthy.output.find("healthy: ok"), std::string::npos) << healthy.output;

  SubprocessResult zero = run_subprocess({ANVIL_BINARY, "vet", "--device", "cpu", examples + "/zero_output.py"});
  EXPECT_EQ(zero.exit_code, 1) << zero.output;
  EXPECT_NE(zero.output.find("zero_output: flagged: zero_output"), std::string::npos) << zero.output;
  EXPECT_NE(zero.output.find("  zero_output [task, signed]: every element"), std::string::npos) << zero.output;

  std::string broken = write("broken.py", "raise ValueError('boom')\n");
  SubprocessResult bad = run_subprocess({ANVIL_BINARY, "vet", "--device", "cpu", broken});
  EXPECT_EQ(bad.exit_code, 2) << bad.output;
  EXPECT_NE(bad.output.find("broken: error: " + broken + ": importing the task raised ValueError: boom"),
            std::string::npos)
      << bad.output;
  EXPECT_NE(bad.output.find("0 ok, 0 flagged, 1 error"), std::string::npos) << bad.output;

  SubprocessResult usage = run_subprocess({ANVIL_BINARY, "vet", "--preset", "loose", broken});
  EXPECT_EQ(usage.exit_code, 2);
  EXPECT_NE(usage.output.find("unknown tolerance preset 'loose'"), std::string::npos) << usage.output;
}

class VetTargets : public VetTest {};

TEST_F(VetTargets, DirectoryInNaturalOrder) {
  for (const char* f : {"level1/10_b.py", "level1/2_a.py", "level1/1_c.py", "level2/1_d.py", "level1/notes.md",
                        "level1/__pycache__/x.py", ".hidden/y.py"}) {
    std::error_code ec;
    fs::create_directories((dir_ / f).parent_path(), ec);
    write(f, "");
  }
  std::string err;
  auto specs = list_tasks(env(), dir_.string(), &err);
  ASSERT_TRUE(specs) << err;
  std::vector<std::string> rel;
  for (const auto& s : *specs) rel.push_back(fs::path(s).lexically_relative(dir_).string());
  EXPECT_EQ(rel, (std::vector<std::string>{"level1/1_c.py", "level1/2_a.py", "level1/10_b.py", "level2/1_d.py"}));
  EXPECT_TRUE(natural_less("level1/9_x.py", "level1/10_x.py"));
  EXPECT_FALSE(natural_less("level1/10_x.py", "level1/9_x.py"));
  EXPECT_TRUE(natural_less("a", "ab"));

  std::error_code ec;
  fs::create_directories(dir_ / "empty", ec);
  EXPECT_FALSE(list_tasks(env(), (dir_ / "empty").string(), &err));
  EXPECT_EQ(err, "no task files (*.py) under " + (dir_ / "empty").string());
}

TEST_F(VetTargets, DatasetRowsAndSingleTasks) {
  std::string ds = write("ops.jsonl", "{\"code\": \"a\"}\n\n{\"code\": \"b\"}\n  \n{\"code\": \"c\"}\n");
  std::string err;
  auto specs = list_tasks(env(), ds, &err);
  ASSERT_TRUE(specs) << err;
  EXPECT_EQ(*specs, (std::vector<std::string>{ds + "#0", ds + "#1", ds + "#2"}));
  EXPECT_EQ(count_dataset_rows(env(), ds, &err).value_or(-1), 3);
  EXPECT_EQ(*list_tasks(env(), ds + "#1", &err), std::vector<std::string>{ds + "#1"});
  EXPECT_EQ(*list_tasks(env(), "some/task.py", &err), std::vector<std::string>{"some/task.py"});
  EXPECT_FALSE(count_dataset_rows(env(), (dir_ / "missing.jsonl").string(), &err));
  EXPECT_EQ(err, "dataset " + (dir_ / "missing.jsonl").string() + " does not exist");
  std::string empty = write("empty.jsonl", "\n");
  EXPECT_FALSE(list_tasks(env(), empty, &err));
  EXPECT_EQ(err, "dataset " + empty + " has no rows");
}

TEST_F(VetTargets, ParquetRowsThroughPython) {
  std::string path = (dir_ / "ops.parquet").string();
  SubprocessResult r = run_subprocess(
      {env().python.string(), "-c",
       "import pyarrow as pa, pyarrow.parquet as pq, sys; pq.write_table(pa.table({'ops': [['a'], ['b']], "
       "'data_source': ['x', 'y'], 'code': ['first', 'second']}), sys.argv[1])",
       path});
  ASSERT_TRUE(r.ok()) << r.output;
  std::string err;
  auto specs = list_tasks(env(), path, &err);
  ASSERT_TRUE(specs) << err;
  EXPECT_EQ(*specs, (std::vector<std::string>{path + "#0", path + "#1"}));
}

}  // namespace
}  // namespace anvil
