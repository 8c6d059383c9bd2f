// The HTTP and model clients against tests/replay_server.py, a separate
// process speaking real HTTP on loopback: parsing, token ids and
// log-probabilities, what is sent, retries with back-off, the optional-field
// fallback, context overflow, the endpoint check's messages, and concurrent
// use. Response shapes the replay server does not produce (vLLM variants, a
// llama-cpp-python 500) go through FakeHttp. Back-off sleeps are recorded,
// never slept, so the whole suite takes about a second.
#include "anvil/agent/model_client.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <deque>
#include <thread>

#include "support/replay_fixture.h"

namespace anvil {
namespace {

using Json = nlohmann::json;
using std::chrono::milliseconds;

fs::path scratch(const std::string& name) { return fs::path(ANVIL_TEST_CACHE_DIR) / "model_client" / name; }

Json one_call_turn() {
  return {{"content", "thinking"}, {"tool_calls", {{{"name", "bash"}, {"arguments", {{"command", "ls"}}}}}}};
}

const Json kMessages = Json::array({{{"role", "user"}, {"content", "hi"}}});

bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// A loopback port with nothing listening: bound by us, then closed, so a
// connect is refused at once.
int closed_port() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  socklen_t len = sizeof a;
  int port = 0;
  if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0) {
    port = ntohs(a.sin_port);
  }
  close(fd);
  return port;
}

// Records the back-off waits instead of sleeping them.
struct SleepRecorder {
  std::vector<milliseconds> waits;
  std::function<void(milliseconds)> hook() {
    return [this](milliseconds d) { waits.push_back(d); };
  }
};

RetryPolicy fast_policy(int max_attempts = 8) {
  RetryPolicy rp;
  rp.max_attempts = max_attempts;
  rp.initial_backoff = milliseconds(10);
  rp.max_backoff = milliseconds(1000);
  return rp;
}

// Answers from a queue and records the requests (shapes the replay server does not make).
class FakeHttp : public HttpClient {
 public:
  std::deque<HttpResponse> answers;
  std::vector<HttpRequest> sent;
  HttpResponse send(const HttpRequest& req) override {
    sent.push_back(req);
    if (answers.empty()) {
      HttpResponse none;
      none.error = "FakeHttp: no more answers";
      return none;
    }
    HttpResponse r = answers.front();
    answers.pop_front();
    return r;
  }
  void answer(long status, const std::string& body) {
    HttpResponse r;
    r.transport_ok = true;
    r.status = status;
    r.body = body;
    answers.push_back(r);
  }
};

// --- what comes back --------------------------------------------------------

TEST(ModelClient, ParsesAToolCallTurnWithTokenIdsAndLogprobs) {
  ReplayServer server({{"turns", {one_call_turn()}}}, scratch("parse"));
  ASSERT_GT(server.port(), 0);
  auto http = make_http_client();
  ModelClient c({server.url(), "replay", ""}, *http);
  ChatResponse r = c.chat(kMessages, Json::array(), SamplingOptions{});
  ASSERT_EQ(r.status, ChatResponse::Status::ok) << r.error;
  EXPECT_EQ(r.error, "");
  EXPECT_EQ(r.attempts, 1);
  EXPECT_EQ(r.http_status, 200);
  EXPECT_TRUE(r.retry_log.empty());
  EXPECT_EQ(r.finish_reason, "tool_calls");
  EXPECT_EQ(r.message["role"], "assistant");
  EXPECT_EQ(r.message["content"], "thinking");
  EXPECT_EQ(r.message["tool_calls"][0]["id"], "call_0_0");
  EXPECT_EQ(r.message["tool_calls"][0]["function"]["name"], "bash");
  EXPECT_EQ(Json::parse(r.message["tool_calls"][0]["function"]["arguments"].get<std::string>())["command"], "ls");
  // Token ids (the replay server's are the answer's UTF-8 bytes) and one logprob per id, carrying it.
  ASSERT_TRUE(r.token_ids.is_array());
  ASSERT_TRUE(r.logprobs.is_array());
  ASSERT_EQ(r.token_ids.size(), r.logprobs.size());
  EXPECT_EQ(r.token_ids[0], int('t'));
  EXPECT_EQ(r.logprobs[0]["token"], "t");
  EXPECT_DOUBLE_EQ(r.logprobs[0]["logprob"].get<double>(), -0.1);
  EXPECT_EQ(r.logprobs[0]["token_id"], r.token_ids[0]);
  ASSERT_TRUE(r.prompt_token_ids.is_array());
  EXPECT_FALSE(r.prompt_token_ids.empty());
  EXPECT_GT(r.usage["prompt_tokens"].get<int>(), 0);
  EXPECT_GT(r.seconds, 0);
  // What was sent: the model, the optional fields, no tools when there are none.
  auto reqs = server.requests();
  ASSERT_EQ(reqs.size(), 1u);
  const Json& body = reqs[0]["body"];
  EXPECT_EQ(reqs[0]["path"], "/v1/chat/completions");
  EXPECT_EQ(body["model"], "replay");
  EXPECT_EQ(body["messages"], kMessages);
  EXPECT_EQ(body["logprobs"], true);
  EXPECT_EQ(body["return_token_ids"], true);
  EXPECT_FALSE(body.contains("tools"));
  EXPECT_FALSE(body.contains("tool_choice"));
  EXPECT_TRUE(reqs[0]["authorization"].is_null());
}

