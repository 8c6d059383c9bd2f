// suite_test.cpp: discovering tasks and matching solutions (names and files only).
#include "anvil/bench/suite.h"

#include <gtest/gtest.h>

#include "support/test_env.h"
#include "anvil/util/fs.h"

namespace anvil {
namespace {

struct TempDir {
  fs::path path = make_temp_dir(fs::temp_directory_path(), "anvil-suite-test");
  ~TempDir() { remove_tree(path); }
};

void touch(const fs::path& p, const std::string& text = "# task\n") {
  std::string err;
  ASSERT_TRUE(write_file_atomic(p, text, &err)) << err;
}

std::string reasons(const std::vector<SuiteProblem>& v) {
  std::string s;
  for (const auto& p : v) s += p.path + ": " + p.reason + "\n";
  return s;
}

TEST(Suite, LevelFoldersInNaturalOrderWithIdsAndNames) {
  TempDir d;
  touch(d.path / "level2" / "1_Conv2D_ReLU.py");
  touch(d.path / "level1" / "10_Tanh.py");
  touch(d.path / "level1" / "2_Matmul.py");
  touch(d.path / "level1" / "README.md", "notes");  // not a task file: ignored
  std::string err;
  auto s = discover_suite(test_environment(), d.path.string(), &err);
  ASSERT_TRUE(s) << err;
  ASSERT_EQ(s->tasks.size(), 3u);
  EXPECT_EQ(s->tasks[0].key(), "level1/2_Matmul");
  EXPECT_EQ(s->tasks[0].id, 2);
  EXPECT_EQ(s->tasks[0].name, "Matmul");
  EXPECT_EQ(s->tasks[1].key(), "level1/10_Tanh");
  EXPECT_EQ(s->tasks[2].key(), "level2/1_Conv2D_ReLU");
  EXPECT_EQ(s->levels(), (std::vector<std::string>{"level1", "level2"}));
  EXPECT_TRUE(s->unreadable.empty()) << reasons(s->unreadable);
}

TEST(Suite, UnusableTaskFilesAreListedWithTheReasonAndTheRestKept) {
  TempDir d;
  touch(d.path / "level1" / "1_ReLU.py");
  touch(d.path / "level1" / "helper.py");          // not <id>_<Name>.py
  touch(d.path / "level1" / "01_Again.py");        // id 1 again
  touch(d.path / "level1" / "3_Empty.py", "");     // empty
  fs::create_symlink(d.path / "nowhere.py", d.path / "level1" / "4_Gone.py");
  std::string err;
  auto s = discover_suite(test_environment(), d.path.string(), &err);
  ASSERT_TRUE(s) << err;
  ASSERT_EQ(s->tasks.size(), 1u);
  EXPECT_EQ(s->tasks[0].stem, "01_Again");  // natural order: 01 before 1, the first one kept
  std::string r = reasons(s->unreadable);
  EXPECT_NE(r.find("helper.py: the name is not <id>_<Name>.py"), std::string::npos) << r;
  EXPECT_NE(r.find("1_ReLU.py: id 1 repeats 01_Again.py"), std::string::npos) << r;
  EXPECT_NE(r.find("3_Empty.py: empty"), std::string::npos) << r;
  EXPECT_NE(r.find("4_Gone.py: a broken symbolic link"), std::string::npos) << r;
  EXPECT_EQ(s->unreadable.size(), 4u) << r;
}

TEST(Suite, FlatFolderIsOneLevelNamedAfterIt) {
  std::string err;
  auto s = discover_suite(test_environment(), std::string(ANVIL_SOURCE_DIR) + "/examples/tasks", &err);
  ASSERT_TRUE(s) << err;
  ASSERT_EQ(s->tasks.size(), 6u);
  EXPECT_EQ(s->tasks[0].key(), "tasks/01_elementwise_chain");
  EXPECT_EQ(s->tasks[0].id, 1);
  EXPECT_EQ(s->tasks[5].name, "mlp_block");
}

TEST(Suite, MissingOrEmptyTargetsAreErrors) {
  TempDir d;
  std::string err;
  EXPECT_FALSE(discover_suite(test_environment(), (d.path / "absent").string(), &err));
  EXPECT_NE(err.find("no such file or folder"), std::string::npos) << err;
  EXPECT_FALSE(discover_suite(test_environment(), d.path.string(), &err));
  EXPECT_NE(err.find("no task files"), std::string::npos) << err;
}

TEST(Suite, DatasetRowsAreTasks) {
  TempDir d;
  touch(d.path / "ops.jsonl", "{\"code\": \"a\"}\n{\"code\": \"b\"}\n\n{\"code\": \"c\"}\n");
  std::string err;
  auto s = discover_suite(test_environment(), (d.path / "ops.jsonl").string(), &err);
  ASSERT_TRUE(s) << err;
  ASSERT_EQ(s->tasks.size(), 3u);
  EXPECT_EQ(s->tasks[2].spec, (d.path / "ops.jsonl").string() + "#2");
  EXPECT_EQ(s->tasks[2].level, "ops");
}

class Matching : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char* t : {"1_ReLU", "2_Sigmoid", "3_Tanh", "4_GELU", "5_Softmax", "6_Gone"}) {
      touch(d.path / "tasks" / "level1" / (std::string(t) + ".py"));
    }
    touch(d.path / "tasks" / "level2" / "1_Fused.py");
    std::string err;
    auto s = discover_suite(test_environment(), (d.path / "tasks").string(), &err);
    ASSERT_TRUE(s) << err;
    suite = *s;
  }
  fs::path sol(const std::string& rel) { return d.path / "sol" / rel; }
  const SuiteTask& task(const std::string& key) {
    for (const auto& t : suite.tasks) {
      if (t.key() == key) return t;
    }
    throw std::runtime_error("no task " + key);
  }
  TempDir d;
  Suite suite;
};

