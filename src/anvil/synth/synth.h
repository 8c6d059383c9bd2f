// synth.h: `anvil synth`, training tasks made the CUDA-Agent-Ops-6K way (docs/synth.md): task
// `index` of run `seed` is composed from the operator catalogue and filtered by one of --jobs
// Python processes (python -m anvil.synth.worker: the CPU stage, each filter a reason), this
// process schedules them, keeps every record in a journal (resumable), removes near-duplicates
// (the first by index is kept, so the result does not depend on the processes' timing) and writes
// the first `count` accepted tasks as Parquet with a summary (JSON and HTML).
#pragma once

#include <chrono>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace anvil {

struct Environment;

inline constexpr const char* kSynthJournal = "anvil.synth-journal/1";
inline constexpr const char* kSynthSummary = "anvil.synth-summary/1";

struct SynthOptions {
  long count = 0;                    // accepted tasks wanted
  std::filesystem::path out;         // tasks.parquet; beside it OUT.journal.jsonl, OUT.summary.json, OUT.html
  uint64_t seed = 0;
  unsigned jobs = 0;                 // worker processes (0: every core)
  std::chrono::seconds timeout{120}; // one task's CPU stage; beyond it the worker is killed, the task dropped
  long max_attempts = 0;             // tasks tried at most (0: 20 x count + 100)
  double max_similarity = 0.9;       // decontamination's threshold (the paper's)
  std::filesystem::path catalogue;   // default share/synth/operators.json
  std::filesystem::path index;       // the KernelBench index; default share/synth/kernelbench-index.json
  bool fresh = false;                // a journal of another run is replaced, not refused
  bool progress = true;              // a line on stderr (redrawn on a terminal)
  std::vector<std::string> worker;   // the worker's argv (default: python -m anvil.synth.worker); tests name another
  // The GPU stage (python -m anvil.synth.gpu_stage, its journal OUT.gpu/gpu.jsonl) over what the CPU
  // stage accepts, and more of both until `count` pass both.
  bool gpu = false;
  unsigned gpu_procs = 0;            // the GPU stage's processes (0: its default)
  std::vector<std::string> gpu_stage;  // its argv before the rows file (default: python -m anvil.synth.gpu_stage); tests name another
};

struct SynthResult {
  int status = 0;  // 0 written; 1 fewer than count accepted within max_attempts (what was found is written); 2 could not run
  std::string error;
  nlohmann::json summary;
};

SynthResult run_synth(const Environment& env, const SynthOptions& opts);

// What a run's journal says: the records by index (the last line for an index wins), and the
// header. A torn last line (the process killed while writing) is left out; any other bad line is
// an error naming the file and line.
struct Journal {
  nlohmann::json header;
  std::map<long, nlohmann::json> records;
  size_t whole_bytes = 0;  // the file up to its last complete line (a resumed run cuts a torn end off)
};
bool read_journal(const std::filesystem::path& path, Journal* j, std::string* err);

// The records of indexes 0.. in order, near-duplicates (the same `key`) after the first marked
// rejected with reason "duplicate", cut after the `count`-th accepted one: the run's tasks and its
// funnel do not depend on the order the workers finished in.
struct Selection {
  std::vector<nlohmann::json> accepted;  // at most count
  std::vector<nlohmann::json> considered;  // every record up to the last accepted one (or all), duplicates marked
};
Selection select_tasks(const std::map<long, nlohmann::json>& records, long count);

// The run's summary (anvil.synth-summary/1): the funnel (tried, and per stage rejected with the
// commonest details), operator, family, chain-length, runtime-estimate and similarity histograms.
nlohmann::json synth_summary(const Selection& s, const nlohmann::json& run);
std::string synth_html(const nlohmann::json& summary);
std::string synth_table(const nlohmann::json& summary);

}  // namespace anvil
