// reward.h: the milestone reward and the time it is computed from: the one home of both rules.
//
// Milestones (CUDA Agent): -1 unless correct; 1 correct; 2 more than 5% faster than eager; 3 more
// than 5% faster than eager and torch.compile. "More than 5% faster": (t0 - t) / t0 > 0.05, i.e.
// a speed-up t0 / t above 1 / 0.95. A baseline that was not measured is never beaten.
//
// The candidate's time. The candidate's process measures its own time (CUDA events, or the
// profiler's kernel sum): precise, but a claim, since code in that process can forge it. The
// judge also times it from outside, around a batch of calls on inputs drawn in secret whose
// outputs it reads itself (python/anvil/batch.py), and eager through the same batch in the same
// process: the batch's speed-up over eager is one the candidate cannot inflate. The time the reward
// uses is the claim where it agrees with that bound, and the bound where it does not:
//
//     vouched_ms   = candidate batch per call / eager batch per call * eager_ms / (1 + kBatchSlack)
//     candidate_ms = max(claimed_ms, vouched_ms)
//
// so no speed-up enters the reward beyond (1 + kBatchSlack) times what the judge's clock saw.
// kBatchSlack covers the batch's own noise (its fixed overhead, cold versus warm caches); a
// candidate no faster than eager on the judge's clock can therefore not reach 1 / 0.95. A stall of
// the machine only lengthens a batch: while its batch holds the claim down, the judge times the
// candidate's batch again (up to 3 in all, each checked) and sends the fastest.
//
// A verdict of forgery takes evidence no stall can make: the same bound at eager's fastest call
// (eager_min_ms; a loaded machine inflates eager's median, and with it the bound, not its
// minimum),
//
//     floor_ms = candidate batch per call / eager batch per call * min(eager_ms, eager_min_ms) / (1 + kBatchSlack)
//
// A claim more than kForgedRatio times faster than floor_ms is no measurement error (launch latency
// and cache effects are a small factor, and eager's ratio corrects for most of them): the
// candidate's process lied about its time, and the evaluation ends as hack_suspected / timing_forged.
//
// Speed is credited on a GPU only. On a CPU the judge's clock is the host's wall around the batch: a
// shared machine's scheduler stretches any call by 10-100x, eager's first and coldest of all
// (bench/results/cpu-load-2026-11-24.json), memory transfers dominate both batches, and no bound
// taken there can keep a candidate doing more than eager's work from reward 2 or 3 (a red team got
// 3 in 9 of 9 runs with the reference's own code and a forged claim). So a correct CPU evaluation
// earns 1, whatever its times, and says so; its times are still measured and reported.
#pragma once

#include <optional>
#include <string>

#include "anvil/env/device.h"

namespace anvil {

// Whether an evaluation on `device` can earn a speed milestone (2, 3): on a GPU only (see above).
bool speed_credited(Device device);
inline constexpr const char* kNoSpeedCreditNote =
    "on the CPU no speed is credited (reward 1 at most): its clock cannot tell a faster candidate from a "
    "luckier one (docs/anti-hacking.md, \"Time the judge can vouch for\"); the times are shown, not rewarded";

// "More than 5% faster": the one line that sets the reward's speed margin; every text that states it
// (the agent's prompt and feedback, the reports, the metrics' rules) is made from it below, and
// reward_test.cpp checks that SKILL.md and no other source states another.
inline constexpr double kFasterMargin = 0.05;
inline constexpr double kFasterThreshold = 1.0 / (1.0 - kFasterMargin);  // a speed-up above this is faster
inline constexpr double kBatchSlack = 0.03;             // the judge's clock may understate a speed-up by this
inline constexpr double kForgedRatio = 10.0;            // a claim this much faster than the bound is a lie

// "more than 5% faster" (kFasterMargin as a percentage).
std::string more_than_faster();
// The threshold as a speed-up, "1/0.95", and with its value, "1/0.95 = 1.0526".
std::string faster_threshold(bool with_value = false);

// The milestone reward (see above): -1, 1, 2 or kMaxReward.
inline constexpr int kMaxReward = 3;
int milestone_reward(bool correct, std::optional<double> speedup_eager, std::optional<double> speedup_compile);

// The next milestone's speed-up and what it means, for the agent's feedback: "faster than eager
// by more than 5%", ... ("" when the top one is reached).
std::string next_milestone_hint(int reward);

// What the judge can vouch for (see above).
struct TimeBound {
  double candidate_ms = 0;  // the time the reward uses: max(claimed, vouched)
  double claimed_ms = 0;    // the candidate process's own measurement
  std::optional<double> vouched_ms;  // the judge's bound, when both batches were measured
  bool limited = false;              // the bound, not the claim, is the time
  std::optional<double> floor_ms;    // the bound at eager's fastest call, what a forgery is judged on
  bool forged = false;               // the claim is more than kForgedRatio times below floor_ms
};
TimeBound bound_time(double claimed_ms, std::optional<double> candidate_batch_per_call_ms,
                     std::optional<double> eager_batch_per_call_ms, std::optional<double> eager_ms,
                     std::optional<double> eager_min_ms = std::nullopt);

}  // namespace anvil
