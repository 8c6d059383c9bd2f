// file_tools.cpp: read, write, edit and glob inside one workdir; the todo list;
// predictable cutting of long text.
#include "anvil/agent/file_tools.h"

#include <algorithm>

#include "anvil/util/fs.h"
#include "anvil/util/strings.h"

namespace anvil {

namespace {

ToolResult ok(std::string text) { return {std::move(text), false}; }
ToolResult fail(std::string text) { return {"error: " + std::move(text), true}; }

size_t count_lines(const std::string& s) {
  if (s.empty()) return 0;
  return static_cast<size_t>(std::count(s.begin(), s.end(), '\n')) + (s.back() == '\n' ? 0 : 1);
}

size_t line_of(const std::string& s, size_t pos) {
  return static_cast<size_t>(std::count(s.begin(), s.begin() + static_cast<long>(pos), '\n')) + 1;
}

// Glob matching of one path against a pattern: `**` spans directories, `*` and
// `?` stay within one path component, `[...]` is a character class ([!...] negates).
bool match(const char* p, const char* s) {
  for (; *p; ++p, ++s) {
    if (p[0] == '*' && p[1] == '*') {
      p += 2;
      if (*p == '/') ++p;  // "**/" also matches no directory at all
      for (const char* t = s;; ++t) {
        if (match(p, t)) return true;
        if (!*t) return false;
      }
    }
    if (*p == '*') {
      for (const char* t = s;; ++t) {
        if (match(p + 1, t)) return true;
        if (!*t || *t == '/') return false;
      }
    }
    if (!*s) return false;
    if (*p == '?') {
      if (*s == '/') return false;
      continue;
    }
    if (*p == '[') {
      const char* q = p + 1;
      bool negate = *q == '!' || *q == '^';
      if (negate) ++q;
      bool found = false;
      const char* start = q;
      for (; *q && (*q != ']' || q == start); ++q) {
        if (q[1] == '-' && q[2] && q[2] != ']') {
          if (*s >= q[0] && *s <= q[2]) found = true;
          q += 2;
        } else if (*q == *s) {
          found = true;
        }
      }
      if (!*q) return false;  // an unclosed class matches nothing
      if (found == negate) return false;
      p = q;
      continue;
    }
    if (*p != *s) return false;
  }
  return !*s;
}

}  // namespace

std::string cut_text(const std::string& text, size_t head_bytes, size_t tail_bytes) {
  if (text.size() <= head_bytes + tail_bytes + 100) return text;
  size_t head = head_bytes;
  size_t nl = text.rfind('\n', head);
  if (nl != std::string::npos && nl + 200 > head) head = nl + 1;  // end at a line when one is near
  size_t tail_start = text.size() - tail_bytes;
  nl = text.find('\n', tail_start);
  if (nl != std::string::npos && nl < tail_start + 200) tail_start = nl + 1;
  std::string middle = text.substr(head, tail_start - head);
  return text.substr(0, head) + "[... " + std::to_string(count_lines(middle)) + " lines (" +
         std::to_string(middle.size()) + " bytes) cut ...]\n" + text.substr(tail_start);
}

fs::path FileTools::resolve(const std::string& path, std::string* err) const {
  std::error_code ec;
  fs::path root = fs::weakly_canonical(fs::absolute(workdir, ec), ec);
  if (path.empty()) {
    *err = "an empty path";
    return {};
  }
  fs::path p = fs::path(path).is_absolute() ? fs::path(path) : root / path;
  fs::path real = fs::weakly_canonical(p, ec);  // symlinks resolved, .. folded
  if (ec) {
    *err = path + ": " + ec.message();
    return {};
  }
  auto rel = real.lexically_relative(root);
  if (rel.empty() || *rel.begin() == "..") {
    *err = path + " is outside the workdir (" + root.string() + "); every path must stay inside it";
    return {};
  }
  return real;
}

ToolResult FileTools::read_file(const std::string& path, long offset, long limit) const {
  std::string err;
  fs::path p = resolve(path, &err);
  if (p.empty()) return fail("read_file: " + err);
  std::error_code ec;
  if (fs::is_directory(p, ec)) return fail("read_file: " + path + " is a directory (use glob or bash ls)");
  auto text = anvil::read_file(p);
  if (!text) return fail("read_file: " + path + " does not exist or cannot be read");
  if (text->find('\0') != std::string::npos) {
    return fail("read_file: " + path + " is a binary file (" + std::to_string(text->size()) + " bytes)");
  }
  std::vector<std::string> lines = split_lines(*text);
  long total = static_cast<long>(lines.size());
  long first = std::max(1L, offset);
  long last = std::min(total, first + std::max(1L, limit) - 1);
  std::string body;
  long shown_last = first - 1;
  bool cut = false;
  for (long i = first; i <= last; ++i) {
    char num[32];
    std::snprintf(num, sizeof num, "%6ld\t", i);
    std::string line = num + lines[static_cast<size_t>(i - 1)] + "\n";
    if (body.size() + line.size() > max_read_bytes) {
      cut = true;
      break;
    }
    body += line;
    shown_last = i;
  }
  if (total == 0) return ok(path + " is empty");
  if (first > total) return fail("read_file: " + path + " has " + std::to_string(total) + " lines; offset " +
                                 std::to_string(offset) + " is past its end");
  std::string head = path + " (lines " + std::to_string(first) + "-" + std::to_string(shown_last) + " of " +
                     std::to_string(total) + ")\n";
  std::string tail;
  if (shown_last < total) {
    tail = std::string(cut ? "[output limit reached" : "[more lines follow") + ": read the rest with offset " +
           std::to_string(shown_last + 1) + "]\n";
  }
  return ok(head + body + tail);
}

ToolResult FileTools::write_file(const std::string& path, const std::string& content) const {
  std::string err;
  fs::path p = resolve(path, &err);
  if (p.empty()) return fail("write_file: " + err);
  std::error_code ec;
  fs::path rel = p.lexically_relative(fs::weakly_canonical(fs::absolute(workdir, ec), ec));
  for (const auto& f : protected_files) {
    if (rel == f) return fail("write_file: " + rel.string() + " is protected (read-only): the harness uses its own copy");
  }
  if (content.size() > max_write_bytes) {
    return fail("write_file: " + std::to_string(content.size()) + " bytes is more than the limit of " +
                std::to_string(max_write_bytes));
  }
  if (fs::is_directory(p, ec)) return fail("write_file: " + path + " is a directory");
  fs::create_directories(p.parent_path(), ec);
  if (!write_file_atomic(p, content, &err)) return fail("write_file: " + err);
  return ok("wrote " + std::to_string(content.size()) + " bytes (" + std::to_string(count_lines(content)) +
            " lines) to " + rel.string());
}

ToolResult FileTools::edit_file(const std::string& path, const std::string& old_string, const std::string& new_string,
                                bool replace_all) const {
  std::string err;
  fs::path p = resolve(path, &err);
  if (p.empty()) return fail("edit_file: " + err);
  std::error_code ec;
  fs::path rel = p.lexically_relative(fs::weakly_canonical(fs::absolute(workdir, ec), ec));
  for (const auto& f : protected_files) {
    if (rel == f) return fail("edit_file: " + rel.string() + " is protected (read-only)");
  }
  if (old_string.empty()) return fail("edit_file: old_string is empty (to create a file, use write_file)");
  if (old_string == new_string) return fail("edit_file: old_string and new_string are the same");
  auto text = anvil::read_file(p);
  if (!text) return fail("edit_file: " + path + " does not exist or cannot be read");
  std::vector<size_t> at;
  for (size_t pos = text->find(old_string); pos != std::string::npos; pos = text->find(old_string, pos + old_string.size())) {
    at.push_back(pos);
  }
  if (at.empty()) {
    std::string hint;
    // The nearest candidate: the first line of old_string, trimmed, found somewhere?
    std::string first = trim(split_lines(old_string).empty() ? old_string : split_lines(old_string)[0]);
    if (!first.empty()) {
      size_t pos = text->find(first);
      if (pos != std::string::npos) {
        hint = " (its first line, trimmed, occurs at line " + std::to_string(line_of(*text, pos)) +
               ": check whitespace and the lines after it; read_file shows the exact text)";
      }
    }
    return fail("edit_file: old_string was not found in " + rel.string() + hint + "; nothing was changed");
  }
  if (at.size() > 1 && !replace_all) {
    std::vector<std::string> lines;
    for (size_t i = 0; i < at.size() && i < 10; ++i) lines.push_back(std::to_string(line_of(*text, at[i])));
    return fail("edit_file: old_string occurs " + std::to_string(at.size()) + " times in " + rel.string() +
                " (lines " + join(lines, ", ") + (at.size() > 10 ? ", ..." : "") +
                "); add surrounding context to make it unique, or set replace_all; nothing was changed");
  }
  std::string out;
  size_t prev = 0;
  for (size_t pos : at) {
    out += text->substr(prev, pos - prev) + new_string;
    prev = pos + old_string.size();
  }
  out += text->substr(prev);
  if (out.size() > max_write_bytes) return fail("edit_file: the result would exceed the file size limit");
  if (!write_file_atomic(p, out, &err)) return fail("edit_file: " + err);
  return ok("replaced " + std::to_string(at.size()) + " occurrence" + (at.size() == 1 ? "" : "s") + " in " +
            rel.string() + " (at line " + std::to_string(line_of(out, at[0])) + ")");
}

ToolResult FileTools::glob(const std::string& pattern, const std::string& path) const {
  std::string err;
  fs::path base = resolve(path.empty() ? "." : path, &err);
  if (base.empty()) return fail("glob: " + err);
  std::error_code ec;
  if (!fs::is_directory(base, ec)) return fail("glob: " + path + " is not a directory");
  fs::path root = fs::weakly_canonical(fs::absolute(workdir, ec), ec);
  std::vector<std::string> found;
  size_t total = 0;
  for (const auto& rel : list_files(base)) {
    std::string r = rel.generic_string();
    if (match(pattern.c_str(), r.c_str())) {
      ++total;
      if (found.size() < 500) found.push_back((base / rel).lexically_relative(root).generic_string());
    }
  }
  if (found.empty()) return ok("no files match " + pattern + (path.empty() ? "" : " under " + path));
  std::string s = join(found, "\n") + "\n";
  if (total > found.size()) s += "[" + std::to_string(total - found.size()) + " more not shown]\n";
  return ok(s);
}

ToolResult TodoList::write(const nlohmann::json& todos) {
  if (!todos.is_array()) return fail("todo_write: todos must be an array");
  int in_progress = 0;
  for (size_t i = 0; i < todos.size(); ++i) {
    const auto& t = todos[i];
    if (!t.is_object() || !t.contains("content") || !t["content"].is_string()) {
      return fail("todo_write: item " + std::to_string(i) + " needs a content string");
    }
    std::string st = t.value("status", std::string());
    if (st != "pending" && st != "in_progress" && st != "completed") {
      return fail("todo_write: item " + std::to_string(i) + ": status must be pending, in_progress or completed, not '" +
                  st + "'");
    }
    in_progress += st == "in_progress";
  }
  items = nlohmann::json::array();
  std::string s;
  for (const auto& t : todos) {
    items.push_back({{"content", t["content"]}, {"status", t["status"]}});
    std::string st = t["status"];
    s += std::string(st == "completed" ? "[x] " : st == "in_progress" ? "[>] " : "[ ] ") +
         t["content"].get<std::string>() + "\n";
  }
  if (items.empty()) s = "(the list is empty)\n";
  if (in_progress > 1) s += "note: " + std::to_string(in_progress) + " items are in progress; keep one at a time\n";
  return ok(s);
}

}  // namespace anvil
