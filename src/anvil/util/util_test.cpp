// Tests of the utilities: hashing, subprocesses, strings, atomic files.
#include <gtest/gtest.h>

#include <sys/resource.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>

#include "anvil/util/fs.h"
#include "anvil/util/hash.h"
#include "anvil/util/strings.h"
#include "anvil/util/subprocess.h"
#include "anvil/util/thread_pool.h"

namespace anvil {
namespace {

TEST(Hash, KnownAnswer) {
  // SHA-256("abc") through the delimited field format differs from the raw
  // digest, so check the raw primitive through hash_file and a fixed field.
  fs::path dir = make_temp_dir(fs::temp_directory_path(), "hash");
  std::string err;
  ASSERT_TRUE(write_file_atomic(dir / "f", "abc", &err)) << err;
  EXPECT_EQ(*hash_file(dir / "f"), sha256_hex("abc"));
  EXPECT_EQ(sha256_hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");  // FIPS 180-2's
  EXPECT_FALSE(hash_file(dir / "missing").has_value());
  remove_tree(dir);
}

TEST(Hash, FieldsAreDelimited) {
  Hasher a, b, c;
  a.add("x", "a").add("x", "bc");
  b.add("x", "ab").add("x", "c");
  c.add("x", "a").add("x", "bc");
  std::string ha = a.hex(), hb = b.hex(), hc = c.hex();
  EXPECT_NE(ha, hb);
  EXPECT_EQ(ha, hc);
}

TEST(Subprocess, ExitCodeAndOutput) {
  SubprocessResult r = run_subprocess({"sh", "-c", "echo out; echo err >&2; exit 3"});
  ASSERT_TRUE(r.started);
  EXPECT_EQ(r.exit_code, 3);
  EXPECT_FALSE(r.ok());
  EXPECT_NE(r.output.find("out"), std::string::npos);
  EXPECT_NE(r.output.find("err"), std::string::npos);
  EXPECT_EQ(r.describe(), "exit code 3");
}

TEST(Subprocess, SeparateStderrAndStdin) {
  SubprocessOptions o;
  o.merge_stderr = false;
  o.stdin_data = "hello";
  SubprocessResult r = run_subprocess({"sh", "-c", "cat; echo oops >&2"}, o);
  EXPECT_TRUE(r.ok());
  EXPECT_EQ(r.output, "hello");
  EXPECT_EQ(r.err_output, "oops\n");
}

TEST(Subprocess, Signal) {
  SubprocessResult r = run_subprocess({"sh", "-c", "kill -SEGV $$"});
  ASSERT_TRUE(r.started);
  EXPECT_EQ(r.signal, 11);
  EXPECT_NE(r.describe().find("signal 11"), std::string::npos);
}

TEST(Subprocess, TimeoutKillsTheWholeGroup) {
  SubprocessOptions o;
  o.timeout = std::chrono::milliseconds(300);
  auto t0 = std::chrono::steady_clock::now();
  // A grandchild keeps the output pipe open: the group kill must end it too.
  SubprocessResult r = run_subprocess({"sh", "-c", "sleep 30 & sleep 30"}, o);
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_TRUE(r.timed_out);
  EXPECT_LT(s, 5.0);
  EXPECT_NE(r.describe().find("timed out"), std::string::npos);
}

TEST(Subprocess, BackgroundedGrandchildDoesNotHoldTheCall) {
  auto t0 = std::chrono::steady_clock::now();
  SubprocessResult r = run_subprocess({"sh", "-c", "sleep 30 & echo done"});
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_TRUE(r.ok());
  EXPECT_NE(r.output.find("done"), std::string::npos);
  EXPECT_LT(s, 5.0);
}

TEST(Subprocess, ReportPipeOnFd3) {
  SubprocessOptions o;
  o.capture_fd3 = true;
  SubprocessResult r = run_subprocess({"sh", "-c", "echo noise; echo '{\"ok\": 1}' >&3"}, o);
  EXPECT_TRUE(r.ok());
  EXPECT_EQ(r.fd3_output, "{\"ok\": 1}\n");
  EXPECT_EQ(r.output, "noise\n");
}

TEST(Subprocess, MemoryLimitKillsTheChild) {
  SubprocessOptions o;
  o.max_rss_bytes = 200u << 20;
  o.timeout = std::chrono::seconds(60);
  // python3 is on every machine that runs the tests; it grows to 1 GiB.
  SubprocessResult r = run_subprocess({"python3", "-c", "import time; x = bytearray(1 << 30); time.sleep(30)"}, o);
  EXPECT_TRUE(r.memory_exceeded);
  EXPECT_FALSE(r.ok());
  EXPECT_GT(r.peak_rss_bytes, 200u << 20);
}

TEST(Subprocess, FileSizeLimit) {
  SubprocessOptions o;
  fs::path dir = make_temp_dir(fs::temp_directory_path(), "fsize");
  o.rlimits = {{RLIMIT_FSIZE, 1 << 20}};
  SubprocessResult r = run_subprocess({"sh", "-c", "head -c 4000000 /dev/zero > " + (dir / "big").string()}, o);
  EXPECT_FALSE(r.ok());
  EXPECT_LE(fs::file_size(dir / "big"), 1u << 20);
  remove_tree(dir);
}

TEST(Subprocess, NoNetworkInANewNamespace) {
  if (!network_isolation_available()) GTEST_SKIP() << "network namespaces are not permitted here";
  SubprocessOptions o;
  o.new_network = true;
  SubprocessResult r = run_subprocess({"sh", "-c", "cat /proc/net/dev | wc -l"}, o);
  ASSERT_TRUE(r.ok()) << r.describe();
  EXPECT_EQ(trim(r.output), "3");  // two header lines and lo: no other interface
}

TEST(Subprocess, MissingProgram) {
  SubprocessResult r = run_subprocess({"no-such-program-anvil"});
  EXPECT_FALSE(r.started);
  EXPECT_EQ(r.error, "program not found: no-such-program-anvil");
}

TEST(Subprocess, BadWorkingDirectory) {
  SubprocessOptions o;
  o.cwd = "/no/such/dir";
  SubprocessResult r = run_subprocess({"true"}, o);
  EXPECT_FALSE(r.started);
  EXPECT_NE(r.error.find("/no/such/dir"), std::string::npos);
}

TEST(Strings, ClosestWordNamesAPlausibleTypo) {
  std::vector<std::string> commands = {"init", "build", "build-sources", "eval", "task", "vet", "agent", "bench"};
  EXPECT_EQ(closest_word("evl", commands), "eval");
  EXPECT_EQ(closest_word("biuld", commands), "build");
  EXPECT_EQ(closest_word("ben", commands), "bench");  // a prefix
  EXPECT_EQ(closest_word("frobnicate", commands), "");
  EXPECT_EQ(closest_word("", commands), "");
}

TEST(Strings, Basics) {
  EXPECT_EQ(split("a,b,,c", ','), (std::vector<std::string>{"a", "b", "", "c"}));
  EXPECT_EQ(split_lines("a\r\nb\n"), (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(trim("  x y \n"), "x y");
  EXPECT_EQ(replace_all("a/x/a/x", "a/", ""), "x/x");
  EXPECT_EQ(tail_lines("1\n2\n3\n", 2), "2\n3\n");
  EXPECT_EQ(format_seconds(0.0456), "46 ms");
  EXPECT_EQ(format_seconds(2.5), "2.50 s");
}

TEST(Files, AtomicWriteAndLock) {
  fs::path dir = make_temp_dir(fs::temp_directory_path(), "files");
  std::string err;
  ASSERT_TRUE(write_file_atomic(dir / "a" / "b.txt", "one", &err)) << err;
  ASSERT_TRUE(write_file_atomic(dir / "a" / "b.txt", "two", &err)) << err;
  EXPECT_EQ(*read_file(dir / "a" / "b.txt"), "two");
  EXPECT_EQ(list_files(dir), (std::vector<fs::path>{"a/b.txt"}));  // no temp files left behind
  {
    FileLock lock(dir / "l.lock");
    EXPECT_TRUE(lock.locked());
  }
  FileLock again(dir / "l.lock");  // released by the destructor above
  EXPECT_TRUE(again.locked());
  remove_tree(dir);
}

// AtomicFile: nothing at the path until commit(); destroyed uncommitted, no file and no temp file.
TEST(Files, AtomicFileAppearsOnlyOnCommit) {
  fs::path dir = make_temp_dir(fs::temp_directory_path(), "files");
  std::string err;
  {
    AtomicFile f(dir / "out.jsonl");
    ASSERT_TRUE(f.ok()) << f.error();
    f.write("one\n");
    f.write(std::string(3u << 20, 'x'));  // past the buffer: some of it is on disk already
    EXPECT_FALSE(fs::exists(dir / "out.jsonl"));
  }
  EXPECT_TRUE(list_files(dir).empty());
  {
    AtomicFile f(dir / "out.jsonl");
    f.write("one\n");
    f.write("two\n");
    ASSERT_TRUE(f.commit(&err)) << err;
  }
  EXPECT_EQ(*read_file(dir / "out.jsonl"), "one\ntwo\n");
  EXPECT_EQ(list_files(dir), (std::vector<fs::path>{"out.jsonl"}));
  AtomicFile nowhere(dir / "out.jsonl" / "x");  // a file as a directory: cannot be created
  EXPECT_FALSE(nowhere.ok());
  EXPECT_FALSE(nowhere.commit(&err));
  EXPECT_NE(err.find("cannot create"), std::string::npos) << err;
  remove_tree(dir);
}

// run_packed: the running jobs' weights never exceed the capacity, a job heavier than it runs
// alone and is not overtaken, and as many run at once as fit.
TEST(ThreadPool, PackedJobsFitTheCapacity) {
  std::vector<double> weights = {3, 3, 3, 10, 2, 2, 2, 3};
  std::mutex mu;
  double used = 0, most = 0;
  int running = 0, most_running = 0, alone_violations = 0;
  std::vector<size_t> order;
  std::vector<std::function<void()>> jobs;
  for (size_t i = 0; i < weights.size(); ++i) {
    jobs.push_back([&, i] {
      {
        std::lock_guard<std::mutex> g(mu);
        order.push_back(i);
        used += weights[i];
        ++running;
        most = std::max(most, weights[i] > 6 ? used - weights[i] : used);
        most_running = std::max(most_running, running);
        if (weights[i] > 6 && running != 1) ++alone_violations;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(60));
      std::lock_guard<std::mutex> g(mu);
      if (weights[i] <= 6 && running > 1 && used > 6 + 1e-9) ++alone_violations;
      used -= weights[i];
      --running;
    });
  }
  run_packed(jobs, weights, 6, 8);
  EXPECT_LE(most, 6);
  EXPECT_EQ(alone_violations, 0);
  EXPECT_EQ(most_running, 3);  // 2 + 2 + 2
  // Nothing overtook the heavy job: the three before it had started, the four after had not.
  auto at = std::find(order.begin(), order.end(), size_t{3}) - order.begin();
  EXPECT_EQ(at, 3);
  // The thread limit holds too: six light jobs, two at a time.
  std::atomic<int> now{0}, peak{0};
  std::vector<std::function<void()>> light(6, [&] {
    int n = ++now;
    int p = peak.load();
    while (n > p && !peak.compare_exchange_weak(p, n)) {
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
    --now;
  });
  run_packed(light, std::vector<double>(6, 1.0), 100, 2);
  EXPECT_EQ(peak.load(), 2);
}

}  // namespace
}  // namespace anvil
