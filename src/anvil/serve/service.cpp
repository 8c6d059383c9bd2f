#include "anvil/serve/service.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <stdexcept>

#include "anvil/env/protocol.h"
#include "anvil/util/fs.h"
#include "anvil/util/strings.h"

namespace anvil {
namespace fs = std::filesystem;
using Json = nlohmann::json;

namespace {

using SteadyClock = std::chrono::steady_clock;

// Latency buckets (seconds) of every call kind's histogram.
const std::vector<double> kBuckets = {0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 2, 5, 10, 30, 60, 120, 300, 600};

// A request that cannot be accepted: which field, and why.
struct Invalid {
  std::string field;
  std::string message;
};

// A relative path that stays inside its directory: no "..", not absolute, no empty parts.
bool inside(const std::string& rel) {
  if (rel.empty() || rel.size() > 255 || rel.front() == '/') return false;
  for (const auto& part : fs::path(rel)) {
    std::string p = part.string();
    if (p.empty() || p == "." || p == ".." || p.find('\0') != std::string::npos) return false;
  }
  return true;
}

const std::vector<std::string> kTaskKeys = {"path", "source", "name"};
const std::vector<std::string> kCandidateKeys = {"path", "source", "files"};
const std::vector<std::string> kCompileModes = {"default", "reduce-overhead", "max-autotune",
                                                "max-autotune-no-cudagraphs", "none"};
const std::vector<std::string> kOptionKeys = {"protocol", "preset", "trials", "seed", "measure_time", "compile_mode"};

std::optional<Invalid> only_keys(const Json& obj, const std::string& where, const std::vector<std::string>& keys) {
  for (const auto& [k, _] : obj.items()) {
    if (std::find(keys.begin(), keys.end(), k) == keys.end()) {
      return Invalid{where + "." + k, "unknown field (known: " + join(keys, ", ") + ")"};
    }
  }
  return std::nullopt;
}

// Exactly one of `keys` present, as a string (or an object of strings for "files").
std::optional<Invalid> one_of(const Json& obj, const std::string& where, const std::vector<std::string>& keys) {
  int n = 0;
  for (const auto& k : keys) n += obj.contains(k) ? 1 : 0;
  if (n != 1) return Invalid{where, "give exactly one of: " + join(keys, ", ")};
  return std::nullopt;
}

// The request as the store keeps it, or why it is refused. Paths are made absolute here (the
// server's working directory), so a restart elsewhere reads the same files.
std::optional<Invalid> validate(const Json& body, const ServeOptions& o, Json* out) {
  if (!body.is_object()) return Invalid{"", "the body must be a JSON object"};
  if (auto bad = only_keys(body, "", {"task", "candidate", "options", "idempotency_key"})) {
    bad->field = bad->field.substr(1);
    return bad;
  }
  Json req = Json::object();
  // task
  if (!body.contains("task") || !body["task"].is_object()) return Invalid{"task", "an object: {path} or {source, name}"};
  const Json& t = body["task"];
  if (auto bad = only_keys(t, "task", kTaskKeys)) return bad;
  if (auto bad = one_of(t, "task", {"path", "source"})) return bad;
  if (t.contains("path")) {
    if (t.contains("name")) return Invalid{"task.name", "only with task.source (a path names its own file)"};
    if (!t["path"].is_string() || t["path"].get<std::string>().empty()) return Invalid{"task.path", "a non-empty string"};
    std::string spec = t["path"];
    // FILE or DATASET#ROW: the file part must exist here.
    std::string file = spec.substr(0, spec.rfind('#') == std::string::npos ? spec.size() : spec.rfind('#'));
    std::error_code ec;
    if (!fs::is_regular_file(file, ec)) return Invalid{"task.path", "no such file on the server: " + file};
    req["task"] = {{"path", fs::absolute(file).string() + spec.substr(file.size())}};
  } else {
    if (!t["source"].is_string()) return Invalid{"task.source", "the task's Python source, a string"};
    if (t["source"].get<std::string>().size() > o.max_file_bytes) {
      return Invalid{"task.source", "larger than " + std::to_string(o.max_file_bytes) + " bytes"};
    }
    if (t.contains("name") && !t["name"].is_string()) return Invalid{"task.name", "a file name ending in .py"};
    std::string name = t.value("name", std::string("task.py"));
    if (!inside(name) || name.find('/') != std::string::npos || !ends_with(name, ".py")) {
      return Invalid{"task.name", "a file name ending in .py, without directories"};
    }
    req["task"] = {{"source", t["source"]}, {"name", name}};
  }
  // candidate
  if (!body.contains("candidate") || !body["candidate"].is_object()) {
    return Invalid{"candidate", "an object: {path}, {source} (a KernelBench single file) or {files}"};
  }
  const Json& c = body["candidate"];
  if (auto bad = only_keys(c, "candidate", kCandidateKeys)) return bad;
  if (auto bad = one_of(c, "candidate", kCandidateKeys)) return bad;
  if (c.contains("path")) {
    if (!c["path"].is_string() || c["path"].get<std::string>().empty()) {
      return Invalid{"candidate.path", "a non-empty string"};
    }
    std::error_code ec;
    if (!fs::exists(c["path"].get<std::string>(), ec)) {
      return Invalid{"candidate.path", "no such file or directory on the server: " + c["path"].get<std::string>()};
    }
    req["candidate"] = {{"path", fs::absolute(c["path"].get<std::string>()).string()}};
  } else if (c.contains("source")) {
    if (!c["source"].is_string()) return Invalid{"candidate.source", "the single file's Python source, a string"};
    if (c["source"].get<std::string>().size() > o.max_file_bytes) {
      return Invalid{"candidate.source", "larger than " + std::to_string(o.max_file_bytes) + " bytes"};
    }
    req["candidate"] = {{"source", c["source"]}};
  } else {
    const Json& files = c["files"];
    if (!files.is_object() || files.empty()) return Invalid{"candidate.files", "an object of relative path -> text"};
    if (files.size() > o.max_files) {
      return Invalid{"candidate.files", "more than " + std::to_string(o.max_files) + " files"};
    }
    for (const auto& [name, text] : files.items()) {
      std::string field = "candidate.files[\"" + name + "\"]";
      if (!inside(name)) return Invalid{field, "a relative path inside the candidate's directory"};
      if (!text.is_string()) return Invalid{field, "the file's text, a string"};
      if (text.get<std::string>().size() > o.max_file_bytes) {
        return Invalid{field, "larger than " + std::to_string(o.max_file_bytes) + " bytes"};
      }
    }
    if (!files.contains("model_new.py")) return Invalid{"candidate.files", "no model_new.py"};
    req["candidate"] = {{"files", files}};
  }
  // options
  Json opts = Json::object();
  if (body.contains("options")) {
    const Json& op = body["options"];
    if (!op.is_object()) return Invalid{"options", "an object"};
    if (auto bad = only_keys(op, "options", kOptionKeys)) return bad;
    for (const char* k : {"protocol", "preset", "compile_mode"}) {
      if (op.contains(k) && !op[k].is_string()) return Invalid{std::string("options.") + k, "a string"};
    }
    if (op.contains("protocol")) {
      try {
        protocol_named(op["protocol"]);
      } catch (const std::exception& e) {
        return Invalid{"options.protocol", e.what()};
      }
    }
    if (op.contains("preset")) {
      try {
        tolerance_preset(op["preset"]);
      } catch (const std::exception& e) {
        return Invalid{"options.preset", e.what()};
      }
    }
    if (op.contains("compile_mode") &&
        std::find(kCompileModes.begin(), kCompileModes.end(), op["compile_mode"].get<std::string>()) == kCompileModes.end()) {
      return Invalid{"options.compile_mode", "one of: " + join(kCompileModes, ", ")};
    }
    if (op.contains("trials") && (!op["trials"].is_number_integer() || op["trials"] < 1 || op["trials"] > 100)) {
      return Invalid{"options.trials", "an integer from 1 to 100"};
    }
    if (op.contains("seed") && (!op["seed"].is_number_unsigned() || op["seed"] > 0xffffffffu)) {
      return Invalid{"options.seed", "an integer from 0 to 2^32-1"};
    }
    if (op.contains("measure_time") && !op["measure_time"].is_boolean()) {
      return Invalid{"options.measure_time", "true or false"};
    }
    opts = op;
  }
  req["options"] = opts;
  *out = req;
  return std::nullopt;
}

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

ServeReply serve_error(int status, const std::string& field, const std::string& message) {
  return {status, {{"error", {{"field", field}, {"message", message}}}}, {}};
}

Service::Service(const Environment& env, ServeOptions opts) : env_(env), opts_(std::move(opts)) {}

Service::~Service() { stop(); }

bool Service::start(std::string* error) {
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
  unsigned builders = opts_.defaults.device == "cuda" ? (opts_.builders ? opts_.builders : 1) : 0;
  if (opts_.defaults.build.jobs == 0) opts_.defaults.build.jobs = std::max(1u, std::thread::hardware_concurrency() / 4);
  std::vector<int> lanes = opts_.defaults.device == "cuda" ? opts_.gpus : std::vector<int>{-1};
  for (int g : lanes) threads_.emplace_back([this, g] { lane(g); });
  for (unsigned i = 0; i < builders; ++i) threads_.emplace_back([this] { builder(); });
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
  // A lane frees up about every (mean evaluation time / lanes).
  std::lock_guard<std::mutex> g(mu_);
  double mean = eval_count_ ? eval_seconds_sum_ / eval_count_ : 5.0;
  size_t lanes = opts_.defaults.device == "cuda" ? opts_.gpus.size() : 1;
  return std::max(1, static_cast<int>(std::ceil(mean / static_cast<double>(lanes))));
}

namespace {

// The idempotency key of a request: the header's or the body's (both: the same).
std::optional<Invalid> key_of(const Json& body, const std::string& header_key, std::string* key) {
  *key = header_key;
  if (body.is_object() && body.contains("idempotency_key")) {
    if (!body["idempotency_key"].is_string()) return Invalid{"idempotency_key", "a string"};
    std::string k = body["idempotency_key"];
    if (!key->empty() && k != *key) return Invalid{"idempotency_key", "differs from the Idempotency-Key header"};
    *key = k;
  }
  if (key->size() > 256) return Invalid{"idempotency_key", "longer than 256 bytes"};
  return std::nullopt;
}

}  // namespace

ServeReply Service::accept(const std::vector<std::pair<std::string, Json>>& requests, std::vector<Store::Accepted>* out) {
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
      if (!a.existed) to_build_.push_back(a.id);
    }
  }
  work_.notify_all();
  return {202, nullptr, {}};
}

