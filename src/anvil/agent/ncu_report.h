// ncu_report.h: what the agent's ncu_profile tool says of Nsight Compute's measurements of one
// forward call (`ncu --csv --page raw` with the tool's metrics): the kernels by GPU time, each with
// its launch, throughput, occupancy and what limits it. Pure: the tool runs ncu (tools.cpp).
#pragma once

#include <cstddef>
#include <optional>
#include <string>

namespace anvil {

// The metrics ncu_profile asks ncu for, comma-separated.
const std::string& ncu_metrics();

struct NcuReport {
  std::string text;     // the tool's answer
  size_t kernels = 0;   // kernel launches profiled
  double gpu_ns = 0;    // their GPU time
};
// ncu's CSV (a header row of column names, a row of units, a row per kernel); the `top` kernels by
// time described. nullopt when no kernel row is there.
std::optional<NcuReport> ncu_report(const std::string& csv, size_t top);

}  // namespace anvil
