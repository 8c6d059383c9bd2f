// synth.cpp: `anvil synth`'s scheduler, journal and selection (synth.h); the summary is in
// synth_summary.cpp.
#include "anvil/synth/synth.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <thread>

#include "anvil/env/toolchain.h"
#include "anvil/util/fs.h"
#include "anvil/util/hash.h"
#include "anvil/util/json_text.h"
#include "anvil/util/line_child.h"
#include "anvil/util/strings.h"
#include "anvil/util/subprocess.h"

namespace anvil {

namespace fs = std::filesystem;
using Json = nlohmann::json;
using Clock = std::chrono::steady_clock;

namespace {

fs::path beside(const fs::path& out, const std::string& suffix) {
  return out.parent_path() / (out.stem().string() + suffix);
}

std::string file_sha(const fs::path& p) {
  auto text = read_file(p);
  return text ? sha256_hex(*text) : "";
}

// The composer's and the filters' sources: a journal made by other code is not resumed.
std::string code_sha(const Environment& env) {
  std::string all;
  for (const char* f : {"synth/catalog.py", "synth/compose.py", "synth/decontam.py", "synth/filters.py",
                        "synth/worker.py", "vet.py", "task_probe.py"})
    all += read_file(env.home / "python" / "anvil" / f).value_or(std::string("missing ") + f);
  return sha256_hex(all);
}

// The part of the header that must match for a journal to be resumed (count may grow).
Json run_identity(const Json& h) {
  Json o = Json::object();
  for (const char* k : {"seed", "catalogue_sha256", "index_sha256", "code_sha256", "torch", "python", "max_similarity"})
    if (h.contains(k)) o[k] = h[k];
  return o;
}

// One worker process and the thread that feeds it; the monitor kills it past its deadline.
struct Worker {
  std::unique_ptr<LineChild> child;
  std::filesystem::path log;
  // The deadline and the kill under one lock: a kill is only ever of the task whose deadline passed
  // (an answer read just before it clears the deadline first).
  std::mutex mu;
  long long deadline_ms = 0;  // steady clock, 0: none
  bool killed = false;
  void arm(long long at) {
    std::lock_guard<std::mutex> g(mu);
    deadline_ms = at;
  }
  bool disarm() {  // whether the process was killed
    std::lock_guard<std::mutex> g(mu);
    deadline_ms = 0;
    return killed;
  }
  void kill_if_late(long long now) {
    std::lock_guard<std::mutex> g(mu);
    if (deadline_ms > 0 && now > deadline_ms && child && !killed) {
      killed = true;
      ::kill(-child->pid(), SIGKILL);
    }
  }
};

long long now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now().time_since_epoch()).count();
}

class Scheduler {
 public:
  Scheduler(const SynthOptions& o, std::vector<long> missing, long next, long have_unique, long tried,
            std::map<std::string, long> keys)
      : opts_(o), missing_(std::move(missing)), next_(next), unique_(have_unique), tried_(tried),
        keys_(std::move(keys)) {}

  // The next index to try, or -1 when the run has enough or may try no more.
  long take() {
    std::lock_guard<std::mutex> g(mu_);
    if (stop_) return -1;
    long i;
    if (!missing_.empty()) {  // always: the selection is the first `count` by index, gaps included
      i = missing_.front();
      missing_.erase(missing_.begin());
    } else {
      if (unique_ >= opts_.count || tried_ + in_flight_ >= max_attempts()) return -1;
      i = next_++;
    }
    ++in_flight_;
    return i;
  }

  void done(const Json& record) {
    std::lock_guard<std::mutex> g(mu_);
    --in_flight_;
    ++tried_;
    if (record.value("status", "") == "accepted") {
      ++accepted_;
      long index = record.value("index", -1L);
      auto [it, fresh] = keys_.emplace(record.value("key", std::to_string(index)), index);
      if (fresh) ++unique_;
      else it->second = std::min(it->second, index);
    }
  }

  // The accepted task of a lower index with this key, or -1. A task it names can only be a
  // near-duplicate (select_tasks keeps the first by index), so its filters need not run.
  long duplicate_of(const std::string& key, long index) {
    std::lock_guard<std::mutex> g(mu_);
    auto it = keys_.find(key);
    return it != keys_.end() && it->second < index ? it->second : -1;
  }

