// episode_filter.cpp: the checks rft needs of a record, and the drop reasons in their order.
#include "anvil/train/episode_filter.h"

#include <algorithm>
#include <cctype>
#include <utility>

#include "anvil/agent/trajectory.h"
#include "anvil/util/hash.h"
#include "anvil/util/json_text.h"
#include "anvil/util/strings.h"

namespace anvil {

namespace {

using Json = nlohmann::json;

// ---- field checks ------------------------------------------------------------------------------

enum class Want { kString, kInteger, kIntegerOrNull, kArray, kObject, kIds };

const char* want_name(Want w) {
  switch (w) {
    case Want::kString: return "a string";
    case Want::kInteger: return "an integer";
    case Want::kIntegerOrNull: return "an integer or null";
    case Want::kArray: return "an array";
    case Want::kObject: return "an object";
    case Want::kIds: return "an array of integers";
  }
  return "";
}

std::string kind_of(const Json& j) {
  switch (j.type()) {
    case Json::value_t::null: return "null";
    case Json::value_t::boolean: return "a boolean";
    case Json::value_t::number_integer:
    case Json::value_t::number_unsigned: return "an integer";
    case Json::value_t::number_float: return "a number";
    case Json::value_t::string: return "a string";
    case Json::value_t::array: return "an array";
    case Json::value_t::object: return "an object";
    default: return "a value";
  }
}

bool fits(const Json& j, Want w) {
  switch (w) {
    case Want::kString: return j.is_string();
    case Want::kInteger: return j.is_number_integer();
    case Want::kIntegerOrNull: return j.is_number_integer() || j.is_null();
    case Want::kArray: return j.is_array();
    case Want::kObject: return j.is_object();
    case Want::kIds:
      return j.is_array() && std::all_of(j.begin(), j.end(), [](const Json& v) { return v.is_number_integer(); });
  }
  return false;
}

// "" when obj[key] is there and fits; else what is wrong, naming the field by `path`.
std::string need(const Json& obj, const char* key, const std::string& path, Want w) {
  auto it = obj.find(key);
  if (it == obj.end()) return "field \"" + path + "\" is missing";
  if (fits(*it, w)) return "";
  std::string is = kind_of(*it);
  if (w == Want::kIds && it->is_array()) {
    auto bad = std::find_if(it->begin(), it->end(), [](const Json& v) { return !v.is_number_integer(); });
    is = "an array with " + kind_of(*bad) + " at [" + std::to_string(bad - it->begin()) + "]";
  }
  return "field \"" + path + "\" is " + is + ", not " + want_name(w);
}

// A member of an object; null when j is not an object or has no such member (no copy).
const Json& member(const Json& j, const char* key) {
  static const Json kNull;
  if (!j.is_object()) return kNull;
  auto it = j.find(key);
  return it != j.end() ? *it : kNull;
}

// A string member of an object, "" when j is not an object or the member is not a string.
std::string str_at(const Json& j, const char* key) {
  const Json& v = member(j, key);
  return v.is_string() ? v.get<std::string>() : "";
}

std::string check_token_turn(const Json& t, const std::string& at) {
  for (auto [key, want] : {std::pair{"token_ids", Want::kIds}, {"prompt_token_ids", Want::kObject},
                           {"prompt_kind", Want::kString}}) {
    if (std::string e = need(t, key, at + "." + key, want); !e.empty()) return e;
  }
  const Json& p = t["prompt_token_ids"];
  if (std::string e = need(p, "prefix", at + ".prompt_token_ids.prefix", Want::kInteger); !e.empty()) return e;
  return need(p, "ids", at + ".prompt_token_ids.ids", Want::kIds);
}

std::string check_turn(const Json& record, size_t i, bool tokens) {
  std::string at = "turns[" + std::to_string(i) + "]";
  const Json& t = record["turns"][i];
  if (!t.is_object()) return "field \"" + at + "\" is " + kind_of(t) + ", not an object";
  for (auto [key, want] : {std::pair{"message_index", Want::kInteger}, {"tool_calls", Want::kArray},
                           {"malformed", Want::kArray}}) {
    if (std::string e = need(t, key, at + "." + key, want); !e.empty()) return e;
  }
  const Json& msgs = record["messages"];
  int64_t mi = t["message_index"].get<int64_t>();
  if (mi < 0 || static_cast<size_t>(mi) >= msgs.size() || str_at(msgs[mi], "role") != "assistant") {
    return "field \"" + at + ".message_index\" is " + std::to_string(mi) + ", not the index of an assistant message";
  }
  for (size_t j = 0; j < t["tool_calls"].size(); ++j) {
    const Json& c = t["tool_calls"][j];
    std::string cat = at + ".tool_calls[" + std::to_string(j) + "]";
    if (!c.is_object()) return "field \"" + cat + "\" is " + kind_of(c) + ", not an object";
    if (std::string e = need(c, "name", cat + ".name", Want::kString); !e.empty()) return e;
  }
  return tokens ? check_token_turn(t, at) : "";
}

// ---- reasons -----------------------------------------------------------------------------------

bool hack_suspected(const Json& record) {
  if (str_at(member(record, "evaluation"), "outcome") == "hack_suspected") return true;
  for (const Json& t : record["turns"]) {
    for (const Json& c : t["tool_calls"]) {
      if (str_at(member(c, "detail"), "outcome") == "hack_suspected") return true;
    }
  }
  return false;
}

bool malformed(const Json& record) {
  const Json& total = member(record["counters"], "malformed_total");
  if (total.is_number() && total.get<double>() > 0) return true;
  return std::any_of(record["turns"].begin(), record["turns"].end(),
                     [](const Json& t) { return !t["malformed"].empty(); });
}

// The arguments of a call as canonical JSON (keys sorted: nlohmann's objects are ordered maps).
std::string canonical_arguments(const Json& call) {
  const Json& a = member(member(call, "function"), "arguments");
  if (a.is_null()) return "{}";
  if (!a.is_string()) return json_text(a);
  std::string text = a.get<std::string>();
  if (trim(text).empty()) return "{}";
  Json parsed = Json::parse(text, nullptr, false);
  return parsed.is_discarded() ? text : json_text(parsed);
}

// The tool message answering call `id` of the assistant message at `mi` (its j-th call): the j-th
// message after it, as the episode writes them, else the first after it with that id.
std::string answer_of(const Json& msgs, size_t mi, size_t j, const std::string& id) {
  auto answers = [&](const Json& m) { return str_at(m, "role") == "tool" && str_at(m, "tool_call_id") == id; };
  if (mi + 1 + j < msgs.size() && answers(msgs[mi + 1 + j])) return str_at(msgs[mi + 1 + j], "content");
  for (size_t k = mi + 1; k < msgs.size() && str_at(msgs[k], "role") != "assistant"; ++k) {
    if (answers(msgs[k])) return str_at(msgs[k], "content");
  }
  return "";
}

enum class Judged { kNothing, kPassed, kFailed };

Judged judged(const EpisodeCall& c) {
  const Json& ok_field = member(*c.record, "ok");
  bool ok = ok_field.is_boolean() && ok_field.get<bool>();
  if (c.name == "compile") return ok ? Judged::kPassed : Judged::kFailed;
  if (c.name != "verify" && c.name != "profile" && c.name != "tune") return Judged::kNothing;
  std::string outcome = str_at(member(*c.record, "detail"), "outcome");
  if (!ok || outcome.empty()) return Judged::kNothing;  // the harness could not evaluate: nothing judged
  return outcome == "ok" ? Judged::kPassed : Judged::kFailed;
}

bool says_error(const std::string& line) {
  std::string lower = line;
  std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char ch) { return std::tolower(ch); });
  return lower.find("error") != std::string::npos;
}

}  // namespace

