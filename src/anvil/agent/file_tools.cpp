// file_tools.cpp: read, write, edit and glob inside one workdir; the todo list;
// predictable cutting of long text.
//
// Paths are resolved with weakly_canonical against the canonical workdir, so
// `..` and symlinks (in the part of the path that exists) are followed before
// the inside/outside check; a dangling symlink is refused, since what it would
// create cannot be checked. Files are written through a temporary file and a
// rename (a symlink inside the workdir is written through to its target; the
// target is checked). Every text is for the model: errors start with the tool's
// name and say what to do instead.
#include "anvil/agent/file_tools.h"

#include <algorithm>
#include <cstdio>

#include "anvil/util/fs.h"
#include "anvil/util/json_reader.h"
#include "anvil/util/strings.h"

namespace anvil {

namespace {

constexpr size_t kMaxFileBytes = 32 << 20;  // read_file and edit_file refuse larger files
constexpr size_t kMaxGlobResults = 500;
constexpr size_t kMaxGlobVisits = 200000;  // entries walked by one glob

ToolResult ok(std::string text) { return {std::move(text), false}; }
ToolResult fail(std::string text) { return {"error: " + std::move(text), true}; }

size_t count_lines(std::string_view s) {
  if (s.empty()) return 0;
  return static_cast<size_t>(std::count(s.begin(), s.end(), '\n')) + (s.back() == '\n' ? 0 : 1);
}

std::string n_lines(size_t n) { return std::to_string(n) + (n == 1 ? " line" : " lines"); }

std::string list_numbers(const std::vector<size_t>& v, size_t max) {
  std::string s;
  for (size_t i = 0; i < v.size() && i < max; ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  if (v.size() > max) s += ", ...";
  return s;
}

// ---- UTF-8 ----------------------------------------------------------------------------------

// Length of the valid UTF-8 sequence at s[i], or 0 if it is not one.
size_t utf8_len(std::string_view s, size_t i) {
  auto c = static_cast<unsigned char>(s[i]);
  size_t n = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 0;
  if (n == 0 || i + n > s.size()) return 0;
  for (size_t k = 1; k < n; ++k) {
    if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) return 0;
  }
  if (n == 2 && c < 0xC2) return 0;  // overlong
  return n;
}

// The text with every byte that is not part of valid UTF-8 replaced by U+FFFD
// (the model's messages are JSON, which must be valid UTF-8).
std::string to_valid_utf8(std::string_view s, bool* changed) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    size_t n = utf8_len(s, i);
    if (n == 0) {
      out += "\xEF\xBF\xBD";
      *changed = true;
      ++i;
    } else {
      out.append(s.substr(i, n));
      i += n;
    }
  }
  return out;
}

// Moves a cut position off the middle of a UTF-8 sequence: back (forward = false) or forward.
size_t utf8_boundary(const std::string& s, size_t pos, bool forward) {
  while (pos > 0 && pos < s.size() && (static_cast<unsigned char>(s[pos]) & 0xC0) == 0x80) pos += forward ? 1 : -1;
  return pos;
}

// ---- glob -----------------------------------------------------------------------------------
//
// Shell semantics, by path component: `*` any run of characters, `?` one,
// `[abc]`, `[a-z]`, `[!a]` (or `[^a]`) a class; none of them match a leading
// dot (hidden files need a pattern component that starts with `.`). A `**`
// component matches zero or more directories (never hidden ones). `/` is
// matched only by `/`.

// One bracket class at p[0] == '['; sets *end to the position after ']'.
// Returns false for an unclosed class (then '[' is an ordinary character).
bool match_class(std::string_view p, size_t* end, char c, bool* matched) {
  size_t i = 1;
  bool negate = i < p.size() && (p[i] == '!' || p[i] == '^');
  if (negate) ++i;
  bool found = false;
  size_t start = i;
  for (; i < p.size() && (p[i] != ']' || i == start); ++i) {
    if (i + 2 < p.size() && p[i + 1] == '-' && p[i + 2] != ']') {
      if (c >= p[i] && c <= p[i + 2]) found = true;
      i += 2;
    } else if (p[i] == c) {
      found = true;
    }
  }
  if (i >= p.size()) return false;
  *end = i + 1;
  *matched = found != negate;
  return true;
}

