// Tests of the utilities: hashing, subprocesses, strings, atomic files.
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <stdexcept>
#include <thread>

#include "anvil/util/fs.h"
#include "anvil/util/hash.h"
#include "anvil/util/peer.h"
#include "anvil/util/strings.h"
#include "anvil/util/subprocess.h"
#include "anvil/util/thread_pool.h"
#include "support/peak_memory.h"

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

// A log a candidate wrote (a seek to 8 GiB and a line) is read by its tail: the cost is the tail's,
// in memory and in time, never the file's size. Before, its output log was read whole (4 GiB of
// zeros took the server from 16 MiB to 4 GiB of resident memory).
TEST(Files, TheTailOfASparseFileCostsTheTail) {
  fs::path dir = make_temp_dir(fs::temp_directory_path(), "files");
  fs::path log = dir / "output.log";
  {
    int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(::ftruncate(fd, 8ll << 30), 0) << "no sparse files here";
    ASSERT_EQ(::pwrite(fd, "the last line\n", 14, 8ll << 30), 14);
    ::close(fd);
  }
  const uint64_t size = (8ull << 30) + 14;
  ASSERT_TRUE(reset_peak_memory());
  uint64_t before = peak_memory_bytes();
  auto t0 = std::chrono::steady_clock::now();
  std::string why;
  uint64_t left_out = 0;
  auto tail = read_tail(log, 1 << 20, &why, &left_out);
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_TRUE(tail) << why;
  EXPECT_EQ(tail->size(), 1u << 20);
  EXPECT_EQ(tail->substr(tail->size() - 14), "the last line\n");
  EXPECT_EQ(left_out, size - (1 << 20));
  EXPECT_LT(peak_memory_bytes() - before, 64ull << 20) << "the file was read whole";
  EXPECT_LT(seconds, 2.0);
  // Its head, the same way; a short file whole, nothing left out.
  auto head = read_head(log, 4096, &why, &left_out);
  ASSERT_TRUE(head) << why;
  EXPECT_EQ(*head, std::string(4096, '\0'));
  EXPECT_EQ(left_out, size - 4096);
  std::string e;
  ASSERT_TRUE(write_file_atomic(dir / "short.log", "one\ntwo\n", &e)) << e;
  EXPECT_EQ(read_tail(dir / "short.log", 1 << 20, &why, &left_out).value_or("?"), "one\ntwo\n");
  EXPECT_EQ(left_out, 0u);
  EXPECT_EQ(read_tail(dir / "short.log", 4, &why).value_or("?"), "two\n");
  EXPECT_EQ(read_head(dir / "short.log", 4, &why).value_or("?"), "one\n");
  // What is not a regular file is refused as read_regular refuses it, never waited on.
  ASSERT_EQ(::mkfifo((dir / "fifo").c_str(), 0644), 0);
  EXPECT_FALSE(read_tail(dir / "fifo", 1 << 20, &why));
  EXPECT_EQ(why, "is a FIFO");
  EXPECT_FALSE(read_head(dir / "missing", 1 << 20, &why));
  EXPECT_EQ(why, "does not exist");
  remove_tree(dir);
}

// A file is hashed in bounded chunks (its size costs time, not memory), and never waited on.
// What a build reads of a candidate's directory (issue 55): opened beneath it, so nothing swapped in
// on the way (a directory replaced by a link out, between a check and the read) leads outside.
TEST(Files, ReadBeneathNeverLeavesItsRoot) {
  fs::path dir = make_temp_dir(fs::temp_directory_path(), "anvil-beneath");
  fs::path root = dir / "root", outside = dir / "outside";
  std::string e, why;
  ASSERT_TRUE(write_file_atomic(root / "kernels" / "a.cu", "inside", &e)) << e;
  ASSERT_TRUE(write_file_atomic(outside / "secret.h", "host secret", &e)) << e;
  fs::create_symlink("a.cu", root / "kernels" / "same.cu");                 // a link that stays beneath
  fs::create_symlink(outside / "secret.h", root / "kernels" / "abs.h");     // absolute, out
  fs::create_symlink("../../outside/secret.h", root / "kernels" / "up.h");  // relative, out
  fs::create_symlink(outside, root / "linked");                             // a directory on the way, out
  EXPECT_EQ(read_beneath(root, "kernels/a.cu", 1 << 20, &why).value_or("?"), "inside") << why;
  EXPECT_EQ(read_beneath(root, "kernels/same.cu", 1 << 20, &why).value_or("?"), "inside") << why;
  for (const char* rel : {"kernels/abs.h", "kernels/up.h", "linked/secret.h", "../outside/secret.h"}) {
    auto got = read_beneath(root, rel, 1 << 20, &why);
    EXPECT_FALSE(got) << rel << ": " << *got;
    EXPECT_NE(why.find("leads outside"), std::string::npos) << rel << ": " << why;
  }
  EXPECT_FALSE(read_beneath(root, "kernels", 1 << 20, &why));
  EXPECT_EQ(why, "is a directory");
  EXPECT_FALSE(read_beneath(root, "kernels/none.cu", 1 << 20, &why));
  EXPECT_EQ(why, "does not exist");
  remove_tree(dir);
}

TEST(Files, HashingAFileStreamsIt) {
  fs::path dir = make_temp_dir(fs::temp_directory_path(), "files");
  std::string e;
  ASSERT_TRUE(write_file_atomic(dir / "abc", "abc", &e)) << e;
  EXPECT_EQ(hash_file(dir / "abc"), sha256_hex("abc"));
  std::string big(300000, 'x');  // several chunks
  ASSERT_TRUE(write_file_atomic(dir / "big", big, &e)) << e;
  EXPECT_EQ(hash_file(dir / "big"), sha256_hex(big));
  ASSERT_EQ(::mkfifo((dir / "fifo").c_str(), 0644), 0);
  EXPECT_EQ(hash_file(dir / "fifo"), std::nullopt);
  EXPECT_EQ(hash_file(dir), std::nullopt);
  remove_tree(dir);
}