TEST(ModelClient, SendsToolsSamplingExtraFieldsAndTheApiKey) {
  ReplayServer server({{"turns", {{{"content", nullptr}}}}}, scratch("send"));
  auto http = make_http_client();
  ModelClient c({server.url(), "replay", "sk-test"}, *http);
  Json tools = Json::array({{{"type", "function"},
                             {"function", {{"name", "bash"}, {"parameters", {{"type", "object"}}}}}}});
  SamplingOptions s;
  s.temperature = 0.7;
  s.top_p = 0.9;
  s.top_k = 20;
  s.max_tokens = 256;
  s.seed = 42;
  s.logprobs = false;
  s.return_token_ids = false;
  s.extra = {{"chat_template_kwargs", {{"enable_thinking", false}}}, {"temperature", 0.5}};
  ChatResponse r = c.chat(kMessages, tools, s);
  ASSERT_EQ(r.status, ChatResponse::Status::ok) << r.error;
  EXPECT_TRUE(r.message["content"].is_null());  // null stays null
  EXPECT_EQ(r.finish_reason, "stop");
  EXPECT_TRUE(r.token_ids.is_null());  // not asked for
  EXPECT_TRUE(r.logprobs.is_null());
  EXPECT_TRUE(r.prompt_token_ids.is_null());
  Json req = server.requests()[0];
  EXPECT_EQ(req["authorization"], "Bearer sk-test");
  const Json& body = req["body"];
  EXPECT_EQ(body["tools"], tools);
  EXPECT_EQ(body["tool_choice"], "auto");
  EXPECT_EQ(body["temperature"], 0.5);  // extra is merged last, over the sampling fields
  EXPECT_EQ(body["top_p"], 0.9);
  EXPECT_EQ(body["top_k"], 20);
  EXPECT_EQ(body["max_tokens"], 256);
  EXPECT_EQ(body["seed"], 42);
  EXPECT_EQ(body["chat_template_kwargs"]["enable_thinking"], false);
  EXPECT_FALSE(body.contains("logprobs"));
  EXPECT_FALSE(body.contains("return_token_ids"));
  // What the trajectory records.
  Json sj = s.to_json();
  EXPECT_EQ(sj["top_k"], 20);
  EXPECT_EQ(sj["logprobs"], false);
  EXPECT_EQ(sj["extra"]["chat_template_kwargs"]["enable_thinking"], false);
}

TEST(ModelClient, NormalisesTheBaseUrl) {
  FakeHttp http;
  for (auto [in, out] : std::vector<std::pair<std::string, std::string>>{
           {"http://h:8000", "http://h:8000/v1"},
           {"http://h:8000/", "http://h:8000/v1"},
           {"http://h:8000/v1", "http://h:8000/v1"},
           {"http://h:8000/v1//", "http://h:8000/v1"},
           {"https://api.example.com/openai", "https://api.example.com/openai/v1"}}) {
    ModelClient c({in, "m", ""}, http);
    EXPECT_EQ(c.endpoint().base_url, out) << in;
  }
}

