// The bash tool's confinement, for both methods (bubblewrap and anvil's own
// namespaces): the workdir is the only writable place, protected files are
// read-only, /tmp is private, there is no network, the timeout kills the
// whole command, output is capped.
#include "anvil/agent/sandbox.h"

#include <gtest/gtest.h>

#include <cstdlib>

#include "anvil/util/fs.h"

namespace anvil {
namespace {

class SandboxTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    setenv("ANVIL_SANDBOX", GetParam().c_str(), 1);
    std::string why;
    if (sandbox_method(&why).empty()) GTEST_SKIP() << GetParam() << " is not available here: " << why;
    root_ = fs::path(ANVIL_TEST_CACHE_DIR) / "sandbox" / GetParam();
    remove_tree(root_);
    fs::create_directories(root_ / "work");
    std::string e;
    write_file_atomic(root_ / "work" / "model.py", "reference\n", &e);
    o_.workdir = root_ / "work";
    o_.read_only = {"model.py"};
    o_.timeout = std::chrono::seconds(20);
  }
  void TearDown() override { unsetenv("ANVIL_SANDBOX"); }
  SandboxResult run(const std::string& cmd) {
    SandboxResult r = run_sandboxed(cmd, o_);
    EXPECT_TRUE(r.started) << r.error;
    EXPECT_EQ(r.how, GetParam());
    return r;
  }
  fs::path root_;
  SandboxOptions o_;
};

TEST_P(SandboxTest, WritesOnlyInsideTheWorkdir) {
  SandboxResult r = run("echo hi > inside.txt && cat inside.txt && pwd");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("hi"), std::string::npos);
  EXPECT_EQ(*read_file(root_ / "work" / "inside.txt"), "hi\n");
  r = run("echo x > ../outside.txt");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_FALSE(fs::exists(root_ / "outside.txt"));
  r = run("touch /usr/anvil_sandbox_probe");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_FALSE(fs::exists("/usr/anvil_sandbox_probe"));
}

TEST_P(SandboxTest, ProtectedFilesAreReadOnly) {
  SandboxResult r = run("cat model.py; echo changed > model.py");
  EXPECT_NE(r.output.find("reference"), std::string::npos);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_EQ(*read_file(root_ / "work" / "model.py"), "reference\n");
}

TEST_P(SandboxTest, TmpIsPrivate) {
  std::string name = "anvil_sandbox_tmp_" + GetParam();
  SandboxResult r = run("echo x > /tmp/" + name + " && ls /tmp");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_FALSE(fs::exists("/tmp/" + name));
}

TEST_P(SandboxTest, HasNoNetwork) {
  SandboxResult r = run("cat /proc/self/net/dev");
  EXPECT_EQ(r.output.find("eth"), std::string::npos) << r.output;
  r = run("exec 3<>/dev/tcp/1.1.1.1/53 && echo connected");
  EXPECT_EQ(r.output.find("connected"), std::string::npos) << r.output;
}

TEST_P(SandboxTest, TimeoutKillsTheWholeCommand) {
  o_.timeout = std::chrono::seconds(1);
  auto t0 = std::chrono::steady_clock::now();
  SandboxResult r = run("sleep 100 & sleep 100; echo never");
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_TRUE(r.timed_out);
  EXPECT_LT(s, 10);
  EXPECT_EQ(r.output.find("never"), std::string::npos);
}

TEST_P(SandboxTest, OutputIsCappedButCounted) {
  o_.max_output = 1000;
  SandboxResult r = run("head -c 5000000 /dev/zero | tr '\\0' a; exit 3");
  EXPECT_EQ(r.exit_code, 3);
  EXPECT_EQ(r.output.size(), 1000u);
  EXPECT_EQ(r.output_bytes, 5000000u);
}

TEST_P(SandboxTest, BackgroundJobsDieWithTheCommand) {
  auto t0 = std::chrono::steady_clock::now();
  SandboxResult r = run("(sleep 30; echo late) & echo now");
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_LT(s, 10);  // the output pipe is not held open by the job
  EXPECT_EQ(r.output.find("late"), std::string::npos);
}

// A workdir under /tmp stays visible and writable under the private /tmp.
TEST_P(SandboxTest, AWorkdirUnderTmpWorks) {
  fs::path tmp = make_temp_dir(fs::temp_directory_path(), "anvil-sandbox-test");
  o_.workdir = tmp;
  SandboxResult r = run("echo ok > here.txt && cat here.txt");
  EXPECT_EQ(r.exit_code, 0) << r.output << r.error;
  EXPECT_EQ(read_file(tmp / "here.txt").value_or(""), "ok\n");
  remove_tree(tmp);
}

INSTANTIATE_TEST_SUITE_P(Methods, SandboxTest, ::testing::Values("bubblewrap", "namespaces"));

}  // namespace
}  // namespace anvil