  void fail(const std::string& why) {
    std::lock_guard<std::mutex> g(mu_);
    if (!stop_) error_ = why;
    stop_ = true;
  }

  long max_attempts() const { return opts_.max_attempts > 0 ? opts_.max_attempts : 20 * opts_.count + 100; }
  std::string progress_line(double seconds, long start_unique, long start_tried) {
    std::lock_guard<std::mutex> g(mu_);
    double rate = seconds > 0 ? (unique_ - start_unique) / seconds : 0;
    std::string eta = rate > 0 && unique_ < opts_.count ? ", about " + short_duration((opts_.count - unique_) / rate) + " left" : "";
    char buf[256];
    // a task in flight when the count was reached may pass too: the selection keeps `count` of them
    std::snprintf(buf, sizeof buf, "anvil synth: %ld/%ld tasks (%ld tried, %ld this run, %.1f tasks/s)%s",
                  std::min(unique_, opts_.count), opts_.count, tried_, tried_ - start_tried, rate, eta.c_str());
    return buf;
  }
  long unique() {
    std::lock_guard<std::mutex> g(mu_);
    return unique_;
  }
  long tried() {
    std::lock_guard<std::mutex> g(mu_);
    return tried_;
  }
  std::string error() {
    std::lock_guard<std::mutex> g(mu_);
    return error_;
  }

 private:
  const SynthOptions& opts_;
  std::mutex mu_;
  std::vector<long> missing_;
  long next_, unique_, tried_, accepted_ = 0, in_flight_ = 0;
  std::map<std::string, long> keys_;  // accepted tasks' keys, each with its lowest index
  bool stop_ = false;
  std::string error_;
};