// A TempDir goes with its scope, however it is left; a moved-from one removes nothing.
TEST(Files, TempDirIsRemovedOnEveryWayOut) {
  fs::path parent = make_temp_dir(fs::temp_directory_path(), "anvil-tempdir");
  fs::path kept;
  try {
    TempDir d(parent, "eval");
    kept = d.path();
    std::string err;
    ASSERT_TRUE(write_file_atomic(d.path() / "candidate" / "model_new.py", "x", &err)) << err;
    throw std::runtime_error("a command failed");
  } catch (const std::runtime_error&) {
  }
  EXPECT_FALSE(fs::exists(kept));
  {
    TempDir outer;
    {
      TempDir inner(parent, "stage");
      kept = inner.path();
      outer = std::move(inner);
    }
    EXPECT_TRUE(fs::is_directory(kept));  // moved out, not removed
  }
  EXPECT_FALSE(fs::exists(kept));
  EXPECT_TRUE(fs::is_empty(parent));
  remove_tree(parent);
}

// Atomic writes go through a temporary name of their own beside the target: a legal 254-byte name
// (NAME_MAX is 255) once got a suffix and could not be written or copied.
TEST(Files, AtomicWritesTakeNamesUpToNameMax) {
  fs::path dir = make_temp_dir(fs::temp_directory_path(), "anvil-long-name");
  std::string name(250, 'n');
  name += ".txt";
  std::string err;
  EXPECT_TRUE(write_file_atomic(dir / name, "x", &err)) << err;
  bool from_failed = true;
  EXPECT_TRUE(copy_regular_atomic(dir / name, dir / "copy" / name, 1024, &err, &from_failed)) << err;
  EXPECT_EQ(*read_file(dir / "copy" / name), "x");
  AtomicFile f(dir / "other" / name);
  f.write("y");
  EXPECT_TRUE(f.commit(&err)) << err;
  // A name the destination cannot hold is the source's to answer for, not the disk's.
  fs::create_directories(dir / "in-the-way" / name);
  EXPECT_FALSE(copy_regular_atomic(dir / name, dir / "in-the-way" / name, 1024, &err, &from_failed));
  EXPECT_TRUE(from_failed) << err;
  std::string too_long(300, 'n');
  EXPECT_FALSE(write_file_atomic(dir / too_long, "x", &err));
  EXPECT_EQ(err, "cannot rename into " + (dir / too_long).string() + ": File name too long");
  EXPECT_EQ(list_files(dir).size(), 3u) << "a temporary file was left behind";
  remove_tree(dir);
}

// A job that throws (a worker thread's exception was std::terminate: a build's unit once aborted
// anvil) ends no process: the others run, and the caller gets the first exception.
TEST(ThreadPool, AJobThatThrowsReachesTheCaller) {
  for (unsigned threads : {1u, 4u}) {
    std::atomic<int> ran{0};
    std::vector<std::function<void()>> jobs;
    for (int i = 0; i < 6; ++i) {
      jobs.push_back([&ran, i] {
        ++ran;
        if (i == 2) throw std::runtime_error("unit 2 failed");
      });
    }
    try {
      run_parallel(jobs, threads);
      ADD_FAILURE() << "run_parallel did not throw (" << threads << " threads)";
    } catch (const std::runtime_error& e) {
      EXPECT_STREQ(e.what(), "unit 2 failed");
    }
    EXPECT_EQ(ran, 6);
    ran = 0;
    EXPECT_THROW(run_packed(jobs, std::vector<double>(6, 1.0), 2, threads), std::runtime_error);
    EXPECT_EQ(ran, 6);
  }
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

// A loopback listener, a client connected to it and the server's end of that connection.
struct LoopbackPair {
  int listener = -1, client = -1, server = -1;
  LoopbackPair() {
    listener = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    if (bind(listener, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || listen(listener, 4) != 0 ||
        getsockname(listener, reinterpret_cast<sockaddr*>(&a), &len) != 0)
      return;
    client = socket(AF_INET, SOCK_STREAM, 0);
    if (connect(client, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) return;
    server = accept(listener, nullptr, nullptr);
  }
  ~LoopbackPair() {
    for (int fd : {listener, client, server}) {
      if (fd >= 0) close(fd);
    }
  }
};

TEST(Peer, TellsWhoConnected) {
  LoopbackPair p;
  ASSERT_GE(p.server, 0);
  std::string err;
  auto uid = loopback_peer_uid(p.server, &err);
  ASSERT_TRUE(uid) << err;
  EXPECT_EQ(*uid, geteuid());
}

// The red team's bypass: a client that sends and closes at once; its orphaned socket is kept as a
// TIME_WAIT entry, which the kernel lists as uid 0. Such a peer is nobody, never root.
TEST(Peer, APeerThatClosedIsNobodyNotRoot) {
  LoopbackPair p;
  ASSERT_GE(p.server, 0);
  close(p.client);
  p.client = -1;
  std::this_thread::sleep_for(std::chrono::milliseconds(400));  // past the server's delayed ACK
  std::string err;
  auto uid = loopback_peer_uid(p.server, &err);
  EXPECT_FALSE(uid) << "the closed peer was taken for uid " << *uid;
  EXPECT_NE(err.find("closed"), std::string::npos) << err;
}

}  // namespace
}  // namespace anvil
