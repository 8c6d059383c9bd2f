// Evaluation tests on the CPU variants: the whole path (private copy, build,
// isolated runner, verification, timing, reward) with the real runner process.
// The torch.compile baseline is skipped (--compile-mode none) except in one
// test, to keep the suite fast.
#include "anvil/env/eval.h"

#include <gtest/gtest.h>

#include <fstream>

#include "anvil/env/launch.h"
#include "support/peak_memory.h"
#include "support/test_env.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <thread>

#include "anvil/util/fs.h"
#include "anvil/util/hash.h"
#include "anvil/util/strings.h"

namespace anvil {
namespace {

const std::string kSource = ANVIL_SOURCE_DIR;

class EvalTest : public ::testing::Test {
 protected:
  static Environment& env() { return test_environment(); }
  void SetUp() override { ASSERT_TRUE(env().torch.present) << env().probe_error; }

  static EvalOptions options(const std::string& candidate, const std::string& task = "") {
    EvalOptions o;
    o.task = task.empty() ? small_task() : task;
    o.candidate = kSource + "/" + candidate;
    o.compile_mode = "none";
    o.calls = 5;
    o.warmup = 1;
    o.input_sets = 2;
    o.trials = 3;
    o.seed = 7;
    o.timeout = std::chrono::seconds(120);
    return o;
  }
  static nlohmann::json run(const EvalOptions& o) {
    EvalResult r = evaluate(env(), o);
    EXPECT_TRUE(r.evaluated) << r.error;
    return r.json;
  }
};

TEST_F(EvalTest, CorrectCandidateIsRewarded) {
  nlohmann::json j = run(options("examples/candidates/01_elementwise_chain/cpu"));
  ASSERT_EQ(j["outcome"], "ok") << j.dump(2);
  EXPECT_TRUE(j["correct"].get<bool>());
  EXPECT_GE(j["reward"].get<int>(), 1);
  EXPECT_EQ(j["verify"]["passed"], 3);
  EXPECT_EQ(j["verify"]["seed"], 7);
  EXPECT_EQ(j["candidate"]["device"], "cpu");
  EXPECT_GT(j["timing"]["candidate_ms"].get<double>(), 0);
  EXPECT_GT(j["timing"]["eager_ms"].get<double>(), 0);
  EXPECT_TRUE(j["timing"]["compile_ms"].is_null());
  double expect = j["timing"]["eager_ms"].get<double>() / j["timing"]["candidate_ms"].get<double>();
  EXPECT_DOUBLE_EQ(j["timing"]["speedup_eager"].get<double>(), expect);
  EXPECT_EQ(j["reward"], milestone_reward(true, expect, std::nullopt));
}

// A workdir beyond what an evaluation copies (more than 10000 files) is the candidate's doing:
// judged a load_error with reward -1 (an RL trainer must not read it as "anvil could not judge").
TEST_F(EvalTest, ACandidateTooLargeToCopyIsALoadError) {
  fs::path dir = fs::path(ANVIL_TEST_CACHE_DIR) / "too-many-files";
  std::error_code ec;
  fs::remove_all(dir, ec);
  fs::copy(kSource + "/examples/candidates/01_elementwise_chain/cpu", dir, fs::copy_options::recursive, ec);
  ASSERT_FALSE(ec) << ec.message();
  fs::create_directories(dir / "many", ec);
  for (int i = 0; i <= 10000; ++i) std::ofstream(dir / "many" / ("f" + std::to_string(i)));
  EvalOptions o = options("");
  o.candidate = dir.string();
  nlohmann::json j = run(o);
  EXPECT_EQ(j["outcome"], "load_error") << j.dump(2);
  EXPECT_EQ(j["reward"], -1);
  EXPECT_NE(j["message"].get<std::string>().find("more than 10000 files"), std::string::npos) << j["message"];
  fs::remove_all(dir, ec);
}

// A candidate's process writes to the runner's output log: a seek to 4 GiB and one byte made a
// sparse log that anvil read whole (the server went from 16 MiB to 4 GiB of resident memory). Its
// tail is read, and the result says what was left out.
TEST_F(EvalTest, ASparseOutputLogOfGigabytesCostsAnvilItsTail) {
  fs::path dir = fs::path(ANVIL_TEST_CACHE_DIR) / "sparse-output";
  std::error_code ec;
  fs::remove_all(dir, ec);
  fs::create_directories(dir.parent_path(), ec);
  fs::copy(kSource + "/examples/candidates/01_elementwise_chain/cpu", dir, fs::copy_options::recursive, ec);
  ASSERT_FALSE(ec) << ec.message();
  std::string e;
  ASSERT_TRUE(write_file_atomic(dir / "model_new.py",
                                *read_file(dir / "model_new.py") +
                                    "\nimport os\nos.lseek(1, 4 << 30, 0)\nos.write(1, b'the last byte\\n')\n",
                                &e)) << e;
  EvalOptions o = options("");
  o.candidate = dir.string();
  o.zygote_socket = "auto";  // the runner's output goes to a file only when it is forked from the zygote
  o.file_size_limit_bytes = 5ull << 30;
  ASSERT_TRUE(reset_peak_memory());
  uint64_t before = peak_memory_bytes();
  nlohmann::json j = run(o);
  uint64_t grew = peak_memory_bytes() - before;
  EXPECT_LT(grew, 256ull << 20) << "anvil read the candidate's output log whole: " << human_size(grew);
  ASSERT_EQ(j["isolation"]["runner"].get<std::string>().rfind("forked from the warm zygote", 0), 0u) << j.dump(2);
  std::string tail = j["output_tail"].get<std::string>();
  EXPECT_EQ(tail.rfind("(4.0 GB of the output left out; 1.0 MB kept)\n", 0), 0u) << tail.substr(0, 80);
  EXPECT_NE(tail.find("the last byte"), std::string::npos);
  fs::remove_all(dir, ec);
}

TEST_F(EvalTest, BaselinesAreCachedPerTask) {
  EvalOptions o = options("examples/candidates/01_elementwise_chain/cpu");
  o.calls = 6;  // a timing configuration of its own: its own baseline entry
  nlohmann::json first = run(o);
  ASSERT_EQ(first["outcome"], "ok") << first.dump(2);
  // A baseline measured while the machine was loaded (ctest -j beside it) is rightly not kept:
  // measure again, a few times, until one is.
  for (int i = 0; i < 4 && first.value("message", std::string()).find("not kept") != std::string::npos; ++i) first = run(o);
  ASSERT_EQ(first.value("message", std::string()).find("not kept"), std::string::npos) << first.dump(2);
  nlohmann::json second = run(o);
  ASSERT_EQ(second["outcome"], "ok");
  EXPECT_TRUE(second["timing"]["eager"].value("cached", false));
  EXPECT_EQ(second["timing"]["eager_ms"], first["timing"]["eager_ms"]);
  o.use_baseline_cache = false;
  nlohmann::json fresh = run(o);
  EXPECT_FALSE(fresh["timing"]["eager"].value("cached", false));
}

TEST_F(EvalTest, BaselinesMeasuredAloneServeTheNextEvaluation) {
  EvalOptions o = options("examples/candidates/01_elementwise_chain/cpu");
  o.calls = 7;  // a timing configuration of its own: its own baseline entry
  o.use_baseline_cache = false;  // measured now, whatever an earlier run kept
  BaselinesResult b = measure_baselines(env(), o);
  // A baseline measured while the machine was loaded (ctest -j beside it) is rightly not kept.
  for (int i = 0; i < 4 && b.status == BaselinesResult::Status::kUnclean; ++i) b = measure_baselines(env(), o);
  ASSERT_EQ(b.status, BaselinesResult::Status::kMeasured) << b.json.dump(2);
  EXPECT_GT(b.json["eager_ms"].get<double>(), 0);
  EXPECT_TRUE(b.json["compile_ms"].is_null());  // --compile-mode none
  EXPECT_GT(b.json["eager"]["batch"]["per_call_ms"].get<double>(), 0) << "the judge's batch, measured with it";
  EXPECT_TRUE(b.json["eager"]["load"]["candidate_gone"].get<bool>());
  o.use_baseline_cache = true;
  EXPECT_TRUE(baselines_cached(env(), o));
  BaselinesResult again = measure_baselines(env(), o);
  EXPECT_EQ(again.status, BaselinesResult::Status::kCached);
  EXPECT_EQ(again.json["eager_ms"], b.json["eager_ms"]);
  // An evaluation with the same settings (another seed) times its candidate alone.
  o.seed = 11;
  nlohmann::json j = run(o);
  ASSERT_EQ(j["outcome"], "ok") << j.dump(2);
  EXPECT_TRUE(j["timing"]["eager"].value("cached", false));
  EXPECT_EQ(j["timing"]["eager_ms"], b.json["eager_ms"]);
  // Other settings, another entry.
  o.calls = 8;
  o.task = kSource + "/examples/tasks/02_softmax.py";
  EXPECT_FALSE(baselines_cached(env(), o));
}

TEST_F(EvalTest, BaselinesUnderAGpuLockWaitForIt) {
  EvalOptions o = options("examples/candidates/01_elementwise_chain/cpu");
  o.calls = 9;
  o.use_baseline_cache = false;
  std::string err;
  ASSERT_FALSE(ensure_zygote(env(), &err).empty()) << err;  // a cold zygote's start is not the wait
  fs::path lock = fs::path(ANVIL_TEST_CACHE_DIR) / "locks" / "test-gpu.lock";
  fs::create_directories(lock.parent_path());
  int fd = ::open(lock.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::flock(fd, LOCK_EX), 0);
  std::atomic<bool> done{false};
  BaselinesResult b;
  std::thread t([&] {
    b = measure_baselines(env(), o, lock.string());
    done = true;
  });
  std::this_thread::sleep_for(std::chrono::seconds(4));
  EXPECT_FALSE(done.load()) << "measured while another held the GPU";
  ::flock(fd, LOCK_UN);
  t.join();
  EXPECT_TRUE(b.status == BaselinesResult::Status::kMeasured || b.status == BaselinesResult::Status::kUnclean)
      << b.json.dump(2);
  EXPECT_GT(b.json["eager_ms"].get<double>(), 0);
  EXPECT_GT(b.json["seconds"]["runner"]["main"].get<double>(), 3.0);  // its wait is inside the runner
  // The runner was killed at its report; its end releases the lock.
  bool free = false;
  for (int i = 0; i < 100 && !(free = ::flock(fd, LOCK_EX | LOCK_NB) == 0); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_TRUE(free) << "the runner's end released it";
  ::close(fd);
}

// The wait for the GPU's lock is the others' time: a runner that waits longer than its timeout is
// not killed for it (the zygote passes the wait on; LockWaits), and its timeout still counts its work.
TEST_F(EvalTest, TheWaitForTheGpuLockIsNotCountedByTheTimeout) {
  EvalOptions o = options("examples/candidates/01_elementwise_chain/cpu");
  o.calls = 9;
  o.use_baseline_cache = false;
  o.timeout = std::chrono::seconds(6);
  std::string err;
  ASSERT_FALSE(ensure_zygote(env(), &err).empty()) << err;  // its start is not the wait under test
  fs::path lock = fs::path(ANVIL_TEST_CACHE_DIR) / "locks" / "test-gpu-timeout.lock";
  fs::create_directories(lock.parent_path());
  int fd = ::open(lock.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::flock(fd, LOCK_EX), 0);
  BaselinesResult b;
  std::thread t([&] { b = measure_baselines(env(), o, lock.string()); });
  std::this_thread::sleep_for(std::chrono::seconds(9));  // past its timeout, waiting
  ::flock(fd, LOCK_UN);
  t.join();
  ::close(fd);
  EXPECT_TRUE(b.status == BaselinesResult::Status::kMeasured || b.status == BaselinesResult::Status::kUnclean)
      << b.json.dump(2);
  EXPECT_GT(b.json["seconds"]["runner"]["main"].get<double>(), 8.0) << b.json.dump(2);  // it waited inside
}

TEST_F(EvalTest, BaselinesOfABrokenTaskAreItsError) {
  fs::path broken = fs::path(ANVIL_TEST_CACHE_DIR) / "tasks" / "broken_forward.py";
  std::string e;
  ASSERT_TRUE(write_file_atomic(broken,
                                "import torch\nclass Model(torch.nn.Module):\n    def forward(self, x):\n"
                                "        return x.no_such_method()\n"
                                "def get_inputs():\n    return [torch.randn(4)]\n"
                                "def get_init_inputs():\n    return []\n",
                                &e))
      << e;
  EvalOptions o = options("examples/candidates/01_elementwise_chain/cpu", broken.string());
  BaselinesResult b = measure_baselines(env(), o);
  EXPECT_EQ(b.status, BaselinesResult::Status::kTaskError) << b.json.dump(2);
  EXPECT_NE(b.message.find(broken.string()), std::string::npos) << b.message;  // the user's path
  EXPECT_NE(b.message.find("no_such_method"), std::string::npos) << b.message;
  EXPECT_EQ(b.message.find("harness"), std::string::npos) << b.message;
  o.task = "/no/such/task.py";
  b = measure_baselines(env(), o);
  EXPECT_EQ(b.status, BaselinesResult::Status::kError);
  EXPECT_NE(b.message.find("/no/such/task.py"), std::string::npos) << b.message;
}

TEST_F(EvalTest, WrongMathIsWrongAnswerWithAReport) {
  nlohmann::json j = run(options("examples/broken/wrong_math/cpu"));
  EXPECT_EQ(j["outcome"], "wrong_answer");
  EXPECT_EQ(j["reward"], -1);
  std::string msg = j["message"];
  EXPECT_NE(msg.find("trial "), std::string::npos) << msg;  // the first failing trial (in a defended run, in an
  EXPECT_NE(msg.find(" (seed "), std::string::npos) << msg;  // order and with seeds drawn in secret)
  EXPECT_NE(msg.find("max abs error"), std::string::npos) << msg;
  EXPECT_NE(msg.find("tolerance atol=1e-4 rtol=1e-4 (preset strict)"), std::string::npos) << msg;
}

TEST_F(EvalTest, CompileErrorCarriesTheDiagnostics) {
  nlohmann::json j = run(options("examples/broken/compile_error/cpu"));
  EXPECT_EQ(j["outcome"], "compile_error");
  EXPECT_NE(j["message"].get<std::string>().find("kernels/elementwise_chain.cpp:"), std::string::npos);
}

// examples/broken/crash's message: the signal, and where the candidate's own code crashed (its
// Python stack, by the user's path), not the harness's frames.
void expect_candidates_crash(const std::string& message) {
  EXPECT_NE(message.find("signal 11"), std::string::npos) << message;
  EXPECT_NE(message.find("Fatal Python error: Segmentation fault\n  File \"" + kSource +
                         "/examples/broken/crash/cpu/model_new.py\", line 18 in forward"),
            std::string::npos)
      << message;
  EXPECT_EQ(message.find("zygote.py"), std::string::npos) << message;
  EXPECT_EQ(message.find("candidate.py"), std::string::npos) << message;
}

TEST_F(EvalTest, SegfaultIsARuntimeErrorAndTheNextEvaluationIsUnaffected) {
  nlohmann::json crash = run(options("examples/broken/crash/cpu"));
  EXPECT_EQ(crash["outcome"], "runtime_error");
  expect_candidates_crash(crash["message"]);
  nlohmann::json after = run(options("examples/candidates/01_elementwise_chain/cpu"));
  EXPECT_EQ(after["outcome"], "ok");
}

TEST_F(EvalTest, TheRunEndsAtTheReportNotAtTheTeardown) {
  // A complete report ends the run (the zygote says so before the process has exited); a runner
  // that dies without one is waited for, and its signal is the evidence.
  nlohmann::json ok = run(options("examples/candidates/01_elementwise_chain/cpu"));
  ASSERT_EQ(ok["outcome"], "ok") << ok.dump(2);
  EXPECT_EQ(ok["isolation"]["ended"].get<std::string>().rfind("at its report", 0), 0u) << ok["isolation"];
  EvalOptions o = options("examples/broken/crash/cpu");
  o.defenses = false;  // the crash takes the runner itself down: no report
  nlohmann::json crash = run(o);
  EXPECT_EQ(crash["outcome"], "runtime_error");
  EXPECT_EQ(crash["isolation"]["ended"], "at its exit");
  expect_candidates_crash(crash["message"]);
  nlohmann::json after = run(options("examples/candidates/01_elementwise_chain/cpu"));
  EXPECT_EQ(after["outcome"], "ok");
}

TEST_F(EvalTest, FreshProcessRunnerJudgesAlike) {
  EvalOptions o = options("examples/candidates/01_elementwise_chain/cpu");
  o.zygote_socket = "none";
  nlohmann::json fresh = run(o);
  ASSERT_EQ(fresh["outcome"], "ok") << fresh.dump(2);
  EXPECT_EQ(fresh["isolation"]["runner"], "fresh process");
  o.candidate = kSource + "/examples/broken/crash/cpu";
  EXPECT_EQ(run(o)["outcome"], "runtime_error");
  o.candidate = kSource + "/examples/broken/mutates_input/cpu";
  EXPECT_EQ(run(o)["outcome"], "wrong_answer");
}

TEST_F(EvalTest, AZygoteThatCannotRunItGivesWayToAFreshProcess) {
  // A socket nothing answers (a zygote gone, or one that could not fork: the host's memory): the
  // evaluation runs in a fresh process and says why.
  EvalOptions o = options("examples/candidates/01_elementwise_chain/cpu");
  o.zygote_socket = (fs::path(ANVIL_TEST_CACHE_DIR) / "no-such-zygote.sock").string();
  nlohmann::json j = run(o);
  ASSERT_EQ(j["outcome"], "ok") << j.dump(2);
  EXPECT_EQ(j["isolation"]["runner"], "fresh process");
  EXPECT_NE(j["isolation"].value("zygote_error", std::string()).find("cannot connect to the zygote"), std::string::npos)
      << j["isolation"].dump(2);
}

TEST_F(EvalTest, HangIsATimeout) {
  EvalOptions o = options("examples/broken/hang/cpu");
  o.timeout = std::chrono::seconds(15);
  nlohmann::json j = run(o);
  EXPECT_EQ(j["outcome"], "timeout");
  EXPECT_LT(j["seconds"]["run"].get<double>(), 30);
  nlohmann::json after = run(options("examples/candidates/01_elementwise_chain/cpu"));
  EXPECT_EQ(after["outcome"], "ok");
}

TEST_F(EvalTest, InputMutationIsCaught) {
  nlohmann::json j = run(options("examples/broken/mutates_input/cpu"));
  EXPECT_EQ(j["outcome"], "wrong_answer");
  EXPECT_NE(j["message"].get<std::string>().find("modified input"), std::string::npos) << j["message"];
}

TEST_F(EvalTest, ExitInCandidateCodeIsARuntimeError) {
  nlohmann::json j = run(options("examples/broken/exits/cpu"));
  EXPECT_EQ(j["outcome"], "runtime_error");
  EXPECT_NE(j["message"].get<std::string>().find("exited with code 3"), std::string::npos) << j["message"];
}

TEST_F(EvalTest, SlowCandidateIsCorrectButNotFaster) {
  EvalOptions o = options("examples/broken/slow/cpu");
  // Eager timed in the same run, not from a cache filled while other tests loaded the machine.
  o.use_baseline_cache = false;
  o.calls = 10;
  nlohmann::json j = run(o);
  ASSERT_EQ(j["outcome"], "ok") << j["message"];
  EXPECT_EQ(j["reward"], 1);
  EXPECT_LT(j["timing"]["speedup_eager"].get<double>(), 1.0 / 0.95);
}

TEST_F(EvalTest, BrokenTaskIsATaskError) {
  fs::path dir = make_temp_dir(fs::temp_directory_path(), "anvil-eval-test");
  std::string e;
  write_file_atomic(dir / "bad.py", "import torch\nraise RuntimeError('no such op')\n", &e);
  nlohmann::json j = run(options("examples/candidates/01_elementwise_chain/cpu", (dir / "bad.py").string()));
  EXPECT_EQ(j["outcome"], "task_error");
  EXPECT_NE(j["message"].get<std::string>().find("no such op"), std::string::npos) << j["message"];
  remove_tree(dir);
}

// A KernelBench single file whose torch.utils.cpp_extension.load() builds C++ files beside it
// (a header among them), judged with every defense on: anvil copies them with the file and the
// judge builds them for the confined candidate.
TEST_F(EvalTest, SingleFileCandidateLoadsTheFilesBesideIt) {
  fs::path dir = make_temp_dir(fs::temp_directory_path(), "anvil-eval-load");
  std::string e;
  write_file_atomic(dir / "task.py", R"(import torch
import torch.nn as nn
class Model(nn.Module):
    def forward(self, x):
        return x * 3.0
def get_inputs():
    return [torch.rand(64, 64)]
def get_init_inputs():
    return []
)", &e);
  write_file_atomic(dir / "solution" / "factor.h", "inline float factor() { return 3.0f; }\n", &e);
  write_file_atomic(dir / "solution" / "csrc" / "triple.cpp", R"(#include <torch/extension.h>
#include "factor.h"
torch::Tensor triple(torch::Tensor x) {
  auto y = torch::empty_like(x);
  const float* a = x.data_ptr<float>();
  float* b = y.data_ptr<float>();
  for (int64_t i = 0; i < x.numel(); ++i) b[i] = a[i] * factor();
  return y;
}
PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("triple", &triple); }
)", &e);
  write_file_atomic(dir / "solution" / "model_new.py", R"(import torch.nn as nn
from torch.utils.cpp_extension import load
ext = load(name="triple_ext", sources=["csrc/triple.cpp"], extra_include_paths=["."], verbose=False)
class ModelNew(nn.Module):
    def forward(self, x):
        return ext.triple(x.contiguous())
)", &e);
  EvalOptions o = options("", (dir / "task.py").string());
  o.candidate = (dir / "solution" / "model_new.py").string();
  o.device = Device::Cpu;
  o.vet = false;
  o.timeout = std::chrono::seconds(600);  // a cold cache precompiles torch's headers first
  nlohmann::json j = run(o);
  EXPECT_EQ(j["outcome"], "ok") << j.dump(2);
  EXPECT_EQ(j["candidate"]["kind"], "file");
  remove_tree(dir);
}

TEST(UserPathsTest, PrivateCopiesAreNamedAsTheUserGaveThem) {
  fs::path priv = "/cache/tmp/eval-AbC";
  UserPaths file = user_paths(priv, "sub/mine.py", true, "tasks/relu.py");
  EXPECT_EQ(file("File \"/cache/tmp/eval-AbC/candidate/model_new.py\", line 2"), "File \"sub/mine.py\", line 2");
  EXPECT_EQ(file("model_new.py:2: syntax error"), "sub/mine.py:2: syntax error");
  EXPECT_EQ(file("model_new.py defines no class"), "sub/mine.py defines no class");
  EXPECT_EQ(file("/cache/tmp/eval-AbC/candidate/csrc/a.cu:3: error"), "sub/csrc/a.cu:3: error");
  EXPECT_EQ(file("File \"/cache/tmp/eval-AbC/harness/model.py\", line 5"), "File \"tasks/relu.py\", line 5");
  EXPECT_EQ(file("my_model_new.py and x/model_new.py stay"), "my_model_new.py and x/model_new.py stay");
  UserPaths bare = user_paths(priv, "mine.py", true, "");
  EXPECT_EQ(bare("/cache/tmp/eval-AbC/candidate/x.h /cache/tmp/eval-AbC/harness/model.py"), "./x.h <task>");
  UserPaths workdir = user_paths(priv, "work/", false, "t.py");
  EXPECT_EQ(workdir("/cache/tmp/eval-AbC/candidate/kernels/k.cu:1 and model_new.py"),
            "work/kernels/k.cu:1 and model_new.py");
  EXPECT_EQ(workdir("/cache/tmp/eval-AbC/candidate/model_new.py"), "work/model_new.py");
  nlohmann::json j = {{"message", "model_new.py:1: x"}, {"list", {"/cache/tmp/eval-AbC/other"}}, {"n", 3}};
  file.apply(j);
  EXPECT_EQ(j["message"], "sub/mine.py:1: x");
  EXPECT_EQ(j["list"][0], "<evaluation>/other");
  EXPECT_EQ(j["n"], 3);
}

// A broken single file and a broken task: the messages name the user's files, never anvil's copies.
TEST_F(EvalTest, MessagesNameTheUsersFiles) {
  fs::path dir = make_temp_dir(fs::temp_directory_path(), "anvil-eval-names");
  std::string e;
  write_file_atomic(dir / "broken.py", "import torch\ndef oops(:\n", &e);
  write_file_atomic(dir / "task.py", R"(import torch
import torch.nn as nn
class Model(nn.Module):
    def forward(self, x):
        return x.no_such_method()
def get_inputs():
    return [torch.rand(4, 4)]
def get_init_inputs():
    return []
)", &e);
  EvalOptions o = options("");
  o.candidate = (dir / "broken.py").string();
  o.device = Device::Cpu;
  o.vet = false;
  nlohmann::json j = run(o);
  EXPECT_EQ(j["outcome"], "load_error") << j.dump(2);
  std::string all = j.dump();
  EXPECT_NE(j["message"].get<std::string>().find((dir / "broken.py").string() + ":2: syntax error"), std::string::npos)
      << j["message"];
  EXPECT_EQ(all.find("/eval-"), std::string::npos) << all;
  EXPECT_EQ(all.find("model_new.py"), std::string::npos) << all;

  o.task = (dir / "task.py").string();
  o.candidate = kSource + "/examples/candidates/01_elementwise_chain/cpu";
  j = run(o);
  EXPECT_EQ(j["outcome"], "task_error") << j.dump(2);
  all = j.dump();
  EXPECT_NE(j["message"].get<std::string>().find((dir / "task.py").string() + "\", line 5"), std::string::npos)
      << j["message"];
  EXPECT_EQ(all.find("/eval-"), std::string::npos) << all;
  EXPECT_EQ(all.find("harness/model.py"), std::string::npos) << all;
  remove_tree(dir);
}

TEST_F(EvalTest, CudaCandidateWithoutAGpuIsNotEvaluated) {
  if (!env().gpus.empty()) GTEST_SKIP() << "this machine has a GPU";
  EvalResult r = evaluate(env(), options("examples/candidates/01_elementwise_chain/cuda"));
  EXPECT_FALSE(r.evaluated);
  EXPECT_NE(r.error.find("no GPU found"), std::string::npos) << r.error;
}

TEST_F(EvalTest, CompileBaselineOnTheCpu) {
  EvalOptions o = options("examples/candidates/01_elementwise_chain/cpu");
  o.compile_mode = "default";
  o.timeout = std::chrono::seconds(600);
  nlohmann::json j = run(o);
  ASSERT_EQ(j["outcome"], "ok") << j.dump(2);
  EXPECT_TRUE(j["timing"]["compile_ms"].is_number()) << j["timing"].dump(2);
}

TEST_F(EvalTest, TheProtocolIsNamedInTheResultAndSetsItsTolerances) {
  EvalOptions o = options("examples/candidates/01_elementwise_chain/cpu");
  nlohmann::json j = run(o);
  EXPECT_EQ(j["protocol"]["name"], "cuda-agent");
  EXPECT_EQ(j["verify"]["preset"], "strict");
  o.protocol = "kernelbench";
  j = run(o);
  ASSERT_EQ(j["outcome"], "ok") << j.dump(2);
  EXPECT_EQ(j["protocol"], protocol_named("kernelbench").rules());
  EXPECT_EQ(j["verify"]["preset"], "kernelbench");
  EXPECT_EQ(j["verify"]["tolerance"], tolerance_preset("kernelbench"));
  o.preset = "paper";  // a preset named outright wins over the protocol's
  EXPECT_EQ(run(o)["verify"]["preset"], "paper");
  o.protocol = "kernelbnech";
  EvalResult r = evaluate(env(), o);
  EXPECT_FALSE(r.evaluated);
  EXPECT_EQ(r.error, "unknown protocol 'kernelbnech' (use cuda-agent, kernelbench)");
}

TEST(Reward, Milestones) {
  const double just = 1.0 / 0.95;
  EXPECT_EQ(milestone_reward(false, 10.0, 10.0), -1);
  EXPECT_EQ(milestone_reward(true, std::nullopt, std::nullopt), 1);
  EXPECT_EQ(milestone_reward(true, just, 2.0), 1);  // exactly 5% is not "more than 5%"
  EXPECT_EQ(milestone_reward(true, just * 1.001, 1.0), 2);
  EXPECT_EQ(milestone_reward(true, 1.0, 3.0), 1);  // beating compile alone is worth 1
  EXPECT_EQ(milestone_reward(true, 1.2, 1.06), 3);
  EXPECT_EQ(milestone_reward(true, 1.2, std::nullopt), 2);
}

}  // namespace
}  // namespace anvil
