// task.h: KernelBench-format tasks, named FILE or DATASET#ROW.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "anvil/env/toolchain.h"
#include "anvil/util/subprocess.h"

namespace anvil {

struct Task {
  std::string name;    // "01_softmax" (a file's stem) or "ops.jsonl#12"
  std::string spec;    // as given
  std::filesystem::path file;  // the task file, or the dataset
  long row = -1;       // dataset row, or -1
  std::string code;    // the Python source
  std::string hash;    // sha256 of code
  nlohmann::json meta = nlohmann::json::object();  // dataset columns: ops, data_source
};

// The name load_task gives a task spec: a file's stem ("01_softmax"), or a dataset row's file name
// and row ("ops.jsonl#12"); also for a spec that cannot be loaded, so every message names it alike.
std::string task_name_of(const std::string& spec);

// Loads the task's source. JSONL rows are read here; Parquet rows through
// `python -m anvil.dataset`. Returns nullopt with a specific message (a
// task_error) in *err.
std::optional<Task> load_task(const Environment& env, const std::string& spec, std::string* err);

// Whether `path` names a dataset (.jsonl or .parquet) rather than a task file.
bool is_dataset_path(const std::string& path);

// The number of rows of a dataset, so that DATASET#0 .. DATASET#(n-1) name its
// tasks: JSONL rows (non-blank lines) are counted here, Parquet rows through
// `python -m anvil.dataset FILE --count`. Returns nullopt with a message in *err.
// One of anvil's own Python helpers (`-m anvil.dataset ...`): the interpreter anvil found, anvil's
// python/ on PYTHONPATH, five minutes at most, stdout and stderr apart. Not for candidate code.
SubprocessResult run_python(const Environment& env, const std::vector<std::string>& args);

std::optional<long> count_dataset_rows(const Environment& env, const std::string& path, std::string* err);

// The task specs a target names: a task (FILE or DATASET#ROW) names itself; a
// directory, every *.py file under it (recursively, hidden and __pycache__
// directories skipped) in natural order (level1/2_a.py before level1/10_b.py);
// a dataset (.jsonl, .parquet), DATASET#0 .. DATASET#(n-1). Returns nullopt
// with a message in *err (a missing target, an empty directory or dataset).
std::optional<std::vector<std::string>> list_tasks(const Environment& env, const std::string& target,
                                                   std::string* err);

// Whether a comes before b in natural order: runs of digits compare as numbers.
bool natural_less(const std::string& a, const std::string& b);

// Imports the task in a Python subprocess (`python -m anvil.task_probe`) and
// returns its description; on a broken task, {"ok": false, "outcome":
// "task_error", "cause": ...}. Throws std::runtime_error if Python itself
// cannot run.
nlohmann::json probe_task(const Environment& env, const Task& task, bool run_forward = true);

}  // namespace anvil