const std::vector<std::string>& drop_reasons() {
  static const std::vector<std::string> reasons = {"not_finished", "low_reward",       "hack_suspected", "malformed",
                                                   "redundant_loop", "stalled_compiles", "token_seam",     "duplicate"};
  return reasons;
}

bool is_token_level(const Json& record) {
  auto it = record.find("token_level");
  return it != record.end() && it->is_boolean() && it->get<bool>();
}

std::string check_record(const Json& record) {
  if (!record.is_object()) return "not a JSON object";
  auto schema = record.find("schema");
  if (schema == record.end()) return "field \"schema\" is missing (not an anvil.trajectory/1 record)";
  if (*schema != kTrajectorySchema) return "schema " + schema->dump() + " is not " + kTrajectorySchema;
  for (auto [key, want] : {std::pair{"id", Want::kString}, {"status", Want::kString}, {"task", Want::kObject},
                           {"messages", Want::kArray}, {"turns", Want::kArray}, {"tools", Want::kArray},
                           {"counters", Want::kObject}, {"reward", Want::kIntegerOrNull}}) {
    if (std::string e = need(record, key, key, want); !e.empty()) return e;
  }
  for (const char* key : {"name", "hash"}) {
    if (std::string e = need(record["task"], key, std::string("task.") + key, Want::kString); !e.empty()) return e;
  }
  const Json& msgs = record["messages"];
  for (size_t i = 0; i < msgs.size(); ++i) {
    if (!msgs[i].is_object()) {
      return "field \"messages[" + std::to_string(i) + "]\" is " + kind_of(msgs[i]) + ", not an object";
    }
  }
  bool tokens = is_token_level(record);
  for (size_t i = 0; i < record["turns"].size(); ++i) {
    if (std::string e = check_turn(record, i, tokens); !e.empty()) return e;
  }
  return "";
}