// Appends whole lines to the journal, one write() each (O_APPEND): a kill leaves at most a torn last line.
class JournalWriter {
 public:
  bool open(const fs::path& p, std::string* err) {
    fd_ = ::open(p.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
    if (fd_ < 0) *err = "cannot open the journal " + p.string() + ": " + std::strerror(errno);
    return fd_ >= 0;
  }
  ~JournalWriter() {
    if (fd_ >= 0) ::close(fd_);
  }
  bool append(const Json& j) {
    std::string line = json_text(j) + "\n";
    std::lock_guard<std::mutex> g(mu_);
    const char* p = line.data();
    size_t left = line.size();
    while (left > 0) {
      ssize_t n = ::write(fd_, p, left);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return false;
      p += n;
      left -= static_cast<size_t>(n);
    }
    return true;
  }

 private:
  int fd_ = -1;
  std::mutex mu_;
};

// Each worker's share of the machine's memory (RLIMIT_DATA in the worker): 80% of MemTotal over
// the workers, at least 2 GiB: a task that needs more is its own failure, not the OOM killer's.
long worker_memory_mb(unsigned jobs) {
  long total_kb = 0;
  if (auto info = read_file("/proc/meminfo")) std::sscanf(info->c_str(), "MemTotal: %ld kB", &total_kb);
  if (total_kb <= 0) return 0;
  return std::max(2048L, static_cast<long>(total_kb / 1024 * 0.8 / std::max(1u, jobs)));
}

bool write_text(const fs::path& p, const std::string& text, std::string* err) {
  AtomicFile f(p);
  f.write(text);
  return f.commit(err);
}

// One worker's loop: start it, then take tasks until the scheduler has none, a record each in the
// journal; a worker killed at its deadline or dead is started again.
std::function<void(Worker&)> worker_loop(const SynthOptions& opts, Scheduler& sched, JournalWriter& writer,
                                         const std::vector<std::string>& argv,
                                         const std::map<std::string, std::string>& child_env,
                                         const fs::path& journal_path) {
  auto start_worker = [&](Worker& w, std::string* why) {
    {
      std::lock_guard<std::mutex> g(w.mu);
      w.deadline_ms = 0;
      w.child.reset();
      w.killed = false;
      w.child = LineChild::start(argv, child_env, w.log, why);
      if (!w.child) return false;
    }
    w.arm(now_ms() + 600 * 1000);  // its imports and loading, bounded too
    auto first = w.child->read_line();
    w.disarm();
    Json hello = first ? Json::parse(*first, nullptr, false) : Json();
    if (!hello.is_object() || !hello.value("ready", false)) {
      *why = hello.is_object() && hello.contains("error")
                 ? "a worker could not start: " + json_text(hello["error"])
                 : "a worker (" + argv[0] + ") ended before it was ready; " + w.log.string() + " ends:\n" +
                       tail_of_log(w.log, 8);
      return false;
    }
    return true;
  };

  return [&, start_worker](Worker& w) {
    std::string why;
    long index = sched.take();
    if (index < 0) return;  // nothing to do (a resumed run that has its tasks): no worker started
    if (!start_worker(w, &why)) return sched.fail(why);
    for (; index >= 0; index = sched.take()) {
      Json record;
      w.arm(now_ms() + std::chrono::duration_cast<std::chrono::milliseconds>(opts.timeout).count());
      bool sent = w.child->write_line(json_text(Json({{"seed", opts.seed}, {"index", index}, {"ask", true}})));
      auto line = sent ? w.child->read_line() : std::nullopt;
      if (line && line->find("\"ask\"") != std::string::npos) {  // composed: is it a duplicate already?
        Json ask = Json::parse(*line, nullptr, false);
        if (ask.is_object() && ask.value("index", -1L) == index && ask.value("ask", "") == "duplicate") {
          long of = sched.duplicate_of(ask.value("key", std::string()), index);
          sent = w.child->write_line(json_text(Json({{"duplicate_of", of < 0 ? Json() : Json(of)}})));
          line = sent ? w.child->read_line() : std::nullopt;
        }
      }
      bool timed_out = w.disarm();
      Json parsed = line ? Json::parse(*line, nullptr, false) : Json();
      bool answered = parsed.is_object() && parsed.value("index", -1L) == index;
      if (answered) {
        record = std::move(parsed);
      } else {
        record = {{"seed", opts.seed}, {"index", index}, {"status", "rejected"},
                  {"reason", timed_out ? "timeout" : "worker_died"},
                  {"detail", timed_out ? "its CPU stage took over " + std::to_string(opts.timeout.count()) + " s"
                                       : "the worker ended while checking it: " +
                                             tail_of_log(w.log, 3)},
                  {"checks", Json::object()}};
      }
      if (!writer.append(record)) return sched.fail("cannot append to the journal " + journal_path.string());
      sched.done(record);
      if ((!answered || timed_out) && !start_worker(w, &why)) return sched.fail(why);
    }
    w.child.reset();
  };
}

// The accepted rows as Parquet (anvil.synth.parquet, put in place whole), the summary and the page.
bool write_outputs(const Environment& env, const SynthOptions& opts, const Selection& sel, const Json& summary,
                   std::string* err) {
  std::error_code ec;
  // The rows, then Parquet through pyarrow (anvil.synth.parquet), put in place whole.
  fs::path rows = beside(opts.out, ".rows.jsonl");
  {
    std::string text;
    for (const auto& r : sel.accepted) text += json_text(r) + "\n";
    if (!write_text(rows, text, err)) return false;
  }
  SubprocessOptions so;
  so.env = {{"PYTHONPATH", env.python_path()}};
  so.timeout = std::chrono::minutes(10);
  so.merge_stderr = true;
  SubprocessResult pq = run_subprocess({env.python.string(), "-m", "anvil.synth.parquet", rows.string(),
                                        opts.out.string()}, so);
  fs::remove(rows, ec);
  if (!pq.ok()) {
    *err = "writing " + opts.out.string() + " failed (" + pq.describe() + "): " + tail_lines(pq.output, 5);
    return false;
  }
  if (!write_text(beside(opts.out, ".summary.json"), json_text(summary, 1) + "\n", err) ||
      !write_text(beside(opts.out, ".html"), synth_html(summary), err))
    return false;
  return true;
}

// What a resumed run tries first (gaps, timeouts, deaths), its next new index, and the keys and
// count of the distinct tasks its journal already has.
void resume_state(const Journal& journal, std::vector<long>* missing, long* next, std::map<std::string, long>* keys,
                  long* unique) {
  // Resume: the indexes below the highest done that are missing (in flight when the last run
  // stopped) first, then new ones.
  if (!journal.records.empty()) {
    *next = journal.records.rbegin()->first + 1;
    // retried: what was in flight when the last run stopped, and what the machine decided rather
    // than the task (a timeout under load, a worker that died)
    for (long i = 0; i < *next; ++i) {
      auto it = journal.records.find(i);
      std::string reason = it == journal.records.end() ? "" : it->second.value("reason", Json()).is_string()
                                                                   ? it->second["reason"].get<std::string>() : "";
      if (it == journal.records.end() || reason == "timeout" || reason == "worker_died") missing->push_back(i);
    }
    for (const auto& [i, r] : journal.records)
      if (r.value("status", "") == "accepted" && keys->emplace(r.value("key", std::to_string(i)), i).second) ++*unique;
  }
}

// python -m anvil.synth.worker with the run's catalogue, index, threshold and memory share (or the
// tests' own worker).
std::vector<std::string> worker_argv(const Environment& env, const SynthOptions& opts, unsigned jobs) {
  std::vector<std::string> argv = opts.worker;
  if (argv.empty())
    argv = {env.python.string(), "-c",
            "import os, sys; sys.path.insert(0, os.environ['ANVIL_PYDIR']); from anvil.synth import worker; "
            "sys.exit(worker.main())",
            "--catalogue", opts.catalogue.string(), "--index", opts.index.string(), "--threshold",
            json_text(Json(opts.max_similarity)), "--max-memory-mb", std::to_string(worker_memory_mb(jobs))};
  return argv;
}

}  // namespace

