// The file tools: confinement to the workdir, protected files, exact edits,
// glob patterns, the todo list and predictable cutting.
#include "anvil/agent/file_tools.h"

#include <gtest/gtest.h>

#include "anvil/util/fs.h"

namespace anvil {
namespace {

class FileToolsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::path(ANVIL_TEST_CACHE_DIR) / "file_tools" / ::testing::UnitTest::GetInstance()->current_test_info()->name();
    remove_tree(root_);
    fs::create_directories(root_ / "work" / "kernels");
    std::string e;
    write_file_atomic(root_ / "outside.txt", "secret\n", &e);
    write_file_atomic(root_ / "work" / "model.py", "class Model: pass\n", &e);
    t_.workdir = root_ / "work";
  }
  fs::path root_;
  FileTools t_;
};

TEST_F(FileToolsTest, WritesReadsAndEdits) {
  ToolResult w = t_.write_file("kernels/a.cu", "int a = 1;\nint b = 2;\nint a2 = 1;\n");
  ASSERT_FALSE(w.error) << w.text;
  EXPECT_EQ(w.text, "wrote 34 bytes (3 lines) to kernels/a.cu");
  ToolResult r = t_.read_file("kernels/a.cu", 2, 1);
  EXPECT_NE(r.text.find("(lines 2-2 of 3)"), std::string::npos) << r.text;
  EXPECT_NE(r.text.find("     2\tint b = 2;"), std::string::npos);
  EXPECT_NE(r.text.find("offset 3"), std::string::npos);

  ToolResult e = t_.edit_file("kernels/a.cu", "= 1;", "= 9;");
  EXPECT_TRUE(e.error);
  EXPECT_NE(e.text.find("occurs 2 times in kernels/a.cu (lines 1, 3)"), std::string::npos) << e.text;
  e = t_.edit_file("kernels/a.cu", "int b = 3;", "x");
  EXPECT_TRUE(e.error);
  EXPECT_NE(e.text.find("was not found"), std::string::npos);
  e = t_.edit_file("kernels/a.cu", "int b = 2;", "int b = 5;");
  EXPECT_FALSE(e.error) << e.text;
  e = t_.edit_file("kernels/a.cu", "= 1;", "= 9;", true);
  EXPECT_EQ(e.text, "replaced 2 occurrences in kernels/a.cu (at line 1)");
  EXPECT_EQ(*read_file(root_ / "work" / "kernels" / "a.cu"), "int a = 9;\nint b = 5;\nint a2 = 9;\n");
}

TEST_F(FileToolsTest, PathsStayInsideTheWorkdir) {
  EXPECT_TRUE(t_.read_file("../outside.txt").error);
  EXPECT_NE(t_.read_file("../outside.txt").text.find("outside the workdir"), std::string::npos);
  EXPECT_TRUE(t_.read_file((root_ / "outside.txt").string()).error);
  EXPECT_TRUE(t_.write_file("../x.txt", "x").error);
  fs::create_symlink(root_ / "outside.txt", root_ / "work" / "link.txt");
  EXPECT_TRUE(t_.read_file("link.txt").error);
  EXPECT_TRUE(t_.write_file("link.txt", "x").error);
  EXPECT_EQ(*read_file(root_ / "outside.txt"), "secret\n");
  EXPECT_FALSE(t_.read_file((root_ / "work" / "model.py").string()).error);  // absolute, inside
}

TEST_F(FileToolsTest, ProtectedFilesAreReadOnly) {
  EXPECT_FALSE(t_.read_file("model.py").error);
  ToolResult w = t_.write_file("model.py", "x");
  EXPECT_TRUE(w.error);
  EXPECT_NE(w.text.find("protected"), std::string::npos);
  EXPECT_TRUE(t_.edit_file("./model.py", "class", "klass").error);
  EXPECT_EQ(*read_file(root_ / "work" / "model.py"), "class Model: pass\n");
}

TEST_F(FileToolsTest, GlobMatchesPatterns) {
  for (const char* f : {"kernels/a.cu", "kernels/b.cu", "kernels/a_binding.cpp", "kernels/sub/c.cuh", "model_new.py"}) {
    t_.write_file(f, "x");
  }
  EXPECT_EQ(t_.glob("kernels/*.cu").text, "kernels/a.cu\nkernels/b.cu\n");
  EXPECT_EQ(t_.glob("**/*.cuh").text, "kernels/sub/c.cuh\n");
  EXPECT_EQ(t_.glob("*.py").text, "model.py\nmodel_new.py\n");
  EXPECT_EQ(t_.glob("[a]*.cu", "kernels").text, "kernels/a.cu\n");
  EXPECT_EQ(t_.glob("?.cu", "kernels").text, "kernels/a.cu\nkernels/b.cu\n");
  EXPECT_NE(t_.glob("*.rs").text.find("no files match"), std::string::npos);
}

TEST(Todo, ReplacesTheListAndChecksIt) {
  TodoList t;
  ToolResult r = t.write({{{"content", "write kernel"}, {"status", "completed"}},
                          {{"content", "tune"}, {"status", "in_progress"}},
                          {{"content", "finish"}, {"status", "pending"}}});
  EXPECT_EQ(r.text, "[x] write kernel\n[>] tune\n[ ] finish\n");
  EXPECT_EQ(t.items.size(), 3u);
  r = t.write({{{"content", "x"}, {"status", "done"}}});
  EXPECT_TRUE(r.error);
  EXPECT_NE(r.text.find("status must be pending, in_progress or completed"), std::string::npos);
  EXPECT_EQ(t.items.size(), 3u);  // unchanged
}

TEST(CutText, KeepsHeadAndTailAndSaysWhatWasCut) {
  std::string text;
  for (int i = 0; i < 1000; ++i) text += "line " + std::to_string(i) + "\n";
  std::string cut = cut_text(text, 500, 300);
  EXPECT_LT(cut.size(), 1000u);
  EXPECT_EQ(cut.rfind("line 0\n", 0), 0u);
  EXPECT_NE(cut.find("line 999\n"), std::string::npos);
  EXPECT_NE(cut.find(" lines ("), std::string::npos);
  EXPECT_NE(cut.find("bytes) cut ...]"), std::string::npos);
  EXPECT_EQ(cut_text("short", 10, 10), "short");
}

}  // namespace
}  // namespace anvil
