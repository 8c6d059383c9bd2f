// rft.cpp: finding the episodes, judging them on threads, writing the kept ones in order.
#include "anvil/train/rft.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <thread>
#include <unordered_set>

#include "anvil/train/sft_example.h"
#include "anvil/util/fs.h"
#include "anvil/util/json_reader.h"
#include "anvil/util/json_text.h"
#include "anvil/util/strings.h"
#include "anvil/util/thread_pool.h"

namespace anvil {

namespace {

using Json = nlohmann::json;

constexpr uint64_t kMaxTrajectoryBytes = 1ull << 30;  // a record larger than 1 GiB is not anvil's
constexpr size_t kFilesPerThread = 8;                 // a batch: parsed at once, then written in order

// One file's verdict.
struct Verdict {
  std::string error;   // why it cannot be used: the file is unreadable
  std::string id;
  std::string reason;  // the drop reason; "" kept (duplicates aside)
  std::string hash;    // kept: the outputs' hash
  SftExample example;  // kept: its line
};

// Every trajectory.json under `dir`; an episode's directory (one that holds one) is not searched further.
void collect(const fs::path& dir, std::vector<fs::path>& out) {
  std::error_code ec;
  fs::path here = dir / "trajectory.json";
  if (fs::exists(here, ec) && !fs::is_directory(here, ec)) {
    out.push_back(here);
    return;
  }
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    if (it->is_directory(ec) && !it->is_symlink(ec)) collect(it->path(), out);
  }
}

// The message of a JSON exception without the library's prefix ("[json.exception.type_error.302] ").
std::string exception_text(const std::string& what) {
  size_t at = what.find("] ");
  return at == std::string::npos ? what : what.substr(at + 2);
}

Verdict judge_file(const fs::path& path, const FilterOptions& opts) {
  Verdict v;
  std::string why;
  std::optional<std::string> text = read_regular(path, kMaxTrajectoryBytes, &why);
  if (!text) {
    v.error = why;
    return v;
  }
  // Of a sampled token's log-probability entry ({"token", "logprob", "token_id"}, most of a large
  // record's objects) rft needs only the number: turns[i].logprobs is read as those numbers.
  static const Pluck kLogprobs{"logprobs", "logprob"};
  std::optional<Json> parsed = read_json(*text, &why, kLogprobs);
  text.reset();
  if (!parsed) {
    v.error = "not JSON (" + why + ")";
    return v;
  }
  const Json& record = *parsed;
  v.error = check_record(record);
  if (!v.error.empty()) return v;
  try {
    v.id = record["id"].get<std::string>();
    v.reason = drop_reason(record, opts);
    if (v.reason.empty()) {
      v.hash = outputs_hash(record);
      v.example = sft_example(record, path.string());
    }
  } catch (const Json::exception& e) {  // a field of another type than anvil writes
    v.error = "a field of an unexpected type (" + exception_text(e.what()) + ")";
  }
  return v;
}

// The counts and lists of the summary, taken in the files' order.
struct Tally {
  size_t read = 0, kept = 0, no_tokens = 0, tokens = 0, model_tokens = 0;
  std::map<std::string, Json> dropped;  // reason -> [{"id", "source"}]
  Json unreadable = Json::array();      // [{"source", "error"}]
  std::unordered_set<std::string> seen;  // the kept episodes' outputs

  Tally() {
    for (const auto& r : drop_reasons()) dropped[r] = Json::array();
  }

  // One file's verdict counted, its line written when kept. False with *err when it is unreadable
  // and not to be skipped.
  bool take(const fs::path& path, Verdict& v, bool skip_bad, AtomicFile& out, std::string* err) {
    ++read;
    if (!v.error.empty()) {
      *err = path.string() + ": " + v.error;
      unreadable.push_back({{"source", path.string()}, {"error", v.error}});
      return skip_bad;
    }
    if (v.reason.empty() && !seen.insert(v.hash).second) v.reason = "duplicate";
    if (!v.reason.empty()) {
      dropped[v.reason].push_back({{"id", v.id}, {"source", path.string()}});
      return true;
    }
    ++kept;
    if (!v.example.has_tokens) ++no_tokens;
    tokens += v.example.tokens;
    model_tokens += v.example.model_tokens;
    out.write(v.example.line);
    out.write("\n");
    return true;
  }
};

Json summary_of(const RftOptions& opts, unsigned jobs, const Tally& t, double seconds) {
  Json counts = Json::object();
  size_t dropped = 0;
  for (const auto& r : drop_reasons()) {
    counts[r] = t.dropped.at(r).size();
    dropped += t.dropped.at(r).size();
  }
  return {{"schema", kRftSummarySchema},
          {"out", opts.out.string()},
          {"inputs", opts.inputs},
          {"options",
           {{"min_reward", opts.filter.min_reward},
            {"max_repeats", opts.filter.max_repeats},
            {"max_stalled_compiles", opts.filter.max_stalled_compiles},
            {"skip_bad", opts.skip_bad},
            {"jobs", jobs}}},
          {"read", t.read},
          {"kept", t.kept},
          {"no_tokens", t.no_tokens},
          {"dropped", counts},
          {"dropped_total", dropped},
          {"unreadable", t.unreadable.size()},
          {"dropped_episodes", t.dropped},
          {"unreadable_files", t.unreadable},
          {"tokens", {{"total", t.tokens}, {"model", t.model_tokens}}},
          {"seconds", seconds},
          {"written_at", utc_now()}};
}

}  // namespace

