#include "anvil/serve/sessions.h"

#include <chrono>
#include <cstdio>
#include <atomic>
#include <random>

#include "anvil/agent/episode.h"
#include "anvil/env/outcome.h"
#include "anvil/env/task.h"
#include "anvil/env/workdir.h"
#include "anvil/util/fs.h"
#include "anvil/util/hash.h"
#include "anvil/util/json_reader.h"
#include "anvil/util/json_text.h"
#include "anvil/util/strings.h"

namespace anvil {
namespace fs = std::filesystem;
using Json = nlohmann::json;

namespace {

using SteadyClock = std::chrono::steady_clock;

// 128 random bits, hex: a session's id (it names a directory and grants its tools).
std::string new_id() {
  std::random_device rd;
  std::string id;
  char buf[9];
  for (int i = 0; i < 4; ++i) {
    std::snprintf(buf, sizeof buf, "%08x", static_cast<unsigned>(rd()));
    id += buf;
  }
  return id;
}

bool well_formed(const std::string& id) {
  return id.size() == 32 && id.find_first_not_of("0123456789abcdef") == std::string::npos;
}

ServeReply unknown(const std::string& id) {
  return serve_error(404, "session", "no session " + id + " (ended, expired, or never made)");
}

}  // namespace

struct Sessions::Session {
  std::mutex mu;  // one request at a time
  std::string id;
  fs::path dir;
  Json meta;      // session.json
  std::unique_ptr<ToolBox> tools;
  std::atomic<bool> gone{false};  // ended (DELETE, expiry): a request under way stops after its current call
  std::atomic<bool> cancel{false};  // its tools' running calls killed (DELETE, the server's stop)
};

// A session's request lock; at its release, a session ended meanwhile (its DELETE found the lock
// taken) is discarded.
struct Sessions::Held {
  Sessions& self;
  Session& s;
  std::unique_lock<std::mutex> lock;
  Held(Sessions& owner, Session& session, bool wait = true) : self(owner), s(session), lock(session.mu, std::defer_lock) {
    if (wait) {
      lock.lock();
    } else {
      lock.try_lock();
    }
  }
  ~Held() {
    if (!lock.owns_lock()) return;
    bool ended = s.gone;
    if (ended) self.discard(s);  // still holding s.mu: no request of it runs
    lock.unlock();
  }
};

Sessions::Sessions(const Environment& env, SessionOptions opts, Slots* gpus, Slots* builds, SubmitFn submit,
                   RecordFn record, ObserveFn observe)
    : env_(env), opts_(std::move(opts)), gpus_(gpus), builds_(builds), submit_(std::move(submit)),
      record_(std::move(record)), observe_(std::move(observe)) {}

Sessions::~Sessions() = default;

namespace {

// A name to move an ended session's directory to before it is deleted (never a session's id).
fs::path trash_for(const fs::path& dir) {
  fs::path t = dir;
  t += ".ended-" + new_id().substr(0, 12);
  return t;
}

}  // namespace

bool Sessions::set_aside(const fs::path& dir, const std::function<bool()>& still) {
  fs::path trash = trash_for(dir);
  std::error_code ec;
  {
    std::lock_guard<std::mutex> g(mu_);
    if (!still()) return false;
    fs::rename(dir, trash, ec);  // from now on no find() reads it back
  }
  remove_tree(ec ? dir : trash);
  return true;
}

void Sessions::discard(Session& s) {
  set_aside(s.dir, [&] {
    s.gone = true;
    auto it = open_.find(s.id);
    if (it != open_.end() && it->second.get() == &s) open_.erase(it);
    return true;
  });
}

std::unique_ptr<ToolBox> Sessions::tool_box(const Json& meta, const std::atomic<bool>* cancel) const {
  ToolOptions t;
  t.cancel = cancel;
  t.workdir = fs::path(meta["dir"].get<std::string>()) / "workdir";
  t.task = meta["task"]["spec"];
  t.eval = with_options(opts_.defaults, meta["options"]);
  t.bash_timeout = opts_.bash_timeout;
  t.max_output = opts_.max_output;
  t.gpus = gpus_;
  t.builds = builds_;
  t.gpu_priority = 1;
  t.bash_gpu = opts_.bash_gpu;
  if (opts_.remote) {
    // The request the tool's options come from (with_options above), judged by the worker with
    // the same defaults: the session's options and whether it is timed.
    t.remote = [remote = opts_.remote, options = meta["options"]](const EvalOptions& o) {
      Json request = {{"task", {{"path", o.task}}}, {"candidate", {{"path", o.candidate}}}, {"options", options}};
      request["options"]["measure_time"] = o.measure_time;
      if (o.config) request["options"]["config"] = *o.config;  // the tune tool's
      return remote(request);
    };
  }
  // The wall clock counts from the session's creation, across restarts.
  double left = meta["created_at"].get<double>() + meta["wall_clock_s"].get<double>() - unix_seconds();
  t.deadline = SteadyClock::now() + std::chrono::duration_cast<SteadyClock::duration>(std::chrono::duration<double>(left));
  auto box = std::make_unique<ToolBox>(env_, t);
  box->restore(meta.value("state", Json()));
  return box;
}

bool Sessions::save(const Session& s, std::string* err) const {
  return write_file_atomic(s.dir / "session.json", json_text(s.meta, 1) + "\n", err);
}

size_t Sessions::count() const {
  std::error_code ec;
  size_t n = 0;
  for (fs::directory_iterator it(opts_.dir, ec), end; !ec && it != end; it.increment(ec)) {
    if (well_formed(it->path().filename().string())) ++n;
  }
  return n;
}

fs::path Sessions::key_file(const std::string& key) const { return opts_.dir / ".keys" / sha256_hex(key); }

ServeReply Sessions::made_before(const std::string& id, const Json& request) {
  auto ended = [] {
    return serve_error(410, "idempotency_key", "the session this key made has ended or expired: a new session needs a new key");
  };
  // The request compared before anything else is read: no answer names the id to another body.
  auto text = read_file(opts_.dir / id / "opened.json");
  if (!text) return ended();  // its directory set aside (ended, reaped)
  Json o = Json::parse(*text, nullptr, false);
  if (!o.is_object() || !o["reply"].is_object()) return serve_error(503, "", "this key's first answer cannot be read back");
  if (o["request"] != request) return serve_error(422, "idempotency_key", "already used for another request");
  ServeReply state = get(id);
  if (state.status == 404) return ended();
  if (state.status != 200) return serve_error(503, "", "this key's session cannot be read back");
  Json reply = o["reply"];
  reply["expires_at"] = state.body["expires_at"];
  reply["existed"] = true;
  return {200, reply, {}};
}

// A new session's answer: its id, workdir, tools, opening messages and limits.
Json Sessions::opened_reply(const Session& s, const std::string& task_name, const std::string& protocol,
                            const EpisodeOpening& opening, int64_t ttl) const {
  return {{"id", s.id},
          {"workdir", (s.dir / "workdir").string()},
          {"task", {{"name", task_name}}},
          {"protocol", protocol},
          {"tools", s.tools->schemas()},
          {"messages",
           Json::array({{{"role", "system"}, {"content", opening.system_prompt}},
                        {{"role", "user"}, {"content", opening.task_message}}})},
          {"expires_at", s.meta["expires_at"]},
          {"limits",
           {{"ttl_s", ttl},
            {"wall_clock_s", opts_.wall_clock.count()},
            {"max_tool_output", opts_.max_output},
            {"max_calls_per_request", opts_.max_calls}}}};
}

std::optional<Invalid> Sessions::validate_create(const Json& body, const std::string& header_key,
                                                   CreateRequest* out) const {
  if (!body.is_object()) return Invalid{"", "the body must be a JSON object"};
  if (auto bad = only_keys(body, "", {"task", "options", "ttl_s", "idempotency_key"})) return bad;
  if (auto bad = idempotency_key_of(body, header_key, &out->key)) return bad;
  out->request = body;
  out->request.erase("idempotency_key");
  if (auto bad = validate_task(body, opts_.limits, &out->task)) return bad;
  if (auto bad = validate_options(body, &out->options)) return bad;
  if (out->options.contains("config")) {  // the session's finale judges ModelNew's own value, as the agent is told
    return Invalid{"options.config", "not a session's option: its tune tool sets a launch configuration per evaluation"};
  }
  out->ttl = opts_.ttl.count();
  if (body.contains("ttl_s")) {
    int64_t least = std::min<int64_t>(60, opts_.ttl.count());
    if (!body["ttl_s"].is_number_integer() || body["ttl_s"] < least || body["ttl_s"] > opts_.max_ttl.count()) {
      return Invalid{"ttl_s", "an integer from " + std::to_string(least) + " to " + std::to_string(opts_.max_ttl.count())};
    }
    out->ttl = body["ttl_s"];
  }
  return std::nullopt;
}

ServeReply Sessions::create(const Json& body, const std::string& header_key) {
  CreateRequest made;
  if (auto bad = validate_create(body, header_key, &made)) return serve_error(400, bad->field, bad->message);
  const std::string& key = made.key;
  const Json& request = made.request;
  const Json& task_req = made.task;
  const Json& options = made.options;
  int64_t ttl = made.ttl;
  // With a key: the session it made, if any (STATE/sessions/.keys/SHA-256(key) holds its id, written
  // once the session is whole; a creation cut short left none, so it is made anew, the first one an
  // orphan that expires). Ids stay random: a key never names a second session.
  fs::path key_path;
  struct Making {  // a keyed creation under way, until this returns: a retry meanwhile waits (409)
    Sessions* self = nullptr;
    std::string name;
    ~Making() {
      if (!self) return;
      std::lock_guard<std::mutex> g(self->mu_);
      self->making_.erase(name);
    }
  } making;
  if (!key.empty()) {
    key_path = key_file(key);
    std::optional<std::string> known;
    {
      std::lock_guard<std::mutex> g(mu_);
      std::string name = key_path.filename().string();
      if (making_.count(name)) {
        ServeReply r = serve_error(409, "idempotency_key", "the session of this key is being made: ask again");
        r.headers.emplace_back("Retry-After", "1");
        return r;
      }
      std::error_code kec;
      known = read_file(key_path);
      if (!known && fs::exists(key_path, kec)) return serve_error(503, "", "cannot read " + key_path.string());
      if (!known) {
        making_.insert(name);
        making.self = this;
        making.name = name;
      }
    }
    if (known) {
      std::string known_id = trim(*known);
      if (!well_formed(known_id)) return serve_error(503, "", key_path.string() + " is damaged");
      return made_before(known_id, request);
    }
  }
  std::string id = new_id();
  fs::path dir = opts_.dir / id;
  std::error_code ec;
  {
    std::lock_guard<std::mutex> g(mu_);  // counted and made at once: concurrent creates stay within the limit
    if (count() >= opts_.max_sessions) {
      ServeReply r = serve_error(429, "", "the server holds " + std::to_string(opts_.max_sessions) +
                                              " sessions: end some (DELETE /v1/sessions/ID) or try later");
      r.headers.emplace_back("Retry-After", "30");
      return r;
    }
    fs::create_directories(dir, ec);
  }
  if (ec) return serve_error(503, "", "cannot make the session's directory " + dir.string() + ": " + ec.message());
  struct Undo {
    fs::path dir;
    bool keep = false;
    ~Undo() {
      if (!keep) remove_tree(dir);
    }
  } undo{dir};
  std::string err;
  std::string spec;
  if (task_req.contains("path")) {
    spec = task_req["path"];
  } else {
    fs::path file = dir / "task" / task_req["name"].get<std::string>();
    fs::create_directories(file.parent_path(), ec);
    if (!write_file_atomic(file, task_req["source"].get<std::string>(), &err)) return serve_error(503, "", err);
    spec = file.string();
  }
  std::optional<Task> task = load_task(env_, spec, &err);
  if (!task) return serve_error(400, "task", "the task cannot be loaded: " + err);
  EvalOptions eval = with_options(opts_.defaults, options);
  std::optional<EpisodeOpening> opening = open_episode(env_, *task, dir / "workdir", eval.protocol, opts_.skill, &err);
  if (!opening) {
    if (starts_with(err, "task_error: ")) return serve_error(400, "task", err.substr(12));
    return serve_error(500, "", err);
  }
  double now = unix_seconds();
  auto s = std::make_shared<Session>();
  s->id = id;
  s->dir = dir;
  s->meta = {{"id", id},
             {"dir", dir.string()},
             {"task", {{"spec", spec}, {"name", task->name}, {"request", task_req.contains("path") ? task_req : Json{{"name", task_req["name"]}}}}},
             {"options", options},
             {"created_at", now},
             {"ttl_s", ttl},
             {"expires_at", now + static_cast<double>(ttl)},
             {"wall_clock_s", static_cast<double>(opts_.wall_clock.count())},
             {"calls", 0},
             {"finished", false},
             {"evaluation", nullptr},
             {"state", nullptr}};
  s->tools = tool_box(s->meta, &s->cancel);
  s->meta["state"] = s->tools->state();
  if (!save(*s, &err)) return serve_error(503, "", err);
  Json reply = opened_reply(*s, task->name, eval.protocol, *opening, ttl);
  if (!key.empty()) {  // the first answer, for a retry; then the key's record, last: the session is whole
    std::error_code kec;
    fs::create_directories(key_path.parent_path(), kec);
    if (!write_file_atomic(dir / "opened.json", json_text(Json{{"request", request}, {"reply", reply}}) + "\n", &err) ||
        !write_file_atomic(key_path, id + "\n", &err)) {
      return serve_error(503, "", err);
    }
  }
  undo.keep = true;
  reply["existed"] = false;
  std::lock_guard<std::mutex> g(mu_);
  open_[id] = s;
  return {201, reply, {}};
}

std::shared_ptr<Sessions::Session> Sessions::find(const std::string& id, ServeReply* refused) {
  if (!well_formed(id)) {
    *refused = serve_error(404, "session", "no session " + id + " (a session's id is 32 hex digits)");
    return nullptr;
  }
  std::lock_guard<std::mutex> g(mu_);
  auto it = open_.find(id);
  if (it != open_.end()) {
    if (!it->second->gone) return it->second;
    *refused = unknown(id);
    return nullptr;
  }
  // Made by an earlier server: read it back (not one ended before a restart: session.ended).
  fs::path dir = opts_.dir / id;
  std::error_code ec;
  auto text = fs::exists(dir / "session.ended", ec) ? std::nullopt : read_file(dir / "session.json");
  if (!text) {
    *refused = unknown(id);
    return nullptr;
  }
  auto s = std::make_shared<Session>();
  s->id = id;
  s->dir = dir;
  try {
    s->meta = Json::parse(*text);
    const Json& m = s->meta;
    // Every field a request reads, of its type (a file of another version, or damaged, is refused here).
    bool ok = m.is_object() && m.value("id", "") == id && m["task"].is_object() && m["task"]["spec"].is_string() &&
              m["task"]["name"].is_string() && m["task"]["request"].is_object() && m["options"].is_object() &&
              m["created_at"].is_number() && m["expires_at"].is_number() && m["ttl_s"].is_number() &&
              m["wall_clock_s"].is_number() && m["calls"].is_number_integer() && m["finished"].is_boolean() &&
              (m["evaluation"].is_null() || m["evaluation"].is_string()) && m["dir"].is_string();
    if (!ok) throw std::runtime_error("a field is missing or of another type");
    s->tools = tool_box(s->meta, &s->cancel);
  } catch (const std::exception& e) {
    *refused = serve_error(500, "session", "session " + id + " cannot be read back: " + e.what());
    return nullptr;
  }
  open_[id] = s;
  return s;
}

ServeReply Sessions::calls(const std::string& id, const Json& body) {
  ServeReply refused;
  auto s = find(id, &refused);
  if (!s) return refused;
  if (!body.is_object() || !body.contains("calls") || !body["calls"].is_array() || body["calls"].empty()) {
    return serve_error(400, "calls", "a non-empty array of {name, arguments}");
  }
  if (auto bad = only_keys(body, "", {"calls"})) return serve_error(400, bad->field, bad->message);
  const Json& calls = body["calls"];
  if (calls.size() > opts_.max_calls) {
    return serve_error(400, "calls", "more than " + std::to_string(opts_.max_calls) + " calls in one request");
  }
  // Every call checked before any runs: a request is answered whole or refused whole.
  std::vector<std::pair<std::string, Json>> todo;
  for (size_t i = 0; i < calls.size(); ++i) {
    std::string at = "calls[" + std::to_string(i) + "]";
    const Json& c = calls[i];
    if (!c.is_object()) return serve_error(400, at, "an object {name, arguments}");
    if (auto bad = only_keys(c, at, {"name", "arguments", "id"})) return serve_error(400, bad->field, bad->message);
    if (!c.contains("name") || !c["name"].is_string()) return serve_error(400, at + ".name", "the tool's name, a string");
    std::string name = c["name"];
    if (!s->tools->has(name)) {
      return serve_error(400, at + ".name", "no tool named '" + name + "' (the tools: " + join(s->tools->names(), ", ") + ")");
    }
    Json args = c.value("arguments", Json::object());
    if (args.is_string()) {  // the model's own text, as a chat completion carries it
      std::string err;
      std::optional<Json> parsed = read_json(args.get<std::string>().empty() ? std::string("{}") : args.get<std::string>(), &err);
      if (parsed) {
        args = std::move(*parsed);
      } else {
        args = Json(c["arguments"]);  // answered as bad arguments, as `anvil agent` answers the model
      }
    } else if (!args.is_object()) {
      return serve_error(400, at + ".arguments", "an object, or a string holding one");
    }
    todo.emplace_back(name, args);
  }
  Held held(*this, *s);
  if (s->gone) return unknown(id);
  double now = unix_seconds();
  if (now > s->meta["expires_at"].get<double>()) return unknown(id);
  if (!s->meta["evaluation"].is_null()) {
    return serve_error(409, "session", "session " + id + " was finalized (evaluation " +
                                           s->meta["evaluation"].get<std::string>() + "): its tools are closed");
  }
  Json results = Json::array();
  for (size_t i = 0; i < todo.size(); ++i) {
    if (s->gone) break;  // ended meanwhile (DELETE): no further call runs
    const auto& [name, args] = todo[i];
    ToolOutcome out;
    if (args.is_string()) {
      out.error = true;
      out.error_kind = "bad_arguments";
      out.text = "error: " + name + ": the arguments are not valid JSON";
    } else {
      out = s->tools->call(name, args);
    }
    if (observe_) observe_("tool_" + name, out.seconds);
    Json r = {{"name", name},         {"content", valid_utf8(out.text)}, {"error", out.error},
              {"finish", out.finish}, {"out_of_time", out.out_of_time},  {"seconds", out.seconds}};
    if (calls[i].contains("id")) r["id"] = calls[i]["id"];
    if (!out.error_kind.empty()) r["error_kind"] = out.error_kind;
    if (!out.detail.is_null()) r["detail"] = out.detail;
    results.push_back(r);
    if (out.finish) s->meta["finished"] = true;
  }
  if (s->gone) return unknown(id);  // its DELETE left the directory to this request (Held)
  s->meta["calls"] = s->meta["calls"].get<int64_t>() + static_cast<int64_t>(todo.size());
  s->meta["state"] = s->tools->state();
  s->meta["expires_at"] = unix_seconds() + s->meta["ttl_s"].get<double>();
  std::string err;
  if (!save(*s, &err)) std::fprintf(stderr, "anvil serve: session %s: %s\n", id.c_str(), err.c_str());
  return {200, {{"results", results}, {"calls", s->meta["calls"]}, {"expires_at", s->meta["expires_at"]}}, {}};
}

ServeReply Sessions::finalize(const std::string& id) {
  ServeReply refused;
  auto s = find(id, &refused);
  if (!s) return refused;
  Held held(*this, *s);
  if (s->gone || unix_seconds() > s->meta["expires_at"].get<double>()) return unknown(id);
  // The workdir as it is now, copied where the evaluation reads it (a session ended before its
  // evaluation runs takes nothing from it); its id the idempotency key: a retry answers the same.
  fs::path snap = opts_.finals / id;
  std::error_code ec;
  Json candidate = {{"path", (snap / "candidate").string()}};
  Json task = s->meta["task"]["request"].contains("path")
                  ? Json{{"path", s->meta["task"]["spec"]}}
                  : Json{{"path", (snap / "task" / s->meta["task"]["request"]["name"].get<std::string>()).string()}};
  Json request = {{"task", task}, {"candidate", candidate}, {"options", s->meta["options"]}};
  if (!s->meta.contains("refused") && s->meta["evaluation"].is_null() && !fs::exists(snap / "candidate", ec)) {
    // (a snapshot made before a crash that lost its session.json's update is the one already
    // submitted: kept)
    fs::path tmp = opts_.finals / (id + ".tmp");
    remove_tree(tmp);
    fs::create_directories(tmp, ec);
    std::string err;
    bool too_large = false;
    if (!copy_candidate_files(s->dir / "workdir", tmp / "candidate", &err, &too_large)) {
      remove_tree(tmp);
      if (!too_large) return serve_error(503, "", "cannot snapshot the session's workdir: " + err);
      // The workdir's own doing: judged as an evaluation judges it (load_error, reward -1), so a
      // policy cannot trade a bad reward for no answer.
      s->meta["refused"] = "the candidate cannot be judged: " + err;
    } else {
      if (!s->meta["task"]["request"].contains("path")) {
        fs::create_directories(tmp / "task", ec);
        if (!ec) fs::copy_file(s->meta["task"]["spec"].get<std::string>(), tmp / "task" / s->meta["task"]["request"]["name"].get<std::string>(), ec);
      }
      if (!ec) {
        remove_tree(snap);
        fs::rename(tmp, snap, ec);
      }
      if (ec) {
        remove_tree(tmp);
        return serve_error(503, "", "cannot snapshot the session's workdir: " + ec.message());
      }
    }
  }
  ServeReply r = s->meta.contains("refused")
                     ? record_(request, session_final_key(id),
                               {{"outcome", outcome_name(Outcome::kLoadError)}, {"reward", -1}, {"message", s->meta["refused"]}, {"evaluation", nullptr}})
                     : submit_(request, session_final_key(id));
  if (r.status != 200 && r.status != 202) return r;
  s->meta["evaluation"] = r.body["id"];
  s->meta["expires_at"] = unix_seconds() + s->meta["ttl_s"].get<double>();
  std::string err;
  if (!save(*s, &err)) std::fprintf(stderr, "anvil serve: session %s: %s\n", id.c_str(), err.c_str());
  return {r.status, {{"session", id}, {"evaluation", r.body["id"]}, {"status", r.body["status"]}, {"existed", r.body["existed"]}},
          {}};
}

ServeReply Sessions::get(const std::string& id) {
  ServeReply refused;
  auto s = find(id, &refused);
  if (!s) return refused;
  Json m;
  Held held(*this, *s, /*wait=*/false);
  if (held.lock.owns_lock()) {
    m = s->meta;
  } else {  // a request under way: the session as last saved
    auto text = read_file(s->dir / "session.json");
    m = text ? Json::parse(*text, nullptr, false) : Json();
  }
  if (s->gone || !m.is_object() || !m["expires_at"].is_number() || unix_seconds() > m["expires_at"].get<double>()) {
    return unknown(id);
  }
  return {200,
          {{"id", id},
           {"workdir", (s->dir / "workdir").string()},
           {"task", {{"name", m["task"]["name"]}}},
           {"options", m["options"]},
           {"calls", m["calls"]},
           {"finished", m["finished"]},
           {"evaluation", m["evaluation"]},
           {"created_at", m["created_at"]},
           {"expires_at", m["expires_at"]},
           {"busy", !held.lock.owns_lock()}},
          {}};
}

ServeReply Sessions::remove(const std::string& id) {
  ServeReply refused;
  auto s = find(id, &refused);
  if (!s) return refused;
  {
    // Ended now, durably (session.ended: a restart does not read it back), but kept in open_, gone,
    // until its directory is discarded: at once, or by the request under way when it stops (Held).
    std::lock_guard<std::mutex> g(mu_);
    if (s->gone) return unknown(id);
    s->gone = true;
    s->cancel = true;  // a running bash or ncu_profile killed now
    std::error_code ec;
    fs::rename(s->dir / "session.json", s->dir / "session.ended", ec);
  }
  Held held(*this, *s, /*wait=*/false);
  return {200, {{"id", id}, {"deleted", true}}, {}};
}

void Sessions::stop() {
  std::lock_guard<std::mutex> g(mu_);
  for (auto& [id, s] : open_) s->cancel = true;
}

int Sessions::reap() {
  std::vector<std::string> ids;
  std::vector<fs::path> trash;
  std::error_code ec;
  for (fs::directory_iterator it(opts_.dir, ec), end; !ec && it != end; it.increment(ec)) {
    std::string name = it->path().filename().string();
    if (well_formed(name)) {
      ids.push_back(name);
    } else if (name.find(".ended-") != std::string::npos) {
      trash.push_back(it->path());  // a discard cut short (a kill): finished here
    }
  }
  for (fs::directory_iterator it(opts_.finals, ec), end; !ec && it != end; it.increment(ec)) {
    if (ends_with(it->path().filename().string(), ".tmp")) {  // a snapshot cut short, an hour old
      auto age = fs::file_time_type::clock::now() - fs::last_write_time(it->path(), ec);
      if (!ec && age > std::chrono::hours(1)) trash.push_back(it->path());
    }
  }
  // A key's record outlives its session by the longest time to live (a retry that late is answered
  // 410), then goes: touched while its session lives, removed that long after.
  for (fs::directory_iterator it(opts_.dir / ".keys", ec), end; !ec && it != end; it.increment(ec)) {
    std::error_code aec;
    auto id = read_file(it->path());
    if (!id) continue;
    if (fs::exists(opts_.dir / trim(*id), aec) || aec) {
      fs::last_write_time(it->path(), fs::file_time_type::clock::now(), aec);
      continue;
    }
    auto age = fs::file_time_type::clock::now() - fs::last_write_time(it->path(), aec);
    if (!aec && age >= opts_.max_ttl) trash.push_back(it->path());
  }
  for (const auto& t : trash) remove_tree(t);
  int n = 0;
  double now = unix_seconds();
  for (const auto& id : ids) {
    std::shared_ptr<Session> s;
    {
      std::lock_guard<std::mutex> g(mu_);
      auto it = open_.find(id);
      if (it != open_.end()) s = it->second;
    }
    if (s) {  // loaded: ended when expired and no request holds it (one that does renews it)
      Held held(*this, *s, /*wait=*/false);
      if (!held.lock.owns_lock() || s->gone) continue;
      const Json& e = s->meta["expires_at"];
      if (e.is_number() && e.get<double>() > now) continue;
      s->gone = true;  // discarded as `held` is released
      ++n;
      continue;
    }
    // Not loaded: its files say (session.ended: ended by a DELETE, then a restart; none: being
    // made, or a create that died, removed after a day; else when it expires).
    fs::path dir = opts_.dir / id;
    auto text = read_file(dir / "session.json");
    bool ended = fs::exists(dir / "session.ended", ec);
    double expires = 0;
    if (text) {
      Json m = Json::parse(*text, nullptr, false);
      if (m.is_object() && m["expires_at"].is_number()) expires = m["expires_at"].get<double>();
    } else if (!ended) {
      auto age = fs::file_time_type::clock::now() - fs::last_write_time(dir, ec);
      if (ec || age < std::chrono::hours(24)) continue;
    }
    if (text && !ended && expires > now) continue;
    if (set_aside(dir, [&] { return open_.count(id) == 0; })) ++n;  // (loaded meanwhile: the next round)
  }
  return n;
}

}  // namespace anvil
