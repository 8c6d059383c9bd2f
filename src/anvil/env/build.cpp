// Implementation notes.
//
// A build is a Plan: compile units, each with a tool and a flag list, plus link
// flags. Candidate units are compiled in a private staging copy of kernels/
// (with anvil's pristine fixed files beside it), with relative source paths,
// so compiler messages already read "kernels/foo.cu:12: ..." and a candidate
// cannot swap the fixed files. Nothing is staged when everything is cached.
//
// Object cache (ccache's direct mode): base key = hash(format, environment
// fingerprint, tool identity, flags, relative path, source content, the names
// of every file in the stage). The manifest of a base key lists the files the
// compile read (relative paths and content hashes) and the object each such
// set gave: the preprocessor's depfile and the assembler's (GNU as --MD: its
// .include and .incbin files), for g++ and for nvcc's host side alike. The
// stage is the only thing of the candidate's a compiler can see (util/jail.h);
// the names cover what it probed without reading (__has_include, a search
// along the include path). Files under the toolkit, torch, Python and system
// directories are not listed: the fingerprint covers them by version. A file
// read through a path that aliases the stage (/proc/self/cwd/..., /dev/fd/N)
// cannot be keyed: such an object is used once and never served again.
#include "anvil/env/build.h"

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <regex>
#include <set>
#include <thread>

#include "anvil/env/cache_layout.h"
#include "anvil/env/confine.h"
#include "anvil/env/diagnostics.h"
#include "anvil/env/flags.h"
#include "anvil/util/fs.h"
#include "anvil/util/hash.h"
#include "anvil/util/json_text.h"
#include "anvil/util/strings.h"
#include "anvil/util/subprocess.h"
#include "anvil/util/thread_pool.h"

namespace anvil {

namespace {

constexpr const char* kObjectFormat = "anvil-object-v2";  // v2: the stage's names, the assembler's inputs
constexpr const char* kModuleFormat = "anvil-module-v2";    // v2: --exclude-libs,ALL
constexpr const char* kRuntimeFormat = "anvil-runtime-v2";  // v2: --exclude-libs,ALL
// Shared objects anvil links keep the symbols of static archives to themselves. A compiler that
// links libstdc++ statically (some toolchains do by default) would otherwise export its copy from
// libanvil_torch.so, and a module's std::ostream calls could bind to it while its streams come
// from the process's libstdc++: a crash on the first formatted error message.
constexpr const char* kKeepStaticSymbolsLocal = "-Wl,--exclude-libs,ALL";
constexpr size_t kMaxManifestEntries = 16;
// A compiler's list of what it read: thousands of torch headers fit in a few hundred KiB.
constexpr uint64_t kMaxDepfileBytes = 16ull << 20;
// What a build keeps of its failed units' compiler output, in all (each tool's is cut at 16 MiB as it
// runs): the diagnostics need the first errors, and ten thousand units must not each keep theirs.
constexpr size_t kMaxKeptOutputBytes = 16u << 20;
// What is read of a workdir's files that are not built from (its previous record, a fixed file's
// copy) before it is judged too large to matter.
constexpr uint64_t kMaxRecordBytes = 16ull << 20;
constexpr auto kCompileTimeout = std::chrono::minutes(10);
// Compat bindings include torch and pybind11 through a precompiled header.
// g++ spends ~5 s just restoring that header state (an empty TU with the PCH:
// 4.7 s at -O0, 4.9 s at -O1, 5.9 s at -O2); the binding TU itself took 5.3 /
// 5.2 / 6.6 s (g++ 12, 2 quiet cores, 2026-11-22). -O1 is the fastest that
// still optimizes the binding glue.
constexpr const char* kCompatBindingOpt = "-O1";

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

std::string shard(const std::string& key) { return key.substr(0, 2) + "/" + key; }

struct Unit {
  std::string rel;     // as passed to the compiler (relative to the source root), or absolute
  std::string key_path;  // the path that enters the cache key (default: rel)
  fs::path read_path;  // where its content is read for hashing (anvil's files, loose sources)
  const std::string* content = nullptr;  // a workdir's unit: its bytes in the plan's snapshot
  bool is_cuda = false;
  std::vector<std::string> flags;
  bool fixed = false;  // one of anvil's own files: shared by every candidate
};

struct Plan {
  std::string module_name = "cuda_extension";
  fs::path root;  // the candidate directory (the view's base)
  std::map<std::string, fs::path> overlay;  // staged relative path -> pristine file
  std::vector<std::string> stage_files;     // relative paths copied from root into the stage
  // stage_files' bytes, each read once beneath root (read_beneath): what is hashed for the keys and
  // what is staged are the same bytes, whatever changes in the workdir meanwhile (a file swapped for
  // a link out of it between the scan and the read, or between the key and the stage).
  std::map<std::string, std::string> snapshot;
  std::vector<Unit> units;
  std::vector<std::string> link_flags;
  bool needs_runtime = false;   // fast mode: libanvil_torch.so
  bool cuda = false;

  // Every relative path the stage holds, sorted: what a compiler there can find by name.
  std::vector<std::string> staged() const {
    std::set<std::string> all(stage_files.begin(), stage_files.end());
    for (const auto& [rel, pristine] : overlay) all.insert(rel);
    return {all.begin(), all.end()};
  }
  bool is_staged(const std::string& rel) const {
    return overlay.count(rel) || std::find(stage_files.begin(), stage_files.end(), rel) != stage_files.end();
  }
};

// Records what was hashed for a unit, for --explain and the workdir's record.
struct UnitState {
  std::string base, source_hash, flags_hash, tool, names_hash, object;
  std::map<std::string, std::string> deps;
  std::vector<std::string> libs;  // extra libraries the object needs: "cublas", "cudnn"
  // Why the object cannot be keyed by what it read (it is then used by this build alone), or "".
  std::string unkeyable;
};

class Builder {
 public:
  Builder(const Environment& env, const BuildOptions& opts)
      : env_(env), opts_(opts), config_(sandbox_config(env, &config_error_)), toolchain_(toolchain_paths(env)) {
    toolchain_.push_back(env.share());  // anvil's fixed sources (binding.cpp, the runtime's)
  }

  // Paths of the cache.
  fs::path objects() const { return cache_dir(env_, CacheArea::kObjects); }
  fs::path manifests() const { return cache_dir(env_, CacheArea::kManifests); }
  fs::path modules() const { return cache_dir(env_, CacheArea::kModules); }
  fs::path locks() const { return cache_dir(env_, CacheArea::kLocks); }
  fs::path tmp() const { return cache_dir(env_, CacheArea::kTmp); }
  fs::path runtime_dir() const { return anvil::runtime_dir(env_); }

  const Environment& env_;
  const BuildOptions& opts_;
  std::string config_error_;
  const JailConfig* config_;
  std::vector<fs::path> toolchain_;
  std::string jail_error_;  // the first time the jail could not be set up (an environment error)
  std::mutex mu_;
  std::map<std::string, std::optional<std::string>> hash_memo_;
  std::string log_;

  void log(const std::string& s) {
    std::lock_guard<std::mutex> g(mu_);
    log_ += s;
    if (!ends_with(s, "\n")) log_ += "\n";
  }

  std::optional<std::string> content_hash(const fs::path& p) {
    {
      std::lock_guard<std::mutex> g(mu_);
      auto it = hash_memo_.find(p.string());
      if (it != hash_memo_.end()) return it->second;
    }
    auto h = hash_file(p);
    std::lock_guard<std::mutex> g(mu_);
    hash_memo_[p.string()] = h;
    return h;
  }

  bool is_environment_path(const fs::path& p) const {
    std::string s = p.lexically_normal().string();
    std::vector<fs::path> roots = {env_.home, env_.cache, "/usr/include", "/usr/lib/gcc", "/usr/local/include",
                                   "/usr/lib/x86_64-linux-gnu", "/usr/lib/llvm"};
    if (!env_.cuda_home.empty()) roots.push_back(env_.cuda_home);
    if (!env_.python_include.empty()) roots.push_back(env_.python_include);
    if (!env_.torch.library_dir.empty()) roots.push_back(env_.torch.library_dir.parent_path());
    for (const auto& inc : env_.torch.include_paths) roots.push_back(inc);
    if (env_.cudnn.found()) roots.push_back(env_.cudnn.include_dir);
    if (env_.cublas.found()) roots.push_back(env_.cublas.include_dir);
    std::error_code ec;
    std::string canon = fs::weakly_canonical(p, ec).string();
    for (const auto& r : roots) {
      std::string rs = r.lexically_normal().string();
      if (rs.empty()) continue;
      if (!ends_with(rs, "/")) rs += "/";
      if (starts_with(s + "/", rs) || starts_with(canon + "/", rs)) return true;
    }
    // The real directory of the toolkit (/usr/local/cuda -> cuda-13.0).
    if (!env_.cuda_home.empty()) {
      std::string real = fs::weakly_canonical(env_.cuda_home, ec).string() + "/";
      if (starts_with(canon, real)) return true;
    }
    return false;
  }

  // Where a dependency path (relative to the stage, or absolute) is read in the view.
  fs::path view_path(const Plan& plan, const std::string& dep) const {
    fs::path p(dep);
    if (p.is_absolute()) return p;
    auto it = plan.overlay.find(p.lexically_normal().generic_string());
    if (it != plan.overlay.end()) return it->second;
    return plan.root / p;
  }

  std::string tool_identity(const Unit& u) const { return u.is_cuda ? env_.nvcc.identity : env_.cxx.identity; }

  // The hash of the stage's names: what a unit's compiler could find there by name (anvil's own
  // units see no stage).
  static std::string names_hash(const Plan& plan) {
    Hasher h;
    for (const auto& rel : plan.staged()) h.add("name", rel);
    return h.hex();
  }

