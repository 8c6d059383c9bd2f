// A kept episode's example: the token sequence, its loss mask, log-probabilities and spans exact on
// a hand-written token-level record; a chat-mode record's messages as the model saw them.
#include "anvil/train/sft_example.h"

#include <gtest/gtest.h>

#include "support/test_records.h"

namespace anvil {
namespace {

using Json = nlohmann::json;
using test_records::add_tokens;
using test_records::add_turn;

// Three turns: the opening prompt (3 ids), the model's 2; the tool results (2), the model's 1; a
// nudge (1), the model's 2.
Json three_turns() {
  Json r = test_records::token_record();
  add_turn(r, {{"read_file", {{"path", "model.py"}}, "class Model"}}, "reading");
  add_tokens(r, {1, 2, 3}, {10, 11}, "opening");
  add_turn(r, {}, "no call");
  add_tokens(r, {4, 5}, {12}, "tool");
  add_turn(r, {{"finish", Json::object()}});
  add_tokens(r, {6}, {13, 14}, "user");
  r["turns"][1]["logprobs"] = {{{"token", "x"}, {"logprob", -1.25}}};
  return r;
}

TEST(SftExample, TheSequenceMasksAllButTheModelsSampledIds) {
  TokenSequence s = token_sequence(three_turns());
  EXPECT_EQ(s.input_ids, (std::vector<int64_t>{1, 2, 3, 10, 11, 4, 5, 12, 6, 13, 14}));
  EXPECT_EQ(s.loss_mask, (std::vector<uint8_t>{0, 0, 0, 1, 1, 0, 0, 1, 0, 1, 1}));
  ASSERT_TRUE(s.has_logprobs);
  EXPECT_EQ(s.logprobs, (std::vector<double>{0, 0, 0, -0.5, -0.5, 0, 0, -1.25, 0, -0.5, -0.5}));
  std::vector<std::tuple<size_t, size_t, std::string>> spans;
  for (const auto& sp : s.spans) spans.emplace_back(sp.start, sp.end, sp.kind);
  EXPECT_EQ(spans, (std::vector<std::tuple<size_t, size_t, std::string>>{
                       {0, 3, "opening"}, {3, 5, "model"}, {5, 7, "tool"}, {7, 8, "model"}, {8, 9, "user"}, {9, 11, "model"}}));
  EXPECT_EQ(s.model_tokens, 5u);
}

TEST(SftExample, TheLineHoldsTheSequenceAndTheConversation) {
  Json r = three_turns();
  SftExample ex = sft_example(r, "runs/a/t/sample-0/trajectory.json");
  EXPECT_TRUE(ex.has_tokens);
  EXPECT_EQ(ex.tokens, 11u);
  EXPECT_EQ(ex.model_tokens, 5u);
  EXPECT_EQ(ex.line.find('\n'), std::string::npos);
  Json j = Json::parse(ex.line);
  EXPECT_EQ(j["id"], "t/sample-0");
  EXPECT_EQ(j["task"], (Json{{"name", "t"}, {"hash", std::string(64, 'a')}}));
  EXPECT_EQ(j["reward"], 2);
  EXPECT_EQ(j["source"], "runs/a/t/sample-0/trajectory.json");
  EXPECT_EQ(j["tokenizer"], std::string(64, 'b'));
  EXPECT_EQ(j["tools"], r["tools"]);
  EXPECT_EQ(j["input_ids"], Json({1, 2, 3, 10, 11, 4, 5, 12, 6, 13, 14}));
  EXPECT_EQ(j["loss_mask"], Json({0, 0, 0, 1, 1, 0, 0, 1, 0, 1, 1}));
  EXPECT_EQ(j["logprobs"], Json({0, 0, 0, -0.5, -0.5, 0, 0, -1.25, 0, -0.5, -0.5}));
  EXPECT_EQ(j["spans"], Json::parse(R"([[0,3,"opening"],[3,5,"model"],[5,7,"tool"],[7,8,"model"],[8,9,"user"],[9,11,"model"]])"));
  ASSERT_EQ(j["messages"].size(), r["messages"].size());
  EXPECT_EQ(j["messages"][2], (Json{{"role", "assistant"}, {"content", "reading"}, {"tool_calls", r["messages"][2]["tool_calls"]}}));
  EXPECT_EQ(j["messages"][3], (Json{{"role", "tool"}, {"tool_call_id", "call_0_0"}, {"name", "read_file"}, {"content", "class Model"}}));
}

TEST(SftExample, ASampledIdWithoutALogprobLeavesNoLogprobs) {
  Json r = three_turns();
  r["turns"][2]["logprobs"][1]["logprob"] = nullptr;
  TokenSequence s = token_sequence(r);
  EXPECT_FALSE(s.has_logprobs);
  EXPECT_TRUE(s.logprobs.empty());
  EXPECT_EQ(Json::parse(sft_example(r, "x").line)["logprobs"], nullptr);
  r["turns"][0].erase("logprobs");
  EXPECT_FALSE(token_sequence(r).has_logprobs);
}

// The entries as rft reads them (their numbers alone) give the same sequence.
TEST(SftExample, LogprobsAsBareNumbersAreTheSame) {
  Json r = three_turns();
  TokenSequence whole = token_sequence(r);
  for (auto& t : r["turns"]) {
    Json numbers = Json::array();
    for (const auto& e : t["logprobs"]) numbers.push_back(e["logprob"]);
    t["logprobs"] = numbers;
  }
  TokenSequence plucked = token_sequence(r);
  EXPECT_TRUE(plucked.has_logprobs);
  EXPECT_EQ(plucked.logprobs, whole.logprobs);
}

// A chat-mode record: messages only. Tool outputs as the last turn saw them (shortened), the model's
// own messages whole (with their reasoning), tool results as user messages when the episode sent them so.
TEST(SftExample, AChatRecordIsItsConversationAsTheModelSawIt) {
  Json r = test_records::record();
  add_turn(r, {{"bash", {{"command", "make"}}, std::string(5000, 'o')}}, "building");
  r["messages"][2]["reasoning_content"] = "first make";
  add_turn(r, {{"finish", Json::object()}}, "done");
  r["context"]["shortened"] = {{"3", "ooo[... cut ...]"}, {"2", "buil[... cut ...]"}};
  SftExample ex = sft_example(r, "t.json");
  EXPECT_FALSE(ex.has_tokens);
  Json j = Json::parse(ex.line);
  for (const char* k : {"input_ids", "loss_mask", "logprobs", "spans", "tokenizer"}) EXPECT_EQ(j[k], nullptr) << k;
  const Json& m = j["messages"];
  ASSERT_EQ(m.size(), 6u);
  EXPECT_EQ(m[0], (Json{{"role", "system"}, {"content", "the skill"}}));
  EXPECT_EQ(m[2]["content"], "building");
  EXPECT_EQ(m[2]["reasoning_content"], "first make");
  EXPECT_EQ(m[3]["content"], "ooo[... cut ...]");
  EXPECT_FALSE(m[4].contains("reasoning_content"));
  r["tool_results_as_user"] = true;
  Json as_user = Json::parse(sft_example(r, "t.json").line)["messages"];
  EXPECT_EQ(as_user[3], (Json{{"role", "user"}, {"content", "[result of bash call_0_0]\nooo[... cut ...]"}}));
}

}  // namespace
}  // namespace anvil
