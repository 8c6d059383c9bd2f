// diagnostics.h: compiler and linker output, and a Python crash's dump, turned into short text for a
// model.
//
// Keeps errors (g++ "file:line:col: error: ...", nvcc "file(line): error: ...",
// ptxas and linker errors) with the offending source line, drops notes,
// include chains and template back-traces, rewrites absolute staging paths to
// the workdir's relative ones, removes duplicates and caps the length.
#pragma once

#include <string>
#include <vector>

namespace anvil {

struct Diagnostic {
  std::string file;  // relative to the workdir where possible; may be empty
  int line = 0;      // 0 when unknown
  std::string severity;  // "error", "fatal error", "warning"
  std::string message;
  std::string source_line;  // the offending line when the compiler printed it
};

struct DiagnosticOptions {
  std::vector<std::string> strip_prefixes;  // path prefixes removed (the staging dir, ...)
  size_t max_diagnostics = 20;
  size_t max_chars = 4000;
  std::string full_log;  // where the full log is kept, named in the "more" line
};

// Parses raw output into errors (warnings only when there is no error).
std::vector<Diagnostic> parse_diagnostics(const std::string& raw, const DiagnosticOptions& opts);

// The short text: one "file:line: error: message" per diagnostic, each
// followed by its source line indented, then "... N more" if capped. When no
// line could be parsed, the last lines of the raw output.
std::string format_diagnostics(const std::string& raw, const DiagnosticOptions& opts);

// A Python process's crash as Python's faulthandler printed it into `output`: the last "Fatal
// Python error: ..." line and the crashing thread's frames (most recent first, at most
// `max_frames`), without those whose file starts with one of `harness_prefixes` (anvil's own
// modules, torch's Module.__call__, threading): what the candidate's code was doing. When every frame
// is the harness's, the innermost stays. When the crashing thread runs no Python (a native worker
// thread), the first Python thread in the candidate's code, said as such. When several threads'
// dumps interleave, a line that says so. "" when no such dump is found or none of its frames can be
// read, so the caller falls back to the output.
std::string python_crash(const std::string& output, const std::vector<std::string>& harness_prefixes,
                         size_t max_frames = 6);

}  // namespace anvil
