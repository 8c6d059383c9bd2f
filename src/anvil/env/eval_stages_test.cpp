// evaluate()'s stages after the runner (interpret, score) and the baselines' plan, driven by a runner
// that answers canned reports (EvalOptions::runner): the outcome of every way a runner can end, the
// reward of every speed-up, the forged claim, the baselines kept and reused, the user's paths. No
// Python, no compiler: a single-file candidate, vetting off, an Environment made by hand.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "anvil/env/cache_layout.h"
#include "anvil/env/eval.h"
#include "anvil/env/reward.h"
#include "anvil/util/fs.h"

namespace anvil {
namespace {

// Answers every launch with `result`, and keeps the requests it was given.
class CannedRunner : public RunnerLauncher {
 public:
  explicit CannedRunner(SubprocessResult result) : result_(std::move(result)) {}
  Launch launch(const Environment&, const EvalOptions&, const nlohmann::json& request, const SubprocessOptions&,
                const std::filesystem::path&) const override {
    requests.push_back(request);
    Launch l;
    l.result = result_;
    return l;
  }
  mutable std::vector<nlohmann::json> requests;

 private:
  SubprocessResult result_;
};

SubprocessResult reported(const nlohmann::json& report) {
  SubprocessResult r;
  r.started = true;
  r.exit_code = 0;
  r.fd3_output = report.dump();
  return r;
}

// A clean timing of `ms` with the judge's batch at `per_call` ms a call.
nlohmann::json timed(double ms, double per_call) {
  return {{"median_ms", ms}, {"min_ms", ms}, {"p25_ms", ms}, {"p75_ms", ms}, {"batch", {{"per_call_ms", per_call}}}};
}

// A correct candidate's report: its time and, where given, the baselines the runner measured.
nlohmann::json correct(double candidate_ms, std::optional<double> eager_ms, std::optional<double> compile_ms) {
  nlohmann::json timing = {{"candidate", timed(candidate_ms, candidate_ms)}};
  if (eager_ms) timing["eager"] = timed(*eager_ms, *eager_ms);
  if (compile_ms) timing["compile"] = timed(*compile_ms, *compile_ms);
  return {{"status", "done"}, {"outcome", nullptr}, {"verify", {{"passed", 3}}}, {"timing", timing}};
}

nlohmann::json judged(const std::string& outcome, const std::string& message, const std::string& detail = "") {
  return {{"status", "done"}, {"outcome", outcome}, {"message", message}, {"detail", detail}};
}

class EvalStages : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/anvil-eval-stages-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    env_.home = ANVIL_SOURCE_DIR;
    env_.cache = dir_ / "cache";
    env_.python = "/nonexistent/python3";
    env_.torch.present = true;
    std::string err;
    ASSERT_TRUE(write_file_atomic(dir_ / "model.py", "class Model: pass\n", &err)) << err;
    ASSERT_TRUE(write_file_atomic(dir_ / "model_new.py", "class ModelNew: pass\n", &err)) << err;
    opts_.task = (dir_ / "model.py").string();
    opts_.candidate = (dir_ / "model_new.py").string();
    opts_.device = Device::Cpu;
    opts_.vet = false;
    opts_.seed = 7;
  }
  void TearDown() override { remove_tree(dir_); }

  void on_a_gpu() {
    env_.gpus = {Gpu{0, "Test GPU", "9.0"}};
    opts_.device = Device::Cuda;
  }
  EvalResult evaluate_with(const SubprocessResult& r, CannedRunner** used = nullptr) {
    runners_.push_back(std::make_unique<CannedRunner>(r));
    opts_.runner = runners_.back().get();
    if (used) *used = runners_.back().get();
    EvalResult res = evaluate(env_, opts_);
    // The verdict as types is the JSON's (the JSON is written from it), and reads back from it.
    if (res.evaluated) {
      EXPECT_EQ(res.json["outcome"], outcome_name(res.outcome)) << res.json.dump();
      EXPECT_EQ(res.json["reward"], res.reward) << res.json.dump();
      EvalResult again = evaluated_elsewhere(res.json);
      EXPECT_TRUE(again.evaluated) << again.error;
      EXPECT_EQ(again.outcome, res.outcome);
      EXPECT_EQ(again.reward, res.reward);
    }
    return res;
  }
  nlohmann::json judged_json(const SubprocessResult& r) {
    EvalResult res = evaluate_with(r);
    EXPECT_TRUE(res.evaluated) << res.error;
    return res.json;
  }

