// episode.cpp: the ReAct loop, its budgets, malformed-call handling, context
// shortening, and the final independent evaluation.
//
// Implementation notes:
// - The record's "messages" are the full history exactly as produced (the
//   model's messages as returned, every tool result whole). What was cut to
//   fit the context lives beside it ("context.shortened": message index ->
//   the text sent instead), so a trainer can rebuild exactly what the model
//   saw at each turn.
// - A turn is saved only when complete (the model's message and the answers
//   to all its calls). A crash in the middle loses that turn from the record;
//   its tool calls may already have changed the workdir, which a resume keeps.
// - The context budget uses the server's own count (usage.prompt_tokens of
//   the last turn plus its completion) and ~3.5 characters per token for
//   what was added since.
#include "anvil/agent/episode.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <functional>

#include "anvil/agent/token_turns.h"
#include "anvil/util/hash.h"
#include "anvil/agent/trajectory.h"
#include "anvil/env/confine.h"
#include "anvil/env/reward.h"
#include "anvil/env/task.h"
#include "anvil/env/workdir.h"
#include "anvil/util/fs.h"
#include "anvil/util/json_reader.h"
#include "anvil/util/json_text.h"
#include "anvil/util/strings.h"

namespace anvil {

namespace {

using Json = nlohmann::json;
using Clock = std::chrono::steady_clock;

double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

std::string task_message(const Task& task, const std::filesystem::path& workdir) {
  return "Your task: optimize the PyTorch model in model.py.\n\n"
         "Write CUDA kernels in kernels/ and a ModelNew in model_new.py that computes the same outputs as Model, "
         "correctly, and " + more_than_faster() + " than both torch.compile and eager PyTorch. Your workdir is " +
         workdir.string() + " (task " + task.name +
         "). model.py (read-only) is:\n\n```python\n" + task.code + (ends_with(task.code, "\n") ? "" : "\n") +
         "```\n\nStart with profile_reference, to see where the reference's time goes and the times to beat (where it "
         "is not among your tools, count model.py's bytes and FLOPs), then plan with todo_write. Call finish when your "
         "best version is in place.";
}

size_t content_chars(const Json& m) {
  size_t n = 0;
  if (m.contains("content") && m["content"].is_string()) n += m["content"].get_ref<const std::string&>().size();
  if (m.contains("tool_calls")) n += json_text(m["tool_calls"]).size();
  return n;
}

// Parses one tool call of the model's message. On success fills name/args;
// else returns the error kind and fills *why for the model.
std::string parse_call(const Json& tc, const ToolBox& tools, bool cut_by_length, std::string* name, Json* args,
                       std::string* why) {
  if (!tc.is_object() || !tc.contains("function") || !tc["function"].is_object()) {
    *why = "a tool call without a function object";
    return "bad_call";
  }
  const Json& f = tc["function"];
  *name = f.value("name", std::string());
  if (name->empty()) {
    *why = "a tool call without a function name";
    return "bad_call";
  }
  if (!tools.has(*name)) {
    *why = "there is no tool named '" + *name + "'; the tools are: " + join(tools.names(), ", ");
    return "unknown_tool";
  }
  const Json& a = f.contains("arguments") ? f["arguments"] : Json("{}");
  if (a.is_object()) {  // some servers send the object itself
    *args = a;
    return "";
  }
  if (!a.is_string()) {
    *why = "the arguments must be a JSON object encoded as a string";
    return "bad_json";
  }
  std::string text = a.get<std::string>();
  if (trim(text).empty()) text = "{}";
  std::string err;  // the bounded reader: nesting past its limit is refused before anything recurses
  if (std::optional<Json> parsed = read_json(text, &err)) {
    *args = std::move(*parsed);
  } else {
    std::string excerpt = text.size() > 200 ? text.substr(0, 200) + "..." : text;
    *why = "the arguments of " + *name + " are not valid JSON (" + err + "): " + excerpt;
    if (cut_by_length) {
      *why += "\nYour reply was cut at the token limit (finish_reason: length) in the middle of this call, so "
              "nothing was run. Make the call shorter (for a large file: write it in parts, then edit_file).";
    }
    return cut_by_length ? "truncated_call" : "bad_json";
  }
  if (!args->is_object()) {
    *why = "the arguments of " + *name + " must be a JSON object, not " + args->type_name();
    return "bad_arguments";
  }
  return "";
}

// Counts (into counters.malformed) one malformed call or turn.
void count_malformed(Json& record, const std::string& kind) {
  Json& m = record["counters"]["malformed"];
  m[kind] = m.value(kind, 0) + 1;
  record["counters"]["malformed_total"] = record["counters"].value("malformed_total", 0) + 1;
}

std::vector<int64_t> ids_of(const Json& j) {
  std::vector<int64_t> out;
  if (j.is_array()) {
    for (const auto& v : j) {
      if (v.is_number_integer()) out.push_back(v.get<int64_t>());
    }
  }
  return out;
}

// The full token sequence (prompt + completion) of the last turn that recorded
// token ids, rebuilt from the record's deltas (for a resumed episode).
std::vector<int64_t> last_sequence(const Json& record) {
  std::vector<int64_t> seq;
  for (const auto& t : record["turns"]) {
    if (!t.contains("prompt_token_ids")) continue;
    std::vector<int64_t> prompt = expand_prompt_ids(seq, t["prompt_token_ids"]);
    seq = prompt;
    for (auto id : ids_of(t.value("token_ids", Json()))) seq.push_back(id);
  }
  return seq;
}

// The sandboxed shell runs as the episode's own user (when anvil is root: env/confine.h
// give_to_episode): the workdir becomes its, so it can edit what it was given; the protected files
// stay anvil's (read-only to it anyway).
void give_workdir_to_jail(const Environment& env, const std::filesystem::path& workdir) {
  std::string err;
  const JailConfig* config = sandbox_config(env, &err);
  if (!config) return;  // the tools say why when they run
  give_to_episode(*config, workdir);
  for (const auto& f : FileTools().protected_files) {
    if (::geteuid() == 0) ::lchown((workdir / f).c_str(), ::geteuid(), ::getegid());
  }
}

}  // namespace

std::optional<std::string> skill_for_protocol(const std::string& text, const std::string& protocol, std::string* err) {
  static constexpr std::string_view kOpen = "<!-- protocol: ", kClose = " -->", kEnd = "<!-- end protocol -->";
  std::string out;
  std::optional<std::string> inside;  // the open block's protocol
  int line_no = 0;
  for (const std::string& line : split_lines(text)) {
    ++line_no;
    std::string t = trim(line);
    if (starts_with(t, kOpen) && ends_with(t, kClose)) {
      if (inside) {
        *err = "line " + std::to_string(line_no) + ": a protocol block inside the block for '" + *inside + "'";
        return std::nullopt;
      }
      inside = t.substr(kOpen.size(), t.size() - kOpen.size() - kClose.size());
      continue;
    }
    if (t == kEnd) {
      if (!inside) {
        *err = "line " + std::to_string(line_no) + ": '" + std::string(kEnd) + "' without a block to end";
        return std::nullopt;
      }
      inside.reset();
      continue;
    }
    if (!inside || *inside == protocol) out += line + "\n";
  }
  if (inside) {
    *err = "the block for protocol '" + *inside + "' is never ended ('" + std::string(kEnd) + "')";
    return std::nullopt;
  }
  return out;
}

std::string find_raw_tool_markup(const std::string& content) {
  static const char* kMarkers[] = {"<tool_call>", "</tool_call>", "<function=", "<|python_tag|>", "[TOOL_CALLS]",
                                   "<|tool_call|>", "<tool_code>", "```tool_call", "<|tool_calls_section_begin|>",
                                   "<｜tool▁calls▁begin｜>", "<|start|>assistant<|channel|>commentary to="};
  for (const char* m : kMarkers) {
    if (content.find(m) != std::string::npos) return m;
  }
  // A bare JSON call: {"name": "bash", "arguments": {...}}
  size_t n = content.find("\"name\"");
  if (n != std::string::npos && (content.find("\"arguments\"", n) != std::string::npos ||
                                 content.find("\"parameters\"", n) != std::string::npos)) {
    return "a JSON object with \"name\" and \"arguments\"";
  }
  return "";
}

size_t shorten_context(Json& record, int level, int keep_turns) {
  Json& msgs = record["messages"];
  if (!record.contains("context") || !record["context"].is_object()) record["context"] = Json::object();
  Json& shortened = record["context"]["shortened"];
  if (!shortened.is_object()) shortened = Json::object();
  // The first message of the last keep_turns assistant turns: everything from it on stays whole.
  size_t protect_from = msgs.size();
  int seen = 0;
  for (size_t i = msgs.size(); i-- > 2;) {
    if (msgs[i].value("role", std::string()) == "assistant" && ++seen >= keep_turns) {
      protect_from = i;
      break;
    }
  }
  if (seen < keep_turns) protect_from = 2;  // too few turns: nothing old enough... except by level 3
  size_t limit = level <= 1 ? 2000 : 300;
  size_t removed = 0;
  auto cut = [&](size_t i) {
    std::string key = std::to_string(i);
    std::string text = shortened.contains(key) ? shortened[key].get<std::string>()
                       : msgs[i]["content"].is_string() ? msgs[i]["content"].get<std::string>()
                                                        : std::string();
    if (text.size() <= limit) return;
    size_t head = limit * 2 / 3, tail = limit / 4;
    std::string s = text.substr(0, head) + "\n[... " + std::to_string(text.size() - head - tail) +
                    " characters of this older output were cut by anvil to fit the context ...]\n" +
                    text.substr(text.size() - tail);
    if (s.size() >= text.size()) return;
    removed += text.size() - s.size();
    shortened[key] = s;
  };
  for (size_t i = 2; i < protect_from; ++i) {
    if (msgs[i].value("role", std::string()) == "tool") cut(i);
  }
  if (removed == 0 && level >= 2) {
    for (size_t i = 2; i < protect_from; ++i) {
      if (msgs[i].value("role", std::string()) == "assistant") cut(i);
    }
  }
  if (removed == 0 && level >= 3) {  // the last resort: the recent turns' tool outputs too
    for (size_t i = 2; i < msgs.size(); ++i) {
      if (msgs[i].value("role", std::string()) == "tool") cut(i);
    }
  }
  if (removed > 0) {
    record["context"]["shortened_chars"] = record["context"].value("shortened_chars", 0ul) + removed;
  }
  return removed;
}

std::optional<EpisodeOpening> open_episode(const Environment& env, const Task& task, const std::filesystem::path& workdir,
                                          const std::string& protocol, const std::filesystem::path& skill_path,
                                          std::string* err) {
  std::string signature;
  try {
    Json probe = probe_task(env, task, /*run_forward=*/false);
    if (!probe.value("ok", false)) {
      *err = "task_error: " + probe.value("cause", std::string("the task cannot be imported"));
      return std::nullopt;
    }
    signature = probe["model"].value("init_signature", std::string());
  } catch (const std::exception& e) {
    *err = e.what();
    return std::nullopt;
  }
  std::filesystem::path skill = skill_path.empty() ? env.share() / "agent" / "SKILL.md" : skill_path;
  auto skill_file = read_file(skill);
  if (!skill_file) {
    *err = "cannot read the system prompt " + skill.string();
    return std::nullopt;
  }
  auto skill_text = skill_for_protocol(*skill_file, protocol, err);
  if (!skill_text) {
    *err = "the system prompt " + skill.string() + ": " + *err;
    return std::nullopt;
  }
  if (!create_workdir(env, task, workdir, signature, false, err)) {
    *err = "cannot create the workdir: " + *err;
    return std::nullopt;
  }
  give_workdir_to_jail(env, workdir);
  return EpisodeOpening{*skill_text, task_message(task, workdir)};
}

namespace {

// A new episode's record: the task, the model and its sampling, the limits, the tools, the opening
// messages and zeroed counters.
Json initial_record(const EpisodeOptions& opts, const Task& task, const std::filesystem::path& dir,
                    const std::filesystem::path& workdir, const std::filesystem::path& skill, const Endpoint& ep,
                    const ToolBox& tools, const EpisodeOpening& opening) {
  return {
      {"schema", kTrajectorySchema},
      {"id", opts.id.empty() ? dir.filename().string() : opts.id},
      {"status", "running"},
      {"end_reason", nullptr},
      {"task", {{"spec", task.spec}, {"name", task.name}, {"hash", task.hash}, {"meta", task.meta}}},
      {"model", {{"base_url", ep.base_url}, {"model", ep.model}}},
      {"sampling", opts.sampling.to_json()},
      {"limits",
       {{"max_turns", opts.max_turns},
        {"max_context", opts.max_context},
        {"wall_clock_s", opts.wall_clock.count()},
        {"max_tool_output", opts.tools.max_output}}},
      {"workdir", workdir.string()},
      {"skill", skill.string()},
      {"protocol", opts.tools.eval.protocol},
      {"tool_results_as_user", opts.tool_results_as_user},
      {"token_level", opts.token_level},
      {"tools", tools.schemas()},
      {"messages",
       Json::array({{{"role", "system"}, {"content", opening.system_prompt}},
                    {{"role", "user"}, {"content", opening.task_message}}})},
      {"turns", Json::array()},
      {"context", {{"shortened", Json::object()}, {"shortened_chars", 0}}},
      {"counters",
       {{"turns", 0},
        {"tool_calls", 0},
        {"tool_errors", 0},
        {"malformed", Json::object()},
        {"malformed_total", 0},
        {"context_overflows", 0},
        {"retries", 0},
        {"prompt_tokens", 0},
        {"completion_tokens", 0}}},
      {"state", tools.state()},
      {"started_at", utc_now()},
      {"seconds", 0.0},
      {"resumes", Json::array()},
      {"evaluation", nullptr},
      {"reward", nullptr},
  };
}

// A new episode's workdir made and its first record saved, or why not.
std::optional<Json> begin_record(const Environment& env, const EpisodeOptions& opts, const Task& task,
                                 const std::filesystem::path& dir, const std::filesystem::path& workdir,
                                 const Endpoint& ep, const ToolBox& tools, std::string* err) {
  std::filesystem::path traj_path = dir / "trajectory.json";
  std::error_code ec;
  if (std::filesystem::exists(traj_path, ec)) {
    *err = traj_path.string() + " exists: resume it (--resume) or choose another output directory";
    return std::nullopt;
  }
  std::optional<EpisodeOpening> opening = open_episode(env, task, workdir, opts.tools.eval.protocol, opts.skill, err);
  if (!opening) return std::nullopt;
  std::filesystem::path skill = opts.skill.empty() ? env.share() / "agent" / "SKILL.md" : opts.skill;
  Json record = initial_record(opts, task, dir, workdir, skill, ep, tools, *opening);
  if (!save_trajectory(traj_path, record, err)) return std::nullopt;
  return record;
}

// A result for an episode that was already finished when resumed.
EpisodeResult finished_result(const Json& record) {
  EpisodeResult res;
  res.ran = true;
  res.record = record;
  res.status = "finished";
  res.end_reason = record.value("end_reason", std::string());
  res.reward = record.value("reward", -1);
  return res;
}

// The context's budget: the server's count of the last turn plus what was added since.
struct ContextBudget {
  int shorten_level = 0;
  size_t added_chars = 0;  // characters added since the last usage count
  long last_tokens = 0;    // the server's count of the last turn (prompt + completion)

