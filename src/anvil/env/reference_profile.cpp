// reference_profile.cpp: runs python/anvil/reference_profile.py on one task, caches its report, and
// writes it as text.
#include "anvil/env/reference_profile.h"

#include <sys/resource.h>

#include <algorithm>
#include <cstdio>

#include "anvil/env/baselines.h"
#include "anvil/env/cache_layout.h"
#include "anvil/env/eval.h"
#include "anvil/env/launch.h"
#include "anvil/env/reward.h"
#include "anvil/util/fs.h"
#include "anvil/util/hash.h"
#include "anvil/util/json_text.h"
#include "anvil/util/strings.h"
#include "anvil/util/subprocess.h"

namespace anvil {

namespace fs = std::filesystem;

namespace {

constexpr const char* kFormat = "anvil-reference-profile-v1";
constexpr const char* kProtocol = "anvil.reference-profile/1";
// The Python files whose behaviour a report depends on.
const char* const kSources[] = {"python/anvil/reference_profile.py", "python/anvil/timing.py",
                                "python/anvil/evidence.py", "python/anvil/task_probe.py", "python/anvil/harness.py"};

fs::path cache_path(const Environment& env, const std::string& key) {
  return cache_dir(env, CacheArea::kReference) / (key + ".json");
}

std::optional<double> number(const nlohmann::json& j, const char* key) {
  if (!j.is_object() || !j.contains(key) || !j[key].is_number()) return std::nullopt;
  return j[key].get<double>();
}

std::string printf_string(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

std::string ms(double v) { return printf_string(v >= 100 ? "%.1f ms" : "%.4f ms", v); }

std::string bytes_text(double b) {
  if (b >= 1e9) return printf_string("%.2f GB", b / 1e9);
  if (b >= 1e6) return printf_string("%.1f MB", b / 1e6);
  if (b >= 1e3) return printf_string("%.1f KB", b / 1e3);
  return printf_string("%.0f B", b);
}

std::string flops_text(double f) {
  if (f >= 1e12) return printf_string("%.2f TFLOP", f / 1e12);
  if (f >= 1e9) return printf_string("%.2f GFLOP", f / 1e9);
  if (f >= 1e6) return printf_string("%.2f MFLOP", f / 1e6);
  return printf_string("%.0f FLOP", f);
}

// "eager          2.4120 ms  (GPU busy 2.3010 ms, 7 kernel launches a call)"
std::string time_line(const char* label, const nlohmann::json& part, bool cuda) {
  char head[32];
  std::snprintf(head, sizeof head, "  %-14s ", label);
  std::string s = head;
  if (!part.is_object()) return s + "not measured (compile mode none)\n";
  if (part.contains("error")) return s + "failed: " + part["error"].get<std::string>() + "\n";
  auto t = number(part, "ms");
  if (!t) return s + "not measured\n";
  s += ms(*t);
  if (cuda) {
    auto busy = number(part, "kernel_sum_ms");
    auto launches = number(part, "launches");
    std::string extra;
    if (busy) extra += "GPU busy " + ms(*busy);
    if (launches) {
      extra += (extra.empty() ? "" : ", ") + printf_string(*launches == 1 ? "%g kernel launch a call" : "%g kernel launches a call",
                                                           *launches);
    }
    if (!extra.empty()) s += "  (" + extra + ")";
  }
  return s + "\n";
}

// What the next milestones take, from the times measured here (reward.h).
std::string targets(std::optional<double> eager, std::optional<double> compile, bool kernel_sum) {
  std::string s = kernel_sum ? "(The reward compares GPU kernel time here, --timing kernel-sum: the targets are from "
                               "the baselines' GPU busy time.)\n"
                             : "";
  if (eager && compile) {
    s += "To earn 3 (" + more_than_faster() + " than both): under " + ms(std::min(*eager, *compile) / kFasterThreshold) +
         ". To earn 2 (" + more_than_faster() + " than eager): under " + ms(*eager / kFasterThreshold) + ".\n";
  } else if (eager) {
    s += "To earn 2 (" + more_than_faster() + " than eager): under " + ms(*eager / kFasterThreshold) +
         " (no torch.compile time here).\n";
  }
  if (!s.empty()) s += "(The judge measures its own baselines; `profile` shows the times your reward is computed from.)\n";
  return s;
}

// `eager`: eager's time; `three_ms`: the time reward 3 asks for (0: none).
std::string work_lines(const nlohmann::json& r, std::optional<double> eager, double three_ms) {
  const nlohmann::json& w = r.value("work", nlohmann::json());
  if (!w.is_object() || w.contains("error")) {
    return "Work of one call: not counted" +
           (w.is_object() ? " (" + w["error"].get<std::string>() + ")" : std::string()) + ".\n";
  }
  double flops = number(w, "flops").value_or(0), bytes = number(w, "bytes").value_or(0);
  std::string s = "Work of one call: " + (flops > 0 ? flops_text(flops) + " in matrix products and convolutions"
                                                  : std::string("no matrix product or convolution")) +
                  " (torch's FLOP count covers only those), " + bytes_text(bytes) + " moved at least (inputs " +
                  bytes_text(number(w, "input_bytes").value_or(0)) +
                  ", parameters " + bytes_text(number(w, "parameter_bytes").value_or(0)) + ", outputs " +
                  bytes_text(number(w, "output_bytes").value_or(0)) + ", each once)";
  if (bytes > 0 && flops > 0) s += printf_string(": %.2f FLOP/byte", flops / bytes);
  s += ".\n";
  const nlohmann::json& p = r.value("peaks", nlohmann::json());
  if (p.is_object() && p.contains("error")) {
    return s + "Roofline floor: not given (the GPU's peaks could not be measured: " + p["error"].get<std::string>() + ").\n";
  }
  auto bw = number(p, "bandwidth_bytes_per_s"), fp32 = number(p, "fp32_flops_per_s");
  if (!bw || !fp32 || *bw <= 0 || *fp32 <= 0) return s;
  double mem_ms = bytes / *bw * 1e3, math_ms = flops / *fp32 * 1e3, floor = std::max(mem_ms, math_ms);
  s += "Roofline floor: " + ms(floor) + ", " + (mem_ms >= math_ms ? "memory-bound" : "compute-bound") + " (" +
       bytes_text(bytes) + printf_string(" at %.0f GB/s measured: ", *bw / 1e9) + ms(mem_ms) +
       (flops > 0 ? "; " + flops_text(flops) + printf_string(" at %.1f TFLOP/s fp32 measured: ", *fp32 / 1e12) + ms(math_ms)
                  : std::string()) +
       ")";
  if (eager && *eager > 0) s += printf_string(". Eager reaches %.1f%% of the floor's speed", 100 * floor / *eager);
  s += ".\n";
  if (three_ms > 0 && three_ms < floor) {
    s += "Reward 3 asks for under " + ms(three_ms) + ", below this floor: it takes fewer bytes or FLOPs than the " +
         "reference's, or more than the measured peaks.\n";
  }
  return s;
}

std::string rows(const char* label, const nlohmann::json& part, bool cuda, size_t top) {
  const char* key = cuda ? "kernels" : "ops";
  if (!part.is_object() || !part.contains(key) || !part[key].is_array() || part[key].empty()) return "";
  std::string s = std::string(label) + (cuda ? "'s kernels (GPU time per forward, share, launches per forward):\n"
                                             : "'s time by op (self CPU time per forward, share, calls per forward):\n");
  size_t shown = 0;
  for (const auto& row : part[key]) {
    if (shown++ == top) {
      s += "  (" + std::to_string(part[key].size() - top) + " more; top shows more)\n";
      break;
    }
    auto share = number(row, "share");
    s += (share ? printf_string("  %5.1f%%", 100 * *share) : std::string("      ?")) + "  " +
         ms(number(row, "ms").value_or(0)) + printf_string("  x%g  ", number(row, "launches").value_or(0)) +
         row.value("name", std::string("?")) + "\n";
  }
  return s;
}

}  // namespace

std::string reference_profile_key(const Environment& env, const Task& task, const ReferenceProfileOptions& opts) {
  Hasher h;
  h.add("format", kFormat)
      .add("task", task.hash)
      .add("device", to_string(opts.device))
      .add("gpu", opts.device == Device::Cuda && !env.gpus.empty() ? env.gpus[0].name + "|" + env.driver : "cpu")
      .add("torch", env.torch.version + "|" + env.torch.cuda)
      .add("compile_mode", opts.compile_mode)
      .add("method", std::to_string(opts.warmup) + "|" + std::to_string(opts.calls) + "|" +
                         std::to_string(opts.input_sets) + "|" + (opts.allow_tf32 ? "tf32" : "fp32") + "|" + timing_method_name(opts.timing));
  for (const char* rel : kSources) h.add(rel, hash_file(env.home / rel).value_or("missing"));
  return h.hex();
}

std::string unclean_reference_profile(const nlohmann::json& report) {
  Device device = device_named(report.value("device", std::string())).value_or(Device::Cpu);
  for (const char* part : {"eager", "compile"}) {
    const nlohmann::json& p = report.value(part, nlohmann::json());
    if (!p.is_object() || !p.contains("ms")) continue;
    nlohmann::json t = {{"median_ms", p["ms"]}, {"p25_ms", p.value("p25_ms", nlohmann::json())},
                        {"p75_ms", p.value("p75_ms", nlohmann::json())}};
    if (auto why = unclean_baseline(t, device, false)) return std::string(part) + ": " + *why;
  }
  return "";
}

ReferenceProfileOptions reference_profile_options(const EvalOptions& eval, const Environment& env) {
  ReferenceProfileOptions o;
  o.device = device_or_default(eval.device, env);
  o.gpu = eval.gpu;
  o.compile_mode = eval.compile_mode;
  o.warmup = eval.warmup;
  o.calls = eval.calls;
  o.input_sets = eval.input_sets;
  o.allow_tf32 = eval.allow_tf32;
  o.timing = eval.timing;
  o.zygote = eval.zygote_socket;
  o.gpu_lock = eval.gpu_lock.has_value();
  o.memory_limit_bytes = eval.memory_limit_bytes;
  return o;
}

ReferenceProfile profile_reference(const Environment& env, const Task& task, const ReferenceProfileOptions& opts) {
  ReferenceProfile res;
  auto fail = [&](const std::string& why) {
    res.error = why;
    return res;
  };
  if (opts.device == Device::Cuda && env.gpus.empty()) return fail("no GPU found: profile on the CPU or on a GPU host");
  if (!env.torch.present) return fail(env.probe_error.empty() ? "torch is not available" : env.probe_error);
  fs::path entry = cache_path(env, reference_profile_key(env, task, opts));
  if (opts.use_cache) {
    if (auto text = read_file(entry)) {
      auto j = nlohmann::json::parse(*text, nullptr, false);
      if (j.is_object() && j.value("protocol", std::string()) == kProtocol && j.value("status", std::string()) == "done") {
        res.ok = res.cached = true;
        res.report = j;
        return res;
      }
    }
  }
  TempDir scratch;
  try {
    scratch = TempDir(cache_dir(env, CacheArea::kTmp), "reference");
  } catch (const std::exception& e) {
    return fail(e.what());
  }
  const fs::path& dir = scratch.path();
  fs::path file = dir / "model.py";
  std::string err;
  if (!write_file_atomic(file, task.code, &err, 0444)) return fail(err);
  nlohmann::json request = {{"protocol", kProtocol},         {"task_file", file.string()},
                            {"device", to_string(opts.device)}, {"compile_mode", opts.compile_mode},
                            {"warmup", opts.warmup},            {"calls", opts.calls},
                            {"input_sets", opts.input_sets},    {"allow_tf32", opts.allow_tf32},
                            {"top", kReferenceProfileRows}};
  if (opts.device == Device::Cuda && opts.gpu_lock) request["gpu_lock"] = gpu_lock_path(env, opts.gpu).string();

  SubprocessOptions so;
  so.cwd = dir;
  so.stdin_data = json_text(request);
  so.merge_stderr = false;
  so.capture_fd3 = true;
  so.max_output = 1 << 20;
  so.timeout = opts.timeout;
  exclude_lock_waits(so, request, false);
  so.max_rss_bytes = opts.memory_limit_bytes;
  so.rlimits = {{RLIMIT_CORE, 0}};
  so.new_network = network_isolation_available();
  so.env = runner_environment(env);
  so.clear_env = true;
  if (opts.device == Device::Cuda) so.env["CUDA_VISIBLE_DEVICES"] = std::to_string(opts.gpu);
  Launch launched = launch_python(env, PyModule::kReferenceProfile, opts.zygote, request, so, dir);
  SubprocessResult& r = launched.result;
  if (launched.zygote) r.err_output = r.output;  // the zygote's child has one output file for both
  res.seconds = r.seconds;
  if (!r.started) return fail("cannot run " + env.python.string() + ": " + r.error);
  if (r.timed_out) return fail("the reference's profile did not finish within " + std::to_string(opts.timeout.count()) + " s");
  if (r.memory_exceeded) {
    return fail("the reference's profile used more than " + std::to_string(opts.memory_limit_bytes >> 30) + " GiB of memory");
  }
  nlohmann::json report = nlohmann::json::parse(r.fd3_output, nullptr, false);
  if (!report.is_object()) {
    std::string tail = trim(tail_lines(r.err_output, 8));
    return fail("anvil.reference_profile ended without a report (" + r.describe() + ")" + (tail.empty() ? "" : ":\n" + tail));
  }
  res.report = report;
  if (report.value("status", std::string()) != "done") {
    res.task_error = report.value("outcome", std::string()) == "task_error";
    return fail(replace_all(report.value("message", std::string("no reason given")), file.string(), task.spec));
  }
  res.ok = true;
  res.report["method"]["reward_time"] = timing_method_name(opts.timing);
  res.unclean = unclean_reference_profile(report);
  if (!res.unclean.empty()) {
    res.report["not_kept"] = res.unclean;
  } else if (opts.use_cache && !write_file_atomic(entry, json_text(res.report, 1) + "\n", &err)) {
    res.report["cache_error"] = err;
  }
  return res;
}

std::string reference_profile_text(const nlohmann::json& r, size_t top) {
  bool cuda = r.value("device", std::string()) == "cuda";
  const nlohmann::json& m = r.value("method", nlohmann::json::object());
  std::string s = "The reference (model.py's Model) on " +
                  (cuda ? r.value("gpu", std::string("the GPU")) : std::string("the CPU")) + ", median of " +
                  std::to_string(m.value("calls", 0)) + " calls after " + std::to_string(m.value("warmup", 0)) +
                  " warm-up calls (" + (cuda ? "CUDA events, L2 flushed, as the judge times" : "wall clock") + "):\n";
  const nlohmann::json& eager = r.value("eager", nlohmann::json());
  const nlohmann::json& compile = r.value("compile", nlohmann::json());
  s += time_line("eager", eager, cuda) + time_line("torch.compile", compile, cuda);
  bool kernel_sum = cuda && m.value("reward_time", std::string()) == "kernel-sum";
  const char* compared = kernel_sum ? "kernel_sum_ms" : "ms";
  auto te = number(eager, compared);
  auto tc = compile.is_object() ? number(compile, compared) : std::nullopt;
  s += targets(te, tc, kernel_sum);
  s += work_lines(r, number(eager, "ms"), te && tc ? std::min(*te, *tc) / kFasterThreshold : 0.0);
  s += rows("eager", eager, cuda, top) + rows("torch.compile", compile, cuda, top);
  if (r.contains("not_kept")) s += "(Measured on a busy machine, not kept: " + r["not_kept"].get<std::string>() + ".)\n";
  return s;
}

}  // namespace anvil
