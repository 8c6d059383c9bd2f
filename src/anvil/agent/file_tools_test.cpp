// The file tools: confinement to the workdir (.., absolute paths, symlinks),
// protected files, reading (numbering, limits, binary files), exact edits and
// their error messages, glob patterns, the todo list and predictable cutting.
// The texts are what the model reads, so the tests check them word for word.
#include "anvil/agent/file_tools.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <future>

#include "anvil/util/fs.h"

namespace anvil {
namespace {

bool has(const std::string& s, const std::string& what) { return s.find(what) != std::string::npos; }

class FileToolsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ =
        fs::path(ANVIL_TEST_CACHE_DIR) / "file_tools" / ::testing::UnitTest::GetInstance()->current_test_info()->name();
    remove_tree(root_);
    fs::create_directories(root_ / "work" / "kernels");
    put(root_ / "outside.txt", "secret\n");
    put(root_ / "work" / "model.py", "class Model: pass\n");
    t_.workdir = root_ / "work";
  }
  static void put(const fs::path& p, const std::string& s) {
    std::string e;
    ASSERT_TRUE(write_file_atomic(p, s, &e)) << e;
  }
  std::string in_work(const std::string& rel) { return *read_file(root_ / "work" / rel); }
  fs::path root_;
  FileTools t_;
};

// ---- read_file --------------------------------------------------------------------------------

TEST_F(FileToolsTest, ReadsNumberedLinesWithAHeader) {
  put(root_ / "work" / "kernels" / "a.cu", "int a = 1;\nint b = 2;\r\nint c = 3;\n");
  ToolResult r = t_.read_file("kernels/a.cu");
  ASSERT_FALSE(r.error) << r.text;
  EXPECT_EQ(r.text, "kernels/a.cu (lines 1-3 of 3)\n     1\tint a = 1;\n     2\tint b = 2;\n     3\tint c = 3;\n");
  r = t_.read_file("kernels/a.cu", 2, 1);
  EXPECT_EQ(r.text, "kernels/a.cu (lines 2-2 of 3)\n     2\tint b = 2;\n[1 more line: read on with offset 3]\n");
  r = t_.read_file("./kernels/../kernels/a.cu", 0, 100);  // offset < 1 reads from the start
  EXPECT_TRUE(r.text.starts_with("kernels/a.cu (lines 1-3 of 3)\n")) << r.text;
  r = t_.read_file("kernels/a.cu", 9);
  EXPECT_TRUE(r.error);
  EXPECT_EQ(r.text, "error: read_file: kernels/a.cu has 3 lines; offset 9 is past its end");
}

TEST_F(FileToolsTest, ReadSaysHowToGoOnWhenCutByTheByteLimit) {
  std::string text;
  for (int i = 1; i <= 50; ++i) text += "line number " + std::to_string(i) + "\n";
  put(root_ / "work" / "long.txt", text);
  t_.max_read_bytes = 100;  // each numbered line is 22-23 bytes: 4 fit
  ToolResult r = t_.read_file("long.txt");
  EXPECT_TRUE(r.text.starts_with("long.txt (lines 1-4 of 50)\n")) << r.text;
  EXPECT_TRUE(has(r.text, "[output limit of 100 bytes reached: read on with offset 5]\n")) << r.text;
  r = t_.read_file("long.txt", 5);
  EXPECT_TRUE(r.text.starts_with("long.txt (lines 5-8 of 50)\n     5\tline number 5\n")) << r.text;
}

TEST_F(FileToolsTest, ReadCutsALineLongerThanTheLimitAndMovesOn) {
  put(root_ / "work" / "min.js", std::string(5000, 'x') + "\nshort\n");
  t_.max_read_bytes = 1000;
  ToolResult r = t_.read_file("min.js");
  EXPECT_FALSE(r.error);
  EXPECT_TRUE(r.text.starts_with("min.js (lines 1-1 of 2)\n")) << r.text;
  EXPECT_TRUE(has(r.text, " [... line 1 is 5000 bytes; cut here]\n"));
  EXPECT_TRUE(has(r.text, "read on with offset 2]"));
  EXPECT_LT(r.text.size(), 1200u);
}

