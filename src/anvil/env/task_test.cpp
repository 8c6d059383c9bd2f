// Tests of task naming and loading: FILE, DATASET#ROW (JSONL here; Parquet
// through the Python layer), and the exact task_error messages.
#include "anvil/env/task.h"

#include <gtest/gtest.h>

#include "support/test_env.h"
#include "anvil/env/workdir.h"

#include <cstdlib>

#include "anvil/util/fs.h"
#include "anvil/util/subprocess.h"

namespace anvil {
namespace {

class TaskTest : public ::testing::Test {
 protected:
  static Environment& env() { return test_environment(); }
  void SetUp() override {
    env();  // ANVIL_CACHE set before any `anvil` this test starts: its records are where env() reads
    dir_ = make_temp_dir(fs::temp_directory_path(), "anvil-task-test");
  }
  void TearDown() override { remove_tree(dir_); }
  std::string path(const std::string& rel) { return (dir_ / rel).string(); }
  void write(const std::string& rel, const std::string& text) {
    std::string e;
    ASSERT_TRUE(write_file_atomic(dir_ / rel, text, &e)) << e;
  }
  std::string load_error(const std::string& spec) {
    std::string err;
    EXPECT_FALSE(load_task(env(), spec, &err).has_value());
    return err;
  }
  fs::path dir_;
};

TEST_F(TaskTest, File) {
  write("7_Tiny.py", "class Model: pass\n");
  std::string err;
  auto t = load_task(env(), path("7_Tiny.py"), &err);
  ASSERT_TRUE(t) << err;
  EXPECT_EQ(t->name, "7_Tiny");
  EXPECT_EQ(t->code, "class Model: pass\n");
  EXPECT_EQ(t->hash.size(), 64u);
  EXPECT_EQ(load_error(path("missing.py")), "task file " + path("missing.py") + " does not exist");
}

TEST_F(TaskTest, JsonlRows) {
  write("ops.jsonl",
        "{\"ops\": [\"nn.ReLU\"], \"data_source\": \"torch#1\", \"code\": \"A\"}\n"
        "\n"
        "{\"ops\": [\"nn.GELU\", \"nn.Linear\"], \"data_source\": \"torch#2\", \"code\": \"B\"}\n"
        "{\"ops\": [], \"data_source\": \"x\"}\n"
        "{not json\n");
  std::string err;
  auto t = load_task(env(), path("ops.jsonl") + "#1", &err);
  ASSERT_TRUE(t) << err;
  EXPECT_EQ(t->code, "B");
  EXPECT_EQ(t->name, "ops.jsonl#1");
  EXPECT_EQ(t->meta["data_source"], "torch#2");
  EXPECT_EQ(t->meta["ops"][1], "nn.Linear");
  EXPECT_EQ(load_error(path("ops.jsonl") + "#2"), path("ops.jsonl") + " line 4: row has no string column 'code'");
  std::string malformed = load_error(path("ops.jsonl") + "#3");  // the JSONL's line, the row's column, once
  EXPECT_NE(malformed.find(path("ops.jsonl") + " line 5, column 3: malformed JSON: syntax error"), std::string::npos)
      << malformed;
  EXPECT_EQ(malformed.find("json.exception"), std::string::npos) << malformed;
  EXPECT_EQ(malformed.find("line 1"), std::string::npos) << malformed;
  EXPECT_EQ(task_name_of(path("ops.jsonl") + "#3"), "ops.jsonl#3");
  EXPECT_EQ(task_name_of("tasks/01_softmax.py"), "01_softmax");
  EXPECT_EQ(load_error(path("ops.jsonl") + "#9"), "dataset " + path("ops.jsonl") + " has 4 rows; row 9 does not exist");
  EXPECT_EQ(load_error(path("ops.jsonl") + "#x"),
            "task " + path("ops.jsonl") + "#x: row 'x' is not a non-negative integer (name a dataset row as DATASET#ROW)");
  EXPECT_EQ(load_error(path("ops.jsonl")), "task " + path("ops.jsonl") + " is a dataset: name one row as " +
                                               path("ops.jsonl") + "#ROW");
}

TEST_F(TaskTest, ParquetRowThroughPython) {
  ASSERT_TRUE(env().torch.present) << env().probe_error;
  SubprocessResult r = run_subprocess(
      {env().python.string(), "-c",
       "import pyarrow as pa, pyarrow.parquet as pq, sys; pq.write_table(pa.table({'ops': [['nn.ReLU'], ['nn.Tanh']], "
       "'data_source': ['torch#1', 'torch#1'], 'code': ['first', 'second']}), sys.argv[1])",
       path("ops.parquet")});
  ASSERT_TRUE(r.ok()) << r.output;
  std::string err;
  auto t = load_task(env(), path("ops.parquet") + "#1", &err);
  ASSERT_TRUE(t) << err;
  EXPECT_EQ(t->code, "second");
  EXPECT_NE(load_error(path("ops.parquet") + "#5").find("out of range"), std::string::npos);
}

TEST_F(TaskTest, ProbeReportsTaskErrors) {
  ASSERT_TRUE(env().torch.present) << env().probe_error;
  write("no_inputs.py", "import torch.nn as nn\nclass Model(nn.Module):\n    def forward(self, x): return x\n"
                        "def get_init_inputs(): return []\n");
  std::string err;
  auto t = load_task(env(), path("no_inputs.py"), &err);
  ASSERT_TRUE(t);
  nlohmann::json probe = probe_task(env(), *t);
  EXPECT_FALSE(probe.value("ok", true));
  EXPECT_EQ(probe["outcome"], "task_error");
  EXPECT_NE(probe["cause"].get<std::string>().find("get_inputs"), std::string::npos) << probe.dump();
}

TEST_F(TaskTest, InitCreatesAReadyWorkdir) {
  SubprocessResult r = run_subprocess({ANVIL_BINARY, "init", "--task",
                                       std::string(ANVIL_SOURCE_DIR) + "/examples/tasks/02_softmax.py", path("w")});
  ASSERT_TRUE(r.ok()) << r.output;
  for (const char* f : {"model.py", "model_new.py", "binding.cpp", "binding_registry.h", "anvil/binding.h"}) {
    EXPECT_TRUE(fs::exists(dir_ / "w" / f)) << f;
  }
  EXPECT_TRUE(fs::is_directory(dir_ / "w" / "kernels"));
  auto perms = fs::status(dir_ / "w" / "model.py").permissions();
  EXPECT_EQ(perms & fs::perms::owner_write, fs::perms::none) << "model.py must be read-only";
  EXPECT_NE(read_file(dir_ / "w" / "model_new.py")->find("class ModelNew(nn.Module):"), std::string::npos);
  // A starter kernel and its binding, so that `anvil build` works next (the CPU one without a GPU).
  std::string kind = env().gpus.empty() ? ".cpp" : ".cu";
  EXPECT_TRUE(fs::exists(dir_ / "w" / "kernels" / ("scale_shift" + kind)));
  EXPECT_TRUE(fs::exists(dir_ / "w" / "kernels" / "scale_shift_binding.cpp"));
  EXPECT_NE(r.output.find("anvil eval --candidate"), std::string::npos) << r.output;
  // The workdir names its task for `anvil eval --candidate w` (an absolute path, from any directory).
  std::string err;
  auto task = workdir_task(env(), dir_ / "w", &err);
  ASSERT_TRUE(task) << err;
  EXPECT_EQ(*task, fs::absolute(std::string(ANVIL_SOURCE_DIR) + "/examples/tasks/02_softmax.py").lexically_normal().string());
  EXPECT_FALSE(workdir_task(env(), dir_, &err));
  EXPECT_NE(err.find("name the task with --task"), std::string::npos) << err;
  // The workdir's own copy carries no authority (issue 55): the agent's shell, which owns the workdir,
  // replaced it to have `anvil eval --candidate w` judge against a task of its own, run as root.
  fs::remove(dir_ / "w" / ".anvil-task.json");
  write("w/.anvil-task.json", R"({"path": "/tmp/attacker_task.py"})");
  task = workdir_task(env(), dir_ / "w", &err);
  ASSERT_TRUE(task) << err;
  EXPECT_EQ(*task, fs::absolute(std::string(ANVIL_SOURCE_DIR) + "/examples/tasks/02_softmax.py").lexically_normal().string());
  fs::create_directories(dir_ / "copied");
  fs::copy_file(dir_ / "w" / ".anvil-task.json", dir_ / "copied" / ".anvil-task.json");
  EXPECT_FALSE(workdir_task(env(), dir_ / "copied", &err));  // a workdir anvil never made: --task needed
  EXPECT_NE(err.find("is not read"), std::string::npos) << err;
  // A second init into the same directory is refused without --force.
  SubprocessResult again = run_subprocess({ANVIL_BINARY, "init", "--task",
                                           std::string(ANVIL_SOURCE_DIR) + "/examples/tasks/02_softmax.py", path("w")});
  EXPECT_EQ(again.exit_code, 2);
  EXPECT_NE(again.output.find("exists and is not empty"), std::string::npos);
  // A broken task is a task_error (exit 1) that names the file and the cause.
  write("broken.py", "import torch\nraise ValueError('boom')\n");
  SubprocessResult bad = run_subprocess({ANVIL_BINARY, "init", "--task", path("broken.py"), path("w2")});
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_NE(bad.output.find("task_error: " + path("broken.py")), std::string::npos) << bad.output;
  EXPECT_NE(bad.output.find("ValueError: boom"), std::string::npos) << bad.output;
  EXPECT_FALSE(fs::exists(dir_ / "w2"));
}

}  // namespace
}  // namespace anvil
