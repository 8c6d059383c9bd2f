// report.cpp: a benchmark run's reports (docs/bench.md), rendered from its
// results.json alone: a Markdown summary for a paper's appendix or a PR, and
// one self-contained HTML page with inline SVG plots.
//
// The tables are built once as rows of text cells (Table) and written out as
// Markdown or as HTML. The plots are plain SVG, written element by element
// into strings by small functions. The page has no scripts and loads nothing:
// hover text comes from SVG <title> elements, styles from one <style> block,
// fonts from the reader's system. Every value is read defensively (a missing
// key reads as null and prints as n/a), so a partial or empty run still
// renders.
#include "anvil/bench/report.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "anvil/bench/metrics.h"
#include "anvil/util/json_text.h"
#include "anvil/util/strings.h"

namespace anvil {
namespace {

using Json = nlohmann::json;

// ---------------------------------------------------------------------------
// Values

// j[key], or null when j is not an object or has no such key.
const Json& at(const Json& j, const char* key) {
  static const Json null_json;
  if (!j.is_object()) return null_json;
  auto it = j.find(key);
  return it == j.end() ? null_json : *it;
}

const Json& items_of(const Json& j) {
  static const Json empty = Json::array();
  return j.is_array() ? j : empty;
}

std::optional<double> number(const Json& v) {
  if (!v.is_number()) return std::nullopt;
  double d = v.get<double>();
  if (!std::isfinite(d)) return std::nullopt;
  return d;
}

// A speedup that can go on a log axis.
std::optional<double> speedup(const Json& v) {
  auto d = number(v);
  if (!d || *d <= 0) return std::nullopt;
  return d;
}

std::string format(const char* fmt, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, fmt, v);
  return buf;
}

std::string text(const Json& v) {
  if (v.is_null()) return "n/a";
  if (v.is_string()) return v.get<std::string>();
  if (v.is_number_float()) return format("%g", v.get<double>());
  return json_text(v);  // integers, booleans, anything else as JSON
}

long count(const Json& v) { return v.is_number() ? static_cast<long>(v.get<double>()) : 0; }

std::string pct(const Json& v) {
  auto d = number(v);
  return d ? format("%.1f%%", *d * 100) : "n/a";
}

std::string times(const Json& v) {
  auto d = number(v);
  return d ? format("%.2fx", *d) : "n/a";
}

std::string millis(const Json& v) {
  auto d = number(v);
  if (!d) return "n/a";
  if (*d >= 100) return format("%.1f", *d);
  if (*d >= 1) return format("%.3f", *d);
  if (*d >= 0.001 || *d == 0) return format("%.4f", *d);
  return format("%.2g", *d);  // a few microseconds
}

std::string fixed2(const Json& v) {
  auto d = number(v);
  return d ? format("%.2f", *d) : "n/a";
}

// A token count; null is a count the model server did not report (never 0).
std::string tokens(const Json& v) {
  if (v.is_number_integer() || v.is_number_unsigned()) return json_text(v);
  auto d = number(v);
  return d ? format("%.0f", *d) : "not reported";
}

// US dollars: cents for whole dollars, more digits below them (a task of a few
// thousand tokens costs a fraction of a cent).
std::string usd(const Json& v) {
  auto d = number(v);
  if (!d) return "n/a";
  if (*d == 0 || *d >= 1) return format("%.2f", *d);
  return format(*d >= 0.01 ? "%.4f" : "%.6f", *d);
}

// 1, 2, 4x on one side, 1/2x, 1/4x on the other: a tick of a log2 axis.
std::string ratio_label(int log2_value) {
  if (log2_value >= 0) return std::to_string(1L << log2_value) + "x";
  return "1/" + std::to_string(1L << -log2_value) + "x";
}

// At most `max` bytes of s, not ending inside a UTF-8 sequence.
std::string utf8_prefix(const std::string& s, size_t max) {
  if (s.size() <= max) return s;
  size_t cut = max;
  while (cut > 0 && (static_cast<unsigned char>(s[cut]) & 0xC0) == 0x80) --cut;
  return s.substr(0, cut);
}

// Whitespace runs become one space; cut to `max` bytes on a UTF-8 boundary.
std::string short_message(const Json& v, size_t max = 80) {
  if (!v.is_string()) return v.is_null() ? "" : text(v);
  std::string s;
  bool space = false;
  for (char c : v.get<std::string>()) {
    bool ws = c == ' ' || c == '\n' || c == '\r' || c == '\t';
    if (ws) {
      space = !s.empty();
      continue;
    }
    if (space) s += ' ';
    space = false;
    s += c;
  }
  return s.size() <= max ? s : utf8_prefix(s, max - 3) + "...";
}

std::string duration(const Json& v) {
  auto d = number(v);
  if (!d) return "n/a";
  std::string s = format("%.1f s", *d);
  if (*d >= 120) {
    long m = std::lround(*d / 60);
    std::string human = std::to_string(m) + " min";
    if (m >= 60) human = std::to_string(m / 60) + " h " + std::to_string(m % 60) + " min";
    s += " (" + human + ")";
  }
  return s;
}

// "19_ReLU": the task's file stem, or id_name.
std::string stem_of(const Json& row) {
  if (at(row, "stem").is_string()) return at(row, "stem").get<std::string>();
  return text(at(row, "id")) + "_" + text(at(row, "name"));
}

std::string level_of(const Json& row) { return at(row, "level").is_string() ? text(at(row, "level")) : "?"; }

bool is_correct(const Json& row) { return at(row, "correct") == true; }

// ---------------------------------------------------------------------------
// What both reports show: a title, the setup, tables, rules, run facts,
// problems. Each is built once here and written out by either renderer.

struct Item {
  std::string label, value;
};

struct Table {
  std::vector<std::string> head;
  std::vector<bool> numeric;  // right-aligned columns
  std::vector<std::vector<std::string>> rows;
  std::vector<std::string> row_class;  // per row, for the HTML ("overall")
};

std::string gpu_text(const Json& fp) {
  const Json& gpu = at(fp, "gpu");
  if (gpu.is_object()) return text(at(gpu, "name")) + " x " + text(at(gpu, "count"));
  std::string s = "none (CPU run)";
  if (at(fp, "cpu").is_string()) s += ": " + text(at(fp, "cpu"));
  return s;
}

std::string title_of(const Json& r) {
  const Json& tasks = at(at(r, "run"), "tasks");
  return "anvil bench" + (tasks.is_string() ? ": " + tasks.get<std::string>() : std::string());
}

// "solutions sol/ on NVIDIA H100 x 1, 2026-11-22"
std::string subtitle_of(const Json& r) {
  const Json& run = at(r, "run");
  const Json& fp = at(r, "fingerprint");
  std::string s;
  const Json& agent = at(run, "agent");
  if (agent.is_object()) {
    s = "agent " + text(at(agent, "model")) + " at " + text(at(agent, "endpoint"));
  } else if (at(run, "solutions").is_string()) {
    s = "solutions " + text(at(run, "solutions"));
  } else {
    s = "no solutions";
  }
  s += ", on " + (at(fp, "gpu").is_object() ? gpu_text(fp) : std::string("the CPU"));
  if (at(fp, "date").is_string()) s += ", " + text(at(fp, "date"));
  return s;
}

std::vector<Item> fingerprint_items(const Json& r) {
  const Json& fp = at(r, "fingerprint");
  const Json& tf32 = at(fp, "tf32");
  auto on_off = [](const Json& v) { return v.is_boolean() ? std::string(v.get<bool>() ? "on" : "off") : text(v); };
  const Json& anvil = at(fp, "anvil");
  std::string anvil_text = text(at(anvil, "version"));
  if (at(anvil, "rev").is_string()) anvil_text += " (" + text(at(anvil, "rev")) + ")";
  std::vector<Item> items = {
      {"GPU", gpu_text(fp)},
      {"driver", text(at(fp, "driver"))},
      {"CUDA", text(at(fp, "cuda"))},
  };
  if (fp.contains("nvcc")) items.push_back({"nvcc", text(at(fp, "nvcc"))});
  std::vector<Item> rest = {
      {"torch", text(at(fp, "torch"))},
      {"triton", text(at(fp, "triton"))},
      {"Python", text(at(fp, "python"))},
      {"device", text(at(fp, "device"))},
      {"compile mode", text(at(fp, "compile_mode"))},
      {"TF32", "matmul " + on_off(at(tf32, "matmul")) + ", cuDNN " + on_off(at(tf32, "cudnn"))},
      {"protocol", fp.contains("protocol") ? text(at(fp, "protocol")) : "cuda-agent"},
      {"tolerance preset", text(at(fp, "preset"))},
      {"timing", text(at(fp, "timing"))},
  };
  items.insert(items.end(), rest.begin(), rest.end());
  if (fp.contains("defenses")) items.push_back({"defenses", on_off(at(fp, "defenses"))});
  items.push_back({"anvil", anvil_text});
  items.push_back({"host", text(at(fp, "host"))});
  items.push_back({"date", text(at(fp, "date"))});
  return items;
}

// An agent run's usage (docs/bench.md, "Tokens and cost"): in `overall` only when the run had an agent.
bool has_usage(const Json& r) { return at(at(r, "overall"), "usage").is_object(); }

bool priced(const Json& r) { return at(at(r, "run"), "pricing").is_object(); }

std::string prices_text(const Json& r) {
  const Json& p = at(at(r, "run"), "pricing");
  if (!p.is_object()) return "none given (--price-input, --price-output): no cost";
  return "USD " + text(at(p, "input_usd_per_mtok")) + " per million prompt tokens, USD " +
         text(at(p, "output_usd_per_mtok")) + " per million completion tokens";
}

std::vector<Item> run_items(const Json& r) {
  const Json& run = at(r, "run");
  std::vector<Item> items = {
      {"tasks", text(at(run, "tasks"))},
  };
  const Json& agent = at(run, "agent");
  if (agent.is_object()) {
    items.push_back({"agent", text(at(agent, "model")) + " at " + text(at(agent, "endpoint"))});
  } else {
    items.push_back({"solutions", text(at(run, "solutions"))});
  }
  if (agent.is_object()) items.push_back({"prices", prices_text(r)});
  std::vector<Item> rest = {
      {"variant", text(at(run, "variant"))},
      {"output", text(at(run, "out"))},
      {"started", text(at(run, "started"))},
      {"finished", text(at(run, "finished"))},
      {"seconds (this invocation)", duration(at(run, "seconds"))},
      {"tasks evaluated (this invocation)", text(at(run, "evaluated"))},
      {"resumed (records from earlier invocations)", text(at(run, "resumed"))},
      {"tasks per minute", fixed2(at(run, "tasks_per_minute"))},
  };
  items.insert(items.end(), rest.begin(), rest.end());
  const Json& pre = at(run, "prebuild");
  if (pre.is_object()) {
    items.push_back({"builds before timing", text(at(pre, "candidates")) + " candidates in " +
                                                 duration(at(pre, "seconds")) + " (" + text(at(pre, "compiled")) +
                                                 " compiled, " + text(at(pre, "failed")) + " failed, " +
                                                 text(at(pre, "workers")) + " at a time)"});
  }
  const Json& gpus = at(run, "gpus");
  if (gpus.is_array()) {
    std::string g;
    for (const auto& x : gpus) g += (g.empty() ? "" : ", ") + text(x);
    items.push_back({"GPUs used (CUDA device indices)", g});
  }
  return items;
}

std::vector<Item> rule_items(const Json& r) {
  std::vector<Item> items;
  const Json& rules = at(r, "rules");
  // Why compile metrics are n/a, only where they are (a CPU run may measure torch.compile too).
  const Json& measured = at(at(at(r, "overall"), "measured"), "compile");
  bool compile_measured = measured.is_number() && measured.get<double>() > 0;
  if (rules.is_object()) {
    for (auto it = rules.begin(); it != rules.end(); ++it) {
      if (it.key() == "compile" && compile_measured) continue;
      items.push_back({it.key(), text(it.value())});
    }
  }
  return items;
}

const char* const kFamilyNote =
    "The same metrics per kernel family, the family found from the operations each task's code names "
    "(python -m anvil.family; docs/bench.md, \"Kernel families\"); rates are shares of the family's tasks.";

// The groups a metrics table has a row for: the levels, or the kernel families.
enum class Grouping { kLevel, kFamily };

// (name, metrics) for every group, then ("overall", metrics).
std::vector<std::pair<std::string, const Json*>> metric_rows(const Json& r, Grouping g = Grouping::kLevel) {
  const char* list = g == Grouping::kLevel ? "levels" : "families";
  const char* key = g == Grouping::kLevel ? "level" : "family";
  std::vector<std::pair<std::string, const Json*>> rows;
  for (const auto& l : items_of(at(r, list))) rows.push_back({text(at(l, key)), &at(l, "metrics")});
  rows.push_back({"overall", &at(r, "overall")});
  return rows;
}

Table metrics_table(const Json& r, Grouping g = Grouping::kLevel) {
  Table t;
  t.head = {g == Grouping::kLevel ? "level" : "family",
            "tasks",
            "pass %",
            ">eager %",
            ">compile %",
            "fast_1 (eager)",
            "fast_1 (compile)",
            "fast_1.5 / fast_2 (compile)",
            "geomean vs eager (correct / all)",
            "geomean vs compile (correct / all)",
            "median vs eager",
            "median vs compile",
            "mean reward"};
  t.numeric.assign(t.head.size(), true);
  t.numeric[0] = false;
  for (const auto& [name, m] : metric_rows(r, g)) {
    const Json& fast = at(*m, "fast_p");
    const Json& geo = at(*m, "geomean");
    const Json& med = at(*m, "median");
    t.rows.push_back({name, text(at(*m, "tasks")), pct(at(*m, "pass_rate")), pct(at(*m, "faster_than_eager_rate")),
                      pct(at(*m, "faster_than_compile_rate")), pct(at(at(fast, "eager"), "1")),
                      pct(at(at(fast, "compile"), "1")),
                      pct(at(at(fast, "compile"), "1.5")) + " / " + pct(at(at(fast, "compile"), "2")),
                      times(at(at(geo, "eager"), "correct")) + " / " + times(at(at(geo, "eager"), "all")),
                      times(at(at(geo, "compile"), "correct")) + " / " + times(at(at(geo, "compile"), "all")),
                      times(at(med, "eager")), times(at(med, "compile")), fixed2(at(*m, "mean_reward"))});
    t.row_class.push_back(name == "overall" ? "overall" : "");
  }
  return t;
}

// The agent's tokens (and their cost, with prices) per level and overall.
Table usage_table(const Json& r) {
  Table t;
  t.head = {"level", "episodes", "turns", "turns reported", "prompt tokens", "completion tokens"};
  if (priced(r)) t.head.push_back("cost (USD)");
  t.numeric.assign(t.head.size(), true);
  t.numeric[0] = false;
  for (const auto& [name, m] : metric_rows(r)) {
    const Json& u = at(*m, "usage");
    std::vector<std::string> row = {name,
                                    text(at(u, "episodes")),
                                    text(at(u, "turns")),
                                    text(at(u, "reported_turns")),
                                    tokens(at(u, "prompt_tokens")),
                                    tokens(at(u, "completion_tokens"))};
    if (priced(r)) row.push_back(at(u, "cost_usd").is_null() ? "not reported" : usd(at(u, "cost_usd")));
    t.rows.push_back(row);
    t.row_class.push_back(name == "overall" ? "overall" : "");
  }
  return t;
}

// What the usage table's reader needs to know: where the counts come from, the prices, and
// whether the sums are whole.
std::string usage_note(const Json& r) {
  const Json& u = at(at(r, "overall"), "usage");
  std::string s = "The agent's tokens as the model server counted them (the usage of each answer), summed over "
                  "each episode's turns; not reported: the server sent no usage. Prices: " + prices_text(r) + ".";
  long turns = count(at(u, "turns")), reported = count(at(u, "reported_turns"));
  if (reported < turns && reported > 0) {
    s += " The server reported " + std::to_string(reported) + " of " + std::to_string(turns) +
         " turns: the sums are a lower bound.";
  }
  return s;
}

// Outcome categories in plotting order: ok split by its reward, then every
// failing outcome, each with a fixed colour (Okabe-Ito, greens for ok).
struct Category {
  std::string key, label, color;
  std::string reward;  // the ok split: counted from `rewards`; "": from `outcomes`
};

const std::vector<Category>& categories() {
  static const std::vector<Category> c = {
      {"faster_than_both", "faster than both (reward 3)", "#007a56", "3"},
      {"faster_than_eager", "faster than eager (reward 2)", "#3fb68b", "2"},
      {"correct", "correct, not faster (reward 1)", "#a8dcc6", "1"},
      {"wrong_answer", "wrong_answer", "#d55e00", ""},
      {"compile_error", "compile_error", "#e69f00", ""},
      {"load_error", "load_error", "#f0e442", ""},
      {"runtime_error", "runtime_error", "#cc79a7", ""},
      {"timeout", "timeout", "#0072b2", ""},
      {"hack_suspected", "hack_suspected", "#332288", ""},
      {"task_error", "task_error", "#56b4e9", ""},
      {"missing", "missing", "#b8b8b8", ""},
      {"not_evaluated", "not_evaluated", "#6e6e6e", ""},
  };
  return c;
}

// The count of each category in one metrics object; an outcome anvil does
// not know yet gets a grey of its own after the known ones.
std::vector<std::pair<Category, long>> segments(const Json& m) {
  const Json& rewards = at(m, "rewards");
  const Json& outcomes = at(m, "outcomes");
  std::vector<std::pair<Category, long>> s;
  for (const auto& c : categories()) {
    s.push_back({c, c.reward.empty() ? count(at(outcomes, c.key.c_str())) : count(at(rewards, c.reward.c_str()))});
  }
  if (outcomes.is_object()) {
    for (auto it = outcomes.begin(); it != outcomes.end(); ++it) {
      bool known = it.key() == "ok" || std::any_of(categories().begin(), categories().end(),
                                                   [&](const Category& c) { return c.key == it.key(); });
      if (!known) s.push_back({{it.key(), it.key(), "#9a9a9a", ""}, count(it.value())});
    }
  }
  return s;
}

Table outcome_table(const Json& r) {
  auto rows = metric_rows(r);
  // Columns: the ok split always, then the failing outcomes that occur
  // anywhere, in the fixed order (outcomes anvil does not know last).
  std::vector<Category> cols(categories().begin(), categories().begin() + 3);
  std::set<std::string> present;
  std::vector<Category> unknown;
  for (const auto& [name, m] : rows) {
    for (const auto& [c, n] : segments(*m)) {
      if (n <= 0 || !present.insert(c.key).second) continue;
      bool known =
          std::any_of(categories().begin(), categories().end(), [&](const Category& k) { return k.key == c.key; });
      if (!known) unknown.push_back(c);
    }
  }
  for (size_t i = 3; i < categories().size(); ++i) {
    if (present.count(categories()[i].key)) cols.push_back(categories()[i]);
  }
  cols.insert(cols.end(), unknown.begin(), unknown.end());
  Table t;
  t.head = {"level", "tasks", "ok"};
  for (const auto& c : cols) t.head.push_back(c.label);
  t.numeric.assign(t.head.size(), true);
  t.numeric[0] = false;
  for (const auto& [name, m] : rows) {
    std::map<std::string, long> n;
    for (const auto& [c, k] : segments(*m)) n[c.key] = k;
    std::vector<std::string> row = {name, text(at(*m, "tasks")), std::to_string(count(at(at(*m, "outcomes"), "ok")))};
    for (const auto& c : cols) row.push_back(std::to_string(n[c.key]));
    t.rows.push_back(row);
    t.row_class.push_back(name == "overall" ? "overall" : "");
  }
  return t;
}

// The task table's usage cells: turns and tokens, and with prices the cost; n/a without an episode.
std::vector<std::string> usage_cells(const Json& row, bool with_cost) {
  const Json& u = at(row, "usage");
  if (!u.is_object()) return std::vector<std::string>(with_cost ? 4 : 3, "n/a");
  std::vector<std::string> c = {text(at(u, "turns")), tokens(at(u, "prompt_tokens")),
                                tokens(at(u, "completion_tokens"))};
  if (with_cost) c.push_back(at(row, "cost_usd").is_null() ? "not reported" : usd(at(row, "cost_usd")));
  return c;
}

// One row per task; the message last (the HTML gives its full text as the cell's title).
Table task_table(const Json& r, std::vector<std::string>* full_messages = nullptr) {
  Table t;
  t.head = {"level",    "id",         "name",    "outcome",   "reward", "candidate ms",
            "eager ms", "compile ms", "x eager", "x compile"};
  t.numeric = {false, true, false, false, true, true, true, true, true, true};
  bool usage = has_usage(r), with_cost = priced(r);
  if (usage) {
    for (const char* h : {"turns", "prompt tokens", "completion tokens"}) t.head.push_back(h);
    if (with_cost) t.head.push_back("cost (USD)");
    t.numeric.resize(t.head.size(), true);
  }
  t.head.push_back("message");
  t.numeric.push_back(false);
  for (const auto& row : items_of(at(r, "tasks"))) {
    std::vector<std::string> cells = {level_of(row),
                                      text(at(row, "id")),
                                      text(at(row, "name")),
                                      text(at(row, "outcome")),
                                      text(at(row, "reward")),
                                      millis(at(row, "candidate_ms")),
                                      millis(at(row, "eager_ms")),
                                      millis(at(row, "compile_ms")),
                                      times(at(row, "speedup_eager")),
                                      times(at(row, "speedup_compile"))};
    if (usage) {
      for (auto& c : usage_cells(row, with_cost)) cells.push_back(std::move(c));
    }
    cells.push_back(short_message(at(row, "message")));
    t.rows.push_back(std::move(cells));
    t.row_class.push_back(is_correct(row) ? "" : "failed");
    if (full_messages) full_messages->push_back(at(row, "message").is_string() ? text(at(row, "message")) : "");
  }
  return t;
}

struct ProblemList {
  std::string title;
  std::vector<Item> items;  // label: what (a task or a path); value: why
};

std::vector<ProblemList> problem_lists(const Json& r) {
  const Json& p = at(r, "problems");
  auto task_label = [](const Json& e) {
    std::string s = text(at(e, "level")) + " / " + stem_of(e);
    if (at(e, "task").is_string()) s += " (" + text(at(e, "task")) + ")";
    return s;
  };
  std::vector<ProblemList> lists;
  ProblemList missing{"missing (no solution; counted as failed)", {}};
  for (const auto& e : items_of(at(p, "missing"))) {
    missing.items.push_back({task_label(e), at(e, "reason").is_string() ? text(at(e, "reason")) : "no solution"});
  }
  ProblemList extra{"extra (solutions that match no task; not evaluated)", {}};
  for (const auto& e : items_of(at(p, "extra"))) extra.items.push_back({text(at(e, "path")), text(at(e, "reason"))});
  ProblemList unreadable{"unreadable (task files that could not be used)", {}};
  for (const auto& e : items_of(at(p, "unreadable"))) {
    unreadable.items.push_back({text(at(e, "path")), text(at(e, "reason"))});
  }
  ProblemList not_eval{"not evaluated (anvil or the environment failed; counted as failed)", {}};
  for (const auto& e : items_of(at(p, "not_evaluated")))
    not_eval.items.push_back({task_label(e), text(at(e, "error"))});
  for (auto* l : {&missing, &extra, &unreadable, &not_eval}) {
    if (!l->items.empty()) lists.push_back(std::move(*l));
  }
  return lists;
}

// ---------------------------------------------------------------------------
// Markdown

// Free text on one line: line breaks become spaces, and '<' is escaped so a
// name like <script> is shown, not taken for HTML by the reader's renderer.
std::string md_line(std::string_view s) {
  std::string o;
  for (char c : s) {
    if (c == '<')
      o += "\\<";
    else if (c == '\n' || c == '\r')
      o += ' ';
    else
      o += c;
  }
  return o;
}

// One table cell: as md_line, with pipes escaped and line breaks kept as <br>.
std::string md_cell(std::string_view s) {
  std::string o;
  for (char c : s) {
    if (c == '|')
      o += "\\|";
    else if (c == '<')
      o += "\\<";
    else if (c == '\n')
      o += "<br>";
    else if (c != '\r')
      o += c;
  }
  return o;
}

// A path or a name as inline code (no escapes apply inside; a backtick in it
// needs a longer fence).
std::string md_code(std::string_view s) {
  std::string one;
  for (char c : s) one += (c == '\n' || c == '\r') ? ' ' : c;
  return one.find('`') == std::string::npos ? "`" + one + "`" : "`` " + one + " ``";
}

std::string md_table(const Table& t) {
  std::string o = "|";
  for (const auto& h : t.head) o += " " + md_cell(h) + " |";
  o += "\n|";
  for (size_t i = 0; i < t.head.size(); ++i) o += i < t.numeric.size() && t.numeric[i] ? "---:|" : "---|";
  o += "\n";
  for (const auto& row : t.rows) {
    o += "|";
    for (const auto& c : row) o += " " + md_cell(c) + " |";
    o += "\n";
  }
  return o;
}

std::string md_items(const std::vector<Item>& items) {
  std::string o;
  for (const auto& i : items) o += "- **" + md_line(i.label) + "**: " + md_line(i.value) + "\n";
  return o;
}

// ---------------------------------------------------------------------------
// HTML

std::string esc(std::string_view s) { return html_escape(s); }

// A level's name as an HTML id: letters, digits, '-' and '_' kept, the rest '-'.
std::string safe_id(std::string_view s) {
  std::string o;
  for (char c : s) o += std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' ? c : '-';
  return o.empty() ? "level" : o;
}

std::string html_table(const Table& t, const std::vector<std::string>* cell_titles = nullptr, size_t title_column = 0) {
  std::string o = "<div class=\"scroll\"><table>\n<thead><tr>";
  for (size_t i = 0; i < t.head.size(); ++i) {
    o += t.numeric[i] ? "<th class=\"num\">" : "<th>";
    o += esc(t.head[i]) + "</th>";
  }
  o += "</tr></thead>\n<tbody>\n";
  for (size_t r = 0; r < t.rows.size(); ++r) {
    const std::string& cls = r < t.row_class.size() ? t.row_class[r] : std::string();
    o += cls.empty() ? "<tr>" : "<tr class=\"" + cls + "\">";
    for (size_t i = 0; i < t.rows[r].size(); ++i) {
      std::string attrs = i < t.numeric.size() && t.numeric[i] ? " class=\"num\"" : "";
      if (cell_titles && i == title_column && r < cell_titles->size() &&
          (*cell_titles)[r].size() > t.rows[r][i].size()) {
        attrs += " title=\"" + esc(utf8_prefix((*cell_titles)[r], 4000)) + "\"";
      }
      o += "<td" + attrs + ">" + esc(t.rows[r][i]) + "</td>";
    }
    o += "</tr>\n";
  }
  return o + "</tbody></table></div>\n";
}

std::string html_items(const std::vector<Item>& items) {
  std::string o = "<dl class=\"kv\">\n";
  for (const auto& i : items) o += "<dt>" + esc(i.label) + "</dt><dd>" + esc(i.value) + "</dd>\n";
  return o + "</dl>\n";
}

const char* kStyle = R"(
:root{--fg:#1f2328;--muted:#59636e;--line:#d8dee4;--soft:#f6f8fa}
*{box-sizing:border-box}
body{margin:0;color:var(--fg);background:#fff;
  font:14px/1.5 system-ui,-apple-system,"Segoe UI",Roboto,"Helvetica Neue",Arial,sans-serif}
main{max-width:1240px;margin:0 auto;padding:28px 32px 64px}
h1{font-size:24px;margin:0 0 2px}
h2{font-size:18px;margin:36px 0 10px;padding-bottom:4px;border-bottom:1px solid var(--line)}
h3{font-size:15px;margin:20px 0 6px}
.sub,.note,figcaption{color:var(--muted)}
.cards{display:flex;flex-wrap:wrap;gap:12px;margin:18px 0 0}
.card{border:1px solid var(--line);border-radius:6px;padding:8px 14px;min-width:130px}
.card b{display:block;font-size:20px;font-variant-numeric:tabular-nums}
.card span{color:var(--muted);font-size:12px}
.scroll{overflow-x:auto}
table{border-collapse:collapse;font-size:13px;margin:6px 0}
th,td{padding:4px 9px;border-bottom:1px solid var(--line);text-align:left;vertical-align:top}
th{background:var(--soft);font-weight:600;vertical-align:bottom}
.num{text-align:right;font-variant-numeric:tabular-nums}
td.num{white-space:nowrap}
tr.overall td{font-weight:600;border-top:2px solid var(--fg)}
tr.failed td{color:#6b4a3a}
dl.kv{display:grid;grid-template-columns:max-content 1fr;gap:3px 18px;margin:6px 0}
dl.kv dt{color:var(--muted)}
dl.kv dd{margin:0;overflow-wrap:anywhere}
ul.problems{margin:4px 0 12px;padding-left:22px}
code{font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;font-size:12px}
.plots{display:flex;flex-wrap:wrap;gap:12px 28px;align-items:flex-start}
figure{margin:6px 0}
svg.plot{display:block;max-width:100%;height:auto;background:#fff}
svg.plot text{font-size:11px;fill:#3d444d}
svg.plot text.ttl{font-size:13px;font-weight:600;fill:#1f2328}
svg.plot text.lbl{font-size:12px;fill:#1f2328}
svg.plot text.ptl{font-size:10px;fill:#1f2328}
svg.plot text.empty{font-size:13px;fill:#8c959f}
svg.plot .grid{stroke:#eaeef2;stroke-width:1}
svg.plot .axis{stroke:#57606a;stroke-width:1}
svg.plot .ref{stroke:#24292f;stroke-width:1;stroke-dasharray:4 3}
svg.plot .zone{fill:#009e73;fill-opacity:.07}
svg.plot rect.seg,svg.plot rect.bar{stroke:#fff;stroke-width:.5}
svg.plot .pt{stroke:#fff;stroke-width:.8;fill-opacity:.85}
svg.plot rect.seg:hover,svg.plot rect.bar:hover,svg.plot .pt:hover{stroke:#000;stroke-width:1.5}
footer{margin-top:40px;color:var(--muted);font-size:12px}
@media print{main{padding:0}.scroll{overflow:visible}}
)";

// ---------------------------------------------------------------------------
// SVG: small writers of one element each, into a string.

std::string px(double v) { return format("%.1f", v); }

void svg_line(std::string& o, double x1, double y1, double x2, double y2, const char* cls) {
  o += "<line class=\"" + std::string(cls) + "\" x1=\"" + px(x1) + "\" y1=\"" + px(y1) + "\" x2=\"" + px(x2) +
       "\" y2=\"" + px(y2) + "\"/>\n";
}

// anchor: start, middle or end; extra: more attributes (class, transform).
void svg_text(std::string& o, double x, double y, std::string_view s, const char* anchor = "start",
              const std::string& extra = "") {
  o += "<text x=\"" + px(x) + "\" y=\"" + px(y) + "\" text-anchor=\"" + anchor + "\"" +
       (extra.empty() ? "" : " " + extra) + ">" + esc(s) + "</text>\n";
}

// A rectangle with an optional hover title; attrs: class, data-*, fill.
void svg_rect(std::string& o, double x, double y, double w, double h, const std::string& attrs,
              std::string_view title = {}) {
  o += "<rect " + attrs + " x=\"" + format("%.2f", x) + "\" y=\"" + format("%.2f", y) + "\" width=\"" +
       format("%.2f", std::max(w, 0.0)) + "\" height=\"" + format("%.2f", std::max(h, 0.0)) + "\"";
  o += title.empty() ? "/>\n" : "><title>" + esc(title) + "</title></rect>\n";
}

std::string svg_open(const std::string& id, double w, double h, std::string_view label) {
  return "<svg class=\"plot\" id=\"" + esc(id) + "\" width=\"" + px(w) + "\" height=\"" + px(h) + "\" viewBox=\"0 0 " +
         px(w) + " " + px(h) + "\" role=\"img\" aria-label=\"" + esc(label) + "\">\n";
}

struct LegendEntry {
  std::string label, color;
};

// Swatches and labels left to right, wrapping at max_w; returns the height used.
double svg_legend(std::string& o, const std::vector<LegendEntry>& entries, double x0, double y0, double max_w) {
  if (entries.empty()) return 0;
  const double row_h = 18;
  double x = x0, y = y0;
  for (const auto& e : entries) {
    double w = 16 + 6.2 * static_cast<double>(e.label.size()) + 16;  // swatch, text at ~6.2 px a character, gap
    if (x > x0 && x + w > x0 + max_w) {
      x = x0;
      y += row_h;
    }
    o += "<rect x=\"" + px(x) + "\" y=\"" + px(y) + "\" width=\"11\" height=\"11\" rx=\"2\" fill=\"" + e.color +
         "\"/>\n";
    svg_text(o, x + 16, y + 10, e.label);
    x += w;
  }
  return y - y0 + row_h;
}

// The plot area of a chart, in pixels.
struct Area {
  double x, y, w, h;
};

// Maps log2(value) in [lo, hi] onto [a, b] pixels.
struct LogAxis {
  double lo, hi, a, b;
  double at(double log2_value) const {
    double v = std::clamp(log2_value, lo, hi);
    return a + (v - lo) / (hi - lo) * (b - a);
  }
};

// lo..hi in whole powers of two around the values with a little room (no
// mark on the frame), at least 1/2x..2x, at most 1/64x..64x.
std::pair<double, double> log_range(const std::vector<double>& log2_values) {
  double lo = -1, hi = 1;
  for (double v : log2_values) {
    lo = std::min(lo, std::floor(v - 0.2));
    hi = std::max(hi, std::ceil(v + 0.2));
  }
  return {std::max(lo, -6.0), std::min(hi, 6.0)};
}

int log_step(double lo, double hi) { return hi - lo > 8 ? 2 : 1; }

// Integer ticks 0..top with a step of 1, 2, 5, 10, ... and at most ~5 of them.
std::pair<long, long> count_ticks(long max_count) {
  long step = 1;
  for (long base = 1;; base *= 10) {
    if (max_count <= 5 * base) {
      step = base;
      break;
    }
    if (max_count <= 10 * base) {
      step = 2 * base;
      break;
    }
    if (max_count <= 25 * base) {
      step = 5 * base;
      break;
    }
  }
  long top = std::max(step, (max_count + step - 1) / step * step);
  return {step, top};
}

// A note in the middle of an empty plot, on white so no grid line runs through it.
void empty_note(std::string& o, const Area& a, std::string_view note) {
  double w = 7.5 * static_cast<double>(note.size()) + 16, cx = a.x + a.w / 2, cy = a.y + a.h / 2;
  o += "<rect x=\"" + px(cx - w / 2) + "\" y=\"" + px(cy - 14) + "\" width=\"" + px(w) +
       "\" height=\"22\" rx=\"3\" fill=\"#fff\" stroke=\"#eaeef2\"/>\n";
  svg_text(o, cx, cy + 2, note, "middle", "class=\"empty\"");
}

// The level colours (Okabe-Ito), by the level's position in the run.
const char* level_color(size_t i) {
  static const char* c[] = {"#0072b2", "#e69f00", "#009e73", "#cc79a7", "#d55e00", "#56b4e9", "#000000", "#f0e442"};
  return c[i % (sizeof c / sizeof c[0])];
}

// One correct task, as the speedup plots see it.
struct Point {
  std::string level, label;  // label: "level1 / 19_ReLU"
  size_t level_index = 0;
  std::optional<double> eager, compile;
};

struct Plots {
  std::vector<std::string> levels;  // in the run's order
  std::vector<Point> points;        // the correct tasks
  bool compile_measured = false;    // a torch.compile baseline was timed
};

Plots plot_data(const Json& r) {
  Plots p;
  for (const auto& l : items_of(at(r, "levels"))) p.levels.push_back(text(at(l, "level")));
  for (const auto& row : items_of(at(r, "tasks"))) {
    // A compile time measured for any task (a candidate's or only the baseline's).
    if (speedup(at(row, "speedup_compile")) || speedup(at(row, "compile_ms"))) p.compile_measured = true;
    if (!is_correct(row)) continue;
    Point pt;
    pt.level = level_of(row);
    auto it = std::find(p.levels.begin(), p.levels.end(), pt.level);
    if (it == p.levels.end()) it = p.levels.insert(p.levels.end(), pt.level);
    pt.level_index = static_cast<size_t>(it - p.levels.begin());
    pt.label = pt.level + " / " + stem_of(row);
    pt.eager = speedup(at(row, "speedup_eager"));
    pt.compile = speedup(at(row, "speedup_compile"));
    p.points.push_back(pt);
  }
  return p;
}

// 1. Outcomes: one stacked bar per level and overall, as shares of its tasks.
std::string plot_outcomes(const Json& r) {
  auto rows = metric_rows(r);
  const double W = 820, left = 96, right = 64, top = 34, bar_h = 22, gap = 10;
  Area a{left, top, W - left - right, static_cast<double>(rows.size()) * (bar_h + gap) - gap};
  std::string body;
  svg_text(body, 0, 18, "Outcomes per level (share of the level's tasks)", "start", "class=\"ttl\"");
  for (int pct10 = 0; pct10 <= 10; pct10 += 2) {
    double x = a.x + a.w * pct10 / 10.0;
    svg_line(body, x, a.y - 4, x, a.y + a.h + 4, "grid");
    svg_text(body, x, a.y + a.h + 18, std::to_string(pct10 * 10) + "%", "middle");
  }
  svg_line(body, a.x, a.y + a.h + 4, a.x + a.w, a.y + a.h + 4, "axis");
  std::vector<std::string> present;
  long total_tasks = 0;
  for (size_t i = 0; i < rows.size(); ++i) {
    const auto& [name, m] = rows[i];
    double y = a.y + static_cast<double>(i) * (bar_h + gap);
    svg_text(body, a.x - 8, y + bar_h / 2 + 4, name, "end",
             name == "overall" ? "class=\"lbl\" font-weight=\"600\"" : "class=\"lbl\"");
    auto segs = segments(*m);
    long n = 0;
    for (const auto& s : segs) n += s.second;
    total_tasks += n;
    svg_text(body, a.x + a.w + 8, y + bar_h / 2 + 4, "n=" + std::to_string(n));
    if (n == 0) continue;
    double x = a.x;
    for (const auto& [c, k] : segs) {
      if (k <= 0) continue;
      double w = a.w * static_cast<double>(k) / static_cast<double>(n);
      std::string title = name + ": " + c.label + ": " + std::to_string(k) + " of " + std::to_string(n) + " tasks (" +
                          format("%.1f%%", 100.0 * static_cast<double>(k) / static_cast<double>(n)) + ")";
      svg_rect(
          body, x, y, w, bar_h,
          "class=\"seg\" data-outcome=\"" + esc(c.key) + "\" data-level=\"" + esc(name) + "\" fill=\"" + c.color + "\"",
          title);
      x += w;
      if (std::find(present.begin(), present.end(), c.key) == present.end()) present.push_back(c.key);
    }
  }
  if (total_tasks == 0) empty_note(body, a, "no tasks");
  // The legend names only the categories that occur, in the fixed order.
  std::vector<LegendEntry> legend;
  for (const auto& [name, m] : rows) {
    for (const auto& [c, k] : segments(*m)) {
      bool seen = std::any_of(legend.begin(), legend.end(), [&](const LegendEntry& e) { return e.label == c.label; });
      if (!seen && std::find(present.begin(), present.end(), c.key) != present.end())
        legend.push_back({c.label, c.color});
    }
  }
  double lh = svg_legend(body, legend, a.x, a.y + a.h + 32, a.w + right);
  double H = a.y + a.h + 32 + lh + 6;
  return svg_open("plot-outcomes", W, H, "Outcomes per level") + body + "</svg>\n";
}

// 2. One level's speedup histogram: log2 bins of 0.25 from 1/16x to 16x.
constexpr double kBinLo = -4, kBinHi = 4, kBinWidth = 0.25;
constexpr int kBins = 32;  // (kBinHi - kBinLo) / kBinWidth

int bin_of(double speedup_value) {
  int b = static_cast<int>(std::floor((std::log2(speedup_value) - kBinLo) / kBinWidth));
  return std::clamp(b, 0, kBins - 1);
}

std::string bin_text(int b) {
  double lo = std::exp2(kBinLo + kBinWidth * b), hi = std::exp2(kBinLo + kBinWidth * (b + 1));
  if (b == 0) return "below " + format("%.3gx", hi);
  if (b == kBins - 1) return format("%.3gx", lo) + " and above";
  return format("%.3gx", lo) + " to " + format("%.3gx", hi);
}

std::string plot_distribution(const Plots& p, const std::string& level, const std::string& id) {
  const double W = 560, left = 46, right = 14, top = 34, plot_h = 170;
  Area a{left, top, W - left - right, plot_h};
  struct S {
    const char* key;
    const char* label;
    const char* color;
    std::vector<long> bins = std::vector<long>(kBins, 0);
    long n = 0;
  };
  std::vector<S> series = {{"eager", "vs eager", "#0072b2"}};
  if (p.compile_measured) series.push_back({"compile", "vs torch.compile", "#e69f00"});
  long max_count = 0;
  for (const auto& pt : p.points) {
    if (pt.level != level) continue;
    for (auto& s : series) {
      auto v = std::string(s.key) == "eager" ? pt.eager : pt.compile;
      if (!v) continue;
      ++s.n;
      max_count = std::max(max_count, ++s.bins[static_cast<size_t>(bin_of(*v))]);
    }
  }
  auto [step, top_count] = count_ticks(std::max(max_count, 1L));
  auto y_at = [&](double c) { return a.y + a.h - a.h * c / static_cast<double>(top_count); };
  LogAxis x{kBinLo, kBinHi, a.x, a.x + a.w};
  std::string body;
  svg_text(body, 0, 18, level + ": speedup of the correct tasks", "start", "class=\"ttl\"");
  for (long c = 0; c <= top_count; c += step) {
    svg_line(body, a.x, y_at(static_cast<double>(c)), a.x + a.w, y_at(static_cast<double>(c)), "grid");
    svg_text(body, a.x - 6, y_at(static_cast<double>(c)) + 4, std::to_string(c), "end");
  }
  for (int k = static_cast<int>(kBinLo); k <= static_cast<int>(kBinHi); ++k) {
    svg_line(body, x.at(k), a.y + a.h, x.at(k), a.y + a.h + 4, "axis");
    svg_text(body, x.at(k), a.y + a.h + 17, ratio_label(k), "middle");
  }
  svg_text(body, a.x + a.w / 2, a.y + a.h + 33, "speedup (log scale; clamped at 1/16x and 16x)", "middle");
  svg_text(body, 12, a.y + a.h / 2, "tasks", "middle", "transform=\"rotate(-90 12 " + px(a.y + a.h / 2) + ")\"");
  double slot = a.w / kBins / static_cast<double>(series.size());
  for (size_t si = 0; si < series.size(); ++si) {
    const S& s = series[si];
    for (int b = 0; b < kBins; ++b) {
      long c = s.bins[static_cast<size_t>(b)];
      if (c == 0) continue;
      double bx = x.at(kBinLo + kBinWidth * b) + slot * static_cast<double>(si);
      std::string title =
          level + ", " + s.label + ": " + std::to_string(c) + (c == 1 ? " task, " : " tasks, ") + bin_text(b);
      svg_rect(body, bx + 0.5, y_at(static_cast<double>(c)), slot - 1, y_at(0) - y_at(static_cast<double>(c)),
               std::string("class=\"bar\" data-series=\"") + s.key + "\" fill=\"" + s.color + "\"", title);
    }
  }
  svg_line(body, a.x, a.y + a.h, a.x + a.w, a.y + a.h, "axis");
  svg_line(body, a.x, a.y, a.x, a.y + a.h, "axis");
  // 1x and the reward's margin.
  svg_line(body, x.at(0), a.y - 6, x.at(0), a.y + a.h, "ref");
  svg_line(body, x.at(std::log2(kFasterThreshold)), a.y - 6, x.at(std::log2(kFasterThreshold)), a.y + a.h, "ref");
  svg_text(body, x.at(0) - 3, a.y - 8, "1x", "end");
  svg_text(body, x.at(std::log2(kFasterThreshold)) + 3, a.y - 8, faster_threshold() + "x", "start");
  bool any = std::any_of(series.begin(), series.end(), [](const S& s) { return s.n > 0; });
  if (!any) empty_note(body, a, "no correct tasks");
  std::vector<LegendEntry> legend;
  for (const auto& s : series) legend.push_back({std::string(s.label) + " (n=" + std::to_string(s.n) + ")", s.color});
  double lh = svg_legend(body, legend, a.x, a.y + a.h + 44, a.w);
  double H = a.y + a.h + 44 + lh + 4;
  return svg_open(id, W, H, level + ": speedup distribution") + body + "</svg>\n";
}

// Ticks and grid of a log2 axis: vertical (x) or horizontal (y) lines.
void log_grid(std::string& o, const LogAxis& ax, const Area& a, bool vertical) {
  int step = log_step(ax.lo, ax.hi);
  for (int k = static_cast<int>(ax.lo); k <= static_cast<int>(ax.hi); k += step) {
    double v = ax.at(k);
    if (vertical) {
      svg_line(o, v, a.y, v, a.y + a.h, "grid");
      svg_text(o, v, a.y + a.h + 16, ratio_label(k), "middle");
    } else {
      svg_line(o, a.x, v, a.x + a.w, v, "grid");
      svg_text(o, a.x - 6, v + 4, ratio_label(k), "end");
    }
  }
}

std::vector<LegendEntry> level_legend(const Plots& p) {
  std::vector<LegendEntry> l;
  for (size_t i = 0; i < p.levels.size(); ++i) {
    size_t n = static_cast<size_t>(
        std::count_if(p.points.begin(), p.points.end(), [&](const Point& pt) { return pt.level_index == i; }));
    l.push_back({p.levels[i] + " (" + std::to_string(n) + " correct)", level_color(i)});
  }
  return l;
}

// 3a. Per task: speedup vs eager (x) against speedup vs torch.compile (y); the kScatterLabels
// points farthest from 1x/1x labelled with their task.
constexpr size_t kScatterLabels = 6;
std::string plot_scatter(const Plots& p) {
  const double W = 620, left = 58, right = 20, top = 34, plot_h = 420;
  Area a{left, top, W - left - right, plot_h};
  std::vector<double> values;
  std::vector<const Point*> shown;
  for (const auto& pt : p.points) {
    if (!pt.eager || !pt.compile) continue;
    shown.push_back(&pt);
    values.push_back(std::log2(*pt.eager));
    values.push_back(std::log2(*pt.compile));
  }
  auto [lo, hi] = log_range(values);
  LogAxis x{lo, hi, a.x, a.x + a.w}, y{lo, hi, a.y + a.h, a.y};
  std::string body;
  svg_text(body, 0, 18, "Speedup per correct task: vs eager and vs torch.compile", "start", "class=\"ttl\"");
  double t = std::log2(kFasterThreshold);
  body += "<rect class=\"zone\" x=\"" + px(x.at(t)) + "\" y=\"" + px(a.y) + "\" width=\"" + px(a.x + a.w - x.at(t)) +
          "\" height=\"" + px(y.at(t) - a.y) + "\"/>\n";
  svg_text(body, a.x + a.w - 6, a.y + 14, "faster than both (reward 3)", "end");
  log_grid(body, x, a, true);
  log_grid(body, y, a, false);
  svg_line(body, a.x, a.y + a.h, a.x + a.w, a.y + a.h, "axis");
  svg_line(body, a.x, a.y, a.x, a.y + a.h, "axis");
  svg_line(body, x.at(0), a.y, x.at(0), a.y + a.h, "ref");
  svg_line(body, a.x, y.at(0), a.x + a.w, y.at(0), "ref");
  svg_text(body, a.x + a.w / 2, a.y + a.h + 34, "speedup vs eager (log scale)", "middle");
  double ym = a.y + a.h / 2;
  svg_text(body, 14, ym, "speedup vs torch.compile (log scale)", "middle",
           "transform=\"rotate(-90 14 " + px(ym) + ")\"");
  for (const Point* pt : shown) {
    std::string title =
        pt->label + ": " + format("%.2fx", *pt->eager) + " eager, " + format("%.2fx", *pt->compile) + " compile";
    body += "<circle class=\"pt\" data-level=\"" + esc(pt->level) + "\" cx=\"" + px(x.at(std::log2(*pt->eager))) +
            "\" cy=\"" + px(y.at(std::log2(*pt->compile))) + "\" r=\"4.5\" fill=\"" + level_color(pt->level_index) +
            "\"><title>" + esc(title) + "</title></circle>\n";
  }
  // The points farthest from 1x/1x named on the plot itself, so that a printed report can say which
  // task they are (the others keep their hover text).
  std::vector<const Point*> far = shown;
  auto distance = [](const Point* q) { return std::hypot(std::log2(*q->eager), std::log2(*q->compile)); };
  std::stable_sort(far.begin(), far.end(), [&](const Point* l, const Point* r) { return distance(l) > distance(r); });
  if (far.size() > kScatterLabels) far.resize(kScatterLabels);
  for (const Point* pt : far) {
    std::string name = pt->label.substr(pt->label.find(" / ") == std::string::npos ? 0 : pt->label.find(" / ") + 3);
    if (name.size() > 24) name = name.substr(0, 23) + "…";
    double cx = x.at(std::log2(*pt->eager)), cy = y.at(std::log2(*pt->compile));
    bool right_half = cx > a.x + 0.7 * a.w;
    svg_text(body, right_half ? cx - 7 : cx + 7, cy - 5, name, right_half ? "end" : "start", "class=\"ptl\"");
  }
  if (p.points.empty()) empty_note(body, a, "no correct tasks");
  double ly = a.y + a.h + 48;
  size_t unmeasured = p.points.size() - shown.size();
  if (unmeasured > 0) {
    svg_text(body, a.x, ly + 10,
             std::to_string(unmeasured) + " correct task(s) without both speedups measured are not shown");
    ly += 20;
  }
  double lh = svg_legend(body, level_legend(p), a.x, ly, a.w);
  return svg_open("plot-tasks", W, ly + lh + 4, "Speedup per correct task") + body + "</svg>\n";
}

// 3b. Per task, without a compile baseline: speedup vs eager, sorted.
std::string plot_sorted_bars(const Plots& p) {
  const double W = 820, left = 58, right = 60, top = 34, plot_h = 260;
  Area a{left, top, W - left - right, plot_h};
  std::vector<const Point*> shown;
  std::vector<double> values;
  for (const auto& pt : p.points) {
    if (!pt.eager) continue;
    shown.push_back(&pt);
    values.push_back(std::log2(*pt.eager));
  }
  std::stable_sort(shown.begin(), shown.end(), [](const Point* l, const Point* r) { return *l->eager < *r->eager; });
  auto [lo, hi] = log_range(values);
  LogAxis y{lo, hi, a.y + a.h, a.y};
  std::string body;
  svg_text(body, 0, 18, "Speedup vs eager per correct task, sorted (no torch.compile baseline measured)", "start",
           "class=\"ttl\"");
  log_grid(body, y, a, false);
  // One slot per task, at most 24 px wide (a few tasks are not fat slabs).
  double slot = shown.empty() ? a.w : std::min(24.0, a.w / static_cast<double>(shown.size()));
  double gap = slot > 4 ? 2 : 0;
  for (size_t i = 0; i < shown.size(); ++i) {
    const Point* pt = shown[i];
    double v = y.at(std::log2(*pt->eager)), base = y.at(0);
    // Up from 1x when faster, hanging below it when slower; at least 2 px.
    double y0 = std::min(v, base), h = std::max(std::abs(v - base), 2.0);
    if (v > base - 2 && v <= base) y0 = base - 2;
    std::string title = pt->label + ": " + format("%.2fx", *pt->eager) + " eager";
    svg_rect(body, a.x + slot * static_cast<double>(i) + gap / 2, y0, std::max(slot - gap, 0.5), h,
             "class=\"pt\" data-level=\"" + esc(pt->level) + "\" fill=\"" + level_color(pt->level_index) + "\"", title);
  }
  svg_line(body, a.x, a.y + a.h, a.x + a.w, a.y + a.h, "axis");
  svg_line(body, a.x, a.y, a.x, a.y + a.h, "axis");
  svg_line(body, a.x, y.at(0), a.x + a.w, y.at(0), "ref");
  svg_line(body, a.x, y.at(std::log2(kFasterThreshold)), a.x + a.w, y.at(std::log2(kFasterThreshold)), "ref");
  svg_text(body, a.x + a.w + 4, y.at(std::log2(kFasterThreshold)) - 2, faster_threshold() + "x");
  svg_text(body, a.x + a.w + 4, y.at(0) + 10, "1x");
  // Rank ticks: the first, the last, and a few between.
  if (!shown.empty()) {
    size_t n = shown.size();
    std::set<size_t> ranks = {1, n};
    for (size_t q = 1; q < 4 && n >= 8; ++q) ranks.insert(n * q / 4);
    for (size_t r : ranks) {
      double cx = a.x + slot * (static_cast<double>(r) - 0.5);
      svg_line(body, cx, a.y + a.h, cx, a.y + a.h + 4, "axis");
      svg_text(body, cx, a.y + a.h + 16, std::to_string(r), "middle");
    }
  }
  svg_text(body, a.x + a.w / 2, a.y + a.h + 34, "correct tasks, slowest to fastest", "middle");
  double ym = a.y + a.h / 2;
  svg_text(body, 14, ym, "speedup vs eager (log scale)", "middle", "transform=\"rotate(-90 14 " + px(ym) + ")\"");
  if (p.points.empty()) empty_note(body, a, "no correct tasks");
  double ly = a.y + a.h + 48;
  if (shown.size() < p.points.size()) {
    svg_text(
        body, a.x, ly + 10,
        std::to_string(p.points.size() - shown.size()) + " correct task(s) without a measured speedup are not shown");
    ly += 20;
  }
  double lh = svg_legend(body, level_legend(p), a.x, ly, a.w);
  return svg_open("plot-tasks", W, ly + lh + 4, "Speedup vs eager per correct task") + body + "</svg>\n";
}

std::string html_card(const std::string& value, const std::string& label) {
  return "<div class=\"card\"><b>" + esc(value) + "</b><span>" + esc(label) + "</span></div>";
}

// An agent run's tokens, and its cost when priced, beside the headline numbers.
std::string usage_cards(const Json& r) {
  if (!has_usage(r)) return "";
  const Json& u = at(at(r, "overall"), "usage");
  const Json& p = at(u, "prompt_tokens");
  std::string all = p.is_null() ? tokens(p) : tokens(Json(count(p) + count(at(u, "completion_tokens"))));
  std::string o = html_card(all, "tokens (prompt + completion)");
  const Json& cost = at(u, "cost_usd");
  if (priced(r)) o += html_card(cost.is_null() ? "not reported" : "$" + usd(cost), "cost (USD)");
  return o;
}

std::string html_problems(const Json& r) {
  auto lists = problem_lists(r);
  if (lists.empty()) return "<p>none</p>\n";
  std::string o;
  for (const auto& l : lists) {
    o += "<h3>" + esc(l.title) + ": " + std::to_string(l.items.size()) + "</h3>\n<ul class=\"problems\">\n";
    for (const auto& i : l.items) o += "<li><code>" + esc(i.label) + "</code>: " + esc(i.value) + "</li>\n";
    o += "</ul>\n";
  }
  return o;
}

}  // namespace

std::string render_markdown(const nlohmann::json& r) {
  std::string o = "# " + md_line(title_of(r)) + "\n\n" + md_line(subtitle_of(r)) + "\n\n";
  o += "## Setup\n\n" + md_items(fingerprint_items(r));
  o += "\n## Metrics\n\nRates are shares of all tasks of the level (a failed or missing task counts as not fast); "
       "speedup = baseline time / solution time; n/a: not measured.\n\n" +
       md_table(metrics_table(r));
  if (!items_of(at(r, "families")).empty()) {
    o += "\n## By kernel family\n\n" + md_line(kFamilyNote) + "\n\n" + md_table(metrics_table(r, Grouping::kFamily));
  }
  if (has_usage(r)) o += "\n## Model usage\n\n" + md_line(usage_note(r)) + "\n\n" + md_table(usage_table(r));
  o += "\n## Outcomes\n\n" + md_table(outcome_table(r));
  o += "\n## Rules\n\n" + md_items(rule_items(r));
  o += "\n## Run\n\n" + md_items(run_items(r));
  o += "\n## Problems\n\n";
  auto lists = problem_lists(r);
  if (lists.empty()) o += "none\n";
  for (const auto& l : lists) {
    o += "### " + md_line(l.title) + ": " + std::to_string(l.items.size()) + "\n\n";
    for (const auto& i : l.items) o += "- " + md_code(i.label) + ": " + md_line(i.value) + "\n";
    o += "\n";
  }
  o += lists.empty() ? "\n" : "";
  o += "## Tasks\n\n";
  Table tasks = task_table(r);
  o += tasks.rows.empty() ? "no tasks\n" : md_table(tasks);
  return o;
}

std::string render_html(const nlohmann::json& r) {
  Plots plots = plot_data(r);
  const Json& overall = at(r, "overall");
  std::string o =
      "<!doctype html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
      "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n<title>" +
      esc(title_of(r)) + "</title>\n<style>" + kStyle + "</style>\n</head>\n<body>\n<main>\n";
  o += "<header>\n<h1>" + esc(title_of(r)) + "</h1>\n<p class=\"sub\">" + esc(subtitle_of(r)) + "</p>\n";
  o += "<div class=\"cards\">" + html_card(text(at(overall, "tasks")), "tasks") +
       html_card(pct(at(overall, "pass_rate")), "correct") +
       html_card(pct(at(overall, "faster_than_eager_rate")), "faster than eager") +
       html_card(pct(at(overall, "faster_than_compile_rate")), "faster than torch.compile") +
       html_card(times(at(at(at(overall, "geomean"), "eager"), "correct")), "geomean vs eager (correct)") +
       html_card(fixed2(at(overall, "mean_reward")), "mean reward") + usage_cards(r) + "</div>\n</header>\n";

  o += "<h2>Metrics</h2>\n<p class=\"note\">Rates are shares of all tasks of the level (a failed or missing task "
       "counts as not fast); speedup = baseline time / solution time; n/a: not measured.</p>\n";
  o += html_table(metrics_table(r));
  if (!items_of(at(r, "families")).empty()) {
    o += "<h2>By kernel family</h2>\n<p class=\"note\">" + esc(kFamilyNote) + "</p>\n" +
         html_table(metrics_table(r, Grouping::kFamily));
  }

  if (has_usage(r)) {
    o += "<h2>Model usage</h2>\n<p class=\"note\">" + esc(usage_note(r)) + "</p>\n" + html_table(usage_table(r));
  }
  o += "<h2>Outcomes</h2>\n<figure>\n" + plot_outcomes(r) + "</figure>\n" + html_table(outcome_table(r));

  o += "<h2>Speedups</h2>\n<figure>\n" + (plots.compile_measured ? plot_scatter(plots) : plot_sorted_bars(plots));
  o += "<figcaption>Every correct task; hover a mark for its task and speedups. The dashed lines are 1x";
  o += plots.compile_measured ? "; the shaded corner is " + more_than_faster() + " than both baselines.</figcaption>\n"
                              : " and " + faster_threshold() + "x (the reward's \"" + more_than_faster() + "\").</figcaption>\n";
  o += "</figure>\n";
  if (!plots.levels.empty()) {
    o += "<h3>Distribution per level</h3>\n<div class=\"plots\">\n";
    std::set<std::string> used;
    for (const auto& level : plots.levels) {
      std::string id = "plot-dist-" + safe_id(level);
      for (int k = 2; used.count(id); ++k) id = "plot-dist-" + safe_id(level) + "-" + std::to_string(k);
      used.insert(id);
      o += "<figure>\n" + plot_distribution(plots, level, id) + "</figure>\n";
    }
    o += "</div>\n";
  }

  o += "<h2>Setup</h2>\n" + html_items(fingerprint_items(r));
  o += "<h2>Rules</h2>\n" + html_items(rule_items(r));
  o += "<h2>Run</h2>\n" + html_items(run_items(r));
  o += "<h2>Problems</h2>\n" + html_problems(r);
  o += "<h2>Tasks</h2>\n";
  std::vector<std::string> messages;
  Table tasks = task_table(r, &messages);
  o += tasks.rows.empty() ? "<p>no tasks</p>\n" : html_table(tasks, &messages, tasks.head.size() - 1);
  const Json& anvil = at(at(r, "fingerprint"), "anvil");
  o += "<footer>anvil " + esc(text(at(anvil, "version"))) + " (" + esc(text(at(anvil, "rev"))) + "), " +
       esc(text(at(r, "schema"))) + "; this page is self-contained and works offline.</footer>\n";
  return o + "</main>\n</body>\n</html>\n";
}

}  // namespace anvil