TEST_F(FileToolsTest, ReadRefusesWhatIsNotText) {
  put(root_ / "work" / "cuda_extension.so", std::string("\x7f"
                                                        "ELF\0\0\1",
                                                        7));
  ToolResult r = t_.read_file("cuda_extension.so");
  EXPECT_TRUE(r.error);
  EXPECT_EQ(r.text,
            "error: read_file: cuda_extension.so is a binary file (7 bytes); inspect it with bash (file, xxd, nm, "
            "cuobjdump)");
  EXPECT_EQ(t_.read_file("kernels").text, "error: read_file: kernels is a directory (use glob, or bash ls)");
  EXPECT_EQ(t_.read_file("kernels/none.cu").text, "error: read_file: kernels/none.cu does not exist");
  EXPECT_EQ(t_.read_file("").text, "error: read_file: the path is empty");
  put(root_ / "work" / "empty.txt", "");
  EXPECT_EQ(t_.read_file("empty.txt").text, "empty.txt is empty (0 lines)");
  // Not UTF-8 (Latin-1): shown, with the bad bytes replaced, and said so.
  put(root_ / "work" / "latin1.txt", "caf\xe9\n");
  r = t_.read_file("latin1.txt");
  EXPECT_FALSE(r.error);
  EXPECT_TRUE(has(r.text, "     1\tcaf\xEF\xBF\xBD\n")) << r.text;
  EXPECT_TRUE(has(r.text, "[the file is not valid UTF-8"));
}

// A named pipe hung the episode (open() waits for a writer): regular files only, at once. The
// call runs aside; should it block, a writer is opened so the test ends and fails.
TEST_F(FileToolsTest, ReadAndEditRefuseAFifoAtOnce) {
  fs::path fifo = root_ / "work" / "kernels" / "pipe.cu";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0644), 0);
  for (bool edit : {false, true}) {
    auto job = std::async(std::launch::async, [&] {
      return edit ? t_.edit_file("kernels/pipe.cu", "a", "b") : t_.read_file("kernels/pipe.cu");
    });
    if (job.wait_for(std::chrono::seconds(5)) != std::future_status::ready) {
      int w = ::open(fifo.c_str(), O_WRONLY | O_NONBLOCK);
      if (w >= 0) ::close(w);
      ADD_FAILURE() << (edit ? "edit_file" : "read_file") << " blocked on a FIFO";
    }
    ToolResult r = job.get();
    EXPECT_TRUE(r.error);
    EXPECT_EQ(r.text, std::string("error: ") + (edit ? "edit_file" : "read_file") +
                          ": kernels/pipe.cu is a FIFO, not a regular file; only regular files can be read and edited");
  }
}

// Files the tools create belong to the workdir's owner: when anvil is root, the sandboxed shell
// runs as another user and must be able to edit them.
TEST_F(FileToolsTest, WhatTheToolsCreateBelongsToTheWorkdirsOwner) {
  if (geteuid() != 0) GTEST_SKIP() << "only root can give files away";
  ASSERT_EQ(::chown((root_ / "work").c_str(), 65534, 65534), 0);
  ASSERT_FALSE(t_.write_file("kernels/deep/new.cu", "// new\n").error);
  ASSERT_FALSE(t_.edit_file("kernels/deep/new.cu", "new", "newer").error);
  for (const char* rel : {"kernels/deep", "kernels/deep/new.cu"}) {
    struct stat st;
    ASSERT_EQ(::lstat((root_ / "work" / rel).c_str(), &st), 0);
    EXPECT_EQ(st.st_uid, 65534u) << rel;
    EXPECT_EQ(st.st_gid, 65534u) << rel;
  }
}

// ---- write_file -------------------------------------------------------------------------------