  std::string base_key(const Unit& u, const std::string& stage_names, UnitState* st) {
    auto src = u.content ? std::optional<std::string>(sha256_hex(*u.content)) : content_hash(u.read_path);
    st->source_hash = src ? *src : "missing";
    Hasher fh;
    for (const auto& f : u.flags) fh.add("flag", f);
    st->flags_hash = fh.hex();
    st->tool = tool_identity(u);
    st->names_hash = u.fixed ? "" : stage_names;
    Hasher h;
    h.add("format", kObjectFormat)
        .add("env", env_.fingerprint)
        .add("tool", st->tool)
        .add("flags", st->flags_hash)
        .add("path", u.key_path.empty() ? u.rel : u.key_path)
        .add("source", st->source_hash)
        .add("names", st->names_hash);
    st->base = h.hex();
    return st->base;
  }

  static std::string object_key(const std::string& base, const std::map<std::string, std::string>& deps) {
    Hasher h;
    h.add("base", base);
    for (const auto& [p, d] : deps) h.add("dep", p).add("hash", d);
    return h.hex();
  }

  fs::path object_path(const std::string& key) const { return objects() / (shard(key) + ".o"); }
  fs::path manifest_path(const std::string& base) const { return manifests() / (shard(base) + ".json"); }

  nlohmann::json read_manifest(const std::string& base) {
    auto text = read_file(manifest_path(base));
    if (!text) return nlohmann::json::array();
    try {
      auto j = nlohmann::json::parse(*text);
      return j.is_array() ? j : nlohmann::json::array();
    } catch (const std::exception&) {
      return nlohmann::json::array();  // a corrupt manifest is a miss, never an error
    }
  }

  // A manifest entry whose headers all still hash the same, with an object present.
  bool lookup(const Plan& plan, UnitState* st) {
    for (const auto& entry : read_manifest(st->base)) {
      std::map<std::string, std::string> deps;
      bool match = true;
      const nlohmann::json entry_deps = entry.value("deps", nlohmann::json::object());
      for (const auto& [p, h] : entry_deps.items()) {
        auto snap = plan.snapshot.find(fs::path(p).lexically_normal().generic_string());
        auto now = !fs::path(p).is_absolute() && snap != plan.snapshot.end()
                       ? std::optional<std::string>(sha256_hex(snap->second))
                       : content_hash(view_path(plan, p));
        if (!now || *now != h.get<std::string>()) {
          match = false;
          break;
        }
        deps[p] = h.get<std::string>();
      }
      if (!match) continue;
      std::string key = entry.value("object", std::string());
      std::error_code ec;
      if (key.empty() || !fs::exists(object_path(key), ec)) continue;
      st->deps = deps;
      st->object = key;
      st->libs = entry.value("libs", std::vector<std::string>());
      return true;
    }
    return false;
  }

  void store_manifest(const UnitState& st) {
    nlohmann::json entries = read_manifest(st.base);
    nlohmann::json kept = nlohmann::json::array();
    kept.push_back({{"deps", st.deps}, {"object", st.object}, {"libs", st.libs}});
    for (const auto& e : entries) {
      if (kept.size() >= kMaxManifestEntries) break;
      if (e.value("object", std::string()) != st.object) kept.push_back(e);
    }
    std::string err;
    write_file_atomic(manifest_path(st.base), json_text(kept), &err);
  }

  // A failed unit's output, cut to what is left of the build's budget (kMaxKeptOutputBytes).
  void keep_output(std::string* output) {
    std::lock_guard<std::mutex> g(mu_);
    size_t room = std::min(output->size(), kMaxKeptOutputBytes - kept_output_);
    kept_output_ += room;
    if (room == output->size()) return;
    size_t left_out = output->size() - room;
    output->resize(room);
    *output += "\n(" + human_size(left_out) + " more of the compiler's output left out: a build keeps " +
               human_size(kMaxKeptOutputBytes) + " of it in all)\n";
  }
  size_t kept_output_ = 0;

  // A unit's wall-clock limit: 10 minutes, or what is left before the deadline (at least 1 ms).
  std::chrono::milliseconds unit_timeout(bool* cut) const {
    auto t = std::chrono::duration_cast<std::chrono::milliseconds>(kCompileTimeout);
    *cut = false;
    if (opts_.deadline) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(*opts_.deadline - Clock::now());
      if (left < t) {
        t = std::max(left, std::chrono::milliseconds(1));
        *cut = true;
      }
    }
    return t;
  }

  // Runs a compiler or the linker in the jail: the toolchain read-only, `binds` as given, the
  // anvil cache out of view, a clean environment, the per-unit limits.
  JailResult run_tool(const std::vector<std::string>& argv, const fs::path& cwd, std::vector<JailBind> binds,
                      bool* deadline_cut) {
    if (opts_.verbose) log("$ " + join(argv, " "));
    JailResult r;
    if (!config_) {
      r.error = "sandbox: " + config_error_;
    } else {
      JailOptions j;
      j.config = config_;
      j.view = &config_->build;  // the toolchain's system only: no /etc/passwd, no /sys, no /opt
      j.cwd = cwd.empty() ? fs::path("/") : cwd;
      j.binds = std::move(binds);
      j.toolchain = toolchain_;
      j.hide = {env_.cache};
      j.env = tool_environment();
      j.timeout = unit_timeout(deadline_cut);
      j.max_output = 16 << 20;
      j.limits = {opts_.memory_limit, static_cast<uint64_t>(std::chrono::seconds(kCompileTimeout).count()),
                  opts_.file_size_limit};
      r = run_jailed(argv, j);
    }
    if (!r.started) {
      std::lock_guard<std::mutex> g(mu_);
      if (jail_error_.empty()) jail_error_ = r.error;
    }
    return r;
  }

  // A directory a jailed tool writes: its user's while it runs, anvil's again after.
  fs::path tool_dir(const std::string& prefix) {
    fs::path d = make_temp_dir(tmp(), prefix);
    if (config_) give_to_jail(*config_, d);
    return d;
  }
  static void take_back(const fs::path& dir) {
    if (geteuid() == 0) set_owner(dir, geteuid(), getegid());
  }

  // Materializes the stage once (only on a miss).
  fs::path stage(const Plan& plan, std::string* err) {
    std::call_once(stage_once_, [&] {
      try {
        stage_dir_ = make_temp_dir(tmp(), "stage");
        fs::permissions(stage_dir_, fs::perms(0755));  // the jailed compiler reads it as its own user
        auto put = [&](const std::string& rel, const fs::path& from) {
          // Regular files of bounded size only (scan_workdir said which); a symlink inside the
          // workdir is read at its (checked) target.
          std::error_code ec;
          fs::path real = fs::is_symlink(from, ec) ? fs::canonical(from, ec) : from;
          std::string why, e;
          auto data = read_regular(real, kMaxCandidateFileBytes, &why);
          if (!data) {
            stage_error_ = "cannot stage " + rel + ": it " + why;
          } else if (!write_file_atomic(stage_dir_ / rel, *data, &e, 0644)) {
            stage_error_ = "cannot stage " + rel + ": " + e;
          }
        };
        for (const auto& rel : plan.stage_files) {
          std::string e;
          auto it = plan.snapshot.find(rel);
          if (it == plan.snapshot.end()) {
            stage_error_ = "cannot stage " + rel + ": it was not read";
          } else if (!write_file_atomic(stage_dir_ / rel, it->second, &e, 0644)) {
            stage_error_ = "cannot stage " + rel + ": " + e;
          }
        }
        for (const auto& [rel, pristine] : plan.overlay) put(rel, pristine);
      } catch (const std::exception& e) {
        stage_error_ = e.what();
      }
    });
    if (!stage_error_.empty()) *err = stage_error_;
    return stage_dir_;
  }

  // Compiles one unit (cache miss) in the jail: the stage read-only, its own output directory
  // writable. Returns false with the compiler's output, or with *stopped saying which limit
  // ended it ("kernels/a.cu: the compiler was stopped: it used more than 8 GiB of memory ...").
  bool compile(const Plan& plan, const Unit& u, UnitState* st, std::string* output, std::string* stopped) {
    std::string err;
    fs::path cwd;
    std::vector<JailBind> binds;
    if (!u.fixed) {
      cwd = stage(plan, &err);
      if (!err.empty()) {
        *output = "staging failed: " + err;
        return false;
      }
      binds.push_back({cwd, false});
    }
    fs::path work = tool_dir("cc");
    binds.push_back({work, true});
    // The preprocessor's list of what it read (out.d) and the assembler's (as.d: its .include and
    // .incbin files; through nvcc, of the host side's assembly).
    fs::path obj = work / "out.o", dep = work / "out.d", asm_dep = work / "as.d";
    std::vector<std::string> argv;
    argv.push_back(u.is_cuda ? env_.nvcc.path.string() : env_.cxx.path.string());
    argv.insert(argv.end(), u.flags.begin(), u.flags.end());
    argv.insert(argv.end(), {"-c", u.rel, "-o", obj.string(), "-MD", "-MF", dep.string()});
    if (gnu_assembler()) {
      if (u.is_cuda) argv.insert(argv.end(), {"-Xcompiler", "-Wa\\,--MD\\," + asm_dep.string()});  // "\,": not a separator
      else argv.push_back("-Wa,--MD," + asm_dep.string());
    }
    bool cut = false;
    JailResult r = run_tool(argv, cwd, std::move(binds), &cut);
    take_back(work);
    *output = r.output;
    if (!r.ok()) {
      *stopped = stopped_by_limit(u.fixed ? fs::path(u.rel).filename().string() : u.rel, r, cut);
      if (stopped->empty() && (!r.started || r.timed_out || r.signal)) *output += "\n" + u.rel + ": compiler " + r.describe() + "\n";
      remove_tree(work);
      return false;
    }
    std::vector<fs::path> lists = {dep};
    if (gnu_assembler()) lists.push_back(asm_dep);
    record_deps(plan, u, cwd, lists, st);
    st->object = object_key(st->base, st->deps);
    // An object whose inputs cannot all be keyed is this build's alone: a key no lookup can find.
    if (!st->unkeyable.empty()) st->object = Hasher().add("object", st->object).add("once", once_nonce()).hex();
    fs::path dest = object_path(st->object);
    fs::create_directories(dest.parent_path());
    if (::rename(obj.c_str(), dest.c_str()) != 0) {
      std::string e;
      copy_file_atomic(obj, dest, &e);
    }
    remove_tree(work);
    if (st->unkeyable.empty()) store_manifest(*st);
    return true;
  }

