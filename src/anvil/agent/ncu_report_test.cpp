// ncu_profile's reading of Nsight Compute's CSV (ncu_report.h), on a CSV of ncu's shape: no GPU.
#include "anvil/agent/ncu_report.h"

#include <gtest/gtest.h>

namespace anvil {
namespace {

// ncu --csv --page raw: names, units, then one row per kernel (values may carry thousands commas).
const char* kCsv =
    "==PROF== Connected to process 12\n"
    "\"ID\",\"Kernel Name\",\"gpu__time_duration.sum\",\"dram__bytes.sum.per_second\","
    "\"gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed\","
    "\"sm__throughput.avg.pct_of_peak_sustained_elapsed\",\"sm__warps_active.avg.pct_of_peak_sustained_active\","
    "\"sm__maximum_warps_per_active_cycle_pct\",\"launch__registers_per_thread\",\"launch__block_size\","
    "\"launch__grid_size\",\"launch__occupancy_limit_registers\",\"launch__occupancy_limit_shared_mem\","
    "\"launch__occupancy_limit_warps\",\"launch__occupancy_limit_blocks\"\n"
    "\"\",\"\",\"usecond\",\"Tbyte/second\",\"%\",\"%\",\"%\",\"%\",\"register/thread\",\"\",\"\",\"block\",\"block\","
    "\"block\",\"block\"\n"
    "\"0\",\"small_kernel(float*)\",\"2.5\",\"0.5\",\"20\",\"10\",\"30\",\"100\",\"32\",\"256\",\"64\",\"8\",\"16\","
    "\"8\",\"32\"\n"
    "\"1\",\"big_kernel(float const*, float*)\",\"1,250.0\",\"3.1\",\"91\",\"35\",\"80\",\"100\",\"40\",\"512\","
    "\"1,056\",\"3\",\"4\",\"4\",\"32\"\n";

TEST(NcuReport, KernelsByTimeWithTheirLimiter) {
  auto r = ncu_report(kCsv, 5);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->kernels, 2u);
  EXPECT_DOUBLE_EQ(r->gpu_ns, 1252.5e3);
  const std::string& t = r->text;
  EXPECT_EQ(t.find("2 kernel launches in one forward call, 1252.5 us of GPU time"), 0u) << t;
  size_t big = t.find("1. big_kernel"), small = t.find("2. small_kernel");
  ASSERT_NE(big, std::string::npos) << t;
  ASSERT_NE(small, std::string::npos) << t;
  EXPECT_LT(big, small);
  EXPECT_NE(t.find("grid 1056, block 512, 40 regs/thread"), std::string::npos) << t;
  EXPECT_NE(t.find("DRAM 3100 GB/s, memory throughput 91% of peak"), std::string::npos) << t;
  EXPECT_NE(t.find("limiter: memory-bound"), std::string::npos) << t;
  EXPECT_NE(t.find("occupancy limited by registers (3 blocks per SM)"), std::string::npos) << t;
  EXPECT_NE(t.find("limiter: latency-bound"), std::string::npos) << t;  // the small one: 20% and 10%
}

TEST(NcuReport, TopLimitsTheKernelsDescribed) {
  auto r = ncu_report(kCsv, 1);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->kernels, 2u);
  EXPECT_EQ(r->text.find("small_kernel"), std::string::npos) << r->text;
}

TEST(NcuReport, NoKernelRowIsNoReport) {
  EXPECT_FALSE(ncu_report("", 5));
  EXPECT_FALSE(ncu_report("==PROF== No kernels were profiled.\n\"ID\",\"Kernel Name\"\n\"\",\"\"\n", 5));
  EXPECT_NE(ncu_metrics().find("gpu__time_duration.sum,dram__bytes.sum.per_second"), std::string::npos);
}

}  // namespace
}  // namespace anvil
