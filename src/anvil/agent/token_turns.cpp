#include "anvil/agent/token_turns.h"

#include <algorithm>

#include "anvil/util/json_reader.h"
#include "anvil/util/json_text.h"

namespace anvil {

using Json = nlohmann::json;

ParsedCalls parse_tool_call_blocks(const std::string& text, const std::string& id_prefix) {
  static const std::string kOpen = "<tool_call>", kClose = "</tool_call>";
  ParsedCalls out;
  std::string kept;
  size_t at = 0;
  while (true) {
    size_t open = text.find(kOpen, at);
    if (open == std::string::npos) break;
    size_t close = text.find(kClose, open + kOpen.size());
    if (close == std::string::npos) break;
    Json obj = untrusted_json(std::string_view(text).substr(open + kOpen.size(), close - open - kOpen.size()));
    size_t end = close + kClose.size();
    if (obj.is_discarded() || !obj.is_object() || !obj.contains("name") || !obj["name"].is_string()) {
      kept += text.substr(at, end - at);  // left as it was written
      at = end;
      continue;
    }
    Json args = obj.value("arguments", Json::object());
    out.tool_calls.push_back({{"id", id_prefix + "_" + std::to_string(out.tool_calls.size())},
                              {"type", "function"},
                              {"function", {{"name", obj["name"]}, {"arguments", args.is_string() ? args.get<std::string>() : json_text(args)}}}});
    kept += text.substr(at, open - at);
    at = end;
  }
  kept += text.substr(at);
  if (out.tool_calls.empty()) {
    out.content = text;
    return out;
  }
  size_t b = kept.find_first_not_of(" \t\r\n"), e = kept.find_last_not_of(" \t\r\n");
  out.content = b == std::string::npos ? "" : kept.substr(b, e - b + 1);
  return out;
}

std::optional<std::vector<int64_t>> tokens_after_turn(const std::vector<int64_t>& opened,
                                                      const std::vector<int64_t>& closed,
                                                      const std::vector<int64_t>& appended, int64_t end_token,
                                                      std::string* err) {
  auto extends = [](const std::vector<int64_t>& longer, const std::vector<int64_t>& prefix) {
    return longer.size() >= prefix.size() && std::equal(prefix.begin(), prefix.end(), longer.begin());
  };
  if (!extends(closed, opened) || !extends(appended, closed)) {
    *err = "the chat template renders the conversation with the new messages differently from without them "
           "(it does not extend it): the turn cannot be continued token for token";
    return std::nullopt;
  }
  auto end = std::find(closed.begin() + static_cast<long>(opened.size()), closed.end(), end_token);
  if (end == closed.end()) {
    *err = "the model ended its turn on token " + std::to_string(end_token) +
           ", which the chat template does not close the model's turn with";
    return std::nullopt;
  }
  size_t after = static_cast<size_t>(end - closed.begin()) + 1;
  return std::vector<int64_t>(appended.begin() + static_cast<long>(after), appended.end());
}

}  // namespace anvil