  // Whether the assembler keeps a list of the files it reads (GNU as --MD); clang's integrated
  // one does not, and its objects are then never served again (record_deps).
  bool gnu_assembler() const { return env_.cxx.version.find("clang") == std::string::npos; }

  static std::string once_nonce() {
    std::random_device rd;
    return std::to_string(rd()) + "-" + std::to_string(rd()) + "-" + std::to_string(rd()) + "-" + std::to_string(rd());
  }

  // What a compile read, from its tools' lists (`lists`: the preprocessor's depfile, the
  // assembler's): the stage's files by relative path and the files outside the environment by
  // absolute path, each with its content hash; and the libraries they call for. The stage is the
  // only place of the candidate's a compiler can read (util/jail.h): a name its tools listed that
  // the stage does not hold was never read from it (gas lists its .file names; nvcc's host side,
  // its temporary files). A path that leaves the stage ("../"), or that aliases it or is the jail's
  // own (/proc/self/cwd/..., /dev/fd/N), or a list that cannot be read, leaves *st unkeyable.
  void record_deps(const Plan& plan, const Unit& u, const fs::path& cwd, const std::vector<fs::path>& lists,
                   UnitState* st) {
    st->deps.clear();
    st->libs.clear();
    st->unkeyable.clear();
    std::vector<std::string> paths;
    for (const auto& list : lists) {
      std::string why;
      auto text = read_regular(list, kMaxDepfileBytes, &why);
      if (!text) {
        st->unkeyable = list == lists.front() ? "the compiler's list of the files it read " + why
                                              : "the assembler's list of the files it read " + why;
        continue;
      }
      auto listed = parse_depfile(*text);
      paths.insert(paths.end(), listed.begin(), listed.end());
    }
    std::error_code ec;
    std::vector<std::string> stage_roots;
    if (!cwd.empty()) {
      stage_roots.push_back(cwd.lexically_normal().string());
      stage_roots.push_back(fs::weakly_canonical(cwd, ec).string());
    }
    const std::string self = fs::path(u.rel).lexically_normal().generic_string();
    for (const auto& raw : paths) {
      fs::path p = fs::path(raw).lexically_normal();
      std::string name = p.filename().string();
      if (starts_with(name, "cublas")) st->libs.push_back("cublas");
      if (starts_with(name, "cudnn")) st->libs.push_back("cudnn");
      std::string key = p.generic_string();
      if (u.fixed) {  // anvil's own units: compiled in /, beside no stage, from anvil's share/
        if (key == self || !p.is_absolute() || within(key, "/tmp") || is_environment_path(p)) continue;
        st->deps[key] = hash_file(p).value_or("missing");
        continue;
      }
      for (const auto& root : stage_roots) {
        if (!root.empty() && within(key, root)) key = fs::path(key).lexically_relative(root).generic_string();
      }
      if (!fs::path(key).is_absolute()) {
        if (key == self || key == ".") continue;
        if (key == ".." || starts_with(key, "../")) {
          st->unkeyable = "it read " + raw + ", outside its stage";
        } else if (plan.is_staged(key)) {
          st->deps[key] = hash_file(cwd / key).value_or("missing");
        }
        continue;
      }
      if (within(key, "/tmp")) continue;  // the tools' own files, in the jail's private /tmp
      fs::path real = fs::weakly_canonical(p, ec);
      if (jail_own(key) || jail_own(real.string())) {
        st->unkeyable = "it read " + raw + ", which is the jail's own";
        continue;
      }
      if (is_environment_path(p)) continue;
      st->deps[key] = hash_file(p).value_or("missing");
    }
    std::sort(st->libs.begin(), st->libs.end());
    st->libs.erase(std::unique(st->libs.begin(), st->libs.end()), st->libs.end());
  }

  // /proc, /dev and /sys are the jail's own, not the host's at the same path: what a compile read
  // there cannot be hashed here (and /proc/self/cwd is the stage by another name).
  static bool jail_own(const std::string& path) {
    return within(path, "/proc") || within(path, "/dev") || within(path, "/sys");
  }

  static bool within(const std::string& path, const std::string& dir) {
    std::string d = dir;
    while (d.size() > 1 && d.back() == '/') d.pop_back();
    return path == d || starts_with(path, d == "/" ? d : d + "/");
  }

  // Which limit stopped a tool, as a line a model can act on; "" when none did.
  std::string stopped_by_limit(const std::string& what, const JailResult& r, bool deadline_cut) const {
    int sig = r.signal ? r.signal : r.exit_code > 128 ? r.exit_code - 128 : 0;
    auto has = [&](const char* s) { return r.output.find(s) != std::string::npos; };
    std::string why;
    if (!r.started) {
      return "";
    } else if (r.timed_out) {
      why = deadline_cut ? "the time left for this episode ran out"
                         : "it ran longer than " + std::to_string(kCompileTimeout.count()) + " minutes";
    } else if (out_of_memory(r.output)) {
      why = "it used more than " + limit_text(opts_.memory_limit) + " of memory (an #include of a device or a huge file?)";
    } else if (sig == SIGXFSZ || has("File size limit exceeded")) {
      why = "it wrote a file larger than " + limit_text(opts_.file_size_limit);
    } else if (sig == SIGXCPU || has("CPU time limit exceeded")) {
      why = "it used more than " + std::to_string(std::chrono::seconds(kCompileTimeout).count()) + " s of CPU time";
    } else {
      return "";
    }
    return what + ": the compiler was stopped: " + why;
  }

  // Whether a tool said it ran out of memory ("cc1plus: out of memory allocating ...", "virtual
  // memory exhausted", cicc's "Out of memory"). Only the output's last lines are read, as plain
  // text: a compiler's output can be megabytes long.
  static bool out_of_memory(const std::string& output) {
    static const char* kTools[] = {"cc1plus", "cc1:", "cicc", "ptxas", "cudafe++", "nvcc", "g++", "c++", "ld:",
                                   "collect2", "as:", "virtual memory exhausted"};
    static const char* kSaid[] = {"out of memory", "Out of memory", "memory exhausted", "Cannot allocate memory",
                                  "std::bad_alloc"};
    for (const auto& line : split_lines(output.substr(output.size() > 65536 ? output.size() - 65536 : 0))) {
      bool tool = std::any_of(std::begin(kTools), std::end(kTools), [&](const char* t) { return starts_with(line, t); });
      bool said = std::any_of(std::begin(kSaid), std::end(kSaid),
                              [&](const char* m) { return line.find(m) != std::string::npos; });
      if (tool && said) return true;
    }
    return false;
  }

  static std::string limit_text(uint64_t bytes) {
    if (bytes >= (1ull << 30) && bytes % (1ull << 30) == 0) return std::to_string(bytes >> 30) + " GiB";
    if (bytes >= (1ull << 20) && bytes % (1ull << 20) == 0) return std::to_string(bytes >> 20) + " MiB";
    return human_size(bytes);
  }

  ~Builder() {
    if (!stage_dir_.empty()) remove_tree(stage_dir_);
  }