TEST(ModelClient, AcceptsVllmResponseVariants) {
  FakeHttp http;
  // No content key, no role, prompt_token_ids on the choice, tokens as "token_id:N", no usage.
  http.answer(200, R"({"choices":[{"message":{"tool_calls":[]},"finish_reason":"length",
      "prompt_token_ids":[1,2,3],"token_ids":[17,18],
      "logprobs":{"content":[{"token":"token_id:17","logprob":-0.5},{"token":"token_id:18","logprob":-1.5}]}}]})");
  ModelClient c({"http://fake", "m", ""}, http);
  ChatResponse r = c.chat(kMessages, Json::array(), SamplingOptions{});
  ASSERT_EQ(r.status, ChatResponse::Status::ok) << r.error;
  EXPECT_EQ(r.message["role"], "assistant");
  EXPECT_TRUE(r.message.contains("content"));
  EXPECT_TRUE(r.message["content"].is_null());
  EXPECT_EQ(r.message["tool_calls"], Json::array());  // kept as returned
  EXPECT_EQ(r.finish_reason, "length");
  EXPECT_TRUE(r.usage.is_null());
  EXPECT_EQ(r.prompt_token_ids, Json({1, 2, 3}));
  EXPECT_EQ(r.token_ids, Json({17, 18}));
  EXPECT_EQ(r.logprobs, Json::parse(R"([{"token":"token_id:17","logprob":-0.5,"token_id":17},
                                        {"token":"token_id:18","logprob":-1.5,"token_id":18}])"));
  ASSERT_EQ(http.sent.size(), 1u);
  EXPECT_EQ(http.sent[0].url, "http://fake/v1/chat/completions");
  EXPECT_NE(std::find(http.sent[0].headers.begin(), http.sent[0].headers.end(), "Content-Type: application/json"),
            http.sent[0].headers.end());
}

// --- retries -----------------------------------------------------------------

TEST(ModelClient, RetriesServerErrorsWithDoublingBackOff) {
  ReplayServer server({{"turns", {one_call_turn()}}, {"faults", {{"0", {"503", "500", "drop", "garbage"}}}}},
                      scratch("retry"));
  auto http = make_http_client();
  SleepRecorder sleep;
  ModelClient c({server.url(), "replay", ""}, *http, fast_policy(), sleep.hook());
  ChatResponse r = c.chat(kMessages, Json::array(), SamplingOptions{});
  ASSERT_EQ(r.status, ChatResponse::Status::ok) << r.error;
  EXPECT_EQ(r.error, "");
  EXPECT_EQ(r.attempts, 5);
  EXPECT_EQ(r.finish_reason, "tool_calls");
  ASSERT_EQ(r.retry_log.size(), 4u);
  EXPECT_TRUE(has(r.retry_log[0], "HTTP 503: ")) << r.retry_log[0];
  EXPECT_TRUE(has(r.retry_log[0], "injected fault 503"));
  EXPECT_TRUE(has(r.retry_log[1], "HTTP 500"));
  EXPECT_TRUE(has(r.retry_log[2], "no answer: ")) << r.retry_log[2];
  EXPECT_TRUE(has(r.retry_log[3], "200 with a body that is not JSON: <html>")) << r.retry_log[3];
  EXPECT_EQ(sleep.waits, (std::vector<milliseconds>{milliseconds(10), milliseconds(20), milliseconds(40),
                                                    milliseconds(80)}));
  // The server saw five requests for turn 0, the last answered.
  auto reqs = server.requests();
  ASSERT_EQ(reqs.size(), 5u);
  EXPECT_EQ(reqs[2]["answered"], "drop");
  EXPECT_EQ(reqs[4]["answered"], 200);
}

