// synth_test.cpp: anvil synth's journal, selection and summary (SynthSelect: unit), and its
// scheduler over real worker processes (SynthRun: a small Python worker that speaks the protocol
// without torch, so timeouts, deaths, resumption and de-duplication are tested in seconds; the
// real worker is python/tests/test_synth.py's).
#include "anvil/synth/synth.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "support/test_env.h"
#include "anvil/util/fs.h"
#include "anvil/util/strings.h"

namespace anvil {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;

fs::path scratch(const std::string& name) {
  fs::path p = fs::temp_directory_path() / ("anvil-synth-test-" + name + "-" + std::to_string(::getpid()));
  fs::remove_all(p);
  fs::create_directories(p);
  return p;
}

Json record(long index, const std::string& status, const std::string& key, const std::string& reason = "") {
  Json r = {{"index", index}, {"seed", 0}, {"status", status}, {"key", key}, {"ops", {"nn.ReLU"}},
            {"families", {"elementwise"}}, {"data_source", "torch#1"}, {"estimate", {{"ms", 3.0}}},
            {"nearest", {{"problem", "19_ReLU.py"}, {"level", "level1"}, {"similarity", 0.3}}}};
  if (!reason.empty()) {
    r["reason"] = reason;
    r["detail"] = "because 12";
  }
  // each stage's seconds up to the one that rejected it (marked failed), as the worker records them
  r["checks"] = Json::object();
  for (const char* st : {"compose", "duplicate", "runtime_estimate", "decontaminate", "imports", "eager", "vet"}) {
    r["checks"][st] = st == reason ? Json("failed") : Json(0.01);
    if (st == reason) break;
  }
  return r;
}

TEST(SynthSelect, DuplicatesAfterTheFirstByIndexAndCutAtCount) {
  std::map<long, Json> recs;
  recs[0] = record(0, "accepted", "a");
  recs[1] = record(1, "rejected", "", "vet");
  recs[2] = record(2, "accepted", "a");  // a duplicate of 0
  recs[3] = record(3, "accepted", "b");
  recs[4] = record(4, "accepted", "c");
  recs[5] = record(5, "accepted", "d");
  Selection s = select_tasks(recs, 3);
  ASSERT_EQ(s.accepted.size(), 3u);
  EXPECT_EQ(s.accepted[0]["index"], 0);
  EXPECT_EQ(s.accepted[1]["index"], 3);
  EXPECT_EQ(s.accepted[2]["index"], 4);
  ASSERT_EQ(s.considered.size(), 5u);  // index 5 is beyond the third task
  EXPECT_EQ(s.considered[2]["reason"], "duplicate");
  EXPECT_NE(s.considered[2]["detail"].get<std::string>().find("task 0"), std::string::npos);
}

TEST(SynthSelect, SummaryFunnelCountsEveryStageAndEscapesTheHtml) {
  std::map<long, Json> recs;
  recs[0] = record(0, "accepted", "a");
  recs[1] = record(1, "rejected", "", "vet");
  recs[2] = record(2, "rejected", "", "runtime_estimate");
  recs[3] = record(3, "rejected", "", "decontaminate");
  recs[4] = record(4, "accepted", "a");
  recs[5] = record(5, "rejected", "", "a_new_reason");
  recs[6] = record(6, "accepted", "<b>");
  recs[6]["ops"] = {"<script>"};
  Selection s = select_tasks(recs, 10);
  Json sm = synth_summary(s, {{"seed", 0}, {"max_similarity", 0.9}, {"out", "x.parquet"}});
  EXPECT_EQ(sm["tasks"], 2);
  EXPECT_EQ(sm["tried"], 7);
  std::map<std::string, long> rejected;
  long left = -1;
  for (const auto& f : sm["funnel"]) {
    rejected[f["stage"]] = f["rejected"];
    left = f["left"];
  }
  EXPECT_EQ(rejected["vet"], 1);
  EXPECT_EQ(rejected["runtime_estimate"], 1);
  EXPECT_EQ(rejected["duplicate"], 1);
  EXPECT_EQ(rejected["a_new_reason"], 1);  // a reason no stage names is shown, not lost
  EXPECT_EQ(left, 2);
  // decontamination: reached by the 5 that passed compose and runtime_estimate, 1 rejected
  EXPECT_EQ(sm["decontamination"]["reached"], 6);
  EXPECT_EQ(sm["decontamination"]["rejected"], 1);
  std::string html = synth_html(sm);
  EXPECT_EQ(html.find("<script>"), std::string::npos);
  EXPECT_NE(html.find("&lt;script&gt;"), std::string::npos);
  EXPECT_NE(synth_table(sm).find("2 tasks accepted of 7 tried"), std::string::npos);
}

TEST(SynthSelect, JournalTornLastLineIsLeftOutOtherBadLinesAreNamed) {
  fs::path d = scratch("journal");
  Json header = {{"journal", kSynthJournal}, {"seed", 0}};
  std::string good = header.dump() + "\n" + record(0, "accepted", "a").dump() + "\n";
  std::string e;
  ASSERT_TRUE(write_file_atomic(d / "j.jsonl", good + "{\"index\": 1, \"sta", &e));
  Journal j;
  ASSERT_TRUE(read_journal(d / "j.jsonl", &j, &e)) << e;
  EXPECT_EQ(j.records.size(), 1u);
  ASSERT_TRUE(write_file_atomic(d / "k.jsonl", good + "not json\n" + record(1, "accepted", "b").dump() + "\n", &e));
  Journal k;
  EXPECT_FALSE(read_journal(d / "k.jsonl", &k, &e));
  EXPECT_NE(e.find("line 3"), std::string::npos) << e;
  ASSERT_TRUE(write_file_atomic(d / "h.jsonl", record(0, "accepted", "a").dump() + "\n", &e));
  Journal h;
  EXPECT_FALSE(read_journal(d / "h.jsonl", &h, &e));
  EXPECT_NE(e.find("header"), std::string::npos) << e;
  fs::remove_all(d);
}

// A worker that needs no torch: task i is accepted with key k(i % 5) below 10, u(i) from 10, unless
// i % 4 == 1 (rejected: vet); i == 6 sleeps past any timeout; i == 9 kills the worker once. Asked
// (as the real worker is), it asks whether its key is an accepted task's and, if so, stops there.
const char* kFakeWorker = R"PY(
import json, os, sys, time
marker = sys.argv[1]
print(json.dumps({"ready": True}), flush=True)
for line in sys.stdin:
    req = json.loads(line)
    i = req["index"]
    if i == 6:
        time.sleep(60)
    if i == 9 and not os.path.exists(marker):
        open(marker, "w").close()
        os._exit(3)
    r = {"seed": req["seed"], "index": i, "checks": {"compose": 0.001}, "seconds": 0.001}
    key = "k%d" % (i % 5) if i < 10 else "u%d" % i
    of = None
    if req.get("ask"):
        print(json.dumps({"index": i, "ask": "duplicate", "key": key}), flush=True)
        of = json.loads(sys.stdin.readline())["duplicate_of"]
    if of is not None:
        r.update(status="rejected", reason="duplicate", detail="unfiltered: task %d has it" % of, key=key)
    elif i % 4 == 1:
        r.update(status="rejected", reason="vet", detail="degenerate: zero_output")
    else:
        r.update(status="accepted", reason=None, detail="", ops=["nn.ReLU", "torch.tanh"],
                 canonical_ops=["relu", "tanh"], families=["elementwise", "elementwise"], data_source="torch#2",
                 code="class Model: pass  # %d" % i, key=key, batch=8, input_shape=[8, 4],
                 output_shape=[8, 4], estimate={"ms": 2.5, "flops": 0, "bytes": 256},
                 nearest={"problem": "19_ReLU.py", "level": "level1", "similarity": 0.31})
    print(json.dumps(r), flush=True)
)PY";