  std::once_flag stage_once_;
  fs::path stage_dir_;
  std::string stage_error_;
};

std::vector<std::string> torch_compile_flags(const Environment& env, const std::string& ext_name) {
  std::vector<std::string> f;
  for (const auto& inc : env.torch.include_paths) f.insert(f.end(), {"-isystem", inc});
  if (!env.python_include.empty()) f.insert(f.end(), {"-isystem", env.python_include.string()});
  f.push_back(std::string("-D_GLIBCXX_USE_CXX11_ABI=") + (env.torch.cxx11_abi ? "1" : "0"));
  for (const auto& p : env.torch.pybind11_flags) f.push_back(p);
  f.push_back("-DTORCH_EXTENSION_NAME=" + ext_name);
  f.push_back("-DTORCH_API_INCLUDE_EXTENSION_H");
  return f;
}

std::vector<std::string> torch_link_flags(const Environment& env) {
  std::vector<std::string> f = {"-L" + env.torch.library_dir.string()};
  for (const auto& l : env.torch.libraries) f.push_back("-l" + l);
  f.push_back("-Wl,-rpath," + env.torch.library_dir.string());
  return f;
}

bool torch_has_cuda(const Environment& env) { return !env.torch.cuda.empty() && env.nvcc.found(); }

// Flags of a host-compiled unit.
std::vector<std::string> host_flags(const Environment& env, bool cuda, const std::string& opt) {
  std::vector<std::string> f = {"-std=c++17", opt, "-fPIC", "-fvisibility=hidden",
                                "-I" + env.anvil_include().string()};
  if (cuda || env.nvcc.found()) f.insert(f.end(), {"-isystem", env.cuda_include().string()});
  if (env.cudnn.found()) f.insert(f.end(), {"-isystem", env.cudnn.include_dir.string()});
  return f;
}

// An nvcc unit's flags: `code` (what the code means: language, optimization, math), then what every
// nvcc unit takes (position-independent host code, the host compiler, anvil's and cuDNN's headers,
// the architecture).
std::vector<std::string> nvcc_flags_with(const Environment& env, std::vector<std::string> code,
                                         const std::vector<std::string>& gencode) {
  code.insert(code.end(), {"-Xcompiler=-fPIC,-fvisibility=hidden", "-ccbin=" + env.cxx.path.string(),
                           "-I" + env.anvil_include().string()});
  if (env.cudnn.found()) code.insert(code.end(), {"-isystem", env.cudnn.include_dir.string()});
  code.insert(code.end(), gencode.begin(), gencode.end());
  return code;
}

// A workdir's .cu units.
std::vector<std::string> nvcc_flags(const Environment& env, const std::vector<std::string>& gencode) {
  return nvcc_flags_with(env, {"-std=c++17", "-O3", "--use_fast_math", "-lineinfo"}, gencode);
}

// A load_inline .cu unit: torch's own flags for load_inline (its COMMON_NVCC_FLAGS: the half and
// bfloat16 operators and conversions hidden, relaxed constexpr; no fast math, no host -O), so a file
// written for torch's load_inline builds to the module it builds there: one that defines its own
// __half operators (torch hides cuda_fp16's) compiles, and expf stays expf unless the file asks for
// --use_fast_math. -lineinfo is anvil's (ncu's source view), which changes no code.
std::vector<std::string> load_inline_nvcc_flags(const Environment& env, const std::vector<std::string>& gencode) {
  return nvcc_flags_with(env,
                         {"-std=c++17", "-D__CUDA_NO_HALF_OPERATORS__", "-D__CUDA_NO_HALF_CONVERSIONS__",
                          "-D__CUDA_NO_BFLOAT16_CONVERSIONS__", "-D__CUDA_NO_HALF2_OPERATORS__",
                          "--expt-relaxed-constexpr", "-lineinfo"},
                         gencode);
}

// Builds one environment-level artifact (runtime library or PCH) once, under a lock.
bool ensure_artifact(Builder& b, const fs::path& out, const std::string& what,
                     const std::function<bool(const fs::path& tmpdir, std::string* log)>& make, std::string* log,
                     double* built_seconds) {
  std::error_code ec;
  if (fs::exists(out, ec)) return true;
  auto t0 = Clock::now();
  FileLock lock(b.locks() / ("runtime-" + sha256_hex(out.string()).substr(0, 24) + ".lock"));
  if (fs::exists(out, ec)) return true;
  fs::path work = b.tool_dir("rt");
  struct Timer {
    Clock::time_point t0;
    double* out;
    ~Timer() { *out += since(t0); }
  } timer{t0, built_seconds};
  bool ok = make(work, log);
  if (ok) {
    fs::create_directories(out.parent_path(), ec);
    for (const auto& rel : list_files(work)) {
      fs::path dest = out.parent_path() / rel;
      if (::rename((work / rel).c_str(), dest.c_str()) != 0) {
        std::string e;
        copy_file_atomic(work / rel, dest, &e);
      }
    }
    ok = fs::exists(out, ec);
    if (!ok) *log += what + ": the artifact did not appear\n";
  }
  remove_tree(work);
  return ok;
}

std::string compat_pch_header(bool cuda) {
  std::string h =
      "// anvil: precompiled torch headers for CUDA-Agent-mode bindings\n"
      "#include <torch/types.h>\n#include <torch/csrc/utils/pybind.h>\n#include <pybind11/stl.h>\n";
  if (cuda) h += "#include <c10/cuda/CUDAStream.h>\n#include <cuda_runtime.h>\n";
  return h;
}

}  // namespace

fs::path runtime_dir(const Environment& env) {
  Hasher rk;
  rk.add("format", kRuntimeFormat).add("env", env.fingerprint);
  return cache_dir(env, CacheArea::kRuntime) / rk.hex().substr(0, 32);
}

// Make-style depfile: "target: a b \\\n c". Returns the listed paths.
std::vector<std::string> parse_depfile(const std::string& text) {
  std::vector<std::string> out;
  size_t colon = text.find(": ");
  if (colon == std::string::npos) return out;
  std::string cur;
  for (size_t i = colon + 2; i < text.size(); ++i) {
    char c = text[i];
    if (c == '\\' && i + 1 < text.size() && text[i + 1] == ' ') {
      cur += ' ';
      ++i;
    } else if (c == '\\' && i + 1 < text.size() && (text[i + 1] == '\n' || text[i + 1] == '\r')) {
      ++i;
    } else if (c == ' ' || c == '\n' || c == '\t' || c == '\r') {
      if (ends_with(cur, ":")) return out;  // the next rule (a phony target) begins
      if (!cur.empty()) out.push_back(cur);
      cur.clear();
    } else {
      cur += c;
    }
  }
  if (!cur.empty() && !ends_with(cur, ":")) out.push_back(cur);
  return out;
}


int BuildReport::compiled() const {
  int n = 0;
  for (const auto& u : units) n += u.cached ? 0 : 1;
  return n;
}

nlohmann::json BuildReport::to_json() const {
  nlohmann::json units_j = nlohmann::json::array();
  for (const auto& u : units) {
    nlohmann::json j = {{"source", u.source}, {"tool", u.tool}, {"cached", u.cached},
                        {"ok", u.ok},         {"seconds", u.seconds}};
    if (!u.explain.empty()) j["explain"] = u.explain;
    units_j.push_back(j);
  }
  nlohmann::json j = {{"schema", "anvil.build/1"},
                      {"ok", ok},
                      {"error_kind", error_kind.empty() ? nlohmann::json(nullptr) : nlohmann::json(error_kind)},
                      {"error", error.empty() ? nlohmann::json(nullptr) : nlohmann::json(error)},
                      {"mode", mode},
                      {"device", to_string(device)},
                      {"arch", arch},
                      {"units", units_j},
                      {"compiled", compiled()},
                      {"link_cached", link_cached},
                      {"seconds", seconds},
                      {"setup_seconds", setup_seconds},
                      {"module", module.empty() ? nlohmann::json(nullptr) : nlohmann::json(module.string())},
                      {"diagnostics", diagnostics},
                      {"log", log.empty() ? nlohmann::json(nullptr) : nlohmann::json(log.string())},
                      {"warnings", warnings}};
  if (!link_explain.empty()) j["link_explain"] = link_explain;
  if (!headers.empty()) j["headers"] = headers;
  return j;
}

std::string BuildReport::summary() const {
  std::string s;
  for (const auto& w : warnings) s += "warning: " + w + "\n";
  if (!ok && error_kind != "compile_error") return s + error_kind + ": " + error + "\n";
  for (const auto& u : units) {
    if (!u.explain.empty()) s += "  " + u.source + ": " + u.explain + "\n";
  }
  if (!link_explain.empty()) s += "  link: " + link_explain + "\n";
  if (!ok) return s + "compile_error:\n" + diagnostics + (log.empty() ? "" : "(full log: " + log.string() + ")\n");
  s += "built " + module.string() + " (" + mode + " mode, " + to_string(device) + (arch.empty() ? "" : ", " + arch) + "): " +
       std::to_string(compiled()) + " of " + std::to_string(units.size()) + " units compiled, " +
       (link_cached ? "link cached" : "linked") + ", " + format_seconds(seconds);
  if (setup_seconds > 0.5) s += " (" + format_seconds(setup_seconds) + " one-time environment setup)";
  return s + "\n";
}