TEST_F(FileToolsTest, WritesFilesAndTheirDirectories) {
  ToolResult w = t_.write_file("kernels/sub/a.cu", "int a = 1;\nint b = 2;\nint a2 = 1;\n");
  ASSERT_FALSE(w.error) << w.text;
  EXPECT_EQ(w.text, "wrote 34 bytes (3 lines) to kernels/sub/a.cu");
  EXPECT_EQ(in_work("kernels/sub/a.cu"), "int a = 1;\nint b = 2;\nint a2 = 1;\n");
  EXPECT_EQ(t_.write_file("x.txt", "no newline").text, "wrote 10 bytes (1 line) to x.txt");
  EXPECT_EQ(t_.write_file("x.txt", "").text, "wrote 0 bytes (0 lines) to x.txt");
  EXPECT_EQ(t_.write_file("kernels", "x").text, "error: write_file: kernels is a directory");
  w = t_.write_file("x.txt/inner.txt", "x");  // a file where a directory should be
  EXPECT_TRUE(w.error);
  EXPECT_TRUE(w.text.starts_with("error: write_file: cannot create the directory x.txt: ")) << w.text;
  t_.max_write_bytes = 10;
  EXPECT_EQ(t_.write_file("big.txt", std::string(11, 'x')).text,
            "error: write_file: the content is 11 bytes, more than the limit of 10 bytes");
  EXPECT_FALSE(fs::exists(root_ / "work" / "big.txt"));
}

TEST_F(FileToolsTest, RewritingKeepsPermissions) {
  put(root_ / "work" / "run.sh", "#!/bin/sh\necho 1\n");
  fs::permissions(root_ / "work" / "run.sh", fs::perms(0755));
  ASSERT_FALSE(t_.edit_file("run.sh", "echo 1", "echo 2").error);
  EXPECT_EQ(fs::status(root_ / "work" / "run.sh").permissions() & fs::perms::mask, fs::perms(0755));
  ASSERT_FALSE(t_.write_file("run.sh", "#!/bin/sh\necho 3\n").error);
  EXPECT_EQ(fs::status(root_ / "work" / "run.sh").permissions() & fs::perms::mask, fs::perms(0755));
}

// ---- edit_file --------------------------------------------------------------------------------

TEST_F(FileToolsTest, EditsExactlyOneOccurrence) {
  put(root_ / "work" / "kernels" / "a.cu", "int a = 1;\nint b = 2;\nint a2 = 1;\n");
  ToolResult e = t_.edit_file("kernels/a.cu", "= 1;", "= 9;");
  EXPECT_TRUE(e.error);
  EXPECT_EQ(e.text,
            "error: edit_file: old_string occurs 2 times in kernels/a.cu (lines 1, 3); add surrounding context to make "
            "it unique, or set replace_all; nothing was changed");
  e = t_.edit_file("kernels/a.cu", "int b = 2;", "int b = 5;\nint b2 = 6;");
  EXPECT_EQ(e.text, "replaced 1 occurrence in kernels/a.cu (line 2)");
  e = t_.edit_file("kernels/a.cu", "= 1;", "= 9;", true);
  EXPECT_EQ(e.text, "replaced 2 occurrences in kernels/a.cu (lines 1, 4)");
  EXPECT_EQ(in_work("kernels/a.cu"), "int a = 9;\nint b = 5;\nint b2 = 6;\nint a2 = 9;\n");
}

