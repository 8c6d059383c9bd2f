// episode.h: one agent episode, a ReAct loop over an OpenAI-compatible model.
//
// The episode creates its workdir (like `anvil init`), sends the system prompt
// (SKILL.md) and the task, and loops: the model's turn, then every tool call
// in it (in order, each answered by its own tool message), until the model
// calls finish, stops calling tools, or a budget (turns, context tokens,
// wall clock) runs out. Malformed calls (bad JSON, unknown tools, bad
// arguments, tool-call markup left in the text, calls cut by the token limit)
// are answered as errors and counted; a context overflow shortens older tool
// outputs and asks again. Then the final workdir gets a fresh, independent
// evaluation in the protected harness: the reward never comes from the
// agent's own tool outputs. The record (trajectory.h) is saved after every
// turn; an interrupted episode resumes from it.
#pragma once

#include <chrono>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "anvil/agent/model_client.h"
#include "anvil/agent/tools.h"
#include "anvil/env/task.h"
#include "anvil/env/toolchain.h"

namespace anvil {

struct EpisodeOptions {
  std::string task;                 // FILE or DATASET#ROW
  std::filesystem::path dir;        // the episode's directory: workdir/ and trajectory.json
  std::string id;                   // recorded; default: dir's name
  int max_turns = 200;
  long max_context = 131072;        // tokens
  std::chrono::seconds wall_clock{3 * 3600};
  SamplingOptions sampling;
  ToolOptions tools;                // workdir and task are filled in by the episode
  std::filesystem::path skill;      // the system prompt; empty: share/agent/SKILL.md
  bool resume = false;              // continue dir/trajectory.json
  bool evaluate = true;             // the final, independent evaluation
  bool tool_results_as_user = false;  // send tool results as user messages (see request_messages)
  // Token-in/token-out turns (issue 19): each turn is sampled after the previous turn's prompt and
  // sampled ids, token for token, followed by what the model's own chat template renders for the
  // new messages (ModelClient::complete, tokenize_chat; token_turns.h); the model's tool calls are
  // parsed from its text (<tool_call> blocks). Needs a server with vLLM's /tokenize and
  // /v1/completions returning token ids (vLLM; --endpoint local). A turn cut at max_tokens ends
  // the episode (end_reason "turn_cut"), as veRL's loop ends at its response length.
  bool token_level = false;
  // Called after every saved turn and at the end (progress displays).
  std::function<void(const nlohmann::json& record)> on_turn;
};

struct EpisodeResult {
  bool ran = false;            // false: could not start or resume (error says why)
  std::string error;
  nlohmann::json record;       // the trajectory
  std::string status;          // finished | interrupted
  std::string end_reason;      // finish | no_tool_calls | max_turns | max_context | wall_clock | model_error
                               // | turn_cut | token_seam (token_level)
  int reward = -1;
};

EpisodeResult run_episode(const Environment& env, ModelClient& model, const EpisodeOptions& opts);

// An episode's opening (run_episode's, and `anvil serve`'s sessions'): the task probed, its
// workdir created as `anvil init` creates one and given to the tools' jail, the system prompt
// (`skill`, default share/agent/SKILL.md, for the protocol) and the task's first user message.
// nullopt and *err ("task_error: ..." when the task itself cannot be imported).
struct EpisodeOpening {
  std::string system_prompt;
  std::string task_message;
};
std::optional<EpisodeOpening> open_episode(const Environment& env, const Task& task, const std::filesystem::path& workdir,
                                          const std::string& protocol, const std::filesystem::path& skill,
                                          std::string* err);

// The system prompt for a protocol (env/protocol.h): `text` with the blocks between
// "<!-- protocol: NAME -->" and "<!-- end protocol -->" lines kept for NAME == protocol and dropped
// for others, the marker lines removed. A block left open, nested or an end without a block:
// nullopt and *err.
std::optional<std::string> skill_for_protocol(const std::string& text, const std::string& protocol, std::string* err);

// Tool-call markup a server failed to parse, left in the text ("<tool_call>",
// "<function=", "[TOOL_CALLS]", "<|python_tag|>", ...): the marker found, or "".
std::string find_raw_tool_markup(const std::string& content);

// Shortens the record's older tool outputs (and then older assistant texts)
// into record["context"]["shortened"], keeping the last `keep_turns` turns
// whole. `level` 1 cuts long ones, 2 cuts all older ones to a few hundred
// characters. Returns the characters removed (0: nothing left to shorten).
size_t shorten_context(nlohmann::json& record, int level, int keep_turns = 2);

}  // namespace anvil