TEST(ModelClient, HonoursRetryAfterCappedAndGivesUpAfterItsAttempts) {
  ReplayServer server({{"turns", {one_call_turn()}}, {"faults", {{"0", {"429", "429:30", "503", "503"}}}}},
                      scratch("giveup"));
  auto http = make_http_client();
  SleepRecorder sleep;
  ModelClient c({server.url(), "replay", ""}, *http, fast_policy(3), sleep.hook());
  ChatResponse r = c.chat(kMessages, Json::array(), SamplingOptions{});
  EXPECT_EQ(r.status, ChatResponse::Status::failed);
  EXPECT_EQ(r.attempts, 3);
  EXPECT_EQ(r.http_status, 503);
  EXPECT_EQ(r.retry_log.size(), 3u);
  // Retry-After: 0, then Retry-After: 30 capped at max_backoff; none after the last attempt.
  EXPECT_EQ(sleep.waits, (std::vector<milliseconds>{milliseconds(0), milliseconds(1000)}));
  EXPECT_TRUE(has(r.error, "gave up after 3 attempts; the last: HTTP 503")) << r.error;
  EXPECT_TRUE(has(r.error, server.url() + "/chat/completions")) << r.error;
}

TEST(ModelClient, OtherClientErrorsFailAtOnce) {
  ReplayServer server({{"turns", {one_call_turn()}}, {"faults", {{"0", {"400"}}}}}, scratch("400"));
  auto http = make_http_client();
  SleepRecorder sleep;
  ModelClient c({server.url(), "replay", ""}, *http, fast_policy(), sleep.hook());
  ChatResponse r = c.chat(kMessages, Json::array(), SamplingOptions{});
  EXPECT_EQ(r.status, ChatResponse::Status::failed);
  EXPECT_EQ(r.attempts, 1);
  EXPECT_EQ(r.http_status, 400);
  EXPECT_TRUE(has(r.error, "HTTP 400 (not retried): {")) << r.error;
  EXPECT_TRUE(has(r.error, "injected fault 400")) << r.error;
  EXPECT_TRUE(sleep.waits.empty());
}

TEST(ModelClient, ValidationErrorsReportedAs500AreNotRetried) {
  FakeHttp http;
  http.answer(500, R"({"detail":"1 validation error for Request: body -> messages -> 1 -> content: none is not allowed"})");
  ModelClient c({"http://fake", "m", ""}, http, fast_policy(), [](milliseconds) {});
  ChatResponse r = c.chat(kMessages, Json::array(), SamplingOptions{});
  EXPECT_EQ(r.status, ChatResponse::Status::failed);
  EXPECT_EQ(r.attempts, 1);
  EXPECT_TRUE(has(r.error, "validation error")) << r.error;
}