TEST_F(FileToolsTest, EditExplainsWhatItCouldNotDo) {
  put(root_ / "work" / "k.cu", "__global__ void k() {\n    int x = 1;\n    int y = 2;\n}\n");
  std::string before = in_work("k.cu");
  // Indentation differs: found with whitespace ignored, and where.
  ToolResult e = t_.edit_file("k.cu", "  int x = 1;\n  int y = 2;", "int z;");
  EXPECT_TRUE(e.error);
  EXPECT_EQ(e.text,
            "error: edit_file: old_string was not found in k.cu (it matches lines 2-3 if whitespace is ignored: copy "
            "the exact text, indentation and line ends included, from read_file); nothing was changed");
  e = t_.edit_file("k.cu", "int  x =  1;", "int z;");
  EXPECT_TRUE(has(e.text, "(it matches line 2 if whitespace is ignored")) << e.text;
  // The first line is there, the rest differs.
  e = t_.edit_file("k.cu", "int x = 1;\nint w = 3;", "int z;");
  EXPECT_TRUE(
      has(e.text, "(its first line matches line 2, but the lines after it differ: read_file shows the current text)"))
      << e.text;
  e = t_.edit_file("k.cu", "float q;", "int z;");
  EXPECT_EQ(e.text,
            "error: edit_file: old_string was not found in k.cu (nothing close: read_file shows the current "
            "text); nothing was changed");
  EXPECT_EQ(t_.edit_file("k.cu", "", "x").text,
            "error: edit_file: old_string is empty (to create a file, use write_file)");
  EXPECT_EQ(t_.edit_file("k.cu", "int x = 1;", "int x = 1;").text,
            "error: edit_file: old_string and new_string are the same; nothing to change");
  EXPECT_EQ(t_.edit_file("new.cu", "a", "b").text,
            "error: edit_file: new.cu does not exist (use write_file to create it)");
  EXPECT_EQ(in_work("k.cu"), before);
  t_.max_write_bytes = 60;
  e = t_.edit_file("k.cu", "int x = 1;", "int x = 1; // a comment that makes it too long");
  EXPECT_TRUE(has(e.text, "more than the limit of 60 bytes; nothing was changed")) << e.text;
  EXPECT_EQ(in_work("k.cu"), before);
}

// ---- confinement ------------------------------------------------------------------------------

TEST_F(FileToolsTest, PathsStayInsideTheWorkdir) {
  std::string root = fs::canonical(root_ / "work").string();
  ToolResult r = t_.read_file("../outside.txt");
  EXPECT_TRUE(r.error);
  EXPECT_EQ(r.text,
            "error: read_file: ../outside.txt is outside the workdir (" + root + "); every path must stay inside it");
  EXPECT_TRUE(t_.read_file((root_ / "outside.txt").string()).error);
  EXPECT_TRUE(t_.write_file("../x.txt", "x").error);
  EXPECT_TRUE(t_.write_file("kernels/../../x.txt", "x").error);
  EXPECT_TRUE(t_.edit_file("/etc/passwd", "root", "toor").error);
  EXPECT_FALSE(fs::exists(root_ / "x.txt"));
  EXPECT_FALSE(t_.read_file((root_ / "work" / "model.py").string()).error);  // absolute, inside
  EXPECT_TRUE(t_.glob("*", "..").error);
}

TEST_F(FileToolsTest, SymlinksCannotLeadOutside) {
  fs::create_symlink(root_ / "outside.txt", root_ / "work" / "link.txt");
  fs::create_directories(root_ / "elsewhere");
  fs::create_directory_symlink(root_ / "elsewhere", root_ / "work" / "linkdir");
  ToolResult r = t_.read_file("link.txt");
  EXPECT_TRUE(r.error);
  EXPECT_TRUE(has(r.text, "read_file: link.txt leads outside the workdir through a symlink (to ")) << r.text;
  EXPECT_TRUE(t_.write_file("link.txt", "x").error);
  EXPECT_TRUE(t_.edit_file("link.txt", "secret", "x").error);
  EXPECT_TRUE(t_.write_file("linkdir/new.txt", "x").error);
  EXPECT_EQ(*read_file(root_ / "outside.txt"), "secret\n");
  EXPECT_FALSE(fs::exists(root_ / "elsewhere" / "new.txt"));
  // A symlink that points nowhere (here: to a file that does not exist outside).
  fs::create_symlink(root_ / "elsewhere" / "future.txt", root_ / "work" / "dangling.txt");
  ToolResult w = t_.write_file("dangling.txt", "x");
  EXPECT_TRUE(w.error);
  EXPECT_TRUE(has(w.text, "goes through a symlink that points nowhere (dangling.txt -> ")) << w.text;
  EXPECT_FALSE(fs::exists(root_ / "elsewhere" / "future.txt"));
  // A symlink to a file inside is followed, and the target is what is checked.
  put(root_ / "work" / "kernels" / "a.cu", "a\n");
  fs::create_symlink("kernels/a.cu", root_ / "work" / "alias.cu");
  EXPECT_EQ(t_.write_file("alias.cu", "b\n").text, "wrote 2 bytes (1 line) to kernels/a.cu");
  EXPECT_EQ(in_work("kernels/a.cu"), "b\n");
  fs::create_symlink("model.py", root_ / "work" / "m.py");
  EXPECT_TRUE(has(t_.write_file("m.py", "x").text, "model.py is protected"));
}

