// The bash tool's confinement, for both methods (bubblewrap and anvil's own
// namespaces): the workdir is the only writable place, protected files are
// read-only, the shell runs as the sandbox's user when anvil is root, other
// episodes, the anvil cache and the host's files are out of view while the
// toolchain (Python, anvil's headers) is there, /tmp and /dev/shm are private,
// /dev is minimal, there is no network, the environment is clean, the timeout
// kills the whole command, output is capped but counted. The jail's own tests
// (util/jail_test.cpp) cover the rest. A method is skipped only where it is
// genuinely unavailable (bwrap not installed or too old; the kernel refusing
// namespaces).
#include "anvil/agent/sandbox.h"

#include <fcntl.h>
#include <gtest/gtest.h>

#include <thread>
#include <linux/capability.h>
#include <sched.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>

#include "anvil/agent/file_tools.h"
#include "anvil/env/confine.h"
#include "support/test_env.h"
#include "anvil/util/fs.h"
#include "anvil/util/subprocess.h"

namespace anvil {
namespace {

bool has(const std::string& s, const std::string& what) { return s.find(what) != std::string::npos; }

double since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Sets an environment variable for one scope, restoring the old value after.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const std::string& value) : name_(name) {
    if (const char* v = std::getenv(name)) old_ = v;
    had_ = std::getenv(name) != nullptr;
    setenv(name, value.c_str(), 1);
  }
  ~ScopedEnv() {
    if (had_) {
      setenv(name_, old_.c_str(), 1);
    } else {
      unsetenv(name_);
    }
  }

 private:
  const char* name_;
  std::string old_;
  bool had_ = false;
};

class SandboxTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    method_ = std::make_unique<ScopedEnv>("ANVIL_SANDBOX", GetParam());
    std::string why;
    config_ = sandbox_config(test_environment(), &why);
    ASSERT_NE(config_, nullptr) << why;
    if (jail_method(*config_, &why).empty()) {
      if (GetParam() == "bubblewrap" && (find_program("bwrap").empty() || has(why, "older than"))) GTEST_SKIP() << why;
      if (GetParam() == "namespaces" && why.find("unshare(") != std::string::npos) GTEST_SKIP() << why;
      FAIL() << why;
    }
    // One directory per test and method: ctest runs tests in parallel.
    root_ =
        fs::path(ANVIL_TEST_CACHE_DIR) / "sandbox" / ::testing::UnitTest::GetInstance()->current_test_info()->name();
    remove_tree(root_);
    fs::create_directories(root_ / "work");
    std::string e;
    write_file_atomic(root_ / "work" / "model.py", "reference\n", &e);
    give_to_jail(*config_, root_ / "work");
    own_like(root_ / "work" / "model.py", root_);  // protected: anvil's, not the shell's
    o_.workdir = root_ / "work";
    o_.read_only = {"model.py", "binding.cpp"};  // binding.cpp does not exist: ignored
    o_.timeout = std::chrono::seconds(20);
    o_.config = config_;
    o_.toolchain = toolchain_paths(test_environment());
    o_.hide = {test_environment().cache};
  }
  void TearDown() override { method_.reset(); }
  SandboxResult run(const std::string& cmd) {
    SandboxResult r = run_sandboxed(cmd, o_);
    EXPECT_TRUE(r.started) << r.error;
    EXPECT_EQ(r.how, GetParam());
    return r;
  }
  std::string unique(const std::string& what) const {
    return "anvil_sandbox_" + what + "_" + GetParam() + "_" + std::to_string(getpid());
  }

  std::unique_ptr<ScopedEnv> method_;
  const JailConfig* config_ = nullptr;
  fs::path root_;
  SandboxOptions o_;
};

TEST_P(SandboxTest, WritesOnlyInsideTheWorkdir) {
  SandboxResult r = run("echo hi > inside.txt && mkdir -p sub/dir && echo deep > sub/dir/f && cat inside.txt && pwd");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output, "hi\n" + fs::canonical(root_ / "work").string() + "\n");
  EXPECT_EQ(*read_file(root_ / "work" / "inside.txt"), "hi\n");
  EXPECT_EQ(*read_file(root_ / "work" / "sub" / "dir" / "f"), "deep\n");

  r = run("echo x > ../outside.txt");
  // Under /tmp (a checkout in /tmp) the parent lies in the command's private /tmp: the write
  // succeeds there and vanishes with it. Elsewhere the parent is read-only.
  if (fs::canonical(root_).string().rfind("/tmp/", 0) != 0) {
    EXPECT_NE(r.exit_code, 0);
    EXPECT_TRUE(has(r.output, "Read-only file system")) << r.output;
  }
  EXPECT_FALSE(fs::exists(root_ / "outside.txt"));

  std::string home = std::getenv("HOME") ? std::getenv("HOME") : "/root";
  for (const std::string& target : {std::string("/usr"), std::string("/etc"), home}) {
    fs::path probe = fs::path(target) / unique("probe");
    r = run("touch " + probe.string());
    EXPECT_NE(r.exit_code, 0) << target;
    EXPECT_FALSE(fs::exists(probe)) << probe;
  }
}

