// metrics.cpp: the suite's metrics, from per-task rows.
#include "anvil/bench/metrics.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <string>

namespace anvil {
using Json = nlohmann::json;

namespace {

std::optional<double> speedup(const Json& row, const char* key) {
  auto it = row.find(key);
  if (it == row.end() || !it->is_number()) return std::nullopt;
  double v = it->get<double>();
  if (!std::isfinite(v) || v <= 0) return std::nullopt;
  return v;
}

bool correct(const Json& row) { return row.value("correct", false) == true; }

Json or_null(std::optional<double> v) { return v ? Json(*v) : Json(nullptr); }

// Everything for one baseline ("eager" or "compile").
struct Series {
  std::vector<double> correct_speedups;  // correct tasks with this speedup measured
  bool any_measured = false;
};

// which: "eager" or "compile". The baseline counts as measured when any row
// has its time or a speedup against it (a run whose tasks all failed still
// measured its baselines: its rates are 0, not undefined).
Series series(const std::vector<Json>& rows, const std::string& which) {
  Series s;
  std::string key = "speedup_" + which, ms = which + "_ms";
  for (const auto& r : rows) {
    auto v = speedup(r, key.c_str());
    if (v || speedup(r, ms.c_str())) s.any_measured = true;
    if (v && correct(r)) s.correct_speedups.push_back(*v);
  }
  return s;
}

std::optional<double> geomean(const std::vector<double>& v) {
  if (v.empty()) return std::nullopt;
  double sum = 0;
  for (double x : v) sum += std::log(x);
  return std::exp(sum / static_cast<double>(v.size()));
}

std::optional<double> median(std::vector<double> v) {
  if (v.empty()) return std::nullopt;
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

}  // namespace

Json compute_metrics(const std::vector<Json>& rows) {
  size_t n = rows.size();
  Json outcomes = Json::object();
  Json rewards = {{"-1", 0}, {"1", 0}, {"2", 0}, {"3", 0}};
  size_t n_correct = 0;
  double reward_sum = 0;
  for (const auto& r : rows) {
    std::string o = r.value("outcome", std::string("not_evaluated"));
    outcomes[o] = outcomes.value(o, 0) + 1;
    int rw = correct(r) ? r.value("reward", 1) : -1;
    rewards[std::to_string(rw)] = rewards.value(std::to_string(rw), 0) + 1;
    reward_sum += rw;
    if (correct(r)) ++n_correct;
  }
  auto rate = [&](size_t k) { return n == 0 ? Json(nullptr) : Json(static_cast<double>(k) / static_cast<double>(n)); };
  Json m = {{"tasks", n}, {"outcomes", outcomes}, {"rewards", rewards}, {"pass_rate", rate(n_correct)}};
  m["mean_reward"] = n == 0 ? Json(nullptr) : Json(reward_sum / static_cast<double>(n));
  Json fast = Json::object(), geo = Json::object(), med = Json::object(), measured = Json::object();
  for (const char* which : {"eager", "compile"}) {
    Series s = series(rows, which);
    measured[which] = s.correct_speedups.size();
    // Without any measurement of this baseline (a CPU run has no torch.compile
    // time) its metrics are undefined, not zero.
    if (!s.any_measured) {
      fast[which] = nullptr;
      geo[which] = {{"correct", nullptr}, {"all", nullptr}};
      med[which] = nullptr;
      m[std::string("faster_than_") + which + "_rate"] = nullptr;
      continue;
    }
    auto count_above = [&](double p) {
      return static_cast<size_t>(std::count_if(s.correct_speedups.begin(), s.correct_speedups.end(),
                                               [&](double v) { return v > p; }));
    };
    // fast_0 is the pass rate: every correct task is "faster than 0", measured or not.
    fast[which] = {{"0", rate(n_correct)}, {"1", rate(count_above(1.0))}, {"1.5", rate(count_above(1.5))},
                   {"2", rate(count_above(2.0))}};
    m[std::string("faster_than_") + which + "_rate"] = rate(count_above(kFasterThreshold));
    // Over all tasks: a task without a measured correct solution counts as 1.0x.
    std::vector<double> all = s.correct_speedups;
    all.resize(n, 1.0);
    geo[which] = {{"correct", or_null(geomean(s.correct_speedups))}, {"all", or_null(geomean(all))}};
    med[which] = or_null(median(s.correct_speedups));
  }
  m["fast_p"] = fast;
  m["geomean"] = geo;
  m["median"] = med;
  m["measured"] = measured;
  return m;
}

Json metric_rules() {
  return {
      {"pass_rate", "correct tasks / all tasks (a missing or unevaluated solution is a failed task)"},
      {"faster", more_than_faster() + ", as the reward: speedup > " + faster_threshold(true) +
                     " (speedup = baseline time / solution time)"},
      {"fast_p", "KernelBench: (correct and speedup > p) / all tasks; fast_0 is the pass rate"},
      {"geomean_correct", "geometric mean of the speedups of the correct tasks"},
      {"geomean_all", "geometric mean over all tasks, a task without a correct solution counted as 1.0x (the "
                      "reference is kept)"},
      {"median", "median speedup of the correct tasks"},
      {"mean_reward", "mean milestone reward over all tasks (-1 wrong or missing, 1 correct, 2 faster than "
                      "eager, 3 faster than eager and torch.compile)"},
      {"compile", "compile metrics are n/a: no torch.compile time was measured (--compile-mode none, or "
                  "torch.compile failed on every task)"},
  };
}

}  // namespace anvil