bool match_component(std::string_view p, std::string_view s) {
  if (!s.empty() && s[0] == '.' && (p.empty() || p[0] != '.')) return false;
  size_t pi = 0, si = 0, star_p = std::string_view::npos, star_s = 0;
  while (si < s.size()) {
    if (pi < p.size() && p[pi] == '*') {
      star_p = ++pi;
      star_s = si;
      continue;
    }
    if (pi < p.size()) {
      size_t end = 0;
      bool matched = false;
      if (p[pi] == '?') {
        ++pi;
        ++si;
        continue;
      }
      if (p[pi] == '[' && match_class(p.substr(pi), &end, s[si], &matched)) {
        if (matched) {
          pi += end;
          ++si;
          continue;
        }
      } else if (p[pi] == s[si]) {
        ++pi;
        ++si;
        continue;
      }
    }
    if (star_p == std::string_view::npos) return false;
    pi = star_p;  // let the last `*` take one more character
    si = ++star_s;
  }
  while (pi < p.size() && p[pi] == '*') ++pi;
  return pi == p.size();
}

// Whether path components s[si..] match pattern components p[pi..] ("**": any number of
// components, none hidden). Each (pi, si) is decided once (`memo`, (p+1) x (s+1): 0 unknown, 1 no,
// 2 yes): a pattern of many `**` against a deep path is |p| x |s| steps, not exponentially many.
bool match_parts(const std::vector<std::string>& p, size_t pi, const std::vector<std::string>& s, size_t si,
                 std::vector<unsigned char>& memo) {
  unsigned char& known = memo[pi * (s.size() + 1) + si];
  if (known) return known == 2;
  bool m = false;
  if (pi == p.size()) {
    m = si == s.size();
  } else if (p[pi] == "**") {
    for (size_t k = si; k <= s.size() && !m; ++k) {
      m = match_parts(p, pi + 1, s, k, memo);
      if (k < s.size() && !s[k].empty() && s[k][0] == '.') break;
    }
  } else {
    m = si < s.size() && match_component(p[pi], s[si]) && match_parts(p, pi + 1, s, si + 1, memo);
  }
  known = m ? 2 : 1;
  return m;
}

bool match_parts(const std::vector<std::string>& p, const std::vector<std::string>& s) {
  std::vector<unsigned char> memo((p.size() + 1) * (s.size() + 1), 0);
  return match_parts(p, 0, s, 0, memo);
}

std::vector<std::string> components(const std::string& path) {
  std::vector<std::string> out;
  for (auto& c : split(path, '/')) {
    if (!c.empty() && c != ".") out.push_back(c);
  }
  return out;
}

// ---- edit_file's hints ----------------------------------------------------------------------

// Whitespace-insensitive form of a line: trimmed, inner runs of blanks as one space.
std::string squeeze(std::string_view line) {
  std::string out;
  bool blank = false;
  for (char c : trim(line)) {
    bool b = c == ' ' || c == '\t' || c == '\r';
    if (b && !blank) out += ' ';
    if (!b) out += c;
    blank = b;
  }
  return out;
}

