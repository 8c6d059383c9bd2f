#include "anvil/serve/service.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <stdexcept>

#include "anvil/env/outcome.h"
#include "anvil/env/task.h"
#include "anvil/serve/requests.h"
#include "anvil/util/fs.h"
#include "anvil/util/strings.h"

namespace anvil {
namespace fs = std::filesystem;
using Json = nlohmann::json;

namespace {

using SteadyClock = std::chrono::steady_clock;

// Latency buckets (seconds) of every call kind's histogram.
const std::vector<double> kBuckets = {0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 2, 5, 10, 30, 60, 120, 300, 600};

std::string prometheus_escape(const std::string& s) {
  std::string out;
  for (char ch : s) {
    if (ch == '\\' || ch == '"') out += '\\';
    if (ch == '\n') {
      out += "\\n";
      continue;
    }
    out += ch;
  }
  return out;
}

}  // namespace

Service::Service(const Environment& env, ServeOptions opts) : env_(env), opts_(std::move(opts)) {}

Service::~Service() { stop(); }

bool Service::start(std::string* error) {
  // The state is the server's alone: every evaluation's request and result, the sessions' ids (each
  // grants its tools) and workdirs. Another local user reads none of it, wherever --state points.
  std::error_code sec;
  fs::create_directories(opts_.state_dir, sec);
  if (::chmod(opts_.state_dir.c_str(), 0700) != 0) {
    *error = "cannot make the state directory " + opts_.state_dir.string() + " private (chmod 0700): " +
             std::strerror(errno);
    return false;
  }
  store_ = Store::open(opts_.state_dir / "store.db", error);
  if (!store_) return false;
  try {
    Store::Recovered r = store_->recover(opts_.max_attempts);
    if (r.requeued || r.failed) {
      std::fprintf(stderr, "anvil serve: %d evaluation(s) under way when the last server stopped: %d queued again, "
                           "%d ended as runtime errors (their %d-th attempt)\n",
                   r.requeued + r.failed, r.requeued, r.failed, opts_.max_attempts);
    }
  } catch (const std::exception& e) {
    *error = e.what();
    return false;
  }
  // Builds ahead share the host with the lanes' timing: on a GPU one at a time on a quarter of the
  // cores (opts_.defaults.build.jobs); on the CPU none (the CPU is what a lane times: each
  // evaluation builds its own candidate).
  unsigned builders = opts_.defaults.device == Device::Cuda ? (opts_.builders ? opts_.builders : 1) : 0;
  if (opts_.defaults.build.jobs == 0) opts_.defaults.build.jobs = std::max(1u, std::thread::hardware_concurrency() / 4);
  bool cuda = opts_.defaults.device == Device::Cuda;
  std::vector<int> gpu_ids = {0};
  if (cuda) {
    gpu_ids.clear();
    for (int k = 0; k < std::max(1, opts_.overlap); ++k) gpu_ids.insert(gpu_ids.end(), opts_.gpus.begin(), opts_.gpus.end());
    if (opts_.overlap > 1) opts_.defaults.gpu_lock = Prepare::kTogether;  // the lanes' and the sessions' tools'
  }
  gpu_slots_ = std::make_unique<Slots>(gpu_ids);
  std::vector<int> build_ids;
  for (unsigned i = 0; i < std::max(1u, std::thread::hardware_concurrency() / 4); ++i) build_ids.push_back(static_cast<int>(i));
  build_slots_ = std::make_unique<Slots>(build_ids);
  if (opts_.ray) {
    ray_ = RayPool::start(env_, *opts_.ray, error);
    if (!ray_) return false;
  }
  SessionOptions so = opts_.sessions;
  if (ray_) so.remote = [this](const Json& request) { return tool_on_ray(request); };
  so.dir = opts_.state_dir / "sessions";
  so.finals = opts_.state_dir / "finals";
  so.defaults = opts_.defaults;
  so.limits = opts_.limits;
  std::error_code ec;
  fs::create_directories(so.dir, ec);
  fs::create_directories(so.finals, ec);
  if (ec) {
    *error = "cannot make " + so.dir.string() + ": " + ec.message();
    return false;
  }
  sessions_ = std::make_unique<Sessions>(
      env_, so, gpu_slots_.get(), build_slots_.get(),
      [this](const Json& body, const std::string& key) { return submit_keyed(body, key); },  // anvil's own key
      [this](const Json& request, const std::string& key, const Json& result) { return record_done(request, key, result); },
      [this](const std::string& kind, double seconds) { observe_request(kind, seconds); });
  if (ray_) {
    // The workers build and judge on their nodes: no lane or builder of this host's.
    for (size_t i = 0; i < ray_->lanes(); ++i) threads_.emplace_back([this, i] { ray_lane(i); });
  } else {
    builds_ahead_ = builders > 0;
    if (builds_ahead_) {  // a previous server's queue too
      try {
        for (int64_t id : store_->queued_ids()) to_build_.push_back(id);
      } catch (const std::exception& e) {
        *error = e.what();
        return false;
      }
    }
    for (size_t i = 0; i < gpu_slots_->size(); ++i) threads_.emplace_back([this] { lane(); });
    for (unsigned i = 0; i < builders; ++i) threads_.emplace_back([this] { builder(); });
  }
  threads_.emplace_back([this] { reaper(); });
  return true;
}

int Service::release_running() {
  try {
    return store_ ? store_->release_running() : 0;
  } catch (const std::exception&) {
    return 0;
  }
}

void Service::drain() {
  {
    std::lock_guard<std::mutex> g(mu_);
    stopping_ = true;
  }
  if (sessions_) sessions_->stop();  // their running shells end now, not at their timeouts
  work_.notify_all();
  done_.notify_all();
}

void Service::stop() {
  drain();
  for (auto& t : threads_) {
    if (t.joinable()) t.join();
  }
}

int Service::retry_after_s() {
  // A lane frees up about every (mean evaluation time / lanes): with --overlap N, N lanes per GPU,
  // each evaluation's time its wave's.
  std::lock_guard<std::mutex> g(mu_);
  double mean = eval_count_ ? eval_seconds_sum_ / eval_count_ : 5.0;
  size_t lanes = std::max<size_t>(1, ray_ ? lane_names().size() : gpu_slots_->size());
  return std::max(1, static_cast<int>(std::ceil(mean / static_cast<double>(lanes))));
}

ServeReply Service::accept(const std::vector<std::pair<std::string, Json>>& requests, std::vector<Store::Accepted>* out) {
  {
    std::lock_guard<std::mutex> g(mu_);
    if (!ray_down_.empty()) return serve_error(503, "", "the Ray lanes stopped (restart the server): " + ray_down_);
  }
  try {
    *out = store_->accept_all(requests, opts_.max_queue);
  } catch (const std::exception& e) {
    return serve_error(503, "", e.what());
  }
  const Store::Accepted& last = out->back();
  if (last.full) {
    ServeReply r = serve_error(429, "", "the queue is full (" + std::to_string(opts_.max_queue) +
                                            " evaluations waiting): try again later");
    r.headers.emplace_back("Retry-After", std::to_string(retry_after_s()));
    return r;
  }
  if (last.conflict) {
    return serve_error(422, "idempotency_key",
                       "already used by evaluation " + std::to_string(last.id) + ", a different request");
  }
  {
    std::lock_guard<std::mutex> g(mu_);
    for (const auto& a : *out) {
      if (!a.existed && builds_ahead_) to_build_.push_back(a.id);
    }
  }
  work_.notify_all();
  return {202, nullptr, {}};
}

namespace {

// 202 {id, status, existed} for a new job, 200 for one its idempotency key already made.
ServeReply accepted_reply(const Store::Accepted& a) {
  return {a.existed ? 200 : 202, {{"id", std::to_string(a.id)}, {"status", job_state_name(a.state)}, {"existed", a.existed}}, {}};
}

}  // namespace

ServeReply Service::submit(const Json& body, const std::string& header_key) {
  std::string key;
  if (auto bad = idempotency_key_of(body, header_key, &key)) return serve_error(400, bad->field, bad->message);
  return submit_keyed(body, key);
}

ServeReply Service::submit_keyed(const Json& body, const std::string& key) {
  Json req;
  if (auto bad = validate_evaluation(body, opts_.limits, &req)) return serve_error(400, bad->field, bad->message);
  std::vector<Store::Accepted> got;
  ServeReply r = accept({{key, req}}, &got);
  if (r.status != 202) return r;
  const Store::Accepted& a = got.front();
  return accepted_reply(a);
}

ServeReply Service::record_done(const Json& request, const std::string& key, const Json& result) {
  Store::Accepted a;
  try {
    a = store_->accept_done(key, request, result);
  } catch (const std::exception& e) {
    return serve_error(503, "", e.what());
  }
  if (a.conflict) return serve_error(422, "idempotency_key", "already used by evaluation " + std::to_string(a.id));
  if (!a.existed) {
    std::lock_guard<std::mutex> g(mu_);
    std::string outcome = result.value("outcome", std::string("error"));
    outcomes_[outcome] += 1;
  }
  done_.notify_all();
  return accepted_reply(a);
}

ServeReply Service::submit_batch(const Json& body) {
  if (!body.is_object() || !body.contains("evaluations") || !body["evaluations"].is_array() ||
      body["evaluations"].empty()) {
    return serve_error(400, "evaluations", "a non-empty array of evaluation requests");
  }
  if (body.size() != 1) return serve_error(400, "", "a batch has only \"evaluations\"");
  // All or none: every one validated, then all queued in one transaction.
  std::vector<std::pair<std::string, Json>> requests;
  const Json& all = body["evaluations"];
  for (size_t i = 0; i < all.size(); ++i) {
    Json req;
    std::string key;
    std::optional<Invalid> bad = validate_evaluation(all[i], opts_.limits, &req);
    if (!bad) bad = idempotency_key_of(all[i], "", &key);
    if (bad) {
      return serve_error(400, "evaluations[" + std::to_string(i) + "]" + (bad->field.empty() ? "" : "." + bad->field),
                         bad->message);
    }
    requests.emplace_back(key, req);
  }
  std::vector<Store::Accepted> got;
  ServeReply r = accept(requests, &got);
  if (r.status != 202) {
    if (r.body.contains("error") && !got.empty()) {  // (a refusal of the whole batch names no request)
      r.body["error"]["field"] = "evaluations[" + std::to_string(got.size() - 1) + "]" +
                                 (r.body["error"]["field"].get<std::string>().empty() ? "" : ".") +
                                 r.body["error"]["field"].get<std::string>();
    }
    return r;
  }
  Json ids = Json::array();
  for (const auto& a : got) ids.push_back(std::to_string(a.id));
  return {202, {{"ids", ids}}, {}};
}

Json Service::job_body(const Job& j) const {
  Json b = {{"id", std::to_string(j.id)}, {"status", job_state_name(j.state)}, {"attempts", j.attempts},
            {"accepted_at", j.accepted_at}};
  if (j.state == JobState::kDone) {
    const Json& r = j.result;
    b["outcome"] = r.value("outcome", Json());
    b["reward"] = r.value("reward", Json());
    b["message"] = r.value("message", Json(""));
    b["evaluation"] = r.value("evaluation", Json());
    if (r.contains("error_kind")) b["error_kind"] = r["error_kind"];  // outcome error: whose fault
    b["seconds"] = j.finished_at - j.started_at;
    if (r.contains("worker")) b["worker"] = r["worker"];  // --ray: the worker that judged it
  }
  return b;
}

ServeReply Service::get(const std::string& id_text, std::chrono::milliseconds wait) {
  if (id_text.empty() || id_text.size() > 18 || id_text.find_first_not_of("0123456789") != std::string::npos) {
    return serve_error(404, "id", "no evaluation with that id (ids are numbers)");
  }
  int64_t id = std::stoll(id_text);
  auto deadline = SteadyClock::now() + wait;
  try {
    // Its state only while waiting (a row's request may be megabytes); the whole row once.
    for (;;) {
      std::optional<JobState> st = store_->state_of(id);
      if (!st) return serve_error(404, "id", "no evaluation " + id_text);
      if (*st == JobState::kDone || SteadyClock::now() >= deadline || stopping_) break;
      std::unique_lock<std::mutex> g(mu_);
      done_.wait_until(g, std::min(deadline, SteadyClock::now() + std::chrono::seconds(1)));
    }
    std::optional<Job> j = store_->get(id);
    if (!j) return serve_error(404, "id", "no evaluation " + id_text);
    return {200, job_body(*j), {}};
  } catch (const std::exception& e) {
    return serve_error(503, "", e.what());
  }
}

ServeReply Service::health() {
  std::map<JobState, int64_t> c;
  try {
    c = store_->counts();
  } catch (const std::exception& e) {
    return serve_error(503, "", e.what());
  }
  std::string down;
  {
    std::lock_guard<std::mutex> g(mu_);
    down = ray_down_;
  }
  Json body = {{"status", stopping_ ? "draining" : !down.empty() ? "degraded" : "ok"},
           {"device", to_string(opts_.defaults.device)},
           {"lanes", lane_names().size()},
           {"overlap", ray_ ? 1 : std::max(1, opts_.overlap)},
           {"queued", c[JobState::kQueued]},
           {"running", c[JobState::kRunning]},
           {"done", c[JobState::kDone]},
           {"sessions", sessions_ ? sessions_->count() : 0},
           {"max_queue", opts_.max_queue}};
  if (ray_) {
    Json workers = Json::array();
    for (size_t i = 0; i < ray_->lanes(); ++i) workers.push_back(ray_->lane(i));
    body["ray"] = {{"address", opts_.ray->address}, {"workers", workers}, {"down", down.empty() ? Json() : Json(down)}};
  }
  return {200, body, {}};
}

std::vector<std::string> Service::lane_names() const {
  std::vector<std::string> names;
  if (ray_) {
    for (size_t i = 0; i < ray_->lanes(); ++i) names.push_back("ray" + std::to_string(i));
  } else if (opts_.defaults.device == Device::Cuda) {
    for (int g : opts_.gpus) names.push_back(std::to_string(g));
  } else {
    names.push_back("cpu");
  }
  return names;
}

void Service::observe_request(const std::string& kind, double seconds) {
  std::lock_guard<std::mutex> g(mu_);
  Histogram& h = latency_[kind];
  if (h.counts.empty()) h.counts.assign(kBuckets.size() + 1, 0);
  size_t b = std::lower_bound(kBuckets.begin(), kBuckets.end(), seconds) - kBuckets.begin();
  h.counts[b] += 1;
  h.sum += seconds;
  h.count += 1;
}

std::string Service::metrics() {
  std::map<JobState, int64_t> c;
  try {
    c = store_->counts();
  } catch (const std::exception&) {
  }
  std::string m;
  auto line = [&](const std::string& s) { m += s + "\n"; };
  std::lock_guard<std::mutex> g(mu_);
  auto now = SteadyClock::now();
  while (!finished_.empty() && now - finished_.front() > std::chrono::minutes(1)) finished_.pop_front();
  line("# HELP anvil_queue_depth Evaluations accepted and waiting for a lane (--overlap lanes per GPU).");
  line("# TYPE anvil_queue_depth gauge");
  line("anvil_queue_depth " + std::to_string(c[JobState::kQueued]));
  line("# HELP anvil_tool_calls_waiting Sessions' tool calls waiting for a device (they go before the queue).");
  line("# TYPE anvil_tool_calls_waiting gauge");
  line("anvil_tool_calls_waiting " + std::to_string(gpu_slots_ ? gpu_slots_->waiting(1) : 0));
  line("# HELP anvil_lane_busy Queued evaluations under way, per device (a GPU's index, or cpu; up to --overlap each).");
  line("# TYPE anvil_lane_busy gauge");
  for (const std::string& l : lane_names()) {
    line("anvil_lane_busy{lane=\"" + l + "\"} " + std::to_string(busy_.count(l) ? busy_.at(l) : 0));
  }
  std::vector<int> lanes = opts_.defaults.device == Device::Cuda ? opts_.gpus : std::vector<int>{-1};
  line("# HELP anvil_sessions Sessions open (on disk, not expired or ended yet).");
  line("# TYPE anvil_sessions gauge");
  line("anvil_sessions " + std::to_string(sessions_ ? sessions_->count() : 0));
  line("# HELP anvil_device_held_seconds_total Seconds each of this host's devices (a GPU's index, or cpu) was held by an evaluation, a lane's or a session tool's.");
  line("# TYPE anvil_device_held_seconds_total counter");
  if (gpu_slots_) {
    for (int l : lanes) {
      char v[64];
      std::snprintf(v, sizeof v, "%.3f", gpu_slots_->held_seconds(l < 0 ? 0 : l));
      line("anvil_device_held_seconds_total{lane=\"" + (l < 0 ? std::string("cpu") : std::to_string(l)) + "\"} " + v);
    }
  }
  line("# HELP anvil_evaluations_per_minute Evaluations finished in the last minute.");
  line("# TYPE anvil_evaluations_per_minute gauge");
  line("anvil_evaluations_per_minute " + std::to_string(finished_.size()));
  line("# HELP anvil_evaluations_total Evaluations finished, by outcome.");
  line("# TYPE anvil_evaluations_total counter");
  for (const auto& [outcome, n] : outcomes_) {
    line("anvil_evaluations_total{outcome=\"" + prometheus_escape(outcome) + "\"} " + std::to_string(n));
  }
  line("# HELP anvil_build_units_total Translation units of evaluated candidates.");
  line("# TYPE anvil_build_units_total counter");
  line("anvil_build_units_total " + std::to_string(build_units_));
  line("# HELP anvil_build_units_compiled_total Translation units compiled by evaluations (build cache misses).");
  line("# TYPE anvil_build_units_compiled_total counter");
  line("anvil_build_units_compiled_total " + std::to_string(build_compiled_));
  line("# HELP anvil_build_cache_hit_ratio Units found in the build cache over all units evaluated (1 when none yet).");
  line("# TYPE anvil_build_cache_hit_ratio gauge");
  char ratio[32];
  std::snprintf(ratio, sizeof ratio, "%.4f",
                build_units_ ? 1.0 - static_cast<double>(build_compiled_) / static_cast<double>(build_units_) : 1.0);
  line(std::string("anvil_build_cache_hit_ratio ") + ratio);
  line("# HELP anvil_request_seconds Latency of the service's calls, by kind (evaluation: accepted to done).");
  line("# TYPE anvil_request_seconds histogram");
  for (const auto& [kind, h] : latency_) {
    double cum = 0;
    for (size_t b = 0; b <= kBuckets.size(); ++b) {
      cum += h.counts[b];
      char le[32];
      if (b < kBuckets.size()) {
        std::snprintf(le, sizeof le, "%g", kBuckets[b]);
      } else {
        std::snprintf(le, sizeof le, "+Inf");
      }
      char v[64];
      std::snprintf(v, sizeof v, "%.0f", cum);
      line("anvil_request_seconds_bucket{kind=\"" + kind + "\",le=\"" + le + "\"} " + v);
    }
    char sum[64];
    std::snprintf(sum, sizeof sum, "%.6f", h.sum);
    line("anvil_request_seconds_sum{kind=\"" + kind + "\"} " + sum);
    line("anvil_request_seconds_count{kind=\"" + kind + "\"} " + std::to_string(h.count));
  }
  return m;
}

fs::path Service::job_dir(int64_t id) const { return opts_.state_dir / "jobs" / std::to_string(id); }

// A done job's files: its inline request's (jobs/ID/). Its row keeps the result. (A session's
// final snapshot goes with the session, once its evaluation is done: reaper().)
void Service::forget_files(const Job& job) { remove_tree(job_dir(job.id)); }

// The job's task and candidate as paths: the request's own, or its text written once under
// jobs/ID/ (atomically: whoever writes first, builder or lane, the other finds it there).
fs::path Service::materialize(const Job& job, fs::path* candidate, std::string* error) {
  const Json& req = job.request;
  bool inline_files = !req["task"].contains("path") || !req["candidate"].contains("path");
  fs::path dir = job_dir(job.id);
  std::error_code ec;
  if (inline_files && !fs::exists(dir, ec)) {
    fs::path tmp;
    try {
      tmp = make_temp_dir(opts_.state_dir / "jobs", std::to_string(job.id) + ".tmp");
    } catch (const std::exception& e) {
      *error = e.what();
      return {};
    }
    auto write = [&](const fs::path& p, const std::string& text) {
      fs::create_directories(p.parent_path(), ec);
      return write_file_atomic(p, text, error);
    };
    bool ok = true;
    if (req["task"].contains("source")) ok = ok && write(tmp / "task" / req["task"]["name"].get<std::string>(), req["task"]["source"]);
    if (req["candidate"].contains("source")) ok = ok && write(tmp / "model_new.py", req["candidate"]["source"]);
    if (req["candidate"].contains("beside")) {
      for (const auto& [name, text] : req["candidate"]["beside"].items()) ok = ok && write(tmp / name, file_content(text));
    }
    if (req["candidate"].contains("files")) {
      for (const auto& [name, text] : req["candidate"]["files"].items()) {
        ok = ok && write(tmp / "candidate" / name, file_content(text));
      }
    }
    if (!ok) {
      fs::remove_all(tmp, ec);
      return {};
    }
    fs::rename(tmp, dir, ec);  // lost the race: the other's copy is the same
    if (ec) fs::remove_all(tmp, ec);
  }
  if (req["candidate"].contains("path")) {
    *candidate = req["candidate"]["path"].get<std::string>();
  } else if (req["candidate"].contains("source")) {
    *candidate = dir / "model_new.py";
  } else {
    *candidate = dir / "candidate";
  }
  if (req["task"].contains("path")) return req["task"]["path"].get<std::string>();
  return dir / "task" / req["task"]["name"].get<std::string>();
}

void Service::reaper() {
  for (;;) {
    {
      std::unique_lock<std::mutex> g(mu_);
      // Every 30 s, or half a (short) time to live.
      auto every = std::max<std::chrono::seconds>(std::chrono::seconds(1), std::min(std::chrono::seconds(30), opts_.sessions.ttl / 2));
      work_.wait_for(g, every, [&] { return stopping_.load(); });
      if (stopping_) return;
    }
    try {
      int n = sessions_->reap();
      if (n) std::fprintf(stderr, "anvil serve: %d session(s) expired and removed\n", n);
      store_->forget_done_before(unix_seconds() - static_cast<double>(opts_.keep_results.count()));
      // jobs/ID/ written by a builder after its job was done (a race with its lane)
      std::error_code ec;
      for (fs::directory_iterator it(opts_.state_dir / "jobs", ec), end; !ec && it != end; it.increment(ec)) {
        std::string name = it->path().filename().string();
        if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos || name.size() > 18) continue;
        std::optional<JobState> st = store_->state_of(std::stoll(name));
        if (!st || *st == JobState::kDone) remove_tree(it->path());
      }
      // A session's final snapshot, once the session is gone (deleted, expired) and its evaluation
      // done (the session's id its key: sessions.cpp).
      for (fs::directory_iterator it(opts_.state_dir / "finals", ec), end; !ec && it != end; it.increment(ec)) {
        std::string id = it->path().filename().string();
        if (ends_with(id, ".tmp") || fs::exists(opts_.state_dir / "sessions" / id)) continue;
        std::optional<JobState> st = store_->state_of_key(session_final_key(id));
        if (!st || *st == JobState::kDone) remove_tree(it->path());
      }
    } catch (const std::exception& e) {  // a defect of anvil's: said, and the server goes on
      std::fprintf(stderr, "anvil serve: removing expired sessions: %s\n", e.what());
    }
  }
}