std::vector<EpisodeCall> episode_calls(const Json& record) {
  std::vector<EpisodeCall> out;
  const Json& msgs = record["messages"];
  for (const Json& t : record["turns"]) {
    size_t mi = t["message_index"].get<size_t>();
    const Json& calls = member(msgs[mi], "tool_calls");
    const Json& recs = t["tool_calls"];
    for (size_t j = 0; j < recs.size(); ++j) {
      EpisodeCall c;
      c.record = &recs[j];
      c.name = str_at(recs[j], "name");
      c.arguments = calls.is_array() && j < calls.size() ? canonical_arguments(calls[j]) : "{}";
      c.answer = answer_of(msgs, mi, j, str_at(recs[j], "id"));
      out.push_back(std::move(c));
    }
  }
  return out;
}

int longest_repeat(const std::vector<EpisodeCall>& calls) {
  int longest = 0, run = 0;
  for (size_t i = 0; i < calls.size(); ++i) {
    bool same = i > 0 && calls[i].name == calls[i - 1].name && calls[i].arguments == calls[i - 1].arguments;
    run = same ? run + 1 : 1;
    longest = std::max(longest, run);
  }
  return longest;
}

std::string failure_line(const EpisodeCall& call) {
  if (judged(call) != Judged::kFailed) return "";
  std::vector<std::string> lines = split_lines(call.answer);
  if (lines.empty()) return "";
  for (size_t i = 1; i < lines.size(); ++i) {
    if (says_error(lines[i])) return trim(lines[i]);
  }
  for (size_t i = 1; i < lines.size(); ++i) {
    if (!trim(lines[i]).empty()) return trim(lines[i]);
  }
  return trim(lines[0]);
}

int longest_stall(const std::vector<EpisodeCall>& calls) {
  int longest = 0, run = 0;
  std::string last;
  for (const EpisodeCall& c : calls) {
    Judged j = judged(c);
    if (j == Judged::kNothing) continue;
    if (j == Judged::kPassed) {
      run = 0;
      last.clear();
      continue;
    }
    std::string line = failure_line(c);
    run = run > 0 && line == last ? run + 1 : 1;
    last = line;
    longest = std::max(longest, run);
  }
  return longest;
}

std::string seam_error(const Json& record) {
  size_t length = 0;  // the previous turn's whole sequence
  const Json& turns = record["turns"];
  for (size_t k = 0; k < turns.size(); ++k) {
    const Json& p = turns[k]["prompt_token_ids"];
    int64_t prefix = p["prefix"].get<int64_t>();
    if (prefix < 0 || static_cast<size_t>(prefix) != length) {
      return "turns[" + std::to_string(k) + "].prompt_token_ids.prefix is " + std::to_string(prefix) + ", not " +
             std::to_string(length) +
             (k == 0 ? " (the first turn's)" : " (the length of the previous turn's prompt and sampled ids)");
    }
    length += p["ids"].size() + turns[k]["token_ids"].size();
  }
  return "";
}

std::string outputs_hash(const Json& record) {
  Hasher h;
  h.add("task", record["task"]["hash"].get<std::string>());
  if (is_token_level(record)) {
    for (const Json& t : record["turns"]) {
      std::string ids;
      for (const Json& id : t["token_ids"]) ids += std::to_string(id.get<int64_t>()) + ",";
      h.add("turn", ids);
    }
    return h.hex();
  }
  for (const Json& m : record["messages"]) {
    if (str_at(m, "role") != "assistant") continue;
    const Json& content = member(m, "content");
    h.add("content", content.is_string() ? content.get<std::string>() : json_text(content));
    h.add("reasoning", str_at(m, "reasoning_content"));
    const Json& calls = member(m, "tool_calls");
    if (!calls.is_array()) continue;
    for (const Json& c : calls) h.add("call", str_at(member(c, "function"), "name") + "\n" + canonical_arguments(c));
  }
  return h.hex();
}

std::string drop_reason(const Json& record, const FilterOptions& opts) {
  if (record["status"] != "finished") return "not_finished";
  const Json& reward = record["reward"];
  if (!reward.is_number_integer() || reward.get<int64_t>() < opts.min_reward) return "low_reward";
  if (hack_suspected(record)) return "hack_suspected";
  if (malformed(record)) return "malformed";
  std::vector<EpisodeCall> calls = episode_calls(record);
  if (longest_repeat(calls) > opts.max_repeats) return "redundant_loop";
  if (longest_stall(calls) > opts.max_stalled_compiles) return "stalled_compiles";
  if (is_token_level(record) && !seam_error(record).empty()) return "token_seam";
  return "";
}

}  // namespace anvil
