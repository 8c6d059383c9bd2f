// The jail, attacked from inside, for both methods (bubblewrap and anvil's own namespaces): what
// the red team of issue 16 did, each as a test. A method is skipped only where it is genuinely
// unavailable (bwrap not installed or too old; the kernel refusing namespaces).
#include "anvil/util/jail.h"

#include <fcntl.h>
#include <grp.h>
#include <gtest/gtest.h>
#include <linux/capability.h>
#include <sched.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <functional>

#include "anvil/util/fs.h"
#include "anvil/util/subprocess.h"

namespace anvil {
namespace {

double since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

bool has(const std::string& s, const std::string& what) { return s.find(what) != std::string::npos; }

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

const JailConfig& config() {
  static JailConfig c = [] {
    JailConfig c;
    std::string err;
    if (!load_jail_config(fs::path(ANVIL_SOURCE_DIR) / "share" / "sandbox.json", &c, &err)) ADD_FAILURE() << err;
    return c;
  }();
  return c;
}

class JailTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    method_ = std::make_unique<ScopedEnv>("ANVIL_SANDBOX", GetParam());
    std::string why;
    if (jail_method(config(), &why).empty()) {
      if (GetParam() == "bubblewrap" && (find_program("bwrap").empty() || has(why, "older than"))) GTEST_SKIP() << why;
      if (GetParam() == "namespaces" && has(why, "unshare(")) GTEST_SKIP() << why;
      FAIL() << why;
    }
    // Under the host's /tmp: nothing of /work, /root or /home is on the way to it.
    dir_ = make_temp_dir(fs::temp_directory_path(), "anvil-jail-test");
    fs::permissions(dir_, fs::perms(0755));
    fs::create_directories(dir_ / "work");
    set_owner(dir_ / "work", jail_uid(config()), jail_gid(config()));
    o_.config = &config();
    o_.cwd = dir_ / "work";
    o_.binds = {{dir_ / "work", true}};
    o_.env = {"PATH=/usr/bin:/bin", "LANG=C.UTF-8"};
    o_.timeout = std::chrono::seconds(20);
  }
  void TearDown() override {
    method_.reset();
    if (!dir_.empty()) remove_tree(dir_);
  }
  JailResult sh(const std::string& cmd) {
    JailResult r = run_jailed({"/bin/sh", "-c", cmd}, o_);
    EXPECT_TRUE(r.started) << r.error;
    EXPECT_EQ(r.how, GetParam());
    return r;
  }
  std::string unique(const std::string& what) const {
    return "anvil_jail_" + what + "_" + GetParam() + "_" + std::to_string(getpid());
  }

  std::unique_ptr<ScopedEnv> method_;
  fs::path dir_;
  JailOptions o_;
};

TEST_P(JailTest, RunsAsTheSandboxUserWithoutCapabilities) {
  JailResult r = sh("id -u; id -g; grep -E '^(CapEff|CapPrm|CapBnd|CapAmb|NoNewPrivs):' /proc/self/status");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  std::string uid = std::to_string(jail_uid(config())), gid = std::to_string(jail_gid(config()));
  EXPECT_EQ(r.output.substr(0, uid.size() + gid.size() + 2), uid + "\n" + gid + "\n") << r.output;
  if (geteuid() == 0) {
    EXPECT_EQ(jail_uid(config()), 65534u);
  }
  for (const char* caps : {"CapEff:\t0000000000000000", "CapPrm:\t0000000000000000", "CapBnd:\t0000000000000000",
                           "CapAmb:\t0000000000000000", "NoNewPrivs:\t1"}) {
    EXPECT_TRUE(has(r.output, caps)) << caps << "\n" << r.output;
  }
}

