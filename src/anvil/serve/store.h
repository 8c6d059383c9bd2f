// store.h: `anvil serve`'s durable record of the evaluations it accepted (SQLite).
//
// A request is written (and synced: WAL, synchronous=FULL) before the server acknowledges it, so
// every id a client was given survives a crash of the server. Each row is a Job: queued, running
// (claimed by a worker; `attempts` counts the claims) or done (its result kept). After a restart,
// recover() puts the jobs that were running back in the queue, except those already claimed
// `max_attempts` times, which are finished as runtime errors: a request that kills its server
// twice is not run a third time. An idempotency key maps a client's retry onto the job it already
// made. One connection, serialized by a mutex: every call is one short transaction.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

struct sqlite3;

namespace anvil {

enum class JobState { kQueued, kRunning, kDone };
const char* job_state_name(JobState s);

struct Job {
  int64_t id = 0;
  std::string key;          // the client's idempotency key ("" for none)
  nlohmann::json request;   // the request as accepted (validated)
  JobState state = JobState::kQueued;
  int attempts = 0;         // times a worker claimed it
  nlohmann::json result;    // when done: the evaluation's result
  double accepted_at = 0;   // seconds since the epoch
  double started_at = 0;    // the last claim
  double finished_at = 0;
};

class Store {
 public:
  // nullptr and *error when the database cannot be opened or made.
  static std::unique_ptr<Store> open(const std::filesystem::path& path, std::string* error);
  ~Store();
  Store(const Store&) = delete;
  Store& operator=(const Store&) = delete;

  struct Accepted {
    int64_t id = 0;
    bool existed = false;  // the key was already known: this is that job (nothing new was queued)
    bool full = false;     // refused: max_queued jobs are queued already (id 0)
    bool conflict = false; // refused: the key names a job of another request (id: that job)
    JobState state = JobState::kQueued;
  };
  // Records a new queued job, durably, unless `key` (non-empty) names an existing one or
  // `max_queued` jobs are queued already. Throws std::runtime_error when the database cannot be
  // written.
  Accepted accept(const std::string& key, const nlohmann::json& request, size_t max_queued);
  // Several at once, all or none: every one is accepted, or (one full or in conflict) none is new
  // and that one's answer says why.
  std::vector<Accepted> accept_all(const std::vector<std::pair<std::string, nlohmann::json>>& requests,
                                   size_t max_queued);
  // The oldest queued job among `first` where one of them is queued, else the oldest queued other
  // than `last` (a builder's job under way), else `last`; now running (attempts + 1); nullopt when
  // none is queued.
  std::optional<Job> claim(const std::vector<int64_t>& first = {}, int64_t last = -1);
  std::vector<int64_t> queued_ids();  // oldest first
  // A running job's result; it is done.
  void finish(int64_t id, const nlohmann::json& result);
  // A job accepted already done with `result` (nothing to run: a session's workdir that cannot be
  // judged); its key as accept's (a known key: that job, existed).
  Accepted accept_done(const std::string& key, const nlohmann::json& request, const nlohmann::json& result);
  std::optional<Job> get(int64_t id);
  std::optional<JobState> state_of(int64_t id);  // without reading its request or result
  std::optional<JobState> state_of_key(const std::string& key);  // the job a key names, if any
  // The jobs running now, queued again with the claim taken back: the server is stopped on purpose.
  int release_running();
  // One running job back in the queue: its claim counted as an attempt (`count`), or given back.
  void requeue(int64_t id, bool count);
  // Done jobs finished before `t` (unix seconds) removed, their keys with them; how many.
  int forget_done_before(double t);

  struct Recovered {
    int requeued = 0;  // were running, run again
    int failed = 0;    // were running for the max_attempts-th time: finished as runtime errors
  };
  // At start, before any claim: the jobs a previous server left running.
  Recovered recover(int max_attempts);
  std::map<JobState, int64_t> counts();

 private:
  explicit Store(sqlite3* db) : db_(db) {}
  void exec(const char* sql);
  Accepted accept_locked(const std::string& key, const nlohmann::json& request, size_t max_queued);
  std::mutex mu_;
  sqlite3* db_;
};

// The result recorded for a job whose every attempt ended with its server (recover()).
nlohmann::json abandoned_result(int attempts);

}  // namespace anvil