// Why old_string was not found, when something close is there: it matches if
// whitespace is ignored, or only its first line matches.
std::string near_miss(const std::string& text, const std::string& old_string) {
  std::vector<std::string> want;
  for (const auto& l : split_lines(old_string)) want.push_back(squeeze(l));
  while (!want.empty() && want.front().empty()) want.erase(want.begin());
  while (!want.empty() && want.back().empty()) want.pop_back();
  if (want.empty()) return " (old_string is only whitespace)";
  std::vector<std::string> lines;
  for (const auto& l : split_lines(text)) lines.push_back(squeeze(l));
  // The first line may end a file line and the last may begin one; the lines between match whole.
  auto block_at = [&](size_t i) {
    if (i + want.size() > lines.size()) return false;
    if (want.size() == 1) return lines[i].find(want[0]) != std::string::npos;
    if (!ends_with(lines[i], want[0]) || !starts_with(lines[i + want.size() - 1], want.back())) return false;
    for (size_t k = 1; k + 1 < want.size(); ++k) {
      if (lines[i + k] != want[k]) return false;
    }
    return true;
  };
  std::vector<size_t> at, first_at;
  for (size_t i = 0; i < lines.size(); ++i) {
    if (block_at(i)) at.push_back(i + 1);
    if (!want[0].empty() && lines[i].find(want[0]) != std::string::npos) first_at.push_back(i + 1);
  }
  if (!at.empty()) {
    std::string where = want.size() == 1
                            ? "line " + std::to_string(at[0])
                            : "lines " + std::to_string(at[0]) + "-" + std::to_string(at[0] + want.size() - 1);
    return " (it matches " + where + (at.size() > 1 ? " and " + std::to_string(at.size() - 1) + " more places" : "") +
           " if whitespace is ignored: copy the exact text, indentation and line ends included, from read_file)";
  }
  if (!first_at.empty() && want.size() > 1) {
    return " (its first line matches line " + list_numbers(first_at, 5) +
           ", but the lines after it differ: read_file shows the current text)";
  }
  return " (nothing close: read_file shows the current text)";
}

}  // namespace

// ---- cut_text -------------------------------------------------------------------------------

std::string cut_text(const std::string& text, size_t head_bytes, size_t tail_bytes) {
  // A cut that would save less than its own marker line is not made.
  if (text.size() <= head_bytes + tail_bytes + 100) return text;
  size_t head = head_bytes;
  size_t nl = head > 0 ? text.rfind('\n', head - 1) : std::string::npos;
  if (nl != std::string::npos && nl + 1 + 200 >= head) {
    head = nl + 1;  // end at a line when one ends near
  } else {
    head = utf8_boundary(text, head, false);
  }
  size_t tail_start = text.size() - tail_bytes;
  if (text[tail_start - 1] != '\n') {
    nl = text.find('\n', tail_start);
    if (nl != std::string::npos && nl < tail_start + 200) {
      tail_start = nl + 1;  // start at a line when one starts near
    } else {
      tail_start = utf8_boundary(text, tail_start, true);
    }
  }
  std::string_view middle(text.data() + head, tail_start - head);
  return text.substr(0, head) + (head > 0 && text[head - 1] != '\n' ? "\n" : "") + "[... " +
         n_lines(count_lines(middle)) + " (" + std::to_string(middle.size()) + " bytes) cut ...]\n" +
         text.substr(tail_start);
}

// ---- FileTools ------------------------------------------------------------------------------

fs::path FileTools::resolve(const std::string& path, std::string* err) const {
  std::error_code ec;
  fs::path root = fs::weakly_canonical(fs::absolute(workdir, ec), ec);
  if (path.empty()) {
    *err = "the path is empty";
    return {};
  }
  fs::path p = fs::path(path).is_absolute() ? fs::path(path) : root / path;
  fs::path real = fs::weakly_canonical(p, ec);  // symlinks resolved, .. folded
  if (ec) {
    *err = path + ": " + ec.message();
    return {};
  }
  auto inside = [&](const fs::path& x) {
    fs::path rel = x.lexically_relative(root);
    return !rel.empty() && *rel.begin() != "..";
  };
  if (!inside(real)) {
    if (inside(p.lexically_normal())) {
      *err = path + " leads outside the workdir through a symlink (to " + real.string() +
             "); every path must stay inside " + root.string();
    } else {
      *err = path + " is outside the workdir (" + root.string() + "); every path must stay inside it";
    }
    return {};
  }
  // weakly_canonical stops at the first part that does not exist: if that part
  // is a symlink, it points nowhere, and where a write through it would land is
  // not checked. Refuse it.
  fs::path cur = root;
  for (const auto& part : real.lexically_relative(root)) {
    if (part == ".") continue;
    cur /= part;
    if (fs::is_symlink(fs::symlink_status(cur, ec))) {
      *err = path + " goes through a symlink that points nowhere (" + cur.lexically_relative(root).string() + " -> " +
             fs::read_symlink(cur, ec).string() + "); remove it or use the real path";
      return {};
    }
  }
  return real;
}