namespace {

// Units that use a PCH get "-include <runtime>/<name>" appended to their flags now; the PCH
// itself is made only when such a unit misses the cache, inside its job, so units without one
// (nvcc) start at once. Returns each unit's PCH, if it needs one.
//
// A PCH is made with anvil's flags alone, those before the unit's "@marker", and named by them. The
// flags after it are the candidate's (load_inline's extra_cflags) and never name one: a PCH named by
// them cost a new 757 MB file and 60 s of g++ for each new harmless flag (-DANVIL_NONCE=<time>),
// never evicted, so a policy exploring flags filled the cache's disk. g++ checks a PCH against the
// unit's own flags and macros as it includes it (-include <name> takes <name>.gch when valid): where
// the candidate's flags leave the headers' meaning as it was (-O3, -DNONCE=1, -Werror) the PCH
// serves; where they change it (-DNDEBUG, -O0, -std=c++20, -mavx2: a macro the headers test, a
// language or target setting) g++ reads the plain header beside it, slower and as correct. So the
// runtime area holds one PCH per marker and anvil flag set, whatever flags candidates pass.
// -Winvalid-pch (a PCH not taken, said in the output) only where no candidate flag follows: there it
// would be anvil's own mistake; after a candidate's flags the fallback is expected, and their -Werror
// would make it a compile error.
struct PchNeed {
  std::string name, header;
  std::vector<std::string> flags;
};

std::vector<std::optional<PchNeed>> plan_pchs(const Builder& b, Plan& plan) {
  std::vector<std::optional<PchNeed>> pch_needs(plan.units.size());
  for (size_t i = 0; i < plan.units.size(); ++i) {
    Unit& u = plan.units[i];
    for (const std::string marker : {"compat_pch.h", "extension_pch.h"}) {
      bool wants = false;
      for (const auto& f : u.flags) wants |= f == "@" + marker;
      if (!wants) continue;
      std::vector<std::string> flags, pch_flags;
      bool after_marker = false, candidate_flags = false;
      for (const auto& f : u.flags) {
        if (f == "@" + marker) {
          after_marker = true;
          continue;
        }
        flags.push_back(f);
        candidate_flags |= after_marker;
        // The module's name is the unit's alone: torch's headers never read it, and a PCH made
        // with it would serve that one name (every load_inline name cost 42 s and a 757 MB PCH).
        if (!after_marker && !starts_with(f, "-DTORCH_EXTENSION_NAME=")) pch_flags.push_back(f);
      }
      std::string header = marker == "compat_pch.h" ? compat_pch_header(plan.cuda) : "#include <torch/extension.h>\n";
      // A PCH is made with (and named by) anvil's flags and the header.
      Hasher ph;
      ph.add("header", header);
      for (const auto& f : pch_flags) ph.add("flag", f);
      std::string pch = marker.substr(0, marker.size() - 2) + "-" + ph.hex().substr(0, 16) + ".h";
      pch_needs[i] = PchNeed{pch, header, pch_flags};
      flags.push_back("-include");
      flags.push_back((b.runtime_dir() / pch).string());
      if (!candidate_flags) flags.push_back("-Winvalid-pch");
      u.flags = flags;
    }
  }
  return pch_needs;
}

// anvil's torch runtime (libanvil_torch.so) built into `work`; what failed goes to *log.
bool build_runtime(Builder& b, const fs::path& work, std::string* log) {
  const Environment& env = b.env_;
  bool cuda = torch_has_cuda(env);
  std::vector<std::string> argv = {env.cxx.path.string(), "-std=c++17", "-O2", "-shared", "-fPIC",
                                   "-fvisibility=hidden", "-I" + env.anvil_include().string()};
  auto tf = torch_compile_flags(env, "anvil_torch");
  argv.insert(argv.end(), tf.begin(), tf.end());
  if (cuda) {
    argv.push_back("-DANVIL_WITH_CUDA");
    argv.insert(argv.end(), {"-isystem", env.cuda_include().string()});
    if (env.cudnn.found()) {
      argv.push_back("-DANVIL_WITH_CUDNN");
      argv.insert(argv.end(), {"-isystem", env.cudnn.include_dir.string()});
    }
  }
  argv.push_back((env.share() / "runtime" / "anvil_torch.cpp").string());
  argv.push_back("-o");
  argv.push_back((work / "libanvil_torch.so").string());
  argv.push_back(kKeepStaticSymbolsLocal);
  auto lf = torch_link_flags(env);
  argv.insert(argv.end(), lf.begin(), lf.end());
  if (cuda) {
    argv.push_back("-L" + env.cuda_lib().string());
    argv.push_back("-lcudart");
  }
  bool cut = false;
  JailResult r = b.run_tool(argv, "", {{work, true}}, &cut);
  Builder::take_back(work);
  if (!r.ok()) *log += "building anvil's torch runtime failed (" + r.describe() + "):\n" + r.output;
  return r.ok();
}

// "kernels/extra.h added, kernels/old.h removed": how the stage's names differ from the previous
// build's (its record's "stage").
std::string names_changed(const Plan& plan, const nlohmann::json& prev) {
  std::set<std::string> before, now;
  const nlohmann::json old = prev.is_object() ? prev.value("stage", nlohmann::json::array()) : nlohmann::json::array();
  for (const auto& n : old) {
    if (n.is_string()) before.insert(n.get<std::string>());
  }
  for (const auto& n : plan.staged()) now.insert(n);
  std::vector<std::string> said;
  for (const auto& n : now) {
    if (!before.count(n)) said.push_back(n + " added");
  }
  for (const auto& n : before) {
    if (!now.count(n)) said.push_back(n + " removed");
  }
  if (said.size() > 3) said.resize(3), said.push_back("...");
  return said.empty() ? "the stage's files changed" : join(said, ", ");
}

// Why each unit was compiled or found, against the workdir's previous record (--explain).
void explain_units(const Builder& b, const Plan& plan, const std::vector<UnitState>& states, const nlohmann::json& prev,
                   BuildReport& report) {
  nlohmann::json prev_units = prev.is_object() ? prev.value("units", nlohmann::json::object()) : nlohmann::json();
  for (size_t i = 0; i < states.size(); ++i) {
    UnitReport& ur = report.units[i];
    const UnitState& st = states[i];
    const nlohmann::json p = prev_units.is_object() && prev_units.contains(ur.source) ? prev_units[ur.source]
                                                                                       : nlohmann::json();
    if (!ur.cached && !st.unkeyable.empty()) {
      ur.explain = "compiled, for this build alone: " + st.unkeyable;
    } else if (ur.cached) {
      ur.explain = (p.is_object() && p.value("object", "") == st.object) ? "up to date (cached)"
                                                                        : "found in the cache (built before)";
    } else if (p.is_null()) {
      ur.explain = prev.is_null() ? "compiled: no previous build in this workdir" : "compiled: new source file";
    } else if (p.value("source_hash", "") != st.source_hash) {
      ur.explain = "compiled: source changed";
    } else if (p.value("tool", "") != st.tool) {
      ur.explain = "compiled: the compiler changed";
    } else if (p.value("flags_hash", "") != st.flags_hash) {
      ur.explain = "compiled: compiler flags changed";
    } else if (p.value("env", "") != b.env_.fingerprint) {
      ur.explain = "compiled: the environment changed (torch, CUDA, Python or anvil's headers)";
    } else if (prev.contains("stage") && p.value("names_hash", "") != st.names_hash) {
      ur.explain = "compiled: " + names_changed(plan, prev);
    } else {
      std::vector<std::string> changed;
      const nlohmann::json prev_deps = p.value("deps", nlohmann::json::object());
      for (const auto& [dep, h] : prev_deps.items()) {
        auto it = st.deps.find(dep);
        if (it == st.deps.end() || it->second != h.get<std::string>()) changed.push_back(dep);
      }
      for (const auto& [dep, h] : st.deps) {
        if (!prev_deps.contains(dep)) changed.push_back(dep);
      }
      ur.explain = changed.empty() ? "compiled: not in the cache (cleared or evicted)"
                                   : "compiled: " + join(changed, ", ") + " changed";
    }
    if (!ur.ok) ur.explain = "failed to compile";
  }
}

// The units' objects linked into the module, cached by what went in (found there when linked
// before), and the build recorded for --explain. Returns the cached module, or an empty path when
// the link failed (what it printed into *raw, or the line of a limit that stopped it into *stops).
fs::path link_module(Builder& b, const Plan& plan, const std::vector<UnitState>& states, const nlohmann::json& prev,
                     const fs::path& record_path, BuildReport& report, std::string* raw, std::string* stops) {
  const Environment& env = b.env_;
  std::error_code ec;
  std::set<std::string> libs;
  for (const auto& st : states) libs.insert(st.libs.begin(), st.libs.end());
  std::vector<std::string> link = plan.link_flags;
  if (libs.count("cublas")) {
    if (env.cublas.found() && !env.cublas.library_dir.empty()) link.push_back("-L" + env.cublas.library_dir.string());
    link.insert(link.end(), {"-lcublas", "-lcublasLt"});
  }
  if (libs.count("cudnn")) {
    if (!env.cudnn.library_dir.empty()) link.push_back("-L" + env.cudnn.library_dir.string());
    link.push_back(env.cudnn.library.empty() ? "-lcudnn" : "-l:" + env.cudnn.library);
  }
  if (plan.needs_runtime) {
    link.push_back("-L" + b.runtime_dir().string());
    link.push_back("-lanvil_torch");
    link.push_back("-Wl,-rpath," + b.runtime_dir().string());
  }
  Hasher mk;
  mk.add("format", kModuleFormat).add("env", env.fingerprint).add("name", plan.module_name);
  for (const auto& st : states) mk.add("object", st.object);
  for (const auto& f : link) mk.add("link", f);
  std::string mkey = mk.hex();
  fs::path mdir = b.modules() / shard(mkey);
  fs::path module_cached = mdir / (plan.module_name + ".so");
  std::string prev_module = prev.is_object() ? prev.value("module", std::string()) : std::string();
  if (fs::exists(module_cached, ec)) {
    report.link_cached = true;
    report.link_explain = prev_module == mkey ? "up to date (cached)" : "found in the cache (linked before)";
  } else {
    fs::path work = b.tool_dir("link");
    std::vector<std::string> argv = {env.cxx.path.string(), "-shared", kKeepStaticSymbolsLocal, "-o",
                                     (work / (plan.module_name + ".so")).string()};
    std::vector<JailBind> binds = {{work, true}};
    for (const auto& st : states) {
      argv.push_back(b.object_path(st.object).string());
      binds.push_back({b.object_path(st.object), false});
    }
    argv.insert(argv.end(), link.begin(), link.end());
    auto tl = Clock::now();
    bool cut = false;
    JailResult r = b.run_tool(argv, "", std::move(binds), &cut);
    Builder::take_back(work);
    if (r.ok()) {
      fs::create_directories(mdir.parent_path(), ec);
      if (::rename(work.c_str(), mdir.c_str()) != 0 && !fs::exists(module_cached, ec)) {
        std::string e;
        copy_file_atomic(work / (plan.module_name + ".so"), module_cached, &e);
      }
      report.link_explain = "linked in " + format_seconds(since(tl)) +
                            (prev_module.empty() ? "" : prev_module == mkey ? " (cache was cleared)"
                                                                            : " (objects or link flags changed)");
    } else {
      std::string line = b.stopped_by_limit("link", r, cut);
      if (line.empty()) {
        *raw += r.output + "\nlink: " + r.describe() + "\n";
      } else {
        *stops += line + "\n";
      }
      module_cached.clear();
      report.link_explain = "link failed";
    }
    remove_tree(work);
  }
  // Record the build for --explain.
  if (!record_path.empty()) {
    nlohmann::json units_rec = nlohmann::json::object();
    for (size_t i = 0; i < states.size(); ++i) {
      const auto& st = states[i];
      units_rec[report.units[i].source] = {{"source_hash", st.source_hash}, {"flags_hash", st.flags_hash},
                                           {"tool", st.tool}, {"env", env.fingerprint},
                                           {"names_hash", st.names_hash}, {"deps", st.deps}, {"object", st.object}};
    }
    std::string e;
    write_file_atomic(record_path,
                      json_text(nlohmann::json{{"units", units_rec}, {"stage", plan.staged()}, {"module", mkey}}, 1), &e);
  }
  return module_cached;
}

// The report's end: the full log written, the module copied out, or the error said: the
// environment's (the compilers not confined, the PCH or the runtime not built) or the candidate's.
void finish_report(const Builder& b, bool units_ok, const fs::path& module_cached, const fs::path& module_out,
                   const fs::path& log_path, const std::string& setup_log, const std::string& raw,
                   const std::string& stops, bool pch_failed, BuildReport& report) {
  std::string full_log = b.log_ + setup_log + raw;
  if (!log_path.empty()) {
    std::string e;
    write_file_atomic(log_path, full_log, &e);
    report.log = log_path;
  }
  if (units_ok) {
    std::string e;
    if (!copy_file_atomic(module_cached, module_out, &e)) {
      report.error_kind = "environment_error";
      report.error = "cannot write " + module_out.string() + ": " + e;
    } else {
      report.ok = true;
      report.module = module_out;
    }
  } else if (report.error_kind.empty()) {
    if (!b.jail_error_.empty()) {
      // Not the candidate's fault: the compilers could not be confined here, so none ran.
      report.error_kind = "environment_error";
      report.error = "cannot run the compilers confined: " + b.jail_error_;
    } else if (pch_failed) {
      report.error_kind = "environment_error";
      report.error = "could not precompile torch headers; see " + log_path.string();
      report.diagnostics = tail_lines(setup_log, 20);
    } else {
      report.error_kind = "compile_error";
      DiagnosticOptions dopt;
      dopt.strip_prefixes = {b.stage_dir_.string(), b.tmp().string()};
      dopt.full_log = log_path.empty() ? "" : log_path.string();
      report.diagnostics = stops + format_diagnostics(raw, dopt);
      report.error = "the candidate does not compile";
    }
  }
}

// The previous record of this workdir, for --explain (null when there is none or it is unreadable).
nlohmann::json previous_record(const fs::path& record_path) {
  if (record_path.empty()) return nullptr;
  std::string why;  // in the workdir: anyone's to replace (a FIFO, a sparse file of terabytes)
  if (auto text = read_regular(record_path, kMaxRecordBytes, &why)) {
    try {
      return nlohmann::json::parse(*text);
    } catch (const std::exception&) {
    }
  }
  return nullptr;
}

// What the failed units printed (*raw), and for a unit a limit stopped, its line (*stops; the
// output goes to the log only).
void failed_units_output(Builder& b, const BuildReport& report, const std::vector<std::string>& outputs,
                         const std::vector<std::string>& stopped, std::string* raw, std::string* stops) {
  for (size_t i = 0; i < outputs.size(); ++i) {
    if (report.units[i].ok) continue;
    if (stopped[i].empty()) {
      *raw += outputs[i];
    } else {
      *stops += stopped[i] + "\n";
      b.log(stopped[i] + "\n" + tail_lines(outputs[i], 20));
    }
  }
}

// Runs a Plan: compile every unit (cached), link (cached), copy the module out.
BuildReport run_plan(Builder& b, Plan& plan, const fs::path& module_out, const fs::path& record_path,
                     const fs::path& log_path, BuildReport report) {
  const Environment& env = b.env_;
  auto t0 = Clock::now();
  std::error_code ec;
  for (const fs::path& d : {b.objects(), b.manifests(), b.modules(), b.locks(), b.tmp()}) fs::create_directories(d, ec);

  // One-time environment artifacts.
  double pch_seconds = 0, runtime_seconds = 0;
  std::string setup_log;
  std::atomic<bool> pch_failed{false};  // anvil's environment is at fault, not the candidate
  std::mutex setup_mu;
  auto make_pch = [&](const std::string& name, const std::string& header, const std::vector<std::string>& flags) {
    fs::path out = b.runtime_dir() / (name + ".gch");
    std::string log_here;
    double seconds_here = 0;
    bool ok = ensure_artifact(b, out, name, [&](const fs::path& work, std::string* log) {
      std::string e;
      write_file_atomic(work / name, header, &e);
      write_file_atomic(b.runtime_dir() / name, header, &e);  // -include needs the header beside the .gch
      std::vector<std::string> argv = {env.cxx.path.string()};
      argv.insert(argv.end(), flags.begin(), flags.end());
      argv.insert(argv.end(), {"-x", "c++-header", (work / name).string(), "-o", (work / (name + ".gch")).string()});
      bool cut = false;
      JailResult r = b.run_tool(argv, "", {{work, true}}, &cut);
      Builder::take_back(work);
      if (!r.ok()) *log += "precompiling " + name + " failed (" + r.describe() + "):\n" + r.output;
      return r.ok();
    }, &log_here, &seconds_here);
    std::lock_guard<std::mutex> g(setup_mu);
    setup_log += log_here;
    pch_seconds += seconds_here;
    return ok;
  };
  std::vector<std::optional<PchNeed>> pch_needs = plan_pchs(b, plan);
  const std::string stage_names = Builder::names_hash(plan);
  fs::path runtime_lib = b.runtime_dir() / "libanvil_torch.so";
  std::thread runtime_thread;
  bool runtime_ok = true;
  if (plan.needs_runtime) {
    runtime_thread = std::thread([&] {
      std::string rlog;
      runtime_ok = ensure_artifact(b, runtime_lib, "libanvil_torch.so", [&](const fs::path& work, std::string* log) {
        return build_runtime(b, work, log);
      }, &rlog, &runtime_seconds);
      b.log(rlog);
    });
  }

  // Compile (or find) every unit in parallel.
  std::vector<UnitState> states(plan.units.size());
  std::vector<std::string> outputs(plan.units.size());
  std::vector<std::string> stopped(plan.units.size());  // a unit a limit stopped: the line that says which
  report.units.resize(plan.units.size());
  std::vector<std::function<void()>> jobs;
  for (size_t i = 0; i < plan.units.size(); ++i) {
    jobs.push_back([&, i] {
      const Unit& u = plan.units[i];
      UnitReport& ur = report.units[i];
      UnitState& st = states[i];
      ur.source = u.fixed ? fs::path(u.rel).filename().string() + " (anvil)" : u.rel;
      ur.tool = u.is_cuda ? "nvcc" : "c++";
      auto tu = Clock::now();
      b.base_key(u, stage_names, &st);
      if (b.lookup(plan, &st)) {
        ur.cached = true;
      } else {
        FileLock lock(b.locks() / (st.base.substr(0, 24) + ".lock"));
        if (b.lookup(plan, &st)) {
          ur.cached = true;  // another process compiled it while we waited
        } else if (pch_needs[i] && !make_pch(pch_needs[i]->name, pch_needs[i]->header, pch_needs[i]->flags)) {
          ur.ok = false;
          pch_failed = true;
          outputs[i] = u.rel + ": precompiling torch headers failed (see the log)\n";
        } else {
          ur.ok = b.compile(plan, u, &st, &outputs[i], &stopped[i]);
        }
        if (ur.ok) outputs[i].clear();  // only a failed unit's is shown
        b.keep_output(&outputs[i]);
      }
      ur.seconds = since(tu);
    });
  }
  run_parallel(jobs, b.opts_.jobs);
  if (runtime_thread.joinable()) runtime_thread.join();
  report.setup_seconds = pch_seconds + runtime_seconds;

  nlohmann::json prev = previous_record(record_path);
  explain_units(b, plan, states, prev, report);

  // A unit stopped by a limit is said in one line of its own; what the compiler printed on the
  // way (an #include of /dev/zero: megabytes of noise) goes to the full log only.
  std::string raw, stops;
  failed_units_output(b, report, outputs, stopped, &raw, &stops);
  bool units_ok = true;
  for (const auto& u : report.units) units_ok &= u.ok;

  // Link.
  fs::path module_cached;
  if (units_ok && plan.needs_runtime && !runtime_ok) {
    units_ok = false;
    report.error_kind = "environment_error";
    report.error = "could not build anvil's torch runtime (libanvil_torch.so); see the log";
  }
  if (units_ok) {
    module_cached = link_module(b, plan, states, prev, record_path, report, &raw, &stops);
    units_ok = !module_cached.empty();
  }

  finish_report(b, units_ok, module_cached, module_out, log_path, setup_log, raw, stops, pch_failed, report);
  report.seconds = since(t0);
  return report;
}

std::string resolve_arch(const Environment& env, const BuildOptions& opts, std::vector<std::string>* warnings) {
  if (!opts.arch.empty()) return opts.arch;
  if (const char* a = std::getenv("ANVIL_ARCH"); a && *a) return a;
  if (!env.gpus.empty()) {
    std::string a = arch_for_capability(env.gpus[0].capability);
    if (!a.empty()) return a;
  }
  warnings->push_back("no GPU found: building for sm_90a (Hopper); use --arch to choose another");
  return "sm_90a";
}

BuildReport environment_error(BuildReport r, const std::string& msg) {
  r.error_kind = "environment_error";
  r.error = msg;
  return r;
}

// anvil writes its record and log into DIR/build: a symlink there would send those writes
// elsewhere (as root, anywhere), so anything but a real directory is refused.
std::string check_build_dir(const fs::path& build_dir) {
  std::error_code ec;
  auto st = fs::symlink_status(build_dir, ec);
  if (ec || !fs::exists(st) || fs::is_directory(st)) return "";
  if (fs::is_symlink(st)) {
    return "build is a symbolic link (to " + fs::read_symlink(build_dir, ec).string() +
           "); anvil keeps its build log and record in build/: remove the link (rm build)";
  }
  return "build is not a directory; anvil keeps its build log and record in build/: remove it";
}

// load_inline's extra flags through the allow-list (flags.h): *out holds what passes; false with
// the refusal as a workdir_error (the candidate's to fix; the message names the flag).
bool check_spec_flags(const Environment& env, const SourcesSpec& spec, SourcesSpec* out, BuildReport* report) {
  std::vector<std::string> dirs;
  std::string err;
  if (const JailConfig* c = sandbox_config(env, &err)) dirs = c->build.dirs;  // what the compilers see
  for (const auto& p : toolchain_paths(env)) {
    std::error_code ec;
    dirs.push_back(p.lexically_normal().string());
    fs::path real = fs::canonical(p, ec);
    if (!ec) dirs.push_back(real.string());
  }
  struct Part {
    FlagKind kind;
    const std::vector<std::string>& given;
    std::vector<std::string>& kept;
  };
  for (const Part& part : {Part{FlagKind::Host, spec.cflags, out->cflags}, Part{FlagKind::Cuda, spec.cuda_cflags, out->cuda_cflags},
                           Part{FlagKind::Link, spec.ldflags, out->ldflags},
                           Part{FlagKind::IncludeDir, spec.include_dirs, out->include_dirs}}) {
    FlagCheck c = check_flags(part.kind, part.given, dirs);
    if (!c.ok()) {
      report->error_kind = "workdir_error";
      report->error = c.error;
      return false;
    }
    part.kept = c.flags;
    for (const auto& f : c.ignored) {
      report->warnings.push_back(std::string(flag_kind_name(part.kind)) + ": ignored " + f +
                                 ": anvil builds for the GPU it judges on" +
                                 (report->arch.empty() ? "" : " (" + report->arch + ")"));
    }
  }
  return true;
}

}  // namespace

