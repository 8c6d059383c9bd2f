// Whole episodes over real HTTP: tests/replay_server.py (a separate process)
// replays scripted model turns; the tools, the builds and the evaluations are
// the real ones (CPU variants, so they run in CI). Each test is one episode
// shape the issue names: one that solves its task, one with malformed calls,
// one that overflows its context, one that meets server errors, one that is
// killed and resumed, one of pure garbage, and many at once.
#include "anvil/agent/episode.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <ctime>
#include <thread>

#include "support/replay_fixture.h"
#include "anvil/agent/runs.h"
#include "anvil/agent/trajectory.h"
#include "support/test_env.h"
#include "anvil/util/fs.h"
#include "anvil/util/strings.h"
#include "anvil/util/subprocess.h"

namespace anvil {
namespace {

using Json = nlohmann::json;
const std::string kSource = ANVIL_SOURCE_DIR;

Json call(const std::string& name, Json args) { return {{"name", name}, {"arguments", std::move(args)}}; }
Json turn(Json calls, Json content = nullptr) { return {{"content", content}, {"tool_calls", calls}}; }

// The turns that write the bundled CPU solution of task 01 into the workdir.
Json solving_turns() {
  std::string dir = kSource + "/examples/candidates/01_elementwise_chain/cpu/";
  Json writes = Json::array();
  for (const char* f : {"kernels/elementwise_chain.cpp", "kernels/elementwise_chain_binding.cpp", "kernels/parallel.h",
                        "model_new.py"}) {
    writes.push_back(call("write_file", {{"path", f}, {"content", *read_file(dir + f)}}));
  }
  return Json::array({
      turn({call("todo_write", {{"todos", {{{"content", "fuse the chain"}, {"status", "in_progress"}}}}}),
            call("read_file", {{"path", "model.py"}})},
           "I will read the reference first."),
      turn(writes),
      turn({call("compile", Json::object())}),
      turn({call("verify", Json::object())}),
      turn({call("finish", {{"summary", "one fused CPU kernel"}})}),
  });
}

class EpisodeTest : public ::testing::Test {
 protected:
  static Environment& env() { return test_environment(); }
  void SetUp() override {
    ASSERT_TRUE(env().torch.present) << env().probe_error;
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::path(ANVIL_TEST_CACHE_DIR) / "episodes" / info->name();
    remove_tree(dir_);
    fs::create_directories(dir_);
    std::string e;
    write_file_atomic(dir_ / "skill.md",
                      "You optimise PyTorch modules with CUDA kernels. (test prompt)\n"
                      "<!-- protocol: cuda-agent -->\nRULES OF cuda-agent\n<!-- end protocol -->\n"
                      "<!-- protocol: kernelbench -->\nRULES OF kernelbench\n<!-- end protocol -->\n",
                      &e);
  }

  EpisodeOptions options() {
    EpisodeOptions o;
    o.task = small_task();
    o.dir = dir_ / "episode";
    o.skill = dir_ / "skill.md";
    o.max_turns = 20;
    o.sampling.max_tokens = 512;
    EvalOptions& e = o.tools.eval;
    e.compile_mode = "none";
    e.calls = 5;
    e.warmup = 1;
    e.input_sets = 2;
    e.trials = 3;
    e.seed = 7;
    e.timeout = std::chrono::seconds(120);
    o.tools.bash_timeout = std::chrono::seconds(60);
    return o;
  }

  static RetryPolicy fast_retry() {
    RetryPolicy r;
    r.max_attempts = 6;
    r.initial_backoff = std::chrono::milliseconds(5);
    r.max_backoff = std::chrono::milliseconds(20);
    return r;
  }

  // Every assistant tool call is answered by exactly one tool message with its id, in order.
  static void expect_answered(const Json& record) {
    const Json& m = record["messages"];
    for (size_t i = 0; i < m.size(); ++i) {
      if (m[i]["role"] != "assistant" || !m[i].contains("tool_calls")) continue;
      size_t k = i + 1;
      for (const auto& tc : m[i]["tool_calls"]) {
        ASSERT_LT(k, m.size());
        EXPECT_EQ(m[k]["role"], "tool");
        EXPECT_EQ(m[k]["tool_call_id"], tc["id"]);
        ++k;
      }
    }
  }

