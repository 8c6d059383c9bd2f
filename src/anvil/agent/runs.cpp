// runs.cpp: the episode scheduler, its progress display and the run summary.
#include "anvil/agent/runs.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <map>
#include <mutex>
#include <thread>

#include "anvil/agent/trajectory.h"
#include "anvil/env/task.h"
#include "anvil/util/fs.h"
#include "anvil/util/json_text.h"
#include "anvil/util/strings.h"

namespace anvil {

namespace {

using Json = nlohmann::json;
using Clock = std::chrono::steady_clock;

struct Job {
  std::string task;
  int sample;
  std::filesystem::path dir;
};

// What one episode's record says, for the summary.
Json episode_line(const Json& r, const std::string& dir) {
  const Json& c = r.value("counters", Json::object());
  Json line = {{"dir", dir},
               {"task", r.value("task", Json::object()).value("name", std::string("?"))},
               {"status", r.value("status", std::string("?"))},
               {"end_reason", r.value("end_reason", Json())},
               {"reward", r.value("reward", Json())},
               {"turns", c.value("turns", 0)},
               {"tool_calls", c.value("tool_calls", 0)},
               {"malformed", c.value("malformed_total", 0)},
               {"prompt_tokens", c.value("prompt_tokens", 0L)},
               {"completion_tokens", c.value("completion_tokens", 0L)},
               {"seconds", r.value("seconds", 0.0)}};
  if (r.contains("evaluation") && r["evaluation"].is_object()) {
    line["outcome"] = r["evaluation"].value("outcome", Json());
    if (r["evaluation"].contains("timing") && r["evaluation"]["timing"].is_object()) {
      line["speedup_eager"] = r["evaluation"]["timing"].value("speedup_eager", Json());
      line["speedup_compile"] = r["evaluation"]["timing"].value("speedup_compile", Json());
    }
  }
  return line;
}

// Slots for evaluations: the GPUs (a quarter of the cores when evaluating on the CPU).
std::vector<int> eval_slot_ids(const Environment& env, const RunOptions& opts) {
  std::vector<int> ids = opts.gpus;
  unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  if (opts.episode.tools.eval.device == Device::Cpu || env.gpus.empty()) {
    ids.clear();
    for (unsigned i = 0; i < std::max(1u, cores / 4); ++i) ids.push_back(static_cast<int>(i));
  } else if (ids.empty()) {
    for (size_t i = 0; i < env.gpus.size(); ++i) ids.push_back(static_cast<int>(i));
  }
  return ids;
}

// Slots for builds: --build-slots, else a quarter of the cores.
std::vector<int> build_slot_ids(const RunOptions& opts) {
  unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  int n = opts.build_slots > 0 ? opts.build_slots : static_cast<int>(std::max(1u, cores / 4));
  std::vector<int> ids;
  for (int i = 0; i < n; ++i) ids.push_back(i);
  return ids;
}

// Every episode of the run: each task's samples, in their folders.
std::vector<Job> plan_jobs(const Environment& env, const RunOptions& opts) {
  std::vector<Job> jobs;
  std::string err;
  for (size_t ti = 0; ti < opts.tasks.size(); ++ti) {
    const std::string& t = opts.tasks[ti];
    std::filesystem::path dir;
    if (ti < opts.dirs.size()) {
      dir = opts.out / opts.dirs[ti];
    } else {
      std::string name = t;
      if (auto task = load_task(env, t, &err)) name = task->name;
      dir = opts.out / episode_dir_name(name);
    }
    for (int k = 0; k < opts.samples; ++k) jobs.push_back({t, k, dir / ("sample-" + std::to_string(k))});
  }
  return jobs;
}

// The run's summary from its episodes' lines (summary.json's document).
RunSummary summarize_run(const std::vector<Json>& lines, const Json& model, const std::filesystem::path& out,
                         Clock::time_point t0) {
  RunSummary s;
  Json rewards = {{"-1", 0}, {"1", 0}, {"2", 0}, {"3", 0}};
  Json reasons = Json::object();
  Json totals = {{"turns", 0}, {"tool_calls", 0}, {"malformed", 0}, {"prompt_tokens", 0L}, {"completion_tokens", 0L}};
  double reward_sum = 0;
  int judged = 0, correct = 0;
  for (const auto& l : lines) {
    ++s.episodes;
    std::string st = l.value("status", std::string());
    if (st == "finished") ++s.finished;
    else if (st == "not_started") ++s.failed_to_start;
    else ++s.interrupted;
    if (l.contains("end_reason") && l["end_reason"].is_string()) {
      std::string r = l["end_reason"].get<std::string>();
      reasons[r] = reasons.value(r, 0) + 1;
    }
    if (st == "finished" && l.contains("reward") && l["reward"].is_number()) {
      int r = l["reward"].get<int>();
      rewards[std::to_string(r)] = rewards.value(std::to_string(r), 0) + 1;
      reward_sum += r;
      ++judged;
      if (r >= 1) ++correct;
    }
    for (const char* k : {"turns", "tool_calls", "malformed"}) totals[k] = totals[k].get<int>() + l.value(k, 0);
    for (const char* k : {"prompt_tokens", "completion_tokens"}) totals[k] = totals[k].get<long>() + l.value(k, 0L);
  }
  s.json = {{"schema", "anvil.agent-summary/1"},
            {"out", out.string()},
            {"model", model},
            {"episodes", s.episodes},
            {"finished", s.finished},
            {"interrupted", s.interrupted},
            {"not_started", s.failed_to_start},
            {"rewards", rewards},
            {"mean_reward", judged ? Json(reward_sum / judged) : Json(nullptr)},
            {"correct_rate", judged ? Json(static_cast<double>(correct) / judged) : Json(nullptr)},
            {"end_reasons", reasons},
            {"totals", totals},
            {"seconds", std::chrono::duration<double>(Clock::now() - t0).count()},
            {"episodes_detail", lines}};
  return s;
}

}  // namespace

std::string episode_dir_name(const std::string& name) {
  std::string s;
  for (char c : name) s += (std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-' || c == '_') ? c : '_';
  return s.empty() ? "task" : s;
}

std::string RunSummary::text() const {
  std::string s;
  const Json& t = json.value("totals", Json::object());
  s += "episodes: " + std::to_string(episodes) + " (" + std::to_string(finished) + " finished, " +
       std::to_string(interrupted) + " interrupted, " + std::to_string(failed_to_start) + " could not start)\n";
  s += "rewards: ";
  for (const char* k : {"-1", "1", "2", "3"}) {
    s += std::string(k) + ": " + std::to_string(json["rewards"].value(k, 0)) + "  ";
  }
  if (json["mean_reward"].is_number()) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "mean %.2f, correct %.0f%%", json["mean_reward"].get<double>(),
                  100 * json.value("correct_rate", 0.0));
    s += buf;
  }
  s += "\nend reasons: ";
  for (auto it = json["end_reasons"].begin(); it != json["end_reasons"].end(); ++it) {
    s += it.key() + " " + std::to_string(it.value().get<int>()) + "  ";
  }
  s += "\nturns " + std::to_string(t.value("turns", 0)) + ", tool calls " + std::to_string(t.value("tool_calls", 0)) +
       ", malformed calls " + std::to_string(t.value("malformed", 0)) + ", tokens " +
       std::to_string(t.value("prompt_tokens", 0L)) + " prompt + " + std::to_string(t.value("completion_tokens", 0L)) +
       " completion, wall " + short_duration(json.value("seconds", 0.0)) + "\n";
  return s;
}