bool read_journal(const fs::path& path, Journal* j, std::string* err) {
  auto text = read_file(path);
  if (!text) {
    *err = "cannot read the journal " + path.string();
    return false;
  }
  auto lines = split_lines(*text);
  bool torn_end = !text->empty() && text->back() != '\n';
  size_t last_nl = text->rfind('\n');
  j->whole_bytes = last_nl == std::string::npos ? 0 : last_nl + 1;
  for (size_t n = 0; n < lines.size(); ++n) {
    if (trim(lines[n]).empty()) continue;
    Json v = Json::parse(lines[n], nullptr, false);
    if (v.is_discarded() || !v.is_object()) {
      if (n + 1 == lines.size() && torn_end) break;  // the last write, cut short by a kill
      *err = path.string() + " line " + std::to_string(n + 1) + ": not a JSON object (a journal of anvil synth?)";
      return false;
    }
    if (j->header.is_null()) {
      if (v.value("journal", "") != kSynthJournal) {
        *err = path.string() + " line 1: not an " + std::string(kSynthJournal) + " journal header";
        return false;
      }
      j->header = v;
      continue;
    }
    if (!v.contains("index") || !v["index"].is_number_integer()) {
      *err = path.string() + " line " + std::to_string(n + 1) + ": a record without an integer index";
      return false;
    }
    j->records[v["index"].get<long>()] = v;
  }
  if (j->header.is_null()) {
    *err = path.string() + ": empty journal";
    return false;
  }
  return true;
}

Selection select_tasks(const std::map<long, Json>& records, long count) {
  Selection s;
  std::map<std::string, long> kept;  // key -> index of the task kept
  for (const auto& [index, rec] : records) {
    if (static_cast<long>(s.accepted.size()) >= count) break;
    Json r = rec;
    if (r.value("status", "") == "accepted") {
      std::string key = r.value("key", std::to_string(index));
      auto it = kept.find(key);
      if (it != kept.end()) {
        r["status"] = "rejected";
        r["reason"] = "duplicate";
        r["detail"] = "the same operations and choices as task " + std::to_string(it->second);
      } else {
        kept[key] = index;
        s.accepted.push_back(r);
      }
    }
    s.considered.push_back(std::move(r));
  }
  return s;
}

