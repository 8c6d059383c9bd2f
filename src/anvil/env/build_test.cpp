// Build-service tests with the real compilers (g++ for CPU variants; nvcc,
// compile-only, for CUDA candidates). They share one cache directory so the
// once-per-environment runtime is built once per test run; each test makes
// its candidate's sources unique with a nonce, so "cold" means cold.
#include "anvil/env/build.h"

#include <gtest/gtest.h>

#include "support/test_env.h"
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <random>
#include <thread>

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
  EXPECT_EQ(unit(r, "kernels/elementwise_chain.cpp").explain, "compiled: kernels/tuning.h changed");
  EXPECT_TRUE(unit(r, "kernels/elementwise_chain_binding.cpp").cached);
  // Back to the first header: both objects are still in the cache.
  ASSERT_TRUE(write_file_atomic(w / "kernels" / "tuning.h", "#pragma once\nconstexpr int kTuning = 1;\n", &e));
  BuildReport back = build_workdir(env(), w, o);
  EXPECT_EQ(back.compiled(), 0);
  EXPECT_TRUE(back.link_cached);
}

// ---- the build key covers every byte the compiler can read (issue 54) ----

// The assembler reads files the preprocessor never lists (.incbin, .include): a second candidate
// with the same sources and another data.bin was served the first one's object, blob and all.
TEST_F(BuildTest, AFileTheAssemblerReadsIsInTheKey) {
  fs::path a = candidate("examples/candidates/01_elementwise_chain/cpu", "a");
  append(a / "kernels" / "elementwise_chain.cpp",
         "asm(\".pushsection .rodata\\n.incbin \\\"kernels/data.bin\\\"\\n.popsection\");\n");
  std::string e;
  ASSERT_TRUE(write_file_atomic(a / "kernels" / "data.bin", "first candidate's blob", &e)) << e;
  fs::path b = dir_ / "b";
  fs::copy(a, b, fs::copy_options::recursive);
  ASSERT_TRUE(write_file_atomic(b / "kernels" / "data.bin", "second candidate's blob", &e)) << e;
  BuildOptions o;
  o.explain = true;
  BuildReport first = build_workdir(env(), a, o);
  ASSERT_TRUE(first.ok) << first.error << "\n" << first.diagnostics;
  BuildReport second = build_workdir(env(), b, o);
  ASSERT_TRUE(second.ok) << second.error << "\n" << second.diagnostics;
  EXPECT_FALSE(unit(second, "kernels/elementwise_chain.cpp").cached) << "served the first candidate's object";
  EXPECT_TRUE(unit(second, "kernels/elementwise_chain_binding.cpp").cached);  // it reads no data.bin
  std::string module = read_file(b / "cuda_extension.so").value_or("");
  EXPECT_NE(module.find("second candidate's blob"), std::string::npos);
  EXPECT_EQ(module.find("first candidate's blob"), std::string::npos);
  // A change of the file it reads is noticed, and only its reader is compiled again.
  ASSERT_TRUE(write_file_atomic(a / "kernels" / "data.bin", "first candidate's new blob", &e)) << e;
  BuildReport again = build_workdir(env(), a, o);
  ASSERT_TRUE(again.ok) << again.diagnostics;
  EXPECT_EQ(unit(again, "kernels/elementwise_chain.cpp").explain, "compiled: kernels/data.bin changed");
  EXPECT_TRUE(unit(again, "kernels/elementwise_chain_binding.cpp").cached);
  EXPECT_NE(read_file(a / "cuda_extension.so").value_or("").find("first candidate's new blob"), std::string::npos);
}