void Service::builder() {
  for (;;) {
    int64_t id = 0;
    {
      std::unique_lock<std::mutex> g(mu_);
      work_.wait(g, [&] { return stopping_ || !to_build_.empty(); });
      if (stopping_) return;
      id = to_build_.front();
      to_build_.pop_front();
    }
    std::optional<Job> j;
    try {
      j = store_->get(id);
    } catch (const std::exception&) {
      continue;
    }
    if (!j || j->state != JobState::kQueued) continue;
    fs::path candidate;
    std::string error;
    {
      std::lock_guard<std::mutex> g(mu_);
      building_ = id;  // lanes leave it to this builder while another job is queued
    }
    fs::path task = materialize(*j, &candidate, &error);  // where it cannot be: the lane says why
    if (!task.empty()) prebuild(env_, candidate.string(), opts_.defaults.build);  // the evaluation reports the build
    std::lock_guard<std::mutex> g(mu_);  // the Store never takes mu_: this order is safe
    building_ = -1;
    std::optional<JobState> now;
    try {
      now = store_->state_of(id);
    } catch (const std::exception&) {
    }
    if (now == JobState::kQueued) built_.insert(id);  // with mu_ held: no lane claims and finishes it between
  }
}

namespace {
// A job's result when anvil could not evaluate it: outcome error, no reward, whose fault (EvalError).
Json cannot_evaluate(EvalError kind, const std::string& message, const Json& evaluation = nullptr) {
  return {{"outcome", "error"}, {"reward", nullptr}, {"message", message}, {"error_kind", eval_error_name(kind)},
          {"evaluation", evaluation}};
}
}  // namespace

