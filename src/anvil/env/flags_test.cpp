// The allow-list of load_inline's extra flags: what KernelBench solutions pass goes through, what
// runs programs, reads or writes files is refused with a message naming the flag.
#include "anvil/env/flags.h"

#include <gtest/gtest.h>

namespace anvil {
namespace {

const std::vector<std::string> kDirs = {"/usr", "/opt", "/venv"};

FlagCheck check(FlagKind kind, const std::vector<std::string>& flags) { return check_flags(kind, flags, kDirs); }

TEST(Flags, WhatKernelsPassIsAccepted) {
  std::vector<std::vector<std::string>> host = {
      {"-O3"}, {"-O2", "-DNDEBUG"}, {"-std=c++17"}, {"-fopenmp"}, {"-ffast-math", "-funroll-loops"},
      {"-march=native"}, {"-mavx2", "-mfma"}, {"-Wno-unused-variable", "-w"}, {"-fno-strict-aliasing"},
      {"-fvisibility=hidden"}, {"-D", "USE_FAST=1"}, {"-Iinclude"}, {"-I/usr/local/cuda/include"},
      {"-isystem", "/venv/include"}, {"-U__CUDA_NO_HALF_OPERATORS__"}, {"-g"}, {"-pthread"}};
  for (const auto& f : host) {
    FlagCheck c = check(FlagKind::Host, f);
    EXPECT_TRUE(c.ok()) << f[0] << ": " << c.error;
  }
  std::vector<std::vector<std::string>> cuda = {
      {"-O3", "--use_fast_math"}, {"-use_fast_math"}, {"-std=c++17"}, {"--expt-relaxed-constexpr"},
      {"--expt-extended-lambda"}, {"--extended-lambda"}, {"-lineinfo"}, {"-Xptxas", "-O3"}, {"-Xptxas=-v,-O3"},
      {"--ptxas-options=-v"}, {"-Xptxas -dlcm=cg"}, {"-maxrregcount=64"}, {"-maxrregcount", "64"},
      {"-DNDEBUG"}, {"-U__CUDA_NO_HALF_OPERATORS__", "-U__CUDA_NO_HALF_CONVERSIONS__", "-U__CUDA_NO_HALF2_OPERATORS__"},
      {"-Xcompiler", "-O3"}, {"-Xcompiler=-fopenmp,-O3"}, {"--ftz=true", "--prec-div=false"},
      {"-O3 -Xptxas -O3 -Xcompiler -O3"}, {"--default-stream", "per-thread"}, {"-res-usage"},
      {"-Xcudafe", "--diag_suppress=177"}, {"--diag-suppress=20012"}, {"-Wno-deprecated-gpu-targets"}};
  for (const auto& f : cuda) {
    FlagCheck c = check(FlagKind::Cuda, f);
    EXPECT_TRUE(c.ok()) << f[0] << ": " << c.error;
  }
  for (const auto& f : std::vector<std::vector<std::string>>{
           {"-lcublas"}, {"-lcublasLt", "-lcudnn"}, {"-lcuda"}, {"-L/usr/local/cuda/lib64", "-lcublas"},
           {"-Wl,--no-as-needed"}, {"-Wl,-rpath,/venv/lib"}, {"-Wl,-z,now"}, {"-fopenmp"}}) {
    FlagCheck c = check(FlagKind::Link, f);
    EXPECT_TRUE(c.ok()) << f[0] << ": " << c.error;
  }
  EXPECT_TRUE(check(FlagKind::IncludeDir, {"/usr/local/cuda/include", "third_party/cutlass"}).ok());
}

TEST(Flags, WhitespaceIsSplitAndEmptyFlagsAreIgnored) {
  FlagCheck c = check(FlagKind::Cuda, {"", "-O3 -Xptxas -O3", "  "});
  ASSERT_TRUE(c.ok()) << c.error;
  EXPECT_EQ(c.flags, (std::vector<std::string>{"-O3", "-Xptxas", "-O3"}));
  c = check(FlagKind::Host, {""});  // KernelBench's own examples pass extra_cflags=[""]
  EXPECT_TRUE(c.ok()) << c.error;
  EXPECT_TRUE(c.flags.empty());
  c = check(FlagKind::Cuda, {"-maxrregcount", "32", "-D", "X=1"});
  EXPECT_EQ(c.flags, (std::vector<std::string>{"-maxrregcount=32", "-DX=1"}));
}

TEST(Flags, ArchitectureFlagsAreIgnoredWithANote) {
  FlagCheck c = check(FlagKind::Cuda, {"-arch=sm_80", "-O3", "-gencode", "arch=compute_90a,code=sm_90a",
                                       "--gpu-architecture=sm_90"});
  ASSERT_TRUE(c.ok()) << c.error;
  EXPECT_EQ(c.flags, (std::vector<std::string>{"-O3"}));
  EXPECT_EQ(c.ignored,
            (std::vector<std::string>{"-arch=sm_80", "-gencode arch=compute_90a,code=sm_90a", "--gpu-architecture=sm_90"}));
}

TEST(Flags, WhatRunsReadsOrWritesElsewhereIsRefusedByName) {
  FlagCheck c = check(FlagKind::Host, {"-O3", "-wrapper", "/bin/sh,-c,touch /tmp/pwned"});
  EXPECT_FALSE(c.ok());
  EXPECT_TRUE(c.flags.empty());
  EXPECT_EQ(c.error.rfind("extra_cflags: \"-wrapper\" is not allowed (allowed: -O*, -D*, -U*, -std=*, -I<relative>,", 0),
            0u)
      << c.error;
  struct Case {
    FlagKind kind;
    std::vector<std::string> flags;
    std::string named;
  };
  std::vector<Case> refused = {
      {FlagKind::Host, {"-B/tmp/evil"}, "extra_cflags: \"-B/tmp/evil\" is not allowed"},
      {FlagKind::Host, {"-specs=/tmp/x.specs"}, "\"-specs=/tmp/x.specs\" is not allowed"},
      {FlagKind::Host, {"-fplugin=/tmp/p.so"}, "\"-fplugin=/tmp/p.so\" is not allowed"},
      {FlagKind::Host, {"@/etc/passwd"}, "\"@/etc/passwd\" is not allowed"},
      {FlagKind::Host, {"-o", "/tmp/x"}, "\"-o\" is not allowed"},
      {FlagKind::Host, {"-MF/tmp/x.d"}, "\"-MF/tmp/x.d\" is not allowed"},
      {FlagKind::Host, {"-MD"}, "\"-MD\" is not allowed"},
      {FlagKind::Host, {"-save-temps"}, "\"-save-temps\" is not allowed"},
      {FlagKind::Host, {"-fdump-tree-all"}, "\"-fdump-tree-all\" is not allowed"},
      {FlagKind::Host, {"-fprofile-generate"}, "\"-fprofile-generate\" is not allowed"},
      {FlagKind::Host, {"-include", "/etc/passwd"}, "\"-include /etc/passwd\" is not allowed"},
      {FlagKind::Host, {"-imacros", "x.h"}, "\"-imacros\" is not allowed"},
      {FlagKind::Host, {"-I/root/.ssh"}, "\"-I /root/.ssh\" is not allowed"},
      {FlagKind::Host, {"-I../../etc"}, "\"-I ../../etc\" is not allowed"},
      {FlagKind::Host, {"-Wl,-T,/tmp/script.ld"}, "\"-Wl,-T,/tmp/script.ld\" is not allowed"},
      {FlagKind::Host, {"-Wp,-MD,/tmp/x"}, "\"-Wp,-MD,/tmp/x\" is not allowed"},
      {FlagKind::Cuda, {"-ccbin", "/tmp/evil"}, "extra_cuda_cflags: \"-ccbin\" is not allowed"},
      {FlagKind::Cuda, {"--compiler-bindir=/tmp"}, "\"--compiler-bindir=/tmp\" is not allowed"},
      {FlagKind::Cuda, {"--keep"}, "\"--keep\" is not allowed"},
      {FlagKind::Cuda, {"-Xlinker", "-T"}, "\"-Xlinker\" is not allowed"},
      {FlagKind::Cuda, {"-Xnvlink", "x"}, "\"-Xnvlink\" is not allowed"},
      {FlagKind::Cuda, {"-Xcompiler", "-wrapper,/bin/sh"}, "\"-wrapper\" (in -Xcompiler) is not allowed"},
      {FlagKind::Cuda, {"-Xptxas", "--output-file=/tmp/x"}, "\"--output-file=/tmp/x\" (in -Xptxas) is not allowed"},
      {FlagKind::Cuda, {"-Xptxas"}, "extra_cuda_cflags: \"-Xptxas\" needs a value after it"},
      {FlagKind::Link, {"-Xlinker", "--script=/tmp/x"}, "extra_ldflags: \"-Xlinker\" is not allowed"},
      {FlagKind::Link, {"-Wl,--version-script=/etc/passwd"}, "\"-Wl,--version-script=/etc/passwd\" is not allowed"},
      {FlagKind::Link, {"-l:/etc/passwd"}, "\"-l:/etc/passwd\" is not allowed"},
      {FlagKind::Link, {"-L/root"}, "\"-L /root\" is not allowed"},
      {FlagKind::Link, {"/tmp/evil.o"}, "\"/tmp/evil.o\" is not allowed"},
      {FlagKind::IncludeDir, {"/root/.ssh"}, "extra_include_paths: \"/root/.ssh\" is not allowed"},
      {FlagKind::IncludeDir, {"-I/usr"}, "\"-I/usr\" is not allowed"},
      {FlagKind::Host, {"-D" + std::string(5000, 'X')}, "extra_cflags: a flag of 5002 characters is not allowed (at most 1024)"},
      {FlagKind::Host, std::vector<std::string>(300, "-O3"), "extra_cflags: 300 flags are too many (at most 256)"},
  };
  for (const auto& r : refused) {
    FlagCheck c = check(r.kind, r.flags);
    EXPECT_FALSE(c.ok()) << r.flags[0];
    EXPECT_NE(c.error.find(r.named), std::string::npos) << c.error;
  }
}

}  // namespace
}  // namespace anvil
