// compare.h: two benchmark runs side by side (`anvil bench compare A B`): two
// models, or a policy against its earlier checkpoint.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace anvil {

// The comparison as JSON (anvil.bench-compare/1): both fingerprints and what
// differs between them, metrics per level for A and B, per-task rows matched
// by level and id, and the tasks whose outcome or reward changed.
nlohmann::json compare_results(const nlohmann::json& a, const nlohmann::json& b);

// The same as Markdown.
std::string render_comparison(const nlohmann::json& comparison);

}  // namespace anvil
