// flags.h: the extra compiler and linker flags of load_inline, checked against an allow-list.
//
// A KernelBench candidate passes extra_cflags, extra_cuda_cflags, extra_ldflags and
// extra_include_paths to load_inline; anvil build-sources hands them to g++ and nvcc. Flags can
// run programs (-wrapper, -B, -specs, -fplugin, -ccbin), write files (-o, -MF, -save-temps,
// --keep, -fdump-*), read files into the output (@file, -include /abs, linker scripts) or
// change what is judged, so only what kernels legitimately use passes: the table in flags.cpp
// is the one home of the rule. Each element is split on whitespace first (torch hands them to a
// shell, so "-O3 -Xptxas -O3" is three flags there); empty elements are ignored. The
// architecture flags (-arch, -gencode, --gpu-architecture, -code) are dropped with a note: anvil
// builds for the GPU it judges on, and the cache key holds that architecture.
#pragma once

#include <string>
#include <vector>

namespace anvil {

enum class FlagKind { Host, Cuda, Link, IncludeDir };

struct FlagCheck {
  std::vector<std::string> flags;    // what passes, one argv element each
  std::vector<std::string> ignored;  // dropped on purpose, for a warning ("-arch=sm_80")
  std::string error;                 // the first refused flag, for the model: empty when all pass
  bool ok() const { return error.empty(); }
};

// Checks one kind's flags. A path (-I, -isystem, -L, -include, -rpath, an include directory) may
// be relative without "..", or absolute under one of `dirs` (the toolchain the build can see).
FlagCheck check_flags(FlagKind kind, const std::vector<std::string>& given, const std::vector<std::string>& dirs);

// "extra_cflags", "extra_cuda_cflags", "extra_ldflags", "extra_include_paths".
const char* flag_kind_name(FlagKind kind);

}  // namespace anvil