// A GPU stage that needs no GPU: rejects every task whose index is a multiple of 3
// (gpu_deterministic), accepts the rest with a time; counts its calls in DIR/calls.
const char* kFakeGpuStage = R"PY(
import hashlib, json, os, sys
rows, out = sys.argv[1], sys.argv[3]
with open(os.path.join(out, "calls"), "a") as f:
    f.write("x")
with open(os.path.join(out, "gpu.jsonl"), "a") as j:
    for line in open(rows):
        r = json.loads(line)
        v = {"index": r["index"], "code_sha256": hashlib.sha256(r["code"].encode()).hexdigest()}
        if r["index"] % 3 == 0:
            v.update(status="rejected", reason="gpu_deterministic", detail="a second call differs")
        else:
            v.update(status="accepted", reason=None, eager_ms=2.5, compile_ms=2.0)
        j.write(json.dumps(v) + "\n")
)PY";

class SynthRun : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = scratch("run");
    std::string e;
    ASSERT_TRUE(write_file_atomic(dir_ / "worker.py", kFakeWorker, &e));
    ASSERT_TRUE(write_file_atomic(dir_ / "gpu_stage.py", kFakeGpuStage, &e));
  }
  void TearDown() override { if (!std::getenv("KEEP")) fs::remove_all(dir_); }
  SynthOptions opts(long count) {
    SynthOptions o;
    o.count = count;
    o.out = dir_ / "out" / "tasks.parquet";
    o.jobs = 2;
    o.timeout = std::chrono::seconds(2);
    o.progress = false;
    o.worker = {test_environment().python.string(), (dir_ / "worker.py").string(), (dir_ / "died-once").string()};
    return o;
  }
  fs::path dir_;
};

