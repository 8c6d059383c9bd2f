// task.h: KernelBench-format tasks, named FILE or DATASET#ROW.
#pragma once

#include <filesystem>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "anvil/env/toolchain.h"

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

// Loads the task's source. JSONL rows are read here; Parquet rows through
// `python -m anvil.dataset`. Returns nullopt with a specific message (a
// task_error) in *err.
std::optional<Task> load_task(const Environment& env, const std::string& spec, std::string* err);

// Imports the task in a Python subprocess (`python -m anvil.task_probe`) and
// returns its description; on a broken task, {"ok": false, "outcome":
// "task_error", "cause": ...}. Throws std::runtime_error if Python itself
// cannot run.
nlohmann::json probe_task(const Environment& env, const Task& task, bool run_forward = true);

}  // namespace anvil
