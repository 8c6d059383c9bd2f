#include "anvil/serve/store.h"

#include <sqlite3.h>

#include <chrono>
#include <stdexcept>

#include "anvil/env/outcome.h"
#include "anvil/util/json_text.h"
#include "anvil/util/strings.h"

namespace anvil {
namespace {


// One prepared statement, finalized on every path.
class Stmt {
 public:
  Stmt(sqlite3* db, const char* sql) : db_(db) {
    if (sqlite3_prepare_v2(db, sql, -1, &s_, nullptr) != SQLITE_OK) fail("prepare");
  }
  ~Stmt() { sqlite3_finalize(s_); }
  Stmt& bind(int i, int64_t v) {
    sqlite3_bind_int64(s_, i, v);
    return *this;
  }
  Stmt& bind(int i, double v) {
    sqlite3_bind_double(s_, i, v);
    return *this;
  }
  Stmt& bind(int i, const std::string& v) {
    sqlite3_bind_text(s_, i, v.data(), static_cast<int>(v.size()), SQLITE_TRANSIENT);
    return *this;
  }
  bool row() {  // step: true while a row is there
    int rc = sqlite3_step(s_);
    if (rc == SQLITE_ROW) return true;
    if (rc != SQLITE_DONE) fail("step");
    return false;
  }
  int64_t i64(int c) { return sqlite3_column_int64(s_, c); }
  double f64(int c) { return sqlite3_column_double(s_, c); }
  std::string text(int c) {
    const unsigned char* t = sqlite3_column_text(s_, c);
    return t ? std::string(reinterpret_cast<const char*>(t), sqlite3_column_bytes(s_, c)) : std::string();
  }

 private:
  [[noreturn]] void fail(const char* what) {
    throw std::runtime_error(std::string("the service's store: ") + what + ": " + sqlite3_errmsg(db_));
  }
  sqlite3* db_;
  sqlite3_stmt* s_ = nullptr;
};

const char* kColumns = "id, key, request, state, attempts, result, accepted_at, started_at, finished_at";

Job read_job(Stmt& s) {
  Job j;
  j.id = s.i64(0);
  j.key = s.text(1);
  j.request = nlohmann::json::parse(s.text(2), nullptr, false);
  j.state = static_cast<JobState>(s.i64(3));
  j.attempts = static_cast<int>(s.i64(4));
  std::string result = s.text(5);
  j.result = result.empty() ? nlohmann::json() : nlohmann::json::parse(result, nullptr, false);
  j.accepted_at = s.f64(6);
  j.started_at = s.f64(7);
  j.finished_at = s.f64(8);
  return j;
}

}  // namespace

const char* job_state_name(JobState s) {
  switch (s) {
    case JobState::kQueued: return "queued";
    case JobState::kRunning: return "running";
    case JobState::kDone: return "done";
  }
  return "?";
}

nlohmann::json abandoned_result(int attempts) {
  return {{"outcome", outcome_name(Outcome::kRuntimeError)},
          {"reward", -1},
          {"message", "the evaluation was under way when its server stopped, " + std::to_string(attempts) +
                          " times: it is not run again"}};
}

std::unique_ptr<Store> Store::open(const std::filesystem::path& path, std::string* error) {
  std::error_code ec;
  std::filesystem::create_directories(path.parent_path(), ec);
  sqlite3* db = nullptr;
  if (sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_FULLMUTEX,
                      nullptr) != SQLITE_OK) {
    *error = "cannot open " + path.string() + ": " + (db ? sqlite3_errmsg(db) : "out of memory");
    sqlite3_close(db);
    return nullptr;
  }
  std::unique_ptr<Store> s(new Store(db));
  try {
    sqlite3_busy_timeout(db, 5000);
    s->exec("PRAGMA journal_mode=WAL");
    s->exec("PRAGMA synchronous=FULL");  // a commit is on disk before accept() returns
    s->exec(
        "CREATE TABLE IF NOT EXISTS jobs ("
        " id INTEGER PRIMARY KEY AUTOINCREMENT, key TEXT, request TEXT NOT NULL, state INTEGER NOT NULL,"
        " attempts INTEGER NOT NULL DEFAULT 0, result TEXT, accepted_at REAL, started_at REAL, finished_at REAL)");
    s->exec("CREATE UNIQUE INDEX IF NOT EXISTS jobs_key ON jobs(key) WHERE key <> ''");
    s->exec("CREATE INDEX IF NOT EXISTS jobs_state ON jobs(state, id)");
  } catch (const std::exception& e) {
    *error = path.string() + ": " + e.what();
    return nullptr;
  }
  return s;
}

