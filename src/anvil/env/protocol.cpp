#include "anvil/env/protocol.h"

#include <stdexcept>

#include "anvil/util/strings.h"

namespace anvil {

const std::vector<std::string> kTolerancePresets = {"strict", "paper", "kernelbench"};
const std::vector<std::string> kProtocols = {"cuda-agent", "kernelbench"};

nlohmann::json tolerance_preset(const std::string& preset) {
  if (preset == "strict") {
    return {{"preset", "strict"},
            {"float32", {{"atol", 1e-4}, {"rtol", 1e-4}, {"norm", 1e-5}}},
            {"float16", {{"atol", 1e-2}, {"rtol", 1e-2}, {"norm", 1e-3}}},
            {"bfloat16", {{"atol", 1e-2}, {"rtol", 1e-2}, {"norm", 1e-2}}},
            {"float64", {{"atol", 1e-7}, {"rtol", 1e-7}, {"norm", 1e-9}}}};
  }
  if (preset == "paper") {  // CUDA-Agent's verification: assert_close(atol=1e-2, rtol=1e-2)
    nlohmann::json loose = {{"atol", 1e-2}, {"rtol", 1e-2}, {"norm", nullptr}};
    return {{"preset", "paper"}, {"float32", loose}, {"float16", loose}, {"bfloat16", loose}, {"float64", loose}};
  }
  if (preset == "kernelbench") {  // KernelBench since its PR #80: torch.allclose, by the run's precision
    nlohmann::json fp32 = {{"atol", 1e-4}, {"rtol", 1e-4}, {"norm", nullptr}};
    nlohmann::json half = {{"atol", 1e-2}, {"rtol", 1e-2}, {"norm", nullptr}};
    return {{"preset", "kernelbench"}, {"float32", fp32}, {"float16", half}, {"bfloat16", half}, {"float64", fp32}};
  }
  throw std::invalid_argument("unknown tolerance preset '" + preset + "' (use " + join(kTolerancePresets, ", ") + ")");
}

nlohmann::json Protocol::rules() const {
  return {{"name", name},
          {"torch_ops", torch_ops},
          {"own_work", own_work},
          {"weights", seeded_weights ? "by_name_or_seed" : "by_name"}};
}

nlohmann::json Protocol::policy() const { return {{"torch_ops", torch_ops}, {"own_work", own_work}}; }

Protocol protocol_named(const std::string& name) {
  if (name == "cuda-agent") return Protocol{"cuda-agent", "strict", false, true, false};
  if (name == "kernelbench") return Protocol{"kernelbench", "kernelbench", true, false, true};
  throw std::invalid_argument("unknown protocol '" + name + "' (use " + join(kProtocols, ", ") + ")");
}

std::string effective_preset(const std::string& preset, const Protocol& protocol) {
  return preset.empty() ? protocol.tolerance : preset;
}

}  // namespace anvil
