// workdir.h: a candidate workdir: what it holds, which binding mode, which device.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "anvil/env/task.h"
#include "anvil/env/toolchain.h"

namespace anvil {

namespace fs = std::filesystem;

enum class BindingMode { Fast, Compat };
enum class Device { Cuda, Cpu };

const char* to_string(BindingMode m);
const char* to_string(Device d);

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

// The fixed files of a compat workdir; anvil builds with its pristine copies.
const std::vector<std::string>& fixed_compat_files();

// Scans `dir`. On a problem returns false with a message that names the file
// and says what it must contain.
bool scan_workdir(const fs::path& dir, Workdir* out, std::string* err);

// Creates (or, with force, refreshes) a workdir for `task`: model.py and the
// fixed compat files read-only, anvil/binding.h, a model_new.py stub with
// Model's constructor signature (kept when one exists, unless force), and
// .anvil-task.json naming the task. Returns false with *err on a write error.
bool create_workdir(const Environment& env, const Task& task, const fs::path& dir, const std::string& init_signature,
                    bool force, std::string* err);

}  // namespace anvil