  std::filesystem::path dir_;
  Environment env_;
  EvalOptions opts_;
  std::vector<std::unique_ptr<CannedRunner>> runners_;
};

TEST_F(EvalStages, TheRewardFollowsTheSpeedups) {
  on_a_gpu();
  opts_.use_baseline_cache = false;
  struct Case {
    double candidate, eager, compile;
    int reward;
  };
  const double just = kFasterThreshold * 1.001;  // just over "more than 5% faster"
  for (const Case& c : {Case{1.0, 2.0, 2.0, 3}, Case{1.0, 2.0, 1.0, 2}, Case{1.0, 1.0, 2.0, 1},
                        Case{1.0, 1.0 / 0.95, 1.0 / 0.95, 1}, Case{1.0, just, just, 3}, Case{2.0, 1.0, 1.0, 1}}) {
    nlohmann::json j = judged_json(reported(correct(c.candidate, c.eager, c.compile)));
    EXPECT_EQ(j["outcome"], "ok") << j.dump();
    EXPECT_EQ(j["correct"], true);
    EXPECT_EQ(j["reward"], c.reward) << c.candidate << " " << c.eager << " " << c.compile;
    EXPECT_NEAR(j["timing"]["speedup_eager"].get<double>(), c.eager / c.candidate, 1e-9);
    EXPECT_EQ(j["timing"]["speed_credited"], true);
  }
}

// On a CPU the judge's clock is the host's wall: no speed is credited, whatever the times (reward.h).
TEST_F(EvalStages, ACpuEvaluationCreditsNoSpeed) {
  opts_.use_baseline_cache = false;
  nlohmann::json j = judged_json(reported(correct(1.0, 4.0, 4.0)));
  EXPECT_EQ(j["outcome"], "ok") << j.dump();
  EXPECT_EQ(j["reward"], 1);
  EXPECT_EQ(j["timing"]["speed_credited"], false);
  EXPECT_NEAR(j["timing"]["speedup_eager"].get<double>(), 4.0, 1e-9);  // shown, not rewarded
  EXPECT_NE(j["message"].get<std::string>().find("no speed is credited"), std::string::npos) << j["message"];
  EXPECT_FALSE(speed_credited(Device::Cpu));
  EXPECT_TRUE(speed_credited(Device::Cuda));
}

// A verdict another anvil sent (a Ray worker's) is read back only when it is one anvil could give.
TEST_F(EvalStages, AVerdictFromElsewhereIsOneAnvilCouldGive) {
  auto verdict = [](nlohmann::json outcome, nlohmann::json reward) {
    return evaluated_elsewhere({{"schema", "anvil.eval/1"}, {"outcome", outcome}, {"reward", reward}});
  };
  EvalResult ok = verdict("ok", 3);
  EXPECT_TRUE(ok.evaluated);
  EXPECT_EQ(ok.outcome, Outcome::kOk);
  EXPECT_EQ(ok.reward, 3);
  EXPECT_EQ(verdict("wrong_answer", -1).outcome, Outcome::kWrongAnswer);
  for (auto [outcome, reward] : std::vector<std::pair<nlohmann::json, nlohmann::json>>{
           {"ok", 4}, {"ok", 0}, {"ok", -1}, {"wrong_answer", 1}, {"great", 3}, {nullptr, -1}, {"ok", "3"}, {"ok", 2.5}}) {
    EvalResult r = verdict(outcome, reward);
    EXPECT_FALSE(r.evaluated) << outcome << " " << reward;
    EXPECT_EQ(r.error_kind, EvalError::kRunner);
    EXPECT_FALSE(r.error.empty());
  }
  EXPECT_FALSE(evaluated_elsewhere(nlohmann::json::array()).evaluated);
}

