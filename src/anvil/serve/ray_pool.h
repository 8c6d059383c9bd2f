// ray_pool.h: `anvil serve --ray`'s lanes on a Ray cluster (docs/service.md, "Scale-out on Ray").
//
// The pool starts the bridge (python -m anvil.ray_pool, on a Python with the cluster's Ray) as a
// child; the bridge places one worker actor per GPU the cluster offers (or N on its CPUs), each
// running a node-local `anvil serve` with the server's evaluation options. A lane sends one
// evaluation, its files inline (the worker's node need not share a file system), and waits for the
// worker's answer. Several lanes call at once; the bridge answers in any order, by call number.
#pragma once

#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "anvil/env/device.h"
#include "anvil/env/toolchain.h"
#include "anvil/util/line_child.h"

namespace anvil {

struct RayOptions {
  std::string address;                  // the cluster's (host:port, auto, ray://...)
  Device device = Device::Cuda;         // what the workers judge on
  int workers = 0;                      // 0: every GPU of the cluster (cuda), one per node (cpu)
  std::filesystem::path python;         // a Python with the cluster's Ray; empty: anvil's
  std::filesystem::path anvil;          // the anvil program on every node; empty: this one
  std::vector<std::string> serve_args;  // the server's evaluation options, for each worker's server
  std::filesystem::path log;            // the bridge's stderr (and Ray's)
  // A call not answered in this long is lost (a worker that hangs, a lane whose actor cannot be
  // started again); 0: no limit. The server sets its evaluation timeout and a margin.
  std::chrono::seconds call_timeout{0};
};

// What a worker answered for one evaluation.
struct RayAnswer {
  enum class Kind {
    kDone,     // result: the worker server's anvil.serve-evaluation/1 body
    kLost,     // the worker died under it, or its server ended (the candidate's doing, maybe)
    kNoPool,   // the bridge is gone: not the evaluation's doing
  };
  Kind kind = Kind::kNoPool;
  nlohmann::json result;
  std::string error;
};

class RayPool {
 public:
  // Starts the bridge and waits for its workers; nullptr and *err (one sentence) when it cannot.
  static std::unique_ptr<RayPool> start(const Environment& env, const RayOptions& opts, std::string* err);
  ~RayPool();

  size_t lanes() const { return count_; }
  // What worker `lane` said of itself: {lane, node, node_id, gpus, pid, serve_pid} (after a
  // restart, the new actor's).
  nlohmann::json lane(size_t i) const;
  // One evaluation on worker `lane`, blocking until it answers. `request` is an
  // anvil.serve-request/1 body with its files inline; `key` its idempotency key on the worker.
  RayAnswer evaluate(size_t lane, const nlohmann::json& request, const std::string& key);
  // The lane with the fewest evaluations under way (sessions' tool calls go there).
  size_t least_busy() const;

 private:
  RayPool() = default;
  void read_answers();

  std::unique_ptr<LineChild> child_;
  std::filesystem::path log_;
  std::chrono::seconds call_timeout_{0};
  nlohmann::json lanes_ = nlohmann::json::array();
  size_t count_ = 0;  // lanes_.size(), fixed at start
  std::thread reader_;
  mutable std::mutex mu_;
  std::condition_variable answered_;
  int64_t next_call_ = 0;
  std::map<int64_t, std::optional<RayAnswer>> waiting_;
  std::map<size_t, int> in_flight_;  // lane -> calls under way
  bool gone_ = false;
  std::string gone_why_;
};

// An evaluation request (as the store keeps it) with its task and candidate inline: a path's file
// read, a dataset row's source taken, a candidate directory's files (as an evaluation copies them,
// within its limits) as text, or base64 where they are not UTF-8. nullopt and *err when it cannot
// be sent; *refused when that is the candidate's doing (too large, a name or a single file that is
// not UTF-8: judged as a load_error, as evaluate() judges a candidate too large to copy).
std::optional<nlohmann::json> inline_request(const Environment& env, const nlohmann::json& request, std::string* err,
                                             bool* refused);

}  // namespace anvil