  explicit ContextBudget(const Json& record) {
    const Json turns = record.value("turns", Json::array());
    if (!turns.is_array() || turns.empty()) return;
    const Json& u = turns.back().value("usage", Json());
    if (u.is_object()) last_tokens = u.value("prompt_tokens", 0L) + u.value("completion_tokens", 0L);
  }

  enum class Room { kEnough, kShortened, kFull };
  // Before asking: whether the next request fits, else the older outputs cut (kShortened: check
  // again) or nothing left to cut (kFull).
  Room make_room(Json& record, const EpisodeOptions& opts) {
    long estimate = last_tokens > 0 ? last_tokens + static_cast<long>(added_chars / 3.5)
                                    : static_cast<long>(json_text(request_messages(record, opts.tool_results_as_user)).size() / 3.5);
    long reserve = opts.sampling.max_tokens.value_or(4096);
    if (estimate + reserve <= opts.max_context) return Room::kEnough;
    size_t cut = shorten_context(record, std::max(1, ++shorten_level));
    if (cut == 0) return Room::kFull;
    last_tokens = std::max(0L, estimate - static_cast<long>(cut / 3.5));
    added_chars = 0;
    if (last_tokens + reserve > opts.max_context && shorten_level >= 3) return Room::kFull;
    return Room::kShortened;
  }