// __has_include of a file that is not there leaves no trace in the depfile: the file added later
// was not seen ("0 of 3 units compiled"). The stage's names are in every unit's key.
TEST_F(BuildTest, AHeaderAddedLaterIsSeen) {
  fs::path w = candidate("examples/candidates/01_elementwise_chain/cpu");
  fs::path kernel = w / "kernels" / "elementwise_chain.cpp";
  std::string e;
  ASSERT_TRUE(write_file_atomic(kernel, "#if __has_include(\"extra.h\")\n#include \"extra.h\"\n#endif\n" +
                                            *read_file(kernel), &e));
  BuildOptions o;
  o.explain = true;
  ASSERT_TRUE(build_workdir(env(), w, o).ok);
  ASSERT_TRUE(write_file_atomic(w / "kernels" / "extra.h", "#pragma once\nconstexpr int kExtra = 1;\n", &e));
  BuildReport added = build_workdir(env(), w, o);
  ASSERT_TRUE(added.ok) << added.diagnostics;
  EXPECT_EQ(unit(added, "kernels/elementwise_chain.cpp").explain, "compiled: kernels/extra.h added");
  // Now read, it is keyed by its content as any header is.
  ASSERT_TRUE(write_file_atomic(w / "kernels" / "extra.h", "#error extra.h changed\n", &e));
  BuildReport changed = build_workdir(env(), w, o);
  EXPECT_FALSE(changed.ok);
  EXPECT_NE(changed.diagnostics.find("extra.h changed"), std::string::npos) << changed.diagnostics;
  // Gone again: the first object serves.
  fs::remove(w / "kernels" / "extra.h");
  BuildReport removed = build_workdir(env(), w, o);
  ASSERT_TRUE(removed.ok) << removed.diagnostics;
  EXPECT_EQ(removed.compiled(), 0);
}

// /proc/self/cwd is the stage under another name: what the compiler read there cannot be hashed
// outside the jail, so its object serves that build alone.
TEST_F(BuildTest, AFileReadThroughAnAliasOfTheStageIsNeverServedAgain) {
  fs::path w = candidate("examples/candidates/01_elementwise_chain/cpu");
  std::string e;
  ASSERT_TRUE(write_file_atomic(w / "kernels" / "tuning.h", "#pragma once\nconstexpr int kTuning = 1;\n", &e));
  fs::path kernel = w / "kernels" / "elementwise_chain.cpp";
  ASSERT_TRUE(write_file_atomic(kernel, "#include \"/proc/self/cwd/kernels/tuning.h\"\n" + *read_file(kernel), &e));
  BuildOptions o;
  o.explain = true;
  BuildReport first = build_workdir(env(), w, o);
  ASSERT_TRUE(first.ok) << first.diagnostics;
  EXPECT_EQ(unit(first, "kernels/elementwise_chain.cpp").explain,
            "compiled, for this build alone: it read /proc/self/cwd/kernels/tuning.h, which is the jail's own");
  ASSERT_TRUE(write_file_atomic(w / "kernels" / "tuning.h", "#error tuning.h changed\n", &e));
  BuildReport second = build_workdir(env(), w, o);
  EXPECT_FALSE(second.ok);
  EXPECT_NE(second.diagnostics.find("tuning.h changed"), std::string::npos) << second.diagnostics;
}

// load_inline's sources: the headers staged beside them are read by the assembler too.
TEST_F(BuildTest, LoadInlineHeadersTheAssemblerReadsAreInTheKey) {
  std::string e;
  fs::path src = dir_ / "main.cpp";
  ASSERT_TRUE(write_file_atomic(src,
                                "#include <torch/extension.h>\n"
                                "asm(\".pushsection .rodata\\n.incbin \\\"blob.h\\\"\\n.popsection\");\n"
                                "int64_t add1(int64_t x) { return x + 1; }\n"
                                "PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def(\"add1\", &add1); }\n"
                                "// nonce " + std::to_string(std::random_device{}()) + "\n",
                                &e));
  SourcesSpec spec;
  spec.name = "inline_blob";
  spec.sources = {src};
  spec.out_dir = dir_ / "out";
  for (const char* blob : {"first blob", "second blob"}) {
    fs::path header = dir_ / blob / "blob.h";  // load_inline writes each to a fresh directory
    ASSERT_TRUE(write_file_atomic(header, blob, &e)) << e;
    spec.headers = {header};
    BuildReport r = build_sources(env(), spec, {});
    ASSERT_TRUE(r.ok) << r.error << "\n" << r.diagnostics;
    EXPECT_EQ(r.compiled(), 1) << blob;
    EXPECT_NE(read_file(r.module).value_or("").find(blob), std::string::npos) << blob;
  }
}

// ---- the compilers' view: the sources and the toolchain (issue 54) ----

