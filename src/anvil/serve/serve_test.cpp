// `anvil serve`: the store alone, then the real server process over real HTTP judging the CPU
// variants (kill -9 and restarts included).
#include <arpa/inet.h>
#include <fcntl.h>
#include <grp.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <atomic>
#include <thread>

#include "anvil/agent/http.h"
#include "anvil/agent/tools.h"
#include "support/test_env.h"
#include "anvil/env/workdir.h"
#include "anvil/serve/ray_pool.h"
#include "anvil/serve/requests.h"
#include "anvil/serve/service.h"
#include "anvil/serve/store.h"
#include "anvil/util/fs.h"
#include "anvil/util/hash.h"
#include "anvil/util/strings.h"

namespace anvil {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;
const std::string kSource = ANVIL_SOURCE_DIR;

fs::path fresh_dir(const std::string& name) {
  fs::path d = fs::path(ANVIL_TEST_CACHE_DIR) / "serve-tests" / name;
  std::error_code ec;
  fs::remove_all(d, ec);
  fs::create_directories(d, ec);
  return d;
}

TEST(ServeStore, AcceptedIsDurableAndAKeyIsOneJob) {
  fs::path db = fresh_dir("store-durable") / "store.db";
  std::string err;
  int64_t id = 0;
  {
    auto s = Store::open(db, &err);
    ASSERT_TRUE(s) << err;
    Store::Accepted a = s->accept("k", {{"n", 1}}, 10);
    EXPECT_FALSE(a.existed);
    id = a.id;
    Store::Accepted again = s->accept("k", {{"n", 2}}, 10);
    EXPECT_TRUE(again.existed);
    EXPECT_EQ(again.id, id);
    EXPECT_NE(s->accept("", {{"n", 3}}, 10).id, s->accept("", {{"n", 4}}, 10).id) << "no key: a new job each time";
  }
  auto s = Store::open(db, &err);  // reopened: what was accepted is there
  ASSERT_TRUE(s) << err;
  auto j = s->get(id);
  ASSERT_TRUE(j);
  EXPECT_EQ(j->request["n"], 1);
  EXPECT_EQ(j->state, JobState::kQueued);
  EXPECT_EQ(s->counts()[JobState::kQueued], 3);
  EXPECT_FALSE(s->get(999));
}

TEST(ServeStore, TheQueueIsBoundedButAKnownKeyIsStillAnswered) {
  std::string err;
  auto s = Store::open(fresh_dir("store-bound") / "store.db", &err);
  ASSERT_TRUE(s) << err;
  EXPECT_FALSE(s->accept("a", {}, 2).full);
  EXPECT_FALSE(s->accept("b", {}, 2).full);
  Store::Accepted c = s->accept("c", {}, 2);
  EXPECT_TRUE(c.full);
  EXPECT_EQ(c.id, 0);
  Store::Accepted a = s->accept("a", {}, 2);
  EXPECT_FALSE(a.full);
  EXPECT_TRUE(a.existed);
  ASSERT_TRUE(s->claim());  // one leaves the queue: room again
  EXPECT_FALSE(s->accept("c", {}, 2).full);
}

TEST(ServeStore, ClaimsInOrderAndRecoversOnceThenFails) {
  std::string err;
  fs::path db = fresh_dir("store-recover") / "store.db";
  auto s = Store::open(db, &err);
  ASSERT_TRUE(s) << err;
  int64_t first = s->accept("", {{"n", 1}}, 10).id;
  int64_t second = s->accept("", {{"n", 2}}, 10).id;
  auto j = s->claim();
  ASSERT_TRUE(j);
  EXPECT_EQ(j->id, first);
  EXPECT_EQ(j->state, JobState::kRunning);
  EXPECT_EQ(j->attempts, 1);
  s->finish(first, {{"outcome", "ok"}});
  EXPECT_EQ(s->get(first)->state, JobState::kDone);
  EXPECT_EQ(s->get(first)->result["outcome"], "ok");
  ASSERT_EQ(s->claim()->id, second);  // the server "dies" with it running
  s.reset();
  s = Store::open(db, &err);
  Store::Recovered r = s->recover(2);
  EXPECT_EQ(r.requeued, 1);
  EXPECT_EQ(r.failed, 0);
  ASSERT_EQ(s->claim()->attempts, 2);  // run again, and the server dies again
  s.reset();
  s = Store::open(db, &err);
  r = s->recover(2);
  EXPECT_EQ(r.requeued, 0);
  EXPECT_EQ(r.failed, 1);
  auto done = s->get(second);
  EXPECT_EQ(done->state, JobState::kDone);
  EXPECT_EQ(done->result["outcome"], "runtime_error");
  EXPECT_EQ(done->result["reward"], -1);
  EXPECT_FALSE(s->claim());
}

TEST(ServeStore, ClaimsTheJobsNamedFirstThenTheOldest) {
  std::string err;
  auto s = Store::open(fresh_dir("store-first") / "store.db", &err);
  ASSERT_TRUE(s) << err;
  int64_t a = s->accept("", {{"n", 1}}, 10).id;
  int64_t b = s->accept("", {{"n", 2}}, 10).id;
  int64_t c = s->accept("", {{"n", 3}}, 10).id;
  EXPECT_EQ(s->queued_ids(), (std::vector<int64_t>{a, b, c}));
  EXPECT_EQ(s->claim({c, b})->id, b);  // the oldest of those named (built ahead)
  EXPECT_EQ(s->claim({b, 12345}, a)->id, c);  // none named is queued: the oldest but the one being built
  EXPECT_EQ(s->claim({}, a)->id, a);          // which is next when it is the only one
  EXPECT_FALSE(s->claim({a, b, c}));
  EXPECT_TRUE(s->queued_ids().empty());
}

TEST(ServeStore, ARequeueCountsTheAttemptOrGivesItBack) {
  std::string err;
  auto s = Store::open(fresh_dir("store-requeue") / "store.db", &err);
  ASSERT_TRUE(s) << err;
  int64_t id = s->accept("", {{"n", 1}}, 10).id;
  ASSERT_EQ(s->claim()->attempts, 1);
  s->requeue(id, true);  // its worker died under it
  EXPECT_EQ(s->get(id)->state, JobState::kQueued);
  ASSERT_EQ(s->claim()->attempts, 2);
  s->requeue(id, false);  // the pool was gone: not its doing
  ASSERT_EQ(s->claim()->attempts, 2);
  s->finish(id, {{"outcome", "ok"}});
  s->requeue(id, true);  // a finished job stays finished
  EXPECT_EQ(s->get(id)->state, JobState::kDone);
}

TEST(ServeStore, DoneJobsAreForgottenAfterTheirTime) {
  std::string err;
  auto s = Store::open(fresh_dir("store-forget") / "store.db", &err);
  ASSERT_TRUE(s) << err;
  int64_t done = s->accept("k1", {{"n", 1}}, 10).id;
  int64_t queued = s->accept("k2", {{"n", 2}}, 10).id;
  ASSERT_EQ(s->claim()->id, done);
  s->finish(done, {{"outcome", "ok"}});
  EXPECT_EQ(s->forget_done_before(unix_seconds() - 60), 0) << "finished just now: kept";
  EXPECT_EQ(s->forget_done_before(unix_seconds() + 1), 1);
  EXPECT_FALSE(s->get(done));
  EXPECT_TRUE(s->get(queued)) << "only done jobs are forgotten";
  EXPECT_FALSE(s->accept("k1", {{"n", 1}}, 10).existed) << "its key went with it";
}

// What a Ray worker is sent: the files as an evaluation would copy them, text as text and bytes
// that are not UTF-8 as base64 (read back as they were); a candidate over the copy's limits is
// refused as its own doing.
TEST(RayPool, ARequestsPathsAreSentAsTheirContent) {
  auto write_file = [](const fs::path& p, const std::string& text) {
    std::string e;
    return write_file_atomic(p, text, &e);
  };
  fs::path dir = fresh_dir("ray-inline");
  fs::path cand = dir / "cand";
  const std::string elf("\x7f" "ELF\x01\xff\xfe\x00", 8);
  ASSERT_TRUE(write_file(cand / "kernels" / "a.cu", "__global__ void k() {}\n"));
  ASSERT_TRUE(write_file(cand / "model_new.py", "import torch\n"));
  ASSERT_TRUE(write_file(cand / "test", elf));  // an executable an agent's shell left
  ASSERT_TRUE(write_file(cand / "build" / "a.o", elf));
  fs::path task = fs::path(kSource) / "examples" / "tasks" / "01_elementwise_chain.py";
  std::string err;
  bool refused = true;
  Json req = {{"task", {{"path", task.string()}}}, {"candidate", {{"path", cand.string()}}}, {"options", {{"seed", 1}}}};
  std::optional<Json> out = inline_request(test_environment(), req, &err, &refused);
  ASSERT_TRUE(out) << err;
  EXPECT_FALSE(refused);
  EXPECT_EQ((*out)["task"]["name"], "01_elementwise_chain.py");
  EXPECT_EQ((*out)["task"]["source"], *read_file(task));
  const Json& files = (*out)["candidate"]["files"];
  EXPECT_EQ(files.size(), 3u) << files.dump();  // build/ is not a candidate's
  EXPECT_EQ(files["kernels/a.cu"], "__global__ void k() {}\n");
  ASSERT_TRUE(files["test"].is_object()) << files.dump();
  EXPECT_EQ(file_content(files["test"]), elf);
  EXPECT_EQ((*out)["options"]["seed"], 1);
  Json valid;
  EXPECT_FALSE(validate_candidate(*out, RequestLimits{}, &valid)) << "what the worker's server takes";
  Json file = {{"task", {{"path", task.string()}}}, {"candidate", {{"path", (cand / "model_new.py").string()}}}};
  out = inline_request(test_environment(), file, &err, &refused);
  ASSERT_TRUE(out) << err;
  EXPECT_EQ((*out)["candidate"]["source"], "import torch\n");
  // and the sources beside it, which its load() calls may name (the single file's copy's rule)
  EXPECT_EQ((*out)["candidate"]["beside"], Json({{"kernels/a.cu", "__global__ void k() {}\n"}}));
  EXPECT_FALSE(validate_candidate(*out, RequestLimits{}, &valid));
  Json own = *out;
  own["candidate"]["beside"]["model_new.py"] = "x";
  EXPECT_EQ(validate_candidate(own, RequestLimits{}, &valid)->field, "candidate.beside[\"model_new.py\"]");
  // Over the copy's limit: the candidate's doing.
  std::FILE* f = std::fopen((cand / "kernels" / "huge.bin").c_str(), "wb");
  ASSERT_TRUE(f);
  ASSERT_EQ(std::fseek(f, static_cast<long>(kMaxCandidateFileBytes), SEEK_SET), 0);
  std::fputc(1, f);
  std::fclose(f);
  EXPECT_FALSE(inline_request(test_environment(), req, &err, &refused));
  EXPECT_TRUE(refused) << err;
  EXPECT_NE(err.find("huge.bin"), std::string::npos) << err;
  // Bad base64 is the request's error, by field.
  Json bad = {{"candidate", {{"files", {{"model_new.py", "x"}, {"b", {{"base64", "@@@="}}}}}}}};
  std::optional<Invalid> why = validate_candidate(bad, RequestLimits{}, &valid);
  ASSERT_TRUE(why);
  EXPECT_EQ(why->field, "candidate.files[\"b\"].base64");
  EXPECT_EQ(*base64_decode(base64_encode("ab")), "ab");
  EXPECT_EQ(*base64_decode(base64_encode("")), "");
}

TEST(RayPool, ABridgeThatDoesNotStartIsOneSentenceWithItsLog) {
  fs::path dir = fresh_dir("ray-bridge");
  RayOptions o;
  o.address = "127.0.0.1:1";
  o.device = Device::Cpu;
  o.python = "/bin/false";
  o.log = dir / "bridge.log";
  std::string err;
  EXPECT_FALSE(RayPool::start(test_environment(), o, &err));
  EXPECT_NE(err.find("the Ray bridge (/bin/false -m anvil.ray_pool) did not start; its log"), std::string::npos) << err;
}

// A tool call waits for a device only while its episode lasts: it gives up at the episode's wall
// clock or when the episode is ended (the red team: a verify answered 44 s past its episode's wall
// clock, having waited for another session's candidate to let the GPU go).
TEST(ServeSlots, AWaiterGivesUpAtItsDeadlineOrWhenItsEpisodeEnds) {
  Slots gpu({0});
  int held = gpu.acquire(0);
  auto t0 = std::chrono::steady_clock::now();
  EXPECT_FALSE(gpu.acquire_until(1, t0 + std::chrono::milliseconds(300), nullptr));
  double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_GE(waited, 0.29);
  EXPECT_LT(waited, 5.0);
  std::atomic<bool> ended{false};
  std::thread ender([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    ended = true;
  });
  EXPECT_FALSE(gpu.acquire_until(1, std::nullopt, &ended));
  ender.join();
  EXPECT_EQ(gpu.waiting(1), 0) << "a waiter that gave up is no longer counted";
  gpu.release(held);
  std::atomic<bool> live{false};
  EXPECT_EQ(gpu.acquire_until(1, std::chrono::steady_clock::now() + std::chrono::seconds(5), &live), 0);
}

// A session's verify (priority 1) goes ahead of a queued evaluation (0) waiting for the same GPU.
TEST(ServeSlots, AWaiterOfHigherPriorityIsServedFirst) {
  Slots gpu({0});
  int held = gpu.acquire(0);
  std::mutex mu;
  std::vector<std::string> order;
  auto waiter = [&](const std::string& name, int priority) {
    return std::thread([&, name, priority] {
      int id = gpu.acquire(priority);
      {
        std::lock_guard<std::mutex> g(mu);
        order.push_back(name);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      gpu.release(id);
    });
  };
  std::thread low = waiter("evaluation", 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));  // it waits first
  std::thread high = waiter("verify", 1);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  gpu.release(held);
  low.join();
  high.join();
  EXPECT_EQ(order, (std::vector<std::string>{"verify", "evaluation"}));
}

// ... but not for ever: a stream of verifies lets a queued evaluation through every few grants.
TEST(ServeSlots, ALowerWaiterIsServedAfterAFewGrantsPassItOver) {
  Slots gpu({0});
  int held = gpu.acquire(0);
  std::mutex mu;
  std::vector<std::string> order;
  std::vector<std::thread> threads;
  auto waiter = [&](const std::string& name, int priority) {
    threads.emplace_back([&, name, priority] {
      int id = gpu.acquire(priority);
      {
        std::lock_guard<std::mutex> g(mu);
        order.push_back(name);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
      gpu.release(id);
    });
  };
  waiter("evaluation", 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  for (int i = 0; i < 10; ++i) waiter("verify", 1);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  gpu.release(held);
  for (auto& t : threads) t.join();
  size_t at = std::find(order.begin(), order.end(), "evaluation") - order.begin();
  EXPECT_GE(at, 1u) << "verifies first";
  EXPECT_LE(at, 4u) << "the evaluation waited past the limit on skips";
}

// Two slots of one GPU and two of another: callers spread over the GPUs first, and a GPU's held
// time counts while any of its slots is held, once.
TEST(ServeSlots, AGpusSlotsFillEvenlyAndItsHeldTimeCountsOnce) {
  Slots gpus({0, 0, 1, 1});
  int a = gpus.acquire(0), b = gpus.acquire(0);
  EXPECT_NE(a, b) << "the second caller went to the busy GPU while the other was idle";
  int c = gpus.acquire(0), d = gpus.acquire(0);
  EXPECT_EQ(a + b + c + d, 2);  // 0, 1, 0, 1 in some order
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  gpus.release(a);
  gpus.release(b);
  gpus.release(c);
  gpus.release(d);
  double held = gpus.held_seconds(0);
  EXPECT_GE(held, 0.19);
  EXPECT_LT(held, 0.35) << "two holds at once counted twice";
}

// A Hold of nothing (-1: a caller that took no slot) gives nothing back: the slots stay as many as
// there are (a release of -1 once added a slot for good, and with it an evaluation beside another).
TEST(ServeSlots, ReleasingASlotNeverTakenChangesNothing) {
  Slots one({0});
  { Slots::Hold nothing{&one, -1}; }
  one.release(7);
  int a = one.acquire(0);
  EXPECT_EQ(a, 0);
  std::atomic<bool> second{false};
  std::thread t([&] {
    one.release(one.acquire(0));
    second = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_FALSE(second) << "a second slot was granted while the only one is held";
  one.release(a);
  t.join();
  EXPECT_TRUE(second);
}

// `anvil serve --overlap 2` on two GPUs, its judge replaced by a runner that answers a canned
// correct report after a while (no GPU here): two evaluations at once on each GPU, never a third,
// each taking its GPU's lock with its wave ("together"); --overlap 1 takes no lock.
class WaveRunner : public RunnerLauncher {
 public:
  Launch launch(const Environment&, const EvalOptions& opts, const Json& request, const SubprocessOptions&,
                const fs::path&) const override {
    {
      std::lock_guard<std::mutex> g(mu);
      requests.push_back(request);
      gpus.push_back(opts.gpu);
      int now = ++running[opts.gpu];
      most[opts.gpu] = std::max(most[opts.gpu], now);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    {
      std::lock_guard<std::mutex> g(mu);
      --running[opts.gpu];
    }
    Json timing = {{"median_ms", 1.0}, {"min_ms", 1.0}, {"p25_ms", 1.0}, {"p75_ms", 1.0}, {"batch", {{"per_call_ms", 1.0}}}};
    Launch l;
    l.result.started = true;
    l.result.exit_code = 0;
    l.result.fd3_output = Json{{"status", "done"}, {"outcome", nullptr}, {"verify", {{"passed", 3}}},
                               {"timing", {{"candidate", timing}, {"eager", timing}, {"compile", timing}}}}.dump();
    return l;
  }
  mutable std::mutex mu;
  mutable std::vector<Json> requests;
  mutable std::vector<int> gpus;
  mutable std::map<int, int> running, most;
};

// A host with `gpus` test GPUs and no Python, a task and a candidate written under `dir`, and a
// service's options over it that judge on CUDA through `runner`.
struct FakeGpuHost {
  Environment env;
  ServeOptions so;
  Json body;  // a request for the task and candidate
};
FakeGpuHost fake_gpu_host(const fs::path& dir, int gpus, const RunnerLauncher* runner) {
  FakeGpuHost h;
  h.env.home = ANVIL_SOURCE_DIR;
  h.env.cache = dir / "cache";
  h.env.python = "/nonexistent/python3";
  h.env.torch.present = true;
  for (int g = 0; g < gpus; ++g) h.env.gpus.push_back(Gpu{g, "Test GPU", "9.0"});
  std::string err;
  EXPECT_TRUE(write_file_atomic(dir / "model.py", "class Model: pass\n", &err)) << err;
  EXPECT_TRUE(write_file_atomic(dir / "model_new.py", "class ModelNew: pass\n", &err)) << err;
  h.so.state_dir = dir / "state";
  h.so.defaults.device = Device::Cuda;
  h.so.defaults.vet = false;
  h.so.defaults.use_baseline_cache = false;
  h.so.defaults.runner = runner;
  h.so.gpus = {0};
  h.body = {{"task", {{"path", (dir / "model.py").string()}}}, {"candidate", {{"path", (dir / "model_new.py").string()}}}};
  return h;
}

std::vector<std::string> judge_waves(int overlap, WaveRunner* runner, int n) {
  fs::path dir = make_temp_dir(fs::temp_directory_path(), "anvil-serve-waves");
  FakeGpuHost host = fake_gpu_host(dir, 2, runner);
  host.so.gpus = {0, 1};
  host.so.overlap = overlap;
  Service service(host.env, host.so);
  std::string err;
  EXPECT_TRUE(service.start(&err)) << err;
  std::vector<std::string> ids, outcomes;
  for (int i = 0; i < n; ++i) {
    Json body = host.body;
    body["options"] = {{"seed", static_cast<unsigned>(i + 1)}};
    ServeReply r = service.submit(body, "");
    EXPECT_EQ(r.status, 202) << r.body.dump();
    ids.push_back(r.body.value("id", std::string()));
  }
  for (const std::string& id : ids) {
    ServeReply r = service.get(id, std::chrono::seconds(30));
    outcomes.push_back(r.body.value("outcome", Json("?")).dump());
  }
  service.stop();
  remove_tree(dir);
  return outcomes;
}

TEST(ServeLanes, WithOverlapEachGpuPreparesAWaveAndTimesUnderItsLock) {
  WaveRunner waves;
  std::vector<std::string> outcomes = judge_waves(2, &waves, 8);
  EXPECT_EQ(outcomes, std::vector<std::string>(8, "\"ok\""));
  ASSERT_EQ(waves.requests.size(), 8u);
  for (const Json& r : waves.requests) {
    EXPECT_EQ(r.value("prepare", ""), "together") << r.dump();
    EXPECT_NE(r.value("gpu_lock", "").find("gpu"), std::string::npos) << r.dump();
  }
  EXPECT_EQ(waves.most[0], 2) << "GPU 0 never ran two at once";
  EXPECT_EQ(waves.most[1], 2) << "GPU 1 never ran two at once";
  EXPECT_EQ(std::count(waves.gpus.begin(), waves.gpus.end(), 0), 4);

  WaveRunner alone;
  outcomes = judge_waves(1, &alone, 4);
  EXPECT_EQ(outcomes, std::vector<std::string>(4, "\"ok\""));
  for (const Json& r : alone.requests) EXPECT_FALSE(r.contains("gpu_lock")) << r.dump();
  EXPECT_EQ(alone.most[0], 1);
  EXPECT_EQ(alone.most[1], 1);
}

// A runner that reports it could not do its work (as the real one does for a device it cannot use).
class UnableRunner : public RunnerLauncher {
 public:
  Launch launch(const Environment&, const EvalOptions&, const Json&, const SubprocessOptions&,
                const fs::path&) const override {
    Launch l;
    l.result.started = true;
    l.result.exit_code = 0;
    l.result.fd3_output = Json{{"status", "error"}, {"message", "no such device"}}.dump();
    return l;
  }
};

// What anvil could not evaluate is answered as outcome error, no reward, and whose fault it is, as
// `anvil eval --json` says it: the judge's process (runner), or the machine (environment: a CUDA
// service on a host whose GPUs are gone).
TEST(ServeLanes, WhatCannotBeEvaluatedSaysWhoseFaultItIs) {
  UnableRunner unable;
  auto judge_one = [&](bool gpus) {
    fs::path dir = make_temp_dir(fs::temp_directory_path(), "anvil-serve-errors");
    FakeGpuHost host = fake_gpu_host(dir, gpus ? 1 : 0, &unable);
    Service service(host.env, host.so);
    std::string err;
    EXPECT_TRUE(service.start(&err)) << err;
    ServeReply accepted = service.submit(host.body, "");
    EXPECT_EQ(accepted.status, 202) << accepted.body.dump();
    Json done = service.get(accepted.body.value("id", std::string()), std::chrono::seconds(30)).body;
    service.stop();
    remove_tree(dir);
    return done;
  };
  Json runner = judge_one(true);
  EXPECT_EQ(runner["status"], "done") << runner.dump();
  EXPECT_EQ(runner["outcome"], "error") << runner.dump();
  EXPECT_TRUE(runner["reward"].is_null()) << runner.dump();
  EXPECT_EQ(runner["error_kind"], "runner") << runner.dump();
  EXPECT_NE(runner["message"].get<std::string>().find("no such device"), std::string::npos) << runner.dump();
  Json no_gpu = judge_one(false);
  EXPECT_EQ(no_gpu["outcome"], "error") << no_gpu.dump();
  EXPECT_EQ(no_gpu["error_kind"], "environment") << no_gpu.dump();
  EXPECT_NE(no_gpu["message"].get<std::string>().find("no GPU found"), std::string::npos) << no_gpu.dump();
}

// The server as users run it: `anvil serve --port 0 --device cpu ...`, its first line read for the port.
class Server {
 public:
  Server(const fs::path& state, std::vector<std::string> extra = {}, std::vector<std::string> env = {}) {
    test_environment();  // ANVIL_CACHE: the tests' cache
    int out[2];
    if (pipe(out) != 0) return;
    int err_fd = ::open((state.string() + ".stderr").c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    pid_ = fork();
    if (pid_ == 0) {
      setpgid(0, 0);
      dup2(out[1], 1);
      if (err_fd >= 0) dup2(err_fd, 2);
      close(out[0]);
      close(out[1]);
      for (const auto& e : env) putenv(const_cast<char*>(e.c_str()));
      std::vector<std::string> args = {ANVIL_BINARY, "serve", "--port", "0", "--device", "cpu", "--state", state.string(),
                                       "--compile-mode", "none", "--calls", "5", "--warmup", "1", "--input-sets", "2",
                                       "--trials", "3", "--builders", "2"};
      args.insert(args.end(), extra.begin(), extra.end());
      std::vector<char*> argv;
      for (auto& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      execv(argv[0], argv.data());
      _exit(127);
    }
    if (err_fd >= 0) close(err_fd);
    close(out[1]);
    FILE* f = fdopen(out[0], "r");
    char line[512] = {0};
    if (f && std::fgets(line, sizeof line, f)) {
      first_line_ = trim(line);
      size_t colon = first_line_.rfind(':', first_line_.find(" ("));
      if (starts_with(first_line_, "anvil serve: http://") && colon != std::string::npos) {
        port_ = std::stoi(first_line_.substr(colon + 1));
      }
    }
    if (f) std::fclose(f);
  }
  ~Server() { kill9(); }
  void kill9() {
    if (pid_ > 0) {
      kill(-pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
      pid_ = -1;
    }
  }
  int exit_code() {  // waits
    int st = 0;
    waitpid(pid_, &st, 0);
    pid_ = -1;
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  }
  int port() const { return port_; }
  void signal(int sig) { kill(pid_, sig); }

  HttpResponse call(const std::string& method, const std::string& path, const std::string& body = "",
                    std::vector<std::string> headers = {}) {
    HttpRequest r;
    r.method = method;
    r.url = "http://127.0.0.1:" + std::to_string(port_) + path;
    r.body = body;
    r.headers = headers;
    r.headers.push_back("Content-Type: application/json");
    r.timeout = std::chrono::seconds(120);
    return client_->send(r);
  }
  Json json(const std::string& method, const std::string& path, const Json& body = nullptr,
            std::vector<std::string> headers = {}, long* status = nullptr) {
    HttpResponse r = call(method, path, body.is_null() ? "" : body.dump(), headers);
    if (status) *status = r.status;
    return Json::parse(r.body, nullptr, false);
  }
  // Polls (long polls of 30 s) until done, up to `limit`.
  Json wait_done(const std::string& id, std::chrono::seconds limit = std::chrono::seconds(180)) {
    auto end = std::chrono::steady_clock::now() + limit;
    Json j;
    do {
      j = json("GET", "/v1/evaluations/" + id + "?wait=30");
    } while (j.value("status", "") != "done" && std::chrono::steady_clock::now() < end);
    return j;
  }
  // Until the job is running (a lane claimed it).
  bool wait_running(const std::string& id) {
    for (int i = 0; i < 300; ++i) {
      if (json("GET", "/v1/evaluations/" + id).value("status", "") == "running") return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return false;
  }

 private:
  int pid_ = -1;
  int port_ = 0;
  std::string first_line_;
  std::unique_ptr<HttpClient> client_ = make_http_client();
};

Json by_path(const std::string& candidate) {
  return {{"task", {{"path", small_task()}}}, {"candidate", {{"path", kSource + "/" + candidate}}},
          {"options", {{"seed", 7}}}};
}

// A workdir's files as the request's candidate.files.
Json files_of(const fs::path& dir) {
  Json files = Json::object();
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    if (e.is_regular_file()) files[fs::relative(e.path(), dir).string()] = *read_file(e.path());
  }
  return files;
}

TEST(Serve, JudgesCandidatesByPathAndByTextAndAnswersBadInputByField) {
  fs::path state = fresh_dir("judges");
  Server s(state / "state");
  ASSERT_GT(s.port(), 0);
  EXPECT_EQ(s.json("GET", "/health")["status"], "ok");

  long status = 0;
  Json ok = s.json("POST", "/v1/evaluations", by_path("examples/candidates/01_elementwise_chain/cpu"), {}, &status);
  EXPECT_EQ(status, 202) << ok.dump();
  Json inline_req = {{"task", {{"source", *read_file(small_task())}, {"name", "chain.py"}}},
                     {"candidate", {{"files", files_of(kSource + "/examples/candidates/01_elementwise_chain/cpu")}}}};
  Json by_text = s.json("POST", "/v1/evaluations", inline_req, {}, &status);
  EXPECT_EQ(status, 202) << by_text.dump();
  Json wrong = s.json("POST", "/v1/evaluations", by_path("examples/broken/wrong_math/cpu"));
  // A candidate whose output is not UTF-8 (its result's output tail) is recorded all the same.
  Json noisy_req = inline_req;
  noisy_req["candidate"]["files"]["model_new.py"] =
      "import sys\nsys.stdout.buffer.write(b'\\xff\\xfe not utf-8\\n'); sys.stdout.flush()\n" +
      noisy_req["candidate"]["files"]["model_new.py"].get<std::string>();
  Json noisy = s.json("POST", "/v1/evaluations", noisy_req);

  Json a = s.wait_done(ok["id"]);
  EXPECT_EQ(a["outcome"], "ok") << a.dump();
  EXPECT_GE(a["reward"].get<int>(), 1);
  EXPECT_EQ(a["evaluation"]["schema"], "anvil.eval/1");
  Json b = s.wait_done(by_text["id"]);
  EXPECT_EQ(b["outcome"], "ok") << b.dump();
  EXPECT_NE(b["evaluation"]["task"].dump().find("chain.py"), std::string::npos);
  Json c = s.wait_done(wrong["id"]);
  EXPECT_EQ(c["outcome"], "wrong_answer");
  EXPECT_EQ(c["reward"], -1);
  Json d = s.wait_done(noisy["id"], std::chrono::seconds(120));
  EXPECT_EQ(d["status"], "done") << d.dump();
  EXPECT_EQ(d["outcome"], "ok") << d.dump();
  // A done job's files go; its row keeps the result.
  for (const Json& j : {by_text, noisy}) {
    EXPECT_FALSE(fs::exists(state / "state" / "jobs" / j["id"].get<std::string>())) << j.dump();
  }
  EXPECT_EQ(s.json("GET", "/v1/evaluations/" + by_text["id"].get<std::string>())["outcome"], "ok");

  // Bad input: 4xx, a JSON error naming the field, and the server goes on.
  auto expect_error = [&](int want, const std::string& field, const std::string& method, const std::string& path,
                          const std::string& body) {
    HttpResponse r = s.call(method, path, body);
    EXPECT_EQ(r.status, want) << method << " " << path << " " << body << " -> " << r.body;
    Json j = Json::parse(r.body, nullptr, false);
    ASSERT_TRUE(j.is_object()) << r.body;
    EXPECT_EQ(j["error"]["field"], field) << r.body;
    EXPECT_FALSE(j["error"]["message"].get<std::string>().empty());
  };
  expect_error(400, "", "POST", "/v1/evaluations", "{\"task\": ");
  expect_error(400, "", "POST", "/v1/evaluations", "[1, 2]");
  expect_error(400, "task", "POST", "/v1/evaluations", R"({"candidate": {"path": "/"}})");
  expect_error(400, "task.pat", "POST", "/v1/evaluations", R"({"task": {"pat": "x"}, "candidate": {"path": "/"}})");
  expect_error(400, "task.path", "POST", "/v1/evaluations", R"({"task": {"path": "/no/such/task.py"}, "candidate": {"path": "/"}})");
  Json escape = by_path("x");
  escape["candidate"] = {{"files", {{"model_new.py", "x"}, {"../evil.py", "x"}}}};
  expect_error(400, "candidate.files[\"../evil.py\"]", "POST", "/v1/evaluations", escape.dump());
  Json bad_opt = by_path("examples/candidates/01_elementwise_chain/cpu");
  bad_opt["options"]["timeout"] = 1;
  expect_error(400, "options.timeout", "POST", "/v1/evaluations", bad_opt.dump());
  bad_opt["options"] = {{"protocol", "nope"}};
  expect_error(400, "options.protocol", "POST", "/v1/evaluations", bad_opt.dump());
  expect_error(400, "evaluations[1].candidate", "POST", "/v1/evaluations/batch",
               Json({{"evaluations", {by_path("examples/candidates/01_elementwise_chain/cpu"), {{"task", {{"path", small_task()}}}}}}}).dump());
  expect_error(404, "id", "GET", "/v1/evaluations/12345", "");
  expect_error(404, "id", "GET", "/v1/evaluations/abc", "");
  expect_error(404, "path", "GET", "/v2/nothing", "");
  expect_error(405, "method", "GET", "/v1/evaluations", "");
  expect_error(405, "method", "POST", "/v1/evaluations/1", "");
  expect_error(400, "wait", "GET", "/v1/evaluations/1?wait=soon", "");
  // What once ended the server: bytes that are not UTF-8 in the answer's text, a name of the wrong type.
  expect_error(400, "", "POST", "/v1/evaluations", "\xff");
  expect_error(404, "id", "GET", "/v1/evaluations/%FF%FE", "");
  expect_error(400, "task.name", "POST", "/v1/evaluations",
               R"({"task": {"source": "x", "name": 1}, "candidate": {"source": "x"}})");
  expect_error(400, "task.name", "POST", "/v1/evaluations",
               Json({{"task", {{"path", small_task()}, {"name", "t.py"}}}, {"candidate", {{"source", "x"}}}}).dump());
  expect_error(400, "options.compile_mode", "POST", "/v1/evaluations",
               Json({{"task", {{"path", small_task()}}}, {"candidate", {{"source", "x"}}},
                     {"options", {{"compile_mode", "fastest"}}}}).dump());
  for (Json config : {Json(-1), Json(1.5), Json("2"), Json(true), Json(int64_t{1} << 31)}) {
    expect_error(400, "options.config", "POST", "/v1/evaluations",
                 Json({{"task", {{"path", small_task()}}}, {"candidate", {{"source", "x"}}},
                       {"options", {{"config", config}}}}).dump());
  }
  EXPECT_EQ(s.json("GET", "/health")["status"], "ok") << "still serving";

  std::string metrics = s.call("GET", "/metrics").body;
  EXPECT_NE(metrics.find("anvil_evaluations_total{outcome=\"ok\"} 3"), std::string::npos) << metrics;
  EXPECT_NE(metrics.find("anvil_evaluations_total{outcome=\"wrong_answer\"} 1"), std::string::npos) << metrics;
  EXPECT_NE(metrics.find("anvil_request_seconds_count{kind=\"evaluation\"} 4"), std::string::npos) << metrics;
  EXPECT_NE(metrics.find("anvil_queue_depth 0"), std::string::npos) << metrics;
}

TEST(Serve, ABodyOverTheLimitIs413AndTheConnectionsAfterItAreServed) {
  fs::path state = fresh_dir("body");
  Server s(state / "state", {"--max-body-mb", "1"});
  ASSERT_GT(s.port(), 0);
  Json big = by_path("examples/candidates/01_elementwise_chain/cpu");
  big["candidate"] = {{"files", {{"model_new.py", std::string(2u << 20, 'x')}}}};
  HttpResponse r = s.call("POST", "/v1/evaluations", big.dump());
  EXPECT_EQ(r.status, 413) << r.body;
  EXPECT_NE(r.body.find("\"field\":\"body\""), std::string::npos) << r.body;
  EXPECT_EQ(s.json("GET", "/health")["status"], "ok");
}

TEST(Serve, ARetryWithItsKeyRunsNothingTwice) {
  fs::path state = fresh_dir("idem");
  Server s(state / "state");
  ASSERT_GT(s.port(), 0);
  Json req = by_path("examples/candidates/01_elementwise_chain/cpu");
  long st1 = 0, st2 = 0;
  Json first = s.json("POST", "/v1/evaluations", req, {"Idempotency-Key: retry-1"}, &st1);
  Json again = s.json("POST", "/v1/evaluations", req, {"Idempotency-Key: retry-1"}, &st2);
  EXPECT_EQ(st1, 202);
  EXPECT_EQ(st2, 200);
  EXPECT_EQ(first["id"], again["id"]);
  EXPECT_TRUE(again["existed"].get<bool>());
  req["idempotency_key"] = "retry-1";  // the same key in the body
  EXPECT_EQ(s.json("POST", "/v1/evaluations", req)["id"], first["id"]);
  EXPECT_EQ(s.wait_done(first["id"])["outcome"], "ok");
  EXPECT_EQ(s.json("GET", "/health")["done"], 1) << "one evaluation ran";
  // The key of another request is refused, not mistaken for it.
  Json other = by_path("examples/broken/wrong_math/cpu");
  other["idempotency_key"] = "retry-1";
  long status = 0;
  Json refused = s.json("POST", "/v1/evaluations", other, {}, &status);
  EXPECT_EQ(status, 422) << refused.dump();
  EXPECT_EQ(refused["error"]["field"], "idempotency_key");
}

TEST(Serve, AFullQueueAnswers429WithRetryAfter) {
  fs::path state = fresh_dir("full");
  Server s(state / "state", {"--max-queue", "1", "--timeout", "60"});
  ASSERT_GT(s.port(), 0);
  Json hang = by_path("examples/broken/hang/cpu");
  std::string running = s.json("POST", "/v1/evaluations", hang)["id"];
  ASSERT_TRUE(s.wait_running(running));
  long status = 0;
  s.json("POST", "/v1/evaluations", hang, {}, &status);
  EXPECT_EQ(status, 202) << "one may wait";
  HttpResponse r = s.call("POST", "/v1/evaluations", hang.dump());
  EXPECT_EQ(r.status, 429) << r.body;
  int retry = std::atoi(r.header("Retry-After").c_str());
  EXPECT_GE(retry, 1) << r.header("Retry-After");
  // A batch that does not fit queues none of its requests.
  Json hang2 = hang;
  hang2["idempotency_key"] = "batch-first";
  HttpResponse b = s.call("POST", "/v1/evaluations/batch", Json({{"evaluations", {hang2, hang}}}).dump());
  EXPECT_EQ(b.status, 429) << b.body;
  EXPECT_EQ(s.json("GET", "/health")["queued"], 1) << "none of the batch was queued";
}

// Processes working in `dir` (their cwd inside it) or, with `cmdline`, naming it in their command line.
std::vector<int> processes_in(const std::string& dir, bool cmdline = false) {
  std::vector<int> found;
  for (const auto& e : fs::directory_iterator("/proc")) {
    std::string pid = e.path().filename();
    if (pid.find_first_not_of("0123456789") != std::string::npos) continue;
    std::error_code ec;
    std::string cwd = fs::read_symlink(e.path() / "cwd", ec).string();
    std::string cmd = cmdline ? read_file(e.path() / "cmdline").value_or("") : "";
    if (starts_with(cwd, dir) || cmd.find(dir) != std::string::npos) found.push_back(std::stoi(pid));
  }
  return found;
}

// A session as a trainer's rollout worker drives one: the opening, tool calls in order (a refused
// request runs none of them), a kill -9 and a restart in the middle, the finalize's evaluation (once,
// however often asked), then its end; and one left alone expires.
TEST(Serve, ASessionRunsToolsInOrderSurvivesARestartAndFinalizesToOneEvaluation) {
  fs::path state = fresh_dir("sessions") / "state";
  auto s = std::make_unique<Server>(state, std::vector<std::string>{"--session-ttl", "4"});
  ASSERT_GT(s->port(), 0);
  long status = 0;
  Json made = s->json("POST", "/v1/sessions", {{"task", {{"path", small_task()}}}, {"ttl_s", 600}}, {}, &status);
  ASSERT_EQ(status, 201) << made.dump();
  std::string id = made["id"];
  EXPECT_EQ(id.size(), 32u);
  std::vector<std::string> tools;
  for (const auto& t : made["tools"]) tools.push_back(t["function"]["name"]);
  for (const char* want : {"bash", "read_file", "write_file", "compile", "verify", "profile", "finish"}) {
    EXPECT_NE(std::find(tools.begin(), tools.end(), want), tools.end()) << want << " in " << made["tools"].dump();
  }
  ASSERT_EQ(made["messages"].size(), 2u);
  EXPECT_EQ(made["messages"][0]["role"], "system");
  EXPECT_NE(made["messages"][1]["content"].get<std::string>().find("model.py"), std::string::npos);
  fs::path workdir = made["workdir"].get<std::string>();
  EXPECT_TRUE(fs::exists(workdir / "model.py"));

  // The candidate written with write_file, in one request; one with an unknown tool runs nothing.
  fs::path cand = kSource + "/examples/candidates/01_elementwise_chain/cpu";
  Json writes = Json::array();
  const Json files = files_of(cand);
  for (const auto& [rel, text] : files.items()) {
    writes.push_back({{"name", "write_file"}, {"arguments", {{"path", rel}, {"content", text}}}});
  }
  Json refused = writes;
  refused.push_back({{"name", "rm_rf"}, {"arguments", Json::object()}});
  Json r = s->json("POST", "/v1/sessions/" + id + "/calls", {{"calls", refused}}, {}, &status);
  EXPECT_EQ(status, 400) << r.dump();
  EXPECT_EQ(r["error"]["field"], "calls[" + std::to_string(writes.size()) + "].name") << r.dump();
  EXPECT_FALSE(fs::exists(workdir / "kernels" / "elementwise_chain.cpp")) << "a refused request ran a call";
  Json calls = writes;
  calls.push_back({{"name", "compile"}, {"arguments", Json::object()}, {"id", "c1"}});
  calls.push_back({{"name", "read_file"}, {"arguments", "{not json"}});
  r = s->json("POST", "/v1/sessions/" + id + "/calls", {{"calls", calls}}, {}, &status);
  ASSERT_EQ(status, 200) << r.dump();
  ASSERT_EQ(r["results"].size(), calls.size());
  for (size_t i = 0; i < writes.size(); ++i) EXPECT_FALSE(r["results"][i]["error"]) << r["results"][i].dump();
  const Json& compiled = r["results"][writes.size()];
  EXPECT_EQ(compiled["id"], "c1");
  EXPECT_FALSE(compiled["error"]) << compiled.dump();
  EXPECT_TRUE(starts_with(compiled["content"].get<std::string>(), "compiled")) << compiled.dump();
  EXPECT_EQ(r["results"].back()["error_kind"], "bad_arguments") << r["results"].back().dump();

  // kill -9, and a new server on the same state serves the session on.
  s->kill9();
  s = std::make_unique<Server>(state, std::vector<std::string>{"--session-ttl", "4"});
  ASSERT_GT(s->port(), 0);
  Json got = s->json("GET", "/v1/sessions/" + id, nullptr, {}, &status);
  ASSERT_EQ(status, 200) << got.dump();
  EXPECT_EQ(got["calls"], calls.size());
  r = s->json("POST", "/v1/sessions/" + id + "/calls", {{"calls", {{{"name", "verify"}, {"arguments", Json::object()}}}}},
              {}, &status);
  ASSERT_EQ(status, 200) << r.dump();
  EXPECT_TRUE(starts_with(r["results"][0]["content"].get<std::string>(), "CORRECT")) << r.dump();

  // What a policy may leave in its workdir: a FIFO (a copy would block or fail), a setuid binary
  // (copied by root it would be root's): the snapshot takes regular files only, without those bits.
  r = s->json("POST", "/v1/sessions/" + id + "/calls",
              {{"calls", {{{"name", "bash"}, {"arguments", {{"command", "mkfifo pipe && cp /bin/true suid && chmod 4755 suid && ls"}}}}}}},
              {}, &status);
  ASSERT_EQ(status, 200) << r.dump();
  EXPECT_FALSE(r["results"][0]["error"]) << r.dump();

  // finalize: one evaluation, however often asked; the tools close.
  Json fin = s->json("POST", "/v1/sessions/" + id + "/finalize", nullptr, {}, &status);
  EXPECT_EQ(status, 202) << fin.dump();
  Json again = s->json("POST", "/v1/sessions/" + id + "/finalize", nullptr, {}, &status);
  EXPECT_EQ(status, 200) << again.dump();
  EXPECT_EQ(again["evaluation"], fin["evaluation"]);
  EXPECT_EQ(s->call("POST", "/v1/sessions/" + id + "/calls", Json({{"calls", {{{"name", "finish"}}}}}).dump()).status, 409);
  Json done = s->wait_done(fin["evaluation"]);
  EXPECT_EQ(done["outcome"], "ok") << done.dump();
  EXPECT_GE(done["reward"].get<int>(), 1);
  fs::path snap = state / "finals" / id / "candidate";
  EXPECT_TRUE(fs::exists(snap / "model_new.py"));
  EXPECT_FALSE(fs::exists(snap / "pipe"));
  struct stat st {};
  if (::stat((snap / "suid").c_str(), &st) == 0) {
    EXPECT_EQ(st.st_mode & (S_ISUID | S_ISGID), 0u);
  }

  EXPECT_EQ(s->call("DELETE", "/v1/sessions/" + id).status, 200);
  EXPECT_FALSE(fs::exists(state / "sessions" / id));
  // Its final snapshot goes with it (its evaluation is done), at the reaper's next round.
  for (int i = 0; i < 100 && fs::exists(state / "finals" / id); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_FALSE(fs::exists(state / "finals" / id));
  Json gone = s->json("GET", "/v1/sessions/" + id, nullptr, {}, &status);
  EXPECT_EQ(status, 404);
  EXPECT_EQ(gone["error"]["field"], "session");
  EXPECT_EQ(s->call("GET", "/v1/sessions/nope").status, 404);
  EXPECT_EQ(s->call("POST", "/v1/sessions/" + id + "/nothing", "{}").status, 404);
  Json bad_task = s->json("POST", "/v1/sessions", {{"task", {{"source", "import nothing_here\n"}, {"name", "t.py"}}}}, {}, &status);
  EXPECT_EQ(status, 400) << bad_task.dump();
  EXPECT_EQ(bad_task["error"]["field"], "task") << bad_task.dump();
  EXPECT_EQ(s->json("POST", "/v1/sessions", {{"task", {{"path", small_task()}}}, {"ttl", 5}})["error"]["field"], "ttl");
  // A launch configuration is the tune tool's, per evaluation: a session's finale judges ModelNew's own.
  EXPECT_EQ(s->json("POST", "/v1/sessions", {{"task", {{"path", small_task()}}}, {"options", {{"config", 2}}}})["error"]["field"],
            "options.config");

  // Ended while a request runs: DELETE answers at once, the request stops after its current call.
  Json busy = s->json("POST", "/v1/sessions", {{"task", {{"path", small_task()}}}, {"ttl_s", 600}}, {}, &status);
  ASSERT_EQ(status, 201) << busy.dump();
  std::string busy_id = busy["id"];
  long busy_status = 0;
  std::thread request([&] {
    Json sleep = {{"name", "bash"}, {"arguments", {{"command", "sleep 3"}}}};
    s->json("POST", "/v1/sessions/" + busy_id + "/calls", {{"calls", {sleep, sleep, sleep}}}, {}, &busy_status);
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(1000));
  Json during = s->json("GET", "/v1/sessions/" + busy_id, nullptr, {}, &status);
  EXPECT_EQ(status, 200) << during.dump();
  EXPECT_EQ(during["busy"], true) << "GET answers from the saved state, without waiting";
  auto t_del = std::chrono::steady_clock::now();
  EXPECT_EQ(s->call("DELETE", "/v1/sessions/" + busy_id).status, 200);
  EXPECT_LT(std::chrono::steady_clock::now() - t_del, std::chrono::seconds(2)) << "DELETE waited for the request";
  request.join();
  EXPECT_LT(std::chrono::steady_clock::now() - t_del, std::chrono::seconds(5)) << "the request ran its other calls";
  EXPECT_EQ(busy_status, 404);
  EXPECT_FALSE(fs::exists(state / "sessions" / busy_id));

  // A workdir beyond what an evaluation copies (10001 files): judged as an evaluation judges it
  // (load_error, reward -1), so a policy cannot trade a bad reward for no answer.
  Json big = s->json("POST", "/v1/sessions", {{"task", {{"path", small_task()}}}, {"ttl_s", 600}}, {}, &status);
  ASSERT_EQ(status, 201) << big.dump();
  std::string big_id = big["id"];
  r = s->json("POST", "/v1/sessions/" + big_id + "/calls",
              {{"calls", {{{"name", "bash"}, {"arguments", {{"command", "mkdir many && cd many && for i in $(seq 10001); do : > f$i; done"}}}}}}},
              {}, &status);
  ASSERT_EQ(status, 200) << r.dump();
  Json big_fin = s->json("POST", "/v1/sessions/" + big_id + "/finalize", nullptr, {}, &status);
  ASSERT_EQ(status, 202) << big_fin.dump();
  Json big_done = s->wait_done(big_fin["evaluation"]);
  EXPECT_EQ(big_done["outcome"], "load_error") << big_done.dump();
  EXPECT_EQ(big_done["reward"], -1);
  EXPECT_NE(big_done["message"].get<std::string>().find("10000 files"), std::string::npos) << big_done.dump();
  EXPECT_EQ(s->json("POST", "/v1/sessions/" + big_id + "/finalize", nullptr, {}, &status)["evaluation"], big_fin["evaluation"]);
  EXPECT_EQ(status, 200);
  EXPECT_EQ(s->call("DELETE", "/v1/sessions/" + big_id).status, 200);

  // Left alone past its time to live (the server's 4 s): gone, its directory too.
  Json idle = s->json("POST", "/v1/sessions", {{"task", {{"path", small_task()}}}}, {}, &status);
  ASSERT_EQ(status, 201) << idle.dump();
  std::string idle_id = idle["id"];
  std::this_thread::sleep_for(std::chrono::seconds(5));
  EXPECT_EQ(s->call("GET", "/v1/sessions/" + idle_id).status, 404);
  for (int i = 0; i < 100 && fs::exists(state / "sessions" / idle_id); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_FALSE(fs::exists(state / "sessions" / idle_id)) << "the reaper removes an expired session";
  EXPECT_EQ(s->json("GET", "/health")["sessions"], 0);
}

// A creation sent again with its idempotency key (its answer lost to a cut connection or a kill)
// answers the same session, never a second; across a restart too. A key never names another
// session: once its session has ended or expired, it is answered 410.
TEST(Serve, ASessionsCreationWithAKeyIsMadeOnce) {
  fs::path state = fresh_dir("session-keys") / "state";
  auto s = std::make_unique<Server>(state, std::vector<std::string>{"--session-ttl", "3"});
  ASSERT_GT(s->port(), 0);
  long status = 0;
  Json req = {{"task", {{"path", small_task()}}}, {"ttl_s", 600}};
  Json first = s->json("POST", "/v1/sessions", req, {"Idempotency-Key: worker-3-episode-9"}, &status);
  ASSERT_EQ(status, 201) << first.dump();
  EXPECT_EQ(first["existed"], false);
  std::string id = first["id"];
  Json again = s->json("POST", "/v1/sessions", req, {"Idempotency-Key: worker-3-episode-9"}, &status);
  EXPECT_EQ(status, 200) << again.dump();
  EXPECT_EQ(again["id"], id);
  EXPECT_EQ(again["existed"], true);
  EXPECT_EQ(again["messages"], first["messages"]);
  Json in_body = req;
  in_body["idempotency_key"] = "worker-3-episode-9";
  EXPECT_EQ(s->json("POST", "/v1/sessions", in_body, {}, &status)["id"], id);
  EXPECT_EQ(status, 200);
  Json other = req;
  other["ttl_s"] = 900;
  Json refused = s->json("POST", "/v1/sessions", other, {"Idempotency-Key: worker-3-episode-9"}, &status);
  EXPECT_EQ(status, 422);
  EXPECT_EQ(refused["error"]["field"], "idempotency_key");
  EXPECT_EQ(refused.dump().find(id), std::string::npos) << "a refusal does not give the session's id away";
  Json without = s->json("POST", "/v1/sessions", req, {}, &status);  // no key: a session each time
  EXPECT_EQ(status, 201);
  EXPECT_NE(without["id"], id);
  EXPECT_EQ(s->json("GET", "/health")["sessions"], 2);

  s->kill9();  // the answer lost to a kill: the restarted server answers the same session
  s = std::make_unique<Server>(state, std::vector<std::string>{"--session-ttl", "3"});
  ASSERT_GT(s->port(), 0);
  EXPECT_EQ(s->json("POST", "/v1/sessions", req, {"Idempotency-Key: worker-3-episode-9"}, &status)["id"], id);
  EXPECT_EQ(status, 200);

  // A creation cut short before its key was recorded: made anew (the first, which nobody was told
  // of, expires).
  Json cut = s->json("POST", "/v1/sessions", req, {"Idempotency-Key: cut-short"}, &status);
  ASSERT_EQ(status, 201);
  ASSERT_TRUE(fs::remove(state / "sessions" / ".keys" / sha256_hex("cut-short")));
  Json remade = s->json("POST", "/v1/sessions", req, {"Idempotency-Key: cut-short"}, &status);
  EXPECT_EQ(status, 201) << remade.dump();
  EXPECT_NE(remade["id"], cut["id"]);

  // Ended, or expired: its key is answered 410, and makes no second session.
  EXPECT_EQ(s->call("DELETE", "/v1/sessions/" + id).status, 200);
  Json ended = s->json("POST", "/v1/sessions", req, {"Idempotency-Key: worker-3-episode-9"}, &status);
  EXPECT_EQ(status, 410) << ended.dump();
  EXPECT_EQ(ended["error"]["field"], "idempotency_key");
  Json brief = {{"task", {{"path", small_task()}}}};  // the server's time to live: 3 s
  EXPECT_EQ(s->json("POST", "/v1/sessions", brief, {"Idempotency-Key: brief"}, &status)["existed"], false);
  std::this_thread::sleep_for(std::chrono::milliseconds(3500));
  EXPECT_EQ(s->json("POST", "/v1/sessions", brief, {"Idempotency-Key: brief"}, &status)["error"]["field"],
            "idempotency_key");
  EXPECT_EQ(status, 410);

  EXPECT_EQ(s->json("POST", "/v1/sessions", req, {"Idempotency-Key: " + std::string(300, 'k')}, &status)["error"]["field"],
            "idempotency_key");
  EXPECT_EQ(status, 400);
}

// What once ended the server with one request (issue 55): JSON nested 150,000 deep, in a body or in a
// tool call's arguments text, crashed it (SIGSEGV: a recursive copy before any validation). Every
// parse of a client's text is bounded (util/json_reader.h: kMaxJsonDepth), and a client's key cannot
// take the key anvil derives for a session's final evaluation.
TEST(Serve, DeepJsonSilentConnectionsAndAnvilsOwnKeysAreRefused) {
  fs::path state = fresh_dir("deep") / "state";
  Server s(state);
  ASSERT_GT(s.port(), 0);
  const std::string deep = std::string(200000, '[') + std::string(200000, ']');
  for (const std::string& body : {deep, "{\"task\": " + deep + "}", "{\"ttl_s\": " + deep + "}"}) {
    for (const char* path : {"/v1/evaluations", "/v1/evaluations/batch", "/v1/sessions"}) {
      HttpResponse r = s.call("POST", path, body);
      EXPECT_EQ(r.status, 400) << path << " " << r.body.substr(0, 300);
      EXPECT_NE(r.body.find("nested too deeply"), std::string::npos) << r.body.substr(0, 300);
    }
  }
  long status = 0;
  Json made = s.json("POST", "/v1/sessions", {{"task", {{"path", small_task()}}}}, {}, &status);
  ASSERT_EQ(status, 201) << made.dump();
  const std::string id = made["id"];
  const std::string calls = "/v1/sessions/" + id + "/calls";
  // The arguments as the model's own text (a string): refused as arguments, the session goes on.
  Json deep_args = {{"calls", {{{"name", "read_file"}, {"arguments", deep}}}}};
  Json r = s.json("POST", calls, deep_args, {}, &status);
  EXPECT_EQ(status, 200) << r.dump().substr(0, 300);
  ASSERT_EQ(r["results"].size(), 1u) << r.dump().substr(0, 300);
  EXPECT_EQ(r["results"][0]["error_kind"], "bad_arguments") << r.dump().substr(0, 300);
  HttpResponse raw = s.call("POST", calls, "{\"calls\": [{\"name\": \"read_file\", \"arguments\": " + deep + "}]}");
  EXPECT_EQ(raw.status, 400) << raw.body.substr(0, 300);
  EXPECT_EQ(s.json("GET", "/health")["status"], "ok") << "still serving";

  // The final evaluation's key is anvil's: a client that knows the id cannot take it first.
  Json req = by_path("examples/candidates/01_elementwise_chain/cpu");
  for (const std::string& key : {"anvil:session:" + id, std::string("anvil:anything")}) {
    Json refused = s.json("POST", "/v1/evaluations", req, {"Idempotency-Key: " + key}, &status);
    EXPECT_EQ(status, 400) << refused.dump();
    EXPECT_EQ(refused["error"]["field"], "idempotency_key") << refused.dump();
  }
  // A silent connection (a slow-header client without the token, 260 of them once held every slot
  // for 75 s) is closed after the header's own deadline (http_server.h header_timeout_s: 10 s).
  int silent = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in at{};
  at.sin_family = AF_INET;
  at.sin_port = htons(static_cast<uint16_t>(s.port()));
  at.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::connect(silent, reinterpret_cast<sockaddr*>(&at), sizeof at), 0);
  ASSERT_EQ(::write(silent, "GET /health HTTP/1.1\r\n", 23), 23);  // and nothing more
  timeval wait{40, 0};
  ::setsockopt(silent, SOL_SOCKET, SO_RCVTIMEO, &wait, sizeof wait);
  auto t0 = std::chrono::steady_clock::now();
  char byte;
  ssize_t got = ::read(silent, &byte, 1);
  double held = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ::close(silent);
  EXPECT_EQ(got, 0) << "the server closes it (not the test's own 40 s wait)";
  EXPECT_LT(held, 30.0) << "held as long as an admitted connection's idle time (75 s)";

  Json old_form = s.json("POST", "/v1/evaluations", req, {"Idempotency-Key: session:" + id}, &status);
  EXPECT_EQ(status, 202) << old_form.dump();  // any other key is the client's
  Json final_ = s.json("POST", "/v1/sessions/" + id + "/finalize", Json::object(), {}, &status);
  EXPECT_LT(status, 300) << final_.dump();
  EXPECT_NE(final_.value("id", Json()).dump(), old_form["id"].dump()) << final_.dump();
  EXPECT_EQ(s.json("GET", "/health")["status"], "ok") << "still serving";
}

TEST(Serve, AKilledServerAnswersEveryAcceptedRequestAndLeavesNoProcess) {
  fs::path state = fresh_dir("killed");
  // A cache of its own: every process of its evaluations works under it (their private copies).
  fs::path cache = state / "cache";
  std::vector<std::string> env = {"ANVIL_CACHE=" + cache.string()};
  std::vector<std::string> flags = {"--timeout", "8"};
  Json hang = by_path("examples/broken/hang/cpu");
  std::string id, twice;
  {
    Server s(state / "state", flags, env);
    ASSERT_GT(s.port(), 0);
    // Once the cache's zygote is warm (it starts with the first evaluation), runners are its forks.
    std::string runner;
    for (int i = 0; i < 20 && !starts_with(runner, "forked"); ++i) {
      Json ok = s.wait_done(s.json("POST", "/v1/evaluations", by_path("examples/candidates/01_elementwise_chain/cpu"))["id"]);
      runner = ok["evaluation"]["isolation"].value("runner", "");
      if (!starts_with(runner, "forked")) std::this_thread::sleep_for(std::chrono::seconds(1));
    }
    ASSERT_TRUE(starts_with(runner, "forked")) << runner;
    id = s.json("POST", "/v1/evaluations", hang)["id"];
    ASSERT_TRUE(s.wait_running(id));
    std::this_thread::sleep_for(std::chrono::seconds(2));  // into the candidate's hang
    s.kill9();
  }
  // Its runner and the candidate's processes do not outlive it (the zygote ends a child whose
  // client is gone; a fresh runner dies with its parent).
  std::string work = (cache / "tmp").string();
  for (int i = 0; i < 50 && !processes_in(work).empty(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_TRUE(processes_in(work).empty()) << processes_in(work).size() << " process(es) left in " << work;
  {
    Server s(state / "state", flags, env);  // restarted: the request runs again, to its end
    ASSERT_GT(s.port(), 0);
    Json j = s.wait_done(id);
    EXPECT_EQ(j["outcome"], "timeout") << j.dump();
    EXPECT_EQ(j["attempts"], 2);
    twice = s.json("POST", "/v1/evaluations", hang)["id"];
    ASSERT_TRUE(s.wait_running(twice));
    s.kill9();
  }
  {
    Server s(state / "state", flags, env);
    ASSERT_TRUE(s.wait_running(twice));
    s.kill9();  // its second server death
  }
  {
    Server s(state / "state", flags, env);
    ASSERT_GT(s.port(), 0);
    Json j = s.json("GET", "/v1/evaluations/" + twice);
    EXPECT_EQ(j["status"], "done");
    EXPECT_EQ(j["outcome"], "runtime_error") << j.dump();
    EXPECT_EQ(j["reward"], -1);
    EXPECT_NE(j["message"].get<std::string>().find("2 times"), std::string::npos) << j.dump();
  }
  for (int pid : processes_in(cache.string(), true)) kill(pid, SIGKILL);  // this cache's zygote
}

TEST(Serve, ASecondSignalEndsAtOnceAndGivesTheAttemptBack) {
  fs::path state = fresh_dir("signals");
  std::string id;
  {
    Server s(state / "state", {"--timeout", "8"});
    ASSERT_GT(s.port(), 0);
    id = s.json("POST", "/v1/evaluations", by_path("examples/broken/hang/cpu"))["id"];
    ASSERT_TRUE(s.wait_running(id));
    s.signal(SIGTERM);  // stops accepting, waits for the evaluation...
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    EXPECT_EQ(s.call("GET", "/health").status, 0) << "no new connections once stopping";
    s.signal(SIGTERM);  // ... unless told again
    EXPECT_EQ(s.exit_code(), 1);
  }
  EXPECT_NE(read_file(state.string() + "/state.stderr").value_or("").find("1 evaluation(s) under way run again"),
            std::string::npos);
  Server s(state / "state", {"--timeout", "8"});
  ASSERT_GT(s.port(), 0);
  Json j = s.wait_done(id);
  EXPECT_EQ(j["outcome"], "timeout") << j.dump();
  EXPECT_EQ(j["attempts"], 1) << "a stop on purpose is not one of its attempts";
}

TEST(Serve, OffLoopbackATokenIsRequired) {
  fs::path state = fresh_dir("token");
  {
    Server s(state / "open", {"--host", "0.0.0.0"});
    EXPECT_EQ(s.port(), 0);
    EXPECT_EQ(s.exit_code(), 2);
    EXPECT_NE(read_file(state.string() + "/open.stderr").value_or("").find("needs a token: set ANVIL_SERVE_TOKEN"),
              std::string::npos);
  }
  Server s(state / "closed", {"--host", "0.0.0.0"}, {"ANVIL_SERVE_TOKEN=s3cret"});
  ASSERT_GT(s.port(), 0);
  EXPECT_EQ(s.call("GET", "/health").status, 200);
  EXPECT_EQ(s.call("GET", "/metrics").status, 401);
  EXPECT_EQ(s.call("GET", "/metrics", "", {"Authorization: Bearer wrong"}).status, 401);
  EXPECT_EQ(s.call("GET", "/metrics", "", {"Authorization: Bearer s3cret"}).status, 200);
  EXPECT_EQ(s.call("POST", "/v1/evaluations", "{}").status, 401);
}

// A session's running shell ends with its DELETE, and every session's with the server's SIGTERM:
// neither waits out the command's own timeout.
TEST(Serve, DeleteAndStopEndARunningShellAtOnce) {
  fs::path state = fresh_dir("cancel") / "state";
  Server s(state);
  ASSERT_GT(s.port(), 0);
  auto open_session = [&] {
    long status = 0;
    Json made = s.json("POST", "/v1/sessions", {{"task", {{"path", small_task()}}}}, {}, &status);
    EXPECT_EQ(status, 201) << made.dump();
    return made.value("id", std::string());
  };
  // A bash call of 100 s, on a connection of its own; how long it took and its answer.
  struct Running {
    std::thread t;
    double seconds = 0;
    HttpResponse r;
  };
  auto sleep_in = [&](const std::string& id, Running* run) {
    run->t = std::thread([&, id, run] {
      auto client = make_http_client();
      HttpRequest q;
      q.method = "POST";
      q.url = "http://127.0.0.1:" + std::to_string(s.port()) + "/v1/sessions/" + id + "/calls";
      q.headers = {"Content-Type: application/json"};
      q.body = Json({{"calls", {{{"name", "bash"}, {"arguments", {{"command", "sleep 100; echo slept"}, {"timeout_s", 150}}}}}}}).dump();
      q.timeout = std::chrono::seconds(200);
      auto t0 = std::chrono::steady_clock::now();
      run->r = client->send(q);
      run->seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    });
  };
  // A verify whose candidate sleeps at import: the DELETE kills its runner (the red team's
  // candidate lived on 20 s after the DELETE and verify answered 47 s later).
  std::string vid = open_session();
  ASSERT_FALSE(vid.empty());
  Json writes = Json::array();
  const Json files = files_of(kSource + "/examples/candidates/01_elementwise_chain/cpu");
  for (const auto& [rel, text] : files.items()) {
    std::string body = text;
    if (rel == "model_new.py") body = "import time\ntime.sleep(100)\n" + body;
    writes.push_back({{"name", "write_file"}, {"arguments", {{"path", rel}, {"content", body}}}});
  }
  long wstatus = 0;
  s.json("POST", "/v1/sessions/" + vid + "/calls", {{"calls", writes}}, {}, &wstatus);
  ASSERT_EQ(wstatus, 200);
  Running v;
  v.t = std::thread([&] {
    auto client = make_http_client();
    HttpRequest q;
    q.method = "POST";
    q.url = "http://127.0.0.1:" + std::to_string(s.port()) + "/v1/sessions/" + vid + "/calls";
    q.headers = {"Content-Type: application/json"};
    q.body = Json({{"calls", {{{"name", "verify"}, {"arguments", Json::object()}}}}}).dump();
    q.timeout = std::chrono::seconds(300);
    auto t0 = std::chrono::steady_clock::now();
    v.r = client->send(q);
    v.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(3000));
  EXPECT_EQ(s.call("DELETE", "/v1/sessions/" + vid).status, 200);
  v.t.join();
  EXPECT_LT(v.seconds, 90) << v.r.status << " " << v.r.body;  // its build, at most; not the 100-s sleep

  std::string id = open_session();
  ASSERT_FALSE(id.empty());
  Running a;
  sleep_in(id, &a);
  std::this_thread::sleep_for(std::chrono::milliseconds(2000));  // the shell is running
  EXPECT_EQ(s.call("DELETE", "/v1/sessions/" + id).status, 200);
  a.t.join();
  EXPECT_LT(a.seconds, 30) << a.r.status << " " << a.r.body;
  EXPECT_EQ(a.r.body.find("slept"), std::string::npos) << a.r.body;

  std::string id2 = open_session();
  ASSERT_FALSE(id2.empty());
  Running b;
  sleep_in(id2, &b);
  std::this_thread::sleep_for(std::chrono::milliseconds(2000));
  auto t0 = std::chrono::steady_clock::now();
  s.signal(SIGTERM);
  EXPECT_EQ(s.exit_code(), 0);
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 30);
  b.t.join();
  EXPECT_EQ(b.r.body.find("slept"), std::string::npos) << b.r.body;
}

// What another local user's process reads when it asks the server for `path` (as uid 4242: root
// only): the status line's code, or -1.
int status_as_another_user(int port, const std::string& path) {
  int pipefd[2];
  if (pipe(pipefd) != 0) return -1;
  pid_t pid = fork();
  if (pid == 0) {
    close(pipefd[0]);
    int code = -1;
    gid_t g = 4242;
    if (setgroups(1, &g) == 0 && setresgid(4242, 4242, 4242) == 0 && setresuid(4242, 4242, 4242) == 0) {
      int fd = socket(AF_INET, SOCK_STREAM, 0);
      sockaddr_in a{};
      a.sin_family = AF_INET;
      a.sin_port = htons(static_cast<uint16_t>(port));
      a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      std::string req = "GET " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";
      char buf[64] = {0};
      if (fd >= 0 && connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
          write(fd, req.data(), req.size()) == static_cast<ssize_t>(req.size()) && read(fd, buf, sizeof buf - 1) > 12) {
        code = std::atoi(buf + 9);  // "HTTP/1.1 403 ..."
      }
    }
    (void)!write(pipefd[1], &code, sizeof code);
    _exit(0);
  }
  close(pipefd[1]);
  int code = -1;
  if (read(pipefd[0], &code, sizeof code) != sizeof code) code = -1;
  close(pipefd[0]);
  waitpid(pid, nullptr, 0);
  return code;
}

// As uid 4242: `n` connections that each send a request and then sit there, not reading, not
// closing, until the parent writes a byte to `go` (the red team's way to hold the server's
// connections); returns the child's pid once they are all sent (or -1).
pid_t hold_connections_as_another_user(int port, int n, int go[2]) {
  int ready[2];
  if (pipe(ready) != 0 || pipe(go) != 0) return -1;
  pid_t pid = fork();
  if (pid == 0) {
    close(ready[0]);
    close(go[1]);
    gid_t g = 4242;
    if (setgroups(1, &g) != 0 || setresgid(4242, 4242, 4242) != 0 || setresuid(4242, 4242, 4242) != 0) _exit(1);
    std::vector<int> fds;
    const std::string req = "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";
    for (int i = 0; i < n; ++i) {
      int fd = socket(AF_INET, SOCK_STREAM, 0);
      sockaddr_in a{};
      a.sin_family = AF_INET;
      a.sin_port = htons(static_cast<uint16_t>(port));
      a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      if (fd < 0 || connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) break;
      (void)!write(fd, req.data(), req.size());
      fds.push_back(fd);
    }
    char c = 1;
    (void)!write(ready[1], &c, 1);
    (void)!read(go[0], &c, 1);
    _exit(0);
  }
  close(ready[1]);
  close(go[0]);
  char c = 0;
  bool ok = read(ready[0], &c, 1) == 1;
  close(ready[0]);
  return ok ? pid : -1;
}

TEST(Serve, OnLoopbackWithoutATokenAnotherLocalUserIsRefused) {
  fs::path state = fresh_dir("peer");
  Server s(state, {});
  ASSERT_GT(s.port(), 0);
  EXPECT_EQ(s.call("GET", "/metrics").status, 200) << "the server's own user is served";
  struct stat st {};
  ASSERT_EQ(::stat(state.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u) << "the state (requests, results, sessions) is readable by other users";
  if (geteuid() != 0) GTEST_SKIP() << "connecting as another user needs root";
  EXPECT_EQ(status_as_another_user(s.port(), "/metrics"), 403);
  EXPECT_EQ(status_as_another_user(s.port(), "/v1/evaluations/1"), 403);
  // 300 refused connections held open by that user keep none of the server's 256: each is closed
  // as soon as it is refused (the red team's four processes had kept them all, 2 s each).
  int go[2] = {-1, -1};
  pid_t holder = hold_connections_as_another_user(s.port(), 300, go);
  ASSERT_GT(holder, 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_EQ(s.call("GET", "/metrics").status, 200) << "another user's refused connections took the server's";
  (void)!write(go[1], "x", 1);
  close(go[1]);
  waitpid(holder, nullptr, 0);
  EXPECT_EQ(s.call("GET", "/health").status, 200) << "the server goes on serving its own user";
}

}  // namespace
}  // namespace anvil
