// Build-service tests with the real compilers (g++ for CPU variants; nvcc,
// compile-only, for CUDA candidates). They share one cache directory so the
// once-per-environment runtime is built once per test run; each test makes
// its candidate's sources unique with a nonce, so "cold" means cold.
#include "anvil/env/build.h"

#include <gtest/gtest.h>

#include "support/test_env.h"
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <random>

#include "anvil/env/workdir.h"
#include "anvil/util/fs.h"
#include "anvil/util/hash.h"
#include "anvil/util/strings.h"
#include "anvil/util/subprocess.h"

namespace anvil {
namespace {

const fs::path kSource = ANVIL_SOURCE_DIR;

class BuildTest : public ::testing::Test {
 protected:
  static Environment& env() { return test_environment(); }

  void SetUp() override {
    ASSERT_TRUE(env().torch.present) << "torch is required for build tests (run scripts/setup.sh): "
                                     << env().probe_error;
    dir_ = make_temp_dir(fs::temp_directory_path(), "anvil-build-test");
  }
  void TearDown() override { remove_tree(dir_); }

  // Copies an example candidate into the test's directory, with a nonce in every source.
  fs::path candidate(const std::string& example, const std::string& name = "w") {
    fs::path dst = dir_ / name;
    fs::create_directories(dst);
    fs::copy(kSource / example, dst, fs::copy_options::recursive);
    remove_tree(dst / "build");
    fs::remove(dst / "cuda_extension.so");
    std::string nonce = "// nonce " + std::to_string(std::random_device{}()) + std::to_string(getpid()) + "\n";
    for (const auto& rel : list_files(dst / "kernels")) {
      std::string e;
      auto text = read_file(dst / "kernels" / rel);
      write_file_atomic(dst / "kernels" / rel, *text + nonce, &e);
    }
    return dst;
  }

  static void append(const fs::path& p, const std::string& text) {
    std::string e;
    ASSERT_TRUE(write_file_atomic(p, *read_file(p) + text, &e)) << e;
  }

  static const UnitReport& unit(const BuildReport& r, const std::string& source) {
    for (const auto& u : r.units) {
      if (u.source == source) return u;
    }
    static UnitReport none;
    ADD_FAILURE() << "no unit " << source;
    return none;
  }

