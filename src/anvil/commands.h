// commands.h: the subcommands of the `anvil` program. main.cpp parses the
// command line into these option structs and calls one function; each returns
// the process exit status (0 done, 1 the candidate or task is at fault, 2
// anvil could not do its work).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "anvil/agent/runs.h"
#include "anvil/bench/bench.h"
#include "anvil/env/build.h"
#include "anvil/env/eval.h"
#include "anvil/env/reference_profile.h"
#include "anvil/env/vet.h"
#include "anvil/serve/ray_pool.h"
#include "anvil/synth/synth.h"
#include "anvil/train/rft.h"

namespace anvil {

struct InitArgs {
  std::string task;
  std::string dir;
  bool force = false;
  bool check = true;  // import the task first
};
int cmd_init(const InitArgs& a);

struct BuildArgs {
  std::string dir;
  BuildOptions opts;
  bool json = false;
};
int cmd_build(const BuildArgs& a);

struct BuildSourcesArgs {
  SourcesSpec spec;
  BuildOptions opts;
};
int cmd_build_sources(const BuildSourcesArgs& a);  // always prints JSON

struct TaskShowArgs {
  std::string task;
  bool json = false;
  bool forward = true;
};
int cmd_task_show(const TaskShowArgs& a);

struct TaskProfileArgs {
  std::string task;
  ReferenceProfileOptions opts;
  std::optional<Device> device;  // unset: cuda where a GPU is found, else cpu
  size_t top = 8;      // kernels (ops) shown per model
  bool json = false;
};
// `anvil task profile`: the reference's profile (env/reference_profile.h). 0: profiled; 1: the task is
// at fault; 2: could not profile.
int cmd_task_profile(const TaskProfileArgs& a);

struct EvalArgs {
  EvalOptions opts;
  bool json = false;
  std::string out;  // also write the JSON result here
};
// 0: evaluated, whatever the outcome; 1: the task is at fault (task_error); 2: could not evaluate.
// Without a task, a workdir made by `anvil init` names its own (workdir_task).
int cmd_eval(const EvalArgs& a);

struct VetArgs {
  std::string target;  // a task (FILE or DATASET#ROW), a directory of task files, or a dataset
  std::optional<Device> device;  // unset: cuda when a GPU is present, else cpu
  std::string preset = "strict";
  uint32_t seed = 0;
  int timeout_s = 600;  // per task
  int jobs = 0;         // tasks vetted at once; 0: kVetJobsCuda on a GPU, 1 on the CPU
  bool use_cache = true;
  bool json = false;
};
// One line per task (ok, its flags, or the error) and a summary, or one JSON
// document. 0: no task flagged; 1: some task flagged; 2: could not vet
// (usage, environment, or a task that could not be loaded or run).
int cmd_vet(const VetArgs& a);

struct BaselinesArgs {
  std::string target;  // a task (FILE or DATASET#ROW), a directory of task files, or a dataset
  EvalOptions opts;    // the evaluation settings the baselines are kept for (the cache's key)
  int jobs = 0;        // compile caches warmed at once first; 0: kWarmJobsCuda on a GPU, 1 (none) on the CPU
  int overlap = 0;     // measurements at once, one on the GPU (eval.h); 0: kOverlapCuda (kOverlapTogetherCuda
                       // when prepared together) on a GPU; always 1 on the CPU
  Prepare prepare = Prepare::kTogether;  // on a GPU with defenses: a wave prepares at once, then each times alone
  bool json = false;
};
// Measures eager and torch.compile for every task, one at a time (the GPU quiet), and keeps them
// for later evaluations with the same settings (docs/baselines.md). One line per task and a
// summary, or one JSON document. 0: every task's baselines are cached (measured now or before);
// 1: some were measured but not kept (the machine was busy), or a task failed; 2: could not run.
int cmd_baselines(const BaselinesArgs& a);

struct ServeArgs {
  std::string host = "127.0.0.1";
  int port = 8571;                               // 0: any free port (printed)
  std::string token_env = "ANVIL_SERVE_TOKEN";   // the variable holding the bearer token (never argv: ps shows it)
  std::string state;                             // the store and the requests' files; default CACHE/serve
  std::vector<int> gpus;                         // device cuda: one lane each; default every GPU found
  int overlap = 0;                               // device cuda: evaluations at once per GPU (0: kOverlapTogetherCuda)
  size_t max_queue = 256;
  unsigned builders = 0;                         // on a GPU, builds ahead at once (0: one); none on the CPU
  size_t max_body_mb = 16;                       // one request's body, MiB (413 beyond)
  int session_ttl_s = 3600;                      // a session's time to live after its last use (a client may ask for another)
  size_t max_sessions = 1024;                    // sessions open at once (429 beyond)
  bool bash_gpu = false;                         // sessions' shells see the GPUs
  int keep_results_h = 168;                      // a done evaluation's row, hours
  size_t max_files = 256;                        // files of one inline candidate
  size_t max_file_mb = 4;                        // one inline file, MiB
  RayOptions ray;                                // --ray: lanes on a Ray cluster (address empty: none)
  EvalOptions opts;                              // every evaluation's settings (a request sets a few)
};
// The environment as an HTTP service (docs/service.md) until SIGINT or SIGTERM: a first one stops
// accepting and lets the evaluations under way finish; a second one ends at once (they run again
// at the next start). A host other than loopback needs a token.
int cmd_serve(const ServeArgs& a);

struct AgentArgs {
  std::string task;               // one task (--task)
  std::string tasks;              // a directory of task files or a dataset (--tasks)
  std::string endpoint;           // http(s)://host:port[/v1], or "local"
  std::string model;              // the served model's name (with local: the local server's)
  std::string api_key_env;        // environment variable with the API key; default ANVIL_API_KEY, then OPENAI_API_KEY
  std::string out;                // the run directory; default runs/agent-<UTC time>
  bool resume = false;
  int samples = 1;
  int concurrency = 4;
  std::vector<int> gpus;
  int build_slots = 0;
  int retries = 8;
  RunOptions run;                 // episode template: limits, sampling, tools' eval options
  std::string local_model;        // --local-model GGUF (with --endpoint local)
  int local_context = 8192;
  int tokens = 0;                 // --tokens 1, --no-tokens -1; 0: token-level with --endpoint local only
  bool json = false;              // print the summary as JSON
};
// Runs the episodes and prints a summary. 0: every episode finished (whatever
// its reward); 1: some episode was interrupted or could not start; 2: could
// not run (usage, unreachable endpoint, unknown model, environment).
int cmd_agent(const AgentArgs& a);

// --price-input and --price-output as given (checked by the command: USD per million tokens).
struct PriceArgs {
  std::optional<std::string> input, output;
};

struct BenchArgs {
  BenchOptions opts;      // tasks, solutions, variant, out, resume, eval, gpus
  bool agent = false;     // run the agent on every task instead of reading --solutions
  AgentArgs agent_args;   // with --agent: the endpoint, model and episode settings
  PriceArgs prices;       // with --agent: the model's prices, for the cost in the results
  bool json = false;      // print results.json instead of the summary
};
// Evaluates the suite and writes OUT/results.json, report.md, report.html.
// 0: every task settled (evaluated or missing, whatever the outcomes); 1: some
// task could not be evaluated (anvil's or the environment's failure, listed);
// 2: could not run.
int cmd_bench(const BenchArgs& a);
// Recomputes the results and reports of a run directory from its records;
// with prices (an agent run's), at those prices from now on.
int cmd_bench_report(const std::string& out, bool json, const PriceArgs& prices = {});
// Two runs (directories or results.json files) side by side, as Markdown (or
// JSON); --out also writes the Markdown to a file.
int cmd_bench_compare(const std::string& a, const std::string& b, const std::string& out, bool json);

struct RftArgs {
  RftOptions opts;    // the inputs, --out, the filter's limits, --jobs, --skip-bad
  bool json = false;  // print the summary as JSON instead of the table
};
// Recorded episodes as a rejection fine-tuning set (docs/rft.md): OUT (JSON lines) and
// OUT.summary.json. 0: written (even with every episode dropped); 1: an input is at fault (a
// file that is not a record rft can read: nothing is written); 2: could not run (usage, a path
// that does not exist, an output that cannot be written).
int cmd_rft(const RftArgs& a);

struct SynthArgs {
  SynthOptions opts;  // --count, --out, --seed, --jobs, --timeout, --max-attempts, --max-similarity, ...
  bool json = false;  // print the summary as JSON instead of the table
};
// Training tasks the CUDA-Agent-Ops-6K way (docs/synth.md): OUT (Parquet), OUT's journal, summary
// and HTML page. 0: count tasks written; 1: fewer were accepted within --max-attempts (those are
// written); 2: could not run (usage, a missing catalogue or index, a journal of another run, a
// worker that cannot start).
int cmd_synth(const SynthArgs& a);

int cmd_env(bool json, bool refresh);
int cmd_cache(const std::string& action);

}  // namespace anvil
