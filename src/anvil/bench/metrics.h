// metrics.h: the paper's metrics over a set of per-task rows (docs/bench.md,
// "metrics"): pass rate, faster-than-eager/compile rates as the reward defines
// them, KernelBench's fast_p, geometric-mean and median speedups, mean
// reward, and the count of each outcome; with the agent, the model's usage
// (tokens as the server counted them) and its cost at the run's prices.
#pragma once

#include "anvil/env/reward.h"

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace anvil {

// "Faster", as the reward: a speed-up above kFasterThreshold of env/reward.h.

// Rows need `outcome`, `correct`, `reward`, `speedup_eager`, `speedup_compile`
// (numbers or null), and may have `eager_ms`, `compile_ms`: a baseline's
// metrics are null when no row measured it. Every row is one task of N:
// missing and not-evaluated tasks count as failed. Rows of an agent run also
// have `usage` and `cost_usd`; the metrics then have `usage` (usage_totals).
nlohmann::json compute_metrics(const std::vector<nlohmann::json>& rows);

// A model's prices, USD per million tokens (`anvil bench --price-input/--price-output`).
struct Pricing {
  double input_per_mtok = 0;   // per million prompt tokens
  double output_per_mtok = 0;  // per million completion tokens
  nlohmann::json to_json() const;  // {"input_usd_per_mtok", "output_usd_per_mtok"}
};

// A price as given on the command line: a finite, non-negative decimal number
// ("3", "0.15", "1e-1"), the whole text; nullopt with *err naming `flag` and
// what is wrong with `text` otherwise.
std::optional<double> parse_price(const std::string& flag, const std::string& text, std::string* err);

// An episode's usage, from its trajectory (docs/trajectory.md): {"turns",
// "reported_turns" (turns whose answer carried the server's `usage`),
// "prompt_tokens", "completion_tokens"} summed over those turns. The sums are
// null when no turn of an episode that had turns was reported: a server that
// counts nothing is "not reported", never 0.
nlohmann::json episode_usage(const nlohmann::json& trajectory);

// A task's cost in USD: its usage's tokens at `pricing` (a Pricing's JSON);
// null without prices or without reported tokens (no cost is not a cost of 0).
nlohmann::json task_cost(const nlohmann::json& usage, const nlohmann::json& pricing);

// The usage of a set of rows: {"episodes" (rows with a usage), "turns",
// "reported_turns", "prompt_tokens", "completion_tokens", "cost_usd"}, the
// sums over the rows that have them (null when none has); null when no row
// has a `usage` key (a run without the agent).
nlohmann::json usage_totals(const std::vector<nlohmann::json>& rows);

// The definitions behind the numbers, as the report states them; with `usage`
// (an agent run), those of the tokens and the cost too.
nlohmann::json metric_rules(bool usage = false);

}  // namespace anvil