std::vector<long> accepted_indexes(const fs::path& journal, long count) {
  Journal j;
  std::string e;
  EXPECT_TRUE(read_journal(journal, &j, &e)) << e;
  std::vector<long> out;
  for (const auto& r : select_tasks(j.records, count).accepted) out.push_back(r["index"].get<long>());
  return out;
}

TEST_F(SynthRun, TimeoutsAndDeathsAreRecordedTheWorkerRestartedDuplicatesRemoved) {
  SynthResult r = run_synth(test_environment(), opts(4));
  ASSERT_EQ(r.status, 0) << r.error;
  // Accepted: 0 (k0), 2 (k2), 3 (k3), 4 (k4); 5 is k0 again, 6 times out, 7 is k2 again, 8 is k3, 9 dies
  // once. The first four unique by index are 0, 2, 3, 4, whatever order the two workers took them in.
  EXPECT_EQ(accepted_indexes(dir_ / "out" / "tasks.journal.jsonl", 4), (std::vector<long>{0, 2, 3, 4}));
  EXPECT_EQ(r.summary["tasks"], 4);
  EXPECT_TRUE(fs::is_regular_file(dir_ / "out" / "tasks.parquet"));
  EXPECT_TRUE(fs::is_regular_file(dir_ / "out" / "tasks.summary.json"));
  EXPECT_TRUE(fs::is_regular_file(dir_ / "out" / "tasks.html"));
  EXPECT_FALSE(fs::exists(dir_ / "out" / "tasks.rows.jsonl"));

  // A kill mid-write leaves a torn last line: the next run cuts it off and appends after it.
  {
    std::FILE* f = std::fopen((dir_ / "out" / "tasks.journal.jsonl").c_str(), "a");
    std::fputs("{\"index\": 99, \"status\": \"acc", f);
    std::fclose(f);
  }
  // More tasks from the same journal: only new indexes are tried; the timeout and the death are there.
  SynthResult more = run_synth(test_environment(), opts(6));
  ASSERT_EQ(more.status, 0) << more.error;
  EXPECT_GT(more.summary["run"]["resumed_from"].get<long>(), 0);
  Journal j;
  std::string e;
  ASSERT_TRUE(read_journal(dir_ / "out" / "tasks.journal.jsonl", &j, &e)) << e;
  EXPECT_EQ(j.records.at(6)["reason"], "timeout");
  EXPECT_EQ(j.records.at(9)["reason"], "worker_died");
  // 7 (k2) and 8 (k3) are duplicates, 9 died: the fifth and sixth are 10 and 11 (u10, u11)
  EXPECT_EQ(accepted_indexes(dir_ / "out" / "tasks.journal.jsonl", 6), (std::vector<long>{0, 2, 3, 4, 10, 11}));
  // The journal named k2 and k3 accepted before this run began: 7 and 8 were not filtered, and
  // named the lowest accepted index with their key.
  EXPECT_EQ(j.records.at(7)["reason"], "duplicate");
  EXPECT_EQ(j.records.at(7)["detail"], "unfiltered: task 2 has it");
  EXPECT_EQ(j.records.at(8)["detail"], "unfiltered: task 3 has it");
  EXPECT_EQ(j.records.at(10)["status"], "accepted");  // a new key: filtered as ever

  // Run again: what the machine decided (the timeout, the death) is tried again, nothing else.
  SynthResult again = run_synth(test_environment(), opts(6));
  ASSERT_EQ(again.status, 0) << again.error;
  EXPECT_EQ(again.summary["run"]["tried_this_run"], 2);
  Journal k;
  ASSERT_TRUE(read_journal(dir_ / "out" / "tasks.journal.jsonl", &k, &e)) << e;
  EXPECT_EQ(k.records.at(6)["reason"], "timeout");
  EXPECT_EQ(k.records.at(9)["reason"], "duplicate");  // it died once; this time it answered (k4 is 4's)
}