TEST_F(FileToolsTest, ProtectedFilesAreReadOnly) {
  EXPECT_FALSE(t_.read_file("model.py").error);
  ToolResult w = t_.write_file("model.py", "x");
  EXPECT_TRUE(w.error);
  EXPECT_EQ(w.text, "error: write_file: model.py is protected (read-only): the harness uses its own copy");
  EXPECT_EQ(t_.edit_file("./model.py", "class", "klass").text, "error: edit_file: model.py is protected (read-only)");
  EXPECT_TRUE(t_.write_file("binding.cpp", "x").error);  // protected even where it does not exist yet
  EXPECT_EQ(*read_file(root_ / "work" / "model.py"), "class Model: pass\n");
}

// ---- glob -------------------------------------------------------------------------------------

TEST_F(FileToolsTest, GlobMatchesPatterns) {
  for (const char* f : {"kernels/a.cu", "kernels/b.cu", "kernels/a_binding.cpp", "kernels/sub/c.cuh", "model_new.py",
                        "kernels/x[1].cu"}) {
    ASSERT_FALSE(t_.write_file(f, "x").error);
  }
  EXPECT_EQ(t_.glob("kernels/*.cu").text, "kernels/a.cu\nkernels/b.cu\nkernels/x[1].cu\n");
  EXPECT_EQ(t_.glob("**/*.cuh").text, "kernels/sub/c.cuh\n");
  EXPECT_EQ(t_.glob("**/*.cu").text, "kernels/a.cu\nkernels/b.cu\nkernels/x[1].cu\n");
  EXPECT_EQ(t_.glob("kernels/**").text,
            "kernels/a.cu\nkernels/a_binding.cpp\nkernels/b.cu\nkernels/sub/c.cuh\nkernels/x[1].cu\n");
  EXPECT_EQ(t_.glob("*.py").text, "model.py\nmodel_new.py\n");
  EXPECT_EQ(t_.glob("[a]*.cu", "kernels").text, "kernels/a.cu\n");
  EXPECT_EQ(t_.glob("[!a]*.cu", "kernels").text, "kernels/b.cu\nkernels/x[1].cu\n");
  EXPECT_EQ(t_.glob("[a-b].c?", "kernels").text, "kernels/a.cu\nkernels/b.cu\n");
  EXPECT_EQ(t_.glob("?.cu", "kernels").text, "kernels/a.cu\nkernels/b.cu\n");
  EXPECT_EQ(t_.glob("*_binding.cpp", "kernels/").text, "kernels/a_binding.cpp\n");
  EXPECT_EQ(t_.glob("*.cu", "kernels/sub").text,
            "no files match *.cu under kernels/sub (a pattern without / looks in one directory; **/*.cu looks in all)");
  EXPECT_EQ(t_.glob("*.rs").text,
            "no files match *.rs (a pattern without / looks in one directory; **/*.rs looks in all)");
  EXPECT_EQ(t_.glob("").text, "error: glob: the pattern is empty");
  EXPECT_EQ(t_.glob("*", "model.py").text, "error: glob: model.py is not a directory");
  EXPECT_TRUE(t_.glob("/etc/*").error);
}

