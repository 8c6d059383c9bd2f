// episode_filter.h: which recorded episodes (anvil.trajectory/1) a rejection fine-tuning set keeps,
// the CUDA Agent paper's way (arXiv 2602.24286): a positive reward, and no redundant loops, invalid
// actions or hallucinated tool-call formats. docs/rft.md states the rules; `anvil rft` (rft.h) applies
// them to many episodes and adds the one that needs them all (duplicate).
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace anvil {

struct FilterOptions {
  int min_reward = 1;            // reward below it: low_reward (1: the paper's reward > 0 on -1/1/2/3)
  int max_repeats = 2;           // the same call more times in a row than this: redundant_loop
  int max_stalled_compiles = 3;  // more failed compile/verify/profile calls in a row with one error: stalled_compiles
};

// The drop reasons in the order they are checked: an episode is counted under the first that applies.
const std::vector<std::string>& drop_reasons();

// What of `record` rft cannot do without, checked before any reason: "" or what is wrong, naming the
// field (`schema "anvil.trajectory/0" is not anvil.trajectory/1`, `field "turns[3].token_ids" is
// missing`, `field "reward" is a string, not an integer`).
std::string check_record(const nlohmann::json& record);

// Why a checked record is dropped (one of drop_reasons() but duplicate), or "" when it is kept.
std::string drop_reason(const nlohmann::json& record, const FilterOptions& opts);

// A token-level record (`token_level`: its turns continue one another token for token).
bool is_token_level(const nlohmann::json& record);

// One tool call of the episode, in call order: its name, its arguments as canonical JSON (the string
// as sent when it is not JSON), its record (turns[i].tool_calls[j]) and the tool message answering it.
struct EpisodeCall {
  std::string name;
  std::string arguments;
  const nlohmann::json* record = nullptr;
  std::string answer;
};
std::vector<EpisodeCall> episode_calls(const nlohmann::json& record);

// The most times one call (same name, same arguments) was made in a row.
int longest_repeat(const std::vector<EpisodeCall>& calls);

// The error line a failed compile, verify or profile answered with: the first line after the answer's
// first (its header: "compile failed (compile_error):", "FAILED: wrong_answer (reward -1)") that says
// "error" in any case, else the first non-empty line after it, else the header; trimmed. "" for a call
// that did not fail (compiled; verified or profiled with outcome ok) and for one that judged nothing
// (another tool; the harness could not evaluate).
std::string failure_line(const EpisodeCall& call);

// The most failed compile/verify/profile calls in a row (other tools, an edit say, between them) that
// answered the same failure_line; a call that succeeds ends the run.
int longest_stall(const std::vector<EpisodeCall>& calls);

// Why a token-level record's turns do not continue one another ("" when they do): turn k's
// prompt_token_ids.prefix must be the length of turn k-1's whole sequence (its prompt, then its
// sampled ids); the first turn's prefix 0.
std::string seam_error(const nlohmann::json& record);

// The hash of the model's outputs, for duplicates: its sampled token ids, turn by turn, in a
// token-level record; its assistant messages (content, reasoning, calls' names and arguments: not the
// servers' call ids) otherwise.
std::string outputs_hash(const nlohmann::json& record);

}  // namespace anvil
