#include "anvil/env/protocol.h"

#include <gtest/gtest.h>

#include <stdexcept>

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
  for (const auto& name : kTolerancePresets) EXPECT_EQ(tolerance_preset(name)["preset"], name);
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
  for (const auto& name : kProtocols) EXPECT_EQ(protocol_named(name).name, name);
  EXPECT_THROW(protocol_named("KernelBench"), std::invalid_argument);
}

}  // namespace
}  // namespace anvil