ServeReply Service::submit(const Json& body, const std::string& header_key) {
  Json req;
  std::string key;
  if (auto bad = validate(body, opts_, &req)) return serve_error(400, bad->field, bad->message);
  if (auto bad = key_of(body, header_key, &key)) return serve_error(400, bad->field, bad->message);
  std::vector<Store::Accepted> got;
  ServeReply r = accept({{key, req}}, &got);
  if (r.status != 202) return r;
  const Store::Accepted& a = got.front();
  return {a.existed ? 200 : 202, {{"id", std::to_string(a.id)}, {"status", job_state_name(a.state)}, {"existed", a.existed}}, {}};
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
    std::optional<Invalid> bad = validate(all[i], opts_, &req);
    if (!bad) bad = key_of(all[i], "", &key);
    if (bad) {
      return serve_error(400, "evaluations[" + std::to_string(i) + "]" + (bad->field.empty() ? "" : "." + bad->field),
                         bad->message);
    }
    requests.emplace_back(key, req);
  }
  std::vector<Store::Accepted> got;
  ServeReply r = accept(requests, &got);
  if (r.status != 202) {
    if (r.body.contains("error")) {
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
    b["seconds"] = j.finished_at - j.started_at;
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
  return {200,
          {{"status", stopping_ ? "draining" : "ok"},
           {"device", opts_.defaults.device},
           {"lanes", opts_.defaults.device == "cuda" ? opts_.gpus.size() : 1},
           {"queued", c[JobState::kQueued]},
           {"running", c[JobState::kRunning]},
           {"done", c[JobState::kDone]},
           {"max_queue", opts_.max_queue}},
          {}};
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
  line("# HELP anvil_queue_depth Evaluations accepted and waiting for a lane (one lane per GPU).");
  line("# TYPE anvil_queue_depth gauge");
  line("anvil_queue_depth " + std::to_string(c[JobState::kQueued]));
  line("# HELP anvil_lane_busy Evaluations under way, per lane (a GPU's index, or cpu).");
  line("# TYPE anvil_lane_busy gauge");
  std::vector<int> lanes = opts_.defaults.device == "cuda" ? opts_.gpus : std::vector<int>{-1};
  for (int l : lanes) {
    line("anvil_lane_busy{lane=\"" + (l < 0 ? std::string("cpu") : std::to_string(l)) + "\"} " +
         std::to_string(busy_.count(l) ? busy_.at(l) : 0));
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
    if (req["candidate"].contains("files")) {
      for (const auto& [name, text] : req["candidate"]["files"].items()) {
        ok = ok && write(tmp / "candidate" / name, text.get<std::string>());
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
    fs::path task = materialize(*j, &candidate, &error);
    if (task.empty()) continue;  // the lane says why
    prebuild(env_, candidate.string(), opts_.defaults.build);  // fills the build cache; the evaluation reports the build
  }
}

Json Service::run(const Job& job, int gpu) {
  fs::path candidate;
  std::string error;
  fs::path task = materialize(job, &candidate, &error);
  if (task.empty()) {
    return {{"outcome", "error"}, {"reward", nullptr}, {"message", "cannot write the request's files: " + error}};
  }
  EvalOptions o = opts_.defaults;
  o.task = task.string();
  o.candidate = candidate.string();
  if (gpu >= 0) o.gpu = gpu;
  const Json& op = job.request["options"];
  if (op.contains("protocol")) o.protocol = op["protocol"];
  if (op.contains("preset")) o.preset = op["preset"];
  if (op.contains("trials")) o.trials = op["trials"];
  if (op.contains("seed")) o.seed = op["seed"].get<uint32_t>();
  if (op.contains("measure_time")) o.measure_time = op["measure_time"];
  if (op.contains("compile_mode")) o.compile_mode = op["compile_mode"];
  EvalResult r;
  try {
    r = evaluate(env_, o);
  } catch (const std::exception& e) {
    return {{"outcome", "error"}, {"reward", nullptr}, {"message", std::string("the evaluation failed: ") + e.what()}};
  }
  if (!r.evaluated) return {{"outcome", "error"}, {"reward", nullptr}, {"message", r.error}, {"evaluation", r.json}};
  return {{"outcome", r.json.value("outcome", Json())},
          {"reward", r.json.value("reward", Json())},
          {"message", r.json.value("message", Json(""))},
          {"evaluation", r.json}};
}

void Service::lane(int gpu) {
  while (!stopping_) {
    std::optional<Job> j;
    try {
      j = store_->claim();
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
      busy_[gpu] += 1;
    }
    auto t0 = SteadyClock::now();
    Json result = run(*j, gpu);
    double ran = std::chrono::duration<double>(SteadyClock::now() - t0).count();
    try {
      store_->finish(j->id, result);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "anvil serve: cannot record evaluation %lld: %s\n", static_cast<long long>(j->id), e.what());
    }
    {
      std::lock_guard<std::mutex> g(mu_);
      busy_[gpu] -= 1;
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
    observe_request("evaluation",
                    std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count() -
                        j->accepted_at);
    done_.notify_all();
  }
}

}  // namespace anvil