TEST(ModelClient, DropsRefusedOptionalFieldsOnceAndRemembers) {
  ReplayServer server({{"turns", {one_call_turn(), one_call_turn()}}, {"reject_fields", {"return_token_ids"}}},
                      scratch("optional"));
  auto http = make_http_client();
  SleepRecorder sleep;
  ModelClient c({server.url(), "replay", ""}, *http, fast_policy(1), sleep.hook());
  SamplingOptions s;
  s.top_k = 5;
  ChatResponse r = c.chat(kMessages, Json::array(), s);
  ASSERT_EQ(r.status, ChatResponse::Status::ok) << r.error;
  EXPECT_EQ(r.attempts, 2);  // the retry without optional fields is allowed even with max_attempts 1
  ASSERT_EQ(r.retry_log.size(), 1u);
  EXPECT_TRUE(has(r.retry_log[0], "refused an optional field")) << r.retry_log[0];
  EXPECT_TRUE(has(r.retry_log[0], "Unrecognized request argument supplied: return_token_ids")) << r.retry_log[0];
  EXPECT_TRUE(sleep.waits.empty());  // asked again at once
  EXPECT_TRUE(r.token_ids.is_null());
  // Later requests leave them out from the start.
  Json history = kMessages;
  history.push_back(r.message);
  ChatResponse r2 = c.chat(history, Json::array(), s);
  ASSERT_EQ(r2.status, ChatResponse::Status::ok) << r2.error;
  EXPECT_EQ(r2.attempts, 1);
  auto reqs = server.requests();
  ASSERT_EQ(reqs.size(), 3u);
  EXPECT_EQ(reqs[0]["answered"], 400);
  EXPECT_EQ(reqs[0]["body"]["top_k"], 5);
  for (size_t i : {1u, 2u}) {
    for (const char* f : {"logprobs", "return_token_ids", "top_k"}) EXPECT_FALSE(reqs[i]["body"].contains(f)) << f;
  }
  // A 400 naming a field we did not send is an ordinary client error.
  FakeHttp fake;
  fake.answer(400, R"({"error":{"message":"top_k must be positive"}})");
  SamplingOptions none;
  none.logprobs = false;
  none.return_token_ids = false;
  ModelClient c2({"http://fake", "m", ""}, fake, fast_policy(), [](milliseconds) {});
  ChatResponse r3 = c2.chat(kMessages, Json::array(), none);
  EXPECT_EQ(r3.status, ChatResponse::Status::failed);
  EXPECT_EQ(r3.attempts, 1);
  // A 400 that only echoes our body is asked once more without the fields, but not remembered
  // when that is refused as well: the next call sends them again.
  FakeHttp echo;
  echo.answer(400, R"({"detail":"bad message","input":{"logprobs":true,"messages":[]}})");
  echo.answer(400, R"({"detail":"bad message"})");
  echo.answer(200, R"({"choices":[{"message":{"content":"ok"}}]})");
  ModelClient c3({"http://fake", "m", ""}, echo, fast_policy(), [](milliseconds) {});
  ChatResponse r4 = c3.chat(kMessages, Json::array(), SamplingOptions{});
  EXPECT_EQ(r4.status, ChatResponse::Status::failed);
  EXPECT_EQ(r4.attempts, 2);
  EXPECT_TRUE(has(r4.error, "bad message")) << r4.error;
  ASSERT_EQ(c3.chat(kMessages, Json::array(), SamplingOptions{}).status, ChatResponse::Status::ok);
  ASSERT_EQ(echo.sent.size(), 3u);
  EXPECT_TRUE(Json::parse(echo.sent[0].body).contains("logprobs"));
  EXPECT_FALSE(Json::parse(echo.sent[1].body).contains("logprobs"));
  EXPECT_TRUE(Json::parse(echo.sent[2].body).contains("logprobs"));
}

TEST(ModelClient, AContextOverflowIsItsOwnStatusAndNotRetried) {
  ReplayServer server({{"turns", {one_call_turn()}}, {"max_context_chars", 10}}, scratch("overflow"));
  auto http = make_http_client();
  SleepRecorder sleep;
  ModelClient c({server.url(), "replay", ""}, *http, fast_policy(), sleep.hook());
  ChatResponse r = c.chat(kMessages, Json::array(), SamplingOptions{});
  EXPECT_EQ(r.status, ChatResponse::Status::context_overflow);
  EXPECT_EQ(r.attempts, 1);
  EXPECT_EQ(r.http_status, 400);
  EXPECT_TRUE(has(r.error, "maximum context length")) << r.error;
  EXPECT_TRUE(sleep.waits.empty());
}

TEST(ModelClient, RecognisesTheServersContextOverflowPhrasings) {
  EXPECT_TRUE(is_context_overflow(400, "This model's maximum context length is 4096 tokens."));  // vLLM
  EXPECT_TRUE(is_context_overflow(400, "The input (5000 tokens) is longer than the model's context length"));  // SGLang
  EXPECT_TRUE(is_context_overflow(400, "{\"error\": {\"code\": \"context_length_exceeded\"}}"));  // OpenAI
  EXPECT_TRUE(is_context_overflow(400, "the request exceeds the available context size"));  // llama.cpp
  EXPECT_TRUE(is_context_overflow(413, "Prompt is too long"));
  EXPECT_TRUE(is_context_overflow(400, "MAXIMUM CONTEXT LENGTH"));
  EXPECT_FALSE(is_context_overflow(400, "invalid tool_choice"));
  EXPECT_FALSE(is_context_overflow(500, "maximum context length"));
  EXPECT_FALSE(is_context_overflow(200, "maximum context length"));
}

