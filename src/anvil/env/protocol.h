// protocol.h: the rules a candidate is judged by, as named presets
// (docs/protocols.md), and the tolerance presets they use.
//
// cuda-agent (the default) is CUDA-Agent's rule set: no torch compute in
// ModelNew.forward, the candidate's own kernels (cuBLAS/cuDNN allowed) do the
// work, and ModelNew takes Model's weights by name. kernelbench is
// KernelBench's: torch ops allowed, no own-work share required, and where
// ModelNew's parameter names differ from Model's both keep the weights their
// constructors made after the same seed; its tolerances are KernelBench's
// (allclose at 1e-4 for fp32, 1e-2 for fp16/bf16, no norm check). Under both,
// anvil's integrity defenses stay on: the judge's clock, fresh inputs, input
// mutation, NaN-poisoned allocations, streams, threads, precision and the
// speed-of-light floor.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace anvil {

// The names of the tolerance presets and of the protocols, for usage text.
extern const std::vector<std::string> kTolerancePresets;  // strict, paper, kernelbench
extern const std::vector<std::string> kProtocols;         // cuda-agent, kernelbench

// Tolerances of a preset, as the runner protocol's "tolerance" object; throws
// std::invalid_argument for an unknown preset.
nlohmann::json tolerance_preset(const std::string& preset);

struct Protocol {
  std::string name;              // cuda-agent | kernelbench
  std::string tolerance;         // its tolerance preset (when the user names none)
  bool torch_ops = false;        // torch compute allowed in ModelNew.forward (else torch_fallback)
  bool own_work = true;          // its own kernels must do the work (else no_kernels / foreign_work)
  bool seeded_weights = false;   // names differ from Model's: both keep their seeded weights (else load_error)

  // The runner request's "rules" object (python/anvil/runner.py), also the
  // result's "protocol".
  nlohmann::json rules() const;
  // What the request's defenses.policy sets over the runner's default policy.
  nlohmann::json policy() const;
};

// The protocol of that name; throws std::invalid_argument naming the known ones.
Protocol protocol_named(const std::string& name);

// The tolerance preset an evaluation uses: `preset` when set, else the protocol's.
std::string effective_preset(const std::string& preset, const Protocol& protocol);

}  // namespace anvil
