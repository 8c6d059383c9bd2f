#include "anvil/env/workdir.h"

#include <sys/stat.h>

#include <algorithm>
#include <cstdio>
#include <regex>

#include "anvil/env/cache_layout.h"
#include "anvil/env/toolchain.h"
#include "anvil/util/fs.h"
#include "anvil/util/hash.h"
#include "anvil/util/json_text.h"
#include "anvil/util/strings.h"

namespace anvil {

const char* to_string(BindingMode m) { return m == BindingMode::Fast ? "fast" : "compat"; }

const std::vector<std::string>& fixed_compat_files() {
  static const std::vector<std::string> files = {"binding.cpp", "binding_registry.h"};
  return files;
}

std::string candidate_file_too_large(const std::string& rel, uint64_t bytes) {
  if (bytes <= kMaxCandidateFileBytes) return "";
  return rel + " is " + human_size(bytes) + "; a candidate's files may be at most 64 MiB each";
}

namespace {

std::string tree_too_large(uint64_t bytes) {
  return "the candidate's files come to " + human_size(bytes) + "; a candidate's files may be at most 256 MiB in all";
}

// Whether a workdir entry is left out of a copy: anvil's own outputs (the module's name whatever it
// is: a directory there would stop the build's module from being written), caches, version control.
bool left_out(const fs::path& rel) {
  std::string first = rel.begin()->string();
  if (first == "build" || first == "__pycache__" || first == ".git") return true;
  return rel.filename() == "cuda_extension.so";
}

// A name as a message shows it: UTF-8 as it is, every other byte and control character escaped.
std::string shown_name(const std::string& name) {
  static constexpr size_t kShown = 120;
  std::string out;
  size_t i = 0;
  while (i < name.size() && out.size() < kShown) {
    auto c = static_cast<unsigned char>(name[i]);
    size_t n = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 0;
    if (c >= 0x20 && c != 0x7f && n > 0 && i + n <= name.size() && is_utf8(std::string_view(name).substr(i, n))) {
      out.append(name, i, n);
      i += n;
      continue;
    }
    char buf[8];
    std::snprintf(buf, sizeof buf, "\\x%02x", c);
    out += c == '\n' ? "\\n" : c == '\t' ? "\\t" : c == '\r' ? "\\r" : buf;
    ++i;
  }
  return i < name.size() ? out + "..." : out;
}

}  // namespace

std::string candidate_name_problem(const std::string& rel) {
  constexpr const char* kRule = "; name a candidate's files in UTF-8, without control characters";
  if (!is_utf8(rel)) return shown_name(rel) + ": the name is not UTF-8" + kRule;
  for (char c : rel) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) return shown_name(rel) + ": the name has a control character" + kRule;
  }
  if (rel.size() > kMaxCandidatePathBytes) {
    return shown_name(rel) + ": the path is " + std::to_string(rel.size()) + " bytes long; a candidate's paths may be at most " +
           std::to_string(kMaxCandidatePathBytes) + " bytes";
  }
  return "";
}

bool copy_candidate_files(const fs::path& src, const fs::path& dst, std::string* err, bool* refused) {
  if (refused) *refused = false;
  auto refuse = [&](const std::string& why) {
    *err = why;
    if (refused) *refused = true;
    return false;
  };
  // First what would be copied, by lstat alone: nothing is opened before the limits pass.
  std::vector<fs::path> files;
  uint64_t total = 0;
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(src, ec); !ec && it != fs::recursive_directory_iterator();
       it.increment(ec)) {
    fs::path rel = it->path().lexically_relative(src);
    auto st = it->symlink_status(ec);
    if (left_out(rel)) {
      if (fs::is_directory(st)) it.disable_recursion_pending();
      continue;
    }
    if (!fs::is_directory(st) && !fs::is_regular_file(st)) continue;  // a symlink, FIFO, socket or device: skipped
    // A name that cannot be copied, built or written into a record (or a folder whose files' could
    // not): refused before anything is opened, and before a folder too deep is walked into.
    if (std::string bad = candidate_name_problem(rel.string()); !bad.empty()) return refuse(bad);
    if (fs::is_directory(st)) continue;
    uint64_t size = fs::file_size(it->path(), ec);
    if (ec) continue;
    if (std::string e = candidate_file_too_large(rel.generic_string(), size); !e.empty()) return refuse(e);
    total += size;
    if (total > kMaxCandidateBytes) return refuse(tree_too_large(total));
    files.push_back(rel);
    if (files.size() > kMaxCandidateFiles) {
      return refuse("the candidate has more than " + std::to_string(kMaxCandidateFiles) + " files");
    }
  }
  if (ec) {
    // A folder of the candidate's it cannot read (its own chmod, when anvil is not root) is the
    // candidate's doing, as a file too large is: refused, so a policy cannot trade its reward for
    // no answer. Anything else (the copy's source gone) is anvil's.
    std::string why = "cannot list " + src.string() + ": " + ec.message();
    if (ec == std::errc::permission_denied || ec == std::errc::operation_not_permitted ||
        ec == std::errc::filename_too_long) {
      return refuse(why);
    }
    *err = why;
    return false;
  }
  fs::create_directories(dst, ec);
  for (const auto& rel : files) {
    // Bounded again while copying: a file that became something else is refused, not read; one the
    // candidate made unreadable, or changed meanwhile, or whose name the copy's side cannot hold, is
    // the candidate's doing too.
    bool from_failed = false;
    if (!copy_regular_atomic(src / rel, dst / rel, kMaxCandidateFileBytes, err, &from_failed)) {
      return from_failed ? refuse("the candidate's " + rel.generic_string() + " cannot be copied: " + *err) : false;
    }
  }
  return true;
}

