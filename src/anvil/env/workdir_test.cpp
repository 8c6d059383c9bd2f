// Tests of workdir scanning: every malformed workdir gets a specific message.
#include "anvil/env/workdir.h"

#include <gtest/gtest.h>

#include "anvil/util/fs.h"

namespace anvil {
namespace {

class WorkdirTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = make_temp_dir(fs::temp_directory_path(), "anvil-workdir-test"); }
  void TearDown() override { remove_tree(dir_); }
  void write(const std::string& rel, const std::string& text) {
    std::string e;
    ASSERT_TRUE(write_file_atomic(dir_ / rel, text, &e)) << e;
  }
  std::string scan_error() {
    Workdir w;
    std::string err;
    EXPECT_FALSE(scan_workdir(dir_, &w, &err));
    return err;
  }
  fs::path dir_;
};

TEST_F(WorkdirTest, Missing) {
  Workdir w;
  std::string err;
  EXPECT_FALSE(scan_workdir(dir_ / "nope", &w, &err));
  EXPECT_EQ(err, "workdir " + (dir_ / "nope").string() + " does not exist or is not a directory");
}

TEST_F(WorkdirTest, NoKernelsDirectory) {
  EXPECT_NE(scan_error().find("has no kernels/ directory"), std::string::npos);
}

TEST_F(WorkdirTest, NoBinding) {
  write("kernels/a.cu", "__global__ void k() {}\n");
  EXPECT_NE(scan_error().find("no kernels/*_binding.cpp"), std::string::npos);
}

TEST_F(WorkdirTest, BindingWithoutAMode) {
  write("kernels/a_binding.cpp", "#include <vector>\n");
  EXPECT_EQ(scan_error(), "kernels/a_binding.cpp includes neither <anvil/binding.h> (fast mode) nor "
                          "\"../binding_registry.h\" (CUDA-Agent mode): one of them is required");
}

TEST_F(WorkdirTest, MixedModes) {
  write("kernels/a_binding.cpp", "#include <anvil/binding.h>\n");
  write("kernels/b_binding.cpp", "#include \"../binding_registry.h\"\n");
  EXPECT_EQ(scan_error(), "bindings mix modes: kernels/a_binding.cpp use <anvil/binding.h> but "
                          "kernels/b_binding.cpp use binding_registry.h; use one mode for the whole workdir");
}

TEST_F(WorkdirTest, SymlinkOutsideTheWorkdir) {
  write("kernels/a_binding.cpp", "#include <anvil/binding.h>\n");
  fs::create_symlink("/etc/hostname", dir_ / "kernels" / "leak.h");
  EXPECT_NE(scan_error().find("kernels/leak.h is a symbolic link to /etc/hostname, outside the workdir"),
            std::string::npos);
}

TEST_F(WorkdirTest, DetectsModeAndDevice) {
  write("kernels/a.cu", "__global__ void k() {}\n");
  write("kernels/a_binding.cpp", "#include <anvil/binding.h>\n");
  write("kernels/helper.cuh", "");
  write("stray.cu", "");
  Workdir w;
  std::string err;
  ASSERT_TRUE(scan_workdir(dir_, &w, &err)) << err;
  EXPECT_EQ(w.mode, BindingMode::Fast);
  EXPECT_EQ(w.device, Device::Cuda);
  EXPECT_EQ(w.units.size(), 2u);
  EXPECT_EQ(w.files.size(), 3u);
  ASSERT_EQ(w.warnings.size(), 2u);
  EXPECT_EQ(w.warnings[0], "ignored stray.cu: sources belong in kernels/");
  EXPECT_NE(w.warnings[1].find("no model_new.py"), std::string::npos);
}

TEST_F(WorkdirTest, CpuCompat) {
  write("kernels/k.cpp", "");
  write("kernels/k_binding.cpp", "#include \"../binding_registry.h\"\n");
  write("model_new.py", "");
  Workdir w;
  std::string err;
  ASSERT_TRUE(scan_workdir(dir_, &w, &err)) << err;
  EXPECT_EQ(w.mode, BindingMode::Compat);
  EXPECT_EQ(w.device, Device::Cpu);
  EXPECT_TRUE(w.warnings.empty());
}

}  // namespace
}  // namespace anvil