TEST_F(EvalStages, BaselinesMeasuredCleanServeTheNextEvaluation) {
  on_a_gpu();
  CannedRunner* first = nullptr;
  nlohmann::json j = evaluate_with(reported(correct(1.0, 2.0, 2.0)), &first).json;
  ASSERT_EQ(j["reward"], 3) << j.dump();
  EXPECT_EQ(first->requests.at(0)["timing"]["measure"], nlohmann::json({"candidate", "eager", "compile"}));
  // The next evaluation measures the candidate alone and is scored against the kept baselines, its
  // judge told eager's time and batch so that it can bound the claim.
  CannedRunner* second = nullptr;
  j = evaluate_with(reported(correct(1.0, std::nullopt, std::nullopt)), &second).json;
  EXPECT_EQ(second->requests.at(0)["timing"]["measure"], nlohmann::json({"candidate"}));
  EXPECT_EQ(second->requests.at(0)["timing"]["bound"]["eager_ms"], 2.0);
  EXPECT_EQ(j["reward"], 3) << j.dump();
  EXPECT_EQ(j["timing"]["eager"]["cached"], true);
  EXPECT_EQ(j["timing"]["compile"]["cached"], true);
}

TEST_F(EvalStages, AnUncleanBaselineIsUsedButNotKept) {
  on_a_gpu();
  nlohmann::json report = correct(1.0, 2.0, 2.0);
  report["timing"]["eager"]["load"] = {{"candidate_gone", false}};
  nlohmann::json j = judged_json(reported(report));
  EXPECT_EQ(j["reward"], 3);
  EXPECT_NE(j["message"].get<std::string>().find("eager baseline not kept"), std::string::npos) << j["message"];
  CannedRunner* next = nullptr;
  evaluate_with(reported(correct(1.0, 2.0, std::nullopt)), &next);
  EXPECT_EQ(next->requests.at(0)["timing"]["measure"], nlohmann::json({"candidate", "eager"}));
}

TEST_F(EvalStages, AClaimFarBelowTheJudgesClockIsForgedOnAGpuAndUncreditedOnACpu) {
  opts_.use_baseline_cache = false;
  nlohmann::json report = correct(1.0, 1.0, 1.0);
  report["timing"]["candidate"]["median_ms"] = 0.001;  // the batch saw 1 ms a call, as eager's
  nlohmann::json cpu = judged_json(reported(report));
  EXPECT_EQ(cpu["outcome"], "ok");
  EXPECT_EQ(cpu["reward"], 1);
  EXPECT_EQ(cpu["timing"]["speed_credited"], false);
  on_a_gpu();
  nlohmann::json gpu = judged_json(reported(report));
  EXPECT_EQ(gpu["outcome"], "hack_suspected");
  EXPECT_EQ(gpu["reason"], "timing_forged");
  EXPECT_EQ(gpu["reward"], -1);
  EXPECT_EQ(gpu["correct"], false);
  EXPECT_NEAR(gpu["hack"]["evidence"]["claimed_ms"].get<double>(), 0.001, 1e-12);
}

TEST_F(EvalStages, AClaimBelowTheBatchIsBoundedByIt) {
  opts_.use_baseline_cache = false;
  nlohmann::json report = correct(1.0, 2.0, 2.0);
  report["timing"]["candidate"]["median_ms"] = 0.5;  // claims 4x; the batch saw 2x
  nlohmann::json j = judged_json(reported(report));
  EXPECT_EQ(j["outcome"], "ok");
  EXPECT_EQ(j["timing"]["bound"]["limited_by"], "the judge's batch");
  // vouched: the batch per call over eager's, times eager's time, less the batch's slack (reward.h)
  EXPECT_NEAR(j["timing"]["candidate_ms"].get<double>(), 1.0 / 2.0 * 2.0 / (1 + kBatchSlack), 1e-9);
}