bool copy_single_file_candidate(const fs::path& file, const fs::path& dst, std::string* err) {
  static const std::vector<std::string> kSuffixes = {".c",   ".cc", ".cpp", ".cxx", ".cu",  ".h",
                                                     ".hh",  ".hpp", ".hxx", ".cuh", ".inl", ".inc"};
  std::error_code ec;
  fs::path src = file.parent_path().empty() ? fs::path(".") : file.parent_path();
  std::vector<fs::path> files;
  uint64_t total = 0;
  for (auto it = fs::recursive_directory_iterator(src, ec); !ec && it != fs::recursive_directory_iterator();
       it.increment(ec)) {
    fs::path rel = it->path().lexically_relative(src);
    auto st = it->symlink_status(ec);
    if (fs::is_directory(st)) {
      std::string name = rel.filename().string();
      if (it.depth() >= 2 || left_out(rel) || (!name.empty() && name[0] == '.')) it.disable_recursion_pending();
      continue;
    }
    std::string ext = rel.extension().string();
    if (!fs::is_regular_file(st) || std::find(kSuffixes.begin(), kSuffixes.end(), ext) == kSuffixes.end()) continue;
    uint64_t size = fs::file_size(it->path(), ec);
    if (ec) continue;
    if (std::string e = candidate_file_too_large(rel.generic_string(), size); !e.empty()) {
      *err = e;
      return false;
    }
    total += size;
    files.push_back(rel);
    if (files.size() > kMaxSiblingFiles || total > kMaxCandidateBytes) {
      *err = "the directory of " + file.filename().string() + " holds more than " +
             std::to_string(kMaxSiblingFiles) + " C/C++/CUDA files (or 256 MiB of them), which anvil copies for its "
             "load() calls: put the candidate in a directory of its own";
      return false;
    }
  }
  if (ec) {
    *err = "cannot list " + src.string() + ": " + ec.message();
    return false;
  }
  fs::create_directories(dst, ec);
  if (!copy_regular_atomic(file, dst / "model_new.py", kMaxCandidateFileBytes, err)) return false;
  for (const auto& rel : files) {
    if (!copy_regular_atomic(src / rel, dst / rel, kMaxCandidateFileBytes, err)) return false;
  }
  return true;
}

