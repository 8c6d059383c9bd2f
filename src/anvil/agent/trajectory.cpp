// trajectory.cpp: saving, loading and replaying episode records.
#include "anvil/agent/trajectory.h"

#include "anvil/util/fs.h"
#include "anvil/util/json_text.h"

namespace anvil {

using Json = nlohmann::json;

bool save_trajectory(const std::filesystem::path& path, const Json& record, std::string* err) {
  std::error_code ec;
  std::filesystem::create_directories(path.parent_path(), ec);
  return write_file_atomic(path, json_text(record, 1) + "\n", err);
}

std::optional<Json> load_trajectory(const std::filesystem::path& path, std::string* err) {
  auto text = read_file(path);
  if (!text) {
    *err = path.string() + ": cannot read the trajectory (no episode was started there?)";
    return std::nullopt;
  }
  Json j = Json::parse(*text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) {
    *err = path.string() + ": not a JSON object (a damaged trajectory)";
    return std::nullopt;
  }
  if (j.value("schema", std::string()) != kTrajectorySchema) {
    *err = path.string() + ": schema is " + j.value("schema", std::string("missing")) + ", expected " +
           kTrajectorySchema;
    return std::nullopt;
  }
  for (const char* k : {"task", "messages", "turns", "counters", "limits", "model", "workdir"}) {
    if (!j.contains(k)) {
      *err = path.string() + ": the record has no '" + k + "'";
      return std::nullopt;
    }
  }
  if (!j["messages"].is_array() || j["messages"].size() < 2) {
    *err = path.string() + ": the record has no system and task messages";
    return std::nullopt;
  }
  return j;
}

Json request_messages(const Json& record, bool tool_results_as_user) {
  Json out = Json::array();
  const Json& shortened = record.contains("context") ? record["context"].value("shortened", Json::object())
                                                     : Json::object();
  const Json& msgs = record["messages"];
  for (size_t i = 0; i < msgs.size(); ++i) {
    const Json& m = msgs[i];
    Json r = {{"role", m.value("role", std::string("user"))}};
    std::string key = std::to_string(i);
    if (shortened.contains(key)) r["content"] = shortened[key];
    else r["content"] = m.contains("content") ? m["content"] : Json(nullptr);
    if (m.contains("tool_calls") && m["tool_calls"].is_array() && !m["tool_calls"].empty()) {
      r["tool_calls"] = m["tool_calls"];
    }
    if (m.contains("tool_call_id")) r["tool_call_id"] = m["tool_call_id"];
    if (m.contains("name") && r["role"] == "tool") r["name"] = m["name"];
    // A turn of only tool calls has null content, which OpenAI and vLLM
    // accept but llama.cpp's server rejects: an empty string suits all.
    if (r["content"].is_null()) r["content"] = "";
    if (tool_results_as_user && r["role"] == "tool") {
      r = {{"role", "user"},
           {"content", "[result of " + m.value("name", std::string("tool")) + " " + m.value("tool_call_id", std::string()) +
                           "]\n" + (r["content"].is_string() ? r["content"].get<std::string>() : json_text(r["content"]))}};
    }
    out.push_back(std::move(r));
  }
  return out;
}

Json delta_prompt_ids(const std::vector<int64_t>& previous, const std::vector<int64_t>& prompt) {
  size_t n = 0;
  while (n < previous.size() && n < prompt.size() && previous[n] == prompt[n]) ++n;
  return {{"prefix", n}, {"ids", std::vector<int64_t>(prompt.begin() + static_cast<long>(n), prompt.end())}};
}

std::vector<int64_t> expand_prompt_ids(const std::vector<int64_t>& previous, const Json& delta) {
  size_t n = std::min<size_t>(delta.value("prefix", 0), previous.size());
  std::vector<int64_t> out(previous.begin(), previous.begin() + static_cast<long>(n));
  for (const auto& id : delta.value("ids", Json::array())) out.push_back(id.get<int64_t>());
  return out;
}

}  // namespace anvil