Json Service::run(const Job& job, int gpu) {
  fs::path candidate;
  std::string error;
  fs::path task = materialize(job, &candidate, &error);
  if (task.empty()) {
    return cannot_evaluate(EvalError::kEnvironment, "cannot write the request's files: " + error);
  }
  EvalOptions o = with_options(opts_.defaults, job.request["options"]);
  o.task = task.string();
  o.candidate = candidate.string();
  if (gpu >= 0) o.gpu = gpu;
  EvalResult r;
  try {
    r = evaluate(env_, o);
  } catch (const std::exception& e) {
    return cannot_evaluate(EvalError::kEnvironment, std::string("the evaluation failed: ") + e.what());
  }
  if (!r.evaluated) return cannot_evaluate(r.error_kind, r.error, r.json);
  return {{"outcome", outcome_name(r.outcome)},
          {"reward", r.reward},
          {"message", r.json.value("message", Json(""))},
          {"evaluation", r.json}};
}

void Service::lane() {
  const bool cuda = opts_.defaults.device == Device::Cuda;
  while (!stopping_) {
    // A slot first, then a job: a claimed job runs at once (a restart's recovery counts real attempts).
    int slot = gpu_slots_->acquire(0);
    Slots::Hold hold{gpu_slots_.get(), slot};
    if (stopping_) break;
    std::vector<int64_t> built;
    int64_t building = -1;
    {
      std::lock_guard<std::mutex> g(mu_);
      built.assign(built_.begin(), built_.end());
      building = building_;
    }
    std::optional<Job> j;
    try {
      j = store_->claim(built, building);
      if (j) {
        std::lock_guard<std::mutex> g(mu_);
        built_.erase(j->id);
      }
    } catch (const std::exception& e) {
      std::fprintf(stderr, "anvil serve: the store: %s\n", e.what());
    }
    if (!j) {
      gpu_slots_->release(slot);
      hold.slots = nullptr;
      std::unique_lock<std::mutex> g(mu_);
      work_.wait_for(g, std::chrono::milliseconds(500));
      continue;
    }
    int gpu = cuda ? slot : -1;
    std::string name = cuda ? std::to_string(gpu) : "cpu";
    {
      std::lock_guard<std::mutex> g(mu_);
      busy_[name] += 1;
    }
    auto t0 = SteadyClock::now();
    Json result = run(*j, gpu);
    finished(*j, result, name, std::chrono::duration<double>(SteadyClock::now() - t0).count());
  }
}

