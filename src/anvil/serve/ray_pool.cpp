#include "anvil/serve/ray_pool.h"

#include <signal.h>

#include "anvil/env/task.h"
#include "anvil/env/workdir.h"
#include "anvil/util/fs.h"
#include "anvil/util/hash.h"
#include "anvil/util/json_text.h"
#include "anvil/util/strings.h"

namespace anvil {
namespace fs = std::filesystem;
using Json = nlohmann::json;

namespace {

// The last lines of the bridge's log, for a message.
std::string log_tail(const fs::path& log) { return tail_of_log(log, 6); }


}  // namespace

std::unique_ptr<RayPool> RayPool::start(const Environment& env, const RayOptions& opts, std::string* err) {
  signal(SIGPIPE, SIG_IGN);  // a bridge that died is seen at its pipe's end, not by a signal here
  std::error_code ec;
  fs::path anvil = opts.anvil.empty() ? (env.anvil_program.empty() ? fs::read_symlink("/proc/self/exe", ec)
                                                                   : env.anvil_program)
                                      : opts.anvil;
  fs::path python = opts.python.empty() ? env.python : opts.python;
  std::vector<std::string> argv = {
      python.string(), "-c",
      "import os, sys; sys.path.insert(0, os.environ['ANVIL_PYDIR']); from anvil import ray_pool; ray_pool.entry()",
      "--address", opts.address, "--device", to_string(opts.device), "--workers", std::to_string(opts.workers),
      "--anvil", anvil.string(), "--serve-args", json_text(Json(opts.serve_args))};
  std::unique_ptr<RayPool> pool(new RayPool());
  pool->log_ = opts.log;
  pool->call_timeout_ = opts.call_timeout;
  fs::create_directories(opts.log.parent_path(), ec);
  pool->child_ = LineChild::start(argv, {{"ANVIL_PYDIR", (env.home / "python").string()}, {"PYTHONUNBUFFERED", "1"}},
                                  opts.log, err);
  if (!pool->child_) return nullptr;
  std::optional<std::string> first = pool->child_->read_line();
  Json hello;
  try {
    hello = first ? Json::parse(*first) : Json();
  } catch (const Json::exception&) {
  }
  if (!hello.is_object() || !hello.contains("ready")) {
    *err = hello.is_object() && hello.contains("error") && hello["error"].is_string()
               ? hello["error"].get<std::string>()
               : "the Ray bridge (" + python.string() + " -m anvil.ray_pool) did not start; its log " +
                     opts.log.string() + " ends:\n" + log_tail(opts.log);
    return nullptr;
  }
  pool->lanes_ = hello["ready"];
  if (!pool->lanes_.is_array() || pool->lanes_.empty()) {
    *err = "the Ray bridge placed no worker";
    return nullptr;
  }
  pool->count_ = pool->lanes_.size();
  pool->reader_ = std::thread([p = pool.get()] { p->read_answers(); });
  return pool;
}

RayPool::~RayPool() {
  if (child_) child_->close_stdin();  // the bridge ends its actors and exits
  child_.reset();                     // waits for it (then kills its group)
  if (reader_.joinable()) reader_.join();
}

void RayPool::read_answers() {
  for (;;) {
    std::optional<std::string> line = child_->read_line();
    if (!line) break;
    Json m;
    try {
      m = Json::parse(*line);
    } catch (const Json::exception&) {
      continue;  // not the protocol's (the bridge keeps Ray's prints on stderr)
    }
    if (m.is_object() && m.contains("lane_info") && m["lane_info"].is_object()) {  // a worker started again
      std::lock_guard<std::mutex> g(mu_);
      size_t i = m["lane_info"].value("lane", size_t{0});
      if (i < lanes_.size()) lanes_[i] = m["lane_info"];
      continue;
    }
    if (!m.is_object() || !m.contains("call") || !m["call"].is_number_integer()) continue;
    RayAnswer a;
    if (m.contains("result")) {
      a.kind = RayAnswer::Kind::kDone;
      a.result = m["result"];
    } else {
      a.kind = m.value("lost", false) ? RayAnswer::Kind::kLost : RayAnswer::Kind::kNoPool;
      a.error = m.value("error", std::string("the Ray bridge gave no reason"));
    }
    std::lock_guard<std::mutex> g(mu_);
    auto it = waiting_.find(m["call"].get<int64_t>());
    if (it != waiting_.end()) it->second = std::move(a);
    answered_.notify_all();
  }
  std::lock_guard<std::mutex> g(mu_);
  gone_ = true;
  gone_why_ = "the Ray bridge ended; its log " + log_.string() + " ends:\n" + log_tail(log_);
  answered_.notify_all();
}

Json RayPool::lane(size_t i) const {
  std::lock_guard<std::mutex> g(mu_);
  return lanes_.at(i);
}

size_t RayPool::least_busy() const {
  std::lock_guard<std::mutex> g(mu_);
  size_t best = 0;
  for (size_t i = 1; i < count_; ++i) {
    auto busy = [&](size_t l) { return in_flight_.count(l) ? in_flight_.at(l) : 0; };
    if (busy(i) < busy(best)) best = i;
  }
  return best;
}

RayAnswer RayPool::evaluate(size_t lane, const Json& request, const std::string& key) {
  int64_t call = 0;
  {
    std::lock_guard<std::mutex> g(mu_);
    if (gone_) return {RayAnswer::Kind::kNoPool, nullptr, gone_why_};
    call = next_call_++;
    waiting_[call] = std::nullopt;
    in_flight_[lane] += 1;
  }
  struct Done {
    RayPool* p;
    size_t lane;
    ~Done() {
      std::lock_guard<std::mutex> g(p->mu_);
      p->in_flight_[lane] -= 1;
    }
  } done{this, lane};
  if (!child_->write_line(json_text(Json{{"call", call}, {"lane", lane}, {"request", request}, {"key", key}}))) {
    std::lock_guard<std::mutex> g(mu_);
    waiting_.erase(call);
    return {RayAnswer::Kind::kNoPool, nullptr, "the Ray bridge no longer reads its calls"};
  }
  std::unique_lock<std::mutex> g(mu_);
  auto answered = [&] { return gone_ || waiting_[call].has_value(); };
  if (call_timeout_.count() > 0) {
    if (!answered_.wait_for(g, call_timeout_, answered)) {
      waiting_.erase(call);  // a late answer is dropped
      return {RayAnswer::Kind::kLost, nullptr,
              "worker " + std::to_string(lane) + " did not answer within " + std::to_string(call_timeout_.count()) + " s"};
    }
  } else {
    answered_.wait(g, answered);
  }
  std::optional<RayAnswer> a = std::move(waiting_[call]);
  waiting_.erase(call);
  if (!a) return {RayAnswer::Kind::kNoPool, nullptr, gone_why_};
  return *a;
}

std::optional<Json> inline_request(const Environment& env, const Json& request, std::string* err, bool* refused) {
  *refused = false;
  Json out = request;
  const Json& task = request["task"];
  if (task.contains("path")) {
    std::string spec = task["path"];
    std::optional<Task> t = load_task(env, spec, err);
    if (!t) return std::nullopt;
    std::string name = t->row < 0 ? t->file.filename().string()
                                  : t->file.stem().string() + "_row" + std::to_string(t->row) + ".py";
    out["task"] = {{"source", t->code}, {"name", name}};
  }
  const Json& cand = request["candidate"];
  if (!cand.contains("path")) return out;
  fs::path path = cand["path"].get<std::string>();
  // A file's bytes: its text when UTF-8, else base64 (a workdir may hold an executable).
  auto content = [](const std::string& bytes) { return is_utf8(bytes) ? Json(bytes) : Json{{"base64", base64_encode(bytes)}}; };
  std::error_code ec;
  const bool single = fs::is_regular_file(path, ec);
  fs::path tmp;
  try {
    tmp = make_temp_dir(fs::temp_directory_path(), "anvil-inline");
  } catch (const std::exception& e) {
    *err = e.what();
    return std::nullopt;
  }
  // The files an evaluation would copy, by its rules and limits (one home): a single file and the
  // sources beside it, or a workdir's files.
  bool ok = single ? copy_single_file_candidate(path, tmp / "c", err) : copy_candidate_files(path, tmp / "c", err, refused);
  Json files = Json::object();
  for (auto it = fs::recursive_directory_iterator(tmp / "c", ec); ok && !ec && it != fs::recursive_directory_iterator();
       it.increment(ec)) {
    if (!it->is_regular_file(ec)) continue;
    std::string rel = fs::relative(it->path(), tmp / "c", ec).string();
    if (!is_utf8(rel)) {
      *refused = true;
      *err = "a file of the candidate has a name that is not UTF-8: " +
             json_text(Json(rel));
      ok = false;
      break;
    }
    std::optional<std::string> bytes = read_file(it->path());
    if (!bytes) {
      *err = "cannot read the candidate's file " + rel;
      ok = false;
      break;
    }
    files[rel] = content(*bytes);
  }
  if (ok && ec) {
    *err = "cannot list the candidate's copy: " + ec.message();
    ok = false;
  }
  fs::remove_all(tmp, ec);
  if (!ok) return std::nullopt;
  if (!single) {
    out["candidate"] = {{"files", files}};
    return out;
  }
  if (!files.contains("model_new.py") || !files["model_new.py"].is_string()) {
    *refused = true;
    *err = "the candidate " + path.filename().string() + " is not UTF-8 text (a Python source is)";
    return std::nullopt;
  }
  out["candidate"] = {{"source", files["model_new.py"]}};
  files.erase("model_new.py");
  if (!files.empty()) out["candidate"]["beside"] = files;
  return out;
}

}  // namespace anvil
