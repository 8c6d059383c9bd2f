// Tests of workdir scanning: every malformed workdir gets a specific message.
#include "anvil/env/workdir.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <string>
#include <vector>

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

// ---- copying a candidate (the evaluator's private copy, issue 16) ----------------------------

// A 3 GB sparse file in the workdir: refused by its size, never read. The copy runs in a child
// whose address space is 1 GiB, so reading the file into memory would kill it.
TEST_F(WorkdirTest, ACopyRefusesAHugeFileWithoutReadingIt) {
  write("model_new.py", "class ModelNew: pass\n");
  fs::create_directories(dir_ / "kernels");
  int fd = ::open((dir_ / "kernels" / "blob.bin").c_str(), O_WRONLY | O_CREAT, 0644);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::ftruncate(fd, 3ll << 30), 0);
  ::close(fd);
  int pipefd[2];
  ASSERT_EQ(pipe(pipefd), 0);
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    rlimit r{1ull << 30, 1ull << 30};
    setrlimit(RLIMIT_AS, &r);
    std::string err;
    try {
      bool refused = false;
      bool ok = copy_candidate_files(dir_, dir_.string() + "-copy", &err, &refused);
      (void)!::write(pipefd[1], err.data(), err.size());
      _exit(ok ? 1 : refused ? 0 : 2);  // refused: the candidate's doing (judged), not an I/O failure
    } catch (const std::exception& e) {  // std::bad_alloc: it tried to read the file into memory
      (void)!::write(pipefd[1], e.what(), std::strlen(e.what()));
      _exit(3);
    }
  }
  ::close(pipefd[1]);
  std::string said;
  char buf[512];
  for (ssize_t n; (n = ::read(pipefd[0], buf, sizeof buf)) > 0;) said.append(buf, static_cast<size_t>(n));
  ::close(pipefd[0]);
  int st = 0;
  waitpid(pid, &st, 0);
  remove_tree(dir_.string() + "-copy");
  ASSERT_TRUE(WIFEXITED(st)) << "the copy died (signal " << (WIFSIGNALED(st) ? WTERMSIG(st) : 0) << ")";
  EXPECT_EQ(WEXITSTATUS(st), 0) << "the copy succeeded (1), or its refusal was not said to be the candidate's (2)";
  EXPECT_EQ(said, "kernels/blob.bin is 3.0 GB; a candidate's files may be at most 64 MiB each");
  // The build reads the same files: refused there too, before hashing or staging.
  write("kernels/a_binding.cpp", "#include <anvil/binding.h>\n");
  EXPECT_EQ(scan_error(), "kernels/blob.bin is 3.0 GB; a candidate's files may be at most 64 MiB each");
}

// A candidate that made its own files unreadable (chmod 000 in the session's bash, which runs as
// anvil's own uid when anvil is not root): its copy is refused as the candidate's doing (judged,
// load_error), never an I/O failure of anvil's (a session's finalize would answer 503, and the policy
// would trade its reward for no answer). The copy runs in a child as uid 65534, as a non-root anvil
// would, over files that uid owns.
TEST_F(WorkdirTest, ACopyOfFilesTheCandidateMadeUnreadableIsTheCandidatesDoing) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to drop to another uid";
  write("model_new.py", "class ModelNew: pass\n");
  write("kernels/k.cu", "// kernel\n");
  fs::path copy = dir_.string() + "-copy";
  for (const char* mode : {"file", "folder"}) {
    remove_tree(copy);
    fs::create_directories(copy);
    for (const auto& p : {dir_, dir_ / "kernels", dir_ / "kernels" / "k.cu", dir_ / "model_new.py", copy}) {
      ASSERT_EQ(::chown(p.c_str(), 65534, 65534), 0);
    }
    fs::path hidden = std::string(mode) == "file" ? dir_ / "kernels" / "k.cu" : dir_ / "kernels";
    ASSERT_EQ(::chmod(hidden.c_str(), 0), 0);
    pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      if (::setgid(65534) != 0 || ::setuid(65534) != 0) _exit(4);
      std::string err;
      bool refused = false;
      bool ok = copy_candidate_files(dir_, copy / "c", &err, &refused);
      _exit(ok ? 1 : refused ? 0 : 2);
    }
    int st = 0;
    waitpid(pid, &st, 0);
    ::chmod(hidden.c_str(), std::string(mode) == "file" ? 0644 : 0755);
    ASSERT_TRUE(WIFEXITED(st)) << mode;
    EXPECT_EQ(WEXITSTATUS(st), 0) << mode << ": copied (1), an I/O failure of anvil's (2), could not drop (4)";
  }
  remove_tree(copy);
}