TEST_F(FileToolsTest, GlobSkipsBuildAndHiddenDirectoriesUnlessNamed) {
  for (const char* f : {"kernels/a.cu", "build/k.o", "build/gen/k.cu", ".cache/torch/k.cu", ".hidden.cu"}) {
    ASSERT_FALSE(t_.write_file(f, "x").error);
  }
  EXPECT_EQ(t_.glob("**/*.cu").text, "kernels/a.cu\n");
  EXPECT_EQ(t_.glob("**/*.o").text,
            "no files match **/*.o; not searched: directories named build, hidden directories (name them in the "
            "pattern to search them)");
  EXPECT_EQ(t_.glob("build/**/*.cu").text, "build/gen/k.cu\n");
  EXPECT_EQ(t_.glob("**/build/*.o").text, "build/k.o\n");
  EXPECT_EQ(t_.glob(".*.cu").text, ".hidden.cu\n");
  EXPECT_EQ(t_.glob(".cache/**/*.cu").text, ".cache/torch/k.cu\n");
}

// Work a model can ask for that once never ended (issue 55): each call is linear in its input now.
// Without the fixes these tests run past ctest's limit for a unit test.
TEST_F(FileToolsTest, GlobOfManyDoubleStarsAgainstADeepPathIsDecidedOnce) {
  std::string deep, many;
  for (int i = 0; i < 24; ++i) deep += "d/", many += "**/";
  put(root_ / "work" / (deep + "f.cu"), "x");
  EXPECT_EQ(t_.glob(many + "nomatch").text.rfind("no files match", 0), 0u);  // C(48, 24) ways to fail, each tried once
  EXPECT_EQ(t_.glob(many + "f.cu").text, deep + "f.cu\n");
  EXPECT_EQ(t_.glob(many + "d/**/f.cu").text, deep + "f.cu\n");
}

TEST_F(FileToolsTest, EditOfHalfAMillionOccurrencesIsOnePass) {
  put(root_ / "work" / "big.txt", std::string(1 << 18, 'a') + "\n" + std::string(1 << 18, 'a'));
  ToolResult e = t_.edit_file("big.txt", "a", "b", true);
  EXPECT_FALSE(e.error) << e.text;
  EXPECT_TRUE(e.text.starts_with("replaced 524288 occurrences in big.txt (lines 1, 1, 1,")) << e.text.substr(0, 200);
  EXPECT_EQ(in_work("big.txt"), std::string(1 << 18, 'b') + "\n" + std::string(1 << 18, 'b'));
  e = t_.edit_file("big.txt", "b", "c");  // not unique: every occurrence's line counted, in one pass
  EXPECT_TRUE(e.error);
  EXPECT_TRUE(has(e.text, "occurs 524288 times in big.txt (lines 1, 1,")) << e.text.substr(0, 200);
  // The size is decided before anything is built: a result over the limit is refused at once.
  e = t_.edit_file("big.txt", "b", std::string(64, 'x'), true);
  EXPECT_TRUE(e.error);
  EXPECT_TRUE(has(e.text, "more than the limit")) << e.text;
}

TEST_F(FileToolsTest, GlobListsAtMost500) {
  for (int i = 0; i < 520; ++i) put(root_ / "work" / "many" / ("f" + std::to_string(1000 + i) + ".txt"), "");
  ToolResult r = t_.glob("many/*.txt");
  EXPECT_TRUE(r.text.starts_with("many/f1000.txt\nmany/f1001.txt\n"));
  EXPECT_TRUE(has(r.text, "many/f1499.txt\n[20 more not shown: narrow the pattern]\n"))
      << r.text.substr(r.text.size() - 200);
}

// ---- the todo list ----------------------------------------------------------------------------