TEST_F(EvalStages, EveryEndOfTheRunnerIsAnOutcome) {
  SubprocessResult r = reported(nlohmann::json::object());
  r.fd3_output.clear();
  r.timed_out = true;
  EXPECT_EQ(judged_json(r)["outcome"], "timeout");
  r.timed_out = false;
  r.memory_exceeded = true;
  nlohmann::json j = judged_json(r);
  EXPECT_EQ(j["outcome"], "runtime_error");
  EXPECT_NE(j["message"].get<std::string>().find("GiB of memory"), std::string::npos);
  r.memory_exceeded = false;
  r.signal = 11;
  r.output = "the candidate's last words\n";
  j = judged_json(r);
  EXPECT_EQ(j["outcome"], "runtime_error");
  EXPECT_NE(j["message"].get<std::string>().find("killed by signal 11"), std::string::npos) << j["message"];
  EXPECT_NE(j["message"].get<std::string>().find("last words"), std::string::npos) << j["message"];
  r.signal = 0;
  r.exit_code = 3;
  EXPECT_NE(judged_json(r)["message"].get<std::string>().find("exited with code 3"), std::string::npos);
  r.fd3_output = "{not json";  // a corrupt report is none
  EXPECT_EQ(judged_json(r)["outcome"], "runtime_error");
  // What was too large to keep is said: a report cut at its cap, an output cut to its tail.
  r.fd3_left_out = 3 << 20;
  r.output_left_out = 4ull << 30;
  j = judged_json(r);
  EXPECT_EQ(j["outcome"], "runtime_error");
  EXPECT_EQ(j["message"].get<std::string>().rfind("the evaluation's report was larger than 9 bytes (3.0 MB more were "
                                                  "left out) and could not be read\n", 0), 0u) << j["message"];
  EXPECT_EQ(j["output_tail"], "(4.0 GB of the output left out; 27 bytes kept)\nthe candidate's last words\n");
  r.fd3_left_out = r.output_left_out = 0;
  for (const char* outcome : {"task_error", "load_error", "runtime_error", "wrong_answer", "hack_suspected"}) {
    j = judged_json(reported(judged(outcome, "said")));
    EXPECT_EQ(j["outcome"], outcome);
    EXPECT_EQ(j["reward"], -1);
  }
  EXPECT_EQ(judged_json(reported(judged("ok_trust_me", "said")))["outcome"], "runtime_error");
  nlohmann::json bad = judged("load_error", "said");
  bad["outcome"] = 3;  // not a string
  EXPECT_EQ(judged_json(reported(bad))["outcome"], "runtime_error");
  j = judged_json(reported(judged("task_error", "it failed", "Traceback\n  line\nValueError: because")));
  EXPECT_NE(j["message"].get<std::string>().find("ValueError: because"), std::string::npos) << j["message"];
}

TEST_F(EvalStages, ARunnerThatCouldNotWorkIsNoOutcome) {
  EvalResult res = evaluate_with(reported({{"status", "error"}, {"message", "no such device"}}));
  EXPECT_FALSE(res.evaluated);
  EXPECT_EQ(res.error_kind, EvalError::kRunner);
  EXPECT_NE(res.error.find("the runner could not evaluate: no such device"), std::string::npos) << res.error;
  SubprocessResult never;
  never.error = "no such file";
  res = evaluate_with(never);
  EXPECT_FALSE(res.evaluated);
  EXPECT_EQ(res.error_kind, EvalError::kRunner);
  EXPECT_STREQ(eval_error_name(res.error_kind), "runner");
  EXPECT_NE(res.error.find("cannot start the runner"), std::string::npos) << res.error;
}

