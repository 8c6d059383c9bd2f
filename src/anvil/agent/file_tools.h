// file_tools.h: the agent's file tools, confined to one workdir.
//
// Every path is relative to the workdir (absolute paths inside it are
// accepted); a path that leaves it (.., an absolute path elsewhere, a symlink
// pointing out) is refused. Protected files (the reference and the fixed
// binding files) can be read but never written. Results are short text for
// the model; errors say exactly what went wrong ("edit_file: old_string
// occurs 3 times in kernels/a.cu (lines 4, 19, 40); add context to make it
// unique").
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace anvil {

struct ToolResult {
  std::string text;       // what the model sees
  bool error = false;     // the call failed (text says why)
};

struct FileTools {
  std::filesystem::path workdir;
  std::vector<std::string> protected_files = {"model.py", "binding.cpp", "binding_registry.h"};
  size_t max_read_bytes = 64 << 10;   // read_file output limit
  size_t max_write_bytes = 1 << 20;   // a file written or edited may not exceed this

  // Numbered lines (cat -n style), from line `offset` (1-based), at most `limit` lines,
  // under a header "kernels/a.cu (lines 1-120 of 300)"; a note at the end says
  // where to go on (offset) when lines remain. Binary files are refused.
  ToolResult read_file(const std::string& path, long offset = 1, long limit = 2000) const;
  // Creates or replaces a file (parent directories created; atomic; an existing
  // file keeps its permissions): "wrote N bytes (M lines) to path".
  ToolResult write_file(const std::string& path, const std::string& content) const;
  // Replaces exactly one occurrence of old_string (or every one with
  // replace_all); fails when it is missing (saying whether it matches with
  // whitespace ignored, and where), or not unique without replace_all (listing
  // the lines): "replaced K occurrence(s) in path (line(s) ...)".
  ToolResult edit_file(const std::string& path, const std::string& old_string, const std::string& new_string,
                       bool replace_all = false) const;
  // Files matching a glob pattern (**, *, ?, [..]) under the workdir (or a
  // subdirectory), as workdir-relative paths, sorted, at most 500. Shell rules:
  // wildcards do not match a leading dot; directories named build and hidden
  // ones are not searched unless the pattern names them.
  ToolResult glob(const std::string& pattern, const std::string& path = "") const;

  // The resolved absolute path, or "" with *err filled when outside the workdir.
  std::filesystem::path resolve(const std::string& path, std::string* err) const;
};

// The agent's plan: todo_write replaces the whole list; the text shows it back.
// Items: {"content": str, "status": "pending"|"in_progress"|"completed"}.
struct TodoList {
  nlohmann::json items = nlohmann::json::array();
  ToolResult write(const nlohmann::json& todos);
};

// Cuts long text predictably: keeps the first head_bytes and the last
// tail_bytes (at line boundaries when near, never inside a UTF-8 character),
// and puts between them one line "[... N lines (M bytes) cut ...]". Text within
// the limit (or over it by less than 100 bytes, where a cut would save
// nothing) is returned as is.
std::string cut_text(const std::string& text, size_t head_bytes, size_t tail_bytes);

}  // namespace anvil