namespace {

// The workdir's files into plan's stage list and snapshot, each read once beneath w.dir; "" or why not.
std::string take_snapshot(const Workdir& w, Plan* plan) {
  for (const auto& f : w.files) {
    std::string why;
    auto data = read_beneath(w.dir, f, kMaxCandidateFileBytes, &why);
    if (!data) return "cannot read " + f + ": it " + why;
    plan->stage_files.push_back(f);
    plan->snapshot[f] = std::move(*data);
  }
  return "";
}

}  // namespace

BuildReport build_workdir(const Environment& env, const fs::path& dir, const BuildOptions& opts) {
  auto t0 = Clock::now();
  BuildReport report;
  Workdir w;
  std::string err;
  if (!scan_workdir(dir, &w, &err)) {
    report.error_kind = "workdir_error";
    report.error = err;
    return report;
  }
  report.warnings = w.warnings;
  report.mode = to_string(w.mode);
  report.device = w.device;
  if (!env.cxx.found()) return environment_error(report, "no C++ compiler found: install g++ (apt-get install g++) or set CXX");
  if (w.device == Device::Cuda && !env.nvcc.found()) {
    return environment_error(report, "nvcc not found: this candidate has .cu files; install the CUDA toolkit or set "
                                     "CUDA_HOME (or ANVIL_NVCC)");
  }
  if (!env.torch.present) return environment_error(report, env.probe_error);

  Plan plan;
  plan.root = w.dir;
  plan.cuda = w.device == Device::Cuda;
  std::vector<std::string> gencode;
  if (plan.cuda) {
    report.arch = resolve_arch(env, opts, &report.warnings);
    if (!gencode_flags(report.arch, &gencode, &err)) return environment_error(report, err);
    if (std::string e = check_nvcc_for_arch(env.nvcc.version, report.arch); !e.empty()) return environment_error(report, e);
  }
  if (std::string e = take_snapshot(w, &plan); !e.empty()) {
    report.error_kind = "workdir_error";
    report.error = e;
    return report;
  }
  bool compat = w.mode == BindingMode::Compat;
  auto torch_flags = torch_compile_flags(env, plan.module_name);
  for (const auto& s : w.units) {
    Unit u;
    u.rel = s.rel;
    u.read_path = w.dir / s.rel;
    auto snap = plan.snapshot.find(s.rel);
    u.content = snap != plan.snapshot.end() ? &snap->second : nullptr;
    u.is_cuda = s.kind == UnitKind::Cuda;
    if (u.is_cuda) {
      u.flags = nvcc_flags(env, gencode);
      if (compat) {
        for (const auto& f : torch_flags) u.flags.push_back(f);
      }
    } else if (compat) {
      u.flags = host_flags(env, plan.cuda, s.kind == UnitKind::Binding ? kCompatBindingOpt : "-O3");
      u.flags.insert(u.flags.end(), torch_flags.begin(), torch_flags.end());
      if (s.kind == UnitKind::Binding) {
        u.flags.push_back("@compat_pch.h");
      }
    } else {
      u.flags = host_flags(env, plan.cuda, "-O3");
    }
    plan.units.push_back(u);
  }
  if (compat) {
    for (const auto& f : fixed_compat_files()) {
      fs::path pristine = env.share() / "workdir" / f;
      plan.overlay[f] = pristine;
      // The workdir's copy read as a hostile file (a FIFO there once hung the build, a link to
      // /dev/zero read without end): regular, bounded, or not compared.
      std::string why;
      auto theirs = read_beneath(w.dir, f, kMaxCandidateFileBytes, &why);
      auto ours = read_file(pristine);
      if (ours && (theirs ? *theirs != *ours : why != "does not exist")) {
        report.warnings.push_back(f + " differs from the fixed copy: anvil builds with its own (your changes are ignored)");
      }
    }
    Unit b;
    b.rel = (env.share() / "workdir" / "binding.cpp").string();
    b.read_path = b.rel;
    b.fixed = true;
    b.flags = host_flags(env, plan.cuda, kCompatBindingOpt);
    b.flags.insert(b.flags.end(), torch_flags.begin(), torch_flags.end());
    b.flags.push_back("@compat_pch.h");
    plan.units.push_back(b);
    plan.link_flags = torch_link_flags(env);
  } else {
    Unit m;
    m.rel = (env.share() / "runtime" / "anvil_module.cpp").string();
    m.read_path = m.rel;
    m.fixed = true;
    m.flags = host_flags(env, false, "-O2");
    m.flags.push_back("-DANVIL_MODULE_NAME=" + plan.module_name);
    plan.units.push_back(m);
    plan.needs_runtime = true;
  }
  if (plan.cuda) {
    plan.link_flags.push_back("-L" + env.cuda_lib().string());
    plan.link_flags.push_back("-lcudart");
  }
  Builder b(env, opts);
  fs::path build_dir = w.dir / "build";
  if (std::string e = check_build_dir(build_dir); !e.empty()) {
    report.error_kind = "workdir_error";
    report.error = e;
    return report;
  }
  std::error_code ec;
  fs::create_directories(build_dir, ec);
  report = run_plan(b, plan, w.dir / (plan.module_name + ".so"), build_dir / "anvil-build.json",
                    build_dir / "build.log", report);
  // What anvil wrote into the workdir belongs to the workdir's owner (an agent's shell edits it).
  for (const fs::path& p : {build_dir, build_dir / "anvil-build.json", build_dir / "build.log", report.module}) {
    if (!p.empty()) own_like(p, w.dir);
  }
  report.seconds = since(t0);
  if (!opts.explain) {
    for (auto& u : report.units) u.explain.clear();
    report.link_explain.clear();
  }
  return report;
}

