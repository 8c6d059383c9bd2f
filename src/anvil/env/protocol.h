// protocol.h: the rules a candidate is judged by, as named presets
// (docs/protocols.md), the tolerance presets they use and a timed evaluation's defaults. Their one
// home is share/protocol.json, compiled in here and read by the Python runner (python/anvil/share.py).
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

// The names of the tolerance presets and of the protocols, in share/protocol.json's order, for usage
// text: strict, paper, kernelbench; cuda-agent (the default), kernelbench.
const std::vector<std::string>& tolerance_preset_names();
const std::vector<std::string>& protocol_names();

// A timed evaluation's defaults (share/protocol.json's "timing").
struct TimingDefaults {
  int warmup = 0;      // untimed calls before timing
  int calls = 0;       // timed calls
  int input_sets = 0;  // input sets rotated while timing
};
const TimingDefaults& timing_defaults();

// What a defended evaluation checks at positions it draws in secret (share/protocol.json's "checks").
struct CheckDefaults {
  int stress_trials = 0;  // verification calls on inputs get_inputs() never makes (python/anvil/stress.py)
};
const CheckDefaults& check_defaults();

// Tolerances of a preset, as the runner protocol's "tolerance" object; throws
// std::invalid_argument for an unknown preset.
nlohmann::json tolerance_preset(const std::string& preset);

struct Protocol {
  std::string name;              // cuda-agent | kernelbench
  std::string tolerance;         // its tolerance preset (when the user names none)
  bool torch_ops = false;        // torch compute allowed in ModelNew.forward (else torch_fallback)
  bool own_work = true;          // its own kernels must do the work (else no_kernels / foreign_work)
  bool seeded_weights = false;   // names differ from Model's: both keep their seeded weights (else load_error)
  bool cudnn_allow_tf32 = false; // cuDNN's TF32 in every model's convolutions (kernelbench: torch's default, on)

  // The runner request's "rules" object (python/anvil/runner.py), also the
  // result's "protocol".
  nlohmann::json rules() const;
  // What the request's defenses.policy sets over the runner's default policy.
  nlohmann::json policy() const;
};

// What the reward's time is: the median of the CUDA events around each timed call (events), or the
// profiler's kernel-time sum per call (kernel-sum). The result, the trajectory and the reports name it
// as timing_method_name says.
enum class TimingMethod { kEvents, kKernelSum };
const char* timing_method_name(TimingMethod m);  // "events", "kernel-sum"
// The method of that name; throws std::invalid_argument naming the known ones.
TimingMethod timing_method_named(const std::string& name);
// The runner report's field of the candidate's time that this method reads: median_ms, kernel_sum_ms.
const char* timing_method_field(TimingMethod m);

// The protocol of that name; throws std::invalid_argument naming the known ones.
Protocol protocol_named(const std::string& name);

// The tolerance preset an evaluation uses: `preset` when set, else the protocol's.
std::string effective_preset(const std::string& preset, const Protocol& protocol);

}  // namespace anvil
