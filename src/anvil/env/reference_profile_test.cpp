// Tests of the reference's profile: its text from canned reports (ReferenceProfileText, no Python),
// and profile_reference on a real task on the CPU: measured once, then from the cache; a task whose
// reference raises is a task error; a bad device is refused (ReferenceProfile).
#include "anvil/env/reference_profile.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>

#include "anvil/env/reward.h"
#include "support/test_env.h"
#include "anvil/util/fs.h"

namespace anvil {
namespace {

using Json = nlohmann::json;

// A GPU report as python/anvil/reference_profile.py writes one.
Json gpu_report() {
  return Json::parse(R"({
    "status": "done", "device": "cuda", "gpu": "NVIDIA H100 80GB HBM3", "torch": "2.11.0",
    "method": {"timing": "cuda_events", "warmup": 10, "calls": 30, "flush_l2": true, "input_sets": 3},
    "eager": {"ms": 2.0, "min_ms": 1.9, "kernel_sum_ms": 1.8, "launches": 3,
              "kernels": [{"name": "sm90_xmma_gemm_f32f32", "launches": 1, "ms": 1.2, "share": 0.6667},
                          {"name": "vectorized_elementwise_kernel<gelu>", "launches": 2, "ms": 0.6, "share": 0.3333}]},
    "compile": {"ms": 1.5, "min_ms": 1.45, "kernel_sum_ms": 1.4, "launches": 2,
                "kernels": [{"name": "triton_poi_fused_gelu_0", "launches": 1, "ms": 0.3, "share": 0.2143}]},
    "work": {"flops": 50000000000, "bytes": 1000000000, "input_bytes": 400000000, "parameter_bytes": 200000000,
             "output_bytes": 400000000},
    "peaks": {"bandwidth_bytes_per_s": 2.5e12, "fp32_flops_per_s": 5e13}})");
}

TEST(ReferenceProfileText, TimesTargetsWorkFloorAndKernels) {
  std::string t = reference_profile_text(gpu_report());
  EXPECT_NE(t.find("NVIDIA H100 80GB HBM3, median of 30 calls after 10 warm-up calls"), std::string::npos) << t;
  EXPECT_NE(t.find("eager          2.0000 ms  (GPU busy 1.8000 ms, 3 kernel launches a call)"), std::string::npos) << t;
  EXPECT_NE(t.find("torch.compile  1.5000 ms  (GPU busy 1.4000 ms, 2 kernel launches a call)"), std::string::npos) << t;
  EXPECT_NE(t.find("torch.compile  1.5000 ms"), std::string::npos) << t;
  // The next milestones from the faster baseline, at the reward's own threshold.
  char three[64], two[64];
  std::snprintf(three, sizeof three, "under %.4f ms", 1.5 / kFasterThreshold);
  std::snprintf(two, sizeof two, "under %.4f ms", 2.0 / kFasterThreshold);
  EXPECT_NE(t.find(std::string("To earn 3 (") + more_than_faster() + " than both): " + three), std::string::npos) << t;
  EXPECT_NE(t.find(two), std::string::npos) << t;
  // 1 GB at 2.5 TB/s: 0.4 ms; 50 GFLOP at 50 TFLOP/s: 1 ms: compute-bound, eager (2 ms) at half the speed of light.
  EXPECT_NE(t.find("50.00 GFLOP in matrix products and convolutions"), std::string::npos) << t;
  EXPECT_NE(t.find("1.00 GB moved at least (inputs 400.0 MB, parameters 200.0 MB, outputs 400.0 MB, each once)"),
            std::string::npos) << t;
  EXPECT_NE(t.find("Roofline floor: 1.0000 ms, compute-bound"), std::string::npos) << t;
  EXPECT_NE(t.find("Eager reaches 50.0% of the floor's speed"), std::string::npos) << t;
  EXPECT_EQ(t.find("below this floor"), std::string::npos) << t;  // 3 asks for 1.43 ms, above the 1 ms floor
  EXPECT_NE(t.find("at 2500 GB/s measured: 0.4000 ms"), std::string::npos) << t;
  EXPECT_NE(t.find("   66.7%  1.2000 ms  x1  sm90_xmma_gemm_f32f32"), std::string::npos) << t;
  EXPECT_NE(t.find("torch.compile's kernels"), std::string::npos) << t;
  EXPECT_LT(t.find("eager's kernels"), t.find("torch.compile's kernels"));
}

TEST(ReferenceProfileText, MemoryBoundFloorAndEagersShareOfIt) {
  Json r = gpu_report();
  r["work"]["flops"] = 0;
  std::string t = reference_profile_text(r);
  EXPECT_NE(t.find("no matrix product or convolution"), std::string::npos) << t;
  EXPECT_NE(t.find("Roofline floor: 0.4000 ms, memory-bound"), std::string::npos) << t;
  EXPECT_NE(t.find("Eager reaches 20.0% of the floor's speed"), std::string::npos) << t;  // 0.4 / 2.0
  EXPECT_EQ(t.find("TFLOP/s fp32 measured"), std::string::npos) << t;  // no FLOPs: no compute term
  // torch.compile already at the floor (as 01_elementwise_chain on an H100): 3 is out of reach.
  r["compile"]["ms"] = 0.41;
  t = reference_profile_text(r);
  char three[64];
  std::snprintf(three, sizeof three, "Reward 3 asks for under %.4f ms, below this floor", 0.41 / kFasterThreshold);
  EXPECT_NE(t.find(three), std::string::npos) << t;
}

TEST(ReferenceProfileText, WhatWasNotMeasuredIsSaid) {
  Json r = gpu_report();
  r["compile"] = {{"error", "BackendCompilerFailed: inductor raised"}};
  r["work"] = {{"error", "RuntimeError: no flop count"}};
  r.erase("peaks");
  std::string t = reference_profile_text(r);
  EXPECT_NE(t.find("torch.compile  failed: BackendCompilerFailed: inductor raised"), std::string::npos) << t;
  EXPECT_NE(t.find("To earn 2 (" + more_than_faster() + " than eager): under"), std::string::npos) << t;
  EXPECT_EQ(t.find("To earn 3"), std::string::npos) << t;  // no compile time: no target for 3 is made up
  EXPECT_NE(t.find("Work of one call: not counted (RuntimeError: no flop count)"), std::string::npos) << t;
  EXPECT_EQ(t.find("Roofline floor"), std::string::npos) << t;
  r["compile"] = nullptr;
  EXPECT_NE(reference_profile_text(r).find("torch.compile  not measured (compile mode none)"), std::string::npos);
}

TEST(ReferenceProfileText, ADisturbedProfileIsNotKept) {
  Json r = gpu_report();
  r["eager"]["p25_ms"] = 1.98;
  r["eager"]["p75_ms"] = 2.02;  // 2% of the median: clean
  r["compile"]["p25_ms"] = 1.49;
  r["compile"]["p75_ms"] = 1.51;
  EXPECT_EQ(unclean_reference_profile(r), "");
  r["compile"]["p75_ms"] = 1.9;  // 27%: another's work beside it
  EXPECT_NE(unclean_reference_profile(r).find("compile: its samples spread 27%"), std::string::npos)
      << unclean_reference_profile(r);
  r["not_kept"] = unclean_reference_profile(r);
  EXPECT_NE(reference_profile_text(r).find("(Measured on a busy machine, not kept: compile: its samples spread"),
            std::string::npos);
  r["device"] = "cpu";  // the CPU's rule has no spread limit
  EXPECT_EQ(unclean_reference_profile(r), "");
}

TEST(ReferenceProfileText, TopRowsAndTheRewardsTime) {
  Json r = gpu_report();
  std::string one = reference_profile_text(r, 1);
  EXPECT_NE(one.find("sm90_xmma_gemm_f32f32"), std::string::npos) << one;
  EXPECT_EQ(one.find("vectorized_elementwise_kernel"), std::string::npos) << one;
  EXPECT_NE(one.find("(1 more; top shows more)"), std::string::npos) << one;
  // --timing kernel-sum: the targets come from the GPU busy time the reward compares.
  r["method"]["reward_time"] = "kernel-sum";
  std::string ks = reference_profile_text(r);
  char three[64];
  std::snprintf(three, sizeof three, "under %.4f ms", 1.4 / kFasterThreshold);
  EXPECT_NE(ks.find(std::string("To earn 3 (") + more_than_faster() + " than both): " + three), std::string::npos) << ks;
  EXPECT_NE(ks.find("--timing kernel-sum"), std::string::npos) << ks;
}

TEST(ReferenceProfileText, OnTheCpuOpsByTime) {
  Json r = gpu_report();
  r["device"] = "cpu";
  r["peaks"] = nullptr;
  r["eager"] = {{"ms", 15.7}, {"ops", {{{"name", "aten::native_layer_norm"}, {"launches", 1}, {"ms", 15.6}, {"share", 0.99}}}}};
  std::string t = reference_profile_text(r);
  EXPECT_NE(t.find("on the CPU"), std::string::npos) << t;
  EXPECT_NE(t.find("(wall clock)"), std::string::npos) << t;
  EXPECT_NE(t.find("eager's time by op"), std::string::npos) << t;
  EXPECT_NE(t.find("aten::native_layer_norm"), std::string::npos) << t;
  EXPECT_EQ(t.find("GPU busy"), std::string::npos) << t;
}

class ReferenceProfileTest : public ::testing::Test {
 protected:
  static Environment& env() { return test_environment(); }
  void SetUp() override {
    ASSERT_TRUE(env().torch.present) << env().probe_error;
    dir_ = make_temp_dir(fs::temp_directory_path(), "anvil-refprof-test");
  }
  void TearDown() override { remove_tree(dir_); }
  Task task(const std::string& code) {
    std::string e;
    EXPECT_TRUE(write_file_atomic(dir_ / "t.py", code, &e)) << e;
    auto t = load_task(env(), (dir_ / "t.py").string(), &e);
    EXPECT_TRUE(t) << e;
    return t.value_or(Task{});
  }
  static ReferenceProfileOptions cpu() {
    ReferenceProfileOptions o;
    o.device = Device::Cpu;
    o.compile_mode = "none";
    o.warmup = 1;
    o.calls = 3;
    o.timeout = std::chrono::seconds(300);
    return o;
  }
  fs::path dir_;
};

// Unique per run, so the cache starts empty for it.
std::string matmul_task() {
  auto now = std::chrono::system_clock::now().time_since_epoch().count();
  return "import torch\nimport torch.nn as nn\n\nclass Model(nn.Module):\n    def __init__(self):\n"
         "        super().__init__()\n        self.w = nn.Parameter(torch.randn(256, 128))\n"
         "    def forward(self, x):\n        return torch.relu(x @ self.w)\n\n"
         "def get_inputs():\n    return [torch.randn(64, 256)]\n\ndef get_init_inputs():\n    return []\n# run " +
         std::to_string(now) + " " + std::to_string(::getpid()) + "\n";
}

TEST_F(ReferenceProfileTest, MeasuredOnceThenCached) {
  Task t = task(matmul_task());
  ReferenceProfile p = profile_reference(env(), t, cpu());
  ASSERT_TRUE(p.ok) << p.error;
  EXPECT_FALSE(p.cached);
  EXPECT_EQ(p.report["device"], "cpu");
  EXPECT_GT(p.report["eager"]["ms"].get<double>(), 0);
  EXPECT_TRUE(p.report["compile"].is_null());
  // 64x256 @ 256x128: 2*64*256*128 FLOPs; inputs, the weight and the output, 4 bytes each.
  EXPECT_EQ(p.report["work"]["flops"], 2 * 64 * 256 * 128);
  EXPECT_EQ(p.report["work"]["bytes"], 4 * (64 * 256 + 256 * 128 + 64 * 128));
  bool mm = false;
  for (const auto& op : p.report["eager"]["ops"]) mm = mm || op["name"] == "aten::mm";
  EXPECT_TRUE(mm) << p.report["eager"].dump();
  ReferenceProfile again = profile_reference(env(), t, cpu());
  ASSERT_TRUE(again.ok) << again.error;
  EXPECT_TRUE(again.cached);
  EXPECT_EQ(again.report["eager"], p.report["eager"]);
  ReferenceProfileOptions other = cpu();
  other.calls = 4;  // another method: measured again
  EXPECT_NE(reference_profile_key(env(), t, other), reference_profile_key(env(), t, cpu()));
}

TEST_F(ReferenceProfileTest, AReferenceThatRaisesIsATaskError) {
  Task t = task(
      "import torch\nimport torch.nn as nn\nclass Model(nn.Module):\n    def forward(self, x):\n"
      "        raise ValueError('broken reference')\ndef get_inputs():\n    return [torch.randn(4)]\n"
      "def get_init_inputs():\n    return []\n");
  ReferenceProfile p = profile_reference(env(), t, cpu());
  EXPECT_FALSE(p.ok);
  EXPECT_TRUE(p.task_error);
  EXPECT_NE(p.error.find("ValueError: broken reference"), std::string::npos) << p.error;
}

TEST_F(ReferenceProfileTest, CudaWithNoGpuIsRefused) {
  Task t = task(matmul_task());
  ReferenceProfileOptions o = cpu();
  o.device = Device::Cuda;
  Environment no_gpu = env();
  no_gpu.gpus.clear();
  ReferenceProfile p = profile_reference(no_gpu, t, o);
  EXPECT_FALSE(p.ok);
  EXPECT_FALSE(p.task_error);
  EXPECT_NE(p.error.find("no GPU found"), std::string::npos) << p.error;
}

}  // namespace
}  // namespace anvil