bool scan_workdir(const fs::path& dir_in, Workdir* out, std::string* err) {
  std::error_code ec;
  fs::path dir = fs::absolute(dir_in, ec);
  if (!fs::is_directory(dir, ec)) {
    *err = "workdir " + dir_in.string() + " does not exist or is not a directory";
    return false;
  }
  Workdir w;
  w.dir = dir;
  fs::path kernels = dir / "kernels";
  if (!fs::is_directory(kernels, ec)) {
    *err = dir_in.string() + " has no kernels/ directory: put CUDA kernels in kernels/*.cu (with extern \"C\" "
           "launchers) and their bindings in kernels/*_binding.cpp";
    return false;
  }
  // The module's name: anvil writes the built module there, which a directory would stop.
  if (fs::is_directory(fs::symlink_status(dir / "cuda_extension.so", ec))) {
    *err = "cuda_extension.so is a directory; anvil writes the built module there: remove it";
    return false;
  }
  uint64_t total = 0;
  for (const fs::path& rel : list_files(kernels)) {
    fs::path full = kernels / rel;
    std::string name = "kernels/" + rel.generic_string();
    if (std::string bad = candidate_name_problem(name); !bad.empty()) {
      *err = bad;
      return false;
    }
    if (fs::is_symlink(full, ec)) {
      fs::path target = fs::weakly_canonical(full, ec);
      fs::path root = fs::weakly_canonical(dir, ec);
      auto rel_target = target.lexically_relative(root);
      if (rel_target.empty() || starts_with(rel_target.generic_string(), "..")) {
        *err = name + " is a symbolic link to " + target.string() + ", outside the workdir; copy the file instead";
        return false;
      }
    }
    // Only regular files of bounded size are read (hashed, staged) by the build.
    struct stat st;
    if (::stat(full.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) {
      *err = name + " is " + (::stat(full.c_str(), &st) == 0 ? file_kind(st.st_mode) : std::string("unreadable")) +
             "; only regular files belong in kernels/";
      return false;
    }
    if (std::string e = candidate_file_too_large(name, static_cast<uint64_t>(st.st_size)); !e.empty()) {
      *err = e;
      return false;
    }
    total += static_cast<uint64_t>(st.st_size);
    if (total > kMaxCandidateBytes) {
      *err = tree_too_large(total);
      return false;
    }
    w.files.push_back(name);
    std::string ext = rel.extension().string();
    if (ext == ".cu") {
      w.units.push_back({name, UnitKind::Cuda});
    } else if (ext == ".cpp" || ext == ".cc" || ext == ".cxx") {
      w.units.push_back({name, ends_with(rel.stem().string(), "_binding") ? UnitKind::Binding : UnitKind::Host});
    }
  }
  // Sources outside kernels/ are not built.
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    std::string n = entry.path().filename().string();
    std::string ext = entry.path().extension().string();
    bool fixed = n == "binding.cpp";
    if (!fixed && (ext == ".cu" || ext == ".cpp")) w.warnings.push_back("ignored " + n + ": sources belong in kernels/");
  }

  static const std::regex kFast(R"(#\s*include\s*[<"]anvil/binding\.h[>"])");
  static const std::regex kCompat(R"(#\s*include\s*[<"](\.\./)?binding_registry\.h[>"])");
  std::vector<std::string> fast, compat, neither;
  bool any_cu = false;
  for (const auto& u : w.units) {
    if (u.kind == UnitKind::Cuda) any_cu = true;
    if (u.kind != UnitKind::Binding) continue;
    std::string why;
    auto text = read_regular(dir / u.rel, kMaxCandidateFileBytes, &why);
    if (!text && fs::is_symlink(dir / u.rel, ec)) text = read_regular(fs::canonical(dir / u.rel, ec), kMaxCandidateFileBytes, &why);
    if (!text) {
      *err = "cannot read " + u.rel + ": it " + why;
      return false;
    }
    bool f = std::regex_search(*text, kFast), c = std::regex_search(*text, kCompat);
    if (f && c) {
      *err = u.rel + " includes both <anvil/binding.h> and binding_registry.h: pick one binding mode";
      return false;
    }
    (f ? fast : c ? compat : neither).push_back(u.rel);
  }
  if (fast.empty() && compat.empty()) {
    *err = neither.empty()
               ? "no kernels/*_binding.cpp in " + dir_in.string() +
                     ": each kernel needs a binding file that registers it, either with #include <anvil/binding.h> "
                     "and ANVIL_REGISTER(fn) (fast mode) or with #include \"../binding_registry.h\" and "
                     "REGISTER_BINDING(name, fn) (CUDA-Agent mode)"
               : neither[0] + " includes neither <anvil/binding.h> (fast mode) nor \"../binding_registry.h\" "
                              "(CUDA-Agent mode): one of them is required";
    return false;
  }
  if (!fast.empty() && !compat.empty()) {
    *err = "bindings mix modes: " + join(fast, ", ") + " use <anvil/binding.h> but " + join(compat, ", ") +
           " use binding_registry.h; use one mode for the whole workdir";
    return false;
  }
  if (!neither.empty()) {
    *err = neither[0] + " includes neither <anvil/binding.h> nor \"../binding_registry.h\"; every *_binding.cpp "
                        "must use the workdir's binding mode";
    return false;
  }
  w.mode = fast.empty() ? BindingMode::Compat : BindingMode::Fast;
  w.device = any_cu ? Device::Cuda : Device::Cpu;
  if (!fs::exists(dir / "model_new.py", ec)) {
    w.warnings.push_back("no model_new.py: it must define class ModelNew(nn.Module) that imports cuda_extension");
  }
  *out = std::move(w);
  return true;
}

