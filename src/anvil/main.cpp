// anvil: the command-line program. It parses arguments and calls one of the
// library's commands (src/anvil/commands.h); the work is all in the library.
#include <CLI/CLI.hpp>

#include "anvil/commands.h"

int main(int argc, char** argv) {
  CLI::App app{"anvil: build, verify and judge CUDA kernel candidates for PyTorch modules"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "anvil 0.1.0");
  int status = 0;

  anvil::InitArgs init;
  auto* init_cmd = app.add_subcommand("init", "create a ready candidate workdir for a task");
  init_cmd->add_option("--task", init.task, "task: FILE or DATASET#ROW")->required();
  init_cmd->add_option("dir", init.dir, "the workdir to create")->required();
  init_cmd->add_flag("--force", init.force, "write into an existing directory");
  init_cmd->add_flag("!--no-check", init.check, "do not import the task first");
  init_cmd->callback([&] { status = anvil::cmd_init(init); });

  anvil::BuildArgs build;
  auto* build_cmd = app.add_subcommand("build", "build DIR/cuda_extension.so from DIR/kernels (cached)");
  build_cmd->add_option("dir", build.dir, "the candidate workdir")->required();
  build_cmd->add_option("--arch", build.opts.arch, "target architecture, e.g. sm_90a (default: the GPU's)");
  build_cmd->add_option("-j,--jobs", build.opts.jobs, "parallel compiles (default: all cores)");
  build_cmd->add_flag("--explain", build.opts.explain, "say why each unit was rebuilt or not");
  build_cmd->add_flag("-v,--verbose", build.opts.verbose, "keep compile commands in the log");
  build_cmd->add_flag("--json", build.json, "print the build report as JSON");
  build_cmd->callback([&] { status = anvil::cmd_build(build); });

  anvil::BuildSourcesArgs bs;
  std::vector<std::string> sources;
  auto* bs_cmd = app.add_subcommand("build-sources", "build a torch extension from loose sources (load_inline)");
  bs_cmd->add_option("--name", bs.spec.name, "module name")->required();
  bs_cmd->add_option("--out", bs.spec.out_dir, "output directory")->required();
  bs_cmd->add_option("--cflag", bs.spec.cflags, "extra host compiler flag")->allow_extra_args(false);
  bs_cmd->add_option("--cuda-cflag", bs.spec.cuda_cflags, "extra nvcc flag")->allow_extra_args(false);
  bs_cmd->add_option("--ldflag", bs.spec.ldflags, "extra link flag")->allow_extra_args(false);
  bs_cmd->add_option("--include", bs.spec.include_dirs, "extra include directory")->allow_extra_args(false);
  bs_cmd->add_option("--arch", bs.opts.arch, "target architecture");
  bs_cmd->add_option("sources", sources, "sources (.cpp, .cu)")->required();
  bs_cmd->callback([&] {
    for (const auto& s : sources) bs.spec.sources.emplace_back(s);
    status = anvil::cmd_build_sources(bs);
  });

  anvil::EvalArgs ev;
  int timeout_s = 600;
  uint32_t seed = 0;
  bool no_flush = false, no_kernel_sum = false, no_baseline_cache = false, show_launch = false;
  auto* eval_cmd = app.add_subcommand("eval", "judge a candidate against its task: verify, time, reward");
  eval_cmd->add_option("--task", ev.opts.task, "task: FILE or DATASET#ROW")->required();
  eval_cmd->add_option("--candidate", ev.opts.candidate, "a workdir, or a KernelBench model_new.py")->required();
  eval_cmd->add_flag("--json", ev.json, "print the JSON result (schema anvil.eval/1)");
  eval_cmd->add_option("--out", ev.out, "also write the JSON result to this file");
  eval_cmd->add_option("--preset", ev.opts.preset, "tolerances: strict (default) or paper (atol=rtol=1e-2)");
  eval_cmd->add_option("--trials", ev.opts.trials, "input sets checked (default 5)");
  auto* seed_opt = eval_cmd->add_option("--seed", seed, "base seed (default: random, recorded in the result)");
  eval_cmd->add_option("--warmup", ev.opts.warmup, "warm-up calls before timing (default 10)");
  eval_cmd->add_option("--calls", ev.opts.calls, "timed calls (default 30)");
  eval_cmd->add_option("--input-sets", ev.opts.input_sets, "input sets rotated while timing (default 4)");
  eval_cmd->add_flag("--no-flush", no_flush, "do not flush L2 before each timed call");
  eval_cmd->add_flag("--no-kernel-sum", no_kernel_sum, "skip the profiler's kernel-time sum");
  eval_cmd->add_flag("--show-launch", show_launch,
                     "let the host's launch latency into event times (no GPU sleep before each call)");
  eval_cmd->add_option("--timing", ev.opts.timing, "what the reward uses: events (default) or kernel-sum");
  eval_cmd->add_option("--compile-mode", ev.opts.compile_mode,
                       "torch.compile mode for the baseline: default, reduce-overhead, max-autotune, ... or none");
  eval_cmd->add_flag("--tf32", ev.opts.allow_tf32, "allow TF32 in matmul and cuDNN (default: off, for all three)");
  eval_cmd->add_flag("--no-baseline-cache", no_baseline_cache, "measure eager and compile again");
  eval_cmd->add_option("--timeout", timeout_s, "wall-clock limit of the run, seconds (default 600)");
  eval_cmd->add_option("--gpu", ev.opts.gpu, "GPU index (default 0)");
  eval_cmd->add_option("--device", ev.opts.device, "cuda or cpu (default: from the candidate)");
  eval_cmd->add_option("--arch", ev.opts.build.arch, "target architecture for the build");
  bool no_defenses = false;
  eval_cmd->add_flag("--no-defenses", no_defenses,
                     "turn the anti-hacking defenses off (only to measure their cost; docs/anti-hacking.md)");
  bool no_vet = false;
  eval_cmd->add_flag("--no-vet", no_vet, "do not vet the task for degenerate outputs");
  eval_cmd->add_flag("--allow-lower-precision", ev.opts.allow_lower_precision,
                     "accept outputs and compute below the reference's precision (TF32, fp16)");
  eval_cmd->add_option("--roofline-bandwidth", ev.opts.roofline_bandwidth,
                       "memory bandwidth for the speed-of-light floor, bytes/s (default: measured)");
  eval_cmd->add_option("--roofline-flops", ev.opts.roofline_flops,
                       "peak rate for the speed-of-light floor, flop/s (default: measured)");
  eval_cmd->add_option("--zygote", ev.opts.zygote_socket,
                       "runner source: auto (default: a warm zygote, started on first use), none (a fresh "
                       "process), or the socket of a running python -m anvil.zygote");
  eval_cmd->callback([&] {
    if (*seed_opt) ev.opts.seed = seed;
    ev.opts.flush_l2 = !no_flush;
    ev.opts.hide_launch = !show_launch;
    ev.opts.kernel_sum = !no_kernel_sum;
    ev.opts.use_baseline_cache = !no_baseline_cache;
    ev.opts.defenses = !no_defenses;
    ev.opts.vet = !no_vet;
    ev.opts.timeout = std::chrono::seconds(timeout_s);
    status = anvil::cmd_eval(ev);
  });

  anvil::TaskShowArgs show;
  auto* task_cmd = app.add_subcommand("task", "inspect tasks");
  task_cmd->require_subcommand(1);
  auto* show_cmd = task_cmd->add_subcommand("show", "import a task and describe it");
  show_cmd->add_option("task", show.task, "FILE or DATASET#ROW")->required();
  show_cmd->add_flag("--json", show.json, "print JSON");
  show_cmd->add_flag("!--no-forward", show.forward, "do not run the reference forward");
  show_cmd->callback([&] { status = anvil::cmd_task_show(show); });

  anvil::VetArgs vet;
  bool vet_no_cache = false;
  auto* vet_cmd = app.add_subcommand(
      "vet", "flag degenerate tasks: outputs that are zero, tiny, constant, an input, or independent of the input");
  vet_cmd->add_option("target", vet.target, "a task (FILE or DATASET#ROW), a directory of task files, or a dataset")
      ->required();
  vet_cmd->add_option("--device", vet.device, "cuda or cpu (default: cuda when a GPU is present)");
  vet_cmd->add_option("--preset", vet.preset, "tolerances: strict (default) or paper (atol=rtol=1e-2)");
  vet_cmd->add_option("--seed", vet.seed, "base seed: the task's inputs of seed+1 and seed+2 (default 0)");
  vet_cmd->add_option("--timeout", vet.timeout_s, "wall-clock limit per task, seconds (default 600)");
  vet_cmd->add_flag("--no-cache", vet_no_cache, "vet again instead of using cached reports");
  vet_cmd->add_flag("--json", vet.json, "print one JSON document");
  vet_cmd->callback([&] {
    vet.use_cache = !vet_no_cache;
    status = anvil::cmd_vet(vet);
  });

  anvil::AgentArgs ag;
  int wall_clock_s = 3 * 3600, eval_timeout_s = 600;
  double temperature = -1, top_p = -1;
  int top_k = -1, max_tokens = -1;
  int64_t sample_seed = -1;
  bool no_ncu = false, ag_tf32 = false;
  auto* agent_cmd = app.add_subcommand(
      "agent", "run the agent: a model behind an OpenAI-compatible server optimises tasks with anvil's tools; "
               "each final workdir is judged afresh");
  agent_cmd->add_option("--task", ag.task, "one task: FILE or DATASET#ROW");
  agent_cmd->add_option("--tasks", ag.tasks, "many tasks: a directory of task files, or a dataset (.jsonl, .parquet)");
  agent_cmd->add_option("--endpoint", ag.endpoint,
                        "the model server: http://HOST:PORT[/v1] (vLLM, SGLang, llama.cpp, a hosted API), or "
                        "`local` (starts the bundled small model on loopback)");
  agent_cmd->add_option("--model", ag.model, "the served model's name");
  agent_cmd->add_option("--api-key-env", ag.api_key_env,
                        "the environment variable holding the API key (default: ANVIL_API_KEY, then OPENAI_API_KEY)");
  agent_cmd->add_option("--out", ag.out, "the run directory (default runs/agent-<UTC time>)");
  agent_cmd->add_flag("--resume", ag.resume, "continue the run in --out: finished episodes kept, the rest continue");
  agent_cmd->add_option("--samples", ag.samples, "episodes per task (default 1)");
  agent_cmd->add_option("--concurrency", ag.concurrency, "episodes at once (default 4)");
  agent_cmd->add_option("--max-turns", ag.run.episode.max_turns, "model turns per episode (default 200)");
  agent_cmd->add_option("--max-context", ag.run.episode.max_context, "context budget in tokens (default 131072)");
  agent_cmd->add_option("--wall-clock", wall_clock_s, "seconds per episode (default 10800)");
  agent_cmd->add_option("--temperature", temperature, "sampling temperature (default: the server's)");
  agent_cmd->add_option("--top-p", top_p, "nucleus sampling (default: the server's)");
  agent_cmd->add_option("--top-k", top_k, "top-k sampling (vLLM, SGLang)");
  agent_cmd->add_option("--max-tokens", max_tokens, "tokens per model turn (default 8192)");
  agent_cmd->add_option("--seed", sample_seed, "sampling seed");
  agent_cmd->add_option("--retries", ag.retries, "attempts per model request (default 8)");
  agent_cmd->add_option("--gpus", ag.gpus, "GPU indices for evaluations (default: all)");
  agent_cmd->add_option("--build-slots", ag.build_slots, "concurrent builds (default: a quarter of the cores)");
  agent_cmd->add_option("--skill", ag.run.episode.skill, "the system prompt file (default share/agent/SKILL.md)");
  agent_cmd->add_option("--max-tool-output", ag.run.episode.tools.max_output,
                        "characters of one tool answer (default 12000)");
  agent_cmd->add_option("--device", ag.run.episode.tools.eval.device, "evaluate on cuda or cpu (default: the candidate's)");
  agent_cmd->add_option("--preset", ag.run.episode.tools.eval.preset, "tolerances: strict (default) or paper");
  agent_cmd->add_option("--timing", ag.run.episode.tools.eval.timing, "what the reward uses: events (default) or kernel-sum");
  agent_cmd->add_option("--compile-mode", ag.run.episode.tools.eval.compile_mode,
                        "torch.compile mode of the baseline, or none");
  agent_cmd->add_flag("--tf32", ag_tf32, "allow TF32 (default: off)");
  agent_cmd->add_option("--eval-timeout", eval_timeout_s, "seconds per evaluation (default 600)");
  agent_cmd->add_flag("--no-ncu", no_ncu, "do not offer the ncu_profile tool");
  agent_cmd->add_option("--local-model", ag.local_model, "with --endpoint local: a GGUF file (default: Gemma 3 270M)");
  agent_cmd->add_option("--local-context", ag.local_context, "with --endpoint local: the server's context (default 8192)");
  agent_cmd->add_flag("--json", ag.json, "print the run summary as JSON");
  agent_cmd->callback([&] {
    auto& ep = ag.run.episode;
    ep.wall_clock = std::chrono::seconds(wall_clock_s);
    if (temperature >= 0) ep.sampling.temperature = temperature;
    if (top_p >= 0) ep.sampling.top_p = top_p;
    if (top_k >= 0) ep.sampling.top_k = top_k;
    ep.sampling.max_tokens = max_tokens > 0 ? max_tokens : 8192;
    if (sample_seed >= 0) ep.sampling.seed = static_cast<uint64_t>(sample_seed);
    ep.tools.ncu = !no_ncu;
    ep.tools.eval.allow_tf32 = ag_tf32;
    ep.tools.eval.timeout = std::chrono::seconds(eval_timeout_s);
    status = anvil::cmd_agent(ag);
  });

  bool env_json = false, env_refresh = false;
  auto* env_cmd = app.add_subcommand("env", "show the build environment (compilers, torch, GPUs)");
  env_cmd->add_flag("--json", env_json, "print JSON");
  env_cmd->add_flag("--refresh", env_refresh, "probe again instead of using the cached probe");
  env_cmd->callback([&] { status = anvil::cmd_env(env_json, env_refresh); });

  auto* cache_cmd = app.add_subcommand("cache", "inspect or clear the build cache");
  cache_cmd->require_subcommand(1);
  cache_cmd->add_subcommand("stats", "sizes of the cache's parts")->callback([&] { status = anvil::cmd_cache("stats"); });
  cache_cmd->add_subcommand("clear", "remove every cache entry")->callback([&] { status = anvil::cmd_cache("clear"); });

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int rc = app.exit(e);
    return rc == 0 ? 0 : 2;
  }
  return status;
}