RunSummary run_episodes(const Environment& env, ModelClient& model, const RunOptions& opts) {
  auto t0 = Clock::now();
  std::error_code ec;
  std::filesystem::create_directories(opts.out, ec);
  std::string err;
  Json run = {{"schema", "anvil.agent-run/1"},
              {"tasks", opts.tasks},
              {"samples", opts.samples},
              {"concurrency", opts.concurrency},
              {"model", {{"base_url", model.endpoint().base_url}, {"model", model.endpoint().model}}},
              {"sampling", opts.episode.sampling.to_json()},
              {"limits",
               {{"max_turns", opts.episode.max_turns},
                {"max_context", opts.episode.max_context},
                {"wall_clock_s", opts.episode.wall_clock.count()}}}};
  if (!opts.resume || !std::filesystem::exists(opts.out / "run.json", ec)) {
    write_file_atomic(opts.out / "run.json", json_text(run, 1) + "\n", &err);
  }

  Slots eval_slots(eval_slot_ids(env, opts));
  Slots build_slots(build_slot_ids(opts));

  std::vector<Job> jobs = plan_jobs(env, opts);

  std::mutex mu;
  std::vector<Json> lines(jobs.size());
  std::atomic<size_t> next{0};
  int done = 0, running = 0;
  long turns_total = 0;
  bool tty = opts.progress && isatty(STDERR_FILENO);
  auto status_line = [&](const std::string& event) {  // under mu
    if (!opts.progress) return;
    double el = std::chrono::duration<double>(Clock::now() - t0).count();
    std::string eta = done > 0 && done < static_cast<int>(jobs.size())
                          ? ", ETA " + short_duration(el / done * (static_cast<double>(jobs.size()) - done))
                          : "";
    std::string status = "[" + std::to_string(done) + "/" + std::to_string(jobs.size()) + "] running " +
                         std::to_string(running) + ", turns " + std::to_string(turns_total) + ", " + short_duration(el) + eta;
    if (tty) std::fprintf(stderr, "\r\033[K");
    if (!event.empty()) std::fprintf(stderr, "%s\n", event.c_str());
    if (tty) std::fprintf(stderr, "%s", status.c_str());
    std::fflush(stderr);
  };

  auto worker = [&] {
    while (true) {
      size_t i = next++;
      if (i >= jobs.size()) return;
      const Job& job = jobs[i];
      EpisodeOptions eo = opts.episode;
      eo.task = job.task;
      eo.dir = job.dir;
      eo.id = episode_dir_name(job.dir.parent_path().filename().string()) + "/sample-" + std::to_string(job.sample);
      eo.tools.gpus = &eval_slots;
      eo.tools.builds = &build_slots;
      bool exists = std::filesystem::exists(job.dir / "trajectory.json", ec);
      if (exists && !opts.resume) {
        std::lock_guard<std::mutex> lock(mu);
        lines[i] = {{"dir", job.dir.string()}, {"task", job.task}, {"status", "not_started"},
                    {"error", (job.dir / "trajectory.json").string() + " exists: use --resume to continue this run"}};
        ++done;
        status_line(job.task + " sample " + std::to_string(job.sample) + ": " + lines[i]["error"].get<std::string>());
        continue;
      }
      eo.resume = exists;
      size_t last_turns = 0;
      eo.on_turn = [&, last_turns](const Json& r) mutable {
        std::lock_guard<std::mutex> lock(mu);
        size_t n = r["turns"].size();
        turns_total += static_cast<long>(n > last_turns ? n - last_turns : 0);
        last_turns = n;
        if (tty) status_line("");
      };
      {
        std::lock_guard<std::mutex> lock(mu);
        ++running;
      }
      EpisodeResult res;
      try {
        res = run_episode(env, model, eo);
      } catch (const std::exception& e) {  // an episode must never take the run down
        res.ran = false;
        res.error = std::string("anvil error: ") + e.what();
      }
      std::lock_guard<std::mutex> lock(mu);
      --running;
      ++done;
      std::string label = job.dir.parent_path().filename().string() + " sample " + std::to_string(job.sample);
      if (!res.ran) {
        lines[i] = {{"dir", job.dir.string()}, {"task", job.task}, {"status", "not_started"}, {"error", res.error}};
        status_line(label + ": could not start: " + res.error);
        continue;
      }
      lines[i] = episode_line(res.record, job.dir.string());
      std::string ev = res.status == "finished"
                           ? "reward " + std::to_string(res.reward) + " (" +
                                 json_text(lines[i].value("outcome", Json("not evaluated"))) + ")"
                           : "interrupted: " + res.error;
      status_line(label + ": " + res.end_reason + ", " + std::to_string(lines[i]["turns"].get<int>()) + " turns, " +
                  ev);
    }
  };
  int threads = std::max(1, std::min<int>(opts.concurrency, static_cast<int>(jobs.size())));
  std::vector<std::thread> pool;
  for (int i = 0; i < threads; ++i) pool.emplace_back(worker);
  for (auto& t : pool) t.join();
  if (tty) std::fprintf(stderr, "\n");

  RunSummary s = summarize_run(lines, run["model"], opts.out, t0);
  write_file_atomic(opts.out / "summary.json", json_text(s.json, 1) + "\n", &err);
  return s;
}

}  // namespace anvil
