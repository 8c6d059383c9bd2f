// Tests of the compiler-output cleaner: the text a model sees is a contract.
#include "anvil/env/diagnostics.h"

#include <gtest/gtest.h>

namespace anvil {
namespace {

TEST(Diagnostics, GccErrorWithSourceLineAndStagePathStripped) {
  std::string raw =
      "/cache/tmp/stage-ab12/kernels/k.cpp: In function 'void f()':\n"
      "/cache/tmp/stage-ab12/kernels/k.cpp:7:5: error: 'undeclared_thing' was not declared in this scope\n"
      "    7 |     undeclared_thing = 1;\n"
      "      |     ^~~~~~~~~~~~~~~~\n"
      "/cache/tmp/stage-ab12/kernels/k.cpp:9:1: note: some note\n";
  DiagnosticOptions o;
  o.strip_prefixes = {"/cache/tmp/stage-ab12"};
  EXPECT_EQ(format_diagnostics(raw, o),
            "kernels/k.cpp:7: error: 'undeclared_thing' was not declared in this scope\n"
            "    undeclared_thing = 1;\n");
}

TEST(Diagnostics, NvccFormatAndDeduplication) {
  std::string raw =
      "kernels/a.cu(12): error: identifier \"blockIdy\" is undefined\n"
      "    int i = blockIdy.x;\n"
      "            ^\n"
      "\n"
      "kernels/a.cu(12): error: identifier \"blockIdy\" is undefined\n"
      "    int i = blockIdy.x;\n"
      "            ^\n"
      "2 errors detected in the compilation of \"kernels/a.cu\".\n";
  DiagnosticOptions o;
  EXPECT_EQ(format_diagnostics(raw, o),
            "kernels/a.cu:12: error: identifier \"blockIdy\" is undefined\n"
            "    int i = blockIdy.x;\n");
}

TEST(Diagnostics, LinkerUndefinedReference) {
  std::string raw =
      "/usr/bin/ld: /cache/objects/ab/abcd.o: in function `run(anvil::Tensor)':\n"
      "k_binding.cpp:(.text+0x2a): undefined reference to `missing_launch'\n"
      "collect2: error: ld returned 1 exit status\n";
  DiagnosticOptions o;
  EXPECT_EQ(format_diagnostics(raw, o),
            "error: link error: undefined reference to 'missing_launch' (called from 'run(anvil::Tensor)')\n");
}

TEST(Diagnostics, TorchHeaderInFastModeGetsAHint) {
  std::string raw = "kernels/x_binding.cpp:1:10: fatal error: torch/extension.h: No such file or directory\n";
  auto d = parse_diagnostics(raw, {});
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].severity, "fatal error");
  EXPECT_NE(d[0].message.find("include <anvil/binding.h> instead"), std::string::npos);
}

TEST(Diagnostics, CappedWithACountOfTheRest) {
  std::string raw;
  for (int i = 1; i <= 30; ++i) raw += "kernels/k.cu(" + std::to_string(i) + "): error: bad thing " + std::to_string(i) + "\n";
  DiagnosticOptions o;
  o.max_diagnostics = 5;
  o.full_log = "build/build.log";
  std::string text = format_diagnostics(raw, o);
  EXPECT_NE(text.find("kernels/k.cu:5: error: bad thing 5\n"), std::string::npos);
  EXPECT_EQ(text.find("bad thing 6\n"), std::string::npos);
  EXPECT_NE(text.find("... 25 more errors (full log: build/build.log)"), std::string::npos);
}

TEST(Diagnostics, WarningsOnlyWhenNoErrors) {
  std::string raw = "kernels/k.cpp:3:1: warning: unused variable 'x'\nkernels/k.cpp:4:1: error: expected ';'\n";
  auto d = parse_diagnostics(raw, {});
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].line, 4);
}

TEST(Diagnostics, UnparsedOutputFallsBackToItsTail) {
  std::string raw = "something odd happened\nand the compiler died\n";
  EXPECT_EQ(format_diagnostics(raw, {}), raw);
}

TEST(Diagnostics, PtxasError) {
  auto d = parse_diagnostics("ptxas error   : Entry function '_Z1kv' uses too much shared data (0x20000 bytes, 0xc000 max)\n", {});
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].message, "ptxas: Entry function '_Z1kv' uses too much shared data (0x20000 bytes, 0xc000 max)");
}

}  // namespace
}  // namespace anvil