TEST_F(WorkdirTest, ACopyTakesRegularFilesOnlyAndBoundsTheTree) {
  write("model_new.py", "class ModelNew: pass\n");
  write("kernels/k.cu", "// kernel\n");
  write("build/anvil-build.json", "{}\n");
  ASSERT_EQ(::mkfifo((dir_ / "kernels" / "pipe").c_str(), 0644), 0);
  fs::create_symlink("/etc/passwd", dir_ / "kernels" / "passwd.h");
  fs::path copy = dir_.string() + "-copy";
  std::string err;
  ASSERT_TRUE(copy_candidate_files(dir_, copy, &err)) << err;
  EXPECT_EQ(*read_file(copy / "kernels" / "k.cu"), "// kernel\n");
  EXPECT_TRUE(fs::exists(copy / "model_new.py"));
  EXPECT_FALSE(fs::exists(fs::symlink_status(copy / "kernels" / "pipe")));
  EXPECT_FALSE(fs::exists(fs::symlink_status(copy / "kernels" / "passwd.h")));
  EXPECT_FALSE(fs::exists(copy / "build"));
  remove_tree(copy);
  // Five files of 60 MiB: each within the limit, 300 MiB in all.
  for (int i = 0; i < 5; ++i) {
    int fd = ::open((dir_ / "kernels" / ("part" + std::to_string(i))).c_str(), O_WRONLY | O_CREAT, 0644);
    ASSERT_EQ(::ftruncate(fd, 60ll << 20), 0);
    ::close(fd);
  }
  EXPECT_FALSE(copy_candidate_files(dir_, copy, &err));
  EXPECT_EQ(err, "the candidate's files come to 300.0 MB; a candidate's files may be at most 256 MiB in all");
  remove_tree(copy);
}

// Names that cannot be copied, built or written into a record are the candidate's doing: refused with
// the copy (a load_error, -1), never "anvil could not evaluate". At d62ad83 a name that was not UTF-8
// aborted the build, and one whose copy was longer than the filesystem takes was an environment error.
TEST_F(WorkdirTest, ACopyRefusesNamesItCannotCarry) {
  struct Case {
    std::string rel, said;
  };
  std::vector<Case> cases = {
      {"kernels/\xff\xfe.h", "kernels/\\xff\\xfe.h: the name is not UTF-8; name a candidate's files in UTF-8, without "
                             "control characters"},
      {"notes\nmore.txt", "notes\\nmore.txt: the name has a control character; name a candidate's files in UTF-8, "
                          "without control characters"},
      {"kernels/\xff/a.h", "kernels/\\xff: the name is not UTF-8; name a candidate's files in UTF-8, without control "
                           "characters"},  // a folder's name: refused before it is walked
  };
  fs::path copy = dir_.string() + "-copy";
  for (const auto& c : cases) {
    remove_tree(dir_);
    write("model_new.py", "class ModelNew: pass\n");
    write(c.rel, "// x\n");
    std::string err;
    bool refused = false;
    EXPECT_FALSE(copy_candidate_files(dir_, copy, &err, &refused)) << c.said;
    EXPECT_TRUE(refused) << c.said;
    EXPECT_EQ(err, c.said);
    remove_tree(copy);
  }
  // UTF-8 names, spaces and 254-byte names are a candidate's to choose.
  remove_tree(dir_);
  write("model_new.py", "class ModelNew: pass\n");
  write("kernels/caf\xC3\xA9 au lait.h", "// x\n");
  write(std::string(250, 'n') + ".txt", "x\n");
  std::string err;
  ASSERT_TRUE(copy_candidate_files(dir_, copy, &err)) << err;
  EXPECT_TRUE(fs::exists(copy / (std::string(250, 'n') + ".txt")));
  remove_tree(copy);
}

