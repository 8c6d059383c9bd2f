// suite.cpp: discovering a suite's tasks and matching its solutions.
#include "anvil/bench/suite.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <map>
#include <regex>
#include <set>

#include "anvil/env/task.h"

namespace anvil {
namespace fs = std::filesystem;

namespace {

bool skipped_name(const std::string& n) { return n.empty() || n[0] == '.' || n == "__pycache__"; }

// Entries of a folder in natural order.
std::vector<fs::directory_entry> sorted_entries(const fs::path& dir) {
  std::vector<fs::directory_entry> out;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) out.push_back(*it);
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) {
    return natural_less(a.path().filename().string(), b.path().filename().string());
  });
  return out;
}

// "" when the file can be read; else why not.
std::string unreadable_reason(const fs::path& p) {
  std::error_code ec;
  if (fs::is_symlink(fs::symlink_status(p, ec)) && !fs::exists(p, ec)) {
    return "a broken symbolic link (to " + fs::read_symlink(p, ec).string() + ")";
  }
  if (!fs::is_regular_file(p, ec)) return "not a regular file";
  std::ifstream f(p, std::ios::binary);
  if (!f) return std::string("cannot be opened: ") + std::strerror(errno);
  char c;
  f.read(&c, 1);
  if (f.bad()) return std::string("cannot be read: ") + std::strerror(errno);
  if (fs::file_size(p, ec) == 0) return "empty";
  return "";
}

// "<id>_<Name>" or "<id>": the id and name; nullopt otherwise.
std::optional<std::pair<long, std::string>> parse_id(const std::string& stem) {
  static const std::regex re(R"(^(\d{1,9})(?:_(.+))?$)");
  std::smatch m;
  if (!std::regex_match(stem, m, re)) return std::nullopt;
  return std::make_pair(std::stol(m[1].str()), m[2].matched ? m[2].str() : std::string());
}

void scan_level(Suite& s, const fs::path& dir, const std::string& level) {
  std::map<long, std::string> seen;
  for (const auto& e : sorted_entries(dir)) {
    std::string fname = e.path().filename().string();
    std::error_code ec;
    if (skipped_name(fname) || fname.size() < 4 || fname.substr(fname.size() - 3) != ".py") continue;
    if (fs::is_directory(e.path(), ec)) continue;
    std::string stem = fname.substr(0, fname.size() - 3);
    auto id = parse_id(stem);
    if (!id) {
      s.unreadable.push_back({e.path().string(), "the name is not <id>_<Name>.py"});
      continue;
    }
    if (std::string why = unreadable_reason(e.path()); !why.empty()) {
      s.unreadable.push_back({e.path().string(), why});
      continue;
    }
    if (auto it = seen.find(id->first); it != seen.end()) {
      s.unreadable.push_back({e.path().string(), "id " + std::to_string(id->first) + " repeats " + it->second});
      continue;
    }
    seen[id->first] = fname;
    SuiteTask t;
    t.level = level;
    t.id = id->first;
    t.name = id->second.empty() ? stem : id->second;
    t.stem = stem;
    t.spec = e.path().string();
    s.tasks.push_back(std::move(t));
  }
}

}  // namespace

std::vector<std::string> Suite::levels() const {
  std::vector<std::string> out;
  for (const auto& t : tasks) {
    if (std::find(out.begin(), out.end(), t.level) == out.end()) out.push_back(t.level);
  }
  return out;
}

std::optional<Suite> discover_suite(const Environment& env, const std::string& target, std::string* err) {
  Suite s;
  s.target = target;
  std::error_code ec;
  fs::path p(target);
  if (is_dataset_path(target)) {
    auto n = count_dataset_rows(env, target, err);
    if (!n) return std::nullopt;
    for (long r = 0; r < *n; ++r) {
      SuiteTask t;
      t.level = p.stem().string();
      t.id = r;
      t.name = "row " + std::to_string(r);
      t.stem = std::to_string(r);
      t.spec = target + "#" + std::to_string(r);
      s.tasks.push_back(std::move(t));
    }
  } else if (fs::is_regular_file(p, ec)) {
    fs::path dir = p.parent_path().empty() ? fs::path(".") : p.parent_path();
    Suite one;
    scan_level(one, dir, fs::absolute(dir).lexically_normal().filename().string());
    for (auto& t : one.tasks) {
      if (fs::equivalent(t.spec, p, ec)) s.tasks.push_back(t);
    }
    if (s.tasks.empty()) {
      *err = target + ": not a task file named <id>_<Name>.py";
      return std::nullopt;
    }
  } else if (fs::is_directory(p, ec)) {
    fs::path abs = fs::absolute(p).lexically_normal();
    std::string flat = (abs.filename().empty() ? abs.parent_path() : abs).filename().string();
    scan_level(s, p, flat);  // task files directly in the folder: one level named as the folder
    for (const auto& e : sorted_entries(p)) {
      std::string n = e.path().filename().string();
      if (skipped_name(n) || !fs::is_directory(e.path(), ec)) continue;
      scan_level(s, e.path(), n);
    }
    if (s.tasks.empty() && s.unreadable.empty()) {
      *err = target + ": no task files (<id>_<Name>.py) in it or in its level folders";
      return std::nullopt;
    }
  } else {
    *err = target + ": no such file or folder";
    return std::nullopt;
  }
  std::stable_sort(s.tasks.begin(), s.tasks.end(), [](const SuiteTask& a, const SuiteTask& b) {
    if (a.level != b.level) return natural_less(a.level, b.level);
    return a.id < b.id;
  });
  return s;
}

