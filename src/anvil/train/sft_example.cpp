// sft_example.cpp: a kept episode's line. The token arrays are written by hand (std::to_chars):
// an episode holds tens of thousands of ids, and `anvil rft` writes a thousand episodes in seconds.
#include "anvil/train/sft_example.h"

#include <charconv>

#include "anvil/agent/trajectory.h"
#include "anvil/train/episode_filter.h"
#include "anvil/util/json_text.h"

namespace anvil {

namespace {

using Json = nlohmann::json;

void add_span(TokenSequence& s, size_t start, const std::string& kind) {
  if (s.input_ids.size() > start) s.spans.push_back({start, s.input_ids.size(), kind});
}

// The log-probability of a turn's j-th sampled id, or false when the turn has none for it. An entry
// is the record's {"token", "logprob", "token_id"}, or its number alone (rft reads the entries so:
// json_reader.h's Pluck).
bool logprob_at(const Json& turn, size_t j, double* out) {
  auto it = turn.find("logprobs");
  if (it == turn.end() || !it->is_array() || j >= it->size()) return false;
  const Json* e = &(*it)[j];
  if (e->is_object()) {
    auto lp = e->find("logprob");
    if (lp == e->end()) return false;
    e = &*lp;
  }
  if (!e->is_number()) return false;
  *out = e->get<double>();
  return true;
}

template <typename T>
void append_number(std::string& out, T v) {
  char buf[32];
  auto r = std::to_chars(buf, buf + sizeof buf, v);
  out.append(buf, r.ptr);
}

template <typename T>
void append_array(std::string& out, const std::vector<T>& values) {
  out += '[';
  for (size_t i = 0; i < values.size(); ++i) {
    if (i) out += ',';
    append_number(out, values[i]);
  }
  out += ']';
}

// ,"input_ids":[...],"loss_mask":[...],"logprobs":[...]|null,"spans":[[s,e,"kind"],...]
void append_tokens(std::string& out, const TokenSequence& s) {
  out.reserve(out.size() + s.input_ids.size() * 16);
  out += ",\"input_ids\":";
  append_array(out, s.input_ids);
  out += ",\"loss_mask\":[";
  for (size_t i = 0; i < s.loss_mask.size(); ++i) {
    if (i) out += ',';
    out += s.loss_mask[i] ? '1' : '0';
  }
  out += "],\"logprobs\":";
  if (s.has_logprobs) {
    append_array(out, s.logprobs);
  } else {
    out += "null";
  }
  out += ",\"spans\":[";
  for (size_t i = 0; i < s.spans.size(); ++i) {
    if (i) out += ',';
    out += '[';
    append_number(out, s.spans[i].start);
    out += ',';
    append_number(out, s.spans[i].end);
    out += ',' + json_text(Json(s.spans[i].kind)) + ']';
  }
  out += ']';
}

}  // namespace

TokenSequence token_sequence(const Json& record) {
  TokenSequence s;
  for (const Json& t : record["turns"]) {
    const Json& added = t["prompt_token_ids"]["ids"];
    size_t start = s.input_ids.size();
    for (const Json& id : added) s.input_ids.push_back(id.get<int64_t>());
    s.loss_mask.resize(s.input_ids.size(), 0);
    s.logprobs.resize(s.input_ids.size(), 0.0);
    add_span(s, start, t.value("prompt_kind", std::string("opening")));
    start = s.input_ids.size();
    const Json& sampled = t["token_ids"];
    for (size_t j = 0; j < sampled.size(); ++j) {
      double lp = 0;
      if (!logprob_at(t, j, &lp)) s.has_logprobs = false;
      s.input_ids.push_back(sampled[j].get<int64_t>());
      s.loss_mask.push_back(1);
      s.logprobs.push_back(lp);
    }
    s.model_tokens += sampled.size();
    add_span(s, start, "model");
  }
  if (!s.has_logprobs) s.logprobs.clear();
  return s;
}

Json seen_messages(const Json& record) {
  Json out = request_messages(record, record.value("tool_results_as_user", false));
  const Json& msgs = record["messages"];
  for (size_t i = 0; i < msgs.size() && i < out.size(); ++i) {
    const Json& m = msgs[i];
    if (m.value("role", std::string()) != "assistant") continue;
    auto content = m.find("content");
    out[i]["content"] = content != m.end() && content->is_string() ? *content : Json("");
    auto reasoning = m.find("reasoning_content");
    if (reasoning != m.end() && reasoning->is_string() && !reasoning->get_ref<const std::string&>().empty()) {
      out[i]["reasoning_content"] = *reasoning;
    }
  }
  return out;
}

SftExample sft_example(const Json& record, const std::string& source) {
  SftExample ex;
  ex.has_tokens = is_token_level(record);
  const Json& tokenizer = record.contains("tokenizer") ? record["tokenizer"] : Json();
  Json head = {{"id", record["id"]},
               {"task", {{"name", record["task"]["name"]}, {"hash", record["task"]["hash"]}}},
               {"reward", record["reward"]},
               {"source", source},
               {"messages", seen_messages(record)},
               {"tools", record["tools"]},
               {"tokenizer", tokenizer.is_object() && tokenizer.contains("sha256") ? tokenizer["sha256"] : Json()}};
  ex.line = json_text(head);
  ex.line.pop_back();  // the closing brace: the token arrays follow
  if (ex.has_tokens) {
    TokenSequence s = token_sequence(record);
    ex.tokens = s.input_ids.size();
    ex.model_tokens = s.model_tokens;
    append_tokens(ex.line, s);
  } else {
    ex.line += ",\"input_ids\":null,\"loss_mask\":null,\"logprobs\":null,\"spans\":null";
  }
  ex.line += '}';
  return ex;
}

}  // namespace anvil