namespace {

std::string model_new_stub(const std::string& signature) {
  std::string sig = signature.empty() ? "(self, *args, **kwargs)" : signature;
  return "# model_new.py: the optimized version of model.py's Model.\n"
         "#\n"
         "# ModelNew must take the same constructor arguments and create the same\n"
         "# parameters and buffers (names and shapes) as Model: the judge copies Model's\n"
         "# weights with load_state_dict(strict=True). forward() may call only\n"
         "# cuda_extension functions, plus tensor creation and metadata (shape, view,\n"
         "# contiguous). Build kernels/ into cuda_extension with `anvil build .`;\n"
         "# `anvil init` put a starter there to replace: cuda_extension.scale_shift(x, a, b,\n"
         "# config) returns x * a + b for a contiguous float32 tensor. config is the launch\n"
         "# configuration: set an integer self.config in __init__ and pass it to your launchers\n"
         "# (the agent's tune tool sweeps it).\n"
         "import torch\n"
         "import torch.nn as nn\n"
         "\n"
         "import cuda_extension\n"
         "\n"
         "\n"
         "class ModelNew(nn.Module):\n"
         "    def __init__" + sig + ":\n"
         "        super().__init__()\n"
         "        raise NotImplementedError(\"create the same parameters as Model\")\n"
         "\n"
         "    def forward(self, *inputs):\n"
         "        raise NotImplementedError(\"call your kernels through cuda_extension\")\n";
}

}  // namespace

// Anvil's record of a workdir's task: in the cache (out of every jail's view), by the workdir's real path.
fs::path workdir_record(const Environment& env, const fs::path& dir) {
  std::error_code ec;
  fs::path real = fs::weakly_canonical(fs::absolute(dir, ec), ec);
  return cache_dir(env, CacheArea::kWorkdirs) / (sha256_hex(real.string()) + ".json");
}

bool create_workdir(const Environment& env, const Task& task, const fs::path& dir, const std::string& init_signature,
                    bool force, std::string* err) {
  std::error_code ec;
  fs::create_directories(dir / "kernels", ec);
  fs::create_directories(dir / "anvil", ec);
  auto write = [&](const fs::path& p, const std::string& data, int mode) {
    fs::permissions(p, fs::perms::owner_write, fs::perm_options::add, ec);  // an old read-only copy
    return write_file_atomic(p, data, err, mode);
  };
  bool ok = write(dir / "model.py", task.code, 0444);
  for (const auto& f : fixed_compat_files()) {
    ok = ok && write(dir / f, read_file(env.share() / "workdir" / f).value_or(""), 0444);
  }
  ok = ok && write(dir / "anvil" / "binding.h", read_file(env.anvil_include() / "anvil" / "binding.h").value_or(""), 0444);
  if (ok && (!fs::exists(dir / "model_new.py", ec) || force)) {
    ok = write(dir / "model_new.py", model_new_stub(init_signature), 0644);
  }
  std::string path = fs::absolute(task.file, ec).lexically_normal().string();
  if (task.row >= 0) path += "#" + std::to_string(task.row);
  nlohmann::json meta = {{"task", task.name}, {"spec", task.spec}, {"path", path}, {"hash", task.hash},
                         {"meta", task.meta}};
  return ok && write(dir / ".anvil-task.json", json_text(meta, 2) + "\n", 0444) &&
         write_file_atomic(workdir_record(env, dir), json_text(meta, 2) + "\n", err, 0644);
}

std::optional<std::string> workdir_task(const Environment& env, const fs::path& dir, std::string* err) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) {
    *err = "no --task given, and " + dir.string() + " is not a directory: name the task with --task";
    return std::nullopt;
  }
  fs::path record = workdir_record(env, dir);
  std::string why;
  auto text = read_regular(record, 1 << 20, &why);
  nlohmann::json meta = text ? nlohmann::json::parse(*text, nullptr, false) : nlohmann::json();
  if (!meta.is_object() || !meta.contains("path") || !meta["path"].is_string()) {
    *err = "no --task given, and anvil has no record of " + dir.string() + " (made by `anvil init` on another machine, "
           "with another cache, or by an older anvil?" + (fs::exists(dir / ".anvil-task.json", ec)
           ? " its .anvil-task.json is not read: anyone who writes in the workdir can change it" : "") +
           "): name the task with --task";
    return std::nullopt;
  }
  return meta["path"].get<std::string>();
}

std::optional<std::vector<std::string>> write_starter(const Environment& env, const fs::path& dir, std::string* err) {
  std::error_code ec;
  fs::path kernels = dir / "kernels";
  if (fs::exists(kernels, ec) && !fs::is_empty(kernels, ec)) return std::vector<std::string>{};
  fs::path from = env.share() / "workdir" / "starter" / (env.gpus.empty() ? "cpu" : "cuda");
  std::vector<std::string> written;
  for (const auto& entry : fs::directory_iterator(from, ec)) {
    auto text = read_file(entry.path());
    if (!text) {
      *err = "cannot read anvil's starter " + entry.path().string();
      return std::nullopt;
    }
    if (!write_file_atomic(kernels / entry.path().filename(), *text, err, 0644)) return std::nullopt;
    written.push_back("kernels/" + entry.path().filename().string());
  }
  if (ec || written.empty()) {
    *err = "anvil's starter kernels are missing from " + from.string();
    return std::nullopt;
  }
  std::sort(written.begin(), written.end());
  return written;
}

}  // namespace anvil
