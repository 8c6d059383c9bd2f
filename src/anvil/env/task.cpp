#include "anvil/env/task.h"

#include <stdexcept>

#include "anvil/util/fs.h"
#include "anvil/util/hash.h"
#include "anvil/util/strings.h"
#include "anvil/util/subprocess.h"

namespace anvil {

namespace {

SubprocessResult run_python(const Environment& env, const std::vector<std::string>& args) {
  SubprocessOptions o;
  o.timeout = std::chrono::minutes(5);
  o.merge_stderr = false;
  const char* pp = std::getenv("PYTHONPATH");
  o.env["PYTHONPATH"] = (env.home / "python").string() + (pp && *pp ? ":" + std::string(pp) : "");
  std::vector<std::string> argv = {env.python.string()};
  argv.insert(argv.end(), args.begin(), args.end());
  return run_subprocess(argv, o);
}

bool fill_row(const nlohmann::json& row, Task* t, std::string* err) {
  if (!row.is_object()) {
    *err = "row is not a JSON object";
    return false;
  }
  if (!row.contains("code") || !row["code"].is_string()) {
    *err = "row has no string column 'code'";
    return false;
  }
  t->code = row["code"].get<std::string>();
  for (const char* k : {"ops", "data_source"}) {
    if (row.contains(k)) t->meta[k] = row[k];
  }
  return true;
}

}  // namespace

std::optional<Task> load_task(const Environment& env, const std::string& spec, std::string* err) {
  Task t;
  t.spec = spec;
  std::string path = spec;
  size_t hash = spec.rfind('#');
  if (hash != std::string::npos) {
    path = spec.substr(0, hash);
    std::string row = spec.substr(hash + 1);
    if (row.empty() || row.find_first_not_of("0123456789") != std::string::npos) {
      *err = "task " + spec + ": row '" + row + "' is not a non-negative integer (name a dataset row as DATASET#ROW)";
      return std::nullopt;
    }
    t.row = std::stol(row);
  }
  t.file = path;
  std::error_code ec;
  if (!fs::exists(t.file, ec)) {
    *err = "task file " + path + " does not exist";
    return std::nullopt;
  }
  if (t.row < 0) {
    if (ends_with(path, ".jsonl") || ends_with(path, ".parquet")) {
      *err = "task " + spec + " is a dataset: name one row as " + path + "#ROW";
      return std::nullopt;
    }
    auto code = read_file(t.file);
    if (!code) {
      *err = "cannot read task file " + path;
      return std::nullopt;
    }
    t.code = *code;
    t.name = t.file.stem().string();
  } else if (ends_with(path, ".jsonl")) {
    auto text = read_file(t.file);
    if (!text) {
      *err = "cannot read dataset " + path;
      return std::nullopt;
    }
    long index = 0, lineno = 0;
    bool found = false;
    for (const auto& line : split_lines(*text)) {
      ++lineno;
      if (trim(line).empty()) continue;
      if (index++ != t.row) continue;
      found = true;
      std::string e;
      try {
        if (!fill_row(nlohmann::json::parse(line), &t, &e)) {
          *err = path + " line " + std::to_string(lineno) + ": " + e;
          return std::nullopt;
        }
      } catch (const std::exception& ex) {
        *err = path + " line " + std::to_string(lineno) + ": malformed JSON: " + ex.what();
        return std::nullopt;
      }
      break;
    }
    if (!found) {
      *err = "dataset " + path + " has " + std::to_string(index) + " rows; row " + std::to_string(t.row) +
             " does not exist";
      return std::nullopt;
    }
    t.name = t.file.filename().string() + "#" + std::to_string(t.row);
  } else if (ends_with(path, ".parquet")) {
    SubprocessResult r = run_python(env, {"-m", "anvil.dataset", path, std::to_string(t.row)});
    if (!r.ok()) {
      *err = "reading " + path + " failed (" + r.describe() + "): " + tail_lines(r.err_output, 3);
      return std::nullopt;
    }
    try {
      auto j = nlohmann::json::parse(r.output);
      if (!j.value("ok", false)) {
        *err = path + ": " + j.value("error", std::string("unknown error"));
        return std::nullopt;
      }
      std::string e;
      if (!fill_row(j, &t, &e)) {
        *err = path + " row " + std::to_string(t.row) + ": " + e;
        return std::nullopt;
      }
    } catch (const std::exception& ex) {
      *err = "reading " + path + ": bad answer from anvil.dataset: " + ex.what();
      return std::nullopt;
    }
    t.name = t.file.filename().string() + "#" + std::to_string(t.row);
  } else {
    *err = "dataset " + path + " must be .jsonl or .parquet";
    return std::nullopt;
  }
  t.hash = sha256_hex(t.code);
  return t;
}

nlohmann::json probe_task(const Environment& env, const Task& task, bool run_forward) {
  if (env.python.empty()) throw std::runtime_error("python3 not found (set ANVIL_PYTHON)");
  fs::path file = task.file;
  fs::path tmpdir;
  if (task.row >= 0) {
    tmpdir = make_temp_dir(env.cache / "tmp", "task");
    file = tmpdir / "model.py";
    std::string e;
    write_file_atomic(file, task.code, &e);
  }
  std::vector<std::string> args = {"-m", "anvil.task_probe", file.string()};
  if (!run_forward) args.push_back("--no-forward");
  SubprocessResult r = run_python(env, args);
  if (!tmpdir.empty()) remove_tree(tmpdir);
  if (!r.started) throw std::runtime_error("cannot run " + env.python.string() + ": " + r.error);
  try {
    auto j = nlohmann::json::parse(r.output);
    if (task.row >= 0) j["file"] = task.spec;
    return j;
  } catch (const std::exception&) {
    return {{"ok", false},
            {"outcome", "task_error"},
            {"file", task.spec},
            {"cause", "probing the task failed (" + r.describe() + ")"},
            {"detail", tail_lines(r.err_output + r.output, 15)}};
  }
}

}  // namespace anvil