void Service::finished(const Job& job, const Json& result, const std::string& lane, double ran) {
  try {
    store_->finish(job.id, result);
    forget_files(job);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "anvil serve: cannot record evaluation %lld: %s\n", static_cast<long long>(job.id), e.what());
  }
  {
    std::lock_guard<std::mutex> g(mu_);
    built_.erase(job.id);  // a builder that finished after its lane claimed it
    busy_[lane] -= 1;
    std::string outcome = result["outcome"].is_string() ? result["outcome"].get<std::string>() : "error";
    outcomes_[outcome] += 1;
    finished_.push_back(SteadyClock::now());
    const Json& ev = result.value("evaluation", Json());
    if (ev.is_object() && ev.contains("build") && ev["build"].is_object()) {
      build_units_ += ev["build"].value("units", 0);
      build_compiled_ += ev["build"].value("compiled", 0);
    }
    eval_seconds_sum_ += ran;
    eval_count_ += 1;
  }
  // From acceptance to result: the queue's wait included.
  observe_request("evaluation", unix_seconds() - job.accepted_at);
  done_.notify_all();
}

// A Ray worker's lane: claims the oldest queued job and sends it to its worker. A worker that died
// under an evaluation has it run again until max_attempts claims (then runtime_error: a candidate
// that kills its worker is not run for ever); a bridge that is gone gives the claim back and
// stops the lanes (health says why; the queue waits for a restart).
void Service::ray_lane(size_t lane) {
  const std::string name = "ray" + std::to_string(lane);
  while (!stopping_) {
    {
      std::lock_guard<std::mutex> g(mu_);
      if (!ray_down_.empty()) return;
    }
    std::vector<int64_t> built;
    int64_t building = -1;
    {
      std::lock_guard<std::mutex> g(mu_);
      built.assign(built_.begin(), built_.end());
      building = building_;
    }
    std::optional<Job> j;
    try {
      j = store_->claim(built, building);
      if (j) {
        std::lock_guard<std::mutex> g(mu_);
        built_.erase(j->id);
      }
    } catch (const std::exception& e) {
      std::fprintf(stderr, "anvil serve: the store: %s\n", e.what());
    }
    if (!j) {
      std::unique_lock<std::mutex> g(mu_);
      work_.wait_for(g, std::chrono::milliseconds(500));
      continue;
    }
    {
      std::lock_guard<std::mutex> g(mu_);
      busy_[name] += 1;
    }
    auto t0 = SteadyClock::now();
    bool retry = false;
    Json result;
    try {
      result = run_on_ray(*j, lane, &retry);
    } catch (const std::exception& e) {  // a defect of anvil's (the store, the file system): said, and the lane goes on
      result = {{"outcome", "error"}, {"reward", nullptr}, {"message", std::string("the evaluation failed: ") + e.what()}};
    }
    if (retry) {
      std::lock_guard<std::mutex> g(mu_);
      busy_[name] -= 1;
      work_.notify_all();
      continue;
    }
    finished(*j, result, name, std::chrono::duration<double>(SteadyClock::now() - t0).count());
  }
}

