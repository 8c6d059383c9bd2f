// The model client against tests/replay_server.py over real HTTP: parsing,
// token ids and log-probabilities, retries with back-off, context overflow,
// the endpoint check's messages, and concurrent use.
#include "anvil/agent/model_client.h"

#include <gtest/gtest.h>

#include <thread>

#include "anvil/agent/replay_fixture.h"

namespace anvil {
namespace {

using Json = nlohmann::json;
using std::chrono::milliseconds;

fs::path scratch(const std::string& name) { return fs::path(ANVIL_TEST_CACHE_DIR) / "model_client" / name; }

Json one_call_turn() {
  return {{"content", "thinking"}, {"tool_calls", {{{"name", "bash"}, {"arguments", {{"command", "ls"}}}}}}};
}

const Json kMessages = Json::array({{{"role", "user"}, {"content", "hi"}}});

TEST(ModelClient, ParsesAToolCallTurnWithTokenIdsAndLogprobs) {
  ReplayServer server({{"turns", {one_call_turn()}}}, scratch("parse"));
  ASSERT_GT(server.port(), 0);
  auto http = make_http_client();
  ModelClient c({server.url(), "replay", ""}, *http);
  ChatResponse r = c.chat(kMessages, Json::array(), SamplingOptions{});
  ASSERT_EQ(r.status, ChatResponse::Status::ok) << r.error;
  EXPECT_EQ(r.attempts, 1);
  EXPECT_EQ(r.finish_reason, "tool_calls");
  EXPECT_EQ(r.message["role"], "assistant");
  EXPECT_EQ(r.message["tool_calls"][0]["function"]["name"], "bash");
  EXPECT_EQ(Json::parse(r.message["tool_calls"][0]["function"]["arguments"].get<std::string>())["command"], "ls");
  ASSERT_TRUE(r.token_ids.is_array());
  ASSERT_TRUE(r.logprobs.is_array());
  EXPECT_EQ(r.token_ids.size(), r.logprobs.size());
  EXPECT_TRUE(r.prompt_token_ids.is_array());
  EXPECT_GT(r.usage["prompt_tokens"].get<int>(), 0);
  // What was sent: the model, the optional fields, no tools when there are none.
  Json body = server.requests()[0]["body"];
  EXPECT_EQ(body["model"], "replay");
  EXPECT_EQ(body["logprobs"], true);
  EXPECT_EQ(body["return_token_ids"], true);
  EXPECT_FALSE(body.contains("tools"));
}

TEST(ModelClient, RetriesServerErrorsWithDoublingBackOff) {
  ReplayServer server({{"turns", {one_call_turn()}}, {"faults", {{"0", {"503", "500", "drop", "garbage"}}}}},
                      scratch("retry"));
  auto http = make_http_client();
  std::vector<milliseconds> waits;
  RetryPolicy rp;
  rp.initial_backoff = milliseconds(10);
  rp.max_backoff = milliseconds(1000);
  ModelClient c({server.url(), "replay", ""}, *http, rp, [&](milliseconds d) { waits.push_back(d); });
  ChatResponse r = c.chat(kMessages, Json::array(), SamplingOptions{});
  ASSERT_EQ(r.status, ChatResponse::Status::ok) << r.error;
  EXPECT_EQ(r.attempts, 5);
  ASSERT_EQ(r.retry_log.size(), 4u);
  EXPECT_NE(r.retry_log[0].find("HTTP 503"), std::string::npos);
  EXPECT_NE(r.retry_log[2].find("no answer"), std::string::npos);
  EXPECT_NE(r.retry_log[3].find("not JSON"), std::string::npos);
  EXPECT_EQ(waits, (std::vector<milliseconds>{milliseconds(10), milliseconds(20), milliseconds(40), milliseconds(80)}));
}

TEST(ModelClient, HonoursRetryAfterAndGivesUpAfterItsAttempts) {
  ReplayServer server({{"turns", {one_call_turn()}}, {"faults", {{"0", {"429", "503", "503", "503"}}}}},
                      scratch("giveup"));
  auto http = make_http_client();
  std::vector<milliseconds> waits;
  RetryPolicy rp;
  rp.max_attempts = 3;
  rp.initial_backoff = milliseconds(50);
  ModelClient c({server.url(), "replay", ""}, *http, rp, [&](milliseconds d) { waits.push_back(d); });
  ChatResponse r = c.chat(kMessages, Json::array(), SamplingOptions{});
  EXPECT_EQ(r.status, ChatResponse::Status::failed);
  EXPECT_EQ(r.attempts, 3);
  ASSERT_EQ(waits.size(), 2u);
  EXPECT_EQ(waits[0], milliseconds(0));  // Retry-After: 0
  EXPECT_NE(r.error.find("gave up after 3 attempts"), std::string::npos) << r.error;
}

TEST(ModelClient, AContextOverflowIsItsOwnStatusAndNotRetried) {
  ReplayServer server({{"turns", {one_call_turn()}}, {"max_context_chars", 10}}, scratch("overflow"));
  auto http = make_http_client();
  ModelClient c({server.url(), "replay", ""}, *http);
  ChatResponse r = c.chat(kMessages, Json::array(), SamplingOptions{});
  EXPECT_EQ(r.status, ChatResponse::Status::context_overflow);
  EXPECT_EQ(r.attempts, 1);
  EXPECT_TRUE(is_context_overflow(400, "This model's maximum context length is 4096 tokens."));
  EXPECT_TRUE(is_context_overflow(400, "{\"error\": {\"code\": \"context_length_exceeded\"}}"));
  EXPECT_FALSE(is_context_overflow(400, "invalid tool_choice"));
  EXPECT_FALSE(is_context_overflow(500, "maximum context length"));
}

TEST(ModelClient, AnUnknownModelFailsAtOnce) {
  ReplayServer server({{"turns", {one_call_turn()}}}, scratch("unknown"));
  auto http = make_http_client();
  ModelClient c({server.url(), "gpt-9", ""}, *http);
  ChatResponse r = c.chat(kMessages, Json::array(), SamplingOptions{});
  EXPECT_EQ(r.status, ChatResponse::Status::failed);
  EXPECT_EQ(r.attempts, 1);
  EXPECT_EQ(r.http_status, 404);
  EXPECT_NE(r.error.find("does not exist"), std::string::npos);
  std::string problem = c.check();
  EXPECT_NE(problem.find("does not serve model 'gpt-9'"), std::string::npos) << problem;
  EXPECT_NE(problem.find("replay"), std::string::npos);
}

TEST(ModelClient, CheckNamesTheUrlAndModelOfADeadEndpoint) {
  auto http = make_http_client();
  ModelClient c({"http://127.0.0.1:9", "m1", ""}, *http, {}, [](milliseconds) {});
  EXPECT_EQ(c.endpoint().base_url, "http://127.0.0.1:9/v1");
  std::string problem = c.check();
  EXPECT_NE(problem.find("http://127.0.0.1:9/v1"), std::string::npos) << problem;
  EXPECT_NE(problem.find("m1"), std::string::npos);
  EXPECT_NE(problem.find("3 attempts"), std::string::npos);
}

TEST(ModelClient, ServesManyThreadsAtOnce) {
  ReplayServer server({{"turns", {one_call_turn()}}}, scratch("threads"));
  auto http = make_http_client();
  ModelClient c({server.url(), "replay", ""}, *http);
  std::atomic<int> ok{0};
  std::vector<std::thread> ts;
  for (int i = 0; i < 8; ++i) {
    ts.emplace_back([&] {
      if (c.chat(kMessages, Json::array(), SamplingOptions{}).status == ChatResponse::Status::ok) ++ok;
    });
  }
  for (auto& t : ts) t.join();
  EXPECT_EQ(ok, 8);
}

TEST(Http, HeaderLookupIsCaseInsensitiveAndTakesTheLast) {
  HttpResponse r;
  r.headers = {"HTTP/1.1 100 Continue", "HTTP/1.1 429 Too Many", "retry-after: 3", "Content-Type: x"};
  EXPECT_EQ(r.header("Retry-After"), "3");
  EXPECT_EQ(r.header("content-type"), "x");
  EXPECT_EQ(r.header("missing"), "");
}

}  // namespace
}  // namespace anvil
