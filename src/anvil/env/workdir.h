// workdir.h: a candidate workdir: what it holds, which binding mode, which device.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "anvil/env/device.h"
#include "anvil/env/task.h"
#include "anvil/env/toolchain.h"

namespace anvil {

namespace fs = std::filesystem;

enum class BindingMode { Fast, Compat };

const char* to_string(BindingMode m);

enum class UnitKind {
  Cuda,     // kernels/*.cu: nvcc
  Host,     // kernels/*.cpp that is not a binding: host compiler
  Binding,  // kernels/*_binding.cpp: host compiler, mode-specific flags
};

struct SourceFile {
  std::string rel;  // "kernels/axpby.cu"
  UnitKind kind;
};

struct Workdir {
  fs::path dir;
  BindingMode mode = BindingMode::Fast;
  Device device = Device::Cuda;
  std::vector<SourceFile> units;   // translation units under kernels/
  std::vector<std::string> files;  // every file under kernels/, relative to dir
  std::vector<std::string> warnings;
};

// What anvil reads of a candidate (a copy, a build's stage) is bounded: a file may be at most
// 64 MiB, all of them at most 256 MiB, and at most 10000 files are copied.
constexpr uint64_t kMaxCandidateFileBytes = 64ull << 20;
constexpr uint64_t kMaxCandidateBytes = 256ull << 20;
constexpr size_t kMaxCandidateFiles = 10000;

// "kernels/blob.bin is 3.0 GB; a candidate's files may be at most 64 MiB each", or "" when
// `bytes` is within the limit.
std::string candidate_file_too_large(const std::string& rel, uint64_t bytes);

// A candidate's paths (relative to its workdir) are at most 1024 bytes: its copy lands under a longer
// directory than its source ($ANVIL_CACHE/tmp/eval-XXXXXX/candidate), and must stay within PATH_MAX.
constexpr size_t kMaxCandidatePathBytes = 1024;

// What is wrong with the name of a candidate's file or folder (`rel`, relative to the workdir), or ""
// when nothing: a name that is not UTF-8, one with a control character (a newline, a tab), a path
// over kMaxCandidatePathBytes. anvil passes names to compilers, depfiles, records and JSON answers;
// such a name is refused as the candidate's doing. The name is shown with \xNN escapes:
// "kernels/\xff\xfe.h: the name is not UTF-8; name a candidate's files in UTF-8, without control characters".
std::string candidate_name_problem(const std::string& rel);

// Copies a candidate's files from src to dst: regular files only (symlinks, FIFOs, sockets and
// devices are skipped, never opened or followed), without build/, __pycache__/, .git/ and
// cuda_extension.so (of any kind: anvil writes the module there), each read in bounded chunks. A file
// over 64 MiB, a tree over 256 MiB (or 10000 files) or a name candidate_name_problem() refuses is
// refused before anything is read, with a message naming it. False with *err; *refused (when given)
// true when it was the candidate's own doing (its sizes, count, names, or files it made unreadable:
// judged as a load_error), false for an I/O failure of the host's (the disk full, say).
bool copy_candidate_files(const fs::path& src, const fs::path& dst, std::string* err, bool* refused = nullptr);

// Copies a single-file candidate (`file`, as dst/model_new.py) and the C, C++ and CUDA sources
// and headers beside it (its directory and two levels below it, hidden directories, build/ and
// __pycache__ aside), which its torch.utils.cpp_extension.load() calls may name. Regular files
// only, bounded: at most kMaxSiblingFiles of them and kMaxCandidateBytes in all, else refused
// with a message. False with *err.
constexpr size_t kMaxSiblingFiles = 200;
bool copy_single_file_candidate(const fs::path& file, const fs::path& dst, std::string* err);

// The fixed files of a compat workdir; anvil builds with its pristine copies.
const std::vector<std::string>& fixed_compat_files();

// Scans `dir`. On a problem returns false with a message that names the file
// and says what it must contain.
bool scan_workdir(const fs::path& dir, Workdir* out, std::string* err);

// Creates (or, with force, refreshes) a workdir for `task`: model.py and the
// fixed compat files read-only, anvil/binding.h, a model_new.py stub with
// Model's constructor signature (kept when one exists, unless force), and
// .anvil-task.json naming the task (for its reader; anvil's own record, which workdir_task reads,
// is in the cache). Returns false with *err on a write error.
bool create_workdir(const Environment& env, const Task& task, const fs::path& dir, const std::string& init_signature,
                    bool force, std::string* err);

// The task of a workdir made by `anvil init` (the task file's absolute path, and #ROW for a dataset's
// row), from anvil's own record of it (the cache's workdirs/ area, by the workdir's real path), never
// from a file in the workdir: whoever writes there (the agent's shell) could name any task, whose
// code the judge runs. nullopt with *err saying what is missing (then --task is needed).
std::optional<std::string> workdir_task(const Environment& env, const fs::path& dir, std::string* err);

// Writes `anvil init`'s starter into dir/kernels when it holds no file: a kernel and its fast-mode
// binding, cuda_extension.scale_shift(x, a, b) = x * a + b (share/workdir/starter/: the CUDA one
// when this machine has a GPU, else the CPU one), so the next `anvil build` works. Returns the
// files written (none when kernels/ had files), or nullopt with *err on a read or write error.
std::optional<std::vector<std::string>> write_starter(const Environment& env, const fs::path& dir, std::string* err);

}  // namespace anvil
