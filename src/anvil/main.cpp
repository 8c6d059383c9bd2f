// anvil: the command-line program. It parses arguments and calls one of the
// library's commands (src/anvil/commands.h); the work is all in the library.
#include <CLI/CLI.hpp>

#include <algorithm>

#include <cstdio>
#include <exception>
#include <optional>
#include <string>
#include <vector>

#include "anvil/commands.h"
#include "anvil/util/strings.h"
#include "anvil/util/subprocess.h"

namespace {

// The evaluation settings `anvil eval` and `anvil bench` share.
struct EvalFlags {
  int timeout_s = 600;
  uint32_t seed = 0;
  CLI::Option* seed_opt = nullptr;
  bool no_flush = false, no_kernel_sum = false, no_baseline_cache = false, show_launch = false;
  bool no_defenses = false, no_vet = false;
};

// --gpus 0,1 (or --gpus 0 1): the GPU indices a command spreads its evaluations over.
void add_gpus_option(CLI::App* cmd, std::vector<int>& gpus, const std::string& what) {
  cmd->add_option("--gpus", gpus, what)->delimiter(',')->check(CLI::Range(0, 255));
}

// --timing NAME into a TimingMethod; an unknown name is refused with the known ones.
void add_timing_option(CLI::App* cmd, anvil::TimingMethod& method) {
  cmd->add_option_function<std::string>(
         "--timing", [&method](const std::string& name) { method = anvil::timing_method_named(name); },
         "what the reward uses: events (default) or kernel-sum")
      ->check([](const std::string& name) {
        try {
          anvil::timing_method_named(name);
          return std::string();
        } catch (const std::invalid_argument& e) {
          return std::string(e.what());
        }
      });
}

void add_device_option(CLI::App* cmd, std::optional<anvil::Device>& device, const std::string& help) {
  cmd->add_option_function<std::string>(
         "--device", [&device](const std::string& name) { device = anvil::device_named(name); }, help)
      ->check([](const std::string& name) { return anvil::device_named(name) ? std::string() : anvil::unknown_device(name); });
}

void add_eval_options(CLI::App* cmd, anvil::EvalOptions& o, EvalFlags& f) {
  cmd->add_option("--protocol", o.protocol,
                  "the rules judged by: cuda-agent (default: no torch compute in the forward, weights by name) or "
                  "kernelbench (torch ops allowed, seeded weights where names differ, KernelBench's tolerances); "
                  "docs/protocols.md");
  cmd->add_option("--preset", o.preset,
                  "tolerances: strict (cuda-agent's default), paper (atol=rtol=1e-2) or kernelbench (allclose, fp32 "
                  "1e-4, fp16/bf16 1e-2; kernelbench's default)");
  cmd->add_option("--trials", o.trials, "input sets checked (default 5)");
  cmd->add_option("--stress-trials", o.stress_trials,
                  "verification calls on inputs the task does not make (default " + std::to_string(o.stress_trials) +
                      "; 0: none, only to measure what they cost; docs/anti-hacking.md)")
      ->check(CLI::Range(0, 16));
  f.seed_opt = cmd->add_option("--seed", f.seed, "base seed (default: random, recorded in the result)");
  cmd->add_option("--warmup", o.warmup, "warm-up calls before timing (default " + std::to_string(o.warmup) + ")");
  cmd->add_option("--calls", o.calls, "timed calls (default " + std::to_string(o.calls) + ")");
  cmd->add_option("--input-sets", o.input_sets, "input sets rotated while timing (default " + std::to_string(o.input_sets) + ")");
  cmd->add_flag("--no-flush", f.no_flush, "do not flush L2 before each timed call");
  cmd->add_flag("--no-kernel-sum", f.no_kernel_sum, "skip the profiler's kernel-time sum");
  cmd->add_flag("--show-launch", f.show_launch,
                "let the host's launch latency into event times (no GPU sleep before each call)");
  add_timing_option(cmd, o.timing);
  cmd->add_option("--compile-mode", o.compile_mode,
                  "torch.compile mode for the baseline: default, reduce-overhead, max-autotune, ... or none");
  cmd->add_flag("--tf32", o.allow_tf32, "allow TF32 in matmul and cuDNN (default: off, for all three)");
  cmd->add_flag("--no-baseline-cache", f.no_baseline_cache, "measure eager and compile again");
  cmd->add_option("--timeout", f.timeout_s, "wall-clock limit of one evaluation, seconds (default 600)");
  add_device_option(cmd, o.device, "cuda or cpu (default: from the candidate)");
  cmd->add_option("--arch", o.build.arch, "target architecture for the build");
  cmd->add_flag("--no-defenses", f.no_defenses,
                "turn the anti-hacking defenses off (only to measure their cost; docs/anti-hacking.md)");
  cmd->add_flag("--no-vet", f.no_vet, "do not vet the task for degenerate outputs");
  cmd->add_flag("--allow-lower-precision", o.allow_lower_precision,
                "accept outputs and compute below the reference's precision (TF32, fp16)");
  cmd->add_option("--roofline-bandwidth", o.roofline_bandwidth,
                  "memory bandwidth for the speed-of-light floor, bytes/s (default: measured)");
  cmd->add_option("--roofline-flops", o.roofline_flops, "peak rate for the speed-of-light floor, flop/s (default: measured)");
  cmd->add_option("--zygote", o.zygote_socket,
                  "runner source: auto (default: a warm zygote, started on first use), none (a fresh "
                  "process), or the socket of a running python -m anvil.zygote");
}

// The options of `group` given on the command line, as arguments again (flags once, an option
// with each of its values), but those named in `except`.
std::vector<std::string> given_options(CLI::App* group, const std::vector<std::string>& except) {
  std::vector<std::string> args;
  for (const CLI::Option* opt : group->get_options()) {
    std::string name = opt->get_name();
    if (opt->count() == 0 || std::find(except.begin(), except.end(), name) != except.end()) continue;
    if (opt->get_expected_min() == 0) {
      args.push_back(name);
      continue;
    }
    for (const std::string& value : opt->results()) {
      args.push_back(name);
      args.push_back(value);
    }
  }
  return args;
}

void apply_eval_flags(anvil::EvalOptions& o, const EvalFlags& f) {
  if (*f.seed_opt) o.seed = f.seed;
  o.flush_l2 = !f.no_flush;
  o.hide_launch = !f.show_launch;
  o.kernel_sum = !f.no_kernel_sum;
  o.use_baseline_cache = !f.no_baseline_cache;
  o.defenses = !f.no_defenses;
  o.vet = !f.no_vet;
  o.timeout = std::chrono::seconds(f.timeout_s);
}

// The model and episode settings `anvil agent` and `anvil bench --agent` share.
struct AgentFlags {
  int wall_clock_s = 3 * 3600;
  double temperature = -1, top_p = -1;
  int top_k = -1, max_tokens = -1;
  int64_t sample_seed = -1;
  bool no_ncu = false;
  bool bash_gpu = false;
};

// seed_flag: `--seed` for `anvil agent`; `anvil bench` has the evaluation's --seed.
void add_agent_options(CLI::App* cmd, anvil::AgentArgs& ag, AgentFlags& f, const char* seed_flag) {
  cmd->add_option("--endpoint", ag.endpoint,
                  "the model server: http://HOST:PORT[/v1] (vLLM, SGLang, llama.cpp, a hosted API), or "
                  "`local` (starts the bundled small model on loopback)");
  cmd->add_option("--model", ag.model, "the served model's name");
  cmd->add_option("--api-key-env", ag.api_key_env,
                  "the environment variable holding the API key (default: ANVIL_API_KEY, then OPENAI_API_KEY)");
  cmd->add_option("--concurrency", ag.concurrency, "episodes at once (default 4)");
  cmd->add_option("--max-turns", ag.run.episode.max_turns, "model turns per episode (default 200)");
  cmd->add_option("--max-context", ag.run.episode.max_context, "context budget in tokens (default 131072)");
  cmd->add_option("--wall-clock", f.wall_clock_s, "seconds per episode (default 10800)");
  cmd->add_option("--temperature", f.temperature, "sampling temperature (default: the server's)");
  cmd->add_option("--top-p", f.top_p, "nucleus sampling (default: the server's)");
  cmd->add_option("--top-k", f.top_k, "top-k sampling (vLLM, SGLang)");
  cmd->add_option("--max-tokens", f.max_tokens, "tokens per model turn (default 8192)");
  cmd->add_option(seed_flag, f.sample_seed, "sampling seed");
  cmd->add_option("--retries", ag.retries, "attempts per model request (default 8)");
  cmd->add_option("--build-slots", ag.build_slots, "concurrent builds (default: a quarter of the cores)");
  cmd->add_option("--skill", ag.run.episode.skill, "the system prompt file (default share/agent/SKILL.md)");
  cmd->add_option("--max-tool-output", ag.run.episode.tools.max_output, "characters of one tool answer (default 12000)");
  cmd->add_flag("--no-ncu", f.no_ncu, "do not offer the ncu_profile tool");
  cmd->add_flag("--bash-gpu", f.bash_gpu,
                "the episodes' bash sees the GPUs (its GPU work is not scheduled: it can disturb other episodes' "
                "timing; default: verify, profile and ncu_profile alone use them)");
  cmd->add_flag_callback("--tokens", [&ag] { ag.tokens = 1; },
                         "token-in/token-out turns: each turn continues the last one's tokens exactly (needs vLLM's "
                         "/tokenize and /v1/completions with token ids; the default with --endpoint local)");
  cmd->add_flag_callback("--no-tokens", [&ag] { ag.tokens = -1; }, "turns as chat messages (with --endpoint local)");
  cmd->add_option("--local-model", ag.local_model, "with --endpoint local: a GGUF file (default: Gemma 3 270M)");
  cmd->add_option("--local-context", ag.local_context, "with --endpoint local: the server's context (default 8192)");
}

void apply_agent_flags(anvil::AgentArgs& ag, const AgentFlags& f) {
  auto& ep = ag.run.episode;
  ep.wall_clock = std::chrono::seconds(f.wall_clock_s);
  if (f.temperature >= 0) ep.sampling.temperature = f.temperature;
  if (f.top_p >= 0) ep.sampling.top_p = f.top_p;
  if (f.top_k >= 0) ep.sampling.top_k = f.top_k;
  ep.sampling.max_tokens = f.max_tokens > 0 ? f.max_tokens : 8192;
  if (f.sample_seed >= 0) ep.sampling.seed = static_cast<uint64_t>(f.sample_seed);
  ep.tools.ncu = !f.no_ncu;
  ep.tools.bash_gpu = f.bash_gpu;
}

// When the words after `anvil` name a command that does not exist where one is required ("anvil
// frobnicate", "anvil task shw"): which word, the closest command, and the commands there.
std::optional<std::string> unknown_command(CLI::App& app, int argc, char** argv) {
  CLI::App* at = &app;
  std::string path = "anvil";
  for (int i = 1; i < argc; ++i) {
    std::string word = argv[i];
    if (word.empty() || word[0] == '-') return std::nullopt;
    std::vector<std::string> names;
    CLI::App* next = nullptr;
    for (CLI::App* sub : at->get_subcommands([](CLI::App*) { return true; })) {
      names.push_back(sub->get_name());
      if (sub->get_name() == word) next = sub;
    }
    if (next == nullptr) {
      if (names.empty() || at->get_require_subcommand_min() == 0) return std::nullopt;
      std::string close = anvil::closest_word(word, names);
      return "unknown command '" + word + "' for " + path + (close.empty() ? "" : " (did you mean '" + close + "'?)") +
             "; the commands: " + anvil::join(names, ", ") + " (" + path + " --help)";
    }
    at = next;
    path += " " + word;
  }
  std::vector<std::string> names;
  for (CLI::App* sub : at->get_subcommands([](CLI::App*) { return true; })) names.push_back(sub->get_name());
  if (names.empty() || at->get_require_subcommand_min() == 0) return std::nullopt;
  return path + " needs a command: " + anvil::join(names, ", ") + " (" + path + " --help)";
}

// The commands: each add_* is called once, by main, and its arguments are static, alive while CLI11
// parses into them and runs the chosen command's callback, which sets `status`.
void add_init(CLI::App& app, int& status) {
  static anvil::InitArgs init;
  auto* init_cmd = app.add_subcommand("init", "create a ready candidate workdir for a task");
  init_cmd->add_option("--task", init.task, "task: FILE or DATASET#ROW")->required();
  init_cmd->add_option("dir", init.dir, "the workdir to create")->required();
  init_cmd->add_flag("--force", init.force, "write into an existing directory");
  init_cmd->add_flag_callback("--no-check", [&] { init.check = false; }, "do not import the task first");
  init_cmd->callback([&] { status = anvil::cmd_init(init); });
}

void add_build(CLI::App& app, int& status) {
  static anvil::BuildArgs build;
  auto* build_cmd = app.add_subcommand(
      "build", "build DIR/cuda_extension.so from DIR/kernels, or a single file's load_inline modules (cached)");
  build_cmd->add_option("candidate", build.dir, "the candidate workdir, or a KernelBench model_new.py")->required();
  build_cmd->add_option("--arch", build.opts.arch, "target architecture, e.g. sm_90a (default: the GPU's)");
  build_cmd->add_option("-j,--jobs", build.opts.jobs, "parallel compiles (default: all cores)");
  build_cmd->add_flag("--explain", build.opts.explain, "say why each unit was rebuilt or not");
  build_cmd->add_flag("-v,--verbose", build.opts.verbose, "keep compile commands in the log");
  build_cmd->add_flag("--json", build.json, "print the build report as JSON");
  static unsigned build_gib = 8;
  build_cmd->add_option("--memory-limit", build_gib, "GiB of address space each compiler process may use (default 8)");
  build_cmd->callback([&] {
    build.opts.memory_limit = static_cast<uint64_t>(build_gib) << 30;
    status = anvil::cmd_build(build);
  });
}

void add_build_sources(CLI::App& app, int& status) {
  static anvil::BuildSourcesArgs bs;
  static unsigned bs_gib = 8;
  static std::vector<std::string> sources;
  auto* bs_cmd = app.add_subcommand("build-sources", "build a torch extension from loose sources (load_inline)");
  bs_cmd->add_option("--name", bs.spec.name, "module name")->required();
  bs_cmd->add_option("--out", bs.spec.out_dir, "output directory")->required();
  bs_cmd->add_option("--cflag", bs.spec.cflags, "extra host compiler flag")->allow_extra_args(false);
  bs_cmd->add_option("--cuda-cflag", bs.spec.cuda_cflags, "extra nvcc flag")->allow_extra_args(false);
  bs_cmd->add_option("--ldflag", bs.spec.ldflags, "extra link flag")->allow_extra_args(false);
  bs_cmd->add_option("--include", bs.spec.include_dirs, "extra include directory")->allow_extra_args(false);
  static std::vector<std::string> headers;
  bs_cmd->add_option("--header", headers, "a header staged beside the sources (by file name), not compiled")
      ->allow_extra_args(false);
  bs_cmd->add_option("--arch", bs.opts.arch, "target architecture");
  bs_cmd->add_option("sources", sources, "sources (.cpp, .cu)")->required();
  bs_cmd->add_option("--memory-limit", bs_gib, "GiB of address space each compiler process may use (default 8)");
  bs_cmd->callback([&] {
    bs.opts.memory_limit = static_cast<uint64_t>(bs_gib) << 30;
    for (const auto& s : sources) bs.spec.sources.emplace_back(s);
    for (const auto& h : headers) bs.spec.headers.emplace_back(h);
    status = anvil::cmd_build_sources(bs);
  });
}

void add_eval(CLI::App& app, int& status) {
  static anvil::EvalArgs ev;
  static EvalFlags evf;
  auto* eval_cmd = app.add_subcommand("eval", "judge a candidate against its task: verify, time, reward");
  eval_cmd->add_option("--task", ev.opts.task,
                       "task: FILE or DATASET#ROW (default, for a workdir made by `anvil init`: its task)");
  eval_cmd->add_option("--candidate", ev.opts.candidate, "a workdir, or a KernelBench model_new.py")->required();
  eval_cmd->add_flag("--json", ev.json, "print the JSON result (schema anvil.eval/1)");
  eval_cmd->add_option("--out", ev.out, "also write the JSON result to this file");
  eval_cmd->add_option("--gpu", ev.opts.gpu, "GPU index (default 0)");
  add_eval_options(eval_cmd, ev.opts, evf);
  eval_cmd->callback([&] {
    apply_eval_flags(ev.opts, evf);
    status = anvil::cmd_eval(ev);
  });
}

void add_task(CLI::App& app, int& status) {
  static anvil::TaskShowArgs show;
  auto* task_cmd = app.add_subcommand("task", "inspect tasks");
  task_cmd->require_subcommand(1);
  auto* show_cmd = task_cmd->add_subcommand("show", "import a task and describe it");
  show_cmd->add_option("task", show.task, "FILE or DATASET#ROW")->required();
  show_cmd->add_flag("--json", show.json, "print JSON");
  show_cmd->add_flag_callback("--no-forward", [&] { show.forward = false; }, "do not run the reference forward");
  show_cmd->callback([&] { status = anvil::cmd_task_show(show); });
  static anvil::TaskProfileArgs prof;
  static bool prof_no_cache = false;
  auto* prof_cmd = task_cmd->add_subcommand(
      "profile", "where the reference's time goes: eager and torch.compile timed, their kernels, work and roofline floor");
  prof_cmd->add_option("task", prof.task, "FILE or DATASET#ROW")->required();
  add_device_option(prof_cmd, prof.device, "cuda or cpu (default: cuda when a GPU is present)");
  prof_cmd->add_option("--gpu", prof.opts.gpu, "which GPU (default 0)");
  prof_cmd->add_option("--compile-mode", prof.opts.compile_mode,
                       "torch.compile's mode (default, reduce-overhead, max-autotune, ...); none: eager alone");
  prof_cmd->add_option("--calls", prof.opts.calls, "timed calls per model (default " + std::to_string(prof.opts.calls) + ")")->check(CLI::Range(1, 100000));
  prof_cmd->add_option("--warmup", prof.opts.warmup, "warm-up calls (default " + std::to_string(prof.opts.warmup) + ")")->check(CLI::Range(0, 100000));
  prof_cmd->add_option("--top", prof.top, "kernels listed per model (default 8)")
      ->check(CLI::Range(size_t{1}, anvil::kReferenceProfileRows));
  prof_cmd->add_flag("--no-cache", prof_no_cache, "profile again instead of using a cached report");
  prof_cmd->add_flag("--json", prof.json, "print the report as JSON (anvil.reference-profile/1)");
  prof_cmd->callback([&] {
    prof.opts.use_cache = !prof_no_cache;
    status = anvil::cmd_task_profile(prof);
  });
}

void add_vet(CLI::App& app, int& status) {
  static anvil::VetArgs vet;
  static bool vet_no_cache = false;
  auto* vet_cmd = app.add_subcommand(
      "vet", "flag degenerate tasks: outputs that are zero, tiny, constant, an input, or independent of the input");
  vet_cmd->add_option("target", vet.target, "a task (FILE or DATASET#ROW), a directory of task files, or a dataset")
      ->required();
  add_device_option(vet_cmd, vet.device, "cuda or cpu (default: cuda when a GPU is present)");
  vet_cmd->add_option("--preset", vet.preset,
                      "tolerances: strict (default), paper (atol=rtol=1e-2) or kernelbench (allclose, fp32 1e-4)");
  vet_cmd->add_option("--seed", vet.seed, "base seed: the task's inputs of seed+1 and seed+2 (default 0)");
  vet_cmd->add_option("--timeout", vet.timeout_s, "wall-clock limit per task, seconds (default 600)");
  vet_cmd->add_option("--jobs", vet.jobs, "tasks vetted at once (default: " + std::to_string(anvil::kVetJobsCuda) + " on a GPU, 1 on the CPU)")
      ->check(CLI::Range(1, 64));
  vet_cmd->add_flag("--no-cache", vet_no_cache, "vet again instead of using cached reports");
  vet_cmd->add_flag("--json", vet.json, "print one JSON document");
  vet_cmd->callback([&] {
    vet.use_cache = !vet_no_cache;
    status = anvil::cmd_vet(vet);
  });
}

void add_baselines(CLI::App& app, int& status) {
  static anvil::BaselinesArgs bl;
  static EvalFlags blf;
  auto* bl_cmd = app.add_subcommand(
      "baselines", "measure eager and torch.compile for many tasks, once, for later evaluations (docs/baselines.md)");
  bl_cmd->add_option("target", bl.target, "a task (FILE or DATASET#ROW), a directory of task files, or a dataset")
      ->required();
  bl_cmd->add_option("--gpu", bl.opts.gpu, "GPU index (default 0)");
  bl_cmd->add_option("--jobs", bl.jobs,
                     "tasks whose torch.compile caches are warmed at once before measuring (default: 8 on a GPU, "
                     "none on the CPU)")
      ->check(CLI::Range(1, 64));
  bl_cmd->add_option("--overlap", bl.overlap,
                     "measurements at once on a GPU, one timing while the others prepare (default 4 prepared "
                     "together, 2 alone)")
      ->check(CLI::Range(1, 16));
  static std::string bl_prepare = "together";
  bl_cmd->add_option("--prepare", bl_prepare,
                     "on a GPU, together (default: a wave of measurements prepares at once, each then times "
                     "alone) or alone (each does all its GPU work alone)")
      ->check(CLI::IsMember({"together", "alone"}));
  bl_cmd->add_flag("--json", bl.json, "print one JSON document");
  add_eval_options(bl_cmd, bl.opts, blf);
  bl_cmd->callback([&] {
    apply_eval_flags(bl.opts, blf);
    bl.prepare = bl_prepare == "alone" ? anvil::Prepare::kAlone : anvil::Prepare::kTogether;
    status = anvil::cmd_baselines(bl);
  });
}

void add_serve(CLI::App& app, int& status) {
  static anvil::ServeArgs sv;
  static EvalFlags svf;
  auto* serve_cmd = app.add_subcommand(
      "serve", "the environment as an HTTP service: evaluations submitted, queued durably, judged one per GPU at a "
               "time (docs/service.md)");
  serve_cmd->add_option("--host", sv.host, "address to listen on (default 127.0.0.1; another needs a token)");
  serve_cmd->add_option("--port", sv.port, "port (default 8571; 0: any free one, printed)")->check(CLI::Range(0, 65535));
  serve_cmd->add_option("--token-env", sv.token_env,
                        "the environment variable holding the bearer token clients send (default ANVIL_SERVE_TOKEN)");
  serve_cmd->add_option("--state", sv.state, "the store and the requests' files (default: the cache's serve/)");
  add_gpus_option(serve_cmd, sv.gpus, "GPU indices, one evaluation lane each (default: every GPU)");
  serve_cmd->add_option("--overlap", sv.overlap,
                        "evaluations at once on each GPU: a wave prepares together (CUDA, the inputs, the reference), "
                        "then each is verified and timed with the GPU to itself (default " +
                            std::to_string(anvil::kOverlapTogetherCuda) + "; 1: one at a time, no lock taken)")
      ->check(CLI::Range(1, 16));
  serve_cmd->add_option("--max-queue", sv.max_queue, "evaluations waiting at most; beyond, 429 (default 256)")
      ->check(CLI::Range(1, 1000000));
  serve_cmd->add_option("--max-body-mb", sv.max_body_mb, "one request's body at most, MiB; beyond, 413 (default 16)")
      ->check(CLI::Range(1, 4096));
  serve_cmd->add_option("--session-ttl", sv.session_ttl_s,
                        "seconds a session lives after its last use unless it asks otherwise (default 3600)")
      ->check(CLI::Range(1, 7 * 24 * 3600));
  serve_cmd->add_flag("--bash-gpu", sv.bash_gpu,
                      "sessions' bash sees the GPUs (its GPU work is not scheduled: it can disturb other sessions' timing)");
  serve_cmd->add_option("--max-sessions", sv.max_sessions, "sessions open at once; beyond, 429 (default 1024)")
      ->check(CLI::Range(1, 1000000));
  serve_cmd->add_option("--max-files", sv.max_files, "files of one inline candidate at most (default 256)")
      ->check(CLI::Range(1, 100000));
  serve_cmd->add_option("--max-file-mb", sv.max_file_mb, "one inline file at most, MiB (default 4)")
      ->check(CLI::Range(1, 4096));
  serve_cmd->add_option("--keep-results-hours", sv.keep_results_h,
                        "hours a done evaluation's result (and its idempotency key) is kept (default 168); its files "
                        "go when it is done")
      ->check(CLI::Range(1, 24 * 3650));
  serve_cmd->add_option("--builders", sv.builders, "on a GPU: candidate builds at once ahead of their evaluation, each on a quarter of the cores (default 1); none on the CPU");
  serve_cmd->add_option("--ray", sv.ray.address,
                        "judge on a Ray cluster's workers (ADDRESS: host:port, auto, ray://...): one per GPU it offers, "
                        "or --ray-workers on its CPUs; sessions' verify and profile too (docs/service.md)");
  serve_cmd->add_option("--ray-workers", sv.ray.workers,
                        "with --ray: workers to place (default: every GPU of the cluster; on the CPU one per node)")
      ->check(CLI::Range(1, 4096));
  serve_cmd->add_option("--ray-python", sv.ray.python,
                        "with --ray: a Python with the cluster's Ray version (default: anvil's)");
  serve_cmd->add_option("--ray-anvil", sv.ray.anvil,
                        "with --ray: the anvil program on every node (default: this one's path)");
  // The evaluation options in a group of their own: --ray hands the ones given to every worker's server.
  static CLI::Option_group* eval_group = serve_cmd->add_option_group("evaluation", "every evaluation's settings");
  add_eval_options(eval_group, sv.opts, svf);
  serve_cmd->callback([&] {
    apply_eval_flags(sv.opts, svf);
    sv.ray.serve_args = given_options(eval_group, {"--device"});
    status = anvil::cmd_serve(sv);
  });
}

void add_agent(CLI::App& app, int& status) {
  static anvil::AgentArgs ag;
  static AgentFlags agf;
  static int eval_timeout_s = 600;
  static bool ag_tf32 = false;
  auto* agent_cmd = app.add_subcommand(
      "agent", "run the agent: a model behind an OpenAI-compatible server optimises tasks with anvil's tools; "
               "each final workdir is judged afresh");
  agent_cmd->add_option("--task", ag.task, "one task: FILE or DATASET#ROW");
  agent_cmd->add_option("--tasks", ag.tasks, "many tasks: a directory of task files, or a dataset (.jsonl, .parquet)");
  agent_cmd->add_option("--out", ag.out, "the run directory (default runs/agent-<UTC time>)");
  agent_cmd->add_flag("--resume", ag.resume, "continue the run in --out: finished episodes kept, the rest continue");
  agent_cmd->add_option("--samples", ag.samples, "episodes per task (default 1)");
  add_agent_options(agent_cmd, ag, agf, "--seed");
  add_gpus_option(agent_cmd, ag.gpus, "GPU indices for evaluations, e.g. 0,1 (default: all)");
  add_device_option(agent_cmd, ag.run.episode.tools.eval.device, "evaluate on cuda or cpu (default: the candidate's)");
  agent_cmd->add_option("--protocol", ag.run.episode.tools.eval.protocol,
                        "the rules judged by: cuda-agent (default) or kernelbench (docs/protocols.md)");
  agent_cmd->add_option("--preset", ag.run.episode.tools.eval.preset,
                        "tolerances: strict, paper or kernelbench (default: the protocol's)");
  add_timing_option(agent_cmd, ag.run.episode.tools.eval.timing);
  agent_cmd->add_option("--compile-mode", ag.run.episode.tools.eval.compile_mode,
                        "torch.compile mode of the baseline, or none");
  agent_cmd->add_flag("--tf32", ag_tf32, "allow TF32 (default: off)");
  agent_cmd->add_option("--eval-timeout", eval_timeout_s, "seconds per evaluation (default 600)");
  agent_cmd->add_flag("--json", ag.json, "print the run summary as JSON");
  agent_cmd->callback([&] {
    apply_agent_flags(ag, agf);
    ag.run.episode.tools.eval.allow_tf32 = ag_tf32;
    ag.run.episode.tools.eval.timeout = std::chrono::seconds(eval_timeout_s);
    status = anvil::cmd_agent(ag);
  });
}

// The model's prices for an agent run's cost: kept as text, checked by the command (a
// negative or non-numeric price is refused by name there).
void add_price_options(CLI::App* cmd, anvil::PriceArgs& p) {
  cmd->add_option_function<std::string>(
      "--price-input", [&p](const std::string& v) { p.input = v; },
      "with --agent: USD per million prompt (input) tokens, for the cost in the results; with --price-output")
      ->type_name("USD");
  cmd->add_option_function<std::string>(
      "--price-output", [&p](const std::string& v) { p.output = v; },
      "with --agent: USD per million completion (output) tokens; with --price-input")
      ->type_name("USD");
}

// The command line as parsed (after bench_resume_command's rewrite): `anvil bench` keeps its own in
// a new run's bench.json.
std::vector<std::string> g_args;

void add_bench(CLI::App& app, int& status) {
  static anvil::BenchArgs bn;
  static EvalFlags bnf;
  static AgentFlags bnaf;
  auto* bench_cmd = app.add_subcommand(
      "bench", "evaluate a suite of tasks (KernelBench layout) against solutions or the agent; report the paper's "
               "metrics per level (docs/bench.md)");
  bench_cmd->require_subcommand(0, 1);
  bench_cmd->add_option("--tasks", bn.opts.tasks, "the suite: a folder of level folders of <id>_<Name>.py, or a dataset");
  bench_cmd->add_option("--solutions", bn.opts.solutions,
                        "a folder of solutions matched by level and id: <id>_<Name>.py or <id>_<Name>/ workdirs");
  bench_cmd->add_option("--variant", bn.opts.variant,
                        "the sub-folder of a solution folder to use (default cuda with a GPU, else cpu)");
  bench_cmd->add_option("--out", bn.opts.out, "the run directory (default runs/bench-<UTC time>)");
  bench_cmd->add_flag("--resume", bn.opts.resume, "continue the run in --out: finished tasks are kept, never redone");
  add_gpus_option(bench_cmd, bn.opts.gpus, "GPU indices, e.g. 0,1: one timed evaluation at a time on each (default: all)");
  bench_cmd->add_option("--overlap", bn.opts.overlap,
                        "evaluations at once on each GPU: a wave prepares together (CUDA, the inputs, the reference), "
                        "then each is verified and timed with the GPU to itself (default " +
                            std::to_string(anvil::kOverlapTogetherCuda) + "; 1: one at a time, no lock taken)")
      ->check(CLI::Range(1, 16));
  bench_cmd->add_flag_callback("--no-progress", [&] { bn.opts.progress = false; }, "no progress display");
  bench_cmd->add_flag_callback("--no-prebuild", [&] { bn.opts.prebuild = false; },
                               "build each candidate when it is evaluated, on its GPU's slot, instead of all first on every core");
  bench_cmd->add_flag("--json", bn.json, "print results.json (anvil.bench/1) instead of the summary");
  add_eval_options(bench_cmd, bn.opts.eval, bnf);
  bench_cmd->add_flag("--agent", bn.agent, "run the agent on every task (one episode each) and judge its workdir");
  add_agent_options(bench_cmd, bn.agent_args, bnaf, "--sample-seed");
  add_price_options(bench_cmd, bn.prices);
  static std::string report_dir;
  static bool report_json = false;
  static anvil::PriceArgs report_prices;
  auto* report_cmd = bench_cmd->add_subcommand("report", "recompute results.json, report.md and report.html of a run");
  report_cmd->add_option("run", report_dir, "the run directory")->required();
  report_cmd->add_flag("--json", report_json, "print results.json");
  add_price_options(report_cmd, report_prices);
  report_cmd->callback([&] { status = anvil::cmd_bench_report(report_dir, report_json, report_prices); });
  static std::string cmp_a, cmp_b, cmp_out;
  static bool cmp_json = false;
  auto* cmp_cmd = bench_cmd->add_subcommand("compare", "two runs side by side, per level and per task");
  cmp_cmd->add_option("a", cmp_a, "run A: a run directory or its results.json")->required();
  cmp_cmd->add_option("b", cmp_b, "run B")->required();
  cmp_cmd->add_option("--out", cmp_out, "also write the Markdown to this file");
  cmp_cmd->add_flag("--json", cmp_json, "print the comparison as JSON");
  cmp_cmd->callback([&] { status = anvil::cmd_bench_compare(cmp_a, cmp_b, cmp_out, cmp_json); });
  bench_cmd->callback([&, bench_cmd] {  // the pointer by value: add_bench has returned when this runs
    if (bench_cmd->get_subcommands().size() > 0) return;  // report or compare ran
    apply_eval_flags(bn.opts.eval, bnf);
    apply_agent_flags(bn.agent_args, bnaf);
    if (g_args.size() > 2) bn.opts.command = anvil::bench_command_of({g_args.begin() + 2, g_args.end()});
    status = anvil::cmd_bench(bn);
  });
}

void add_rft(CLI::App& app, int& status) {
  static anvil::RftArgs rft;
  static std::string out;
  auto* cmd = app.add_subcommand(
      "rft", "recorded episodes as a rejection fine-tuning set: the rewarded, clean ones kept, one SFT example (a "
             "JSON line) each, the rest counted by why (docs/rft.md)");
  cmd->add_option("inputs", rft.opts.inputs, "run directories of `anvil agent --out`, or trajectory.json files")
      ->required();
  cmd->add_option("--out", out, "the JSON Lines file to write; its summary is OUT.summary.json")->required();
  cmd->add_option("--min-reward", rft.opts.filter.min_reward,
                  "keep episodes with at least this reward (default 1: the paper's reward > 0)");
  cmd->add_option("--max-repeats", rft.opts.filter.max_repeats,
                  "drop an episode that makes one call (same name, same arguments) more times in a row (default 2)")
      ->check(CLI::Range(1, 1000000));
  cmd->add_option("--max-stalled-compiles", rft.opts.filter.max_stalled_compiles,
                  "drop an episode with more failed compile/verify/profile calls in a row answering the same error "
                  "line (default 3)")
      ->check(CLI::Range(1, 1000000));
  cmd->add_option("--jobs", rft.opts.jobs, "files parsed at once (default: every core)")->check(CLI::Range(1, 256));
  cmd->add_flag("--skip-bad", rft.opts.skip_bad,
                "count a file that is not a readable anvil.trajectory/1 record as unreadable and go on (default: "
                "stop, write nothing)");
  cmd->add_flag("--json", rft.json, "print the summary (anvil.rft-summary/1) as JSON");
  cmd->callback([&] {
    rft.opts.out = out;
    status = anvil::cmd_rft(rft);
  });
}

void add_synth(CLI::App& app, int& status) {
  static anvil::SynthArgs sy;
  static std::string out, catalogue, index;
  static int timeout_s = 120;
  auto* cmd = app.add_subcommand(
      "synth", "training tasks made the CUDA-Agent-Ops-6K way: operators composed into fused KernelBench-format "
               "tasks, filtered (runs in eager and torch.compile, deterministic, not degenerate, runtime in range, "
               "not a near-duplicate, not KernelBench's), written as Parquet (docs/synth.md)");
  cmd->add_option("--count", sy.opts.count, "accepted tasks to write")->required()->check(CLI::Range(1L, 10000000L));
  cmd->add_option("--out", out, "the Parquet file (tasks.parquet); beside it its journal, summary and HTML page")
      ->required();
  cmd->add_option("--seed", sy.opts.seed, "the run's seed: task i of seed s is the same on any machine (default 0)");
  cmd->add_option("--jobs", sy.opts.jobs, "worker processes (default: every core)")->check(CLI::Range(1, 512));
  cmd->add_option("--timeout", timeout_s, "one task's CPU stage, seconds; beyond it the task is dropped (default 120)")
      ->check(CLI::Range(1, 86400));
  cmd->add_option("--max-attempts", sy.opts.max_attempts, "tasks tried at most (default 20 x count + 100)")
      ->check(CLI::Range(1L, 1000000000L));
  cmd->add_option("--max-similarity", sy.opts.max_similarity,
                  "drop a task more similar than this to a KernelBench problem (default 0.9, the paper's)")
      ->check(CLI::Range(0.0, 1.0));
  cmd->add_option("--catalogue", catalogue, "the operator catalogue (default share/synth/operators.json)");
  cmd->add_option("--index", index,
                  "the KernelBench index (default share/synth/kernelbench-index.json; python -m "
                  "anvil.synth.decontam index --kernelbench DIR makes one)");
  cmd->add_flag("--gpu", sy.opts.gpu,
                "also the GPU stage on the tasks the CPU stage accepts (at full size: eager and inductor agree, bitwise "
                "deterministic, eager 1-100 ms), and more of both until --count pass both");
  cmd->add_option("--gpu-procs", sy.opts.gpu_procs, "the GPU stage's processes (default: cores - 2, at most 12)")
      ->check(CLI::Range(1, 64));
  cmd->add_flag("--fresh", sy.opts.fresh, "start again when OUT's journal is of another run (default: refuse)");
  cmd->add_flag("--no-progress", [](int64_t) { sy.opts.progress = false; }, "no progress line on stderr");
  cmd->add_flag("--json", sy.json, "print the summary (anvil.synth-summary/1) as JSON");
  cmd->callback([&] {
    sy.opts.out = out;
    sy.opts.catalogue = catalogue;
    sy.opts.index = index;
    sy.opts.timeout = std::chrono::seconds(timeout_s);
    status = anvil::cmd_synth(sy);
  });
}

void add_env_and_cache(CLI::App& app, int& status) {
  static bool env_json = false, env_refresh = false;
  auto* env_cmd = app.add_subcommand("env", "show the build environment (compilers, torch, GPUs)");
  env_cmd->add_flag("--json", env_json, "print JSON");
  env_cmd->add_flag("--refresh", env_refresh, "probe again instead of using the cached probe");
  env_cmd->callback([&] { status = anvil::cmd_env(env_json, env_refresh); });

  auto* cache_cmd = app.add_subcommand("cache", "inspect or clear anvil's cache ($ANVIL_CACHE)");
  cache_cmd->require_subcommand(1);
  cache_cmd->add_subcommand("stats", "every part of the cache: what it holds, files and size")->callback([&] {
    status = anvil::cmd_cache("stats");
  });
  cache_cmd->add_subcommand("clear", "remove every cached result (builds, baselines, vetting, probes); keep anvil "
                                     "serve's store, the zygotes' sockets and the lock files")
      ->callback([&] { status = anvil::cmd_cache("clear"); });
}

}  // namespace

