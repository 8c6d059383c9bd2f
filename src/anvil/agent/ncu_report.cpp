#include "anvil/agent/ncu_report.h"

#include <algorithm>
#include <cstdio>
#include <vector>

#include "anvil/util/strings.h"

namespace anvil {

namespace {

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

}  // namespace

const std::string& ncu_metrics() {
  static const char* kMetrics[] = {
      "gpu__time_duration.sum",
      "dram__bytes.sum.per_second",
      "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed",
      "sm__throughput.avg.pct_of_peak_sustained_elapsed",
      "sm__warps_active.avg.pct_of_peak_sustained_active",
      "sm__maximum_warps_per_active_cycle_pct",
      "launch__registers_per_thread",
      "launch__block_size",
      "launch__grid_size",
      "launch__occupancy_limit_registers",
      "launch__occupancy_limit_shared_mem",
      "launch__occupancy_limit_warps",
      "launch__occupancy_limit_blocks",
      "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active",
  };
  static const std::string joined = [] {
    std::string m;
    for (const char* name : kMetrics) m += std::string(m.empty() ? "" : ",") + name;
    return m;
  }();
  return joined;
}

std::optional<NcuReport> ncu_report(const std::string& csv, size_t top) {
  // The CSV: a header row of column names, a row of units, then one row per kernel.
  std::vector<std::vector<std::string>> rows;
  for (const auto& line : split_lines(csv)) {
    if (!starts_with(line, "\"")) continue;
    std::vector<std::string> cells;
    std::string cell;
    bool quoted = false;
    for (char c : line) {
      if (c == '"') quoted = !quoted;
      else if (c == ',' && !quoted) cells.push_back(std::move(cell)), cell.clear();
      else cell += c;
    }
    cells.push_back(cell);
    rows.push_back(std::move(cells));
  }
  if (rows.size() < 3) return std::nullopt;
  const auto& head = rows[0];
  const auto& units = rows[1];
  auto col = [&](const std::string& name) -> int {
    for (size_t i = 0; i < head.size(); ++i) {
      if (head[i] == name) return static_cast<int>(i);
    }
    return -1;
  };
  auto value = [&](const std::vector<std::string>& row, const std::string& name) -> std::optional<double> {
    int c = col(name);
    if (c < 0 || c >= static_cast<int>(row.size())) return std::nullopt;
    try {
      std::string v = replace_all(row[c], ",", "");
      return std::stod(v);
    } catch (...) {
      return std::nullopt;
    }
  };
  auto unit = [&](const std::string& name) {
    int c = col(name);
    return c >= 0 && c < static_cast<int>(units.size()) ? units[c] : std::string();
  };
  struct K {
    std::string name;
    double ns;
    std::vector<std::string> row;
  };
  std::vector<K> kernels;
  for (size_t i = 2; i < rows.size(); ++i) {
    double t = value(rows[i], "gpu__time_duration.sum").value_or(0);
    std::string u = unit("gpu__time_duration.sum");
    double ns = u == "usecond" ? t * 1e3 : u == "msecond" ? t * 1e6 : u == "second" ? t * 1e9 : t;
    int kc = col("Kernel Name");
    kernels.push_back({kc >= 0 && kc < static_cast<int>(rows[i].size()) ? rows[i][kc] : "?", ns, rows[i]});
  }
  double total = 0;
  for (const auto& k : kernels) total += k.ns;
  std::sort(kernels.begin(), kernels.end(), [](const K& x, const K& y) { return x.ns > y.ns; });
  std::string s = std::to_string(kernels.size()) + " kernel launches in one forward call, " +
                  fmt("%.1f us", total / 1e3) + " of GPU time; by time:\n";
  for (size_t i = 0; i < kernels.size() && i < top; ++i) {
    const auto& k = kernels[i];
    std::string name = k.name.size() > 90 ? k.name.substr(0, 90) + "..." : k.name;
    s += std::to_string(i + 1) + ". " + name + "\n   " + fmt("%.1f us", k.ns / 1e3) +
         fmt(" (%.0f%% of GPU time)", total > 0 ? 100 * k.ns / total : 0);
    if (auto g = value(k.row, "launch__grid_size")) s += fmt(", grid %.0f", *g);
    if (auto b = value(k.row, "launch__block_size")) s += fmt(", block %.0f", *b);
    if (auto reg = value(k.row, "launch__registers_per_thread")) s += fmt(", %.0f regs/thread", *reg);
    s += "\n";
    auto bw = value(k.row, "dram__bytes.sum.per_second");
    std::string bwu = unit("dram__bytes.sum.per_second");
    double scale = bwu == "Tbyte/second" ? 1e12 : bwu == "Gbyte/second" ? 1e9 : bwu == "Mbyte/second" ? 1e6
                 : bwu == "Kbyte/second" ? 1e3 : 1;
    auto mem = value(k.row, "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed");
    auto sm = value(k.row, "sm__throughput.avg.pct_of_peak_sustained_elapsed");
    auto occ = value(k.row, "sm__warps_active.avg.pct_of_peak_sustained_active");
    auto theo = value(k.row, "sm__maximum_warps_per_active_cycle_pct");
    auto tc = value(k.row, "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active");
    s += "   DRAM " + (bw ? fmt("%.0f GB/s", *bw * scale / 1e9) : std::string("?")) + ", memory throughput " +
         (mem ? fmt("%.0f%%", *mem) : std::string("?")) + " of peak, compute (SM) " +
         (sm ? fmt("%.0f%%", *sm) : std::string("?")) + (tc && *tc >= 5 ? fmt(", tensor cores %.0f%%", *tc) : "") +
         "; occupancy " + (occ ? fmt("%.0f%%", *occ) : std::string("?")) + " achieved of " +
         (theo ? fmt("%.0f%%", *theo) : std::string("?")) + " theoretical\n";
    std::string limiter;
    if (mem && sm) {
      if (*mem < 40 && *sm < 40) limiter = "latency-bound (neither memory nor compute is busy: too little parallelism or "
                                           "too many dependent steps)";
      else if (*mem >= *sm) limiter = "memory-bound (cut bytes moved: fuse, reuse through shared memory, vector loads)";
      else limiter = "compute-bound (cut instructions: tensor cores, cheaper math, less index arithmetic)";
    }
    std::vector<std::pair<std::string, double>> limits;
    for (const char* l : {"registers", "shared_mem", "warps", "blocks"}) {
      if (auto v = value(k.row, std::string("launch__occupancy_limit_") + l)) limits.push_back({l, *v});
    }
    if (!limits.empty()) {
      auto m = std::min_element(limits.begin(), limits.end(), [](auto& x, auto& y) { return x.second < y.second; });
      limiter += std::string(limiter.empty() ? "" : "; ") + "occupancy limited by " + m->first +
                 fmt(" (%.0f blocks per SM)", m->second);
    }
    if (!limiter.empty()) s += "   limiter: " + limiter + "\n";
  }
  return NcuReport{s, kernels.size(), total};
}

}  // namespace anvil