TEST(ModelClient, AnUnknownModelFailsAtOnce) {
  ReplayServer server({{"turns", {one_call_turn()}}}, scratch("unknown"));
  auto http = make_http_client();
  ModelClient c({server.url(), "gpt-9", ""}, *http);
  ChatResponse r = c.chat(kMessages, Json::array(), SamplingOptions{});
  EXPECT_EQ(r.status, ChatResponse::Status::failed);
  EXPECT_EQ(r.attempts, 1);
  EXPECT_EQ(r.http_status, 404);
  EXPECT_TRUE(has(r.error, "The model `gpt-9` does not exist")) << r.error;
  EXPECT_TRUE(has(r.error, "(model gpt-9)")) << r.error;
}

// --- check() -------------------------------------------------------------------

TEST(ModelClient, CheckPassesWhenTheModelIsServed) {
  ReplayServer server({{"turns", Json::array()}}, scratch("check-ok"));
  auto http = make_http_client();
  ModelClient c({server.url(), "replay", ""}, *http);
  EXPECT_EQ(c.check(), "");
  auto reqs = server.requests();
  ASSERT_EQ(reqs.size(), 1u);
  EXPECT_EQ(reqs[0]["path"], "/v1/models");
}

TEST(ModelClient, CheckListsWhatIsServedForAWrongModel) {
  ReplayServer server({{"model", "qwen3-8b"}, {"turns", Json::array()}}, scratch("check-wrong"));
  auto http = make_http_client();
  ModelClient c({server.url(), "gpt-9", ""}, *http);
  EXPECT_EQ(c.check(), "the model server at " + server.url() +
                           " does not serve model 'gpt-9'; it serves: qwen3-8b (pass one of them with --model)");
}

TEST(ModelClient, CheckNamesTheUrlAndModelOfADeadEndpoint) {
  int port = closed_port();
  ASSERT_GT(port, 0);
  std::string base = "http://127.0.0.1:" + std::to_string(port);
  auto http = make_http_client();
  SleepRecorder sleep;
  ModelClient c({base, "m1", ""}, *http, {}, sleep.hook());
  EXPECT_EQ(c.endpoint().base_url, base + "/v1");
  std::string problem = c.check();
  EXPECT_TRUE(has(problem, "cannot reach the model server at " + base + "/v1 for model 'm1'")) << problem;
  EXPECT_TRUE(has(problem, "(GET " + base + "/v1/models, 3 attempts over ")) << problem;
  EXPECT_TRUE(has(problem, "is the server running")) << problem;
  EXPECT_EQ(sleep.waits, (std::vector<milliseconds>{milliseconds(1000), milliseconds(2000)}));
}

TEST(ModelClient, CheckFallsBackToAChatRequestWithoutModelsRoute) {
  ReplayServer server({{"turns", Json::array()}, {"models_route", false}}, scratch("check-fallback"));
  auto http = make_http_client();
  ModelClient good({server.url(), "replay", ""}, *http);
  EXPECT_EQ(good.check(), "");
  ModelClient bad({server.url(), "gpt-9", ""}, *http);
  std::string problem = bad.check();
  EXPECT_TRUE(has(problem, "has no usable GET /models (HTTP 404)")) << problem;
  EXPECT_TRUE(has(problem, "for model 'gpt-9' failed: HTTP 404")) << problem;
  EXPECT_TRUE(has(problem, "The model `gpt-9` does not exist")) << problem;
  auto reqs = server.requests();
  ASSERT_EQ(reqs.size(), 4u);  // GET, POST; GET, POST
  EXPECT_EQ(reqs[1]["body"]["max_tokens"], 1);
}

// --- concurrency -----------------------------------------------------------------