std::vector<fs::path> trajectory_files(const std::vector<std::string>& inputs, std::string* err, int* status) {
  if (inputs.empty()) {
    *err = "no inputs: name run directories (anvil agent --out) or trajectory files";
    *status = 2;
    return {};
  }
  std::vector<fs::path> found;
  for (const std::string& in : inputs) {
    std::error_code ec;
    fs::file_status st = fs::status(in, ec);
    if (!fs::exists(st)) {
      *err = in + " does not exist";
      *status = 2;
      return {};
    }
    if (!fs::is_directory(st)) {
      found.push_back(in);
      continue;
    }
    size_t before = found.size();
    collect(in, found);
    if (found.size() == before) {
      *err = in + ": no trajectory.json under it (not a run directory of `anvil agent --out`?)";
      *status = 1;
      return {};
    }
  }
  std::sort(found.begin(), found.end());
  std::vector<fs::path> out;
  std::set<fs::path> canonical;
  for (const fs::path& p : found) {
    std::error_code ec;
    fs::path c = fs::weakly_canonical(p, ec);
    if (canonical.insert(ec ? p : c).second) out.push_back(p);
  }
  return out;
}

RftResult run_rft(const RftOptions& opts) {
  RftResult res;
  auto t0 = std::chrono::steady_clock::now();
  std::vector<fs::path> files = trajectory_files(opts.inputs, &res.error, &res.status);
  if (files.empty()) return res;
  unsigned jobs = opts.jobs > 0 ? opts.jobs : std::max(1u, std::thread::hardware_concurrency());
  AtomicFile out(opts.out);
  if (!out.ok()) {
    res.status = 2;
    res.error = out.error();
    return res;
  }
  Tally tally;
  const size_t batch = jobs * kFilesPerThread;
  for (size_t begin = 0; begin < files.size(); begin += batch) {
    size_t end = std::min(files.size(), begin + batch);
    std::vector<Verdict> verdicts(end - begin);
    std::vector<std::function<void()>> work;
    for (size_t i = begin; i < end; ++i) {
      work.push_back([&, i] { verdicts[i - begin] = judge_file(files[i], opts.filter); });
    }
    run_parallel(work, jobs);
    for (size_t i = begin; i < end; ++i) {
      if (!tally.take(files[i], verdicts[i - begin], opts.skip_bad, out, &res.error)) {
        res.status = 1;
        return res;  // nothing is put in place: `out` goes uncommitted
      }
    }
  }
  std::string err;
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  res.summary = summary_of(opts, jobs, tally, seconds);
  fs::path summary_path = opts.out;
  summary_path += ".summary.json";
  if (!out.commit(&err) || !write_file_atomic(summary_path, json_text(res.summary, 1) + "\n", &err)) {
    res.status = 2;
    res.error = err;
    return res;
  }
  res.error.clear();  // a skipped file's message is in the summary
  return res;
}

std::string rft_table(const Json& s) {
  auto line = [](const std::string& label, size_t n, const std::string& note = "") {
    char buf[160];
    std::snprintf(buf, sizeof buf, "  %-20s %8zu%s\n", label.c_str(), n, note.c_str());
    return std::string(buf);
  };
  size_t no_tokens = s["no_tokens"].get<size_t>();
  std::string out = "anvil rft: " + std::to_string(s["read"].get<size_t>()) + " episode(s) read -> " +
                    s["out"].get<std::string>() + "\n";
  out += line("kept", s["kept"].get<size_t>(),
              no_tokens ? "  (" + std::to_string(no_tokens) + " chat-mode: messages only, no_tokens)" : "");
  out += line("dropped", s["dropped_total"].get<size_t>());
  for (const auto& r : drop_reasons()) out += line("  " + r, s["dropped"][r].get<size_t>());
  out += line("unreadable", s["unreadable"].get<size_t>(), s["options"]["skip_bad"].get<bool>() ? "  (skipped)" : "");
  out += "tokens: " + std::to_string(s["tokens"]["total"].get<size_t>()) + " in all, " +
         std::to_string(s["tokens"]["model"].get<size_t>()) + " sampled by the model (the loss's); " +
         format_seconds(s["seconds"].get<double>()) + "\n";
  std::string out_path = s["out"].get<std::string>();
  out += "summary: " + out_path + ".summary.json\n";
  return out;
}

}  // namespace anvil
