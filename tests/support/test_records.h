// tests/support/test_records.h (tests only): small hand-written anvil.trajectory/1 records, shaped as
// src/anvil/agent/episode.cpp writes them, for the filter's, the examples' and rft's tests.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace anvil::test_records {

using Json = nlohmann::json;

// A finished chat-mode episode of task "t" with reward `reward`, its opening messages and no turns.
inline Json record(const std::string& id = "t/sample-0", int reward = 2) {
  return {{"schema", "anvil.trajectory/1"},
          {"id", id},
          {"status", "finished"},
          {"end_reason", "finish"},
          {"task", {{"spec", "t.py"}, {"name", "t"}, {"hash", std::string(64, 'a')}, {"meta", Json::object()}}},
          {"tools", Json::array({{{"type", "function"}, {"function", {{"name", "compile"}, {"parameters", Json::object()}}}}})},
          {"messages", Json::array({{{"role", "system"}, {"content", "the skill"}}, {{"role", "user"}, {"content", "the task"}}})},
          {"turns", Json::array()},
          {"context", {{"shortened", Json::object()}, {"shortened_chars", 0}}},
          {"counters", {{"turns", 0}, {"tool_calls", 0}, {"malformed", Json::object()}, {"malformed_total", 0}}},
          {"tool_results_as_user", false},
          {"evaluation", {{"outcome", reward > 0 ? "ok" : "wrong_answer"}, {"reward", reward}}},
          {"reward", reward}};
}

// One call of a turn: what the model asked and what the tool answered.
struct Call {
  std::string name;
  Json arguments = Json::object();  // sent as its dump (a string: sent as it is)
  std::string answer = "done";
  bool ok = true;
  Json detail = nullptr;            // the turn record's detail (verify/profile: {"outcome", "reward"})
};

// Appends a turn: the assistant message (`content`, the calls with ids call_<turn>_<i>), one tool
// message per call, and the turn's record.
inline Json& add_turn(Json& r, const std::vector<Call>& calls, const std::string& content = "") {
  size_t k = r["turns"].size();
  Json msg = {{"role", "assistant"}, {"content", content}};
  Json tool_calls = Json::array(), recs = Json::array(), answers = Json::array();
  for (size_t i = 0; i < calls.size(); ++i) {
    std::string id = "call_" + std::to_string(k) + "_" + std::to_string(i);
    const Call& c = calls[i];
    tool_calls.push_back({{"id", id}, {"type", "function"},
                          {"function", {{"name", c.name}, {"arguments", c.arguments.is_string() ? c.arguments : Json(c.arguments.dump())}}}});
    Json rec = {{"id", id}, {"name", c.name}, {"ok", c.ok}, {"output_chars", c.answer.size()}};
    if (!c.ok) rec["error_kind"] = "tool_error";
    if (!c.detail.is_null()) rec["detail"] = c.detail;
    recs.push_back(rec);
    answers.push_back({{"role", "tool"}, {"tool_call_id", id}, {"name", c.name}, {"content", c.answer}});
  }
  if (!tool_calls.empty()) msg["tool_calls"] = tool_calls;
  size_t mi = r["messages"].size();
  r["messages"].push_back(msg);
  for (auto& a : answers) r["messages"].push_back(a);
  r["turns"].push_back({{"index", k}, {"message_index", mi}, {"finish_reason", "tool_calls"}, {"tool_calls", recs},
                        {"malformed", Json::array()}});
  r["counters"]["turns"] = r["turns"].size();
  return r["turns"].back();
}

// The same record token-level: each turn given its added prompt ids, its sampled ids (each with
// log-probability -0.5) and its prompt kind by add_tokens.
inline Json token_record(const std::string& id = "t/sample-0", int reward = 2) {
  Json r = record(id, reward);
  r["token_level"] = true;
  r["tokenizer"] = {{"probe", Json::array()}, {"probe_ids", {1, 2}}, {"sha256", std::string(64, 'b')}};
  return r;
}

// The length of the record's sequence so far (every turn's added and sampled ids).
inline size_t sequence_length(const Json& r) {
  size_t n = 0;
  for (const auto& t : r["turns"]) {
    if (t.contains("prompt_token_ids")) n += t["prompt_token_ids"]["ids"].size() + t["token_ids"].size();
  }
  return n;
}

// Gives `turn` (the record's last) its token fields; prefix -1: the sequence's length before it.
inline void add_tokens(Json& r, const std::vector<int64_t>& added, const std::vector<int64_t>& sampled,
                       const std::string& kind, long prefix = -1) {
  Json& t = r["turns"].back();
  t.erase("prompt_token_ids");
  size_t before = sequence_length(r);
  t["prompt_token_ids"] = {{"prefix", prefix < 0 ? static_cast<long>(before) : prefix}, {"ids", added}};
  t["token_ids"] = sampled;
  t["prompt_kind"] = kind;
  Json lps = Json::array();
  for (auto id : sampled) lps.push_back({{"token", std::to_string(id)}, {"logprob", -0.5}, {"token_id", id}});
  t["logprobs"] = lps;
}

}  // namespace anvil::test_records
