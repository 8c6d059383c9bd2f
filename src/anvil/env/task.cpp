#include "anvil/env/task.h"

#include <algorithm>
#include <regex>
#include <stdexcept>
#include <string_view>

#include "anvil/env/cache_layout.h"
#include "anvil/env/outcome.h"
#include "anvil/util/fs.h"
#include "anvil/util/hash.h"
#include "anvil/util/strings.h"
#include "anvil/util/subprocess.h"

namespace anvil {

SubprocessResult run_python(const Environment& env, const std::vector<std::string>& args) {
  SubprocessOptions o;
  o.timeout = std::chrono::minutes(5);
  o.merge_stderr = false;
  o.env["PYTHONPATH"] = env.python_path();
  std::vector<std::string> argv = {env.python.string()};
  argv.insert(argv.end(), args.begin(), args.end());
  return run_subprocess(argv, o);
}

namespace {

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

std::string task_name_of(const std::string& spec) {
  size_t hash = spec.rfind('#');
  if (hash == std::string::npos) return fs::path(spec).stem().string();
  return fs::path(spec.substr(0, hash)).filename().string() + spec.substr(hash);
}

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
    if (is_dataset_path(path)) {
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
      } catch (const nlohmann::json::parse_error& ex) {
        // "[json.exception.parse_error.101] parse error at line 1, column 57: why": the line is the
        // JSONL's, the column the row's
        static const std::regex where(R"(column ([0-9]+): (.*))");
        std::string what = ex.what();
        std::smatch m;
        bool found = std::regex_search(what, m, where);
        *err = path + " line " + std::to_string(lineno) + (found ? ", column " + m[1].str() : "") +
               ": malformed JSON: " + (found ? m[2].str() : what);
        return std::nullopt;
      } catch (const std::exception& ex) {
        *err = path + " line " + std::to_string(lineno) + ": malformed JSON: " + ex.what();
        return std::nullopt;
      }
      break;
    }
    if (!found) {
      *err = "dataset " + path + " has " + std::to_string(index) + (index == 1 ? " row" : " rows") + "; row " +
             std::to_string(t.row) +
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

bool is_dataset_path(const std::string& path) { return ends_with(path, ".jsonl") || ends_with(path, ".parquet"); }

std::optional<long> count_dataset_rows(const Environment& env, const std::string& path, std::string* err) {
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) {
    *err = "dataset " + path + " does not exist";
    return std::nullopt;
  }
  if (ends_with(path, ".jsonl")) {
    auto text = read_file(path);
    if (!text) {
      *err = "cannot read dataset " + path;
      return std::nullopt;
    }
    long rows = 0;
    for (const auto& line : split_lines(*text)) rows += trim(line).empty() ? 0 : 1;
    return rows;
  }
  if (!ends_with(path, ".parquet")) {
    *err = "dataset " + path + " must be .jsonl or .parquet";
    return std::nullopt;
  }
  SubprocessResult r = run_python(env, {"-m", "anvil.dataset", path, "--count"});
  auto j = nlohmann::json::parse(r.output, nullptr, false);
  if (!j.is_object()) {
    *err = "counting the rows of " + path + " failed (" + r.describe() + "): " + tail_lines(r.err_output, 3);
    return std::nullopt;
  }
  if (!j.value("ok", false) || !j.contains("count") || !j["count"].is_number_integer()) {
    *err = path + ": " + j.value("error", std::string("anvil.dataset gave no row count"));
    return std::nullopt;
  }
  return j["count"].get<long>();
}

bool natural_less(const std::string& a, const std::string& b) {
  size_t i = 0, j = 0;
  auto digit = [](char c) { return c >= '0' && c <= '9'; };
  while (i < a.size() && j < b.size()) {
    if (digit(a[i]) && digit(b[j])) {
      size_t ie = i, je = j;
      while (ie < a.size() && digit(a[ie])) ++ie;
      while (je < b.size() && digit(b[je])) ++je;
      std::string_view na(a.data() + i, ie - i), nb(b.data() + j, je - j);
      while (na.size() > 1 && na[0] == '0') na.remove_prefix(1);
      while (nb.size() > 1 && nb[0] == '0') nb.remove_prefix(1);
      if (na.size() != nb.size()) return na.size() < nb.size();
      if (na != nb) return na < nb;
      i = ie;
      j = je;
      continue;
    }
    if (a[i] != b[j]) return a[i] < b[j];
    ++i;
    ++j;
  }
  if ((a.size() - i) != (b.size() - j)) return a.size() - i < b.size() - j;
  return a < b;  // equal up to leading zeros: any fixed order
}

std::optional<std::vector<std::string>> list_tasks(const Environment& env, const std::string& target,
                                                   std::string* err) {
  std::error_code ec;
  if (fs::is_directory(target, ec)) {
    std::vector<std::string> rels;
    for (const fs::path& rel : list_files(target)) {
      if (rel.extension() != ".py") continue;
      bool skip = false;
      for (const auto& part : rel.parent_path()) {
        std::string p = part.string();
        skip = skip || p == "__pycache__" || (!p.empty() && p[0] == '.');
      }
      if (!skip) rels.push_back(rel.string());
    }
    if (rels.empty()) {
      *err = "no task files (*.py) under " + target;
      return std::nullopt;
    }
    std::sort(rels.begin(), rels.end(), natural_less);
    std::vector<std::string> specs;
    for (const auto& rel : rels) specs.push_back((fs::path(target) / rel).string());
    return specs;
  }
  if (!is_dataset_path(target)) return std::vector<std::string>{target};  // FILE or DATASET#ROW
  auto rows = count_dataset_rows(env, target, err);
  if (!rows) return std::nullopt;
  if (*rows == 0) {
    *err = "dataset " + target + " has no rows";
    return std::nullopt;
  }
  std::vector<std::string> specs;
  for (long i = 0; i < *rows; ++i) specs.push_back(target + "#" + std::to_string(i));
  return specs;
}

nlohmann::json probe_task(const Environment& env, const Task& task, bool run_forward) {
  if (env.python.empty()) throw std::runtime_error("python3 not found (set ANVIL_PYTHON)");
  fs::path file = task.file;
  TempDir tmpdir;
  if (task.row >= 0) {
    tmpdir = TempDir(cache_dir(env, CacheArea::kTmp), "task");
    file = tmpdir.path() / "model.py";
    std::string e;
    write_file_atomic(file, task.code, &e);
  }
  std::vector<std::string> args = {"-m", "anvil.task_probe", file.string()};
  if (!run_forward) args.push_back("--no-forward");
  SubprocessResult r = run_python(env, args);
  if (!r.started) throw std::runtime_error("cannot run " + env.python.string() + ": " + r.error);
  try {
    auto j = nlohmann::json::parse(r.output);
    if (task.row >= 0) j["file"] = task.spec;
    return j;
  } catch (const std::exception&) {
    return {{"ok", false},
            {"outcome", outcome_name(Outcome::kTaskError)},
            {"file", task.spec},
            {"cause", "probing the task failed (" + r.describe() + ")"},
            {"detail", tail_lines(r.err_output + r.output, 15)}};
  }
}

}  // namespace anvil