namespace anvil {
namespace {

const std::vector<std::string> kHarness = {"/opt/anvil/python/anvil/", "/torch/nn/modules/module.py", "/threading.py"};

TEST(PythonCrash, TheCrashingThreadsOwnFramesOnly) {
  std::string out =
      "some output\n"
      "Fatal Python error: Segmentation fault\n\n"
      "Thread 0x00007f1 (most recent call first):\n"
      "  File \"/opt/anvil/python/anvil/candidate.py\", line 70 in watchdog\n"
      "  File \"/usr/lib/python3.11/threading.py\", line 982 in run\n\n"
      "Current thread 0x00007f0 (most recent call first):\n"
      "  File \"work/model_new.py\", line 18 in forward\n"
      "  File \"/venv/torch/nn/modules/module.py\", line 1790 in _call_impl\n"
      "  File \"work/helpers.py\", line 3 in run\n"
      "  File \"/opt/anvil/python/anvil/candidate.py\", line 290 in run_candidate\n"
      "  File \"/opt/anvil/python/anvil/zygote.py\", line 129 in _child\n\n"
      "Extension modules: numpy, torch._C (total: 2)\n";
  EXPECT_EQ(python_crash(out, kHarness),
            "Fatal Python error: Segmentation fault\n"
            "  File \"work/model_new.py\", line 18 in forward\n"
            "  File \"work/helpers.py\", line 3 in run");
}

TEST(PythonCrash, OneThreadsDumpAndTheHarnesssOwnCrash) {
  std::string one = "Fatal Python error: Aborted\n\nStack (most recent call first):\n"
                    "  File \"m.py\", line 2 in f\n";
  EXPECT_EQ(python_crash(one, kHarness), "Fatal Python error: Aborted\n  File \"m.py\", line 2 in f");
  // Every frame the harness's: the innermost stays, so the message still says where.
  std::string ours = "Fatal Python error: Segmentation fault\n\nCurrent thread 0x1 (most recent call first):\n"
                     "  File \"/opt/anvil/python/anvil/batch.py\", line 9 in gather\n"
                     "  File \"/opt/anvil/python/anvil/judge.py\", line 5 in run\n";
  EXPECT_EQ(python_crash(ours, kHarness),
            "Fatal Python error: Segmentation fault\n  File \"/opt/anvil/python/anvil/batch.py\", line 9 in gather");
  EXPECT_EQ(python_crash("Segmentation fault (core dumped)\n", kHarness), "");
  EXPECT_EQ(python_crash("Fatal Python error: Segmentation fault\n\nFaTal PyTh  Fi le\n", kHarness), "");
}

TEST(PythonCrash, ANativeThreadsCrashNamesThePythonThreadInTheCandidatesCode) {
  // A worker thread with no Python frames crashed: no "Current thread" block.
  std::string out = "Fatal Python error: Segmentation fault\n\n"
                    "Thread 0x2 (most recent call first):\n"
                    "  File \"/opt/anvil/python/anvil/candidate.py\", line 70 in watchdog\n\n"
                    "Thread 0x1 (most recent call first):\n"
                    "  File \"work/model_new.py\", line 18 in forward\n"
                    "  File \"/opt/anvil/python/anvil/zygote.py\", line 129 in _child\n\n"
                    "Extension modules: torch._C (total: 1)\n";
  EXPECT_EQ(python_crash(out, kHarness),
            "Fatal Python error: Segmentation fault\n"
            "  (it crashed in a thread that runs no Python; the Python thread was here:)\n"
            "  File \"work/model_new.py\", line 18 in forward");
}

TEST(PythonCrash, InterleavedDumpsAreSaidToBe) {
  // Two threads crashed at once and wrote over each other (as seen from a parallel CPU kernel).
  std::string out = "Fatal Python error: Fatal Python error: Segmentation faultSegmentation fault\n\n"
                    "  File   File \"\"/x/threading.py/x/threading.py\"\", line , line 10021002\n";
  EXPECT_EQ(python_crash(out, kHarness),
            "Fatal Python error in several threads at once (their stacks are interleaved in the output)");
}

}  // namespace
}  // namespace anvil
