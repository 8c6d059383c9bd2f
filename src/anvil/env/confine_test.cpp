// What a compiler sees in the builds' view (share/sandbox.json "build"): its own installation,
// wherever that is. On the GPU host g++ is /opt/gcc/bin/g++, a wrapper that runs g++-real beside
// it; a view that bound the wrapper alone made every load_inline build fail there (issue 54).
#include "anvil/env/confine.h"

#include <gtest/gtest.h>

#include "anvil/util/fs.h"

namespace anvil {
namespace {

class ToolchainView : public ::testing::Test {
 protected:
  void SetUp() override {
    env_.home = ANVIL_SOURCE_DIR;
    std::string err;
    config_ = sandbox_config(env_, &err);
    ASSERT_NE(config_, nullptr) << err;
    if (jail_method(*config_, &err).empty()) GTEST_SKIP() << err;
    root_ = make_temp_dir(fs::temp_directory_path(), "anvil-toolchain-view");
    fs::permissions(root_, fs::perms(0755));
  }
  void TearDown() override {
    if (!root_.empty()) remove_tree(root_);
  }
  // A compiler at prefix/<dir>/g++ that runs g++-real beside it, which reads prefix/lib/specs.
  fs::path install(const std::string& dir) {
    fs::path prefix = root_ / "gcc";
    std::string e;
    EXPECT_TRUE(write_file_atomic(prefix / dir / "g++", "#!/bin/sh\nexec \"$(dirname \"$0\")/g++-real\" \"$@\"\n", &e,
                                  0755)) << e;
    EXPECT_TRUE(write_file_atomic(prefix / dir / "g++-real", "#!/bin/sh\ncat \"$(dirname \"$0\")/../lib/specs\"\n",
                                  &e, 0755)) << e;
    EXPECT_TRUE(write_file_atomic(prefix / "lib" / "specs", "specs of the real compiler\n", &e, 0644)) << e;
    return prefix / dir / "g++";
  }
  JailResult run(const fs::path& compiler) {
    env_.cxx.path = compiler;
    JailOptions j;
    j.config = config_;
    j.view = &config_->build;
    j.toolchain = toolchain_paths(env_);
    j.env = {"PATH=/usr/bin:/bin", "LANG=C.UTF-8"};
    j.timeout = std::chrono::seconds(20);
    JailResult r = run_jailed({compiler.string(), "--version"}, j);
    EXPECT_TRUE(r.started) << r.error;
    return r;
  }

  Environment env_;
  const JailConfig* config_ = nullptr;
  fs::path root_;
};

TEST_F(ToolchainView, ACompilerInItsOwnPrefixRunsWhatItsInstallationHolds) {
  JailResult r = run(install("bin"));
  EXPECT_TRUE(r.ok()) << r.describe() << "\n" << r.output;
  EXPECT_EQ(r.output, "specs of the real compiler\n");
}

TEST_F(ToolchainView, ACompilerOutsideABinDirectoryBringsOnlyItself) {
  // The directory of a compiler named anywhere (a home directory, say) stays out of view.
  JailResult r = run(install("tools"));
  EXPECT_FALSE(r.ok()) << r.output;
  EXPECT_EQ(r.output.find("specs of the real compiler"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace anvil
