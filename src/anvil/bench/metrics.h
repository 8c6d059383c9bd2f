// metrics.h: the paper's metrics over a set of per-task rows (docs/bench.md,
// "metrics"): pass rate, faster-than-eager/compile rates as the reward defines
// them, KernelBench's fast_p, geometric-mean and median speedups, mean
// reward, and the count of each outcome.
#pragma once

#include "anvil/env/reward.h"

#include <vector>

#include <nlohmann/json.hpp>

namespace anvil {

// "Faster", as the reward: a speed-up above kFasterThreshold of env/reward.h.

// Rows need `outcome`, `correct`, `reward`, `speedup_eager`, `speedup_compile`
// (numbers or null), and may have `eager_ms`, `compile_ms`: a baseline's
// metrics are null when no row measured it. Every row is one task of N:
// missing and not-evaluated tasks count as failed.
nlohmann::json compute_metrics(const std::vector<nlohmann::json>& rows);

// The definitions behind the numbers, as the report states them.
nlohmann::json metric_rules();

}  // namespace anvil