  // The server said the request was too long: cut more. False when nothing is left to cut.
  bool overflowed(Json& record) {
    record["counters"]["context_overflows"] = record["counters"].value("context_overflows", 0) + 1;
    size_t cut = shorten_context(record, std::min(3, ++shorten_level));
    if (cut == 0 && shorten_level >= 3) return false;
    last_tokens = 0;  // unknown now: estimate from the characters
    added_chars = 0;
    return true;
  }

  void counted(const Json& usage) {
    if (usage.is_object()) {
      last_tokens = usage.value("prompt_tokens", 0L) + usage.value("completion_tokens", 0L);
      added_chars = 0;
    } else {
      last_tokens = 0;
    }
  }
};

// A turn's record from the model's answer, started_at the UTC time its request was sent;
// `sequence` (the token ids so far) moves on by it.
Json new_turn(const ChatResponse& r, int turn_index, const std::string& started_at, std::vector<int64_t>& sequence) {
  Json turn = {{"index", turn_index},
               {"started_at", started_at},
               {"finish_reason", r.finish_reason},
               {"usage", r.usage},
               {"attempts", r.attempts},
               {"retry_log", r.retry_log},
               {"tool_calls", Json::array()},
               {"malformed", Json::array()}};
  if (!r.token_ids.is_null()) turn["token_ids"] = r.token_ids;
  if (!r.prompt_token_ids.is_null()) {
    std::vector<int64_t> prompt = ids_of(r.prompt_token_ids);
    turn["prompt_token_ids"] = delta_prompt_ids(sequence, prompt);
    sequence = prompt;
    for (auto id : ids_of(r.token_ids)) sequence.push_back(id);
  }
  if (!r.logprobs.is_null()) turn["logprobs"] = r.logprobs;
  return turn;
}

// A message without tool calls: what to tell the model (raw tool markup in its text, or a reply
// cut at the token limit), or "" when the episode ends there.
std::string nudge_for(const std::string& content, bool cut_by_length, Json& record, Json& turn) {
  std::string marker = find_raw_tool_markup(content);
  if (!marker.empty()) {
    count_malformed(record, "raw_markup");
    turn["malformed"].push_back({{"kind", "raw_markup"}, {"marker", marker}});
    return "Your message contains tool-call markup in its text (" + marker +
           "), which was not received as a function call, so nothing was run. Call tools through the "
           "function-calling interface, one JSON arguments object per call.";
  }
  if (cut_by_length) {
    return "Your reply was cut at the token limit (finish_reason: length). Continue, and keep replies shorter.";
  }
  return "";
}

struct CallsAnswered {
  double tool_seconds = 0;
  bool finished = false;
  size_t chars = 0;  // of the answers
};

// Every tool call of the model's message (record["messages"][msg_index]) answered, in order: a
// malformed one with its error, the others run.
CallsAnswered answer_calls(const Json& calls, size_t msg_index, int turn_index, bool cut_by_length, ToolBox& tools,
                           Json& record, Json& turn) {
  CallsAnswered done;
  for (size_t i = 0; i < calls.size(); ++i) {
    const Json& tc = calls[i];
    std::string id = tc.is_object() && tc.contains("id") && tc["id"].is_string() ? tc["id"].get<std::string>() : "";
    if (id.empty()) {  // answer it anyway: an id of our own, recorded in the message
      id = "anvil_" + std::to_string(turn_index) + "_" + std::to_string(i);
      record["messages"][msg_index]["tool_calls"][i]["id"] = id;
    }
    std::string name, why;
    Json args;
    std::string kind = parse_call(tc, tools, cut_by_length, &name, &args, &why);
    Json call_rec = {{"id", id}, {"name", name}};
    std::string answer;
    if (!kind.empty()) {
      count_malformed(record, kind);
      turn["malformed"].push_back({{"kind", kind}, {"id", id}, {"name", name}});
      call_rec["ok"] = false;
      call_rec["error_kind"] = kind;
      answer = "error: " + why;
    } else {
      ToolOutcome o = tools.call(name, args);
      done.tool_seconds += o.seconds;
      call_rec["ok"] = !o.error;
      call_rec["seconds"] = o.seconds;
      if (o.error) {
        call_rec["error_kind"] = o.error_kind;
        record["counters"]["tool_errors"] = record["counters"].value("tool_errors", 0) + 1;
        if (o.error_kind == "bad_arguments") {
          count_malformed(record, "bad_arguments");
          turn["malformed"].push_back({{"kind", "bad_arguments"}, {"id", id}, {"name", name}});
        }
      }
      if (!o.detail.is_null()) call_rec["detail"] = o.detail;
      answer = o.text;
      if (o.finish) {
        done.finished = true;
        record["finish_summary"] = args.value("summary", std::string());
      }
    }
    call_rec["output_chars"] = answer.size();
    record["counters"]["tool_calls"] = record["counters"].value("tool_calls", 0) + 1;
    turn["tool_calls"].push_back(call_rec);
    record["messages"].push_back({{"role", "tool"}, {"tool_call_id", id}, {"name", name}, {"content", answer}});
    done.chars += answer.size();
  }
  return done;
}

// When a turn's request was sent: the clock its seconds are measured from and the UTC time recorded.
struct TurnStart {
  Clock::time_point clock;
  std::string utc;
};

// One turn from the model's answer: its message recorded, its tool calls answered (or the model
// nudged), the turn appended. Returns why the episode ends there ("finish", "no_tool_calls"), or "".
std::string play_turn(const ChatResponse& r, int turn_index, const TurnStart& start, ToolBox& tools, Json& record,
                      ContextBudget& budget, std::vector<int64_t>& sequence) {
  Json msg = r.message.is_object() ? r.message : Json::object();
  msg["role"] = "assistant";
  if (!msg.contains("content")) msg["content"] = nullptr;
  Json turn = new_turn(r, turn_index, start.utc, sequence);
  if (r.usage.is_object()) {
    record["counters"]["prompt_tokens"] = record["counters"].value("prompt_tokens", 0L) + r.usage.value("prompt_tokens", 0L);
    record["counters"]["completion_tokens"] =
        record["counters"].value("completion_tokens", 0L) + r.usage.value("completion_tokens", 0L);
  }
  budget.counted(r.usage);
  size_t msg_index = record["messages"].size();
  record["messages"].push_back(msg);
  turn["message_index"] = msg_index;
  bool cut_by_length = r.finish_reason == "length";
  if (cut_by_length) record["counters"]["truncated_turns"] = record["counters"].value("truncated_turns", 0) + 1;
  auto append = [&](double tool_seconds) {
    turn["seconds"] = {{"model", r.seconds}, {"tools", tool_seconds}, {"turn", since(start.clock)}};
    record["turns"].push_back(turn);
    record["counters"]["turns"] = record["turns"].size();
  };

  const Json calls = msg.contains("tool_calls") && msg["tool_calls"].is_array() ? msg["tool_calls"] : Json::array();
  if (calls.empty()) {
    std::string content = msg["content"].is_string() ? msg["content"].get<std::string>() : std::string();
    std::string nudge = nudge_for(content, cut_by_length, record, turn);
    if (nudge.empty()) {
      append(0.0);
      return "no_tool_calls";
    }
    record["messages"].push_back({{"role", "user"}, {"content", nudge}});
    budget.added_chars += content_chars(msg) + nudge.size();
  }
  CallsAnswered answered = answer_calls(calls, msg_index, turn_index, cut_by_length, tools, record, turn);
  budget.added_chars += answered.chars + content_chars(msg);
  append(answered.tool_seconds);
  return answered.finished ? "finish" : "";
}

// A token-level turn (EpisodeOptions::token_level): its prompt is the sequence so far followed by
// what the chat template renders after the last model turn (the tool results, a nudge, the next
// generation prompt; the opening messages for the first turn), and its tool calls are parsed from
// the sampled text. The prompt's kind ("opening", "tool", "user") into *kind. A failure is a
// failed ChatResponse naming it; *seam_error is set instead when the template cannot continue the
// sequence token for token (the episode ends: token_seam).
ChatResponse ask_tokens(ModelClient& model, const Json& record, const Json& tools, const EpisodeOptions& opts,
                        const std::vector<int64_t>& sequence, int turn_index, std::string* kind,
                        std::string* seam_error) {
  ChatResponse failed;
  failed.status = ChatResponse::Status::failed;
  Json messages = request_messages(record, opts.tool_results_as_user);
  std::vector<int64_t> prompt;
  if (sequence.empty()) {
    TokenizeResult t = model.tokenize_chat(messages, tools, true);
    if (!t.ok) {
      failed.error = "token-in/token-out needs the server's chat template (POST /tokenize with messages, "
                     "vLLM's): " + t.error;
      return failed;
    }
    prompt = t.tokens;
    *kind = "opening";
  } else {
    size_t last_model = 0;
    for (size_t i = 0; i < messages.size(); ++i) {
      if (messages[i].value("role", std::string()) == "assistant") last_model = i;
    }
    Json opened_messages(messages.begin(), messages.begin() + static_cast<long>(last_model));
    Json closed_messages(messages.begin(), messages.begin() + static_cast<long>(last_model) + 1);
    TokenizeResult opened = model.tokenize_chat(opened_messages, tools, true);
    TokenizeResult closed = opened.ok ? model.tokenize_chat(closed_messages, tools, false) : opened;
    TokenizeResult appended = closed.ok ? model.tokenize_chat(messages, tools, true) : closed;
    if (!appended.ok) {
      failed.error = "tokenizing the conversation for the next turn: " + appended.error;
      return failed;
    }
    auto after = tokens_after_turn(opened.tokens, closed.tokens, appended.tokens, sequence.back(), seam_error);
    if (!after) return failed;
    prompt = sequence;
    prompt.insert(prompt.end(), after->begin(), after->end());
    *kind = messages.back().value("role", std::string()) == "tool" ? "tool" : "user";
  }
  ChatResponse r = model.complete(prompt, opts.sampling);
  if (r.status != ChatResponse::Status::ok) return r;
  r.prompt_token_ids = prompt;
  std::string text = r.message["content"].is_string() ? r.message["content"].get<std::string>() : "";
  ParsedCalls parsed = parse_tool_call_blocks(text, "call_" + std::to_string(turn_index));
  r.message = {{"role", "assistant"}, {"content", parsed.content}};
  if (!parsed.tool_calls.empty()) {
    r.message["tool_calls"] = parsed.tool_calls;
    if (r.finish_reason == "stop") r.finish_reason = "tool_calls";
  }
  return r;
}

// Before a turn: why the episode ends here (max_turns, wall_clock, max_context), "" to ask, or
// "shortened" (older outputs were cut: check again). Token-level turns cannot shorten what the
// model saw: a sequence that with a turn's room passes the budget ends the episode.
std::string before_turn(const EpisodeOptions& opts, int turn_index, double elapsed_s,
                        const std::vector<int64_t>& sequence, ContextBudget& budget, Json& record) {
  if (turn_index >= opts.max_turns) return "max_turns";
  if (elapsed_s >= static_cast<double>(opts.wall_clock.count())) return "wall_clock";
  if (opts.token_level) {
    bool full = !sequence.empty() &&
                static_cast<long>(sequence.size()) + opts.sampling.max_tokens.value_or(4096) > opts.max_context;
    return full ? "max_context" : "";
  }
  ContextBudget::Room room = budget.make_room(record, opts);
  return room == ContextBudget::Room::kFull ? "max_context" : room == ContextBudget::Room::kShortened ? "shortened" : "";
}

// Which chat template and tokenizer make a token-level episode's ids, into record["tokenizer"]: a
// fixed conversation through the server's template, its ids and their hash (a server that changes
// either changes the hash). "" or why the record's (a resumed episode's) is not the server's.
std::string record_tokenizer(ModelClient& model, Json& record) {
  Json probe = Json::array({{{"role", "system"}, {"content", "anvil probe"}},
                            {{"role", "user"}, {"content", "What is 2 + 2?"}},
                            {{"role", "assistant"}, {"content", "4"}},
                            {{"role", "user"}, {"content", "{\"ok\": true} <tag> & \u00e9"}}});
  TokenizeResult t = model.tokenize_chat(probe, Json::array(), true);
  if (!t.ok) return "";  // the first turn says why the server cannot do it
  std::string joined;
  for (auto id : t.tokens) joined += std::to_string(id) + ",";
  std::string sha = sha256_hex(joined);
  if (record.contains("tokenizer") && record["tokenizer"].value("sha256", sha) != sha) {
    return "the server's chat template or tokenizer is not the one the episode's ids were made with (its probe's "
           "ids hash " + sha + ", the record's " + record["tokenizer"].value("sha256", std::string()) + ")";
  }
  record["tokenizer"] = {{"probe", probe}, {"probe_ids", t.tokens}, {"sha256", sha}};
  return "";
}

// The final, independent evaluation of the workdir as it is now, into the record.
void final_evaluation(const Environment& env, const EpisodeOptions& opts, const std::filesystem::path& workdir,
                      Json& record) {
  EvalOptions o = opts.tools.eval;
  o.task = opts.task;
  o.candidate = workdir.string();
  o.measure_time = true;
  int gpu = opts.tools.gpus ? opts.tools.gpus->acquire() : -1;
  Slots::Hold hold{opts.tools.gpus, gpu};
  if (gpu >= 0) o.gpu = gpu;
  auto t_eval = Clock::now();
  EvalResult ev = evaluate(env, o);
  if (ev.evaluated) {
    record["evaluation"] = ev.json;
    record["reward"] = ev.reward;
  } else {
    record["evaluation"] = {{"error", ev.error}};
    record["reward"] = -1;
  }
  record["evaluation_seconds"] = since(t_eval);
}

// The episode's end recorded and saved: interrupted by the model server's error (not the policy's
// doing: kept resumable, not judged), else judged (opts.evaluate) and finished.
EpisodeResult conclude(const Environment& env, const EpisodeOptions& opts, const std::filesystem::path& workdir,
                       const std::string& end_reason, Json& record, const std::function<void()>& save) {
  EpisodeResult res;
  record["end_reason"] = end_reason;
  res.end_reason = end_reason;
  res.ran = true;
  if (end_reason == "model_error") {
    record["status"] = "interrupted";
    save();
    res.status = "interrupted";
    res.record = record;
    res.error = record["model_error"].value("error", std::string());
    return res;
  }
  if (opts.evaluate) final_evaluation(env, opts, workdir, record);
  record["status"] = "finished";
  record["ended_at"] = utc_now();
  save();
  res.status = "finished";
  res.reward = record["reward"].is_number() ? record["reward"].get<int>() : -1;
  res.record = record;
  return res;
}

// The episode's folder, held by this process (a second `anvil agent --resume` of the run skips it).
struct EpisodeLock {
  int fd = -1;
  ~EpisodeLock() {
    if (fd >= 0) close(fd);
  }
  bool take(const std::filesystem::path& dir) {
    fd = open((dir / ".lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    return fd >= 0 && flock(fd, LOCK_EX | LOCK_NB) == 0;
  }
};

// The record of an episode resumed (marked running again), or why it cannot be; opts.task and
// workdir become the record's.
std::optional<Json> resume_record(const std::filesystem::path& traj_path, EpisodeOptions& opts,
                                  std::filesystem::path& workdir, std::string* err) {
  auto loaded = load_trajectory(traj_path, err);
  if (!loaded) {
    *err = "cannot resume: " + *err;
    return std::nullopt;
  }
  Json record = *loaded;
  if (record.value("status", std::string()) == "finished") return record;
  opts.task = record["task"].value("spec", opts.task);
  workdir = record["workdir"].get<std::string>();
  std::error_code ec;
  if (!std::filesystem::is_directory(workdir, ec)) {
    *err = "cannot resume: the episode's workdir " + workdir.string() + " is gone";
    return std::nullopt;
  }
  opts.token_level = record.value("token_level", false);  // the record's turns decide how it goes on
  record["resumes"].push_back({{"at", utc_now()}, {"after_turns", record["turns"].size()}});
  record["status"] = "running";
  return record;
}

}  // namespace

EpisodeResult run_episode(const Environment& env, ModelClient& model, const EpisodeOptions& opts_in) {
  EpisodeOptions opts = opts_in;
  EpisodeResult res;
  std::error_code ec;
  std::filesystem::path dir = std::filesystem::absolute(opts.dir, ec);
  std::filesystem::path traj_path = dir / "trajectory.json";
  std::filesystem::path workdir = dir / "workdir";
  std::string err;
  Json record;

  std::filesystem::create_directories(dir, ec);
  EpisodeLock lock;
  if (!lock.take(dir)) {
    res.error = "another anvil process is running the episode in " + dir.string();
    return res;
  }
  if (opts.resume) {
    auto resumed = resume_record(traj_path, opts, workdir, &err);
    if (!resumed) {
      res.error = err;
      return res;
    }
    if (resumed->value("status", std::string()) == "finished") return finished_result(*resumed);
    record = std::move(*resumed);
  }

  auto task = load_task(env, opts.task, &err);
  if (!task) {
    res.error = "task_error: " + err;
    return res;
  }
  opts.tools.workdir = workdir;
  opts.tools.task = opts.task;
  ToolBox tools(env, opts.tools);

  if (!opts.resume) {
    auto begun = begin_record(env, opts, *task, dir, workdir, model.endpoint(), tools, &err);
    if (!begun) {
      res.error = err;
      return res;
    }
    record = std::move(*begun);
  }
  tools.restore(record.value("state", Json()));

  const double seconds_before = record.value("seconds", 0.0);
  auto t_start = Clock::now();
  auto elapsed = [&] { return seconds_before + since(t_start); };
  // The wall clock holds inside a turn too: no tool call runs past it (tools.h).
  tools.set_deadline(t_start + std::chrono::duration_cast<Clock::duration>(
                                   std::chrono::duration<double>(static_cast<double>(opts.wall_clock.count()) - seconds_before)));
  std::vector<int64_t> sequence = last_sequence(record);
  std::string end_reason;
  ContextBudget budget(record);

  auto save = [&] {
    record["seconds"] = elapsed();
    record["state"] = tools.state();
    std::string e;
    if (!save_trajectory(traj_path, record, &e)) std::fprintf(stderr, "anvil: %s\n", e.c_str());
    if (opts.on_turn) opts.on_turn(record);
  };

  if (opts.token_level) {
    std::string refused = record_tokenizer(model, record);
    if (!refused.empty()) {
      res.error = "cannot resume " + dir.string() + ": " + refused;
      return res;
    }
  }
  while (true) {
    int turn_index = static_cast<int>(record["turns"].size());
    end_reason = before_turn(opts, turn_index, elapsed(), sequence, budget, record);
    if (end_reason == "shortened") continue;
    if (!end_reason.empty()) break;

    const TurnStart t_turn{Clock::now(), utc_now()};  // before the request: the turn's started_at
    std::string prompt_kind, seam_error;
    ChatResponse r = opts.token_level
                         ? ask_tokens(model, record, tools.schemas(), opts, sequence, turn_index, &prompt_kind, &seam_error)
                         : model.chat(request_messages(record, opts.tool_results_as_user), tools.schemas(), opts.sampling);
    if (!seam_error.empty()) {
      end_reason = "token_seam";
      record["token_seam_error"] = seam_error;
      break;
    }
    record["counters"]["retries"] = record["counters"].value("retries", 0) + std::max(0, r.attempts - 1);
    if (r.status == ChatResponse::Status::context_overflow) {
      if (opts.token_level || !budget.overflowed(record)) {
        end_reason = "max_context";
        break;
      }
      save();
      continue;
    }
    if (r.status == ChatResponse::Status::failed) {
      end_reason = "model_error";
      record["model_error"] = {{"error", r.error}, {"http_status", r.http_status}, {"attempts", r.attempts},
                               {"retry_log", r.retry_log}, {"at_turn", turn_index}};
      break;
    }

    std::string ended = play_turn(r, turn_index, t_turn, tools, record, budget, sequence);
    if (opts.token_level) {
      record["turns"].back()["prompt_kind"] = prompt_kind;
      // The sequence goes on only after a turn the model ended itself (its end token sampled).
      if (ended.empty() && r.finish_reason != "stop" && r.finish_reason != "tool_calls") ended = "turn_cut";
    }
    save();
    if (!ended.empty()) {
      end_reason = ended;
      break;
    }
  }

  return conclude(env, opts, workdir, end_reason, record, save);
}

}  // namespace anvil