// A session's verify or profile on the least busy worker: its answer as evaluate()'s; a worker
// that died under it, or a bridge that is gone, is the tool's error (the agent may call it again).
EvalResult Service::tool_on_ray(const Json& request) try {
  EvalResult r;
  bool refused = false;
  std::optional<Json> inlined = inline_request(env_, request, &r.error, &refused);
  if (!inlined) return r;
  static std::atomic<int64_t> calls{0};
  size_t lane = ray_->least_busy();
  RayAnswer a = ray_->evaluate(lane, *inlined, "tool-" + std::to_string(unix_seconds()) + "-" + std::to_string(calls++));
  if (a.kind != RayAnswer::Kind::kDone) {
    r.error = "its Ray worker did not answer: " + a.error;
    return r;
  }
  if (!a.result.contains("evaluation") || !a.result["evaluation"].is_object() || a.result.value("outcome", "") == "error") {
    r.error = a.result.value("message", std::string("the worker could not evaluate it"));
    return r;
  }
  r = evaluated_elsewhere(a.result["evaluation"]);
  if (r.evaluated) r.json["worker"] = ray_->lane(lane);
  return r;
} catch (const std::exception& e) {
  EvalResult r;
  r.error = std::string("sending it to a Ray worker failed: ") + e.what();
  return r;
}