namespace {

BuildReport build_sources_as_given(const Environment& env, const SourcesSpec& spec, const BuildOptions& opts) {
  auto t0 = Clock::now();
  BuildReport report;
  report.mode = "torch-extension";
  if (spec.name.empty() || spec.name.find_first_not_of(
                               "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_") != std::string::npos) {
    report.error_kind = "workdir_error";
    report.error = "bad module name '" + spec.name + "': use letters, digits and _";
    return report;
  }
  if (!env.cxx.found()) return environment_error(report, "no C++ compiler found: install g++ or set CXX");
  if (!env.torch.present) return environment_error(report, env.probe_error);
  Plan plan;
  plan.module_name = spec.name;
  for (const auto& s : spec.sources) plan.cuda |= s.extension() == ".cu";
  report.device = plan.cuda ? Device::Cuda : Device::Cpu;
  if (plan.cuda && !env.nvcc.found()) return environment_error(report, "nvcc not found: install the CUDA toolkit or set CUDA_HOME");
  std::vector<std::string> gencode;
  std::string err;
  if (plan.cuda) {
    report.arch = resolve_arch(env, opts, &report.warnings);
    if (!gencode_flags(report.arch, &gencode, &err)) return environment_error(report, err);
  }
  SourcesSpec checked;
  if (!check_spec_flags(env, spec, &checked, &report)) return report;
  auto torch_flags = torch_compile_flags(env, spec.name);
  // Sources and headers are staged like a workdir's kernels (read-only in the compiler's jail), by
  // file name, so messages read "main.cpp:3: ..." and nothing beside them is in view.
  auto stage = [&](const fs::path& file, const char* what) {
    std::string rel = file.filename().string();
    if (std::string bad = candidate_name_problem(rel); !bad.empty()) {  // as a workdir's copy refuses it
      report.error_kind = "workdir_error";
      report.error = std::string(what) + " " + bad;
      return false;
    }
    std::error_code ec;
    auto st = fs::status(file, ec);
    if (ec || !fs::is_regular_file(st)) {
      report.error_kind = "workdir_error";
      report.error = std::string(what) + " " + file.string() + (ec ? " does not exist" : " is not a regular file");
      return false;
    }
    if (std::string e = candidate_file_too_large(rel, fs::file_size(file, ec)); !e.empty() || plan.overlay.count(rel)) {
      report.error_kind = "workdir_error";
      report.error = !e.empty() ? e : "two sources or headers are named " + rel + "; give them different names";
      return false;
    }
    plan.overlay[rel] = fs::absolute(file);
    return true;
  };
  for (const auto& h : spec.headers) {
    if (!stage(h, "header")) return report;
  }
  for (const auto& src : spec.sources) {
    if (!stage(src, "source")) return report;
    std::string rel = src.filename().string();
    Unit u;
    u.rel = rel;
    u.read_path = fs::absolute(src);
    u.is_cuda = src.extension() == ".cu";
    if (u.is_cuda) {
      u.flags = load_inline_nvcc_flags(env, gencode);
      u.flags.insert(u.flags.end(), torch_flags.begin(), torch_flags.end());
      u.flags.insert(u.flags.end(), checked.cuda_cflags.begin(), checked.cuda_cflags.end());
    } else {
      u.flags = host_flags(env, plan.cuda, "-O2");
      u.flags.insert(u.flags.end(), torch_flags.begin(), torch_flags.end());
      u.flags.push_back("@extension_pch.h");  // anvil's flags before it make the PCH; the candidate's follow
      u.flags.insert(u.flags.end(), checked.cflags.begin(), checked.cflags.end());
    }
    for (const auto& inc : checked.include_dirs) u.flags.push_back("-I" + inc);
    u.key_path = rel;  // load_inline writes to a fresh temp dir each time
    plan.units.push_back(u);
  }
  plan.link_flags = torch_link_flags(env);
  if (plan.cuda) {
    plan.link_flags.push_back("-L" + env.cuda_lib().string());
    plan.link_flags.push_back("-lcudart");
  }
  plan.link_flags.insert(plan.link_flags.end(), checked.ldflags.begin(), checked.ldflags.end());
  Builder b(env, opts);
  std::error_code ec;
  fs::create_directories(spec.out_dir, ec);
  report = run_plan(b, plan, spec.out_dir / (spec.name + ".so"), spec.out_dir / "anvil-build.json",
                    spec.out_dir / "build.log", report);
  report.seconds = since(t0);
  if (!opts.explain) {
    for (auto& u : report.units) u.explain.clear();
    report.link_explain.clear();
  }
  return report;
}

// A load_inline .cu's text with its `#include <torch/extension.h>` taken out, or nullopt. That header
// is torch/all.h (nn, optim, jit, data, serialize, fft, linalg, ...) and torch/python.h (pybind11):
// through nvcc's three passes it is most of a single file's cold build (34 s of a 2-core machine's
// nvcc for KernelBench's few-shot add; 16 s with torch/types.h alone, which load_inline's prelude
// includes first). A kernel file rarely uses more than torch/types.h gives (ATen, torch::Tensor, the
// factories), so it is compiled without it first; one that names what only the full header has is
// left as it is, and one whose lighter text does not compile is compiled as it is (build_sources).
// Where the lighter text compiles, the module is the one the full headers give: the same code, less
// of torch declared beside it.
std::optional<std::string> lighter_cuda_text(const std::string& text) {
  static const std::regex include(R"((^|\n)[ \t]*#[ \t]*include[ \t]*<torch/extension\.h>[^\n]*)");
  static const std::regex needs_more(
      R"(py::|pybind11|PYBIND11_|THP|TORCH_LIBRARY|torch::(nn|jit|optim|data|serialize|autograd|fft|linalg|special|cuda|nested|sparse|python|mps|xpu|enumtype)\b)");
  if (!std::regex_search(text, include) || std::regex_search(text, needs_more)) return std::nullopt;
  return std::regex_replace(text, include, "$1// anvil: <torch/extension.h> left out; <torch/types.h> is included above");
}

// The lighter text (lighter_cuda_text) with load_inline's own prelude, `#include <torch/types.h>` (all
// of ATen: 16 s of the few-shot add's nvcc on two cores), replaced by the fewest headers its calls
// need: ATen's Tensor (torch::Tensor, its methods and operators, TORCH_CHECK, the dtypes; ATen's headers
// each naming the per-operator headers it needs, AT_PER_OPERATOR_HEADERS, as torch's own build), the per-operator header
// of each function it calls as torch::NAME( or at::NAME( that ATen has one for (ATen/ops/NAME.h:
// zeros_like, empty, ...), ATen/Dispatch.h where it dispatches on dtypes, and torch's names of the
// dtypes (torch::kFloat32). torch::NAME is at::NAME there, as in torch/types.h's `using namespace at`
// (torch's own factories wrap at::'s to set requires_grad, which a kernel's output never asks). A file
// that needs more does not compile this way and is compiled with torch/types.h (build_sources).
std::optional<std::string> fewest_headers_text(const std::string& text, const std::vector<std::string>& include_paths) {
  static const std::regex types(R"((^|\n)[ \t]*#[ \t]*include[ \t]*<torch/types\.h>[^\n]*)");
  static const std::regex call(R"(\b(?:torch|at)::(\w+)\s*\()");
  std::smatch m;
  if (!std::regex_search(text, m, types)) return std::nullopt;
  std::set<std::string> ops;
  for (auto it = std::sregex_iterator(text.begin(), text.end(), call); it != std::sregex_iterator(); ++it) {
    std::string name = (*it)[1];
    for (const auto& inc : include_paths) {
      std::error_code ec;
      if (fs::is_regular_file(fs::path(inc) / "ATen" / "ops" / (name + ".h"), ec)) {
        ops.insert(name);
        break;
      }
    }
  }
  std::string prelude = "// anvil: <torch/types.h> left out; the fewest headers of what this file calls instead\n"
                        "#ifndef AT_PER_OPERATOR_HEADERS\n#define AT_PER_OPERATOR_HEADERS\n#endif\n"
                        "#include <ATen/core/Tensor.h>\n#include <ATen/TensorOperators.h>\n";
  if (text.find("AT_DISPATCH") != std::string::npos) prelude += "#include <ATen/Dispatch.h>\n";
  for (const auto& op : ops) prelude += "#include <ATen/ops/" + op + ".h>\n";
  prelude +=
      "namespace torch {\nusing namespace at;\nusing Dtype = at::ScalarType;\n"
      "constexpr auto kUInt8 = at::kByte;\nconstexpr auto kInt8 = at::kChar;\nconstexpr auto kInt16 = at::kShort;\n"
      "constexpr auto kInt32 = at::kInt;\nconstexpr auto kInt64 = at::kLong;\nconstexpr auto kFloat16 = at::kHalf;\n"
      "constexpr auto kFloat32 = at::kFloat;\nconstexpr auto kFloat64 = at::kDouble;\n}  // namespace torch";
  return text.substr(0, static_cast<size_t>(m.position(0))) + m[1].str() + prelude +
         text.substr(static_cast<size_t>(m.position(0) + m.length(0)));
}

}  // namespace