// The host's identity under /etc (passwd, os-release) is not in the compilers' view, whether the
// preprocessor or the assembler asks.
TEST_F(BuildTest, TheCompilersSeeNoHostFilesUnderEtc) {
  ASSERT_TRUE(fs::exists("/etc/passwd") && fs::exists("/etc/os-release")) << "the host lacks what the test reads";
  fs::path w = candidate("examples/candidates/01_elementwise_chain/cpu");
  append(w / "kernels" / "elementwise_chain.cpp", "#include \"/etc/passwd\"\n");
  BuildReport r = build_workdir(env(), w, {});
  ASSERT_FALSE(r.ok);
  EXPECT_EQ(r.error_kind, "compile_error") << r.error;
  EXPECT_NE(r.diagnostics.find("/etc/passwd: No such file or directory"), std::string::npos) << r.diagnostics;
  EXPECT_EQ(r.diagnostics.find("root:"), std::string::npos) << r.diagnostics;

  fs::path v = candidate("examples/candidates/01_elementwise_chain/cpu", "v");
  append(v / "kernels" / "elementwise_chain.cpp",
         "asm(\".pushsection .rodata\\n.incbin \\\"/etc/os-release\\\"\\n.popsection\");\n");
  r = build_workdir(env(), v, {});
  ASSERT_FALSE(r.ok) << "the assembler read the host's /etc/os-release";
  EXPECT_EQ(r.error_kind, "compile_error") << r.error;
  EXPECT_NE(r.diagnostics.find("file not found: /etc/os-release"), std::string::npos) << r.diagnostics;
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

// A header whose name is not UTF-8 (load()'s sources are a single-file candidate's neighbours, of any
// name): its depfile's name went into the unit's manifest through nlohmann's strict dump, which threw
// in the compile's worker thread (std::terminate: anvil aborted). Refused now, as a workdir's copy
// refuses it (a record could only carry it as U+FFFD, which another name could match).
TEST_F(BuildTest, ASourceNameThatIsNotUtf8IsRefused) {
  std::string e;
  fs::path src = dir_ / "bytes" / "main.cpp", header = dir_ / "bytes" / "\xff\xfe.h";
  ASSERT_TRUE(write_file_atomic(header, "static const int kOffset = 4;\n", &e));
  ASSERT_TRUE(write_file_atomic(src,
                                "#include <torch/extension.h>\n#include \"\xff\xfe.h\"\n"
                                "int64_t plus(int64_t x) { return x + kOffset; }\n"
                                "PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def(\"plus\", &plus); }\n",
                                &e));
  SourcesSpec spec;
  spec.name = "anvil_bytes_ext";
  spec.sources = {src};
  spec.headers = {header};
  spec.out_dir = dir_ / "bytes" / "out";
  BuildReport r = build_sources(env(), spec, {});
  EXPECT_FALSE(r.ok);
  EXPECT_EQ(r.error_kind, "workdir_error");
  EXPECT_EQ(r.error, "header \\xff\\xfe.h: the name is not UTF-8; name a candidate's files in UTF-8, without control "
                     "characters");
  EXPECT_TRUE(r.units.empty());  // nothing was compiled
}

// A PCH named by a candidate's extra_cflags made one 757 MB file (and 60 s of g++) per new flag, never
// evicted: a policy passing -DANVIL_NONCE=<time> filled the cache's disk. The runtime area keeps one
// PCH per anvil flag set; g++ takes it where the candidate's flags leave torch's headers as they were
// and reads the headers themselves where not (-DNDEBUG), -Werror or not.
TEST_F(BuildTest, LoadInlineFlagsAddNoPrecompiledHeaders) {
  auto pchs = [&] {
    size_t n = 0;
    for (const auto& rel : list_files(runtime_dir(env()))) n += rel.extension() == ".gch";
    return n;
  };
  std::string e, nonce = std::to_string(std::random_device{}()) + std::to_string(getpid());
  std::vector<std::vector<std::string>> flag_sets = {{"-DANVIL_NONCE=" + nonce + "1"},
                                                     {"-DANVIL_NONCE=" + nonce + "2", "-O3"},
                                                     {"-DNDEBUG", "-Werror", "-DANVIL_NONCE=" + nonce + "3"}};
  size_t after_first = 0;
  for (size_t i = 0; i < flag_sets.size(); ++i) {
    std::string name = "anvil_pch_flags_" + std::to_string(i);
    fs::path src = dir_ / name / "main.cpp";
    ASSERT_TRUE(write_file_atomic(src,
                                  "#include <torch/extension.h>\nint64_t thrice(int64_t x) { return 3 * x; }\n"
                                  "PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def(\"thrice\", &thrice); }\n// " + nonce + "\n",
                                  &e));
    SourcesSpec spec;
    spec.name = name;
    spec.sources = {src};
    spec.out_dir = dir_ / name / "out";
    spec.cflags = flag_sets[i];
    BuildReport r = build_sources(env(), spec, {});
    ASSERT_TRUE(r.ok) << join(flag_sets[i], " ") << ": " << r.error << "\n" << r.diagnostics;
    // Whether this build made a PCH is its own setup time (the runtime area's count is shared with
    // the tests that run beside this one under ctest -j, which make PCHs of their own flags).
    if (i == 0) {
      after_first = pchs();
    } else {
      EXPECT_EQ(r.setup_seconds, 0.0) << join(flag_sets[i], " ") << " made a precompiled header of its own";
    }
  }
  EXPECT_GE(after_first, 1u);
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

// The build reads the workdir's own copies of the fixed files only to warn that they differ. A FIFO
// there (the agent's bash can make one) hung `anvil build` and the agent's build tool for good, and a
// link to /dev/zero was read without end: neither is read now. The build runs in a child, its memory
// bounded, that the test ends if it does not finish in time.
TEST_F(BuildTest, FixedFilesThatAreNotRegularAreNotRead) {
  fs::path w = candidate("examples/candidates/01_elementwise_chain/cpu_compat");
  fs::remove(w / "binding.cpp");
  ASSERT_EQ(::mkfifo((w / "binding.cpp").c_str(), 0644), 0);
  fs::remove(w / "binding_registry.h");
  fs::create_symlink("/dev/zero", w / "binding_registry.h");
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    rlimit r{4ull << 30, RLIM_INFINITY};  // the soft limit: the jailed compilers set their own
    setrlimit(RLIMIT_AS, &r);
    BuildReport b = build_workdir(env(), w, {});
    _exit(b.ok && b.mode == "compat" ? 0 : 1);
  }
  int st = 0;
  auto until = std::chrono::steady_clock::now() + std::chrono::seconds(240);
  while (waitpid(pid, &st, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > until) {
      ::kill(pid, SIGKILL);
      waitpid(pid, &st, 0);
      FAIL() << "the build did not finish in 240 s (it read the FIFO)";
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ASSERT_TRUE(WIFEXITED(st)) << "the build died (signal " << (WIFSIGNALED(st) ? WTERMSIG(st) : 0) << ")";
  EXPECT_EQ(WEXITSTATUS(st), 0) << "the build failed";
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

// A load_inline .cu is compiled with torch's flags for load_inline, not anvil's workdir flags: a file
// written for torch (its own __half operator, which torch's -D__CUDA_NO_HALF_OPERATORS__ makes room
// for; a constexpr host function called on the device) builds, and nothing adds --use_fast_math.
TEST_F(BuildTest, LoadInlineCudaIsCompiledWithTorchsFlags) {
  if (!env().nvcc.found()) GTEST_SKIP() << "nvcc not installed";
  std::string e;
  fs::path src = dir_ / "cuda.cu";
  ASSERT_TRUE(write_file_atomic(src,
                                "#include <cuda_fp16.h>\n"
                                "__device__ __half operator+(const __half& a, const __half& b) { return __hadd(a, b); }\n"
                                "constexpr float twice(float x) { return 2 * x; }\n"
                                "__global__ void k(__half* x, float* y) { x[0] = x[0] + x[1]; y[0] = twice(y[1]); }\n"
                                "// nonce " + std::to_string(std::random_device{}()) + "\n",
                                &e));
  SourcesSpec spec;
  spec.name = "inline_torch_flags";
  spec.sources = {src};
  spec.out_dir = dir_ / "out";
  BuildOptions o;
  o.arch = "sm_90a";
  o.verbose = true;  // the log keeps the compile command
  BuildReport r = build_sources(env(), spec, o);
  ASSERT_TRUE(r.ok) << r.error << "\n" << r.diagnostics;
  std::string log = read_file(r.log).value_or("");
  EXPECT_NE(log.find("-D__CUDA_NO_HALF_OPERATORS__"), std::string::npos) << log;
  EXPECT_EQ(log.find("fast_math"), std::string::npos) << log;
  // The file's own flags come last: asking for cuda_fp16's operators back makes them clash with its own.
  spec.cuda_cflags = {"-U__CUDA_NO_HALF_OPERATORS__"};
  r = build_sources(env(), spec, o);
  EXPECT_FALSE(r.ok);
  EXPECT_NE(r.diagnostics.find("operator+"), std::string::npos) << r.diagnostics;
}

// A load_inline .cu that includes <torch/extension.h> (most KernelBench files do) is compiled without
// it first: torch/types.h, which load_inline's prelude includes, is what a kernel file uses, and
// nvcc's passes over torch/all.h and pybind11 were most of a cold build. Where that lighter text does
// not compile, the file is compiled as it is, and a failure is reported with its own diagnostics.
TEST_F(BuildTest, LoadInlineCudaIsCompiledWithTheFewestTorchHeadersThatCompileIt) {
  if (!env().nvcc.found()) GTEST_SKIP() << "nvcc not installed";
  std::string e;
  std::string nonce = "// nonce " + std::to_string(std::random_device{}()) + "\n";
  fs::path src = dir_ / "light" / "cuda.cu";
  // TORCH_MODULE (torch/nn) comes only with the full header: its absence is what the build must see.
  ASSERT_TRUE(write_file_atomic(src,
                                "#include <torch/types.h>\n#include <cuda.h>\n#include <cuda_runtime.h>\n\n"
                                "#include <torch/extension.h>\n"
                                "#ifdef TORCH_MODULE\n#error the full header was compiled\n#endif\n"
                                "__global__ void twice(const float* x, float* y, int n) {\n"
                                "  int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) y[i] = 2 * x[i]; }\n"
                                "torch::Tensor twice_cuda(torch::Tensor x) {\n"
                                "  auto y = torch::zeros_like(x); int n = x.numel();\n"
                                "  twice<<<(n + 255) / 256, 256>>>(x.data_ptr<float>(), y.data_ptr<float>(), n);\n"
                                "  return y; }\n" + nonce,
                                &e));
  SourcesSpec spec;
  spec.name = "inline_light";
  spec.sources = {src};
  spec.out_dir = dir_ / "out";
  BuildOptions o;
  o.arch = "sm_90a";
  BuildReport r = build_sources(env(), spec, o);
  EXPECT_TRUE(r.ok) << r.error << "\n" << r.diagnostics;
  // What it calls (zeros_like) has a per-operator header: ATen's Tensor and that one are all it gets.
  EXPECT_EQ(r.headers, "fewest");
  EXPECT_EQ(r.to_json().value("headers", ""), "fewest");
  // A call with no per-operator header of its own, declared by ATen.h alone (at::show_config,
  // ATen/Version.h): torch/types.h.
  fs::path context = dir_ / "context" / "cuda.cu";
  ASSERT_TRUE(write_file_atomic(context,
                                "#include <torch/types.h>\n#include <torch/extension.h>\n"
                                "#ifdef TORCH_MODULE\n#error the full header was compiled\n#endif\n"
                                "torch::Tensor same(torch::Tensor x) {\n"
                                "  TORCH_CHECK(!at::show_config().empty());\n"
                                "  return x / 2; }\n" + nonce,
                                &e));
  spec.sources = {context};
  r = build_sources(env(), spec, o);
  EXPECT_TRUE(r.ok) << r.error << "\n" << r.diagnostics;
  EXPECT_EQ(r.headers, "types");
  // Neither text compiles: the file's own (full) text's diagnostics are the report's.
  fs::path both = dir_ / "both" / "cuda.cu";
  ASSERT_TRUE(write_file_atomic(both,
                                "#include <torch/types.h>\n#include <torch/extension.h>\n"
                                "#ifdef TORCH_MODULE\n#error as_given\n#else\n#error lighter\n#endif\n" + nonce,
                                &e));
  spec.sources = {both};
  r = build_sources(env(), spec, o);
  EXPECT_FALSE(r.ok);
  EXPECT_NE(r.diagnostics.find("as_given"), std::string::npos) << r.diagnostics;
  EXPECT_EQ(r.diagnostics.find("lighter"), std::string::npos) << r.diagnostics;
  // A file that names what only the full header declares is compiled as it is, at once.
  fs::path nn = dir_ / "nn" / "cuda.cu";
  ASSERT_TRUE(write_file_atomic(nn,
                                "#include <torch/types.h>\n#include <torch/extension.h>\n"
                                "#ifdef TORCH_MODULE\n#error as_given\n#else\n#error lighter\n#endif\n"
                                "// torch::nn::functional::relu\n" + nonce,
                                &e));
  spec.sources = {nn};
  r = build_sources(env(), spec, o);
  EXPECT_NE(r.diagnostics.find("as_given"), std::string::npos) << r.diagnostics;
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
