// suite.h: a benchmark suite on disk: its tasks (KernelBench layout: level
// folders of <id>_<Name>.py files, a flat folder, or a dataset) and the
// solutions matched to them by level and id (docs/bench.md, "Layouts").
//
// Nothing here runs Python or the GPU: discovery reads names and files only,
// and every file it cannot use is listed with the reason instead of failing
// the suite.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "anvil/env/toolchain.h"

namespace anvil {

struct SuiteTask {
  std::string level;     // "level1"; a flat folder's or a dataset's name
  long id = 0;           // the file name's leading integer, or the dataset row
  std::string name;      // "ReLU": the file name after "<id>_" (the whole stem without one)
  std::string stem;      // "19_ReLU": the record's file name
  std::string spec;      // what evaluate() takes: FILE or DATASET#ROW
  std::string solution;  // the matched solution (a workdir or a single file); "" when missing
  std::string missing_reason;  // with no solution: why (none found, or the entry found is unusable)
  std::string family;          // its kernel family (bench.cpp, from python -m anvil.family), or "unknown"

  std::string key() const { return level + "/" + stem; }  // unique within a suite
};

struct SuiteProblem {
  std::string path;
  std::string reason;
};

struct Suite {
  std::string target;                 // as given
  std::vector<SuiteTask> tasks;       // by level (natural order), then id
  std::vector<SuiteProblem> unreadable;  // task files that cannot be used, with the reason
  std::vector<SuiteProblem> extra;       // solution entries that match no task, or a task already matched
  std::vector<std::string> levels() const;  // in order
};

// The tasks a target names: a folder of level folders, a flat folder of task
// files, or a dataset (.jsonl, .parquet). Files that cannot be read, or whose
// names are not <id>_<Name>.py, or that repeat an id, go to `unreadable`.
// Returns nullopt with a message in *err when the target itself is unusable
// (missing, empty, an unreadable dataset).
std::optional<Suite> discover_suite(const Environment& env, const std::string& target, std::string* err);

// Fills each task's `solution` from the folder `solutions` (docs/bench.md):
// <id>_<Name>.py, <id>.py, <id>_<Name>/, <id>/ in SOL/<level>/ (SOL/ for a
// flat suite), a folder's <variant>/ workdir, and KernelBench's generation
// names SOL/level_<L>_problem_<id>_sample_<s>_kernel.py. Entries that match
// no task, or a task already matched, go to `extra`. Returns false with a
// message when `solutions` is not a readable folder.
bool match_solutions(Suite& suite, const std::filesystem::path& solutions, const std::string& variant,
                     std::string* err);

}  // namespace anvil