namespace {

// The path as the model sees it: relative to the workdir.
std::string shown(const fs::path& real, const fs::path& workdir) {
  std::error_code ec;
  fs::path root = fs::weakly_canonical(fs::absolute(workdir, ec), ec);
  std::string rel = real.lexically_relative(root).generic_string();
  return rel.empty() ? "." : rel;
}

bool is_protected(const std::string& rel, const std::vector<std::string>& protected_files) {
  return std::any_of(protected_files.begin(), protected_files.end(),
                     [&](const std::string& f) { return fs::path(f).lexically_normal().generic_string() == rel; });
}

// Creates the missing directories of `dir` (inside the workdir), each owned like the workdir:
// when anvil is root, the sandboxed shell runs as another user and must be able to edit them.
bool make_parents(const fs::path& dir, const fs::path& workdir, std::error_code& ec) {
  std::vector<fs::path> missing;
  for (fs::path d = dir; !d.empty() && d != d.parent_path() && !fs::exists(fs::symlink_status(d, ec)); d = d.parent_path())
    missing.push_back(d);
  ec.clear();
  for (auto it = missing.rbegin(); it != missing.rend(); ++it) {
    if (!fs::create_directory(*it, ec) && ec) return false;
    own_like(*it, workdir);
  }
  if (!fs::is_directory(dir, ec)) {  // a file where a directory should be
    ec = std::make_error_code(std::errc::not_a_directory);
    return false;
  }
  return true;
}

// A regular file's text, or nullopt with what to say instead: FIFOs, devices, sockets and
// symlinks are never opened for reading (no blocking, no following), nor files over the limit.
std::optional<std::string> read_text(const fs::path& p, std::string* why) {
  auto text = anvil::read_regular(p, kMaxFileBytes, why);
  if (!text && why->rfind("is a", 0) == 0) *why += ", not a regular file; only regular files can be read and edited";
  return text;
}

// The permissions a rewritten file keeps (an executable script stays executable).
int mode_of(const fs::path& p) {
  std::error_code ec;
  auto st = fs::status(p, ec);
  if (ec || !fs::is_regular_file(st)) return 0644;
  return static_cast<int>(st.permissions() & fs::perms::mask);
}

}  // namespace