Json Service::run_on_ray(const Job& job, size_t lane, bool* retry) {
  std::string error;
  bool refused = false;
  std::optional<Json> request = inline_request(env_, job.request, &error, &refused);
  if (!request && refused) return {{"outcome", outcome_name(Outcome::kLoadError)}, {"reward", -1}, {"message", error}, {"evaluation", nullptr}};
  if (!request) return cannot_evaluate(EvalError::kEnvironment, "cannot send the request to a Ray worker: " + error);
  RayAnswer a = ray_->evaluate(lane, *request, "job-" + std::to_string(job.id) + "-" + std::to_string(job.attempts));
  if (a.kind == RayAnswer::Kind::kDone) {
    const Json& r = a.result;
    Json evaluation = r.value("evaluation", Json());
    if (evaluation.is_object() && evaluation["task"].is_object() && job.request["task"].contains("path")) {
      // The task as this server names it (a dataset's row, not the file the worker was sent).
      std::string spec = job.request["task"]["path"];
      evaluation["task"]["spec"] = spec;
      evaluation["task"]["name"] = task_name_of(spec);
    }
    Json done = {{"outcome", r.value("outcome", Json())},
                 {"reward", r.value("reward", Json())},
                 {"message", r.value("message", Json(""))},
                 {"evaluation", evaluation},
                 {"worker", ray_->lane(lane)}};
    if (r.contains("error_kind")) done["error_kind"] = r["error_kind"];  // the worker's word on whose fault
    return done;
  }
  if (a.kind == RayAnswer::Kind::kLost) {
    std::fprintf(stderr, "anvil serve: evaluation %lld: %s\n", static_cast<long long>(job.id), a.error.c_str());
    if (job.attempts < opts_.max_attempts) {
      store_->requeue(job.id, true);
      *retry = true;
      return nullptr;
    }
    return {{"outcome", outcome_name(Outcome::kRuntimeError)},
            {"reward", -1},
            {"message", "its Ray worker ended under it " + std::to_string(job.attempts) +
                            " times: it is not run again (last: " + a.error + ")"}};
  }
  // The bridge is gone: not the evaluation's doing.
  store_->requeue(job.id, false);
  *retry = true;
  {
    std::lock_guard<std::mutex> g(mu_);
    if (ray_down_.empty()) {
      ray_down_ = a.error;
      std::fprintf(stderr, "anvil serve: the Ray lanes stopped (restart the server to judge the queue): %s\n",
                   a.error.c_str());
    }
  }
  return nullptr;
}

}  // namespace anvil
