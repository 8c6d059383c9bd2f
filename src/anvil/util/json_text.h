// json_text.h: JSON as text, the one way anvil writes it. What anvil writes (eval results, bench
// records, build manifests and records, serve's stored jobs and answers, trajectories, reports, the
// requests its children read) can hold bytes a candidate or a model chose: a runner's output tail,
// compiler diagnostics quoting a candidate's source, file names, a model's messages. Those need not
// be UTF-8, and nlohmann's default dump throws on the first byte that is not (type_error.316): a
// candidate's print once aborted `anvil eval` with no verdict. json_text never throws on bytes: each
// one that is not UTF-8 is written as U+FFFD. (json_text_test.cpp fails on nlohmann's dump called
// anywhere else in src/.)
#pragma once

#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace anvil {

// `j` as JSON text, `indent` spaces a level (-1: one line); bytes that are not UTF-8 as U+FFFD.
std::string json_text(const nlohmann::json& j, int indent = -1);

// Whether `s` is valid UTF-8 (no overlong forms, surrogates or code points past U+10FFFF): what a
// JSON string carries unchanged.
bool is_utf8(std::string_view s);

}  // namespace anvil