ToolResult FileTools::read_file(const std::string& path, long offset, long limit) const {
  std::string err;
  fs::path p = resolve(path, &err);
  if (p.empty()) return fail("read_file: " + err);
  std::string rel = shown(p, workdir);
  std::error_code ec;
  if (fs::is_directory(p, ec)) return fail("read_file: " + rel + " is a directory (use glob, or bash ls)");
  if (!fs::exists(p, ec)) return fail("read_file: " + rel + " does not exist");
  size_t size = fs::file_size(p, ec);
  if (!ec && size > kMaxFileBytes) {
    return fail("read_file: " + rel + " is " + std::to_string(size) +
                " bytes, too large to read here; look into it with bash (head, sed -n, grep)");
  }
  std::string why;
  auto text = read_text(p, &why);
  if (!text) return fail("read_file: " + rel + " " + why);
  if (text->find('\0') != std::string::npos) {
    return fail("read_file: " + rel + " is a binary file (" + std::to_string(text->size()) +
                " bytes); inspect it with bash (file, xxd, nm, cuobjdump)");
  }
  if (text->empty()) return ok(rel + " is empty (0 lines)");
  std::vector<std::string> lines = split_lines(*text);
  long total = static_cast<long>(lines.size());
  long first = std::max(1L, offset);
  if (first > total) {
    return fail("read_file: " + rel + " has " + std::to_string(total) + " lines; offset " + std::to_string(offset) +
                " is past its end");
  }
  long last = std::min(total, first + std::max(1L, limit) - 1);
  std::string body;
  long shown_last = first - 1;
  bool cut = false, invalid = false;
  for (long i = first; i <= last; ++i) {
    char num[32];
    std::snprintf(num, sizeof num, "%6ld\t", i);
    std::string line = num + to_valid_utf8(lines[static_cast<size_t>(i - 1)], &invalid) + "\n";
    if (body.size() + line.size() > max_read_bytes) {
      if (i == first) {
        // One line longer than the whole limit: show its start, and move on past it.
        size_t keep = utf8_boundary(line, max_read_bytes > 100 ? max_read_bytes - 100 : 0, false);
        body = line.substr(0, keep) + " [... line " + std::to_string(i) + " is " +
               std::to_string(lines[static_cast<size_t>(i - 1)].size()) + " bytes; cut here]\n";
        shown_last = i;
      }
      cut = true;
      break;
    }
    body += line;
    shown_last = i;
  }
  std::string head = rel + " (lines " + std::to_string(first) + "-" + std::to_string(shown_last) + " of " +
                     std::to_string(total) + ")\n";
  std::string tail;
  if (invalid) tail += "[the file is not valid UTF-8: the bytes that are not are shown as U+FFFD]\n";
  if (shown_last < total) {
    tail +=
        (cut ? "[output limit of " + std::to_string(max_read_bytes) + " bytes reached"
             : "[" + std::to_string(total - shown_last) + (total - shown_last == 1 ? " more line" : " more lines")) +
        ": read on with offset " + std::to_string(shown_last + 1) + "]\n";
  }
  return ok(head + body + tail);
}

ToolResult FileTools::write_file(const std::string& path, const std::string& content) const {
  std::string err;
  fs::path p = resolve(path, &err);
  if (p.empty()) return fail("write_file: " + err);
  std::string rel = shown(p, workdir);
  if (is_protected(rel, protected_files)) {
    return fail("write_file: " + rel + " is protected (read-only): the harness uses its own copy");
  }
  if (content.size() > max_write_bytes) {
    return fail("write_file: the content is " + std::to_string(content.size()) + " bytes, more than the limit of " +
                std::to_string(max_write_bytes) + " bytes");
  }
  std::error_code ec;
  if (fs::is_directory(p, ec)) return fail("write_file: " + rel + " is a directory");
  if (!make_parents(p.parent_path(), workdir, ec))
    return fail("write_file: cannot create the directory " + shown(p.parent_path(), workdir) + ": " + ec.message());
  if (!write_file_atomic(p, content, &err, mode_of(p))) return fail("write_file: " + err);
  own_like(p, workdir);
  return ok("wrote " + std::to_string(content.size()) + " bytes (" + n_lines(count_lines(content)) + ") to " + rel);
}

