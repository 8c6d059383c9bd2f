// `anvil rft` over files written by hand: the inputs found, the output in path order whatever the
// threads, duplicates after the first, the summary's counts and lists, and a bad input: its message
// exact, nothing written (the previous output left as it was), or skipped with --skip-bad.
#include "anvil/train/rft.h"

#include <gtest/gtest.h>

#include "support/test_records.h"
#include "anvil/util/fs.h"
#include "anvil/util/strings.h"

namespace anvil {
namespace {

using Json = nlohmann::json;
using test_records::add_tokens;
using test_records::add_turn;

class Rft : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = make_temp_dir(fs::temp_directory_path(), "rft"); }
  void TearDown() override { remove_tree(dir_); }

  // A kept token-level episode whose model sampled `sampled`.
  static Json kept(const std::string& id, std::vector<int64_t> sampled = {7, 8}) {
    Json r = test_records::token_record(id);
    add_turn(r, {{"finish", {{"summary", "ok"}}}}, "done");
    add_tokens(r, {1, 2, 3}, sampled, "opening");
    return r;
  }

  void put(const std::string& rel, const Json& record) { put_text(rel, record.dump(1)); }
  void put_text(const std::string& rel, const std::string& text) {
    std::string err;
    ASSERT_TRUE(write_file_atomic(dir_ / rel, text, &err)) << err;
  }

  RftResult rft(std::vector<std::string> inputs, unsigned jobs = 2, bool skip_bad = false) {
    RftOptions o;
    o.inputs = std::move(inputs);
    o.out = dir_ / "out" / "sft.jsonl";
    o.jobs = jobs;
    o.skip_bad = skip_bad;
    return run_rft(o);
  }

  std::vector<Json> lines() {
    std::vector<Json> out;
    for (const auto& l : split_lines(read_file(dir_ / "out" / "sft.jsonl").value_or(""))) out.push_back(Json::parse(l));
    return out;
  }

  std::string run(const std::string& rel) { return (dir_ / rel).string(); }

  fs::path dir_;
};

// A run directory of every kind of episode: each dropped for its reason, the rest kept in path order.
TEST_F(Rft, EveryEpisodeIsKeptOrDroppedForOneReason) {
  put("runs/a/t/sample-0/trajectory.json", kept("t/sample-0", {5}));
  Json running = kept("t/sample-1");
  running["status"] = "running";
  put("runs/a/t/sample-1/trajectory.json", running);
  put("runs/a/t/sample-2/trajectory.json", kept("t/sample-2", {5}));  // sample-0's outputs again
  Json chat = test_records::record("u/sample-0", 3);
  add_turn(chat, {{"finish", Json::object()}}, "done");
  put("runs/a/u/sample-0/trajectory.json", chat);
  Json poor = kept("u/sample-1", {9});
  poor["reward"] = -1;
  put("runs/a/u/sample-1/trajectory.json", poor);
  // The model wrote a file named trajectory.json into its workdir: not an episode.
  put_text("runs/a/u/sample-1/workdir/trajectory.json", "not a record");
  put("runs/b/t/sample-0/trajectory.json", kept("t/sample-0", {6}));

  RftResult r = rft({run("runs/b"), run("runs/a")});
  ASSERT_EQ(r.status, 0) << r.error;
  std::vector<Json> out = lines();
  ASSERT_EQ(out.size(), 3u);
  EXPECT_EQ(out[0]["source"], run("runs/a/t/sample-0/trajectory.json"));
  EXPECT_EQ(out[1]["source"], run("runs/a/u/sample-0/trajectory.json"));
  EXPECT_EQ(out[1]["input_ids"], nullptr);  // chat mode: messages only
  EXPECT_EQ(out[2]["source"], run("runs/b/t/sample-0/trajectory.json"));
  EXPECT_EQ(out[2]["input_ids"], Json({1, 2, 3, 6}));

  const Json& s = r.summary;
  EXPECT_EQ(s["schema"], "anvil.rft-summary/1");
  EXPECT_EQ(s["read"], 6);
  EXPECT_EQ(s["kept"], 3);
  EXPECT_EQ(s["no_tokens"], 1);
  EXPECT_EQ(s["dropped"], (Json{{"not_finished", 1}, {"low_reward", 1}, {"hack_suspected", 0}, {"malformed", 0},
                                {"redundant_loop", 0}, {"stalled_compiles", 0}, {"token_seam", 0}, {"duplicate", 1}}));
  EXPECT_EQ(s["dropped_total"], 3);
  EXPECT_EQ(s["dropped_episodes"]["duplicate"],
            Json::array({{{"id", "t/sample-2"}, {"source", run("runs/a/t/sample-2/trajectory.json")}}}));
  EXPECT_EQ(s["dropped_episodes"]["not_finished"][0]["id"], "t/sample-1");
  EXPECT_EQ(s["tokens"], (Json{{"total", 8}, {"model", 2}}));
  EXPECT_EQ(s["options"]["max_repeats"], 2);
  EXPECT_EQ(Json::parse(*read_file(dir_ / "out" / "sft.jsonl.summary.json"))["kept"], 3);
  std::string table = rft_table(s);
  EXPECT_NE(table.find("  kept                        3  (1 chat-mode: messages only, no_tokens)\n"), std::string::npos)
      << table;
  EXPECT_NE(table.find("    duplicate                 1\n"), std::string::npos) << table;
}

