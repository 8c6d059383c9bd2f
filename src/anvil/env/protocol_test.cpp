#include "anvil/env/protocol.h"

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <stdexcept>

#include "anvil/env/eval.h"

namespace anvil {
namespace {

TEST(Protocol, TolerancePresets) {
  EXPECT_EQ(tolerance_preset("strict")["float32"]["atol"], 1e-4);
  EXPECT_EQ(tolerance_preset("strict")["float32"]["norm"], 1e-5);
  EXPECT_EQ(tolerance_preset("paper")["float32"]["rtol"], 1e-2);
  // KernelBench's: allclose at 1e-4 for fp32 and 1e-2 for half precisions, no norm check.
  nlohmann::json kb = tolerance_preset("kernelbench");
  EXPECT_EQ(kb["float32"]["atol"], 1e-4);
  EXPECT_EQ(kb["float32"]["rtol"], 1e-4);
  EXPECT_TRUE(kb["float32"]["norm"].is_null());
  EXPECT_EQ(kb["bfloat16"]["atol"], 1e-2);
  EXPECT_EQ(kb["float16"]["rtol"], 1e-2);
  for (const auto& name : tolerance_preset_names()) EXPECT_EQ(tolerance_preset(name)["preset"], name);
  try {
    tolerance_preset("lenient");
    FAIL() << "no throw";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "unknown tolerance preset 'lenient' (use strict, paper, kernelbench)");
  }
}

TEST(Protocol, CudaAgentAndKernelBenchRules) {
  Protocol ca = protocol_named("cuda-agent");
  EXPECT_FALSE(ca.torch_ops);
  EXPECT_TRUE(ca.own_work);
  EXPECT_EQ(ca.rules()["weights"], "by_name");
  EXPECT_EQ(effective_preset("", ca), "strict");
  Protocol kb = protocol_named("kernelbench");
  EXPECT_EQ(kb.rules(), (nlohmann::json{{"name", "kernelbench"}, {"torch_ops", true}, {"own_work", false},
                                         {"weights", "by_name_or_seed"}}));
  EXPECT_EQ(kb.policy(), (nlohmann::json{{"torch_ops", true}, {"own_work", false}}));
  EXPECT_EQ(effective_preset("", kb), "kernelbench");
  EXPECT_EQ(effective_preset("paper", kb), "paper");
  for (const auto& name : protocol_names()) EXPECT_EQ(protocol_named(name).name, name);
  EXPECT_THROW(protocol_named("KernelBench"), std::invalid_argument);
}

TEST(Protocol, TimingMethods) {
  for (TimingMethod m : {TimingMethod::kEvents, TimingMethod::kKernelSum}) {
    EXPECT_EQ(timing_method_named(timing_method_name(m)), m);
  }
  EXPECT_STREQ(timing_method_name(TimingMethod::kKernelSum), "kernel-sum");
  EXPECT_STREQ(timing_method_field(TimingMethod::kEvents), "median_ms");
  EXPECT_STREQ(timing_method_field(TimingMethod::kKernelSum), "kernel_sum_ms");
  try {
    timing_method_named("kernel_sum");
    FAIL() << "no throw";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "unknown timing method 'kernel_sum' (use events or kernel-sum)");
  }
}

// What is compiled in is share/protocol.json as it is now (a build older than an edit of it fails
// here), in the file's order, and the evaluation's options take their defaults from it.
TEST(Protocol, CompiledInIsShareProtocolJson) {
  std::ifstream in(std::string(ANVIL_SOURCE_DIR) + "/share/protocol.json");
  std::stringstream text;
  text << in.rdbuf();
  nlohmann::ordered_json file = nlohmann::ordered_json::parse(text.str());
  std::vector<std::string> presets, protocols;
  for (const auto& [name, tolerances] : file["tolerance_presets"].items()) {
    presets.push_back(name);
    nlohmann::json expected = nlohmann::json::parse(tolerances.dump());
    expected["preset"] = name;
    EXPECT_EQ(tolerance_preset(name), expected) << name;
  }
  for (const auto& [name, p] : file["protocols"].items()) {
    protocols.push_back(name);
    Protocol got = protocol_named(name);
    EXPECT_EQ(got.tolerance, p["tolerance"]);
    EXPECT_EQ(got.rules()["weights"], p["weights"]);
    EXPECT_EQ(got.torch_ops, p["torch_ops"].get<bool>());
    EXPECT_EQ(got.own_work, p["own_work"].get<bool>());
  }
  EXPECT_EQ(presets, tolerance_preset_names());
  EXPECT_EQ(protocols, protocol_names());
  EXPECT_EQ(timing_defaults().warmup, file["timing"]["warmup"].get<int>());
  EXPECT_EQ(timing_defaults().calls, file["timing"]["calls"].get<int>());
  EXPECT_EQ(timing_defaults().input_sets, file["timing"]["input_sets"].get<int>());
  EvalOptions o;
  EXPECT_EQ(o.warmup, timing_defaults().warmup);
  EXPECT_EQ(o.input_sets, timing_defaults().input_sets);
  EXPECT_EQ(o.protocol, "cuda-agent");
}

}  // namespace
}  // namespace anvil