  fs::path dir_;
};

TEST_F(EpisodeTest, AScriptedEpisodeSolvesItsTaskAndIsJudgedAfresh) {
  ReplayServer server({{"turns", solving_turns()}}, dir_ / "server");
  ASSERT_GT(server.port(), 0);
  auto http = make_http_client();
  ModelClient model({server.url(), "replay", ""}, *http, fast_retry());
  ASSERT_EQ(model.check(), "");
  EpisodeResult r = run_episode(env(), model, options());
  ASSERT_TRUE(r.ran) << r.error;
  const Json& rec = r.record;
  EXPECT_EQ(r.status, "finished");
  EXPECT_EQ(r.end_reason, "finish");
  EXPECT_EQ(rec["counters"]["turns"], 5);
  EXPECT_EQ(rec["counters"]["tool_calls"], 9);
  EXPECT_EQ(rec["counters"]["malformed_total"], 0);
  expect_answered(rec);
  // The agent's own verify said correct; the reward comes from the fresh evaluation.
  bool verified = false;
  for (const auto& m : rec["messages"]) {
    if (m["role"] == "tool" && m["content"].get<std::string>().find("CORRECT") != std::string::npos) verified = true;
  }
  EXPECT_TRUE(verified);
  ASSERT_TRUE(rec["evaluation"].is_object());
  EXPECT_EQ(rec["evaluation"]["outcome"], "ok") << rec["evaluation"].dump(1);
  EXPECT_GE(rec["reward"].get<int>(), 1);
  EXPECT_EQ(rec["evaluation"]["candidate"]["path"].get<std::string>().find(dir_.string()), 0u);
  // Per-turn timings, token counts and the server's token ids and log-probabilities.
  const Json& t0 = rec["turns"][0];
  EXPECT_GT(t0["seconds"]["model"].get<double>(), 0);
  EXPECT_GT(t0["usage"]["prompt_tokens"].get<int>(), 0);
  EXPECT_TRUE(t0["token_ids"].is_array());
  EXPECT_TRUE(t0["logprobs"].is_array());
  EXPECT_TRUE(t0["prompt_token_ids"].contains("prefix"));
  // The saved record is the returned one.
  std::string err;
  auto saved = load_trajectory(dir_ / "episode" / "trajectory.json", &err);
  ASSERT_TRUE(saved) << err;
  EXPECT_EQ((*saved)["reward"], rec["reward"]);
  EXPECT_EQ((*saved)["state"]["todos"][0]["content"], "fuse the chain");
  // The system prompt states the rules it is judged by (cuda-agent's), without the markers.
  std::string system = rec["messages"][0]["content"];
  EXPECT_EQ(rec["protocol"], "cuda-agent");
  EXPECT_EQ(system, "You optimise PyTorch modules with CUDA kernels. (test prompt)\nRULES OF cuda-agent\n");
}

// Token-in/token-out over the replay server's toy tokenizer: the same scripted episode, each turn
// continuing the last one's prompt and sampled ids exactly, then the template's rendering of the
// tool results after the model's end token; the calls parsed from the sampled text.
TEST_F(EpisodeTest, TokenLevelTurnsContinueTheSequenceTokenForToken) {
  ReplayServer server({{"turns", solving_turns()}}, dir_ / "server");
  ASSERT_GT(server.port(), 0);
  auto http = make_http_client();
  ModelClient model({server.url(), "replay", ""}, *http, fast_retry());
  EpisodeOptions o = options();
  o.token_level = true;
  EpisodeResult r = run_episode(env(), model, o);
  ASSERT_TRUE(r.ran) << r.error;
  const Json& rec = r.record;
  EXPECT_EQ(r.end_reason, "finish") << rec.dump(1).substr(0, 4000);
  EXPECT_EQ(rec["token_level"], true);
  EXPECT_EQ(rec["counters"]["tool_calls"], 9);
  EXPECT_EQ(rec["counters"]["malformed_total"], 0);
  expect_answered(rec);
  ASSERT_TRUE(rec["evaluation"].is_object());
  EXPECT_EQ(rec["evaluation"]["outcome"], "ok");

  auto post = [&](const std::string& path, const Json& body) {
    HttpRequest q;
    q.url = "http://127.0.0.1:" + std::to_string(server.port()) + path;
    q.headers = {"Content-Type: application/json"};
    q.body = body.dump();
    return Json::parse(http->send(q).body);
  };
  std::vector<int64_t> seq;
  const Json& turns = rec["turns"];
  ASSERT_EQ(turns.size(), 5u);
  for (size_t i = 0; i < turns.size(); ++i) {
    const Json& t = turns[i];
    EXPECT_EQ(t["prompt_token_ids"]["prefix"].get<size_t>(), seq.size()) << "turn " << i << " re-rendered the past";
    std::vector<int64_t> prompt = expand_prompt_ids(seq, t["prompt_token_ids"]);
    std::string added = post("/detokenize", {{"tokens", t["prompt_token_ids"]["ids"]}})["prompt"];
    if (i == 0) {
      EXPECT_EQ(t["prompt_kind"], "opening");
      EXPECT_EQ(added, "<bos><|system|>" + rec["messages"][0]["content"].get<std::string>() + "<|end|>\n<|user|>" +
                           rec["messages"][1]["content"].get<std::string>() + "<|end|>\n<|assistant|>");
    } else {
      // After the model's <|end|>: the template's newline, the tool results, the generation prompt.
      EXPECT_EQ(t["prompt_kind"], "tool");
      EXPECT_EQ(added.rfind("\n<|tool|>", 0), 0u) << added.substr(0, 80);
      EXPECT_EQ(added.substr(added.size() - 13), "<|assistant|>");
    }
    // The sampled text, as the model wrote it, is in the sequence; its calls are the message's.
    std::string sampled = post("/detokenize", {{"tokens", t["token_ids"]}})["prompt"];
    const Json& msg = rec["messages"][t["message_index"].get<size_t>()];
    EXPECT_EQ(sampled.substr(sampled.size() - 7), "<|end|>");
    EXPECT_EQ(msg["tool_calls"].size(), t["tool_calls"].size());
    EXPECT_NE(sampled.find("<tool_call>{\"name\": \"" + msg["tool_calls"][0]["function"]["name"].get<std::string>()),
              std::string::npos);
    seq = prompt;
    for (const auto& id : t["token_ids"]) seq.push_back(id.get<int64_t>());
  }
  EXPECT_EQ(turns[0]["logprobs"].size(), turns[0]["token_ids"].size());
  // The template and tokenizer that made the ids, by a fixed conversation's ids.
  EXPECT_EQ(rec["tokenizer"]["probe_ids"], post("/tokenize", {{"messages", rec["tokenizer"]["probe"]}})["tokens"]);
  EXPECT_EQ(rec["tokenizer"]["sha256"].get<std::string>().size(), 64u);
}

// The shipped SKILL.md renders for every protocol anvil knows, each with its own rules only.
TEST(SkillForProtocol, TheShippedPromptStatesEachProtocolsRules) {
  auto text = read_file(kSource + "/share/agent/SKILL.md");
  ASSERT_TRUE(text);
  std::string err;
  auto agent = skill_for_protocol(*text, "cuda-agent", &err);
  auto kb = skill_for_protocol(*text, "kernelbench", &err);
  ASSERT_TRUE(agent && kb) << err;
  for (const std::string* s : {&*agent, &*kb}) {
    EXPECT_EQ(s->find("<!--"), std::string::npos);
    EXPECT_NE(s->find("## Rules (checked by the judge"), std::string::npos);  // the common text stays
    EXPECT_NE(s->find("**Real work, every call**"), std::string::npos);
  }
  EXPECT_NE(agent->find("**No torch compute**"), std::string::npos);
  EXPECT_NE(agent->find("load_state_dict(strict=True)"), std::string::npos);
  EXPECT_EQ(agent->find("Torch ops are allowed"), std::string::npos);
  EXPECT_NE(kb->find("**Torch ops are allowed**"), std::string::npos);
  EXPECT_NE(kb->find("torch.allclose"), std::string::npos);
  EXPECT_EQ(kb->find("No torch compute"), std::string::npos);
  EXPECT_EQ(kb->find("torch_fallback"), std::string::npos);
}

TEST(SkillForProtocol, MalformedBlocksAreErrorsWithTheirLine) {
  std::string err;
  auto ok = skill_for_protocol("a\n<!-- protocol: x -->\nb\n<!-- end protocol -->\nc\n", "y", &err);
  ASSERT_TRUE(ok) << err;
  EXPECT_EQ(*ok, "a\nc\n");
  EXPECT_FALSE(skill_for_protocol("<!-- protocol: x -->\nb\n", "x", &err));
  EXPECT_NE(err.find("'x' is never ended"), std::string::npos) << err;
  EXPECT_FALSE(skill_for_protocol("a\n<!-- end protocol -->\n", "x", &err));
  EXPECT_EQ(err.rfind("line 2: ", 0), 0u) << err;
  EXPECT_FALSE(skill_for_protocol("<!-- protocol: x -->\n<!-- protocol: y -->\n", "x", &err));
  EXPECT_NE(err.find("inside the block for 'x'"), std::string::npos) << err;
}

TEST_F(EpisodeTest, MalformedCallsAreAnsweredAsErrorsAndCounted) {
  Json turns = Json::array({
      // Bad JSON, an unknown tool, a missing argument: three calls in one turn.
      turn({call("bash", "{\"command\": \"ls"), call("make_it_fast", Json::object()), call("read_file", Json::object())}),
      // Markup the server did not parse, left in the text.
      {{"content", "<tool_call>{\"name\": \"bash\", \"arguments\": {\"command\": \"ls\"}}</tool_call>"}},
      // A call cut by the token limit.
      {{"content", nullptr},
       {"tool_calls", {call("write_file", "{\"path\": \"kernels/a.cu\", \"content\": \"__global__ void k(")}},
       {"finish_reason", "length"}},
      turn({call("finish", Json::object())}),
  });
  ReplayServer server({{"turns", turns}}, dir_ / "server");
  auto http = make_http_client();
  ModelClient model({server.url(), "replay", ""}, *http, fast_retry());
  EpisodeResult r = run_episode(env(), model, options());
  ASSERT_TRUE(r.ran) << r.error;
  const Json& c = r.record["counters"];
  EXPECT_EQ(r.end_reason, "finish");
  EXPECT_EQ(c["malformed"]["bad_json"], 1) << c.dump();
  EXPECT_EQ(c["malformed"]["unknown_tool"], 1);
  EXPECT_EQ(c["malformed"]["bad_arguments"], 1);
  EXPECT_EQ(c["malformed"]["raw_markup"], 1);
  EXPECT_EQ(c["malformed"]["truncated_call"], 1);
  EXPECT_EQ(c["malformed_total"], 5);
  expect_answered(r.record);
  // What the model was told, in the requests the server received.
  auto reqs = server.requests();
  ASSERT_GE(reqs.size(), 4u);
  std::string second = reqs[1]["body"]["messages"].dump();
  EXPECT_NE(second.find("not valid JSON"), std::string::npos);
  EXPECT_NE(second.find("there is no tool named 'make_it_fast'"), std::string::npos);
  EXPECT_NE(second.find("missing required argument 'path'"), std::string::npos);
  EXPECT_NE(reqs[2]["body"]["messages"].dump().find("tool-call markup"), std::string::npos);
  EXPECT_NE(reqs[3]["body"]["messages"].dump().find("cut at the token limit"), std::string::npos);
  // Nothing was written: judged, and broken.
  EXPECT_EQ(r.reward, -1);
  EXPECT_NE(r.record["evaluation"]["outcome"], "ok");
}

TEST_F(EpisodeTest, AContextOverflowShortensOlderOutputsAndGoesOn) {
  Json turns = Json::array({
      turn({call("bash", {{"command", "seq 1 4000"}})}),
      turn({call("bash", {{"command", "echo small"}})}),
      turn({call("finish", Json::object())}),
  });
  ReplayServer server({{"turns", turns}, {"max_context_chars", 9000}}, dir_ / "server");
  auto http = make_http_client();
  ModelClient model({server.url(), "replay", ""}, *http, fast_retry());
  EpisodeOptions o = options();
  o.evaluate = false;
  EpisodeResult r = run_episode(env(), model, o);
  ASSERT_TRUE(r.ran) << r.error;
  EXPECT_EQ(r.end_reason, "finish");
  EXPECT_GE(r.record["counters"]["context_overflows"].get<int>(), 1);
  EXPECT_FALSE(r.record["context"]["shortened"].empty());
  // The record keeps the whole output; the requests after the overflow carried the shortened one.
  EXPECT_NE(r.record["messages"][3]["content"].get<std::string>().find("3999\n4000"), std::string::npos);
  auto reqs = server.requests();
  const Json& last = reqs.back();
  EXPECT_EQ(last["answered"], 200);
  EXPECT_LE(last["body"]["messages"].dump().size(), 9000u);
  EXPECT_NE(last["body"]["messages"].dump().find("cut by anvil to fit the context"), std::string::npos);
}

// A turn's started_at is when its request was sent, not when the model answered: a model that takes
// 2.5 s over turn 0 makes turn 1 start >= 2 s after turn 0 (both stamped after the answer: ~0 s).
TEST_F(EpisodeTest, ATurnIsStampedWhenItsRequestIsSent) {
  Json slow = turn({call("todo_write", {{"todos", Json::array()}})});
  slow["delay_s"] = 2.5;
  ReplayServer server({{"turns", {slow, turn({call("finish", Json::object())})}}}, dir_ / "server");
  auto http = make_http_client();
  ModelClient model({server.url(), "replay", ""}, *http, fast_retry());
  EpisodeOptions o = options();
  o.evaluate = false;
  EpisodeResult r = run_episode(env(), model, o);
  ASSERT_TRUE(r.ran) << r.error;
  auto epoch = [](const Json& utc) {
    std::tm tm{};
    EXPECT_NE(strptime(utc.get<std::string>().c_str(), "%Y-%m-%dT%H:%M:%SZ", &tm), nullptr) << utc;
    return static_cast<long>(timegm(&tm));
  };
  const Json& turns = r.record["turns"];
  ASSERT_EQ(turns.size(), 2u);
  EXPECT_GE(turns[0]["seconds"]["model"].get<double>(), 2.4);
  EXPECT_GE(epoch(turns[1]["started_at"]) - epoch(turns[0]["started_at"]), 2)
      << turns[0]["started_at"] << " " << turns[1]["started_at"];
  EXPECT_LE(epoch(r.record["started_at"]), epoch(turns[0]["started_at"]));
}

TEST_F(EpisodeTest, ServerErrorsAreRetriedWithBackOff) {
  // The command also prints bytes that are not UTF-8: they reach the model as U+FFFD.
  Json turns = Json::array({turn({call("bash", {{"command", "echo hello; printf 'bin\\377\\376ary'"}})}),
                            turn({call("finish", Json::object())})});
  Json faults = {{"0", {"503", "429", "drop", "garbage"}}, {"1", {"500"}}};
  ReplayServer server({{"turns", turns}, {"faults", faults}}, dir_ / "server");
  auto http = make_http_client();
  ModelClient model({server.url(), "replay", ""}, *http, fast_retry());
  EpisodeOptions o = options();
  o.evaluate = false;
  EpisodeResult r = run_episode(env(), model, o);
  ASSERT_TRUE(r.ran) << r.error;
  EXPECT_EQ(r.end_reason, "finish");
  EXPECT_EQ(r.record["turns"][0]["attempts"], 5);
  EXPECT_EQ(r.record["turns"][0]["retry_log"].size(), 4u);
  EXPECT_EQ(r.record["turns"][1]["attempts"], 2);
  EXPECT_EQ(r.record["counters"]["retries"], 5);
  EXPECT_NE(r.record["messages"][3]["content"].get<std::string>().find("hello"), std::string::npos);
  EXPECT_NE(r.record["messages"][3]["content"].get<std::string>().find("bin\xEF\xBF\xBD\xEF\xBF\xBD" "ary"),
            std::string::npos)
      << r.record["messages"][3]["content"];
}

// The wall clock was checked only between turns: a long tool call overran it. Now the call gets at
// most what is left, the calls after it are not run, and the episode ends there with its reason.
TEST_F(EpisodeTest, TheWallClockHoldsInsideALongToolCall) {
  Json turns = Json::array({turn({call("bash", {{"command", "sleep 60; echo never"}}), call("read_file", {{"path", "model.py"}})}),
                            turn({call("finish", {{"summary", "too late"}})})});
  ReplayServer server({{"turns", turns}}, dir_ / "server");
  auto http = make_http_client();
  ModelClient model({server.url(), "replay", ""}, *http, fast_retry());
  EpisodeOptions o = options();
  o.wall_clock = std::chrono::seconds(3);
  o.evaluate = false;
  EpisodeResult r = run_episode(env(), model, o);
  ASSERT_TRUE(r.ran) << r.error;
  EXPECT_EQ(r.end_reason, "wall_clock");
  ASSERT_EQ(r.record["turns"].size(), 1u);
  const Json& calls = r.record["turns"][0]["tool_calls"];
  EXPECT_LT(calls[0].value("seconds", 99.0), 10.0) << calls.dump();
  expect_answered(r.record);
  const Json& m = r.record["messages"];
  EXPECT_TRUE(m[3]["content"].get<std::string>().find("killed: the episode's wall-clock budget ran out") !=
              std::string::npos)
      << m[3];
  EXPECT_EQ(m[4]["content"], "error: read_file was not run: the episode's wall-clock budget has run out");
  EXPECT_LT(r.record.value("seconds", 99.0), 10.0);
}

TEST_F(EpisodeTest, ModelThatEmitsOnlyGarbageEndsOnItsBudget) {
  Json turns = Json::array();
  for (int i = 0; i < 5; ++i) turns.push_back({{"content", "<tool_call>{{{ not a call"}});
  ReplayServer server({{"turns", turns}}, dir_ / "server");
  auto http = make_http_client();
  ModelClient model({server.url(), "replay", ""}, *http, fast_retry());
  EpisodeOptions o = options();
  o.max_turns = 3;
  EpisodeResult r = run_episode(env(), model, o);
  ASSERT_TRUE(r.ran) << r.error;
  EXPECT_EQ(r.end_reason, "max_turns");
  EXPECT_EQ(r.reward, -1);
  EXPECT_EQ(r.record["counters"]["malformed"]["raw_markup"], 3);
  EXPECT_EQ(r.record["turns"].size(), 3u);
}

// The real binary, killed (SIGKILL) in the middle of a turn, then resumed.
TEST_F(EpisodeTest, AKilledEpisodeResumesFromItsLastCompleteTurn) {
  Json turns = Json::array({
      turn({call("bash", {{"command", "echo first > first.txt"}})}),
      // The first time, this turn is killed in flight; the second time the marker exists.
      turn({call("bash", {{"command", "if [ -f marker ]; then echo resumed; else touch marker; sleep 60; fi"}})}),
      turn({call("finish", Json::object())}),
  });
  ReplayServer server({{"turns", turns}}, dir_ / "server");
  fs::path out = dir_ / "run";
  std::vector<std::string> argv = {ANVIL_BINARY, "agent", "--task", small_task(), "--endpoint", server.url(),
                                   "--model", "replay", "--out", out.string(), "--skill", (dir_ / "skill.md").string(),
                                   "--compile-mode", "none", "--max-tokens", "256"};
  pid_t pid = fork();
  if (pid == 0) {
    int null = open("/dev/null", O_WRONLY);
    dup2(null, 1);
    dup2(null, 2);
    std::vector<char*> args;
    for (auto& a : argv) args.push_back(a.data());
    args.push_back(nullptr);
    execv(args[0], args.data());
    _exit(127);
  }
  fs::path traj = out / "01_elementwise_chain_small" / "sample-0" / "trajectory.json";
  fs::path marker = traj.parent_path() / "workdir" / "marker";
  bool in_flight = false;
  for (int i = 0; i < 600 && !in_flight; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    in_flight = fs::exists(marker);
  }
  ASSERT_TRUE(in_flight) << "the second turn never started";
  kill(pid, SIGKILL);
  waitpid(pid, nullptr, 0);
  std::string err;
  auto mid = load_trajectory(traj, &err);
  ASSERT_TRUE(mid) << err;
  EXPECT_EQ((*mid)["status"], "running");
  EXPECT_EQ((*mid)["turns"].size(), 1u);  // the turn in flight is the one lost

  // Resume.
  argv.push_back("--resume");
  SubprocessOptions so;
  so.timeout = std::chrono::seconds(300);
  SubprocessResult res = run_subprocess(argv, so);
  ASSERT_EQ(res.exit_code, 0) << res.output;
  auto done = load_trajectory(traj, &err);
  ASSERT_TRUE(done) << err;
  EXPECT_EQ((*done)["status"], "finished");
  EXPECT_EQ((*done)["end_reason"], "finish");
  EXPECT_EQ((*done)["turns"].size(), 3u);
  EXPECT_EQ((*done)["resumes"].size(), 1u);
  EXPECT_NE((*done)["messages"].dump().find("resumed"), std::string::npos);
  expect_answered(*done);
  EXPECT_TRUE((*done)["evaluation"].is_object());
  // The summary counts it.
  auto summary = read_file(out / "summary.json");
  ASSERT_TRUE(summary);
  EXPECT_EQ(Json::parse(*summary)["finished"], 1);
}

TEST_F(EpisodeTest, ManyEpisodesRunConcurrentlyAndAreSummarised) {
  ReplayServer server({{"turns", Json::array({turn({call("finish", Json::object())})})}}, dir_ / "server");
  auto http = make_http_client();
  ModelClient model({server.url(), "replay", ""}, *http, fast_retry());
  RunOptions ro;
  ro.tasks = {small_task(), kSource + "/examples/tasks/02_softmax.py"};
  ro.samples = 2;
  ro.concurrency = 3;
  ro.out = dir_ / "run";
  ro.episode = options();
  ro.progress = false;
  RunSummary s = run_episodes(env(), model, ro);
  EXPECT_EQ(s.episodes, 4);
  EXPECT_EQ(s.finished, 4) << s.json.dump(1);
  EXPECT_EQ(s.json["rewards"]["-1"], 4);
  EXPECT_EQ(s.json["end_reasons"]["finish"], 4);
  for (const char* t : {"01_elementwise_chain_small", "02_softmax"}) {
    for (const char* k : {"sample-0", "sample-1"}) EXPECT_TRUE(fs::exists(ro.out / t / k / "trajectory.json"));
  }
  // Starting the same run again without --resume refuses; with it, nothing is re-run.
  ro.resume = true;
  size_t before = server.requests().size();
  RunSummary again = run_episodes(env(), model, ro);
  EXPECT_EQ(again.finished, 4);
  EXPECT_EQ(server.requests().size(), before);
}

TEST_F(EpisodeTest, AnUnreachableEndpointOrUnknownModelIsOneClearMessage) {
  SubprocessResult r = run_subprocess({ANVIL_BINARY, "agent", "--task", small_task(), "--endpoint",
                                       "http://127.0.0.1:9/v1", "--model", "some-model", "--out",
                                       (dir_ / "run").string()});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("http://127.0.0.1:9/v1"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("some-model"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(dir_ / "run"));

  ReplayServer server({{"turns", Json::array()}}, dir_ / "server");
  r = run_subprocess({ANVIL_BINARY, "agent", "--task", small_task(), "--endpoint", server.url(), "--model", "gpt-9",
                      "--out", (dir_ / "run").string()});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("gpt-9"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("replay"), std::string::npos) << r.output;  // what it does serve
}

TEST(EpisodeParts, InvalidUtf8BecomesReplacementCharacters) {
  EXPECT_EQ(valid_utf8("abc"), "abc");
  EXPECT_EQ(valid_utf8("caf\xC3\xA9"), "caf\xC3\xA9");
  EXPECT_EQ(valid_utf8("a\xFF" "b"), "a\xEF\xBF\xBD" "b");
  EXPECT_EQ(valid_utf8("\xE2\x82"), "\xEF\xBF\xBD\xEF\xBF\xBD");  // cut short
  EXPECT_EQ(valid_utf8("\xC0\xAF"), "\xEF\xBF\xBD\xEF\xBF\xBD");  // overlong
}

TEST(EpisodeParts, ToolResultsCanGoAsUserMessages) {
  Json rec = {{"messages",
               {{{"role", "system"}, {"content", "s"}},
                {{"role", "user"}, {"content", "u"}},
                {{"role", "assistant"}, {"content", nullptr}, {"reasoning_content", "hmm"},
                 {"tool_calls", {{{"id", "c1"}, {"type", "function"}, {"function", {{"name", "bash"}, {"arguments", "{}"}}}}}}},
                {{"role", "tool"}, {"tool_call_id", "c1"}, {"name", "bash"}, {"content", "out"}}}}};
  Json plain = request_messages(rec);
  EXPECT_EQ(plain[2]["content"], "");  // null sent as ""
  EXPECT_FALSE(plain[2].contains("reasoning_content"));
  EXPECT_EQ(plain[3]["role"], "tool");
  EXPECT_EQ(plain[3]["tool_call_id"], "c1");
  Json as_user = request_messages(rec, true);
  EXPECT_EQ(as_user[3]["role"], "user");
  EXPECT_EQ(as_user[3]["content"], "[result of bash c1]\nout");
  EXPECT_FALSE(as_user[3].contains("tool_call_id"));
}

TEST(EpisodeParts, RawToolMarkupIsFound) {
  EXPECT_EQ(find_raw_tool_markup("<tool_call>{\"name\": \"bash\"}</tool_call>"), "<tool_call>");
  EXPECT_EQ(find_raw_tool_markup("[TOOL_CALLS][{\"name\": \"x\"}]"), "[TOOL_CALLS]");
  EXPECT_NE(find_raw_tool_markup("{\"name\": \"bash\", \"arguments\": {\"command\": \"ls\"}}"), "");
  EXPECT_EQ(find_raw_tool_markup("I will now write the kernel."), "");
}

TEST(EpisodeParts, PromptTokenIdsAreStoredAsDeltas) {
  std::vector<int64_t> prev = {1, 2, 3, 4, 5};
  std::vector<int64_t> prompt = {1, 2, 3, 4, 5, 6, 7};
  Json d = delta_prompt_ids(prev, prompt);
  EXPECT_EQ(d["prefix"], 5);
  EXPECT_EQ(d["ids"], Json({6, 7}));
  EXPECT_EQ(expand_prompt_ids(prev, d), prompt);
  std::vector<int64_t> other = {1, 9};
  EXPECT_EQ(expand_prompt_ids(prev, delta_prompt_ids(prev, other)), other);
}

TEST(EpisodeParts, ShorteningKeepsTheLastTurnsWhole) {
  Json rec = {{"messages", Json::array({{{"role", "system"}, {"content", "s"}}, {{"role", "user"}, {"content", "u"}}})}};
  for (int i = 0; i < 4; ++i) {
    rec["messages"].push_back({{"role", "assistant"}, {"content", nullptr}, {"tool_calls", Json::array()}});
    rec["messages"].push_back({{"role", "tool"}, {"tool_call_id", "c"}, {"content", std::string(5000, 'a' + i)}});
  }
  size_t cut = shorten_context(rec, 1);
  EXPECT_GT(cut, 0u);
  const Json& s = rec["context"]["shortened"];
  EXPECT_TRUE(s.contains("3"));
  EXPECT_TRUE(s.contains("5"));
  EXPECT_FALSE(s.contains("7"));  // the last two turns stay whole
  EXPECT_FALSE(s.contains("9"));
  Json req = request_messages(rec);
  EXPECT_LT(req[3]["content"].get<std::string>().size(), 2500u);
  EXPECT_EQ(req[9]["content"].get<std::string>().size(), 5000u);
  EXPECT_EQ(rec["messages"][3]["content"].get<std::string>().size(), 5000u);  // the record keeps it whole
}

}  // namespace
}  // namespace anvil