// The request's mistakes are usage errors, the machine's environment errors: no runner is asked.
TEST_F(EvalStages, WhatCannotBeEvaluatedSaysWhoseFaultItIs) {
  CannedRunner runner(reported(correct(1.0, 2.0, 2.0)));
  opts_.runner = &runner;
  EvalOptions bad = opts_;
  bad.protocol = "KernelBench";
  EvalResult res = evaluate(env_, bad);
  EXPECT_FALSE(res.evaluated);
  EXPECT_EQ(res.error_kind, EvalError::kUsage) << res.error;
  bad = opts_;
  bad.candidate = opts_.candidate + ".missing";
  res = evaluate(env_, bad);
  EXPECT_EQ(res.error_kind, EvalError::kUsage) << res.error;
  on_a_gpu();
  env_.gpus.clear();
  bad = opts_;
  bad.device = Device::Cuda;
  res = evaluate(env_, bad);
  EXPECT_FALSE(res.evaluated);
  EXPECT_EQ(res.error_kind, EvalError::kEnvironment) << res.error;
  EXPECT_NE(res.error.find("no GPU found"), std::string::npos) << res.error;
  EXPECT_TRUE(runner.requests.empty());
}

// Answers its reports in turn, the last one again once they are used up.
class SequenceRunner : public RunnerLauncher {
 public:
  explicit SequenceRunner(std::vector<nlohmann::json> reports) : reports_(std::move(reports)) {}
  Launch launch(const Environment&, const EvalOptions&, const nlohmann::json& request, const SubprocessOptions&,
                const std::filesystem::path&) const override {
    Launch l;
    l.result = reported(reports_.at(std::min(requests.size(), reports_.size() - 1)));
    requests.push_back(request);
    return l;
  }
  mutable std::vector<nlohmann::json> requests;

 private:
  std::vector<nlohmann::json> reports_;
};

TEST_F(EvalStages, AnEvaluationShortOfGpuMemoryBesideItsWaveIsRunAgainAlone) {
  on_a_gpu();
  opts_.use_baseline_cache = false;
  opts_.seed.reset();  // a fresh seed drawn: the second try must take the first's
  opts_.gpu_lock = Prepare::kTogether;
  // The judge's own work short of memory, the candidate within its share (memory_fault's
  // CannotServe: anvil could not evaluate).
  nlohmann::json short_ = {{"status", "error"},
                           {"message", "the GPU ran out of memory making the judge's batch pool"},
                           {"memory_limited", true}};
  SequenceRunner runner({short_, correct(1.0, 2.0, 2.0)});
  opts_.runner = &runner;
  EvalResult res = evaluate(env_, opts_);
  ASSERT_TRUE(res.evaluated) << res.error;
  ASSERT_EQ(runner.requests.size(), 2u);
  std::string lock = gpu_lock_path(env_, 0).string();
  EXPECT_EQ(runner.requests[0]["gpu_lock"], lock);
  EXPECT_EQ(runner.requests[0]["prepare"], "together");
  EXPECT_EQ(runner.requests[1]["gpu_lock"], lock);  // alone: the lock exclusive throughout
  EXPECT_FALSE(runner.requests[1].contains("prepare"));
  EXPECT_EQ(runner.requests[1]["seed"], runner.requests[0]["seed"]);
  EXPECT_EQ(res.json["outcome"], "ok") << res.json.dump();
  EXPECT_EQ(res.json["reward"], 3);
  EXPECT_NE(res.json["isolation"]["first_try"]["message"].get<std::string>().find("ran out of memory"),
            std::string::npos);
  EXPECT_NE(res.json["isolation"]["gpu_lock"].get<std::string>().find("exclusive from CUDA's start"), std::string::npos);

  // What the candidate's process says (its own running out of memory, a wrong answer, a hack
  // named gpu_memory) is its outcome: run once, prepared together or alone.
  nlohmann::json own = judged("runtime_error", "CUDA out of memory");
  own["reason"] = "gpu_memory";
  nlohmann::json wrong = judged("wrong_answer", "off by one");
  wrong["reason"] = "gpu_memory";
  nlohmann::json hack = judged("hack_suspected", "forged");
  hack["reason"] = "gpu_memory";
  for (const nlohmann::json& first : {own, wrong, hack}) {
    SequenceRunner once({first, correct(1.0, 2.0, 2.0)});
    opts_.runner = &once;
    res = evaluate(env_, opts_);
    EXPECT_EQ(once.requests.size(), 1u) << first.dump();
    EXPECT_EQ(res.json["outcome"], first["outcome"]);
    EXPECT_FALSE(res.json["isolation"].contains("first_try"));
  }
  opts_.gpu_lock = Prepare::kAlone;  // alone already: nothing to try again
  SequenceRunner alone({short_, correct(1.0, 2.0, 2.0)});
  opts_.runner = &alone;
  res = evaluate(env_, opts_);
  EXPECT_EQ(alone.requests.size(), 1u);
  EXPECT_FALSE(res.evaluated);
}