TEST_F(Matching, EveryNamingFormAndVariantAndTheProblems) {
  touch(sol("level1/1_ReLU.py"));                       // a single file, the task's own stem
  touch(sol("level1/2/model_new.py"));                  // a workdir named by id
  touch(sol("level1/3_Tanh_v2/cuda/model_new.py"));     // a variant folder
  touch(sol("level1/3_Tanh_v2/cpu/model_new.py"));
  touch(sol("level1/4_GELU/notes.txt"));                // a folder without a workdir
  touch(sol("level1/5_Softmax/model_new.py"));          // both a workdir and a file: the workdir wins
  touch(sol("level1/5_Softmax.py"));
  touch(sol("level1/42_Nothing.py"));                   // no task 42
  touch(sol("level1/scratch.py"));                      // not <id>_<Name>
  touch(sol("level2/1_Fused/cuda/model_new.py"));
  touch(sol("level9/1_X.py"));                          // no level9 among the tasks
  std::string err;
  ASSERT_TRUE(match_solutions(suite, d.path / "sol", "cuda", &err)) << err;
  EXPECT_EQ(task("level1/1_ReLU").solution, sol("level1/1_ReLU.py").string());
  EXPECT_EQ(task("level1/2_Sigmoid").solution, sol("level1/2").string());
  EXPECT_EQ(task("level1/3_Tanh").solution, sol("level1/3_Tanh_v2/cuda").string());
  EXPECT_EQ(task("level1/4_GELU").solution, "");
  EXPECT_NE(task("level1/4_GELU").missing_reason.find("no model_new.py, and no cuda/ workdir in it"), std::string::npos)
      << task("level1/4_GELU").missing_reason;
  EXPECT_EQ(task("level1/5_Softmax").solution, sol("level1/5_Softmax").string());
  EXPECT_EQ(task("level1/6_Gone").solution, "");
  EXPECT_NE(task("level1/6_Gone").missing_reason.find("no solution for level1/6_Gone"), std::string::npos);
  EXPECT_EQ(task("level2/1_Fused").solution, sol("level2/1_Fused/cuda").string());
  std::string r = reasons(suite.extra);
  EXPECT_NE(r.find("42_Nothing.py: no task level1 with id 42"), std::string::npos) << r;
  EXPECT_NE(r.find("scratch.py: the name is not <id>_<Name>.py"), std::string::npos) << r;
  EXPECT_NE(r.find("5_Softmax.py: a second solution of level1/5_Softmax"), std::string::npos) << r;
  EXPECT_NE(r.find("level9: not a level folder of the tasks"), std::string::npos) << r;
  EXPECT_NE(r.find("4_GELU: no model_new.py"), std::string::npos) << r;
  EXPECT_EQ(suite.extra.size(), 5u) << r;
}

TEST_F(Matching, TheVariantPicksTheSubFolder) {
  touch(sol("level1/3_Tanh/cuda/model_new.py"));
  touch(sol("level1/3_Tanh/cpu/model_new.py"));
  std::string err;
  ASSERT_TRUE(match_solutions(suite, d.path / "sol", "cpu", &err)) << err;
  EXPECT_EQ(task("level1/3_Tanh").solution, sol("level1/3_Tanh/cpu").string());
}

TEST_F(Matching, KernelBenchGenerationNamesTakeTheLowestSample) {
  touch(sol("level_1_problem_2_sample_1_kernel.py"));
  touch(sol("level_1_problem_2_sample_0_kernel.py"));
  touch(sol("level_2_problem_1_sample_0_kernel.py"));
  touch(sol("level_2_problem_7_sample_0_kernel.py"));  // no such task
  std::string err;
  ASSERT_TRUE(match_solutions(suite, d.path / "sol", "cuda", &err)) << err;
  EXPECT_EQ(task("level1/2_Sigmoid").solution, sol("level_1_problem_2_sample_0_kernel.py").string());
  EXPECT_EQ(task("level2/1_Fused").solution, sol("level_2_problem_1_sample_0_kernel.py").string());
  EXPECT_EQ(task("level1/1_ReLU").solution, "");
  std::string r = reasons(suite.extra);
  EXPECT_NE(r.find("sample_1_kernel.py: a second solution of level1/2_Sigmoid"), std::string::npos) << r;
  EXPECT_NE(r.find("level_2_problem_7_sample_0_kernel.py: no task level2 problem 7"), std::string::npos) << r;
}

TEST_F(Matching, ASolutionsPathThatIsNotAFolderIsAnError) {
  std::string err;
  EXPECT_FALSE(match_solutions(suite, d.path / "nope", "cuda", &err));
  EXPECT_NE(err.find("not a folder"), std::string::npos);
}

}  // namespace
}  // namespace anvil
