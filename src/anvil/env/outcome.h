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

}  // namespace anvil