// A load_inline module's .cu units compiled with the fewest of torch's headers that compile them: the
// fewest (fewest_headers_text), else torch/types.h without torch/extension.h (lighter_cuda_text), else
// as given; a failed try's seconds are added to the next's. A file that names what only the full header
// declares, or is larger than 4 MiB, is compiled as given at once.
BuildReport build_sources(const Environment& env, const SourcesSpec& spec, const BuildOptions& opts) {
  constexpr uintmax_t kLightMax = 4u << 20;  // a larger source is compiled as it is
  struct Try {
    const char* headers;
    SourcesSpec spec;
    bool changed = false;
  };
  std::vector<Try> tries = {{"fewest", spec}, {"types", spec}};
  TempDir dir;
  for (size_t i = 0; i < spec.sources.size(); ++i) {
    const fs::path& src = spec.sources[i];
    std::error_code ec;
    if (src.extension() != ".cu" || !fs::is_regular_file(src, ec) || fs::file_size(src, ec) > kLightMax) continue;
    auto text = read_file(src);
    auto less = text ? lighter_cuda_text(*text) : std::nullopt;
    if (!less) continue;
    auto fewest = fewest_headers_text(*less, env.torch.include_paths);
    try {
      if (dir.path().empty()) dir = TempDir(cache_dir(env, CacheArea::kTmp), "light");
    } catch (const std::exception&) {
      break;
    }
    std::string err;
    for (auto& t : tries) {
      const std::optional<std::string>& body = &t == &tries.front() ? fewest : less;
      if (!body) continue;
      fs::path copy = dir.path() / t.headers / src.filename();
      if (!write_file_atomic(copy, *body, &err)) continue;
      t.spec.sources[i] = copy;
      t.changed = true;
    }
  }
  double tried = 0;
  for (auto& t : tries) {
    if (!t.changed) continue;
    BuildReport r = build_sources_as_given(env, t.spec, opts);
    r.seconds += tried;
    if (r.ok || r.error_kind != "compile_error") {
      if (r.ok) r.headers = t.headers;
      return r;
    }
    tried = r.seconds;
  }
  BuildReport full = build_sources_as_given(env, spec, opts);  // its own diagnostics, if it fails too
  full.seconds += tried;
  if (tried > 0 && full.ok) full.headers = "as_given";
  return full;
}

}  // namespace anvil