namespace {

// OUT's journal opened for appending: a journal of this run's identity resumed (its torn last line
// cut off), one of another refused unless --fresh, a new one begun with the header.
bool open_journal(const Environment& env, const SynthOptions& opts, const fs::path& journal_path,
                  JournalWriter* writer, long* resumed_from, std::string* err) {
  Json header = {{"journal", kSynthJournal}, {"seed", opts.seed}, {"catalogue_sha256", file_sha(opts.catalogue)},
                 {"index_sha256", file_sha(opts.index)}, {"code_sha256", code_sha(env)},
                 {"torch", env.torch.version}, {"python", env.python_version},
                 {"max_similarity", opts.max_similarity},
                 {"started_at", utc_now()}};
  Journal journal;
  std::error_code ec;
  if (fs::exists(journal_path, ec)) {
    bool ok = read_journal(journal_path, &journal, err);
    bool same = ok && run_identity(journal.header) == run_identity(header);
    if (!same && !opts.fresh) {
      *err = (ok ? "the journal " + journal_path.string() + " is of another run (" +
                       json_text(run_identity(journal.header)) + ", this one " + json_text(run_identity(header)) + ")"
                 : *err) +
             ": pass --fresh to start again, or another --out";
      return false;
    }
    if (!same) {
      fs::remove(journal_path, ec);
      journal = Journal();
    }
  }
  *resumed_from = static_cast<long>(journal.records.size());
  if (!journal.header.is_null()) {  // a torn last line (a kill mid-write) cut off before appending
    std::error_code rec;
    if (fs::file_size(journal_path, rec) != journal.whole_bytes) fs::resize_file(journal_path, journal.whole_bytes, rec);
    if (rec) {
      *err = "cannot cut the torn end off the journal " + journal_path.string() + ": " + rec.message();
      return false;
    }
  }
  if (!writer->open(journal_path, err)) return false;
  if (journal.header.is_null() && !writer->append(header)) {
    *err = "cannot write the journal " + journal_path.string();
    return false;
  }
  return true;
}

// The CPU stage until `target` distinct tasks are accepted (or max_attempts tried): the journal's
// gaps, timeouts and deaths first, then new indexes, each record appended as it comes.
struct CpuPhase {
  double seconds = 0;
  long tried = 0;  // this phase
  std::string error;
};
CpuPhase cpu_phase(const Environment& env, const SynthOptions& opts_in, long target, unsigned jobs,
                   const fs::path& journal_path, JournalWriter& writer, long* max_attempts) {
  CpuPhase out;
  SynthOptions opts = opts_in;
  opts.count = target;
  Journal journal;
  if (!read_journal(journal_path, &journal, &out.error)) return out;
  std::vector<long> missing;
  long next = 0, unique = 0;
  std::map<std::string, long> keys;
  resume_state(journal, &missing, &next, &keys, &unique);
  std::vector<std::string> argv = worker_argv(env, opts, jobs);
  std::map<std::string, std::string> child_env = {{"ANVIL_PYDIR", (env.home / "python").string()},
                                                  {"PYTHONUNBUFFERED", "1"}, {"OMP_NUM_THREADS", "1"}};
  long start_tried = static_cast<long>(journal.records.size());
  Scheduler sched(opts, missing, next, unique, start_tried, keys);
  *max_attempts = sched.max_attempts();
  std::vector<std::unique_ptr<Worker>> workers;
  for (unsigned w = 0; w < jobs; ++w) {
    workers.push_back(std::make_unique<Worker>());
    workers.back()->log = beside(opts.out, ".worker" + std::to_string(w) + ".log");
  }
  signal(SIGPIPE, SIG_IGN);  // a worker that died is seen at its pipe's end, not by a signal here
  std::atomic<bool> finished{false};
  auto t0 = Clock::now();
  auto work = worker_loop(opts, sched, writer, argv, child_env, journal_path);
  bool tty = opts.progress && isatty(STDERR_FILENO);
  std::thread monitor([&] {
    auto last_print = Clock::now();
    while (!finished) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      long long t = now_ms();
      for (auto& w : workers) w->kill_if_late(t);
      if (opts.progress && Clock::now() - last_print > std::chrono::seconds(tty ? 1 : 30)) {
        last_print = Clock::now();
        std::string line = sched.progress_line(std::chrono::duration<double>(Clock::now() - t0).count(),
                                               unique, start_tried);
        std::fprintf(stderr, tty ? "\r%s\033[K" : "%s\n", line.c_str());
      }
    }
  });
  std::vector<std::thread> threads;
  for (auto& w : workers) threads.emplace_back([&, p = w.get()] { work(*p); });
  for (auto& t : threads) t.join();
  finished = true;
  monitor.join();
  out.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  out.tried = sched.tried() - start_tried;
  if (opts.progress) {
    std::string line = sched.progress_line(out.seconds, unique, start_tried);
    std::fprintf(stderr, tty ? "\r%s\033[K\n" : "%s\n", line.c_str());
  }
  out.error = sched.error();
  return out;
}

