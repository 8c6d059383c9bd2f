// Which interpreter anvil runs with no variable set: the README's set-up's .venv beside anvil's
// sources (issue 23: `anvil init` after the set-up found no torch).
#include "anvil/env/toolchain.h"

#include <gtest/gtest.h>

#include <cstdlib>

#include "anvil/util/fs.h"

namespace anvil {
namespace {

class PythonTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (const char* v = std::getenv("ANVIL_PYTHON")) saved_ = v;
    ::unsetenv("ANVIL_PYTHON");
    home_ = make_temp_dir(fs::temp_directory_path(), "anvil-home");
  }
  void TearDown() override {
    if (saved_) ::setenv("ANVIL_PYTHON", saved_->c_str(), 1);
    remove_tree(home_);
  }
  std::optional<std::string> saved_;
  fs::path home_;
};

TEST_F(PythonTest, TheSetUpsVenvBesideTheSourcesIsFound) {
  fs::path venv = home_ / ".venv" / "bin" / "python";
  std::string err;
  ASSERT_TRUE(write_file_atomic(venv, "#!/bin/sh\n", &err, 0755)) << err;
  EXPECT_EQ(find_python(home_), venv);
  ::setenv("ANVIL_PYTHON", "/bin/sh", 1);  // the variable, when set, wins
  EXPECT_EQ(find_python(home_), fs::path("/bin/sh"));
}

TEST_F(PythonTest, WithoutAVenvItIsPython3OnThePath) {
  fs::path venv = home_ / ".venv" / "bin" / "python";
  std::string err;
  ASSERT_TRUE(write_file_atomic(venv, "not a program\n", &err, 0644)) << err;  // not executable: not taken
  fs::path found = find_python(home_);
  EXPECT_NE(found, venv);
  EXPECT_EQ(found.filename(), "python3");
}

}  // namespace
}  // namespace anvil
