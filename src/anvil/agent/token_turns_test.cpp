#include "anvil/agent/token_turns.h"

#include <gtest/gtest.h>

namespace anvil {
namespace {

using Json = nlohmann::json;

TEST(TokenTurns, ToolCallBlocksBecomeToolCallsAndTheRestIsTheContent) {
  ParsedCalls p = parse_tool_call_blocks(
      "Looking.\n<tool_call>{\"name\": \"bash\", \"arguments\": {\"command\": \"ls\"}}</tool_call>\n"
      "<tool_call>{\"name\": \"finish\"}</tool_call>",
      "call_3");
  EXPECT_EQ(p.content, "Looking.");
  ASSERT_EQ(p.tool_calls.size(), 2u);
  EXPECT_EQ(p.tool_calls[0]["id"], "call_3_0");
  EXPECT_EQ(p.tool_calls[0]["function"]["name"], "bash");
  EXPECT_EQ(Json::parse(p.tool_calls[0]["function"]["arguments"].get<std::string>()), Json({{"command", "ls"}}));
  EXPECT_EQ(p.tool_calls[1]["function"]["arguments"], "{}");
}

TEST(TokenTurns, ABlockThatDoesNotParseStaysInTheText) {
  std::string text = "x <tool_call>{\"name\": \"bash\", \"arguments\": {</tool_call> y";
  ParsedCalls p = parse_tool_call_blocks(text, "c");
  EXPECT_TRUE(p.tool_calls.empty());
  EXPECT_EQ(p.content, text);
  ParsedCalls q = parse_tool_call_blocks("<tool_call>[1]</tool_call><tool_call>{\"name\": \"finish\"}</tool_call>", "c");
  ASSERT_EQ(q.tool_calls.size(), 1u);
  EXPECT_EQ(q.content, "<tool_call>[1]</tool_call>");
  EXPECT_TRUE(parse_tool_call_blocks("<tool_call>{\"name\": \"x\"}", "c").tool_calls.empty());  // never closed
}

TEST(TokenTurns, WhatFollowsATurnComesAfterItsEndTokenInTheRendering) {
  // opened: [bos, user turn (ending 106 107), model-open]; closed adds the model's content, END, NL;
  // appended adds a tool turn and the generation prompt.
  std::vector<int64_t> opened = {2, 10, 106, 107, 12};
  std::vector<int64_t> closed = {2, 10, 106, 107, 12, 20, 21, 106, 107};
  std::vector<int64_t> appended = {2, 10, 106, 107, 12, 20, 21, 106, 107, 30, 31, 106, 107, 40};
  std::string err;
  auto after = tokens_after_turn(opened, closed, appended, 106, &err);
  ASSERT_TRUE(after) << err;
  EXPECT_EQ(*after, (std::vector<int64_t>{107, 30, 31, 106, 107, 40}));
  // The end token is looked for in the model's turn only: one in the user's turn (before) is not it.
  EXPECT_FALSE(tokens_after_turn(opened, {2, 10, 106, 107, 12, 20, 107}, {2, 10, 106, 107, 12, 20, 107, 9}, 106, &err));
}

TEST(TokenTurns, ARenderingThatDoesNotExtendOrNeverEndsTheTurnIsRefused) {
  std::string err;
  EXPECT_FALSE(tokens_after_turn({2}, {2, 10, 106}, {2, 11, 106, 9}, 106, &err));
  EXPECT_NE(err.find("does not extend it"), std::string::npos) << err;
  EXPECT_FALSE(tokens_after_turn({3}, {2, 10, 106}, {2, 10, 106, 9}, 106, &err));
  EXPECT_NE(err.find("does not extend it"), std::string::npos) << err;
  EXPECT_FALSE(tokens_after_turn({2}, {2, 10, 107}, {2, 10, 107, 9}, 1, &err));  // stopped on <eos>
  EXPECT_NE(err.find("token 1, which the chat template does not close"), std::string::npos) << err;
}

}  // namespace
}  // namespace anvil