ToolResult FileTools::edit_file(const std::string& path, const std::string& old_string, const std::string& new_string,
                                bool replace_all) const {
  std::string err;
  fs::path p = resolve(path, &err);
  if (p.empty()) return fail("edit_file: " + err);
  std::string rel = shown(p, workdir);
  if (is_protected(rel, protected_files)) return fail("edit_file: " + rel + " is protected (read-only)");
  if (old_string.empty()) return fail("edit_file: old_string is empty (to create a file, use write_file)");
  if (old_string == new_string) return fail("edit_file: old_string and new_string are the same; nothing to change");
  std::error_code ec;
  if (fs::is_directory(p, ec)) return fail("edit_file: " + rel + " is a directory");
  if (!fs::exists(p, ec)) return fail("edit_file: " + rel + " does not exist (use write_file to create it)");
  size_t size = fs::file_size(p, ec);
  if (!ec && size > kMaxFileBytes) return fail("edit_file: " + rel + " is too large to edit here");
  std::string why;
  auto text = read_text(p, &why);
  if (!text) return fail("edit_file: " + rel + " " + why);
  if (text->find('\0') != std::string::npos) return fail("edit_file: " + rel + " is a binary file");
  std::vector<size_t> at;
  for (size_t pos = text->find(old_string); pos != std::string::npos;
       pos = text->find(old_string, pos + old_string.size())) {
    at.push_back(pos);
  }
  if (at.empty()) {
    return fail("edit_file: old_string was not found in " + rel + near_miss(*text, old_string) +
                "; nothing was changed");
  }
  if (at.size() > 1 && !replace_all) {
    std::vector<size_t> lines;  // counted on from the previous occurrence: one pass over the text
    size_t line = 1, counted = 0;
    for (size_t pos : at) {
      line += static_cast<size_t>(std::count(text->begin() + counted, text->begin() + pos, '\n'));
      counted = pos;
      lines.push_back(line);
    }
    return fail("edit_file: old_string occurs " + std::to_string(at.size()) + " times in " + rel + " (lines " +
                list_numbers(lines, 10) +
                "); add surrounding context to make it unique, or set replace_all; nothing was changed");
  }
  // The result's size first (nothing is built past the limit), then the text, its lines counted as it
  // grows (one pass: counting the whole output again at each of a million occurrences never ended).
  const long long grows = static_cast<long long>(new_string.size()) - static_cast<long long>(old_string.size());
  const long long result_size = static_cast<long long>(text->size()) + grows * static_cast<long long>(at.size());
  if (result_size > static_cast<long long>(max_write_bytes)) {
    return fail("edit_file: the result would be " + std::to_string(result_size) + " bytes, more than the limit of " +
                std::to_string(max_write_bytes) + " bytes; nothing was changed");
  }
  const size_t new_string_lines = static_cast<size_t>(std::count(new_string.begin(), new_string.end(), '\n'));
  std::string out;
  out.reserve(static_cast<size_t>(result_size));
  std::vector<size_t> new_lines;  // where the replacements begin in the new text
  size_t prev = 0, line = 1;
  for (size_t pos : at) {
    line += static_cast<size_t>(std::count(text->begin() + prev, text->begin() + pos, '\n'));
    out.append(*text, prev, pos - prev);
    new_lines.push_back(line);
    out += new_string;
    line += new_string_lines;
    prev = pos + old_string.size();
  }
  out.append(*text, prev);
  if (out.size() > max_write_bytes) {
    return fail("edit_file: the result would be " + std::to_string(out.size()) + " bytes, more than the limit of " +
                std::to_string(max_write_bytes) + " bytes; nothing was changed");
  }
  if (!write_file_atomic(p, out, &err, mode_of(p))) return fail("edit_file: " + err);
  own_like(p, workdir);
  return ok("replaced " + std::to_string(at.size()) + (at.size() == 1 ? " occurrence" : " occurrences") + " in " + rel +
            (new_lines.size() == 1 ? " (line " : " (lines ") + list_numbers(new_lines, 10) + ")");
}

