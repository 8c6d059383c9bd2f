// sft_example.h: one kept episode as a supervised fine-tuning example, a line of `anvil rft`'s output
// (docs/rft.md): the conversation as the model saw it and, for a token-level record, its whole token
// sequence with the loss on the model's sampled ids only (the paper's NLL on the action tokens).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace anvil {

// A token-level episode as one sequence: the first turn's prompt, then each turn's sampled ids and
// the ids the next turn's prompt added after them.
struct TokenSequence {
  struct Span {
    size_t start = 0, end = 0;  // [start, end) of input_ids
    std::string kind;           // opening | model | tool | user (the turn's prompt_kind for its added ids)
  };
  std::vector<int64_t> input_ids;
  std::vector<uint8_t> loss_mask;  // 1 exactly on the model's sampled ids
  std::vector<double> logprobs;    // the sampler's, aligned with input_ids, 0 where masked
  bool has_logprobs = true;        // false when a sampled id has no log-probability (logprobs is null then)
  std::vector<Span> spans;
  size_t model_tokens = 0;
};

// The sequence of a token-level record whose turns continue one another (episode_filter.h's
// seam_error is ""); empty spans are left out.
TokenSequence token_sequence(const nlohmann::json& record);

// The conversation as the model saw it: the request's messages (trajectory.h's request_messages:
// role, content, tool_calls, tool_call_id, name; tool results as user messages when the episode sent
// them so; tool and user texts with the context's shortenings applied, as the last turn saw them),
// each assistant message as the model wrote it (its whole content, and its reasoning_content when
// the server returned one).
nlohmann::json seen_messages(const nlohmann::json& record);

struct SftExample {
  std::string line;  // one JSON object, no newline
  bool has_tokens = false;
  size_t tokens = 0, model_tokens = 0;
};

// A kept record's example: {"id", "task": {"name", "hash"}, "reward", "source", "messages", "tools",
// "tokenizer" (the record's tokenizer hash or null), "input_ids", "loss_mask", "logprobs", "spans"};
// the last four are null for a chat-mode record.
SftExample sft_example(const nlohmann::json& record, const std::string& source);

}  // namespace anvil
