// eval.h: the reward oracle: one candidate, judged against its task.
//
// A private copy of the candidate is built (through the cached build
// service), then verified and timed by a runner process (python -m
// anvil.runner, docs/runner-protocol.md) pinned to one GPU, in its own process
// group, with a wall-clock timeout, memory and file-size limits and no
// network. Whatever the candidate does (crash, hang, exit, lie about its
// inputs) becomes an explicit outcome. Baseline times (eager, torch.compile)
// are cached per task, GPU, driver, torch, CUDA and flags, so re-evaluating a
// task costs only the candidate's time. The reward is computed here, never
// by code the candidate can reach.
#pragma once

#include <chrono>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "anvil/env/build.h"
#include "anvil/env/device.h"
#include "anvil/env/launch.h"
#include "anvil/env/outcome.h"
#include "anvil/env/protocol.h"
#include "anvil/env/reward.h"
#include "anvil/env/toolchain.h"

namespace anvil {

struct EvalOptions;

// How a run that takes the GPU's lock (gpu_lock_path; python/anvil/timing.py GpuLock) holds it.
// kAlone: exclusive from CUDA's start to the end (its host work, the task's import, the model's
// construction, the inputs' draws, done before). kTogether (the request's prepare "together"; the
// judge's, so with defenses; else as kAlone): shared while it prepares beside the others of its wave
// (CUDA in both processes, the model, the inputs, the reference's first call, torch.compile's
// compilation; none of a candidate's code exists yet), then exclusive, once the wave has parked, for
// everything timed and everything the candidate runs; a lean task (a set of inputs of a GiB or more)
// prepares alone all the same (python/anvil/judge.py prepare_together).
enum class Prepare { kAlone, kTogether };

// How evaluate() starts its runner, the one side effect of a judged run: by default forked from
// the warm zygote or a fresh process (launch_python, opts.zygote_socket). Tests put a runner that
// answers canned reports behind it, so the outcome mapping and the reward are tested without
// Python.
class RunnerLauncher {
 public:
  virtual ~RunnerLauncher() = default;
  virtual Launch launch(const Environment& env, const EvalOptions& opts, const nlohmann::json& request,
                        const SubprocessOptions& so, const std::filesystem::path& scratch) const = 0;
};

// The largest launch configuration (EvalOptions::config): a launcher's `int config` holds it.
inline constexpr int64_t kMaxConfig = 0x7fffffff;

struct EvalOptions {
  std::string task;       // FILE or DATASET#ROW
  std::string candidate;  // a workdir, or a KernelBench single file (model_new.py)
  std::optional<Device> device;  // unset: cuda for CUDA candidates, cpu for CPU variants
  int gpu = 0;            // which GPU (CUDA_VISIBLE_DEVICES for the runner)
  std::string protocol = protocol_names().front();  // the rules judged by: cuda-agent | kernelbench (env/protocol.h)
  std::string preset;     // tolerance preset: strict | paper | kernelbench; empty: the protocol's
  int trials = 5;
  // Verification calls on inputs the task's get_inputs() never makes (python/anvil/stress.py), with
  // defenses: share/protocol.json's checks.stress_trials; 0 turns them off (to measure what they cost).
  int stress_trials = check_defaults().stress_trials;
  std::optional<uint32_t> seed;   // default: a fresh random seed, recorded in the result
  // The candidate's launch configuration (the agent's `tune`): ModelNew's integer attribute `config`
  // set to this after it is constructed (a ModelNew without one is a load_error). Unset: its own.
  std::optional<int64_t> config;  // 0 to kMaxConfig
  // Timing.
  int warmup = timing_defaults().warmup;  // share/protocol.json's timing
  int calls = timing_defaults().calls;
  int input_sets = timing_defaults().input_sets;
  bool flush_l2 = true;
  bool hide_launch = true;             // a GPU sleep hides the host's launch latency (timing.py)
  bool kernel_sum = true;              // also measure the profiler's kernel-time sum
  bool measure_time = true;            // false: verify only (no timing, no baselines, no speed reward)
  TimingMethod timing = TimingMethod::kEvents;  // what the reward uses (protocol.h)
  std::string compile_mode = "default";  // torch.compile mode; "none" skips the compile baseline
  bool allow_tf32 = false;             // the reference's semantics by default
  bool use_baseline_cache = true;
  // Anti-hacking defenses (docs/anti-hacking.md): on by default; off only to
  // measure what they cost.
  bool defenses = true;
  bool vet = true;                      // vet the task (cached) and name its flags in the result
  bool allow_lower_precision = false;   // allow outputs/compute below the reference's precision
  double roofline_bandwidth = 0;        // bytes/s; 0: measured on the GPU
  double roofline_flops = 0;            // flop/s; 0: measured on the GPU
  // Isolation.
  std::chrono::seconds timeout{600};
  size_t memory_limit_bytes = 64ull << 30;  // resident memory of the runner
  size_t file_size_limit_bytes = 4ull << 30;
  // Where the runner comes from: "auto" (default) forks it from a warm
  // zygote (python -m anvil.zygote) shared by every evaluation in this
  // environment, started on first use and ended after 10 idle minutes; "none"
  // starts a fresh Python process; anything else is a zygote's socket path.
  std::string zygote_socket = "auto";
  const RunnerLauncher* runner = nullptr;  // null: the zygote or a fresh process, as above
  // The GPU's lock, for evaluations run side by side on one GPU (`anvil bench --overlap`); unset: none
  // taken, one evaluation at a time on the GPU is the caller's to keep. kTogether: an evaluation
  // that anvil could not finish because the GPU ran out of memory for the judge's own work, the
  // candidate holding no more than its share (measured), is run again kAlone (evaluate) on the same
  // seed, its first result kept in isolation.first_try.
  std::optional<Prepare> gpu_lock;
  BuildOptions build;
  // Once *cancel is true (a session's DELETE, the server's stop), the runner is killed at once and
  // the evaluation ends without a verdict (EvalError::kCancelled).
  const std::atomic<bool>* cancel = nullptr;
};

// Why anvil could not evaluate (no verdict on the candidate, no reward), for the caller to act on:
// a usage error is the request's to fix, an environment error the machine's, a runner error the
// judge's process's (it could not start, or could not do its own work: memory_limited says when
// the GPU's memory was short).
enum class EvalError {
  kUsage,        // an unknown protocol, preset or device; a task or candidate that does not exist
  kEnvironment,  // no GPU for a CUDA candidate, the toolchain, the cache's files
  kRunner,       // the runner did not start, or reported that it could not evaluate
  kCancelled,    // its caller ended it (EvalOptions::cancel): no one waits for a verdict
};
const char* eval_error_name(EvalError e);  // "usage", "environment", "runner", "cancelled"

struct EvalResult {
  nlohmann::json json;  // the documented result (schema anvil.eval/1), for whatever reads it outside anvil
  bool evaluated = false;  // false: anvil could not evaluate (error_kind says whose fault)
  // The verdict, when evaluated, as anvil's code reads it; the JSON's "outcome" and "reward" are
  // written from these.
  Outcome outcome = Outcome::kRuntimeError;
  int reward = -1;  // reward.h's milestone: -1 unless outcome is ok
  EvalError error_kind = EvalError::kEnvironment;  // when !evaluated
  std::string error;       // why not, when !evaluated
  bool memory_limited = false;  // !evaluated: the GPU ran out of memory for the judge's own work (its report)
  std::string summary() const;  // a few human lines
};

// A result another anvil evaluated (a Ray worker's anvil.eval/1 JSON), its verdict read back; not
// evaluated (error set) when the JSON names no outcome anvil knows or a reward out of range.
EvalResult evaluated_elsewhere(const nlohmann::json& json);

EvalResult evaluate(const Environment& env, const EvalOptions& opts);

// The baselines of one task (opts.task) alone, for later evaluations with the same options
// (`anvil baselines`, docs/baselines.md): eager (with the judge's batch, when defended) and
// torch.compile measured by the runner as an evaluation measures them, with no candidate (the
// candidate's process runs the eager batch and imports nothing), and kept in the cache when clean.
// Baselines already cached clean are not measured again (opts.use_baseline_cache false: they are,
// and replace them when clean).
struct BaselinesResult {
  enum class Status {
    kCached,    // both were in the cache: nothing ran
    kMeasured,  // measured and kept
    kUnclean,   // measured, but not kept (notes say why); later evaluations measure them again
    kTaskError, // the task failed (message)
    kError,     // anvil could not measure (message)
  };
  Status status = Status::kError;
  std::string message;
  nlohmann::json json;  // {task, device, status, eager, compile, notes, seconds, isolation}
};
const char* baselines_status_name(BaselinesResult::Status s);
// `gpu_lock` (a file; "" for none): the measurement does its host work (the task's import, its
// model's construction, its inputs' draws) first, then takes an exclusive lock on the file before it
// starts the device and holds it to its end (python/anvil/timing.py GpuLock), so that several
// measurements may overlap their host work while only one uses the GPU.
// Prepare::kTogether: as EvalOptions::gpu_lock's.
// warm_peak_bytes: the warm-up's measured peak of the task's models on the GPU (WarmResult; 0: not
// known), a large task's room in a wave (anvil.judge wave_room).
BaselinesResult measure_baselines(const Environment& env, const EvalOptions& opts, const std::string& gpu_lock = "",
                                  Prepare prepare = Prepare::kAlone, uint64_t warm_peak_bytes = 0);
// GPU `gpu`'s lock file (under the cache's locks/, the directory made): taken exclusive by a
// measurement of baselines (above), shared by GPU work that times nothing (vetting, vet.h; the
// warm-up, warm_compile_caches), exclusive by a vetting alone (timing.GpuLock).
std::filesystem::path gpu_lock_path(const Environment& env, int gpu);

// Whether opts.task's baselines (with these options) are cached clean: measure_baselines would run
// nothing.
bool baselines_cached(const Environment& env, const EvalOptions& opts);

// Warm-ups run at once on a GPU by `anvil baselines` (their compilation is the CPU's work; 8 of 16
// cores, the GPU host's, leave the zygote and the system room).
inline constexpr int kWarmJobsCuda = 8;
// Measurements `anvil baselines` runs at once on a GPU by default (--overlap N: one on the GPU, the
// others doing their host work). 2: in one run on one H100 (20 L2 problems, caches warm; 2, 1, 2 at
// once), 72 s and 69 s against 92 s one at a time, the figures the same within 0.3%
// (bench/results/kb-baselines-2026-11-27/overlap-ab-*.json, docs/baselines.md).
inline constexpr int kOverlapCuda = 2;
// The same with Prepare::kTogether (a wave: up to this many prepare at once, then time in turn),
// and `anvil bench`'s and `anvil serve`'s evaluations at once on a GPU by default: 4 measured best
// (two H200s, the 100-task suite: 57.2 tasks a minute on one GPU against 40.3 one at a time, the
// candidates' times as between two runs one at a time; bench/results/multi-gpu-2026-11-28-overlap).
inline constexpr int kOverlapTogetherCuda = 4;

// torch.compile's caches warmed for opts.task (python/anvil/warm.py): its reference compiled and
// called once, nothing timed. Several may run at once on one GPU.
struct WarmResult {
  std::string error;            // empty: warmed; else why not
  bool memory_limited = false;  // the GPU ran out of memory (beside others: worth a try alone)
  uint64_t peak_bytes = 0;      // the most its process's allocator held on the GPU (0: not known)
};
WarmResult warm_compile_caches(const Environment& env, const EvalOptions& opts);

// The user's names for the private copies an evaluation works on (DIR/candidate, DIR/harness/model.py):
// every message, detail and output an evaluation returns names the files the user gave, never
// anvil's copies. A single-file candidate's bare "model_new.py" (its name in the copy) becomes the
// file as given.
struct UserPaths {
  std::vector<std::pair<std::string, std::string>> map;  // private -> the user's, most specific first
  std::string single_file;                               // a single-file candidate as given, else empty
  std::string operator()(std::string text) const;
  void apply(nlohmann::json& j) const;  // every string in j
};
// task_file: the task as given when it is a file ("" for a dataset's row: "<task>").
UserPaths user_paths(const std::filesystem::path& private_dir, const std::string& candidate, bool single_file,
                     const std::string& task_file);

// Builds a candidate the way evaluate() does, through the build cache, so that
// evaluating it later compiles nothing: a benchmark builds its candidates on
// every core before its GPUs time anything. A workdir: its private copy. A
// single file (.py): the load_inline modules its source names in literals
// (python -m anvil.ahead reads it, runs none of it), built as its judge
// builds them; the calls it could not read are warnings, left to the
// evaluation. Returns nullopt for a path that is neither (nothing to build
// ahead); a failed build is reported, and evaluate() then reports it again as
// the candidate's compile_error.
std::optional<BuildReport> prebuild(const Environment& env, const std::string& candidate, const BuildOptions& opts);

}  // namespace anvil