TEST_P(SandboxTest, ProtectedFilesAreReadOnly) {
  SandboxResult r = run("cat model.py; echo changed > model.py");
  EXPECT_TRUE(has(r.output, "reference")) << r.output;
  EXPECT_NE(r.exit_code, 0);
  EXPECT_TRUE(has(r.output, "model.py: Read-only file system")) << r.output;
  r = run("mv model.py m.py");
  EXPECT_NE(r.exit_code, 0) << r.output;
  r = run("rm -f model.py");
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_EQ(*read_file(root_ / "work" / "model.py"), "reference\n");
  // Other files beside it stay writable.
  r = run("echo new > model_new.py && cat model_new.py");
  EXPECT_EQ(r.output, "new\n");
}

TEST_P(SandboxTest, TmpAndShmArePrivate) {
  fs::path host_file = fs::path("/tmp") / unique("host");
  std::string e;
  write_file_atomic(host_file, "host\n", &e);
  std::string name = unique("inner");
  SandboxResult r = run("echo x > /tmp/" + name + " && echo y > /dev/shm/" + name + " && cat /tmp/" + name +
                        " /dev/shm/" + name + " && ls " + host_file.string());
  EXPECT_EQ(r.output.substr(0, 4), "x\ny\n") << r.output;
  EXPECT_NE(r.exit_code, 0) << "the host's /tmp is visible: " << r.output;
  EXPECT_FALSE(fs::exists("/tmp/" + name));
  EXPECT_FALSE(fs::exists("/dev/shm/" + name));
  r = run("ls /tmp/" + name);  // and a second command has a fresh one
  EXPECT_NE(r.exit_code, 0) << r.output;
  fs::remove(host_file);
}

TEST_P(SandboxTest, DevIsMinimal) {
  SandboxResult r = run("ls /dev; echo x > /dev/null && head -c 4 /dev/zero | wc -c");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  for (const char* present : {"null\n", "zero\n", "urandom\n", "shm\n", "fd\n"})
    EXPECT_TRUE(has(r.output, present)) << r.output;
  for (const char* absent : {"loop", "kmsg", "vda", "sda", "nvme", "mem\n"})
    EXPECT_FALSE(has(r.output, absent)) << r.output;
  EXPECT_TRUE(has(r.output, "4\n"));
  r = run("diff <(echo a) <(echo a) && echo same");  // process substitution needs /dev/fd
  EXPECT_EQ(r.output, "same\n");
}

