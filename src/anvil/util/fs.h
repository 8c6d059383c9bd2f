// fs.h: small filesystem helpers: whole-file reads, atomic writes, locks.
#pragma once

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

// Copies `from` to `to` through a temporary file and a rename.
bool copy_file_atomic(const fs::path& from, const fs::path& to, std::string* err);

// A fresh, empty directory under `parent` named prefix-XXXXXX.
fs::path make_temp_dir(const fs::path& parent, const std::string& prefix);

// Removes a tree, ignoring errors.
void remove_tree(const fs::path& path);

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