TEST_P(JailTest, SeesOnlyItsViewOfTheHost) {
  // A file anvil can read on the host, in places the program must not see.
  std::string home = std::getenv("HOME") ? std::getenv("HOME") : "/root";
  fs::path marker = fs::path(home) / unique("home_marker");
  fs::path outside = dir_ / "elsewhere" / "secret.txt";
  std::string e;
  ASSERT_TRUE(write_file_atomic(marker, "secret\n", &e)) << e;
  ASSERT_TRUE(write_file_atomic(outside, "secret\n", &e)) << e;
  JailResult r = sh("for p in /etc/shadow /etc/hostname " + marker.string() + " " + outside.string() +
                    " /root /home /work /var /srv /mnt /run; do test -e $p && echo \"visible $p\"; done; "
                    "cat /etc/shadow; ls /; uname -n; echo done");
  fs::remove(marker);
  EXPECT_TRUE(has(r.output, "done")) << r.output;
  EXPECT_FALSE(has(r.output, "visible")) << r.output;
  EXPECT_FALSE(has(r.output, "secret")) << r.output;
  EXPECT_FALSE(has(r.output, "root:")) << r.output;
  EXPECT_TRUE(has(r.output, "usr\n")) << r.output;  // the toolchain is there
  EXPECT_TRUE(has(r.output, "\nsandbox\ndone")) << r.output;  // not the host's name
}

TEST_P(JailTest, BindsAreReadOnlyUnlessWritableAndHiddenPathsAreEmpty) {
  fs::create_directories(dir_ / "ro" / "hidden");
  std::string e;
  write_file_atomic(dir_ / "ro" / "f", "read me\n", &e);
  write_file_atomic(dir_ / "ro" / "hidden" / "key", "key\n", &e);
  o_.binds.push_back({dir_ / "ro", false});
  o_.hide = {dir_ / "ro" / "hidden", "/no/such/path"};
  JailResult r = sh("cat " + (dir_ / "ro" / "f").string() + "; echo x > " + (dir_ / "ro" / "g").string() +
                    "; ls -A " + (dir_ / "ro" / "hidden").string() + "; echo w > out.txt && cat out.txt");
  EXPECT_TRUE(has(r.output, "read me\n")) << r.output;
  EXPECT_TRUE(has(r.output, "Read-only file system")) << r.output;
  EXPECT_FALSE(has(r.output, "key")) << r.output;
  EXPECT_TRUE(has(r.output, "w\n")) << r.output;
  EXPECT_FALSE(fs::exists(dir_ / "ro" / "g"));
  EXPECT_EQ(*read_file(dir_ / "work" / "out.txt"), "w\n");
}