TEST_P(SandboxTest, HasNoNetwork) {
  SandboxResult r = run("cat /proc/net/dev");
  EXPECT_TRUE(has(r.output, "lo:")) << r.output;
  EXPECT_EQ(r.output.find("eth"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("ens"), std::string::npos) << r.output;
  r = run("exec 3<>/dev/tcp/1.1.1.1/53 && echo connected");
  EXPECT_FALSE(has(r.output, "connected")) << r.output;
  r =
      run("command -v python3 >/dev/null || { echo no python; exit 0; }; "
          "python3 -c \"import socket; socket.create_connection(('1.1.1.1', 53), timeout=2)\" && echo connected");
  EXPECT_FALSE(has(r.output, "connected")) << r.output;
  EXPECT_TRUE(has(r.output, "no python") || has(r.output, "unreachable")) << r.output;
}

TEST_P(SandboxTest, HasACleanEnvironment) {
  ScopedEnv secret("ANVIL_SANDBOX_TEST_SECRET", "hunter2");
  ScopedEnv cuda("CUDA_VISIBLE_DEVICES", "3");
  o_.env = {"EXTRA=1", "LANG=C"};
  SandboxResult r = run("env; cat; read x || echo stdin-empty");
  EXPECT_FALSE(has(r.output, "hunter2")) << r.output;
  EXPECT_TRUE(has(r.output, "\nHOME=" + fs::canonical(root_ / "work").string() + "\n")) << r.output;
  EXPECT_TRUE(has(r.output, "CUDA_VISIBLE_DEVICES=3\n"));
  EXPECT_TRUE(has(r.output, "EXTRA=1\n"));
  EXPECT_TRUE(has(r.output, "LANG=C\n"));
  EXPECT_FALSE(has(r.output, "LANG=C.UTF-8"));  // replaced, not doubled
  EXPECT_TRUE(has(r.output, "TERM=dumb\n"));
  EXPECT_TRUE(has(r.output, "stdin-empty"));
}

TEST_P(SandboxTest, HidesTheAnvilCache) {
  // The cache beside the workdir: not in view at all.
  fs::path cache = root_ / "cache";
  std::string e;
  write_file_atomic(cache / "objects" / "ab" / "key.o", "object\n", &e);
  o_.hide = {cache};
  SandboxResult r = run("ls -A " + cache.string() + "; cat " + cache.string() + "/objects/ab/key.o; echo done");
  EXPECT_FALSE(has(r.output, "objects\n")) << r.output;
  EXPECT_FALSE(has(r.output, "object\n")) << r.output;
  EXPECT_TRUE(has(r.output, "done")) << r.output;
  // The cache inside the workdir: hidden (an empty directory), not writable.
  fs::path inner = root_ / "work" / ".cache";
  write_file_atomic(inner / "x.o", "object\n", &e);
  o_.hide = {inner};
  r = run("cat .cache/x.o; touch .cache/new && echo wrote; echo ok > f2 && cat f2");
  EXPECT_FALSE(has(r.output, "object")) << r.output;
  EXPECT_FALSE(has(r.output, "wrote")) << r.output;
  EXPECT_TRUE(has(r.output, "ok\n")) << r.output;
  EXPECT_FALSE(fs::exists(inner / "new"));
}

// What the red team read from the agent's shell: /etc/shadow, anvil's source and cache, other
// episodes' workdirs and trajectories, files under $HOME. None is in view now.
TEST_P(SandboxTest, OtherEpisodesTheCacheAndTheHostAreOutOfView) {
  // Not under /tmp (private to the shell anyway): where runs usually are, beside the build.
  fs::path runs = make_temp_dir(fs::path(ANVIL_TEST_CACHE_DIR).parent_path(), unique("runs"));
  std::string e;
  for (const char* ep : {"ep1", "ep2"}) {
    write_file_atomic(runs / ep / "trajectory.json", "{\"secret\": 1}\n", &e);
    write_file_atomic(runs / ep / "workdir" / "kernels" / "k.cu", "// secret kernel\n", &e);
  }
  give_to_jail(*config_, runs / "ep1" / "workdir");
  std::string home = std::getenv("HOME") ? std::getenv("HOME") : "/root";
  fs::path marker = fs::path(home) / unique("marker");
  write_file_atomic(marker, "secret\n", &e);
  const Environment& env = test_environment();
  o_.workdir = runs / "ep1" / "workdir";
  std::vector<fs::path> out_of_view = {runs / "ep1" / "trajectory.json", runs / "ep2", marker, "/etc/shadow",
                                      env.cache / "objects", env.cache / "env", env.home / "src",
                                      env.home / "python" / "anvil" / "judge.py", env.home / "CMakeLists.txt",
                                      env.home / ".git"};
  std::string cmd;
  for (const auto& p : out_of_view) cmd += "test -e " + p.string() + " && echo 'visible " + p.string() + "'; ";
  SandboxResult r = run(cmd + "cat /etc/shadow " + marker.string() + " 2>&1; ls kernels; echo done");
  fs::remove(marker);
  remove_tree(runs);
  EXPECT_TRUE(has(r.output, "k.cu\ndone")) << r.output;  // its own workdir is there
  EXPECT_FALSE(has(r.output, "visible")) << r.output;
  EXPECT_FALSE(has(r.output, "secret")) << r.output;
  EXPECT_FALSE(has(r.output, "root:")) << r.output;
}

TEST_P(SandboxTest, RunsAsTheSandboxUserAndCanEditWhatTheToolsWrote) {
  FileTools tools;
  tools.workdir = o_.workdir;
  ASSERT_FALSE(tools.write_file("kernels/new.cu", "// written by the tool\n").error);
  SandboxResult r = run("id -u; echo edited >> kernels/new.cu && touch kernels/other.cu && echo ok");
  EXPECT_EQ(r.output.substr(0, r.output.find('\n')), std::to_string(jail_uid(*config_))) << r.output;
  if (geteuid() == 0) {
    EXPECT_EQ(jail_uid(*config_), 65534u);
  }
  EXPECT_TRUE(has(r.output, "ok\n")) << r.output;
}

// Each episode is a user of its own (issue 55): one session's shell holding every process its limit
// allowed made every other session's shell fail to fork, all of them the jail's one user. Its own
// user, an episode's processes count apart; the same limit for both, shared, starves the second.
TEST_P(SandboxTest, EachEpisodeIsAUserOfItsOwnAndItsProcessesCountApart) {
  if (geteuid() != 0 || jail_uid(*config_) != config_->uid) GTEST_SKIP() << "an episode's own user needs root";
  JailConfig small = *config_;
  small.processes = 48;
  o_.config = &small;
  give_to_episode(small, o_.workdir);
  std::optional<unsigned> mine = episode_user(small, o_.workdir);
  ASSERT_TRUE(mine.has_value());
  o_.uid = mine;
  SandboxResult r = run("id -u; echo x > made && stat -c %u made");
  EXPECT_EQ(r.output, std::to_string(*mine) + "\n" + std::to_string(*mine) + "\n");

  fs::create_directories(root_ / "other");
  give_to_episode(small, root_ / "other");
  SandboxOptions other = o_;
  other.workdir = root_ / "other";
  other.read_only = {};
  other.uid = episode_user(small, other.workdir);
  ASSERT_TRUE(other.uid.has_value());
  EXPECT_NE(*other.uid, *mine);
  auto second_shell = [&](std::optional<unsigned> second_uid) {
    std::thread hog([&] { run_sandboxed("for i in $(seq 80); do sleep 4 & done 2>/dev/null; wait", other); });
    std::this_thread::sleep_for(std::chrono::milliseconds(1500));  // the other episode at its limit
    SandboxOptions o = o_;
    o.uid = second_uid;
    SandboxResult res = run_sandboxed("echo $(echo forked)", o);  // a fork of its own, whichever method
    hog.join();
    return res;
  };
  r = second_shell(mine);
  EXPECT_EQ(r.output, "forked\n") << r.error;
  r = second_shell(other.uid);  // the same user as the other episode: its count is full
  EXPECT_NE(r.output, "forked\n") << "the control: one user's processes do count together";
}

// A shell's private memory and each file it writes are bounded (share/sandbox.json shell_data_bytes,
// shell_file_bytes): `fallocate -l 5G` in a workdir once succeeded, and bash took 4 GiB.
TEST_P(SandboxTest, AShellsMemoryAndFilesAreBounded) {
  SandboxResult r = run("ulimit -d; fallocate -l " + std::to_string(config_->shell_file_bytes + 4096) + " big; stat -c %s big");
  EXPECT_TRUE(r.output.starts_with(std::to_string(config_->shell_data_bytes / 1024) + "\n")) << r.output;
  EXPECT_TRUE(has(r.output, "File size limit exceeded")) << r.output;
  EXPECT_TRUE(r.output.ends_with("\n0\n")) << r.output;  // nothing of it allocated
}

// The model runs python and the compilers by hand: the Python prefixes, torch and anvil's
// headers are in view (read-only).
TEST_P(SandboxTest, TheToolchainIsThere) {
  const Environment& env = test_environment();
  SandboxResult r = run(env.python.string() + " -c 'import sys, numpy; print(\"python\", sys.version_info[0])'; ls " +
                        (env.anvil_include() / "anvil" / "binding.h").string() + "; touch " +
                        (env.anvil_include() / "x").string() + " 2>&1 | grep -c Read-only");
  EXPECT_TRUE(has(r.output, "python 3\n")) << r.output;
  EXPECT_TRUE(has(r.output, "binding.h\n")) << r.output;
  EXPECT_TRUE(has(r.output, "1\n")) << r.output;
}

TEST_P(SandboxTest, WorksWithTheWorkdirUnderTmp) {
  // /tmp is replaced by a private tmpfs: a workdir there must still be the real one.
  fs::path dir = make_temp_dir(fs::temp_directory_path(), unique("wd"));
  give_to_jail(*config_, dir);
  o_.workdir = dir;
  SandboxResult r = run("echo kept > out.txt && cat out.txt");
  EXPECT_EQ(r.output, "kept\n") << r.error;
  EXPECT_EQ(*read_file(dir / "out.txt"), "kept\n");
  remove_tree(dir);
}

TEST_P(SandboxTest, TimeoutKillsTheWholeGroup) {
  o_.timeout = std::chrono::seconds(1);
  std::string mark = unique("sleeper");
  auto t0 = std::chrono::steady_clock::now();
  SandboxResult r = run("(exec -a " + mark + " sleep 100) & exec -a " + mark + " sleep 100; echo never");
  EXPECT_TRUE(r.timed_out);
  EXPECT_LT(since(t0), 5);
  EXPECT_FALSE(has(r.output, "never"));
  // Nothing is left behind.
  std::error_code ec;
  for (const auto& p : fs::directory_iterator("/proc", ec)) {
    auto cmd = read_file(p.path() / "cmdline");
    if (cmd) {
      EXPECT_FALSE(has(*cmd, mark)) << "left running: " << p.path();
    }
  }
}

TEST_P(SandboxTest, TimeoutHoldsWhenTheOutputIsClosed) {
  o_.timeout = std::chrono::seconds(1);
  auto t0 = std::chrono::steady_clock::now();
  SandboxResult r = run("exec >&- 2>&-; sleep 100");
  EXPECT_TRUE(r.timed_out);
  EXPECT_LT(since(t0), 5);
}

TEST_P(SandboxTest, BackgroundJobsDieWithTheCommand) {
  auto t0 = std::chrono::steady_clock::now();
  SandboxResult r = run("(sleep 30; echo late) & echo now");
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_LT(since(t0), 10);  // the output pipe is not held open by the job
  EXPECT_EQ(r.output, "now\n");
  EXPECT_FALSE(r.timed_out);
}

TEST_P(SandboxTest, OutputIsCappedButCounted) {
  o_.max_output = 1000;
  SandboxResult r = run("head -c 10485760 /dev/zero | tr '\\0' a; exit 3");
  EXPECT_EQ(r.exit_code, 3);
  EXPECT_EQ(r.output, std::string(1000, 'a'));
  EXPECT_EQ(r.output_bytes, 10485760u);
}

TEST_P(SandboxTest, PassesTheExitCodeThrough) {
  EXPECT_EQ(run("exit 42").exit_code, 42);
  EXPECT_EQ(run("true").exit_code, 0);
  SandboxResult r = run("kill -9 $$");
  EXPECT_EQ(r.exit_code, 137);  // 128 + SIGKILL, as the shell reports it
  EXPECT_FALSE(r.timed_out);
}

TEST(SandboxMethod, RefusesAnUnknownMethodAMissingConfigAndAMissingWorkdir) {
  std::string err;
  const JailConfig* config = sandbox_config(test_environment(), &err);
  ASSERT_NE(config, nullptr) << err;
  SandboxOptions o;
  o.workdir = ANVIL_TEST_CACHE_DIR;
  {
    ScopedEnv m("ANVIL_SANDBOX", "chroot");
    o.config = config;
    SandboxResult r = run_sandboxed("true", o);
    EXPECT_FALSE(r.started);
    EXPECT_EQ(r.error, "sandbox: ANVIL_SANDBOX=chroot is not a method (bubblewrap or namespaces)");
  }
  o.config = nullptr;
  EXPECT_EQ(run_sandboxed("true", o).error, "sandbox: no configuration given (share/sandbox.json)");
  o.config = config;
  o.workdir = fs::path(ANVIL_TEST_CACHE_DIR) / "sandbox" / "no-such-dir";
  SandboxResult r = run_sandboxed("true", o);
  EXPECT_FALSE(r.started);
  EXPECT_EQ(r.error, "sandbox: the workdir " + o.workdir.string() + " is not a directory");
}

// /proc is the sandbox's own and writable where programs need it (the CUDA
// driver does not start under a read-only /proc), but the kernel's knobs are
// read-only. The write puts back the value already there, so it is harmless
// should the test ever fail.
TEST_P(SandboxTest, KernelSettingsInProcAreReadOnly) {
  SandboxResult r = run("v=$(cat /proc/sys/vm/overcommit_ratio) && echo $v > /proc/sys/vm/overcommit_ratio && echo wrote");
  EXPECT_EQ(r.output.find("wrote"), std::string::npos) << r.output;
  r = run("echo hello > /proc/self/comm && cat /proc/self/comm; touch /proc/self/x 2>/dev/null; echo done");
  EXPECT_NE(r.output.find("done"), std::string::npos) << r.output;
}

INSTANTIATE_TEST_SUITE_P(Sandbox, SandboxTest, ::testing::Values("bubblewrap", "namespaces"),
                         [](const ::testing::TestParamInfo<std::string>& i) { return i.param; });

}  // namespace
}  // namespace anvil
