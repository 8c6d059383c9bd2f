// metrics.cpp: the suite's metrics, from per-task rows.
#include "anvil/bench/metrics.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
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
  if (Json u = usage_totals(rows); !u.is_null()) m["usage"] = u;
  return m;
}

Json Pricing::to_json() const {
  return {{"input_usd_per_mtok", input_per_mtok}, {"output_usd_per_mtok", output_per_mtok}};
}

std::optional<double> parse_price(const std::string& flag, const std::string& text, std::string* err) {
  const std::string what = " (USD per million tokens, e.g. 3 or 0.15)";
  // Decimal notation only: strtod alone would also take "inf", "nan" and hexadecimal.
  bool decimal = !text.empty() && text.find_first_not_of("0123456789.eE+-") == std::string::npos &&
                 text.find_first_of("0123456789") != std::string::npos;
  char* end = nullptr;
  errno = 0;
  double v = decimal ? std::strtod(text.c_str(), &end) : 0;
  if (!decimal || end != text.c_str() + text.size()) {
    *err = flag + " '" + text + "': not a number" + what;
    return std::nullopt;
  }
  if (errno == ERANGE || !std::isfinite(v)) {
    *err = flag + " " + text + ": out of range" + what;
    return std::nullopt;
  }
  if (v < 0) {
    *err = flag + " " + text + ": a price cannot be negative" + what;
    return std::nullopt;
  }
  return v;
}

namespace {

// A token count the server reported: a non-negative integer, else nothing.
std::optional<long> token_count(const Json& usage, const char* key) {
  if (!usage.is_object()) return std::nullopt;
  auto it = usage.find(key);
  if (it == usage.end() || !(it->is_number_integer() || it->is_number_unsigned())) return std::nullopt;
  long v = it->get<long>();
  return v >= 0 ? std::optional<long>(v) : std::nullopt;
}

}  // namespace

Json episode_usage(const Json& trajectory) {
  long turns = 0, reported = 0, prompt = 0, completion = 0;
  auto it = trajectory.is_object() ? trajectory.find("turns") : trajectory.end();
  if (trajectory.is_object() && it != trajectory.end() && it->is_array()) {
    for (const auto& t : *it) {
      ++turns;
      const Json& u = t.is_object() ? t.value("usage", Json()) : Json();
      auto p = token_count(u, "prompt_tokens"), c = token_count(u, "completion_tokens");
      if (!p && !c) continue;  // no usage, or none anvil can read: not reported
      ++reported;
      prompt += p.value_or(0);
      completion += c.value_or(0);
    }
  }
  bool none = turns > 0 && reported == 0;
  return {{"turns", turns},
          {"reported_turns", reported},
          {"prompt_tokens", none ? Json(nullptr) : Json(prompt)},
          {"completion_tokens", none ? Json(nullptr) : Json(completion)}};
}

Json task_cost(const Json& usage, const Json& pricing) {
  if (!pricing.is_object() || !usage.is_object()) return nullptr;
  auto p = token_count(usage, "prompt_tokens"), c = token_count(usage, "completion_tokens");
  if (!p || !c) return nullptr;
  return (static_cast<double>(*p) * pricing.value("input_usd_per_mtok", 0.0) +
          static_cast<double>(*c) * pricing.value("output_usd_per_mtok", 0.0)) /
         1e6;
}

Json usage_totals(const std::vector<Json>& rows) {
  if (std::none_of(rows.begin(), rows.end(), [](const Json& r) { return r.contains("usage"); })) return nullptr;
  long episodes = 0, turns = 0, reported = 0;
  std::optional<long> prompt, completion;
  std::optional<double> cost;
  for (const auto& r : rows) {
    const Json& u = r.value("usage", Json());
    if (!u.is_object()) continue;  // the episode did not start: nothing was asked of the model
    ++episodes;
    turns += token_count(u, "turns").value_or(0);
    reported += token_count(u, "reported_turns").value_or(0);
    if (auto p = token_count(u, "prompt_tokens")) prompt = prompt.value_or(0) + *p;
    if (auto c = token_count(u, "completion_tokens")) completion = completion.value_or(0) + *c;
    const Json& c = r.value("cost_usd", Json());
    if (c.is_number()) cost = cost.value_or(0.0) + c.get<double>();
  }
  auto or_null_l = [](std::optional<long> v) { return v ? Json(*v) : Json(nullptr); };
  return {{"episodes", episodes},
          {"turns", turns},
          {"reported_turns", reported},
          {"prompt_tokens", or_null_l(prompt)},
          {"completion_tokens", or_null_l(completion)},
          {"cost_usd", or_null(cost)}};
}

Json metric_rules(bool usage) {
  Json rules = {
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
  if (!usage) return rules;
  rules["tokens"] = "the agent's prompt and completion tokens as the model server counted them (each answer's "
                    "usage), summed over an episode's turns; not reported: the server sent no usage";
  rules["cost_usd"] = "prompt tokens x the input price + completion tokens x the output price (USD per million "
                      "tokens, --price-input and --price-output), at list price (no cached-prompt discount); none "
                      "without prices or without reported tokens";
  return rules;
}

}  // namespace anvil
