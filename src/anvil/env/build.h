// build.h: the build service: a candidate's sources to one cached Python module.
//
// Every translation unit is compiled in parallel (nvcc for .cu, the host
// compiler for .cpp) into an object cached by a content hash of its inputs;
// the objects are linked into a module cached by the hash of the objects and
// link flags. An unchanged candidate compiles nothing; a one-file change
// recompiles that file and relinks. See ARCHITECTURE.md for the cache layout.
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "anvil/env/toolchain.h"
#include "anvil/env/workdir.h"

namespace anvil {

struct BuildOptions {
  std::string arch;    // "sm_90a"; empty: the GPU's, else sm_90a
  unsigned jobs = 0;   // parallel compiles; 0: the number of cores
  bool explain = false;  // say why each unit was (re)built
  bool verbose = false;  // keep the compile commands in the log
  // Every compiler and the linker run in the jail (util/jail.h), each process with these limits:
  uint64_t memory_limit = 8ull << 30;     // address space (RLIMIT_AS); 0: none
  uint64_t file_size_limit = 2ull << 30;  // the largest file it may write (RLIMIT_FSIZE); 0: none
  // No tool runs past this (an agent's wall clock): a unit's timeout is the shorter of 10 min
  // and what is left.
  std::optional<std::chrono::steady_clock::time_point> deadline;
};

struct UnitReport {
  std::string source;  // "kernels/axpby.cu"
  std::string tool;    // "nvcc" or "c++"
  bool cached = false;
  bool ok = true;
  double seconds = 0;
  std::string explain;  // why it was compiled, or why it was not
};

struct BuildReport {
  bool ok = false;
  // "" on success; "compile_error" (the candidate's fault), "workdir_error"
  // (a missing or malformed file, a refused flag), "environment_error" (a tool
  // is missing, the sandbox cannot be set up).
  std::string error_kind;
  std::string error;  // one-line summary for workdir/environment errors
  std::string mode, arch;
  std::optional<Device> device;  // once the scan (or the sources) said; unset when refused before
  std::vector<UnitReport> units;
  bool link_cached = false;
  std::string link_explain;
  double seconds = 0;        // wall time of the whole build
  double setup_seconds = 0;  // of that, one-time environment work (runtime, PCH)
  std::filesystem::path module;  // the built module
  std::string diagnostics;       // short compiler errors, fit to show a model
  std::filesystem::path log;     // the full log
  std::vector<std::string> warnings;
  // load_inline's .cu units: the torch headers they were compiled with ("fewest": ATen's Tensor and
  // the per-operator headers of what they call; "types": torch/types.h, torch/extension.h left out;
  // "as_given"); empty where no .cu was rewritten.
  std::string headers;

  int compiled() const;  // units compiled (not from the cache)
  nlohmann::json to_json() const;
  std::string summary() const;  // a few human lines
};

// Builds DIR/cuda_extension.so from DIR/kernels.
BuildReport build_workdir(const Environment& env, const std::filesystem::path& dir, const BuildOptions& opts);

// A torch extension from loose sources (the load_inline route): .cpp files
// with the host compiler and torch headers, .cu files with nvcc.
struct SourcesSpec {
  std::string name;  // module name
  std::vector<std::filesystem::path> sources;
  std::vector<std::filesystem::path> headers;  // staged beside the sources by file name, not compiled
  std::filesystem::path out_dir;  // receives NAME.so
  std::vector<std::string> cflags, cuda_cflags, ldflags, include_dirs;
};
BuildReport build_sources(const Environment& env, const SourcesSpec& spec, const BuildOptions& opts);

// The cache's directory of this environment's artifacts: libanvil_torch.so and the precompiled
// torch headers (read-only in every jail that builds or imports a module).
std::filesystem::path runtime_dir(const Environment& env);

// The paths a make-style depfile ("out.o: a.cu b.h \\\n c.h") lists.
std::vector<std::string> parse_depfile(const std::string& text);

}  // namespace anvil