TEST(Todo, ReplacesTheListAndChecksIt) {
  TodoList t;
  ToolResult r = t.write({{{"content", "write kernel"}, {"status", "completed"}},
                          {{"content", "tune"}, {"status", "in_progress"}},
                          {{"content", "finish"}, {"status", "pending"}}});
  EXPECT_EQ(r.text, "[x] write kernel\n[>] tune\n[ ] finish\n");
  EXPECT_EQ(t.items.size(), 3u);
  r = t.write({{{"content", "x"}, {"status", "done"}}});
  EXPECT_TRUE(r.error);
  EXPECT_EQ(r.text, "error: todo_write: item 0: status must be pending, in_progress or completed, not 'done'");
  EXPECT_EQ(t.items.size(), 3u);  // unchanged
  EXPECT_EQ(t.write({{{"status", "pending"}}}).text, "error: todo_write: item 0 needs a content string");
  EXPECT_EQ(t.write({{{"content", " "}, {"status", "pending"}}}).text,
            "error: todo_write: item 0 has an empty content");
  EXPECT_EQ(t.write(nlohmann::json::object()).text, "error: todo_write: todos must be an array of {content, status}");
  EXPECT_EQ(t.items.size(), 3u);
}

TEST(Todo, WarnsAboutSeveralInProgressAndTakesAJsonString) {
  TodoList t;
  ToolResult r =
      t.write({{{"content", "a"}, {"status", "in_progress"}}, {{"content", "b"}, {"status", "in_progress"}}});
  EXPECT_FALSE(r.error);
  EXPECT_EQ(r.text, "[>] a\n[>] b\nnote: 2 items are in progress; keep one at a time\n");
  r = t.write(R"([{"content": "c", "status": "pending"}])");
  EXPECT_EQ(r.text, "[ ] c\n");
  EXPECT_EQ(t.write(nlohmann::json::array()).text, "(the list is empty)\n");
  EXPECT_TRUE(t.items.empty());
}

// ---- cut_text ---------------------------------------------------------------------------------

TEST(CutText, KeepsHeadAndTailAndSaysWhatWasCut) {
  std::string text;
  for (int i = 0; i < 1000; ++i) text += "line " + std::to_string(i) + "\n";
  std::string cut = cut_text(text, 500, 300);
  EXPECT_LT(cut.size(), 900u);
  EXPECT_TRUE(cut.starts_with("line 0\nline 1\n"));
  EXPECT_TRUE(cut.ends_with("line 998\nline 999\n"));
  // Whole lines on both sides of one marker line that counts what went.
  size_t m = cut.find("[... ");
  ASSERT_NE(m, std::string::npos);
  EXPECT_EQ(cut[m - 1], '\n');
  size_t end = cut.find(" cut ...]\n", m);
  ASSERT_NE(end, std::string::npos);
  std::string head = cut.substr(0, m), tail = cut.substr(end + 10);
  EXPECT_LE(head.size(), 500u);
  EXPECT_LE(tail.size(), 300u);
  size_t gone = text.size() - head.size() - tail.size();
  EXPECT_EQ(cut.substr(m, end + 10 - m),
            "[... " +
                std::to_string(std::count(text.begin() + static_cast<long>(head.size()),
                                          text.end() - static_cast<long>(tail.size()), '\n')) +
                " lines (" + std::to_string(gone) + " bytes) cut ...]\n");
  EXPECT_EQ(text.substr(0, head.size()), head);
  EXPECT_EQ(text.substr(text.size() - tail.size()), tail);
}

TEST(CutText, LeavesShortTextAloneAndNeverSplitsACharacter) {
  EXPECT_EQ(cut_text("short", 10, 10), "short");
  std::string just_over(130, 'x');  // over 20+20, but by less than a marker's worth
  EXPECT_EQ(cut_text(just_over, 20, 20), just_over);
  std::string accents;
  for (int i = 0; i < 2000; ++i) accents += "\xC3\xA9";  // é, two bytes each, no newline
  std::string cut = cut_text(accents, 501, 301);
  EXPECT_TRUE(has(cut, "\n[... 1 line (")) << "a marker on its own line";
  size_t m = cut.find("\n[... ");
  EXPECT_EQ(m % 2, 0u);  // the head ends between two characters
  size_t tail_at = cut.find(" cut ...]\n") + 10;
  EXPECT_EQ((cut.size() - tail_at) % 2, 0u);
  EXPECT_EQ(cut.substr(tail_at, 2), "\xC3\xA9");
}

}  // namespace
}  // namespace anvil
