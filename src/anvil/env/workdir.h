// workdir.h: a candidate workdir: what it holds, which binding mode, which device.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

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

}  // namespace anvil
