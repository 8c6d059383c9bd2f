#include "anvil/env/outcome.h"

namespace anvil {

const char* outcome_name(Outcome o) {
  switch (o) {
    case Outcome::kOk: return "ok";
    case Outcome::kTaskError: return "task_error";
    case Outcome::kCompileError: return "compile_error";
    case Outcome::kLoadError: return "load_error";
    case Outcome::kRuntimeError: return "runtime_error";
    case Outcome::kTimeout: return "timeout";
    case Outcome::kWrongAnswer: return "wrong_answer";
    case Outcome::kHackSuspected: return "hack_suspected";
  }
  return "runtime_error";
}

std::optional<Outcome> outcome_named(std::string_view name) {
  for (Outcome o : kOutcomes) {
    if (name == outcome_name(o)) return o;
  }
  return std::nullopt;
}

bool runner_reports(Outcome o) {
  switch (o) {
    case Outcome::kTaskError:
    case Outcome::kLoadError:
    case Outcome::kRuntimeError:
    case Outcome::kWrongAnswer:
    case Outcome::kHackSuspected: return true;
    default: return false;
  }
}

bool reason_of(Outcome outcome, std::string_view reason) {
  for (const Reason& r : kReasons) {
    if (r.outcome == outcome && reason == r.name) return true;
  }
  return false;
}

}  // namespace anvil