namespace {

struct Entry {
  fs::path path;
  int rank;  // 0 the task's own stem, 1 "<id>", 2 another "<id>_<Name>", 3 a generation sample
  long sample = 0;
};

// The workdir or file an entry stands for; "" with *why when it has none.
std::string resolve(const fs::path& p, const std::string& variant, std::string* why) {
  std::error_code ec;
  if (!fs::is_directory(p, ec)) {
    if (std::string r = unreadable_reason(p); !r.empty()) {
      *why = p.string() + ": " + r;
      return "";
    }
    return p.string();
  }
  if (fs::is_regular_file(p / "model_new.py", ec)) return p.string();
  if (!variant.empty() && fs::is_regular_file(p / variant / "model_new.py", ec)) return (p / variant).string();
  std::string has;
  for (const auto& e : sorted_entries(p)) {
    if (fs::is_regular_file(e.path() / "model_new.py", ec)) has += (has.empty() ? "" : ", ") + e.path().filename().string() + "/";
  }
  *why = p.string() + ": no model_new.py" + (variant.empty() ? "" : ", and no " + variant + "/ workdir in it") +
         (has.empty() ? "" : " (it has " + has + ")");
  return "";
}

}  // namespace

bool match_solutions(Suite& s, const fs::path& sol, const std::string& variant, std::string* err) {
  std::error_code ec;
  if (!fs::is_directory(sol, ec)) {
    *err = sol.string() + ": not a folder";
    return false;
  }
  // Which folder holds each level's entries: SOL/<level>, or SOL itself for a
  // suite with one level whose tasks were not in a level folder.
  std::vector<std::string> levels = s.levels();
  std::set<std::string> level_dirs;
  std::map<std::string, std::map<long, std::vector<Entry>>> found;  // level -> id -> entries
  std::map<std::string, std::map<long, std::string>> stems;          // level -> id -> task stem
  for (const auto& t : s.tasks) stems[t.level][t.id] = t.stem;
  bool flat = levels.size() == 1 && !fs::is_directory(sol / levels[0], ec);

  auto scan = [&](const fs::path& dir, const std::string& level, bool root) {
    static const std::regex gen(R"(^level_(\d+)_problem_(\d+)_sample_(\d+)_kernel\.py$)");
    for (const auto& e : sorted_entries(dir)) {
      std::string n = e.path().filename().string();
      if (skipped_name(n)) continue;
      bool is_dir = fs::is_directory(e.path(), ec);
      bool is_py = !is_dir && n.size() > 3 && n.substr(n.size() - 3) == ".py";
      if (!is_dir && !is_py) continue;  // notes, logs, build outputs
      std::smatch m;
      if (root && is_py && std::regex_match(n, m, gen)) {
        std::string lv = "level" + m[1].str();
        long id = std::stol(m[2].str());
        if (stems.count(lv) && stems[lv].count(id)) {
          found[lv][id].push_back({e.path(), 3, std::stol(m[3].str())});
        } else {
          s.extra.push_back({e.path().string(), "no task " + lv + " problem " + m[2].str()});
        }
        continue;
      }
      if (root && !flat && is_dir && std::find(levels.begin(), levels.end(), n) != levels.end()) continue;
      if (level.empty()) {
        s.extra.push_back({e.path().string(), is_dir ? "not a level folder of the tasks" : "not a solution of a level"});
        continue;
      }
      std::string stem = is_py ? n.substr(0, n.size() - 3) : n;
      auto id = parse_id(stem);
      if (!id) {
        s.extra.push_back({e.path().string(), "the name is not <id>_<Name>" + std::string(is_py ? ".py" : "/")});
        continue;
      }
      auto it = stems[level].find(id->first);
      if (it == stems[level].end()) {
        s.extra.push_back({e.path().string(), "no task " + level + " with id " + std::to_string(id->first)});
        continue;
      }
      int rank = stem == it->second ? 0 : id->second.empty() ? 1 : 2;
      found[level][id->first].push_back({e.path(), rank});
    }
  };
  if (flat) {
    scan(sol, levels[0], true);
  } else {
    scan(sol, "", true);
    for (const auto& lv : levels) {
      if (fs::is_directory(sol / lv, ec)) scan(sol / lv, lv, false);
    }
  }
  for (auto& t : s.tasks) {
    t.solution.clear();
    t.missing_reason.clear();
    auto& entries = found[t.level][t.id];
    std::stable_sort(entries.begin(), entries.end(), [&](const Entry& a, const Entry& b) {
      if (a.rank != b.rank) return a.rank < b.rank;
      if (a.sample != b.sample) return a.sample < b.sample;
      bool ad = fs::is_directory(a.path, ec), bd = fs::is_directory(b.path, ec);
      return ad && !bd;  // a workdir before a single file of the same name
    });
    std::string first_why;
    for (const auto& e : entries) {
      if (!t.solution.empty()) {
        s.extra.push_back({e.path.string(), "a second solution of " + t.key() + " (" + t.solution + " is used)"});
        continue;
      }
      std::string why;
      std::string r = resolve(e.path, variant, &why);
      if (!r.empty()) {
        t.solution = r;
      } else {
        if (first_why.empty()) first_why = why;
        s.extra.push_back({e.path.string(), why});
      }
    }
    if (t.solution.empty()) {
      t.missing_reason = first_why.empty() ? "no solution for " + t.key() + " in " + sol.string() : first_why;
    }
  }
  return true;
}

}  // namespace anvil
