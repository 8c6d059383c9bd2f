#include "anvil/env/reward.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace anvil {

bool speed_credited(Device device) { return device == Device::Cuda; }

int milestone_reward(bool correct, std::optional<double> speedup_eager, std::optional<double> speedup_compile) {
  if (!correct) return -1;
  bool eager = speedup_eager && *speedup_eager > kFasterThreshold;
  bool compile = speedup_compile && *speedup_compile > kFasterThreshold;
  if (eager && compile) return kMaxReward;
  if (eager) return 2;
  return 1;
}

std::string more_than_faster() {
  char buf[48];
  std::snprintf(buf, sizeof buf, "more than %g%% faster", std::round(kFasterMargin * 1e4) / 100);
  return buf;
}

std::string faster_threshold(bool with_value) {
  char buf[64];
  if (with_value) std::snprintf(buf, sizeof buf, "1/%g = %.4f", 1.0 - kFasterMargin, kFasterThreshold);
  else std::snprintf(buf, sizeof buf, "1/%g", 1.0 - kFasterMargin);
  return buf;
}

std::string next_milestone_hint(int reward) {
  switch (reward) {
    case -1: return "be correct (reward 1)";
    case 1: return "be " + more_than_faster() + " than eager PyTorch (reward 2)";
    case 2: return "be " + more_than_faster() + " than torch.compile too (reward 3)";
    default: return "";
  }
}

TimeBound bound_time(double claimed_ms, std::optional<double> candidate_batch_per_call_ms,
                     std::optional<double> eager_batch_per_call_ms, std::optional<double> eager_ms,
                     std::optional<double> eager_min_ms) {
  TimeBound b;
  b.claimed_ms = claimed_ms;
  b.candidate_ms = claimed_ms;
  if (candidate_batch_per_call_ms && eager_batch_per_call_ms && eager_ms && *candidate_batch_per_call_ms > 0 &&
      *eager_batch_per_call_ms > 0 && *eager_ms > 0) {
    b.vouched_ms = *candidate_batch_per_call_ms / *eager_batch_per_call_ms * *eager_ms / (1.0 + kBatchSlack);
    if (*b.vouched_ms > claimed_ms) {
      b.candidate_ms = *b.vouched_ms;
      b.limited = true;
    }
    double fastest = eager_min_ms && *eager_min_ms > 0 ? std::min(*eager_ms, *eager_min_ms) : *eager_ms;
    b.floor_ms = *candidate_batch_per_call_ms / *eager_batch_per_call_ms * fastest / (1.0 + kBatchSlack);
    b.forged = claimed_ms * kForgedRatio < *b.floor_ms;
  }
  return b;
}

}  // namespace anvil
