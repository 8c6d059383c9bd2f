// compare.cpp: two benchmark results side by side.
#include "anvil/bench/compare.h"

#include <cmath>
#include <cstdio>
#include <map>
#include <vector>

#include "anvil/env/task.h"
#include "anvil/util/json_text.h"

namespace anvil {
using Json = nlohmann::json;

namespace {

std::string label(const Json& r) {
  const Json& run = r.value("run", Json::object());
  if (run.value("agent", Json()).is_object()) return run["agent"].value("model", std::string("agent"));
  std::string out = run.value("out", std::string("?"));
  while (!out.empty() && out.back() == '/') out.pop_back();
  auto slash = out.rfind('/');
  return slash == std::string::npos ? out : out.substr(slash + 1);
}

std::string task_key(const Json& row) {
  return row.value("level", std::string()) + "/" + std::to_string(row.value("id", 0L));
}

Json side(const Json& row) {
  if (row.is_null()) return nullptr;
  return {{"outcome", row.value("outcome", Json())},
          {"correct", row.value("correct", false)},
          {"reward", row.value("reward", -1)},
          {"speedup_eager", row.value("speedup_eager", Json())},
          {"speedup_compile", row.value("speedup_compile", Json())}};
}

Json level_metrics(const Json& r, const std::string& level) {
  if (level == "overall") return r.value("overall", Json());
  for (const auto& l : r.value("levels", Json::array())) {
    if (l.value("level", std::string()) == level) return l["metrics"];
  }
  return nullptr;
}

// The headline numbers of a metrics object, flat, for side-by-side rows.
Json headline(const Json& m) {
  if (!m.is_object()) return nullptr;
  auto at = [&](std::initializer_list<const char*> path) {
    const Json* j = &m;
    for (const char* k : path) {
      if (!j->is_object() || !j->contains(k)) return Json(nullptr);
      j = &(*j)[k];
    }
    return *j;
  };
  return {{"tasks", at({"tasks"})},
          {"pass_rate", at({"pass_rate"})},
          {"faster_than_eager_rate", at({"faster_than_eager_rate"})},
          {"faster_than_compile_rate", at({"faster_than_compile_rate"})},
          {"fast_1_compile", at({"fast_p", "compile", "1"})},
          {"geomean_eager_correct", at({"geomean", "eager", "correct"})},
          {"geomean_compile_correct", at({"geomean", "compile", "correct"})},
          {"geomean_eager_all", at({"geomean", "eager", "all"})},
          {"geomean_compile_all", at({"geomean", "compile", "all"})},
          {"median_eager", at({"median", "eager"})},
          {"mean_reward", at({"mean_reward"})}};
}

}  // namespace

Json compare_results(const Json& a, const Json& b) {
  Json c = {{"schema", "anvil.bench-compare/1"}, {"a", {{"label", label(a)}, {"out", a["run"].value("out", Json())}}},
            {"b", {{"label", label(b)}, {"out", b["run"].value("out", Json())}}}};
  // What differs in the setups: the numbers of two GPUs or two torch versions
  // are not a comparison of two policies.
  Json diff = Json::object();
  const Json& fa = a.value("fingerprint", Json::object());
  const Json& fb = b.value("fingerprint", Json::object());
  for (const char* k : {"gpu", "driver", "cuda", "torch", "triton", "device", "compile_mode", "tf32", "protocol",
                        "preset", "timing", "defenses"}) {
    if (fa.value(k, Json()) != fb.value(k, Json())) diff[k] = {{"a", fa.value(k, Json())}, {"b", fb.value(k, Json())}};
  }
  c["setup_differences"] = diff;
  // Levels: both runs' levels in natural order, then overall.
  std::vector<std::string> levels;
  for (const Json* r : {&a, &b}) {
    for (const auto& l : r->value("levels", Json::array())) {
      std::string n = l.value("level", std::string());
      if (std::find(levels.begin(), levels.end(), n) == levels.end()) levels.push_back(n);
    }
  }
  std::sort(levels.begin(), levels.end(), natural_less);
  levels.push_back("overall");
  Json lv = Json::array();
  for (const auto& l : levels) {
    lv.push_back({{"level", l}, {"a", headline(level_metrics(a, l))}, {"b", headline(level_metrics(b, l))}});
  }
  c["levels"] = lv;
  // Tasks, matched by level and id.
  std::map<std::string, std::pair<Json, Json>> rows;
  std::vector<std::string> order;
  for (int s = 0; s < 2; ++s) {
    for (const auto& row : (s == 0 ? a : b).value("tasks", Json::array())) {
      std::string k = task_key(row);
      if (!rows.count(k)) order.push_back(k);
      (s == 0 ? rows[k].first : rows[k].second) = row;
    }
  }
  std::sort(order.begin(), order.end(), [&](const std::string& x, const std::string& y) {
    const Json& rx = rows[x].first.is_null() ? rows[x].second : rows[x].first;
    const Json& ry = rows[y].first.is_null() ? rows[y].second : rows[y].first;
    std::string lx = rx.value("level", std::string()), ly = ry.value("level", std::string());
    if (lx != ly) return natural_less(lx, ly);
    return rx.value("id", 0L) < ry.value("id", 0L);
  });
  Json tasks = Json::array(), changed = Json::array();
  int gained = 0, lost = 0, up = 0, down = 0;
  double log_ratio_sum = 0;
  int ratio_n = 0;
  for (const auto& k : order) {
    const auto& [ra, rb] = rows[k];
    const Json& any = ra.is_null() ? rb : ra;
    Json t = {{"level", any.value("level", std::string())}, {"id", any.value("id", 0L)},
              {"name", any.value("name", std::string())}, {"a", side(ra)}, {"b", side(rb)}};
    std::string change = "same";
    if (ra.is_null()) change = "only_in_b";
    else if (rb.is_null()) change = "only_in_a";
    else {
      bool ca = ra.value("correct", false), cb = rb.value("correct", false);
      int wa = ra.value("reward", -1), wb = rb.value("reward", -1);
      if (!ca && cb) change = "gained", ++gained;
      else if (ca && !cb) change = "lost", ++lost;
      else if (wb > wa) change = "reward_up", ++up;
      else if (wb < wa) change = "reward_down", ++down;
      else if (ra.value("outcome", Json()) != rb.value("outcome", Json())) change = "outcome_changed";
      const Json& sa = ra.value("speedup_eager", Json());
      const Json& sb = rb.value("speedup_eager", Json());
      if (ca && cb && sa.is_number() && sb.is_number() && sa.get<double>() > 0 && sb.get<double>() > 0) {
        double ratio = sb.get<double>() / sa.get<double>();  // B's time against A's, per task
        t["b_over_a"] = ratio;
        log_ratio_sum += std::log(ratio);
        ++ratio_n;
      }
    }
    t["change"] = change;
    tasks.push_back(t);
    if (change != "same") changed.push_back(t);
  }
  c["tasks"] = tasks;
  c["changed"] = changed;
  c["summary"] = {{"gained", gained},
                  {"lost", lost},
                  {"reward_up", up},
                  {"reward_down", down},
                  {"both_correct", ratio_n},
                  {"geomean_b_over_a", ratio_n ? Json(std::exp(log_ratio_sum / ratio_n)) : Json(nullptr)}};
  return c;
}

namespace {

std::string pct(const Json& v) {
  if (!v.is_number()) return "n/a";
  char b[32];
  std::snprintf(b, sizeof b, "%.1f%%", 100 * v.get<double>());
  return b;
}
std::string times(const Json& v) {
  if (!v.is_number()) return "n/a";
  char b[32];
  std::snprintf(b, sizeof b, "%.2fx", v.get<double>());
  return b;
}
std::string num(const Json& v) {
  if (!v.is_number()) return "n/a";
  char b[32];
  if (v.is_number_integer()) std::snprintf(b, sizeof b, "%lld", static_cast<long long>(v.get<int64_t>()));
  else std::snprintf(b, sizeof b, "%.2f", v.get<double>());
  return b;
}
std::string delta(const Json& a, const Json& b, bool percent_points) {
  if (!a.is_number() || !b.is_number()) return "";
  double d = b.get<double>() - a.get<double>();
  char buf[32];
  if (percent_points) std::snprintf(buf, sizeof buf, "%+.1f pt", 100 * d);
  else std::snprintf(buf, sizeof buf, "%+.2f", d);
  return buf;
}
std::string cell(std::string s) {
  std::string o;
  for (char ch : s) o += ch == '|' ? std::string("\\|") : ch == '\n' ? std::string(" ") : std::string(1, ch);
  return o;
}
std::string side_text(const Json& s) {
  if (s.is_null()) return "(absent)";
  std::string t = s.value("outcome", std::string("?")) + " r" + std::to_string(s.value("reward", -1));
  if (s.value("speedup_eager", Json()).is_number()) t += " " + times(s["speedup_eager"]) + "e";
  if (s.value("speedup_compile", Json()).is_number()) t += " " + times(s["speedup_compile"]) + "c";
  return t;
}

}  // namespace

std::string render_comparison(const Json& c) {
  std::string A = c["a"].value("label", std::string("A")), B = c["b"].value("label", std::string("B"));
  std::string s = "# anvil bench compare: A = " + cell(A) + ", B = " + cell(B) + "\n\n";
  s += "A: `" + c["a"].value("out", std::string("?")) + "`  \nB: `" + c["b"].value("out", std::string("?")) + "`\n\n";
  if (!c["setup_differences"].empty()) {
    s += "**The setups differ**; speed numbers are not comparable across them:\n\n";
    for (auto& [k, v] : c["setup_differences"].items()) s += "- " + k + ": A " + json_text(v["a"]) + ", B " + json_text(v["b"]) + "\n";
    s += "\n";
  } else {
    s += "Same setup (GPU, driver, CUDA, torch, triton, compile mode, TF32, tolerances, timing).\n\n";
  }
  struct Metric {
    const char* key;
    const char* name;
    int kind;  // 0 rate, 1 speedup, 2 number
  };
  const Metric metrics[] = {{"tasks", "tasks", 2},
                            {"pass_rate", "pass", 0},
                            {"faster_than_eager_rate", "faster than eager", 0},
                            {"faster_than_compile_rate", "faster than compile", 0},
                            {"fast_1_compile", "fast_1 vs compile", 0},
                            {"geomean_eager_correct", "geomean vs eager (correct)", 1},
                            {"geomean_compile_correct", "geomean vs compile (correct)", 1},
                            {"geomean_eager_all", "geomean vs eager (all, failed = 1x)", 1},
                            {"geomean_compile_all", "geomean vs compile (all, failed = 1x)", 1},
                            {"median_eager", "median vs eager", 1},
                            {"mean_reward", "mean reward", 2}};
  s += "## Per level\n\n";
  for (const auto& l : c["levels"]) {
    s += "### " + cell(l.value("level", std::string())) + "\n\n| metric | A | B | B - A |\n|---|---|---|---|\n";
    for (const auto& m : metrics) {
      Json va = l["a"].is_object() ? l["a"].value(m.key, Json()) : Json();
      Json vb = l["b"].is_object() ? l["b"].value(m.key, Json()) : Json();
      auto f = m.kind == 0 ? pct : m.kind == 1 ? times : num;
      s += std::string("| ") + m.name + " | " + f(va) + " | " + f(vb) + " | " + delta(va, vb, m.kind == 0) + " |\n";
    }
    s += "\n";
  }
  const Json& sum = c["summary"];
  s += "## Per task\n\n";
  s += "Gained (wrong in A, correct in B): " + std::to_string(sum.value("gained", 0)) +
       "; lost: " + std::to_string(sum.value("lost", 0)) + "; reward up: " + std::to_string(sum.value("reward_up", 0)) +
       "; reward down: " + std::to_string(sum.value("reward_down", 0)) + ". Correct in both: " +
       std::to_string(sum.value("both_correct", 0)) + ", geomean of B's speedup over A's: " +
       times(sum["geomean_b_over_a"]) + ".\n\n";
  if (c["changed"].empty()) {
    s += "No task changed outcome or reward.\n\n";
  } else {
    s += "### Tasks that changed\n\n| task | A | B | change |\n|---|---|---|---|\n";
    for (const auto& t : c["changed"]) {
      s += "| " + cell(t.value("level", std::string()) + "/" + std::to_string(t.value("id", 0L)) + "_" +
                       t.value("name", std::string())) +
           " | " + side_text(t["a"]) + " | " + side_text(t["b"]) + " | " + t.value("change", std::string()) + " |\n";
    }
    s += "\n";
  }
  s += "### All tasks\n\n| task | A | B | B/A (eager speedup) |\n|---|---|---|---|\n";
  for (const auto& t : c["tasks"]) {
    s += "| " + cell(t.value("level", std::string()) + "/" + std::to_string(t.value("id", 0L)) + "_" +
                     t.value("name", std::string())) +
         " | " + side_text(t["a"]) + " | " + side_text(t["b"]) + " | " + times(t.value("b_over_a", Json())) + " |\n";
  }
  s += "\n(r: reward; e: speedup vs eager; c: speedup vs torch.compile)\n";
  return s;
}

}  // namespace anvil