// The GPU stage (python -m anvil.synth.gpu_stage) over the CPU-accepted tasks it has no verdict for;
// every verdict its journal (OUT.gpu/gpu.jsonl) holds, by index, those of other code left out.
bool gpu_phase(const Environment& env, const SynthOptions& opts, const std::vector<Json>& tasks,
               std::map<long, Json>* verdicts, double* seconds, std::string* err) {
  fs::path dir = beside(opts.out, ".gpu");
  fs::path journal = dir / "gpu.jsonl";
  auto read_verdicts = [&] {
    verdicts->clear();
    auto text = read_file(journal);
    if (!text) return;
    for (const auto& line : split_lines(*text)) {
      Json v = Json::parse(line, nullptr, false);  // a torn last line (a kill) is not a verdict
      if (v.is_object() && v.contains("index") && v.contains("status")) (*verdicts)[v["index"].get<long>()] = v;
    }
  };
  auto current = [&](const Json& task) {
    auto it = verdicts->find(task["index"].get<long>());
    return it != verdicts->end() && it->second.value("code_sha256", "") == sha256_hex(task["code"].get<std::string>());
  };
  read_verdicts();
  std::string rows;
  for (const auto& t : tasks)
    if (!current(t))
      rows += json_text(Json({{"index", t["index"]}, {"ops", t["ops"]}, {"code", t["code"]},
                              {"estimate_ms", t["estimate"]["ms"]}})) +
              "\n";
  if (!rows.empty()) {
    std::error_code ec;
    fs::create_directories(dir, ec);
    fs::path rows_path = dir / "rows.jsonl";
    if (!write_text(rows_path, rows, err)) return false;
    std::vector<std::string> argv = opts.gpu_stage;
    if (argv.empty()) argv = {env.python.string(), "-m", "anvil.synth.gpu_stage"};
    argv.insert(argv.end(), {rows_path.string(), "--out", dir.string()});
    if (opts.gpu_procs) argv.insert(argv.end(), {"--procs", std::to_string(opts.gpu_procs)});
    SubprocessOptions so;
    so.env = {{"PYTHONPATH", env.python_path()}};
    so.timeout = std::chrono::hours(24);
    so.merge_stderr = true;
    auto t0 = Clock::now();
    SubprocessResult r = run_subprocess(argv, so);
    *seconds += std::chrono::duration<double>(Clock::now() - t0).count();
    fs::remove(rows_path, ec);
    if (!r.ok()) {
      *err = "the GPU stage failed (" + r.describe() + "): " + tail_lines(r.output, 8);
      return false;
    }
    read_verdicts();
  }
  for (const auto& t : tasks)
    if (!current(t)) {
      *err = "the GPU stage gave no verdict for task " + json_text(t["index"]) + " (" + journal.string() + ")";
      return false;
    }
  return true;
}

// The records with the GPU's verdicts applied: a task the GPU stage rejected is rejected with its
// reason (gpu_...), one it accepted carries its measurements, one it has not checked is not
// accepted (gpu_unchecked: past the CPU stage's target, or the twin of a task the GPU rejected).
std::map<long, Json> with_verdicts(const std::map<long, Json>& records, const std::map<long, Json>& verdicts) {
  std::map<long, Json> out = records;
  for (auto& [i, r] : out) {
    if (r.value("status", "") != "accepted") continue;
    auto v = verdicts.find(i);
    if (v == verdicts.end() || v->second.value("code_sha256", "") != sha256_hex(r.value("code", ""))) {
      r["status"] = "rejected";
      r["reason"] = "gpu_unchecked";
      r["detail"] = "the GPU stage has not checked it";
      continue;
    }
    Json gpu = Json::object();
    for (const char* k : {"eager_ms", "compile_ms", "compile_max_abs_diff", "retried_alone"})
      if (v->second.contains(k)) gpu[k] = v->second[k];
    r["gpu"] = gpu;
    if (v->second.value("status", "") != "accepted") {
      r["status"] = "rejected";
      r["reason"] = v->second.value("reason", "gpu_error");
      r["detail"] = v->second.value("detail", "");
    }
  }
  return out;
}

