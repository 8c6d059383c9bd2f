// fs.h: small filesystem helpers: whole-file reads, bounded reads of hostile files (whole, head or
// tail), atomic writes, locks.
#pragma once

#include <sys/stat.h>

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace anvil {

namespace fs = std::filesystem;

// The whole file, or nullopt if it cannot be read.
std::optional<std::string> read_file(const fs::path& path);

// Writes `data` to a temporary file beside `path` and renames it into place,
// so readers see the old content or the new, never a part. Returns false and
// fills *err on failure.
bool write_file_atomic(const fs::path& path, std::string_view data, std::string* err, int mode = 0644);

// A file written in parts and put in place only by commit() (ccache's AtomicFile): the parts go to
// a temporary file beside `path` (O_EXCL|O_NOFOLLOW), commit() renames it into place. Destroyed
// without a commit, or after a failed write, the temporary file is removed and `path` is untouched.
class AtomicFile {
 public:
  explicit AtomicFile(const fs::path& path, int mode = 0644);
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;
  // False once the file could not be created or a write failed (error() says why).
  bool ok() const { return error_.empty(); }
  const std::string& error() const { return error_; }
  void write(std::string_view data);
  // Puts the file in place; false with *err (and nothing in place) when any step failed.
  bool commit(std::string* err);

 private:
  bool flush();
  fs::path path_, tmp_;
  int fd_ = -1;
  int mode_;
  std::string buffer_, error_;
};

// Copies `from` (a regular file, its symlink not followed) to `to` through a temporary file and a
// rename, in bounded chunks, keeping its permission bits.
bool copy_file_atomic(const fs::path& from, const fs::path& to, std::string* err);

// ---- files that may be hostile (a candidate's, an agent's) -------------------------------------
// None of these follows a symlink in the last component, blocks on a FIFO or device, or reads
// more than it was allowed to.

// What a file type is, for messages: "a FIFO", "a socket", "a device", "a directory", "a symbolic link".
std::string file_kind(mode_t mode);

// "3.0 GB", "12.5 MB", "512 bytes" (powers of 1024).
std::string human_size(uint64_t bytes);

// Opens a regular file for reading (O_NOFOLLOW, O_NONBLOCK) and fills *st from fstat; -1 with
// *why ("is a FIFO", "is a symbolic link", "does not exist") for anything else.
int open_regular(const fs::path& path, struct stat* st, std::string* why);

// A regular file's content, read in bounded chunks; nullopt with *why when it is not a regular
// file or is larger than max_bytes ("is 3.0 GB").
std::optional<std::string> read_regular(const fs::path& path, uint64_t max_bytes, std::string* why);

// As read_regular, for `rel` under `root`, opened relative to root with no step outside it
// (openat2's RESOLVE_BENEATH: a symbolic link or ".." that leaves root fails at the moment of the
// open, so a directory swapped for a link between a check and this read cannot lead out; links
// that stay beneath root are followed). On a kernel without openat2, no link is followed at all.
std::optional<std::string> read_beneath(const fs::path& root, const std::string& rel, uint64_t max_bytes,
                                        std::string* why);

// A regular file's last max_bytes (all of it when smaller), read after one seek to there: a log of
// terabytes, sparse or not, costs max_bytes of memory and time. *left_out (when given) gets how many
// bytes before the tail were not read (0: the whole file). nullopt with *why as read_regular says it.
std::optional<std::string> read_tail(const fs::path& path, uint64_t max_bytes, std::string* why,
                                     uint64_t* left_out = nullptr);

// A regular file's first max_bytes (all of it when smaller); *left_out (when given) gets how many
// bytes after them were not read. nullopt with *why as read_regular says it.
std::optional<std::string> read_head(const fs::path& path, uint64_t max_bytes, std::string* why,
                                     uint64_t* left_out = nullptr);

// The last `lines` lines of a log, for a message: read from its last 64 KiB at most ("" when it
// cannot be read).
std::string tail_of_log(const fs::path& path, size_t lines);

// Copies a regular file (at most max_bytes) in bounded chunks through a temporary file and a
// rename, keeping its permission bits; false with *err otherwise, and *from_failed true when it was
// `from` that failed (it cannot be opened or read, is not a regular file, is or grew too large) or its
// name (`to`'s: too long for the destination's filesystem, or a directory in the way), not the copy's
// side (the disk full, read-only, denied).
bool copy_regular_atomic(const fs::path& from, const fs::path& to, uint64_t max_bytes, std::string* err,
                         bool* from_failed = nullptr);

// Gives a path (and, for a directory, everything under it) to uid:gid; symlinks themselves are
// re-owned, never followed. Errors are ignored (best effort).
void set_owner(const fs::path& path, unsigned uid, unsigned gid);

// When this process is root: gives `path` the owner of `like` (a file created in a workdir
// belongs to the workdir's owner). Never follows a symlink.
void own_like(const fs::path& path, const fs::path& like);

// A fresh, empty directory under `parent` named prefix-XXXXXX.
fs::path make_temp_dir(const fs::path& parent, const std::string& prefix);

// Removes a tree, ignoring errors.
void remove_tree(const fs::path& path);

// A directory of make_temp_dir's, removed with everything under it when the TempDir goes, whichever
// way its scope is left (a return, an exception). Default-constructed: none. Its constructor throws
// as make_temp_dir does.
class TempDir {
 public:
  TempDir() = default;
  TempDir(const fs::path& parent, const std::string& prefix) : path_(make_temp_dir(parent, prefix)) {}
  ~TempDir() { reset(); }
  TempDir(TempDir&& other) noexcept : path_(std::move(other.path_)) { other.path_.clear(); }
  TempDir& operator=(TempDir&& other) noexcept {
    if (this != &other) {
      reset();
      path_ = std::move(other.path_);
      other.path_.clear();
    }
    return *this;
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const fs::path& path() const { return path_; }

 private:
  void reset() {
    if (!path_.empty()) remove_tree(path_);
    path_.clear();
  }
  fs::path path_;
};

// Regular files under `root` (recursively), as paths relative to it, sorted.
std::vector<fs::path> list_files(const fs::path& root);

// An exclusive advisory lock (flock) on a lock file, released on destruction
// or when the process dies.
class FileLock {
 public:
  explicit FileLock(const fs::path& path);
  ~FileLock();
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;
  bool locked() const { return fd_ >= 0; }

 private:
  int fd_ = -1;
};

}  // namespace anvil