TEST_F(Rft, TheOutputIsTheSameWhateverTheThreads) {
  for (int i = 0; i < 40; ++i) {
    put("runs/a/t" + std::to_string(i) + "/sample-0/trajectory.json", kept("t/" + std::to_string(i), {i, i + 1}));
  }
  ASSERT_EQ(rft({run("runs/a")}, 1).status, 0);
  std::string one = *read_file(dir_ / "out" / "sft.jsonl");
  ASSERT_EQ(rft({run("runs/a")}, 7).status, 0);
  EXPECT_EQ(*read_file(dir_ / "out" / "sft.jsonl"), one);
  EXPECT_EQ(lines().size(), 40u);
}

TEST_F(Rft, AFileGivenTwiceIsReadOnce) {
  put("runs/a/t/sample-0/trajectory.json", kept("t/sample-0"));
  RftResult r = rft({run("runs/a"), run("runs/a/t/sample-0/trajectory.json")});
  ASSERT_EQ(r.status, 0) << r.error;
  EXPECT_EQ(r.summary["read"], 1);
  EXPECT_EQ(r.summary["dropped"]["duplicate"], 0);
}

// A bad input stops the run with its message, and nothing is written: the previous output stays.
TEST_F(Rft, ABadInputIsNamedAndNothingIsWritten) {
  put_text("out/sft.jsonl", "the previous output\n");
  put("runs/a/t/sample-0/trajectory.json", kept("t/sample-0"));
  Json old = kept("t/sample-1");
  old["schema"] = "anvil.trajectory/0";
  put("runs/a/t/sample-1/trajectory.json", old);
  std::string bad = run("runs/a/t/sample-1/trajectory.json");
  RftResult r = rft({run("runs/a")});
  EXPECT_EQ(r.status, 1);
  EXPECT_EQ(r.error, bad + ": schema \"anvil.trajectory/0\" is not anvil.trajectory/1");
  EXPECT_EQ(*read_file(dir_ / "out" / "sft.jsonl"), "the previous output\n");
  EXPECT_EQ(list_files(dir_ / "out"), (std::vector<fs::path>{"sft.jsonl"}));  // no summary, no temporary file

  put_text("runs/a/t/sample-1/trajectory.json", "{\"schema\": ");
  r = rft({run("runs/a")});
  EXPECT_EQ(r.status, 1);
  EXPECT_EQ(r.error, bad + ": not JSON (unexpected end of input at byte 11)");
  Json lacking = kept("t/sample-1");
  lacking.erase("turns");
  put("runs/a/t/sample-1/trajectory.json", lacking);
  EXPECT_EQ(rft({run("runs/a")}).error, bad + ": field \"turns\" is missing");
  EXPECT_EQ(*read_file(dir_ / "out" / "sft.jsonl"), "the previous output\n");
}

TEST_F(Rft, SkipBadCountsTheFileAndGoesOn) {
  put("runs/a/t/sample-0/trajectory.json", kept("t/sample-0"));
  put_text("runs/a/t/sample-1/trajectory.json", "[]");
  RftResult r = rft({run("runs/a")}, 2, /*skip_bad=*/true);
  ASSERT_EQ(r.status, 0) << r.error;
  EXPECT_EQ(r.summary["read"], 2);
  EXPECT_EQ(r.summary["kept"], 1);
  EXPECT_EQ(r.summary["unreadable"], 1);
  EXPECT_EQ(r.summary["unreadable_files"],
            Json::array({{{"source", run("runs/a/t/sample-1/trajectory.json")}, {"error", "not a JSON object"}}}));
  EXPECT_EQ(lines().size(), 1u);
}

TEST_F(Rft, InputsThatNameNoEpisode) {
  RftResult r = rft({run("missing")});
  EXPECT_EQ(r.status, 2);
  EXPECT_EQ(r.error, run("missing") + " does not exist");
  fs::create_directories(dir_ / "empty" / "t");
  r = rft({run("empty")});
  EXPECT_EQ(r.status, 1);
  EXPECT_EQ(r.error, run("empty") + ": no trajectory.json under it (not a run directory of `anvil agent --out`?)");
  EXPECT_EQ(rft({}).status, 2);
  EXPECT_FALSE(fs::exists(dir_ / "out" / "sft.jsonl"));
}

// Every episode dropped is still a written (empty) set: exit 0.
TEST_F(Rft, AllDroppedStillWritesTheSet) {
  Json r0 = kept("t/sample-0");
  r0["reward"] = -1;
  put("runs/a/t/sample-0/trajectory.json", r0);
  RftResult r = rft({run("runs/a")});
  ASSERT_EQ(r.status, 0) << r.error;
  EXPECT_EQ(r.summary["kept"], 0);
  EXPECT_EQ(*read_file(dir_ / "out" / "sft.jsonl"), "");
}

}  // namespace
}  // namespace anvil
