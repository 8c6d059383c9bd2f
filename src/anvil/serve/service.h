// service.h: `anvil serve`'s evaluations, apart from HTTP (docs/service.md).
//
// A request names a task and a candidate (paths on the server, or their text) and a few
// evaluation options. submit() validates it, records it in the Store (durably: an id given out is
// never lost) and wakes the workers; get() answers its state and, when done, its outcome, reward and
// the whole evaluation (anvil.eval/1). Workers:
//   - builders (device cuda): each new job's files are written under the state directory and its
//     candidate built into the build cache ahead of its evaluation, one at a time on a quarter of
//     the cores (the lanes' timing shares the host); on the CPU none (each evaluation builds);
//   - lanes: `overlap` per GPU (one for the CPU), each takes a GPU slot, claims the oldest queued
//     job a builder is done with, else the oldest queued (built in the lane), and evaluates it
//     (`anvil eval`'s path): a lane's own build is then the exception, not a wave-mate's neighbour; with one slot a GPU runs one evaluation at a time,
//     with more they take the GPU's lock, so a device still times one at a time; sessions' tool
//     calls (sessions.h) take the same slots ahead of them.
// The queue is bounded (a full one answers 429 with Retry-After); an idempotency key maps a retry
// onto its first job (the same key for another request: 422). On start the jobs a previous server left running are run again once
// (Store::recover).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "anvil/env/eval.h"
#include "anvil/agent/tools.h"
#include "anvil/serve/ray_pool.h"
#include "anvil/serve/requests.h"
#include "anvil/serve/sessions.h"
#include "anvil/serve/store.h"

namespace anvil {

struct ServeOptions {
  std::filesystem::path state_dir;  // store.db and jobs/ID/ (the requests' files)
  EvalOptions defaults;             // every evaluation's settings, but what a request may set
  std::vector<int> gpus = {0};      // device cuda: one lane per GPU
  // Device cuda: evaluations at once on each GPU (lanes and sessions' tools alike). Above 1 each
  // takes the GPU's lock (EvalOptions::gpu_lock, Prepare::kTogether): a wave prepares together,
  // each is then verified and timed with the GPU to itself (`anvil bench --overlap`'s way).
  int overlap = 1;
  size_t max_queue = 256;           // queued jobs; beyond: 429
  int max_attempts = 2;             // claims of one job across server restarts (Store::recover)
  // How long a done job's row (its result, its idempotency key) is kept; its files go at once.
  std::chrono::seconds keep_results{7 * 24 * 3600};
  unsigned builders = 0;            // device cuda: builds ahead at once (each on defaults.build.jobs cores, 0: a
                                    // quarter); 0: one. Device cpu: none (the CPU is what is timed)
  RequestLimits limits;             // what one request may carry inline
  SessionOptions sessions;          // ttl, max_sessions, tool limits (dir, finals, defaults, limits: set by start())
  // Lanes on a Ray cluster's workers instead of this host's devices (ray_pool.h): the queue's
  // evaluations, and sessions' verify and profile, are judged there.
  std::optional<RayOptions> ray;
};


class Service {
 public:
  Service(const Environment& env, ServeOptions opts);
  ~Service();
  // Opens the store, recovers, starts the workers; false and *error when the store cannot be used.
  bool start(std::string* error);
  void drain();  // no new claims; long polls answer now (the HTTP front can then close its connections)
  void stop();   // drain(), then wait for the workers: each finishes its current evaluation
  // The evaluations under way queued again, their claim taken back (a stop on purpose that cannot
  // wait for them: they are not the candidates' doing). How many.
  int release_running();

  // A client's evaluation: its key the Idempotency-Key header's or the body's (requests.h).
  ServeReply submit(const nlohmann::json& body, const std::string& idempotency_key);
  // An evaluation under a key anvil derived (a session's final one: session_final_key), taken as given.
  ServeReply submit_keyed(const nlohmann::json& body, const std::string& key);
  ServeReply submit_batch(const nlohmann::json& body);
  // An evaluation recorded done at once with `result` (a request validated by the caller), as
  // submit answers: {id, status, existed}.
  ServeReply record_done(const nlohmann::json& request, const std::string& key, const nlohmann::json& result);
  // `wait`: up to this long for the job to be done (long poll).
  ServeReply get(const std::string& id, std::chrono::milliseconds wait);
  ServeReply health();
  Sessions& sessions() { return *sessions_; }
  size_t lanes() const { return lane_names().size(); }
  std::string metrics();  // Prometheus text format
  // The HTTP layer's latency of each call kind (submit, batch, get, health, metrics, error).
  void observe_request(const std::string& kind, double seconds);

 private:
  // Queues validated requests (all or none); 202 with *out filled, or the refusal.
  ServeReply accept(const std::vector<std::pair<std::string, nlohmann::json>>& requests,
                    std::vector<Store::Accepted>* out);
  void lane();
  void ray_lane(size_t lane);
  nlohmann::json run_on_ray(const Job& job, size_t lane, bool* retry);
  EvalResult tool_on_ray(const nlohmann::json& request);
  void finished(const Job& job, const nlohmann::json& result, const std::string& lane, double seconds);
  std::vector<std::string> lane_names() const;
  void reaper();
  void builder();
  nlohmann::json run(const Job& job, int gpu);
  std::filesystem::path job_dir(int64_t id) const;
  void forget_files(const Job& job);
  std::filesystem::path materialize(const Job& job, std::filesystem::path* candidate, std::string* error);
  nlohmann::json job_body(const Job& j) const;
  int retry_after_s();

  Environment env_;
  ServeOptions opts_;
  std::unique_ptr<Store> store_;
  std::unique_ptr<RayPool> ray_;         // --ray: the cluster's workers, a lane each
  std::string ray_down_;                 // why the Ray lanes stopped ("" while they judge)
  std::unique_ptr<Slots> gpu_slots_;    // a GPU (the CPU: one slot) to evaluate on: lanes, then sessions' tools first
  std::unique_ptr<Slots> build_slots_;  // sessions' compile calls
  std::unique_ptr<Sessions> sessions_;
  std::vector<std::thread> threads_;
  std::atomic<bool> stopping_{false};
  std::mutex mu_;
  std::condition_variable work_;   // a job was queued (lanes, builders)
  std::condition_variable done_;   // a job finished (long polls)
  bool builds_ahead_ = false;  // builders run (a GPU's, not Ray's): to_build_ is theirs
  std::deque<int64_t> to_build_;
  std::set<int64_t> built_;  // queued jobs a builder is done with (built, or found unbuildable): claimed first
  int64_t building_ = -1;    // the job a builder is building: claimed last
  // Metrics (under mu_).
  std::map<std::string, int64_t> outcomes_;
  std::map<std::string, int> busy_;              // lane name -> evaluations under way
  std::deque<std::chrono::steady_clock::time_point> finished_;  // the last minute's
  int64_t build_units_ = 0, build_compiled_ = 0;
  double eval_seconds_sum_ = 0;
  int64_t eval_count_ = 0;
  struct Histogram {
    std::vector<double> counts;  // per bucket of kBuckets, then +Inf
    double sum = 0;
    int64_t count = 0;
  };
  std::map<std::string, Histogram> latency_;
};

}  // namespace anvil