TEST(ModelClient, ServesManyThreadsAtOnce) {
  Json turns = Json::array();
  Json faults = Json::object();
  for (int i = 0; i < 8; ++i) {
    turns.push_back({{"content", "turn " + std::to_string(i)}});
    faults[std::to_string(i)] = {i % 2 ? "503" : "drop"};  // retries run concurrently too
  }
  ReplayServer server({{"turns", turns}, {"faults", faults}}, scratch("threads"));
  auto http = make_http_client();
  ModelClient c({server.url(), "replay", ""}, *http, fast_policy(), [](milliseconds) {});
  std::atomic<int> ok{0};
  std::vector<std::thread> ts;
  for (int i = 0; i < 8; ++i) {
    ts.emplace_back([&, i] {
      // Thread i sends a history with i assistant messages, so it must get turn i.
      Json history = kMessages;
      for (int k = 0; k < i; ++k) {
        history.push_back({{"role", "assistant"}, {"content", "turn " + std::to_string(k)}});
        history.push_back({{"role", "user"}, {"content", "go on"}});
      }
      ChatResponse r = c.chat(history, Json::array(), SamplingOptions{});
      if (r.status == ChatResponse::Status::ok && r.message["content"] == "turn " + std::to_string(i)) ++ok;
    });
  }
  for (auto& t : ts) t.join();
  EXPECT_EQ(ok, 8);
  EXPECT_EQ(server.requests().size(), 16u);
}

// --- HttpClient ------------------------------------------------------------------

TEST(Http, GetAndPostOverRealHttp) {
  ReplayServer server({{"turns", Json::array()}}, scratch("http"));
  ASSERT_GT(server.port(), 0);
  auto http = make_http_client();
  HttpRequest get;
  get.method = "GET";
  get.url = server.url() + "/models";
  HttpResponse r = http->send(get);
  ASSERT_TRUE(r.transport_ok) << r.error;
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(Json::parse(r.body)["data"][0]["id"], "replay");
  EXPECT_EQ(r.header("content-type"), "application/json");
  EXPECT_GT(r.seconds, 0);
  // A large POST (bigger than curl's 1 KiB Expect: 100-continue threshold) arrives whole.
  HttpRequest post;
  post.url = server.url() + "/chat/completions";
  post.headers = {"Content-Type: application/json"};
  std::string big(2 << 20, 'x');
  post.body = Json({{"model", "replay"}, {"messages", {{{"role", "user"}, {"content", big}}}}}).dump();
  r = http->send(post);
  ASSERT_TRUE(r.transport_ok) << r.error;
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(server.requests().back()["body"]["messages"][0]["content"].get<std::string>().size(), big.size());
  post.url = server.url() + "/nowhere";
  r = http->send(post);
  ASSERT_TRUE(r.transport_ok);
  EXPECT_EQ(r.status, 404);
}

TEST(Http, ATransportFailureIsNotAnException) {
  int port = closed_port();
  auto http = make_http_client();
  HttpRequest req;
  req.method = "GET";
  req.url = "http://127.0.0.1:" + std::to_string(port) + "/v1/models";
  HttpResponse r = http->send(req);
  EXPECT_FALSE(r.transport_ok);
  EXPECT_EQ(r.status, 0);
  EXPECT_TRUE(has(r.error, "127.0.0.1")) << r.error;
  req.method = "PUT";
  r = http->send(req);
  EXPECT_FALSE(r.transport_ok);
  EXPECT_TRUE(has(r.error, "unsupported HTTP method 'PUT'")) << r.error;
}

TEST(Http, HeaderLookupIsCaseInsensitiveAndReadsTheFinalResponse) {
  HttpResponse r;
  r.headers = {"HTTP/1.1 100 Continue", "HTTP/1.1 429 Too Many", "retry-after:  3 ", "Content-Type: x"};
  EXPECT_EQ(r.header("Retry-After"), "3");
  EXPECT_EQ(r.header("content-type"), "x");
  EXPECT_EQ(r.header("missing"), "");
  r.headers = {"HTTP/1.1 503 Busy", "Retry-After: 9", "HTTP/1.1 200 OK", "Content-Type: y"};
  EXPECT_EQ(r.header("Retry-After"), "");  // an earlier response's header
  EXPECT_EQ(r.header("Content-Type"), "y");
}

}  // namespace
}  // namespace anvil
