// The filter over small hand-written records: the keep path, every drop reason, their order, the
// error line of a failed compile or verify, and the fields rft names when a record lacks them.
#include "anvil/train/episode_filter.h"

#include <gtest/gtest.h>

#include "support/test_records.h"

namespace anvil {
namespace {

using Json = nlohmann::json;
using test_records::Call;
using test_records::add_tokens;
using test_records::add_turn;

const std::string kCompileError =
    "compile failed (compile_error):\nkernels/k.cpp: In function 'void f()':\nkernels/k.cpp:3:5: error: 'x' was not "
    "declared in this scope\n    3 |     x = 1;\n";

Call compile_failing(const std::string& answer = kCompileError) { return {"compile", Json::object(), answer, false}; }
Call compiled() { return {"compile", Json::object(), "compiled: 2 units (2 compiled, the rest cached)"}; }
Call verify(const std::string& outcome, const std::string& answer = "") {
  return {"verify", Json::object(), answer.empty() ? "CORRECT: passed 5 of 5 checks" : answer, true,
          {{"outcome", outcome}, {"reward", outcome == "ok" ? 1 : -1}}};
}
Call edit(const std::string& text) { return {"edit_file", {{"path", "kernels/k.cpp"}, {"old", "x"}, {"new", text}}}; }

// Reads, writes, compiles, verifies, finishes: kept.
Json good_record() {
  Json r = test_records::record();
  add_turn(r, {{"read_file", {{"path", "model.py"}}, "class Model..."}}, "I will read the reference first.");
  add_turn(r, {{"write_file", {{"path", "kernels/k.cpp"}, {"content", "int f();"}}}});
  add_turn(r, {compiled()});
  add_turn(r, {verify("ok")});
  add_turn(r, {{"finish", {{"summary", "fused"}}}});
  return r;
}

std::string reason(const Json& r, FilterOptions o = {}) {
  EXPECT_EQ(check_record(r), "");
  return drop_reason(r, o);
}

TEST(EpisodeFilter, ARewardedCleanEpisodeIsKept) {
  Json r = good_record();
  EXPECT_EQ(reason(r), "");
  EXPECT_EQ(episode_calls(r).size(), 5u);
  EXPECT_EQ(episode_calls(r)[0].answer, "class Model...");
  EXPECT_EQ(episode_calls(r)[0].arguments, "{\"path\":\"model.py\"}");
  EXPECT_EQ(longest_repeat(episode_calls(r)), 1);
  EXPECT_EQ(longest_stall(episode_calls(r)), 0);
}

TEST(EpisodeFilter, AnEpisodeNotFinishedOrNotRewardedIsDropped) {
  Json r = good_record();
  r["status"] = "running";
  EXPECT_EQ(reason(r), "not_finished");
  r["status"] = "interrupted";
  EXPECT_EQ(reason(r), "not_finished");
  r = good_record();
  r["reward"] = -1;
  EXPECT_EQ(reason(r), "low_reward");
  r["reward"] = nullptr;  // finished without a judgement (a run that does not evaluate)
  EXPECT_EQ(reason(r), "low_reward");
  r["reward"] = 1;
  EXPECT_EQ(reason(r), "");
  FilterOptions o;
  o.min_reward = 2;
  EXPECT_EQ(reason(r, o), "low_reward");
  r["reward"] = 2;
  EXPECT_EQ(reason(r, o), "");
}

TEST(EpisodeFilter, ASuspectedHackInTheFinalEvaluationOrAnyToolCallIsDropped) {
  Json r = good_record();
  r["evaluation"]["outcome"] = "hack_suspected";
  EXPECT_EQ(reason(r), "hack_suspected");
  r = good_record();
  add_turn(r, {verify("hack_suspected", "FAILED: hack_suspected (reward -1)\nthe output aliases an input\n")});
  add_turn(r, {verify("ok")});  // it then behaved: the episode still tried
  EXPECT_EQ(reason(r), "hack_suspected");
  r = good_record();
  add_turn(r, {{"profile", Json::object(), "FAILED: hack_suspected", true, {{"outcome", "hack_suspected"}}}});
  EXPECT_EQ(reason(r), "hack_suspected");
  // tune: one row of its table suspected (its detail's outcome says so, as ToolBox::tune writes it).
  r = good_record();
  add_turn(r, {{"tune", {{"configs", {0, 1}}}, "config ... hack_suspected ...", true,
                {{"outcome", "hack_suspected"},
                 {"rows", {{{"config", 0}, {"outcome", "ok"}}, {{"config", 1}, {"outcome", "hack_suspected"}}}}}}});
  EXPECT_EQ(reason(r), "hack_suspected");
}

TEST(EpisodeFilter, AnyMalformedCallIsDropped) {
  Json r = good_record();
  r["counters"]["malformed_total"] = 1;
  EXPECT_EQ(reason(r), "malformed");
  r = good_record();
  r["turns"][1]["malformed"].push_back({{"kind", "raw_markup"}, {"marker", "<tool_call>"}});
  EXPECT_EQ(reason(r), "malformed");
}

TEST(EpisodeFilter, AThirdIdenticalCallInARowIsARedundantLoop) {
  Json r = good_record();
  Call read = {"read_file", {{"path", "model.py"}, {"limit", 10}}};
  add_turn(r, {read, read});
  EXPECT_EQ(reason(r), "");  // twice is allowed
  // The same arguments in another key order and spacing are the same call.
  add_turn(r, {{"read_file", Json("{\"limit\": 10,  \"path\": \"model.py\"}")}});
  EXPECT_EQ(longest_repeat(episode_calls(r)), 3);
  EXPECT_EQ(reason(r), "redundant_loop");
  FilterOptions o;
  o.max_repeats = 3;
  EXPECT_EQ(reason(r, o), "");
  // Another call between them breaks the run; other arguments are another call.
  r = good_record();
  add_turn(r, {read, read, {"bash", {{"command", "ls"}}}, read});
  add_turn(r, {read, {"read_file", {{"path", "model.py"}, {"limit", 11}}}});
  EXPECT_EQ(longest_repeat(episode_calls(r)), 2);
  EXPECT_EQ(reason(r), "");
}

TEST(EpisodeFilter, TheErrorLineOfAFailedCompileOrVerify) {
  Json r = test_records::record();
  add_turn(r, {compile_failing(), compiled(),
               verify("compile_error", "FAILED: compile_error (reward -1)\nkernels/k.cpp:3:5: error: 'x' was not "
                                       "declared in this scope\n"),
               verify("wrong_answer", "FAILED: wrong_answer (reward -1)\n\noutput 0 differs: max abs diff 0.5\n"),
               verify("timeout", "FAILED: timeout (reward -1)\n"), verify("ok"),
               {"verify", Json::object(), "error: the harness could not evaluate the workdir: no GPU", false},
               {"bash", {{"command", "make"}}, "error: nothing", false}});
  std::vector<EpisodeCall> calls = episode_calls(r);
  ASSERT_EQ(calls.size(), 8u);
  EXPECT_EQ(failure_line(calls[0]), "kernels/k.cpp:3:5: error: 'x' was not declared in this scope");
  EXPECT_EQ(failure_line(calls[1]), "");
  EXPECT_EQ(failure_line(calls[2]), failure_line(calls[0]));  // verify's compile_error: the same line
  EXPECT_EQ(failure_line(calls[3]), "output 0 differs: max abs diff 0.5");
  EXPECT_EQ(failure_line(calls[4]), "FAILED: timeout (reward -1)");
  EXPECT_EQ(failure_line(calls[5]), "");
  EXPECT_EQ(failure_line(calls[6]), "");  // nothing was judged
  EXPECT_EQ(failure_line(calls[7]), "");  // not a judging tool
}

TEST(EpisodeFilter, TheSameCompileErrorMoreThanThreeTimesInARowIsAStall) {
  Json r = good_record();
  for (int i = 0; i < 3; ++i) add_turn(r, {edit("y" + std::to_string(i)), compile_failing()});
  EXPECT_EQ(longest_stall(episode_calls(r)), 3);
  EXPECT_EQ(reason(r), "");  // three are allowed
  add_turn(r, {edit("z"), compile_failing()});
  EXPECT_EQ(longest_stall(episode_calls(r)), 4);
  EXPECT_EQ(reason(r), "stalled_compiles");
  FilterOptions o;
  o.max_stalled_compiles = 4;
  EXPECT_EQ(reason(r, o), "");
}

TEST(EpisodeFilter, ProgressOrAnotherErrorEndsAStall) {
  std::string other = "compile failed (compile_error):\nkernels/k.cpp:4:1: error: expected ';'\n";
  Json r = good_record();
  add_turn(r, {edit("a"), compile_failing(), edit("b"), compile_failing(), edit("c"), compile_failing(other), edit("d"),
               compile_failing()});
  EXPECT_EQ(longest_stall(episode_calls(r)), 2);
  r = good_record();
  add_turn(r, {edit("a"), compile_failing(), edit("b"), compile_failing(), edit("c"), compiled(), edit("d"),
               compile_failing(), edit("e"), compile_failing()});
  EXPECT_EQ(longest_stall(episode_calls(r)), 2);
  EXPECT_EQ(reason(r), "");
  // compile and verify answering one error are one stall.
  r = good_record();
  Call v = verify("compile_error", "FAILED: compile_error (reward -1)\nkernels/k.cpp:3:5: error: 'x' was not declared "
                                   "in this scope\n");
  add_turn(r, {compile_failing(), v, compile_failing(), v});
  EXPECT_EQ(reason(r), "stalled_compiles");
}

TEST(EpisodeFilter, ATokenLevelRecordWhoseTurnsDoNotContinueIsASeam) {
  Json r = test_records::token_record();
  add_turn(r, {{"read_file", {{"path", "model.py"}}}});
  add_tokens(r, {1, 2, 3}, {10, 11}, "opening");
  add_turn(r, {{"finish", Json::object()}});
  add_tokens(r, {4}, {12}, "tool");
  EXPECT_EQ(seam_error(r), "");
  EXPECT_EQ(reason(r), "");
  add_tokens(r, {4}, {12}, "tool", 4);  // re-rendered: the prompt keeps 4 of the 5 ids before it
  EXPECT_EQ(seam_error(r),
            "turns[1].prompt_token_ids.prefix is 4, not 5 (the length of the previous turn's prompt and sampled ids)");
  EXPECT_EQ(reason(r), "token_seam");
  // A chat-mode record's token ids (re-rendered every turn) are not a sequence: never a seam.
  r.erase("token_level");
  EXPECT_EQ(reason(r), "");
}

TEST(EpisodeFilter, TheFirstReasonInOrderIsTheOneCounted) {
  Json r = good_record();
  Call read = {"read_file", {{"path", "model.py"}}};
  add_turn(r, {read, read, read});
  for (int i = 0; i < 4; ++i) add_turn(r, {compile_failing()});
  EXPECT_EQ(reason(r), "redundant_loop");
  r["counters"]["malformed_total"] = 2;
  EXPECT_EQ(reason(r), "malformed");
  add_turn(r, {verify("hack_suspected")});
  EXPECT_EQ(reason(r), "hack_suspected");
  r["reward"] = -1;
  EXPECT_EQ(reason(r), "low_reward");
  r["status"] = "running";
  EXPECT_EQ(reason(r), "not_finished");
  EXPECT_EQ(drop_reasons(), (std::vector<std::string>{"not_finished", "low_reward", "hack_suspected", "malformed",
                                                      "redundant_loop", "stalled_compiles", "token_seam", "duplicate"}));
}

TEST(EpisodeFilter, ARecordRftCannotReadNamesTheField) {
  Json r = good_record();
  EXPECT_EQ(check_record(r), "");
  r["schema"] = "anvil.trajectory/0";
  EXPECT_EQ(check_record(r), "schema \"anvil.trajectory/0\" is not anvil.trajectory/1");
  r.erase("schema");
  EXPECT_EQ(check_record(r), "field \"schema\" is missing (not an anvil.trajectory/1 record)");
  EXPECT_EQ(check_record(Json::array()), "not a JSON object");
  r = good_record();
  r["reward"] = "2";
  EXPECT_EQ(check_record(r), "field \"reward\" is a string, not an integer or null");
  r = good_record();
  r["task"].erase("hash");
  EXPECT_EQ(check_record(r), "field \"task.hash\" is missing");
  r = good_record();
  r["turns"][2]["message_index"] = 3;  // a tool message
  EXPECT_EQ(check_record(r), "field \"turns[2].message_index\" is 3, not the index of an assistant message");
  r = good_record();
  r["turns"][1]["tool_calls"][0].erase("name");
  EXPECT_EQ(check_record(r), "field \"turns[1].tool_calls[0].name\" is missing");
  r = test_records::token_record();
  add_turn(r, {{"finish", Json::object()}});
  add_tokens(r, {1}, {2}, "opening");
  EXPECT_EQ(check_record(r), "");
  r["turns"][0].erase("token_ids");
  EXPECT_EQ(check_record(r), "field \"turns[0].token_ids\" is missing");
  r["turns"][0]["token_ids"] = {1, "2"};
  EXPECT_EQ(check_record(r), "field \"turns[0].token_ids\" is an array with a string at [1], not an array of integers");
  r["turns"][0]["token_ids"] = {1};
  r["turns"][0]["prompt_token_ids"].erase("prefix");
  EXPECT_EQ(check_record(r), "field \"turns[0].prompt_token_ids.prefix\" is missing");
}

TEST(EpisodeFilter, TheOutputsHashIsTheModelsWordsForItsTask) {
  Json a = good_record(), b = good_record();
  // Other call ids, the same words: the same outputs.
  b["messages"][2]["tool_calls"][0]["id"] = "chatcmpl-tool-9f";
  EXPECT_EQ(outputs_hash(a), outputs_hash(b));
  b["messages"][2]["content"] = "I will read it.";
  EXPECT_NE(outputs_hash(a), outputs_hash(b));
  b = good_record();
  b["task"]["hash"] = std::string(64, 'c');  // the same words for another task are another example
  EXPECT_NE(outputs_hash(a), outputs_hash(b));
  Json t = test_records::token_record(), u = test_records::token_record("t/sample-1");
  for (Json* r : {&t, &u}) {
    add_turn(*r, {{"finish", Json::object()}});
    add_tokens(*r, {1, 2}, {7, 8}, "opening");
  }
  EXPECT_EQ(outputs_hash(t), outputs_hash(u));
  add_tokens(u, {1, 2}, {7, 9}, "opening");
  EXPECT_NE(outputs_hash(t), outputs_hash(u));
}

}  // namespace
}  // namespace anvil