// A tree whose paths fit under the candidate's directory but not under its copy's (a longer one):
// refused by the path's length before anything is copied, not failed on the copy's side.
TEST_F(WorkdirTest, ACopyRefusesPathsTooLongForItsDestination) {
  write("model_new.py", "class ModelNew: pass\n");
  fs::path deep = dir_;
  std::string rel;
  for (int i = 0; i < 15; ++i) {
    std::string part(250, static_cast<char>('a' + i));
    deep /= part;
    rel += (rel.empty() ? "" : "/") + part;
  }
  std::error_code ec;
  fs::create_directories(deep, ec);
  ASSERT_FALSE(ec) << ec.message() << " (" << deep.string().size() << " bytes)";
  write(rel + "/x.h", "// deep\n");
  fs::path copies = dir_.string() + "-copy";
  fs::path copy = copies / std::string(250, 'c') / std::string(250, 'd');  // past PATH_MAX with the tree
  std::string err;
  bool refused = false;
  EXPECT_FALSE(copy_candidate_files(dir_, copy, &err, &refused));
  EXPECT_TRUE(refused) << err;
  EXPECT_NE(err.find("...: the path is 1254 bytes long; a candidate's paths may be at most 1024 bytes"), std::string::npos)
      << err;
  remove_tree(copies);
}

// A directory named as anvil's module is left out of the copy as the file is (anvil writes the module
// there); in a workdir built where it is, the build says so.
TEST_F(WorkdirTest, AFolderNamedAsTheModuleIsLeftOut) {
  write("model_new.py", "class ModelNew: pass\n");
  write("kernels/k_binding.cpp", "#include <anvil/binding.h>\n");
  write("cuda_extension.so/README", "in the way\n");
  fs::path copy = dir_.string() + "-copy";
  std::string err;
  ASSERT_TRUE(copy_candidate_files(dir_, copy, &err)) << err;
  EXPECT_FALSE(fs::exists(copy / "cuda_extension.so"));
  EXPECT_TRUE(fs::exists(copy / "kernels" / "k_binding.cpp"));
  remove_tree(copy);
  EXPECT_EQ(scan_error(), "cuda_extension.so is a directory; anvil writes the built module there: remove it");
  remove_tree(dir_ / "cuda_extension.so");
  write("kernels/\xff.h", "// x\n");
  EXPECT_EQ(scan_error(), "kernels/\\xff.h: the name is not UTF-8; name a candidate's files in UTF-8, without control "
                          "characters");
}

TEST_F(WorkdirTest, ASingleFileTakesTheSourcesBesideItTwoLevelsDown) {
  write("solution.py", "class ModelNew: pass\n");
  write("ext.cpp", "// ext\n");
  write("csrc/k.cu", "// k\n");
  write("csrc/inc/k.cuh", "// header\n");
  write("a/b/c/deep.cu", "// three levels down: not copied\n");
  write(".git/x.cpp", "// hidden: not copied\n");
  write("build/y.cpp", "// build output: not copied\n");
  write("notes.txt", "not a source\n");
  write("model_new.py", "# another Python file: not the candidate\n");
  fs::create_symlink("/etc/passwd", dir_ / "passwd.h");
  fs::path copy = dir_.string() + "-copy";
  std::string err;
  ASSERT_TRUE(copy_single_file_candidate(dir_ / "solution.py", copy, &err)) << err;
  EXPECT_EQ(*read_file(copy / "model_new.py"), "class ModelNew: pass\n");
  EXPECT_EQ(*read_file(copy / "ext.cpp"), "// ext\n");
  EXPECT_EQ(*read_file(copy / "csrc" / "k.cu"), "// k\n");
  EXPECT_EQ(*read_file(copy / "csrc" / "inc" / "k.cuh"), "// header\n");
  for (const char* absent : {"a/b/c/deep.cu", ".git/x.cpp", "build/y.cpp", "notes.txt", "passwd.h", "solution.py"})
    EXPECT_FALSE(fs::exists(fs::symlink_status(copy / absent))) << absent;
  remove_tree(copy);
  for (size_t i = 0; i <= kMaxSiblingFiles; ++i) write("many/f" + std::to_string(i) + ".h", "\n");
  EXPECT_FALSE(copy_single_file_candidate(dir_ / "solution.py", copy, &err));
  EXPECT_EQ(err, "the directory of solution.py holds more than 200 C/C++/CUDA files (or 256 MiB of them), which "
                 "anvil copies for its load() calls: put the candidate in a directory of its own");
  remove_tree(copy);
}

}  // namespace
}  // namespace anvil