// Directories named `build` are not searched unless a pattern component names
// build (build trees hold thousands of objects; the candidate's sources are
// elsewhere), nor hidden directories (.git, .cache) unless a pattern component
// starts with a dot. Only files (and symlinks) are listed, not directories.
ToolResult FileTools::glob(const std::string& pattern, const std::string& path) const {
  std::string err;
  fs::path base = resolve(path.empty() ? "." : path, &err);
  if (base.empty()) return fail("glob: " + err);
  std::error_code ec;
  if (!fs::is_directory(base, ec)) return fail("glob: " + path + " is not a directory");
  if (pattern.empty()) return fail("glob: the pattern is empty");
  if (pattern[0] == '/')
    return fail("glob: the pattern " + pattern + " is absolute; patterns are relative to the workdir (or to path)");
  std::vector<std::string> pat = components(pattern);
  bool names_build =
      std::any_of(pat.begin(), pat.end(), [](const std::string& c) { return c.find("build") != std::string::npos; });
  bool names_hidden = std::any_of(pat.begin(), pat.end(), [](const std::string& c) { return c[0] == '.'; });

  std::vector<std::string> found;
  bool skipped_build = false, skipped_hidden = false, too_many = false;
  size_t visits = 0;
  auto it = fs::recursive_directory_iterator(base, fs::directory_options::skip_permission_denied, ec);
  for (; !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    if (++visits > kMaxGlobVisits) {
      too_many = true;
      break;
    }
    std::string name = it->path().filename().string();
    if (it->is_directory(ec) && !it->is_symlink(ec)) {
      if (name == "build" && !names_build) {
        skipped_build = true;
        it.disable_recursion_pending();
      } else if (name[0] == '.' && !names_hidden) {
        skipped_hidden = true;
        it.disable_recursion_pending();
      }
      continue;
    }
    std::vector<std::string> parts = components(it->path().lexically_relative(base).generic_string());
    if (match_parts(pat, parts)) found.push_back(shown(it->path(), workdir));
  }
  std::sort(found.begin(), found.end());
  std::string where = path.empty() ? "" : " under " + path;
  if (found.empty()) {
    std::string s = "no files match " + pattern + where;
    if (pat.size() == 1 && pat[0] != "**")
      s += " (a pattern without / looks in one directory; **/" + pattern + " looks in all)";
    if (skipped_build || skipped_hidden) {
      s += std::string("; not searched: ") + (skipped_build ? "directories named build" : "") +
           (skipped_build && skipped_hidden ? ", " : "") + (skipped_hidden ? "hidden directories" : "") +
           " (name them in the pattern to search them)";
    }
    return ok(s);
  }
  size_t total = found.size();
  if (total > kMaxGlobResults) found.resize(kMaxGlobResults);
  std::string s = join(found, "\n") + "\n";
  if (total > found.size()) s += "[" + std::to_string(total - found.size()) + " more not shown: narrow the pattern]\n";
  if (too_many) s += "[the search stopped after " + std::to_string(kMaxGlobVisits) + " entries]\n";
  return ok(s);
}

// ---- TodoList -------------------------------------------------------------------------------

ToolResult TodoList::write(const nlohmann::json& todos_in) {
  nlohmann::json todos = todos_in;
  if (todos.is_string()) {  // some models send the list as a JSON string
    todos = untrusted_json(todos_in.get<std::string>());
  }
  if (!todos.is_array()) return fail("todo_write: todos must be an array of {content, status}");
  int in_progress = 0;
  for (size_t i = 0; i < todos.size(); ++i) {
    const auto& t = todos[i];
    if (!t.is_object() || !t.contains("content") || !t["content"].is_string()) {
      return fail("todo_write: item " + std::to_string(i) + " needs a content string");
    }
    if (trim(t["content"].get<std::string>()).empty()) {
      return fail("todo_write: item " + std::to_string(i) + " has an empty content");
    }
    std::string st = t.contains("status") && t["status"].is_string() ? t["status"].get<std::string>() : "";
    if (st != "pending" && st != "in_progress" && st != "completed") {
      return fail("todo_write: item " + std::to_string(i) +
                  ": status must be pending, in_progress or completed, not '" + st + "'");
    }
    in_progress += st == "in_progress";
  }
  items = nlohmann::json::array();
  std::string s;
  for (const auto& t : todos) {
    items.push_back({{"content", t["content"]}, {"status", t["status"]}});
    std::string st = t["status"];
    s += std::string(st == "completed"     ? "[x] "
                     : st == "in_progress" ? "[>] "
                                           : "[ ] ") +
         t["content"].get<std::string>() + "\n";
  }
  if (items.empty()) s = "(the list is empty)\n";
  if (in_progress > 1) s += "note: " + std::to_string(in_progress) + " items are in progress; keep one at a time\n";
  return ok(s);
}

}  // namespace anvil