TEST_F(EvalStages, NoGpuLockUnlessAsked) {
  on_a_gpu();
  CannedRunner* runner = nullptr;
  nlohmann::json j = evaluate_with(reported(correct(1.0, 2.0, 2.0)), &runner).json;
  EXPECT_FALSE(runner->requests.at(0).contains("gpu_lock"));
  EXPECT_FALSE(j["isolation"].contains("gpu_lock"));
  opts_.gpu_lock = Prepare::kTogether;
  opts_.defenses = false;  // the judge's mode: without defenses, the lock exclusive throughout
  evaluate_with(reported(correct(1.0, 2.0, 2.0)), &runner);
  EXPECT_TRUE(runner->requests.at(0).contains("gpu_lock"));
  EXPECT_FALSE(runner->requests.at(0).contains("prepare"));
  opts_.device = Device::Cpu;  // no GPU, no lock
  evaluate_with(reported(correct(1.0, 2.0, 2.0)), &runner);
  EXPECT_FALSE(runner->requests.at(0).contains("gpu_lock"));
}

// Names the private copy of the candidate it was given, as a runner's traceback does.
class NamingRunner : public RunnerLauncher {
 public:
  Launch launch(const Environment&, const EvalOptions&, const nlohmann::json& request, const SubprocessOptions&,
                const std::filesystem::path&) const override {
    Launch l;
    l.result = reported(judged("load_error", "cannot import " + request["candidate_dir"].get<std::string>() +
                                                 "/model_new.py"));
    return l;
  }
};

TEST_F(EvalStages, MessagesNameTheUsersFilesAndThePrivateCopyIsGone) {
  NamingRunner runner;
  opts_.runner = &runner;
  EvalResult res = evaluate(env_, opts_);
  ASSERT_TRUE(res.evaluated) << res.error;
  std::string message = res.json["message"];
  EXPECT_NE(message.find("cannot import " + opts_.candidate), std::string::npos) << message;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(cache_dir(env_, CacheArea::kTmp), ec)) {
    ADD_FAILURE() << "left behind: " << entry.path();
  }
}

// A workdir the build cannot scan (no kernels/) is a compile_error with no binding mode: the
// result's candidate.mode is fast or compat when present (schemas/anvil.eval-1.schema.json), never "".
TEST_F(EvalStages, AWorkdirWithoutKernelsHasNoBindingMode) {
  std::string err;
  ASSERT_TRUE(write_file_atomic(dir_ / "wd" / "model_new.py", "class ModelNew: pass\n", &err)) << err;
  opts_.candidate = (dir_ / "wd").string();
  CannedRunner* runner = nullptr;
  EvalResult res = evaluate_with(reported(correct(1, 1, 1)), &runner);
  ASSERT_TRUE(res.evaluated) << res.error;
  EXPECT_EQ(res.json["outcome"], "compile_error");
  EXPECT_EQ(res.json["candidate"]["kind"], "workdir");
  EXPECT_FALSE(res.json["candidate"].contains("mode")) << res.json["candidate"].dump();
  EXPECT_TRUE(runner->requests.empty());
}

TEST_F(EvalStages, AMissingCandidateIsNotEvaluated) {
  opts_.candidate = (dir_ / "missing.py").string();
  CannedRunner* runner = nullptr;
  EvalResult res = evaluate_with(reported(correct(1, 1, 1)), &runner);
  EXPECT_FALSE(res.evaluated);
  EXPECT_NE(res.error.find("does not exist"), std::string::npos);
  EXPECT_TRUE(runner->requests.empty());
}

}  // namespace
}  // namespace anvil
