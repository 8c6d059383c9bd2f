// bench.h: benchmark runs (`anvil bench`): every task of a suite evaluated in
// isolation against its solution (or the agent's episode), one timed evaluation
// per GPU at a time over the host's GPUs (--overlap: others prepare meanwhile),
// each result kept as a per-task record
// so an interrupted run resumes without evaluating a finished task again;
// then the suite's metrics, a fingerprint of the setup, and the reports.
// Layout and schemas: docs/bench.md.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "anvil/agent/runs.h"
#include "anvil/bench/metrics.h"
#include "anvil/env/eval.h"

namespace anvil {

class ModelClient;

struct BenchOptions {
  std::string tasks;       // a folder (KernelBench layout) or a dataset
  std::string solutions;   // a folder of solutions; empty with an agent
  std::string variant;     // a solution folder's variant sub-folder; empty: cuda with a GPU, else cpu
  std::filesystem::path out;
  bool resume = false;     // continue the run in `out`
  EvalOptions eval;        // the template: task, candidate and gpu are set per task
  std::vector<int> gpus;   // GPU indices; empty: all of the host's
  // Evaluations at once on each GPU (0: kOverlapTogetherCuda, eval.h). Above 1 they take
  // the GPU's lock (EvalOptions::gpu_lock): a wave prepares together, each then verified and timed
  // with the GPU to itself, one timed evaluation per GPU at a time whatever the overlap.
  int overlap = 0;
  bool prebuild = true;    // build every candidate on all cores before the GPUs time anything
  bool progress = true;    // a progress bar (or one line per task when stderr is not a terminal)
  // With an agent: each task is one episode (the agent issue's loop), judged
  // by its final, fresh evaluation.
  ModelClient* model = nullptr;
  RunOptions agent;        // the episodes' template (tasks, out and resume are set here)
  // The model's prices, for the cost of its tokens. Not a setting of the run (a resumed run may
  // give them, or others): kept in bench.json, and the last given stays; none: no cost.
  std::optional<Pricing> pricing;
  // The command line after `anvil bench`, less --resume and --out: kept in a new run's bench.json,
  // so that `anvil bench --resume --out DIR` alone repeats it (bench_resume_command).
  std::vector<std::string> command;
};

// `anvil bench --resume --out DIR [more]` without --tasks: the run's first command line (bench.json's
// "command") with --resume --out DIR and `more` after it, as the full argv (args[0] kept); nullopt
// when args are not such a command (parsed as they are). A run without a recorded command, or no
// run in DIR, is an error (in *err, then nullopt as well).
std::optional<std::vector<std::string>> bench_resume_command(const std::vector<std::string>& args, std::string* err);
// args after `anvil bench` less --resume and --out (and its value): what bench.json keeps.
std::vector<std::string> bench_command_of(const std::vector<std::string>& after_bench);

// Runs the benchmark and writes OUT/results.json, OUT/report.md and
// OUT/report.html. Returns the results (anvil.bench/1), or nullopt with the
// reason in *err when it cannot run (a bad target, a run directory that
// holds another run, an environment without torch).
std::optional<nlohmann::json> run_bench(const Environment& env, const BenchOptions& opts, std::string* err);

// Recomputes results and reports from a run directory's records (no
// evaluation); nullopt with *err when OUT is not a benchmark run. With
// `pricing`, the run's prices become those (an agent run's only).
std::optional<nlohmann::json> bench_report(const std::filesystem::path& out, std::string* err,
                                           const std::optional<Pricing>& pricing = std::nullopt);

// A few human lines: the overall metrics, problems, where the reports are.
std::string bench_summary_text(const nlohmann::json& results);

}  // namespace anvil