// A listening socket on disk outside the view (anvil's warm zygote was one) and an abstract
// socket of the host's network namespace: neither can be reached.
TEST_P(JailTest, UnixSocketsOutsideCannotBeConnectedTo) {
  if (!fs::exists("/usr/bin/python3")) GTEST_SKIP() << "no /usr/bin/python3 to connect with";
  // Not under /tmp (private to the jail anyway): beside the test cache, as anvil's zygote socket is.
  fs::path sock_dir = fs::path(ANVIL_TEST_CACHE_DIR).parent_path() / "jail-test-sockets" / unique("s");
  fs::path path = sock_dir / "zygote.sock";
  remove_tree(sock_dir);
  fs::create_directories(sock_dir);
  fs::permissions(sock_dir, fs::perms(0755));
  int on_disk = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  int abstract = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un a{}, b{};
  a.sun_family = b.sun_family = AF_UNIX;
  std::snprintf(a.sun_path, sizeof a.sun_path, "%s", path.c_str());
  std::string name = unique("abstract");
  std::memcpy(b.sun_path + 1, name.data(), name.size());
  socklen_t blen = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
  ASSERT_EQ(bind(on_disk, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  ASSERT_EQ(bind(abstract, reinterpret_cast<sockaddr*>(&b), blen), 0);
  chmod(path.c_str(), 0777);
  ASSERT_EQ(listen(on_disk, 4), 0);
  ASSERT_EQ(listen(abstract, 4), 0);
  std::string py =
      "import socket\n"
      "for addr in [" + std::string("'") + path.string() + "', '\\0" + name + "']:\n"
      "    s = socket.socket(socket.AF_UNIX)\n"
      "    try:\n"
      "        s.connect(addr); print('connected', repr(addr))\n"
      "    except OSError as e:\n"
      "        print('refused', e.errno)\n";
  JailResult r = run_jailed({"/usr/bin/python3", "-c", py}, o_);
  close(on_disk);
  close(abstract);
  remove_tree(sock_dir);
  EXPECT_TRUE(r.started) << r.error;
  EXPECT_FALSE(has(r.output, "connected")) << r.output;
  EXPECT_TRUE(has(r.output, "refused")) << r.output;
}

TEST_P(JailTest, KernelKnobsInProcAreReadOnly) {
  JailResult r = sh("(: > /proc/sys/kernel/core_pattern) 2>&1 || echo refused; "
                    "(echo 1 > /proc/sys/vm/overcommit_ratio) 2>/dev/null || echo refused2; "
                    "cat /proc/keys 2>/dev/null | head -c 100; echo hello > /proc/$$/comm && cat /proc/$$/comm");
  EXPECT_TRUE(has(r.output, "refused\n")) << r.output;
  EXPECT_TRUE(has(r.output, "refused2\n")) << r.output;
  EXPECT_TRUE(has(r.output, "hello\n")) << r.output;  // /proc itself stays writable (CUDA needs it)
  EXPECT_EQ(r.output.find("keys"), std::string::npos) << r.output;
}

TEST_P(JailTest, DevIsMinimalAndNothingCanBeCreatedThere) {
  JailResult r = sh("ls /dev | tr '\\n' ' '; echo; touch /dev/x 2>&1 || echo nodev; "
                    "echo x > /dev/null && head -c 4 /dev/zero | wc -c; echo y > /dev/shm/y && cat /dev/shm/y");
  EXPECT_TRUE(has(r.output, "fd full null random shm stderr stdin stdout tty urandom zero \n")) << r.output;
  EXPECT_TRUE(has(r.output, "nodev")) << r.output;
  EXPECT_TRUE(has(r.output, "4\ny\n")) << r.output;
}

TEST_P(JailTest, TmpAndShmArePrivateAndBounded) {
  JailConfig small = config();
  small.tmp_bytes = 4 << 20;
  o_.config = &small;
  fs::path host = fs::path("/tmp") / unique("host");
  std::string e;
  write_file_atomic(host, "host\n", &e);
  JailResult r = sh("ls " + host.string() + " 2>/dev/null || echo private; "
                    "head -c 8388608 /dev/zero > /tmp/big 2>&1 || echo full");
  fs::remove(host);
  EXPECT_TRUE(has(r.output, "private")) << r.output;
  EXPECT_TRUE(has(r.output, "No space left") || has(r.output, "full")) << r.output;
}

TEST_P(JailTest, MakesNoNamespacesMountsOrTraces) {
  if (!fs::exists("/usr/bin/python3") || !fs::exists("/usr/bin/unshare")) GTEST_SKIP() << "needs python3 and unshare";
  // What the system-call filter refuses, tried as a hostile program would, beside what must still
  // work (threads: clone3 answers ENOSYS and the C library falls back to clone).
  const std::string tries =
      "unshare -Urm mount -t tmpfs none /tmp >/dev/null 2>&1; echo \"userns+mount $?\"; "
      "/usr/bin/python3 -c 'import ctypes, os, threading\n"
      "l = ctypes.CDLL(None, use_errno=True)\n"
      "print(\"ptrace\", l.ptrace(0, 0, 0, 0), os.strerror(ctypes.get_errno()))\n"
      "t = threading.Thread(target=print, args=(\"thread ok\",)); t.start(); t.join()'";
  JailResult r = sh(tries);
  EXPECT_TRUE(has(r.output, "ptrace -1 Operation not permitted")) << r.output;
  EXPECT_FALSE(has(r.output, "userns+mount 0")) << r.output;
  EXPECT_TRUE(has(r.output, "thread ok")) << r.output;
  // The same without the filter: the test tells the difference.
  o_.syscall_filter = false;
  JailResult open = sh(tries);
  EXPECT_TRUE(has(open.output, "ptrace 0")) << open.output;
  EXPECT_TRUE(has(open.output, "thread ok")) << open.output;
}

TEST_P(JailTest, HasNoNetwork) {
  JailResult r = sh("cat /proc/net/dev");
  EXPECT_TRUE(has(r.output, "lo:")) << r.output;
  EXPECT_EQ(r.output.find("eth"), std::string::npos) << r.output;
}

TEST_P(JailTest, ABackgroundProcessDiesWithTheProgram) {
  std::string mark = unique("sleeper");
  auto t0 = std::chrono::steady_clock::now();
  JailResult r = run_jailed({"/bin/bash", "-c", "(exec -a " + mark + " sleep 30) & echo started"}, o_);
  EXPECT_EQ(r.output, "started\n");
  EXPECT_LT(since(t0), 10);  // the output pipe is not held open by the job
  std::error_code ec;
  for (const auto& p : fs::directory_iterator("/proc", ec)) {
    auto cmd = read_file(p.path() / "cmdline");
    if (cmd) {
      EXPECT_FALSE(has(*cmd, mark)) << "left running: " << p.path();
    }
  }
}

TEST_P(JailTest, TheTimeoutKillsEverything) {
  o_.timeout = std::chrono::seconds(1);
  auto t0 = std::chrono::steady_clock::now();
  JailResult r = sh("exec >&- 2>&-; sleep 100 & sleep 100");
  EXPECT_TRUE(r.timed_out);
  EXPECT_LT(since(t0), 5);
  EXPECT_EQ(r.describe().rfind("timed out after ", 0), 0u) << r.describe();
}

TEST_P(JailTest, LimitsHold) {
  o_.limits.file_size = 1 << 20;
  JailResult r = sh("head -c 2097152 /dev/zero > big; echo status $?");
  EXPECT_TRUE(has(r.output, "status 153")) << r.output;  // 128 + SIGXFSZ
  o_.limits = {};
  o_.limits.address_space = 256ull << 20;
  if (fs::exists("/usr/bin/python3")) {
    r = run_jailed({"/usr/bin/python3", "-c", "x = bytearray(512 << 20)"}, o_);
    EXPECT_NE(r.exit_code, 0);
    EXPECT_TRUE(has(r.output, "MemoryError")) << r.output;
  }
}

TEST_P(JailTest, AForkBombIsCapped) {
  // 300 background sleeps: with a cap of 40 the shell's fork fails ("Cannot fork") before the end.
  // As root the cap counts the sandbox uid's processes host-wide: a concurrent jail's few share it.
  const char* bomb = "i=0; while [ $i -lt 300 ]; do sleep 30 & i=$((i+1)); done; echo made $i";
  // Under ctest -j the other method's bomb may hold that uid's count when this one starts: the
  // jail's own fork, or its exec of the shell ("setpriv: failed to execute /bin/sh: Resource
  // temporarily unavailable"), then fails with EAGAIN, which is the cap at work too.
  o_.limits.processes = 40;
  JailResult r = run_jailed({"/bin/sh", "-c", bomb}, o_);
  if (r.started) {
    EXPECT_FALSE(has(r.output, "made 300")) << r.output;
    EXPECT_TRUE(has(r.output, "fork") || has(r.output, "Resource temporarily unavailable")) << r.output;
  } else {
    EXPECT_TRUE(has(r.error, "Resource temporarily unavailable")) << r.error;
  }
  o_.limits.processes = 0;  // the config's cap (4096): the same shell makes all of them
  r = sh(bomb);
  EXPECT_TRUE(has(r.output, "made 300")) << r.output;
  EXPECT_EQ(r.exit_code, 0) << r.output;
}

TEST_P(JailTest, EnvironmentStdinAndStreamsAreTheCallers) {
  ScopedEnv secret("ANVIL_JAIL_TEST_SECRET", "hunter2");
  o_.stdin_data = "from stdin\n";
  o_.merge_stderr = false;
  JailResult r = sh("env; cat; echo to-stderr >&2; exit 3");
  EXPECT_EQ(r.exit_code, 3);
  EXPECT_FALSE(has(r.output, "hunter2")) << r.output;
  EXPECT_TRUE(has(r.output, "PATH=/usr/bin:/bin\n")) << r.output;
  EXPECT_TRUE(has(r.output, "from stdin\n")) << r.output;
  EXPECT_EQ(r.err_output, "to-stderr\n");
  o_.stdin_data.reset();
  o_.merge_stderr = true;
  o_.max_output = 1000;
  r = sh("head -c 100000 /dev/zero | tr '\\0' a");
  EXPECT_EQ(r.output, std::string(1000, 'a'));
  EXPECT_EQ(r.output_bytes, 100000u);
}

TEST_P(JailTest, AFailedSetUpIsNamedAndRunsNothing) {
  o_.binds.push_back({dir_ / "missing", false});
  JailResult r = run_jailed({"/bin/sh", "-c", "echo ran > ran.txt"}, o_);
  EXPECT_FALSE(r.started);
  EXPECT_EQ(r.error, "sandbox: bind " + (dir_ / "missing").string() + ": No such file or directory");
  EXPECT_FALSE(fs::exists(dir_ / "work" / "ran.txt"));
  o_.binds.pop_back();
  r = run_jailed({"sh", "-c", "true"}, o_);
  EXPECT_FALSE(r.started);
  EXPECT_EQ(r.error, "sandbox: the program must be given by its absolute path, not sh");
}

// What a forked child says (its text) and its exit status: `body` runs in the child, which ends by
// calling say(text, status) (2: the test cannot run here, a skip).
struct ChildSaid {
  int status = -1;
  std::string text;
};
ChildSaid in_child(const std::function<void(const std::function<void(const std::string&, int)>&)>& body) {
  int pipefd[2];
  if (pipe(pipefd) != 0) return {-1, "pipe"};
  pid_t pid = fork();
  if (pid < 0) return {-1, "fork"};
  if (pid == 0) {
    close(pipefd[0]);
    auto say = [&](const std::string& s, int code) {
      (void)!write(pipefd[1], s.data(), s.size());
      _exit(code);
    };
    body(say);
    say("the child's body did not say", 1);
  }
  close(pipefd[1]);
  ChildSaid out;
  char buf[4096];
  for (ssize_t n; (n = read(pipefd[0], buf, sizeof buf)) > 0;) out.text.append(buf, static_cast<size_t>(n));
  close(pipefd[0]);
  int st = 0;
  waitpid(pid, &st, 0);
  out.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return out;
}

// Namespaces: in a child process, forbid new user namespaces and drop CAP_SYS_ADMIN, so the jail
// needs one and cannot have it: the failed step is named and nothing runs.
TEST(JailNamespaces, ACaughtStepIsReportedByName) {
  ScopedEnv m("ANVIL_SANDBOX", "namespaces");
  std::string why;
  if (jail_method(config(), &why).empty()) GTEST_SKIP() << why;
  fs::path dir = make_temp_dir(fs::temp_directory_path(), "anvil-jail-test");
  ChildSaid child = in_child([&](const auto& say) {
    std::string uid = std::to_string(geteuid()), gid = std::to_string(getegid());
    if (unshare(CLONE_NEWUSER) != 0) say("cannot make a user namespace for the test", 2);
    auto put = [](const char* path, const std::string& s) {
      int fd = open(path, O_WRONLY);
      bool ok = fd >= 0 && write(fd, s.data(), s.size()) == static_cast<ssize_t>(s.size());
      if (fd >= 0) close(fd);
      return ok;
    };
    if (!put("/proc/self/setgroups", "deny") || !put("/proc/self/uid_map", uid + " " + uid + " 1") ||
        !put("/proc/self/gid_map", gid + " " + gid + " 1") || !put("/proc/sys/user/max_user_namespaces", "0")) {
      say("cannot set up the test's user namespace", 2);
    }
    __user_cap_header_struct hdr{_LINUX_CAPABILITY_VERSION_3, 0};
    __user_cap_data_struct data[2] = {};
    if (syscall(SYS_capset, &hdr, data) != 0) say("capset", 2);
    JailOptions o;
    o.config = &config();
    o.binds = {{dir, true}};
    o.cwd = dir;
    JailResult r = run_jailed({"/bin/sh", "-c", "echo ran > ran.txt"}, o);
    say(r.error, r.started ? 1 : 0);
  });
  const std::string& said = child.text;
  bool ran = fs::exists(dir / "ran.txt");
  remove_tree(dir);
  if (child.status == 2) GTEST_SKIP() << said;
  EXPECT_EQ(child.status, 0) << said;
  EXPECT_EQ(said.rfind("sandbox: unshare(CLONE_NEWUSER): ", 0), 0u) << said;
  EXPECT_FALSE(ran);
}

// PID 1 of a namespaces jail is a fork of anvil: its environment (an API key, serve's token) and
// memory are anvil's. Run by a user other than root the program ran as that same user and read
// them from /proc/1 (issue 55). PID 1 is not dumpable: /proc/1's environ, mem and maps are refused.
TEST(JailNamespaces, PidOneKeepsAnvilsEnvironmentToItselfForAnyUser) {
  ScopedEnv m("ANVIL_SANDBOX", "namespaces");
  std::string why;
  if (jail_method(config(), &why).empty()) GTEST_SKIP() << why;
  fs::path dir = make_temp_dir(fs::temp_directory_path(), "anvil-jail-test");
  fs::permissions(dir, fs::perms::all);
  const JailConfig& c = config();
  ChildSaid child = in_child([&](const auto& say) {
    setenv("ANVIL_JAIL_TEST_SECRET", "hunter2-in-anvils-environment", 1);
    if (geteuid() == 0) {  // as a user: the jail maps it to itself in a user namespace of its own
      gid_t g = 4242;
      if (setgroups(1, &g) != 0 || setresgid(4242, 4242, 4242) != 0 || setresuid(4242, 4242, 4242) != 0) {
        say("cannot become user 4242", 2);
      }
      prctl(PR_SET_DUMPABLE, 1);  // as a process started by that user is (a change of uid clears it)
    }
    std::string how;
    if (jail_method(c, &how).empty()) say("no jail as user 4242: " + how, 2);
    JailOptions o;
    o.config = &c;
    o.binds = {{dir, true}};
    o.cwd = dir;
    o.env = {"PATH=/usr/bin:/bin"};
    o.timeout = std::chrono::seconds(20);
    JailResult r = run_jailed({"/bin/sh", "-c", "cat /proc/1/environ; head -c 200 /proc/1/maps; "
                                                "head -c 64 /proc/1/mem; echo done"}, o);
    say(r.started ? r.output : "not started: " + r.error, r.started ? 0 : 3);
  });
  const std::string& said = child.text;
  remove_tree(dir);
  if (child.status == 2) GTEST_SKIP() << said;
  ASSERT_EQ(child.status, 0) << said;
  EXPECT_TRUE(has(said, "done")) << said;
  EXPECT_FALSE(has(said, "hunter2") || has(said, "HOME=")) << "anvil's environment was read:\n" << said;
  EXPECT_FALSE(has(said, "r-xp")) << "PID 1's memory map was read:\n" << said;
}

TEST(JailMethod, RefusesAnUnknownMethodAndAMissingConfig) {
  ScopedEnv m("ANVIL_SANDBOX", "chroot");
  std::string why;
  EXPECT_EQ(jail_method(config(), &why), "");
  EXPECT_EQ(why, "ANVIL_SANDBOX=chroot is not a method (bubblewrap or namespaces)");
  JailOptions o;
  o.config = &config();
  JailResult r = run_jailed({"/bin/true"}, o);
  EXPECT_FALSE(r.started);
  EXPECT_EQ(r.error, "sandbox: " + why);
  o.config = nullptr;
  EXPECT_EQ(run_jailed({"/bin/true"}, o).error, "sandbox: no configuration given (share/sandbox.json)");
}

TEST(JailConfig, LoadsTheSharedFileAndNamesWhatIsWrong) {
  EXPECT_EQ(config().uid, 65534u);
  EXPECT_EQ(config().gid, 65534u);
  EXPECT_EQ(config().processes, 4096u);
  EXPECT_NE(std::find(config().system.dirs.begin(), config().system.dirs.end(), "/usr"), config().system.dirs.end());
  EXPECT_EQ(std::find(config().system.etc.begin(), config().system.etc.end(), "shadow"), config().system.etc.end());
  // The builds' view: the toolchain's system, not the host's identity (passwd) or devices (/sys).
  EXPECT_NE(std::find(config().build.dirs.begin(), config().build.dirs.end(), "/usr"), config().build.dirs.end());
  EXPECT_EQ(std::find(config().build.dirs.begin(), config().build.dirs.end(), "/sys"), config().build.dirs.end());
  EXPECT_EQ(std::find(config().build.etc.begin(), config().build.etc.end(), "passwd"), config().build.etc.end());
  fs::path dir = make_temp_dir(fs::temp_directory_path(), "anvil-jail-config");
  std::string e;
  write_file_atomic(dir / "bad.json", R"({"doc": "x", "uid": 1, "gid": 1, "tmp_bytes": 1, "shm_bytes": 1, "processes": 1,
      "episode_uid_base": 1000, "episode_uid_span": 10, "shell_data_bytes": 1, "shell_file_bytes": 1})", &e);
  JailConfig c;
  EXPECT_FALSE(load_jail_config(dir / "bad.json", &c, &e));
  EXPECT_EQ(e, (dir / "bad.json").string() + ": \"system_dirs\" is missing or of the wrong type");
  write_file_atomic(dir / "bad.json", R"({"doc": "x", "uid": 1, "gid": 1, "tmp_bytes": 1, "shm_bytes": 1, "processes": 1,
      "episode_uid_base": 1000, "episode_uid_span": 10, "shell_data_bytes": 1, "shell_file_bytes": 1,
      "system_dirs": [], "etc": [], "dev": [], "gpu_dev": [], "proc_read_only": [], "proc_masked": [],
      "build": {"system_dirs": ["/usr"]}})", &e);
  EXPECT_FALSE(load_jail_config(dir / "bad.json", &c, &e));
  EXPECT_EQ(e, (dir / "bad.json").string() + ": \"build.etc\" is missing or of the wrong type");
  write_file_atomic(dir / "bad.json", R"({"doc": "x", "uid": 1, "gid": 1, "tmp_bytes": 1, "shm_bytes": 1, "processes": 1})", &e);
  EXPECT_FALSE(load_jail_config(dir / "bad.json", &c, &e));
  EXPECT_EQ(e, (dir / "bad.json").string() + ": \"episode_uid_base\" is missing or of the wrong type");
  // The episode users: a range of their own, apart from the jails' one user
  EXPECT_GT(config().episode_uid_span, 0u);
  EXPECT_TRUE(config().uid < config().episode_uid_base || config().uid >= config().episode_uid_base + config().episode_uid_span);
  EXPECT_FALSE(load_jail_config(dir / "none.json", &c, &e));
  EXPECT_EQ(e, "cannot read the sandbox configuration " + (dir / "none.json").string());
  remove_tree(dir);
}

INSTANTIATE_TEST_SUITE_P(Jail, JailTest, ::testing::Values("bubblewrap", "namespaces"),
                         [](const ::testing::TestParamInfo<std::string>& i) { return i.param; });

}  // namespace
}  // namespace anvil