TEST_F(SynthRun, TheGpuStageRejectsAndTheCpuStageMakesMoreUntilCountPassBoth) {
  SynthOptions o = opts(4);
  o.gpu = true;
  o.gpu_stage = {test_environment().python.string(), (dir_ / "gpu_stage.py").string()};
  SynthResult r = run_synth(test_environment(), o);
  ASSERT_EQ(r.status, 0) << r.error;
  // CPU-accepted and distinct: 0 2 3 4 10 11 12 14 ...; the GPU rejects 0, 3 and 12 (and 5, a
  // duplicate of 0 skipped after compose, is not filtered again): the first four that pass both
  EXPECT_EQ(r.summary["tasks"], 4);
  std::vector<long> got;
  Journal j;
  std::string e;
  ASSERT_TRUE(read_journal(dir_ / "out" / "tasks.journal.jsonl", &j, &e)) << e;
  std::map<long, Json> verdicts;
  for (const auto& line : split_lines(read_file(dir_ / "out" / "tasks.gpu" / "gpu.jsonl").value_or("")))
    if (!line.empty()) verdicts[Json::parse(line)["index"].get<long>()] = Json::parse(line);
  EXPECT_EQ(verdicts.at(3)["reason"], "gpu_deterministic");
  EXPECT_EQ(verdicts.at(2)["status"], "accepted");
  long gpu_rejected = 0;
  for (const auto& f : r.summary["funnel"])
    if (f["stage"] == "gpu_deterministic") gpu_rejected = f["rejected"];
  EXPECT_EQ(gpu_rejected, 2);  // 0 and 3, before the fourth accepted (11)
  std::string calls = read_file(dir_ / "out" / "tasks.gpu" / "calls").value_or("");
  EXPECT_EQ(calls, "xx");  // a round of 4, then one for the 6 more the GPU's acceptance asks for

  // The same command again: every verdict is in the GPU's journal, nothing is checked twice.
  SynthResult again = run_synth(test_environment(), o);
  ASSERT_EQ(again.status, 0) << again.error;
  EXPECT_EQ(read_file(dir_ / "out" / "tasks.gpu" / "calls").value_or(""), "xx");
  EXPECT_EQ(again.summary["tasks"], 4);

  // A GPU stage that fails is the run's error, named; nothing written in place of the output.
  SynthOptions bad = opts(8);
  bad.out = dir_ / "bad" / "tasks.parquet";
  bad.gpu = true;
  bad.gpu_stage = {test_environment().python.string(), "-c", "import sys; print('no GPU here'); sys.exit(3)"};
  SynthResult b = run_synth(test_environment(), bad);
  EXPECT_EQ(b.status, 2);
  EXPECT_NE(b.error.find("the GPU stage failed"), std::string::npos) << b.error;
  EXPECT_NE(b.error.find("no GPU here"), std::string::npos) << b.error;
  EXPECT_FALSE(fs::exists(dir_ / "bad" / "tasks.parquet"));
}

TEST_F(SynthRun, AJournalOfAnotherRunIsRefusedUnlessFresh) {
  ASSERT_EQ(run_synth(test_environment(), opts(2)).status, 0);
  SynthOptions other = opts(2);
  other.seed = 7;
  SynthResult r = run_synth(test_environment(), other);
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.error.find("another run"), std::string::npos) << r.error;
  EXPECT_NE(r.error.find("--fresh"), std::string::npos) << r.error;
  other.fresh = true;
  EXPECT_EQ(run_synth(test_environment(), other).status, 0);
}

TEST_F(SynthRun, AWorkerThatCannotStartIsNamedAndNothingIsWritten) {
  SynthOptions o = opts(2);
  o.worker = {test_environment().python.string(), "-c", "import sys; print('no protocol here'); sys.exit(1)"};
  SynthResult r = run_synth(test_environment(), o);
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.error.find("ended before it was ready"), std::string::npos) << r.error;
  EXPECT_FALSE(fs::exists(dir_ / "out" / "tasks.parquet"));
}

TEST_F(SynthRun, BadOptionsAreRefused) {
  SynthOptions o = opts(2);
  o.out = dir_ / "tasks.csv";
  EXPECT_NE(run_synth(test_environment(), o).error.find(".parquet"), std::string::npos);
  o = opts(2);
  o.catalogue = dir_ / "missing.json";
  SynthResult r = run_synth(test_environment(), o);
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.error.find("missing.json"), std::string::npos);
}

}  // namespace
}  // namespace anvil
