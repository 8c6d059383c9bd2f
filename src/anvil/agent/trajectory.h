// trajectory.h: the record of one episode (schema anvil.trajectory/1,
// docs/trajectory.md), written as the episode goes.
//
// The record is one JSON document, rewritten atomically (temp file, then
// rename) after every complete turn, so a crash loses at most the turn in
// flight and a reader never sees half a record. It is also the state a
// resumed episode continues from.
#pragma once

#include <filesystem>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

namespace anvil {

inline constexpr const char* kTrajectorySchema = "anvil.trajectory/1";

bool save_trajectory(const std::filesystem::path& path, const nlohmann::json& record, std::string* err);

// Loads and checks a record (schema, the fields a resume needs). nullopt with
// *err naming the file and what is wrong.
std::optional<nlohmann::json> load_trajectory(const std::filesystem::path& path, std::string* err);

// The request's messages from the record's: only the fields a chat server
// accepts (role, content, tool_calls, tool_call_id, name), with the
// context-shortened contents (record "context.shortened") in place of the
// originals.
// With tool_results_as_user, each tool message goes as a user message naming
// the call ("[result of bash call_1]\n..."): for servers whose chat template
// drops the tool role (llama-cpp-python's chatml-function-calling).
nlohmann::json request_messages(const nlohmann::json& record, bool tool_results_as_user = false);

// Token ids of a turn's prompt stored as a delta against the previous turn's
// full sequence (its prompt then its completion): {"prefix": n, "ids": [...]}
// means previous[0:n] + ids. expand_prompt_ids undoes it.
nlohmann::json delta_prompt_ids(const std::vector<int64_t>& previous, const std::vector<int64_t>& prompt);
std::vector<int64_t> expand_prompt_ids(const std::vector<int64_t>& previous, const nlohmann::json& delta);

}  // namespace anvil
