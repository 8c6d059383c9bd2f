// sessions.h: `anvil serve`'s sessions, the agent's loop driven from outside (docs/service.md).
//
// A trainer's rollout worker holds the model; the server holds the episode's workdir and tools.
// create() makes a session from a task (a file or dataset row on the server, or inline source):
// its workdir as `anvil agent` makes one (open_episode), the tools' schemas, the system prompt and
// the task's first message. calls() runs tool calls in order with the same ToolBox and limits as
// `anvil agent` (the bash timeout, the answer's length, the episode's wall clock); the sandboxed
// shell (without the GPUs unless bash_gpu: a shell's GPU work is not scheduled), the protected
// compile/verify/profile. finalize() snapshots the workdir (a candidate's files, as an evaluation
// copies them: regular files only, bounded; a workdir beyond the bounds is recorded as a
// load_error, reward -1, as an evaluation judges it) and submits it as an ordinary evaluation (durable, idempotent: a second finalize answers the same evaluation), whose
// reward the client reads from /v1/evaluations/ID. A session lives on disk (STATE/sessions/ID:
// session.json, workdir/), so a restarted server serves it on; it expires `ttl` after its last use
// (reap()), and delete ends it at once (a request under way stops after its current call, and a
// running bash or ncu_profile is killed; stop() does the same for every session). GET
// never waits for a request under way: it answers the session as last saved.
//
// The tools' evaluations take the service's GPU slots at a higher priority than the queued
// evaluations (a verify is part of an agent's turn; a final evaluation can wait for it).
#pragma once

#include <chrono>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>

#include <nlohmann/json.hpp>

#include "anvil/agent/tools.h"
#include "anvil/env/eval.h"
#include "anvil/serve/requests.h"

namespace anvil {

struct ServeReply;
struct EpisodeOpening;

struct SessionOptions {
  std::filesystem::path dir;                // STATE/sessions: one directory per session
  std::filesystem::path finals;             // STATE/finals: the snapshots finalize() submits
  EvalOptions defaults;                     // the tools' evaluations, but what a session's options set
  RequestLimits limits;
  std::chrono::seconds ttl{3600};           // a session's default time to live after its last use
  std::chrono::seconds max_ttl{24 * 3600};  // the most a client may ask
  std::chrono::seconds wall_clock{3 * 3600};  // tool time of one session, as `anvil agent --wall-clock`
  std::chrono::milliseconds bash_timeout{180000};
  size_t max_output = 12000;                // characters of one tool answer
  size_t max_sessions = 1024;               // open at once; beyond: 429
  size_t max_calls = 32;                    // tool calls in one request
  bool bash_gpu = false;                    // the shell sees the GPUs (unscheduled: it could disturb others' timing)
  std::filesystem::path skill;              // the system prompt; empty: share/agent/SKILL.md
  // verify and profile sent as evaluation requests (anvil.serve-request/1, paths on this host)
  // to be judged elsewhere (`anvil serve --ray`); null: evaluate() on the gpus' slots.
  std::function<EvalResult(const nlohmann::json& request)> remote;
};

// Submits an evaluation request (its body, and an idempotency key) as POST /v1/evaluations does.
using SubmitFn = std::function<ServeReply(const nlohmann::json& body, const std::string& key)>;
// Records an evaluation already done (a request, an idempotency key, its result).
using RecordFn = std::function<ServeReply(const nlohmann::json& request, const std::string& key, const nlohmann::json& result)>;
// Records one tool call's latency (kind "tool_NAME").
using ObserveFn = std::function<void(const std::string& kind, double seconds)>;

class Sessions {
 public:
  // gpus: the evaluation slots the tools share with the service's lanes; builds: compile's.
  Sessions(const Environment& env, SessionOptions opts, Slots* gpus, Slots* builds, SubmitFn submit, RecordFn record,
           ObserveFn observe);
  ~Sessions();

  // 201; with an idempotency key (the header's or the body's), a retry of a creation whose answer
  // was lost answers 200 with the same session, never a second (made_before).
  ServeReply create(const nlohmann::json& body, const std::string& idempotency_key = "");
  ServeReply calls(const std::string& id, const nlohmann::json& body);  // 200 {results}
  ServeReply finalize(const std::string& id);                           // 202 {evaluation}
  ServeReply get(const std::string& id);
  ServeReply remove(const std::string& id);
  // The server is stopping: every session's running bash or ncu_profile is killed now and no
  // further call runs (the sessions stay on disk: a restarted server serves them on).
  void stop();
  int reap();           // expired sessions removed (one busy with a request is left for later); how many
  size_t count() const;  // sessions on disk

 private:
  struct Session;
  struct Held;  // a session's request lock (sessions.cpp)
  std::shared_ptr<Session> find(const std::string& id, ServeReply* refused);
  // Renames `dir` aside under mu_ when still() (called under it) says so, then deletes it; whether it did.
  bool set_aside(const std::filesystem::path& dir, const std::function<bool()>& still);
  // Ends session `s`: gone, out of open_, its directory set aside.
  void discard(Session& s);
  // A session's tools; their calls end once *cancel is true.
  std::unique_ptr<ToolBox> tool_box(const nlohmann::json& meta, const std::atomic<bool>* cancel) const;
  bool save(const Session& s, std::string* err) const;
  // Where an idempotency key's session id is kept: STATE/sessions/.keys/<SHA-256 of the key>.
  std::filesystem::path key_file(const std::string& key) const;
  // The answer to a retry of a keyed creation whose session `id` exists: 200 with its first answer
  // (`request` the same), 410 when it has ended or expired, 422 for another request.
  ServeReply made_before(const std::string& id, const nlohmann::json& request);
  // A creation's body, checked: its fields, or the first that is wrong (a 400).
  struct CreateRequest {
    std::string key;          // the idempotency key (body or header), "" for none
    nlohmann::json request;   // the body less its key (what a retry must repeat)
    nlohmann::json task;      // validate_task's
    nlohmann::json options;   // validate_options'
    int64_t ttl = 0;          // seconds
  };
  nlohmann::json opened_reply(const Session& s, const std::string& task_name, const std::string& protocol,
                              const EpisodeOpening& opening, int64_t ttl) const;
  std::optional<Invalid> validate_create(const nlohmann::json& body, const std::string& header_key,
                                         CreateRequest* out) const;

  const Environment& env_;
  SessionOptions opts_;
  Slots* gpus_;
  Slots* builds_;
  SubmitFn submit_;
  RecordFn record_;
  ObserveFn observe_;
  mutable std::mutex mu_;
  // Loaded sessions (the others are read from disk when used); an ended one stays, gone, until its
  // directory is discarded, so that no find() reads it back meanwhile.
  std::map<std::string, std::shared_ptr<Session>> open_;
  std::set<std::string> making_;  // the key files of keyed creations under way (a retry meanwhile: 409)
};

}  // namespace anvil