// How many CPU-accepted tasks the next round asks for: enough, at the GPU's acceptance so far, for
// the tasks still missing, and a tenth more.
long next_target(long have, long gpu_accepted, long count) {
  double rate = have > 0 ? std::max(0.05, static_cast<double>(gpu_accepted) / have) : 1.0;
  return have + static_cast<long>(std::ceil((count - gpu_accepted) / rate * 1.1)) + 1;
}

long accepted_count(const Selection& s) { return static_cast<long>(s.accepted.size()); }

}  // namespace

SynthResult run_synth(const Environment& env, const SynthOptions& in) {
  SynthResult res;
  SynthOptions opts = in;
  auto fail = [&](int status, const std::string& why) {
    res.status = status;
    res.error = why;
    return res;
  };
  if (opts.count <= 0) return fail(2, "--count must be at least 1");
  if (opts.out.empty() || opts.out.extension() != ".parquet") return fail(2, "--out must name a .parquet file");
  if (opts.catalogue.empty()) opts.catalogue = env.share() / "synth" / "operators.json";
  if (opts.index.empty()) opts.index = env.share() / "synth" / "kernelbench-index.json";
  for (const auto& [what, p] : {std::pair<std::string, fs::path>{"operator catalogue", opts.catalogue},
                                {"KernelBench index", opts.index}}) {
    std::error_code ec;
    if (!fs::is_regular_file(p, ec)) return fail(2, "the " + what + " " + p.string() + " does not exist");
  }
  std::error_code ec;
  if (!opts.out.parent_path().empty()) fs::create_directories(opts.out.parent_path(), ec);
  unsigned jobs = opts.jobs ? opts.jobs : std::max(1u, std::thread::hardware_concurrency());
  fs::path journal_path = beside(opts.out, ".journal.jsonl");
  std::string err;
  long resumed_from = 0;
  JournalWriter writer;
  if (!open_journal(env, opts, journal_path, &writer, &resumed_from, &err)) return fail(2, err);

  // The CPU stage; with --gpu, the GPU stage over what it accepted, and more of both until `count`
  // tasks pass both (or the CPU stage may try no more).
  long target = opts.count, max_attempts = 0, tried = 0;
  double cpu_seconds = 0, gpu_seconds = 0;
  std::map<long, Json> verdicts;
  Journal all;
  for (int round = 0;; ++round) {
    CpuPhase cpu = cpu_phase(env, opts, target, jobs, journal_path, writer, &max_attempts);
    cpu_seconds += cpu.seconds;
    tried += cpu.tried;
    if (!cpu.error.empty()) return fail(2, cpu.error);
    all = Journal();
    if (!read_journal(journal_path, &all, &err)) return fail(2, err);
    if (!opts.gpu) break;
    Selection cpu_sel = select_tasks(all.records, target);
    if (!gpu_phase(env, opts, cpu_sel.accepted, &verdicts, &gpu_seconds, &err)) return fail(2, err);
    long gpu_accepted = accepted_count(select_tasks(with_verdicts(all.records, verdicts), opts.count));
    if (gpu_accepted >= opts.count || accepted_count(cpu_sel) < target || round >= 50) break;
    target = next_target(accepted_count(cpu_sel), gpu_accepted, opts.count);
  }
  Selection sel = select_tasks(opts.gpu ? with_verdicts(all.records, verdicts) : all.records, opts.count);
  Json run = {{"seed", opts.seed}, {"count", opts.count}, {"jobs", jobs}, {"seconds_this_run", cpu_seconds + gpu_seconds},
              {"cpu_seconds_this_run", cpu_seconds}, {"gpu", opts.gpu}, {"tried_this_run", tried},
              {"resumed_from", resumed_from}, {"catalogue", opts.catalogue.string()}, {"index", opts.index.string()},
              {"max_similarity", opts.max_similarity}, {"out", opts.out.string()},
              {"journal", journal_path.string()}, {"finished_at", utc_now()}};
  if (opts.gpu) run["gpu_seconds_this_run"] = gpu_seconds;
  res.summary = synth_summary(sel, run);

  if (!write_outputs(env, opts, sel, res.summary, &err)) return fail(2, err);
  if (accepted_count(sel) < opts.count) {
    res.status = 1;
    res.error = "only " + std::to_string(sel.accepted.size()) + " of " + std::to_string(opts.count) +
                " tasks were accepted within " + std::to_string(max_attempts) +
                " attempts (--max-attempts); those are written";
  }
  return res;
}

}  // namespace anvil