  fs::path dir_;
};

TEST_F(BuildTest, CpuCandidateBuildsThenIsFullyCached) {
  fs::path w = candidate("examples/candidates/01_elementwise_chain/cpu");
  BuildOptions o;
  o.explain = true;
  BuildReport first = build_workdir(env(), w, o);
  ASSERT_TRUE(first.ok) << first.error << "\n" << first.diagnostics;
  EXPECT_EQ(first.mode, "fast");
  EXPECT_EQ(first.device, Device::Cpu);
  EXPECT_FALSE(unit(first, "kernels/elementwise_chain.cpp").cached);
  EXPECT_EQ(unit(first, "kernels/elementwise_chain.cpp").explain, "compiled: no previous build in this workdir");
  EXPECT_TRUE(fs::exists(w / "cuda_extension.so"));
  EXPECT_TRUE(fs::exists(w / "build" / "build.log"));

  BuildReport second = build_workdir(env(), w, o);
  ASSERT_TRUE(second.ok);
  EXPECT_EQ(second.compiled(), 0);
  EXPECT_TRUE(second.link_cached);
  EXPECT_EQ(unit(second, "kernels/elementwise_chain.cpp").explain, "up to date (cached)");
  EXPECT_EQ(second.link_explain, "up to date (cached)");
  EXPECT_EQ(*hash_file(w / "cuda_extension.so"), *hash_file(first.module));
}

TEST_F(BuildTest, OneFileChangeRebuildsThatFileAndRelinks) {
  fs::path w = candidate("examples/candidates/01_elementwise_chain/cpu");
  BuildOptions o;
  o.explain = true;
  ASSERT_TRUE(build_workdir(env(), w, o).ok);
  append(w / "kernels" / "elementwise_chain_binding.cpp", "// edited\n");
  BuildReport r = build_workdir(env(), w, o);
  ASSERT_TRUE(r.ok) << r.diagnostics;
  EXPECT_TRUE(unit(r, "kernels/elementwise_chain.cpp").cached);
  EXPECT_FALSE(unit(r, "kernels/elementwise_chain_binding.cpp").cached);
  EXPECT_EQ(unit(r, "kernels/elementwise_chain_binding.cpp").explain, "compiled: source changed");
  EXPECT_EQ(r.compiled(), 1);
  EXPECT_FALSE(r.link_cached);
  EXPECT_NE(r.link_explain.find("objects or link flags changed"), std::string::npos) << r.link_explain;
}

TEST_F(BuildTest, HeaderChangeRebuildsOnlyItsIncluders) {
  fs::path w = candidate("examples/candidates/01_elementwise_chain/cpu");
  std::string e;
  ASSERT_TRUE(write_file_atomic(w / "kernels" / "tuning.h", "#pragma once\nconstexpr int kTuning = 1;\n", &e));
  fs::path kernel = w / "kernels" / "elementwise_chain.cpp";
  ASSERT_TRUE(write_file_atomic(kernel, "#include \"tuning.h\"\n" + *read_file(kernel), &e));
  BuildOptions o;
  o.explain = true;
  ASSERT_TRUE(build_workdir(env(), w, o).ok);
  ASSERT_TRUE(write_file_atomic(w / "kernels" / "tuning.h", "#pragma once\nconstexpr int kTuning = 2;\n", &e));
  BuildReport r = build_workdir(env(), w, o);
  ASSERT_TRUE(r.ok) << r.diagnostics;
  EXPECT_EQ(unit(r, "kernels/elementwise_chain.cpp").explain, "compiled: header kernels/tuning.h changed");
  EXPECT_TRUE(unit(r, "kernels/elementwise_chain_binding.cpp").cached);
  // Back to the first header: both objects are still in the cache.
  ASSERT_TRUE(write_file_atomic(w / "kernels" / "tuning.h", "#pragma once\nconstexpr int kTuning = 1;\n", &e));
  BuildReport back = build_workdir(env(), w, o);
  EXPECT_EQ(back.compiled(), 0);
  EXPECT_TRUE(back.link_cached);
}

TEST_F(BuildTest, IdenticalCandidateInAnotherWorkdirHitsTheCache) {
  fs::path a = candidate("examples/candidates/01_elementwise_chain/cpu", "a");
  fs::path b = dir_ / "b";
  fs::copy(a, b, fs::copy_options::recursive);
  BuildOptions o;
  o.explain = true;
  ASSERT_TRUE(build_workdir(env(), a, o).ok);
  BuildReport r = build_workdir(env(), b, o);
  ASSERT_TRUE(r.ok);
  EXPECT_EQ(r.compiled(), 0);
  EXPECT_EQ(unit(r, "kernels/elementwise_chain.cpp").explain, "found in the cache (built before)");
}

TEST_F(BuildTest, CompileErrorIsShortAndNamesTheWorkdirFile) {
  fs::path w = candidate("examples/broken/compile_error/cpu");
  BuildReport r = build_workdir(env(), w, {});
  ASSERT_FALSE(r.ok);
  EXPECT_EQ(r.error_kind, "compile_error");
  EXPECT_NE(r.diagnostics.find("kernels/"), std::string::npos) << r.diagnostics;
  EXPECT_NE(r.diagnostics.find(": error: "), std::string::npos) << r.diagnostics;
  EXPECT_EQ(r.diagnostics.find("stage-"), std::string::npos) << "staging paths leak: " << r.diagnostics;
  EXPECT_EQ(r.diagnostics.find(env().cache.string()), std::string::npos) << r.diagnostics;
  EXPECT_LT(r.diagnostics.size(), 4200u);
  EXPECT_TRUE(fs::exists(r.log));
  EXPECT_GT(fs::file_size(r.log), r.diagnostics.size() / 2);
  EXPECT_FALSE(fs::exists(w / "cuda_extension.so"));
}

// ---- the compilers' jail (issue 16): what a candidate's sources and flags could do before ----

// A host file outside the compiler's view is not found: its content never reaches the diagnostics.
TEST_F(BuildTest, AnIncludeOfAHostFileIsNotFound) {
  fs::path w = candidate("examples/candidates/01_elementwise_chain/cpu");
  append(w / "kernels" / "elementwise_chain.cpp", "#include \"/etc/hostname\"\n");
  BuildReport r = build_workdir(env(), w, {});
  ASSERT_FALSE(r.ok);
  EXPECT_EQ(r.error_kind, "compile_error") << r.error;
  EXPECT_NE(r.diagnostics.find("kernels/elementwise_chain.cpp:"), std::string::npos) << r.diagnostics;
  EXPECT_NE(r.diagnostics.find("/etc/hostname: No such file or directory"), std::string::npos) << r.diagnostics;
  std::string host = trim(read_file("/etc/hostname").value_or(""));
  if (host.size() >= 4) {
    EXPECT_EQ(r.diagnostics.find(host), std::string::npos) << r.diagnostics;
  }
}

// An #include of /dev/zero grew cc1plus to 4.2 GB: now the memory limit stops it, in bounded
// time, with a line a model can act on.
TEST_F(BuildTest, AnIncludeOfDevZeroIsStoppedByTheMemoryLimit) {
  fs::path w = candidate("examples/candidates/01_elementwise_chain/cpu");
  append(w / "kernels" / "elementwise_chain.cpp", "#include \"/dev/zero\"\n");
  BuildOptions o;
  o.memory_limit = 1ull << 30;  // the default is 8 GiB; the test spares the machine
  auto t0 = std::chrono::steady_clock::now();
  BuildReport r = build_workdir(env(), w, o);
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_FALSE(r.ok);
  EXPECT_EQ(r.error_kind, "compile_error") << r.error;
  EXPECT_EQ(r.diagnostics.rfind("kernels/elementwise_chain.cpp: the compiler was stopped: it used more than 1 GiB of "
                                "memory (an #include of a device or a huge file?)\n",
                                0),
            0u)
      << r.diagnostics;
  EXPECT_LT(seconds, 60);
}

// build -> /elsewhere: anvil's record and log would have been written there, as root.
TEST_F(BuildTest, ASymlinkedBuildDirectoryWritesNothingOutside) {
  fs::path w = candidate("examples/candidates/01_elementwise_chain/cpu");
  fs::path elsewhere = dir_ / "elsewhere";
  fs::create_directories(elsewhere);
  fs::create_directory_symlink(elsewhere, w / "build");
  BuildReport r = build_workdir(env(), w, {});
  EXPECT_FALSE(r.ok);
  EXPECT_EQ(r.error_kind, "workdir_error");
  EXPECT_EQ(r.error, "build is a symbolic link (to " + elsewhere.string() +
                         "); anvil keeps its build log and record in build/: remove the link (rm build)");
  EXPECT_TRUE(fs::is_empty(elsewhere));
}

// load_inline's extra flags reach g++ only through the allow-list: -wrapper ran a shell as root.
TEST_F(BuildTest, LoadInlineFlagsPassAnAllowList) {
  fs::path src = dir_ / "inline" / "main.cpp";
  std::string e;
  ASSERT_TRUE(write_file_atomic(src,
                                "#include <torch/extension.h>\nint64_t add1(int64_t x) { return x + 1; }\n"
                                "PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def(\"add1\", &add1); }\n",
                                &e));
  fs::path marker = fs::temp_directory_path() / ("anvil_pwned_" + std::to_string(getpid()));
  SourcesSpec spec;
  spec.name = "anvil_flags_ext";
  spec.sources = {src};
  spec.out_dir = dir_ / "out";
  spec.cflags = {"-wrapper", "/bin/sh,-c,touch " + marker.string()};
  BuildReport r = build_sources(env(), spec, {});
  EXPECT_FALSE(r.ok);
  EXPECT_EQ(r.error_kind, "workdir_error");
  EXPECT_EQ(r.error.rfind("extra_cflags: \"-wrapper\" is not allowed (allowed: -O*, -D*, -U*, -std=*, -I<relative>", 0),
            0u)
      << r.error;
  EXPECT_TRUE(r.units.empty());  // nothing was compiled
  EXPECT_FALSE(fs::exists(marker));
  spec.cflags = {""};  // as KernelBench's own examples pass: ignored
  r = build_sources(env(), spec, {});
  EXPECT_TRUE(r.ok) << r.error << "\n" << r.diagnostics;
  EXPECT_FALSE(fs::exists(marker));
}

// Each load_inline name once made a precompiled torch/extension.h of its own (42 s and 757 MB on
// a 2-core machine): the module's name is the unit's flag, never the header's.
TEST_F(BuildTest, LoadInlineNamesShareOnePrecompiledHeader) {
  std::string e;
  BuildReport first, second;
  for (const char* name : {"anvil_pch_name_a", "anvil_pch_name_b"}) {
    fs::path src = dir_ / name / "main.cpp";
    ASSERT_TRUE(write_file_atomic(src,
                                  std::string("#include <torch/extension.h>\nint64_t twice(int64_t x) { return 2 * x; }\n"
                                              "PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def(\"twice\", &twice); }\n// ") +
                                      name + "\n",
                                  &e));
    SourcesSpec spec;
    spec.name = name;
    spec.sources = {src};
    spec.out_dir = dir_ / name / "out";
    BuildReport r = build_sources(env(), spec, {});
    ASSERT_TRUE(r.ok) << r.error << "\n" << r.diagnostics;
    (std::string(name).back() == 'a' ? first : second) = r;
  }
  EXPECT_EQ(second.setup_seconds, 0.0) << "the second name made a precompiled header of its own";
  auto module = read_file(second.module);
  ASSERT_TRUE(module) << second.module;
  EXPECT_NE(module->find("PyInit_anvil_pch_name_b"), std::string::npos);  // the unit's own name
  EXPECT_EQ(module->find("PyInit_anvil_pch_name_a"), std::string::npos);
}

TEST_F(BuildTest, TorchHeaderInFastModeIsRefusedWithAHint) {
  fs::path w = candidate("examples/candidates/01_elementwise_chain/cpu");
  fs::path kernel = w / "kernels" / "elementwise_chain.cpp";
  std::string e;
  ASSERT_TRUE(write_file_atomic(kernel, "#include <torch/extension.h>\n" + *read_file(kernel), &e));
  BuildReport r = build_workdir(env(), w, {});
  ASSERT_FALSE(r.ok);
  EXPECT_NE(r.diagnostics.find("kernels/elementwise_chain.cpp:1: fatal error: torch/extension.h"), std::string::npos)
      << r.diagnostics;
  EXPECT_NE(r.diagnostics.find("include <anvil/binding.h> instead"), std::string::npos);
}

TEST_F(BuildTest, FixedFilesCannotBeReplacedByTheCandidate) {
  fs::path w = candidate("examples/candidates/01_elementwise_chain/cpu_compat");
  std::string e;
  ASSERT_TRUE(write_file_atomic(w / "binding_registry.h", "#error tampered\n", &e));
  BuildReport r = build_workdir(env(), w, {});
  ASSERT_TRUE(r.ok) << r.diagnostics;
  EXPECT_EQ(r.mode, "compat");
  bool warned = false;
  for (const auto& msg : r.warnings) warned |= msg.find("binding_registry.h differs from the fixed copy") != std::string::npos;
  EXPECT_TRUE(warned);
}

TEST_F(BuildTest, ConcurrentProcessesShareOneCache) {
  fs::path w = candidate("examples/candidates/01_elementwise_chain/cpu", "base");
  std::vector<fs::path> dirs;
  for (int i = 0; i < 4; ++i) {
    dirs.push_back(dir_ / ("c" + std::to_string(i)));
    fs::copy(w, dirs.back(), fs::copy_options::recursive);
  }
  std::vector<pid_t> pids;
  for (const auto& d : dirs) {
    pid_t pid = fork();
    if (pid == 0) {
      SubprocessResult r = run_subprocess({ANVIL_BINARY, "build", d.string()});
      _exit(r.ok() ? 0 : 1);
    }
    pids.push_back(pid);
  }
  for (pid_t pid : pids) {
    int status = 0;
    waitpid(pid, &status, 0);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  std::string first = *hash_file(dirs[0] / "cuda_extension.so");
  for (const auto& d : dirs) EXPECT_EQ(*hash_file(d / "cuda_extension.so"), first);
  BuildReport r = build_workdir(env(), w, {});
  EXPECT_EQ(r.compiled(), 0);
}

TEST_F(BuildTest, CudaCandidateCompilesForHopper) {
  if (!env().nvcc.found()) GTEST_SKIP() << "nvcc not installed";
  fs::path w = candidate("examples/candidates/02_softmax/cuda");
  BuildOptions o;
  o.arch = "sm_90a";
  BuildReport r = build_workdir(env(), w, o);
  ASSERT_TRUE(r.ok) << r.error << "\n" << r.diagnostics;
  EXPECT_EQ(r.device, Device::Cuda);
  EXPECT_EQ(r.arch, "sm_90a");
  int cu = 0;
  for (const auto& u : r.units) cu += u.tool == "nvcc" ? 1 : 0;
  EXPECT_EQ(cu, 2);
  // The module really holds sm_90a machine code.
  SubprocessResult dump = run_subprocess({(env().cuda_home / "bin" / "cuobjdump").string(), "--list-elf",
                                          (w / "cuda_extension.so").string()});
  if (dump.started) {
    EXPECT_NE(dump.output.find("sm_90a"), std::string::npos) << dump.output;
  }
}

TEST_F(BuildTest, BadArchIsAnEnvironmentError) {
  if (!env().nvcc.found()) GTEST_SKIP() << "nvcc not installed";
  fs::path w = candidate("examples/candidates/01_elementwise_chain/cuda");
  BuildOptions o;
  o.arch = "hopper";
  BuildReport r = build_workdir(env(), w, o);
  EXPECT_EQ(r.error_kind, "environment_error");
  EXPECT_EQ(r.error, "bad architecture 'hopper': expected a name like sm_90a, sm_90 or sm_80");
}

TEST_F(BuildTest, LoadInlineSourcesShareTheCache) {
  std::string e;
  fs::path src = dir_ / "main.cpp";
  ASSERT_TRUE(write_file_atomic(src,
                                "#include <torch/extension.h>\n"
                                "torch::Tensor add_one(torch::Tensor x) { return x + 1; }\n"
                                "PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def(\"add_one\", &add_one); }\n"
                                "// nonce " + std::to_string(std::random_device{}()) + "\n",
                                &e));
  SourcesSpec spec;
  spec.name = "inline_add";
  spec.sources = {src};
  spec.out_dir = dir_ / "out";
  BuildReport first = build_sources(env(), spec, {});
  ASSERT_TRUE(first.ok) << first.error << "\n" << first.diagnostics;
  EXPECT_TRUE(fs::exists(dir_ / "out" / "inline_add.so"));
  // The same source from another directory (load_inline uses fresh temp dirs).
  fs::create_directories(dir_ / "again");
  fs::copy(src, dir_ / "again" / "main.cpp");
  spec.sources = {dir_ / "again" / "main.cpp"};
  BuildReport second = build_sources(env(), spec, {});
  ASSERT_TRUE(second.ok);
  EXPECT_EQ(second.compiled(), 0);
  EXPECT_TRUE(second.link_cached);
}

// Some toolchains link libstdc++ statically into every shared object (the GPU host's g++ wrapper
// does). A module's std::ostream calls must then still bind to one consistent copy: before anvil
// kept static archives' symbols local, libanvil_torch.so exported its copy and an ANVIL_CHECK
// message with a number in it came out truncated on the CPU and crashed the process on a GPU.
TEST_F(BuildTest, StaticLibstdcxxToolchainStillFormatsErrors) {
  std::string e;
  fs::path wrapper = dir_ / "g++-static";
  ASSERT_TRUE(write_file_atomic(wrapper, "#!/bin/sh\nexec '" + env().cxx.path.string() +
                                             "' \"$@\" -static-libstdc++ -static-libgcc\n", &e)) << e;
  fs::permissions(wrapper, fs::perms(0755));  // run by the jail's user
  Environment static_env = env();
  static_env.cxx.path = wrapper;
  static_env.cache = dir_ / "cache";
  // try_fallback's binding always fails a check whose message ends in x.dim(): "got 2-d".
  fs::path w = candidate("examples/hacks/try_fallback/cpu");
  BuildReport r = build_workdir(static_env, w, {});
  ASSERT_TRUE(r.ok) << r.error << "\n" << r.diagnostics;
  SubprocessOptions so;
  so.cwd = w;
  so.merge_stderr = true;
  SubprocessResult run = run_subprocess(
      {env().python.string(), "-c",
       "import torch, cuda_extension\n"
       "try:\n"
       "    cuda_extension.elementwise_chain(torch.ones(4, 8), torch.ones(8), 1.0, -1.0, 1.0)\n"
       "except RuntimeError as e:\n"
       "    print('raised:', e)\n"},
      so);
  EXPECT_TRUE(run.ok()) << run.describe() << "\n" << run.output;
  EXPECT_NE(run.output.find("got 2-d"), std::string::npos) << run.output;
}

TEST(Depfile, Parse) {
  EXPECT_EQ(parse_depfile("out.o: kernels/a.cu \\\n  /usr/include/x.h kernels/my\\ file.h\n\nkernels/a.cu:\n"),
            (std::vector<std::string>{"kernels/a.cu", "/usr/include/x.h", "kernels/my file.h"}));
  EXPECT_TRUE(parse_depfile("garbage").empty());
}

TEST(Arch, CapabilityAndGencode) {
  EXPECT_EQ(arch_for_capability("9.0"), "sm_90a");
  EXPECT_EQ(arch_for_capability("8.6"), "sm_86");
  EXPECT_EQ(arch_for_capability("10.0"), "sm_100a");
  EXPECT_EQ(arch_for_capability("bogus"), "");
  std::vector<std::string> flags;
  std::string err;
  ASSERT_TRUE(gencode_flags("sm_80,sm_90a", &flags, &err));
  EXPECT_EQ(flags, (std::vector<std::string>{"-gencode=arch=compute_80,code=sm_80",
                                             "-gencode=arch=compute_90a,code=sm_90a"}));
}

}  // namespace
}  // namespace anvil

namespace anvil {
namespace {

TEST(NvccVersion, ReleaseAndArchCheck) {
  EXPECT_EQ(cuda_release("Cuda compilation tools, release 13.0, V13.0.88"), 130);
  EXPECT_EQ(cuda_release("nonsense"), 0);
  EXPECT_EQ(check_nvcc_for_arch("Cuda compilation tools, release 13.0, V13.0.88", "sm_90a"), "");
  EXPECT_EQ(check_nvcc_for_arch("Cuda compilation tools, release 11.8, V11.8.89", "sm_90a"),
            "nvcc is CUDA 11.8, too old for sm_90a (needs CUDA 12.0 or newer): install a newer CUDA toolkit and put "
            "its nvcc first on PATH, or set CUDA_HOME");
  EXPECT_EQ(check_nvcc_for_arch("Cuda compilation tools, release 11.8, V11.8.89", "sm_80"), "");
}

}  // namespace
}  // namespace anvil
