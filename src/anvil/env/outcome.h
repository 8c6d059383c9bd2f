// outcome.h: what an evaluation concluded, the one list of them (schemas/anvil.eval-1.schema.json's
// `outcome`, checked against it by outcome_test.cpp). The JSON report carries the name; the code
// that decides one names it by this type.
#pragma once

#include <array>
#include <optional>
#include <string>
#include <string_view>

namespace anvil {

enum class Outcome {
  kOk,             // correct (the reward then says how fast)
  kTaskError,      // the task itself cannot be judged (not the candidate's fault; `anvil eval` exits 1)
  kCompileError,   // the candidate's build failed
  kLoadError,      // its module or ModelNew could not be imported or built, or it cannot be judged as given
  kRuntimeError,   // it raised, crashed, or took more memory than allowed
  kTimeout,        // it did not finish within the evaluation's time
  kWrongAnswer,    // an output (or an input it changed) differs from the reference beyond tolerance
  kHackSuspected,  // a defense found it doing what an honest kernel does not (docs/anti-hacking.md)
};

inline constexpr std::array<Outcome, 8> kOutcomes = {
    Outcome::kOk,          Outcome::kTaskError, Outcome::kCompileError, Outcome::kLoadError,
    Outcome::kRuntimeError, Outcome::kTimeout,  Outcome::kWrongAnswer,  Outcome::kHackSuspected};

// The name in reports ("ok", "task_error", ...).
const char* outcome_name(Outcome o);
// The outcome of that name; nullopt for any other string.
std::optional<Outcome> outcome_named(std::string_view name);
// The outcomes a runner's report may name (python/anvil/harness.py Outcome); the rest are decided
// by anvil itself (the build, the clock, the score).
bool runner_reports(Outcome o);

// A verdict's finer name, `reason` in the result (docs/anti-hacking.md "Outcomes and reasons"; the
// schema's `reason`, judge.REASONS: checked against all three by outcome_test.cpp), and the outcome
// it belongs to. The one list: a result carries one of these for its outcome, or none.
struct Reason {
  Outcome outcome;
  const char* name;
};
inline constexpr std::array<Reason, 18> kReasons = {{
    {Outcome::kWrongAnswer, "mismatch"},        {Outcome::kWrongAnswer, "unwritten_output"},
    {Outcome::kWrongAnswer, "input_mutated"},   {Outcome::kRuntimeError, "process_died"},
    {Outcome::kRuntimeError, "gpu_memory"},     {Outcome::kHackSuspected, "protocol"},
    {Outcome::kHackSuspected, "harness_patched"}, {Outcome::kHackSuspected, "lazy_output"},
    {Outcome::kHackSuspected, "threads"},       {Outcome::kHackSuspected, "torch_fallback"},
    {Outcome::kHackSuspected, "side_stream"},   {Outcome::kHackSuspected, "timing_escape"},
    {Outcome::kHackSuspected, "no_kernels"},    {Outcome::kHackSuspected, "foreign_work"},
    {Outcome::kHackSuspected, "timed_output_mismatch"}, {Outcome::kHackSuspected, "precision"},
    {Outcome::kHackSuspected, "below_roofline"}, {Outcome::kHackSuspected, "timing_forged"},
}};
// Whether a verdict of `outcome` may carry `reason`.
bool reason_of(Outcome outcome, std::string_view reason);

}  // namespace anvil