Store::~Store() { sqlite3_close(db_); }

void Store::exec(const char* sql) {
  char* msg = nullptr;
  if (sqlite3_exec(db_, sql, nullptr, nullptr, &msg) != SQLITE_OK) {
    std::string m = msg ? msg : "unknown error";
    sqlite3_free(msg);
    throw std::runtime_error(std::string("the service's store: ") + m);
  }
}

namespace {
std::string text_of(const nlohmann::json& j) {  // never throws: bytes that are not UTF-8 become U+FFFD
  return json_text(j);
}
}  // namespace

Store::Accepted Store::accept_locked(const std::string& key, const nlohmann::json& request, size_t max_queued) {
  Accepted a;
  std::string text = text_of(request);
  if (!key.empty()) {
    Stmt q(db_, "SELECT id, state, request FROM jobs WHERE key = ? AND key <> ''");
    if (q.bind(1, key).row()) {
      a.id = q.i64(0);
      a.existed = true;
      a.state = static_cast<JobState>(q.i64(1));
      a.conflict = q.text(2) != text;
      return a;
    }
  }
  Stmt n(db_, "SELECT count(*) FROM jobs WHERE state = 0");
  n.row();
  if (static_cast<size_t>(n.i64(0)) >= max_queued) {
    a.full = true;
    return a;
  }
  Stmt ins(db_, "INSERT INTO jobs (key, request, state, attempts, accepted_at) VALUES (?, ?, 0, 0, ?)");
  ins.bind(1, key).bind(2, text).bind(3, unix_seconds()).row();
  a.id = sqlite3_last_insert_rowid(db_);
  return a;
}

Store::Accepted Store::accept(const std::string& key, const nlohmann::json& request, size_t max_queued) {
  return accept_all({{key, request}}, max_queued).front();
}

std::vector<Store::Accepted> Store::accept_all(const std::vector<std::pair<std::string, nlohmann::json>>& requests,
                                               size_t max_queued) {
  std::lock_guard<std::mutex> g(mu_);
  exec("BEGIN IMMEDIATE");
  try {
    std::vector<Accepted> out;
    for (const auto& [key, request] : requests) {
      out.push_back(accept_locked(key, request, max_queued));
      if (out.back().full || out.back().conflict) {
        exec("ROLLBACK");  // none is new
        return out;
      }
    }
    exec("COMMIT");
    return out;
  } catch (...) {
    sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
    throw;
  }
}

std::optional<Job> Store::claim(const std::vector<int64_t>& first, int64_t last) {
  std::lock_guard<std::mutex> g(mu_);
  exec("BEGIN IMMEDIATE");
  try {
    const std::string select = std::string("SELECT ") + kColumns + " FROM jobs WHERE state = 0";
    std::optional<Stmt> q;
    auto found = [&](const std::string& where, auto&&... bind) {
      q.emplace(db_, (select + where + " ORDER BY id LIMIT 1").c_str());
      int i = 0;
      (q->bind(++i, bind), ...);
      if (q->row()) return true;
      q.reset();
      return false;
    };
    std::string ids = json_text(nlohmann::json(first));
    bool any = (!first.empty() && found(" AND id IN (SELECT value FROM json_each(?))", ids)) ||
               found(" AND id != ?", last) || found("");
    if (!any) {
      exec("COMMIT");
      return std::nullopt;
    }
    Job j = read_job(*q);
    q.reset();
    j.state = JobState::kRunning;
    j.attempts += 1;
    j.started_at = unix_seconds();
    Stmt u(db_, "UPDATE jobs SET state = 1, attempts = ?, started_at = ? WHERE id = ?");
    u.bind(1, static_cast<int64_t>(j.attempts)).bind(2, j.started_at).bind(3, j.id).row();
    exec("COMMIT");
    return j;
  } catch (...) {
    sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
    throw;
  }
}

Store::Accepted Store::accept_done(const std::string& key, const nlohmann::json& request, const nlohmann::json& result) {
  std::lock_guard<std::mutex> g(mu_);
  exec("BEGIN IMMEDIATE");
  try {
    Accepted a = accept_locked(key, request, static_cast<size_t>(-1));
    if (!a.existed) {
      double now = unix_seconds();
      Stmt u(db_, "UPDATE jobs SET state = 2, result = ?, started_at = ?, finished_at = ? WHERE id = ?");
      u.bind(1, text_of(result)).bind(2, now).bind(3, now).bind(4, a.id).row();
      a.state = JobState::kDone;
    }
    exec("COMMIT");
    return a;
  } catch (...) {
    exec("ROLLBACK");
    throw;
  }
}

