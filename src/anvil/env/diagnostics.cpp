#include "anvil/env/diagnostics.h"

#include <regex>
#include <set>

#include "anvil/util/strings.h"

namespace anvil {

namespace {

std::string strip(std::string s, const DiagnosticOptions& opts) {
  for (const auto& prefix : opts.strip_prefixes) {
    if (prefix.empty()) continue;
    std::string p = ends_with(prefix, "/") ? prefix : prefix + "/";
    s = replace_all(s, p, "");
  }
  return s;
}

std::string normalize_path(const std::string& path) {
  std::string p = path;
  // "kernels/../binding_registry.h" -> "binding_registry.h"
  while (true) {
    size_t pos = p.find("/../");
    if (pos == std::string::npos) break;
    size_t start = p.rfind('/', pos == 0 ? 0 : pos - 1);
    start = (start == std::string::npos) ? 0 : start + 1;
    if (pos < start) break;
    p.erase(start, pos + 4 - start);
  }
  if (starts_with(p, "./")) p = p.substr(2);
  return p;
}

}  // namespace

std::vector<Diagnostic> parse_diagnostics(const std::string& raw_in, const DiagnosticOptions& opts) {
  static const std::regex kGcc(R"(^(.+?):(\d+)(?::\d+)?: (fatal error|error|warning): (.*)$)");
  static const std::regex kNvcc(R"(^(.+?)\((\d+)\): (catastrophic error|error|warning)[^:]*: (.*)$)");
  static const std::regex kPtxas(R"(^ptxas (?:fatal|error)\s*: (.*)$)");
  static const std::regex kNvlink(R"(^nvlink (?:fatal|error)\s*: (.*)$)");
  static const std::regex kUndefined(R"(undefined reference to [`'](.*)'$)");
  static const std::regex kLdMissing(R"(^(?:/usr/bin/)?ld: cannot find (.*)$)");
  static const std::regex kInFunction(R"(^(?:/usr/bin/)?ld: (.+?): in function [`'](.*)':$)");

  std::string raw = strip(raw_in, opts);
  std::vector<std::string> lines = split_lines(raw);
  std::vector<Diagnostic> errors, warnings;
  std::set<std::string> seen;
  std::string link_function;
  auto push = [&](Diagnostic d) {
    std::string key = d.file + ":" + std::to_string(d.line) + ":" + d.message;
    if (!seen.insert(key).second) return;
    (d.severity == "warning" ? warnings : errors).push_back(std::move(d));
  };
  for (size_t i = 0; i < lines.size(); ++i) {
    const std::string& line = lines[i];
    std::smatch m;
    if (std::regex_match(line, m, kGcc) || std::regex_match(line, m, kNvcc)) {
      Diagnostic d;
      d.file = normalize_path(m[1].str());
      d.line = std::stoi(m[2].str());
      d.severity = m[3].str() == "catastrophic error" ? "fatal error" : m[3].str();
      d.message = trim(m[4].str());
      // The compiler echoes the source line next (g++: "   12 |   code"; nvcc: "    code").
      if (i + 1 < lines.size()) {
        std::string next = lines[i + 1];
        size_t bar = next.find(" | ");
        if (bar != std::string::npos && trim(next.substr(0, bar)).find_first_not_of("0123456789") == std::string::npos &&
            !trim(next.substr(0, bar)).empty()) {
          d.source_line = trim(next.substr(bar + 3));
        } else if (!next.empty() && (next[0] == ' ' || next[0] == '\t') && trim(next) != "^" &&
                   next.find(": ") == std::string::npos) {
          d.source_line = trim(next);
        }
      }
      if (d.message.find("No such file or directory") != std::string::npos &&
          (d.message.find("torch/") != std::string::npos || d.message.find("ATen/") != std::string::npos ||
           d.message.find("c10/") != std::string::npos)) {
        d.message += " (fast binding mode has no torch headers: include <anvil/binding.h> instead)";
      }
      push(std::move(d));
    } else if (std::regex_match(line, m, kPtxas)) {
      push({"", 0, "error", "ptxas: " + trim(m[1].str()), ""});
    } else if (std::regex_match(line, m, kNvlink)) {
      push({"", 0, "error", "nvlink: " + trim(m[1].str()), ""});
    } else if (std::regex_match(line, m, kInFunction)) {
      link_function = m[2].str();
    } else if (std::regex_search(line, m, kUndefined)) {
      std::string msg = "link error: undefined reference to '" + m[1].str() + "'";
      if (!link_function.empty()) msg += " (called from '" + link_function + "')";
      push({"", 0, "error", msg, ""});
    } else if (std::regex_match(line, m, kLdMissing)) {
      push({"", 0, "error", "link error: cannot find " + trim(m[1].str()), ""});
    } else if (line.find("multiple definition of") != std::string::npos) {
      size_t pos = line.find("multiple definition of");
      push({"", 0, "error", "link error: " + trim(line.substr(pos)), ""});
    }
  }
  return errors.empty() ? warnings : errors;
}

std::string format_diagnostics(const std::string& raw, const DiagnosticOptions& opts) {
  std::vector<Diagnostic> diags = parse_diagnostics(raw, opts);
  if (diags.empty()) {
    std::string tail = tail_lines(strip(raw, opts), 15);
    if (tail.size() > opts.max_chars) tail = tail.substr(tail.size() - opts.max_chars);
    return tail;
  }
  std::string out;
  size_t shown = 0;
  for (const auto& d : diags) {
    std::string entry;
    if (!d.file.empty()) {
      entry = d.file + (d.line > 0 ? ":" + std::to_string(d.line) : "") + ": ";
    }
    entry += d.severity + ": " + d.message + "\n";
    if (!d.source_line.empty()) entry += "    " + d.source_line + "\n";
    if (shown >= opts.max_diagnostics || out.size() + entry.size() > opts.max_chars) break;
    out += entry;
    ++shown;
  }
  if (shown < diags.size()) {
    out += "... " + std::to_string(diags.size() - shown) + " more " +
           (diags.size() - shown == 1 ? "error" : "errors") +
           (opts.full_log.empty() ? "" : " (full log: " + opts.full_log + ")") + "\n";
  }
  return out;
}

std::string python_crash(const std::string& output, const std::vector<std::string>& harness_prefixes,
                         size_t max_frames) {
  std::vector<std::string> lines = split_lines(output);
  size_t fatal = lines.size();
  for (size_t i = lines.size(); i-- > 0;) {
    if (starts_with(lines[i], "Fatal Python error: ")) {
      fatal = i;
      break;
    }
  }
  if (fatal == lines.size()) return "";
  const std::string header = trim(lines[fatal]);
  if (header.find("Fatal Python error: ", 1) != std::string::npos) {
    // Threads that crashed at once print their dumps over each other: no frame can be read.
    return "Fatal Python error in several threads at once (their stacks are interleaved in the output)";
  }
  // Each thread's block: "Current thread 0x... (most recent call first):" for the crashing one,
  // "Thread 0x..." for the others, or "Stack (" when only one was dumped.
  struct Block {
    bool current = false;
    std::vector<std::string> frames;
  };
  std::vector<Block> blocks;
  for (size_t i = fatal + 1; i < lines.size(); ++i) {
    const std::string& l = lines[i];
    if (starts_with(l, "Current thread ") || starts_with(l, "Stack (")) {
      blocks.push_back({true, {}});
    } else if (starts_with(l, "Thread ")) {
      blocks.push_back({false, {}});
    } else if (starts_with(l, "Extension modules:") || starts_with(l, "Fatal Python error: ")) {
      break;
    } else if (!blocks.empty() && starts_with(l, "  File \"")) {
      blocks.back().frames.push_back(l);
    }
  }
  auto harness = [&](const std::string& frame) {
    std::string file = frame.substr(8);  // after '  File "'
    for (const auto& p : harness_prefixes) {
      if (!p.empty() && file.find(p) != std::string::npos) return true;
    }
    return false;
  };
  auto own_frames = [&](const Block& b) {
    std::vector<std::string> own;
    for (const auto& f : b.frames) {
      if (!harness(f)) own.push_back(f);
    }
    return own;
  };
  // The crashing thread's own frames; when it ran no Python (a native thread: no "Current thread"),
  // the first Python thread that was in the candidate's code, said as such.
  std::string note;
  const Block* chosen = nullptr;
  for (const Block& b : blocks) {
    if (b.current && !b.frames.empty()) chosen = &b;
  }
  if (!chosen) {
    for (const Block& b : blocks) {
      if (!own_frames(b).empty()) {
        chosen = &b;
        note = "  (it crashed in a thread that runs no Python; the Python thread was here:)\n";
        break;
      }
    }
  }
  if (!chosen) return "";
  std::vector<std::string> own = own_frames(*chosen);
  if (own.empty()) own.push_back(chosen->frames.front());
  if (own.size() > max_frames) own.resize(max_frames);
  return header + "\n" + note + join(own, "\n");
}

}  // namespace anvil