int main(int argc, char** argv) {
  anvil::install_stop_handler();  // SIGINT/SIGTERM end every runner and compiler this process started
  CLI::App app{"anvil: build, verify and judge CUDA kernel candidates for PyTorch modules"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "anvil 0.1.0");
  int status = 0;

  add_init(app, status);
  add_build(app, status);
  add_build_sources(app, status);
  add_eval(app, status);
  add_task(app, status);
  add_vet(app, status);
  add_baselines(app, status);
  add_serve(app, status);
  add_agent(app, status);
  add_bench(app, status);
  add_rft(app, status);
  add_synth(app, status);
  add_env_and_cache(app, status);

  if (auto unknown = unknown_command(app, argc, argv)) {
    std::fprintf(stderr, "anvil: %s\n", unknown->c_str());
    return 2;
  }
  // `anvil bench --resume --out DIR` alone: the run's own command again.
  g_args.assign(argv, argv + argc);
  std::string resume_err;
  if (auto resumed = anvil::bench_resume_command(g_args, &resume_err)) {
    g_args = *resumed;
  } else if (!resume_err.empty()) {
    std::fprintf(stderr, "anvil bench: %s\n", resume_err.c_str());
    return 2;
  }
  std::vector<char*> args_c;
  for (auto& a : g_args) args_c.push_back(a.data());
  try {
    app.parse(static_cast<int>(args_c.size()), args_c.data());
  } catch (const CLI::ParseError& e) {
    int rc = app.exit(e);
    return rc == 0 ? 0 : 2;
  } catch (const std::exception& e) {
    // A command that threw (a bug of anvil's, or a resource gone): said in one line and exit 2
    // ("could not", as every command's own failures), never std::terminate's abort with no answer
    // and the evaluation's private copy left behind; the stack has unwound, so it is removed.
    std::fprintf(stderr, "anvil %s: internal error: %s\n", argc > 1 ? argv[1] : "", e.what());
    return 2;
  }
  return status;
}
