// token_turns.h: an episode's turns token-in/token-out (issue 19): what the model sampled is kept
// token for token, and only what follows it (tool results, the next generation prompt) is
// rendered, by the model's own chat template on its server (ModelClient::tokenize_chat).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace anvil {

// The tool calls a model wrote as <tool_call>{"name": ..., "arguments": {...}}</tool_call> blocks
// (Hermes' form: Qwen's, and anvil.local_model's prompt for Gemma), as OpenAI tool_calls with ids
// "<id_prefix>_<n>", and the text without them (the text as it is when none parses). A block whose
// JSON does not parse or names no function stays in the text: the episode answers it as raw markup.
struct ParsedCalls {
  std::string content;
  nlohmann::json tool_calls = nlohmann::json::array();
};
ParsedCalls parse_tool_call_blocks(const std::string& text, const std::string& id_prefix);

// The tokens that follow a model's turn in its own rendering, to append after the sampled ids:
// `opened` is the conversation before the model's message with the generation prompt, `closed`
// the conversation through the model's message without one, `appended` the same with the new
// messages and the generation prompt; the sampled turn ended on `end_token`. They are `appended`
// after the first `end_token` of the model's turn as `closed` renders it (what follows `opened`):
// the template's own close of the turn, a newline say, then the new messages. nullopt with *err
// when the renderings do not extend one another or the template does not end the model's turn
// with `end_token` (a model that stopped on another end token).
std::optional<std::vector<int64_t>> tokens_after_turn(const std::vector<int64_t>& opened,
                                                      const std::vector<int64_t>& closed,
                                                      const std::vector<int64_t>& appended, int64_t end_token,
                                                      std::string* err);

}  // namespace anvil