void Store::finish(int64_t id, const nlohmann::json& result) {
  std::lock_guard<std::mutex> g(mu_);
  Stmt u(db_, "UPDATE jobs SET state = 2, result = ?, finished_at = ? WHERE id = ?");
  u.bind(1, text_of(result)).bind(2, unix_seconds()).bind(3, id).row();
}

std::vector<int64_t> Store::queued_ids() {
  std::lock_guard<std::mutex> g(mu_);
  std::vector<int64_t> out;
  Stmt q(db_, "SELECT id FROM jobs WHERE state = 0 ORDER BY id");
  while (q.row()) out.push_back(q.i64(0));
  return out;
}

std::optional<JobState> Store::state_of(int64_t id) {
  std::lock_guard<std::mutex> g(mu_);
  Stmt q(db_, "SELECT state FROM jobs WHERE id = ?");
  if (!q.bind(1, id).row()) return std::nullopt;
  return static_cast<JobState>(q.i64(0));
}

std::optional<JobState> Store::state_of_key(const std::string& key) {
  std::lock_guard<std::mutex> g(mu_);
  Stmt q(db_, "SELECT state FROM jobs WHERE key = ?");
  if (!q.bind(1, key).row()) return std::nullopt;
  return static_cast<JobState>(q.i64(0));
}

int Store::release_running() {
  std::lock_guard<std::mutex> g(mu_);
  Stmt u(db_, "UPDATE jobs SET state = 0, attempts = max(attempts - 1, 0) WHERE state = 1");
  u.row();
  return sqlite3_changes(db_);
}

void Store::requeue(int64_t id, bool count) {
  std::lock_guard<std::mutex> g(mu_);
  Stmt u(db_, count ? "UPDATE jobs SET state = 0 WHERE id = ? AND state = 1"
                    : "UPDATE jobs SET state = 0, attempts = max(attempts - 1, 0) WHERE id = ? AND state = 1");
  u.bind(1, id).row();
}

int Store::forget_done_before(double t) {
  std::lock_guard<std::mutex> g(mu_);
  Stmt u(db_, "DELETE FROM jobs WHERE state = 2 AND finished_at < ?");
  u.bind(1, t).row();
  return sqlite3_changes(db_);
}

std::optional<Job> Store::get(int64_t id) {
  std::lock_guard<std::mutex> g(mu_);
  Stmt q(db_, (std::string("SELECT ") + kColumns + " FROM jobs WHERE id = ?").c_str());
  if (!q.bind(1, id).row()) return std::nullopt;
  return read_job(q);
}

Store::Recovered Store::recover(int max_attempts) {
  std::lock_guard<std::mutex> g(mu_);
  Recovered r;
  exec("BEGIN IMMEDIATE");
  try {
    std::vector<std::pair<int64_t, int>> running;
    {
      Stmt q(db_, "SELECT id, attempts FROM jobs WHERE state = 1");
      while (q.row()) running.emplace_back(q.i64(0), static_cast<int>(q.i64(1)));
    }
    for (auto [id, attempts] : running) {
      if (attempts < max_attempts) {
        Stmt u(db_, "UPDATE jobs SET state = 0 WHERE id = ?");
        u.bind(1, id).row();
        ++r.requeued;
      } else {
        Stmt u(db_, "UPDATE jobs SET state = 2, result = ?, finished_at = ? WHERE id = ?");
        u.bind(1, text_of(abandoned_result(attempts))).bind(2, unix_seconds()).bind(3, id).row();
        ++r.failed;
      }
    }
    exec("COMMIT");
  } catch (...) {
    sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
    throw;
  }
  return r;
}

std::map<JobState, int64_t> Store::counts() {
  std::lock_guard<std::mutex> g(mu_);
  std::map<JobState, int64_t> c = {{JobState::kQueued, 0}, {JobState::kRunning, 0}, {JobState::kDone, 0}};
  Stmt q(db_, "SELECT state, count(*) FROM jobs GROUP BY state");
  while (q.row()) c[static_cast<JobState>(q.i64(0))] = q.i64(1);
  return c;
}

}  // namespace anvil
