// runs.h: many episodes at once (`anvil agent --tasks DIR|DATASET --samples K
// --concurrency C`).
//
// Episodes run on C threads, so up to C model requests are in flight; their
// GPU work (verify, profile, ncu_profile, the final evaluation) is queued per
// GPU (one evaluation per GPU at a time) and builds share a small CPU pool.
// Layout of a run directory:
//   OUT/run.json                     the run's settings
//   OUT/<task>/sample-<k>/trajectory.json, workdir/
//   OUT/summary.json                 written at the end (and by --resume)
// A run resumes: finished episodes are kept, interrupted ones continue, the
// rest start.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "anvil/agent/episode.h"

namespace anvil {

struct RunOptions {
  std::vector<std::string> tasks;  // task specs
  std::vector<std::string> dirs;   // each task's folder under `out` (empty: named after the task)
  int samples = 1;
  int concurrency = 4;
  std::filesystem::path out;
  bool resume = false;             // continue an existing run directory
  EpisodeOptions episode;          // the template (task, dir and resume are set per episode)
  std::vector<int> gpus;           // GPU indices to evaluate on; empty: all of the host's
  int build_slots = 0;             // concurrent builds; 0: a quarter of the cores (at least 1)
  bool progress = true;            // a progress display on stderr
};

struct RunSummary {
  nlohmann::json json;             // also written to OUT/summary.json
  int episodes = 0;
  int finished = 0;
  int interrupted = 0;
  int failed_to_start = 0;
  std::string text() const;        // a few human lines
};

RunSummary run_episodes(const Environment& env, ModelClient& model, const RunOptions& opts);

// "ops.jsonl#12" -> "ops.jsonl_12": a task spec's name as a directory name.
std::string episode_dir_name(const std::string& task_name);

}  // namespace anvil
