#include "anvil/util/fs.h"

#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>

#include "anvil/util/strings.h"

namespace anvil {

namespace {
std::string unique_suffix() {
  static std::atomic<uint64_t> counter{0};
  thread_local std::mt19937_64 rng{std::random_device{}()};
  return std::to_string(getpid()) + "." + std::to_string(counter++) + "." + std::to_string(rng() % 1000000007ULL);
}

// The temporary file an atomic write of `path` goes through: beside it (a rename stays on one
// filesystem), hidden, and of a short name of its own. Not path's name with a suffix: a legal
// 250-byte name plus one is past NAME_MAX (a candidate's long file name could not be copied).
fs::path temp_beside(const fs::path& path) { return path.parent_path() / (".tmp." + unique_suffix()); }
}  // namespace

std::optional<std::string> read_file(const fs::path& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  std::string out;
  struct stat st;
  if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode)) out.reserve(static_cast<size_t>(st.st_size));
  else if (fstat(fd, &st) == 0 && S_ISDIR(st.st_mode)) {
    ::close(fd);
    return std::nullopt;
  }
  char buf[65536];
  while (true) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR) continue;
      ::close(fd);
      return std::nullopt;
    }
    if (n == 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  return out;
}

bool write_file_atomic(const fs::path& path, std::string_view data, std::string* err, int mode) {
  std::error_code ec;
  if (path.has_parent_path()) fs::create_directories(path.parent_path(), ec);
  fs::path tmp = temp_beside(path);
  // O_EXCL|O_NOFOLLOW: a name planted in advance (a symlink) is never written through.
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode);
  if (fd < 0) {
    if (err) *err = "cannot create " + path.string() + ": " + std::strerror(errno);
    return false;
  }
  const char* p = data.data();
  size_t left = data.size();
  while (left > 0) {
    ssize_t n = ::write(fd, p, left);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (err) *err = "cannot write " + path.string() + ": " + std::strerror(errno);
      ::close(fd);
      ::unlink(tmp.c_str());
      return false;
    }
    p += n;
    left -= static_cast<size_t>(n);
  }
  ::fchmod(fd, static_cast<mode_t>(mode));
  ::close(fd);
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    if (err) *err = "cannot rename into " + path.string() + ": " + std::strerror(errno);
    ::unlink(tmp.c_str());
    return false;
  }
  return true;
}

AtomicFile::AtomicFile(const fs::path& path, int mode) : path_(path), mode_(mode) {
  std::error_code ec;
  if (path.has_parent_path()) fs::create_directories(path.parent_path(), ec);
  tmp_ = temp_beside(path);
  fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode);
  if (fd_ < 0) error_ = "cannot create " + path_.string() + ": " + std::strerror(errno);
}

AtomicFile::~AtomicFile() {
  if (fd_ >= 0) {
    ::close(fd_);
    ::unlink(tmp_.c_str());
  }
}

bool AtomicFile::flush() {
  const char* p = buffer_.data();
  size_t left = buffer_.size();
  while (left > 0 && ok()) {
    ssize_t n = ::write(fd_, p, left);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      error_ = "cannot write " + path_.string() + ": " + std::strerror(errno);
      break;
    }
    p += n;
    left -= static_cast<size_t>(n);
  }
  buffer_.clear();
  return ok();
}

void AtomicFile::write(std::string_view data) {
  if (!ok()) return;
  buffer_.append(data);
  if (buffer_.size() >= (1u << 20)) flush();
}

bool AtomicFile::commit(std::string* err) {
  if (ok() && flush()) {
    ::fchmod(fd_, static_cast<mode_t>(mode_));
    if (::close(fd_) != 0) error_ = "cannot write " + path_.string() + ": " + std::strerror(errno);
    fd_ = -1;
    if (ok() && ::rename(tmp_.c_str(), path_.c_str()) != 0) {
      error_ = "cannot rename into " + path_.string() + ": " + std::strerror(errno);
    }
    if (!ok()) ::unlink(tmp_.c_str());
  }
  if (!ok() && err) *err = error_;
  return ok();
}

bool copy_file_atomic(const fs::path& from, const fs::path& to, std::string* err) {
  std::string e;
  bool ok = copy_regular_atomic(from, to, UINT64_MAX, &e);
  if (!ok && err) *err = e;
  return ok;
}

std::string file_kind(mode_t mode) {
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISCHR(mode) || S_ISBLK(mode)) return "a device";
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISLNK(mode)) return "a symbolic link";
  return S_ISREG(mode) ? "a regular file" : "not a regular file";
}

std::string human_size(uint64_t bytes) {
  if (bytes < 1024) return std::to_string(bytes) + (bytes == 1 ? " byte" : " bytes");
  const char* units[] = {"KB", "MB", "GB", "TB", "PB"};
  double v = static_cast<double>(bytes) / 1024;
  int u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f %s", v, units[u]);
  return buf;
}

int open_regular(const fs::path& path, struct stat* st, std::string* why) {
  int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY);
  if (fd < 0) {
    int e = errno;
    struct stat l;
    if (e == ELOOP || (::lstat(path.c_str(), &l) == 0 && S_ISLNK(l.st_mode))) {
      *why = "is a symbolic link";
    } else if (e == ENOENT) {
      *why = "does not exist";
    } else if (e == ENXIO && ::lstat(path.c_str(), &l) == 0) {
      *why = "is " + file_kind(l.st_mode);  // a socket, or a FIFO without a writer
    } else {
      *why = std::string("cannot be opened: ") + std::strerror(e);
    }
    return -1;
  }
  if (::fstat(fd, st) != 0 || !S_ISREG(st->st_mode)) {
    *why = "is " + file_kind(st->st_mode);
    ::close(fd);
    return -1;
  }
  ::fcntl(fd, F_SETFL, 0);  // a regular file: blocking reads, as usual
  return fd;
}

namespace {

// The content of `fd` (a regular file, `st` its fstat), read in bounded chunks; closes fd.
std::optional<std::string> read_open_regular(int fd, const struct stat& st, uint64_t max_bytes, std::string* why) {
  if (static_cast<uint64_t>(st.st_size) > max_bytes) {
    *why = "is " + human_size(static_cast<uint64_t>(st.st_size));
    ::close(fd);
    return std::nullopt;
  }
  std::string out;
  out.reserve(static_cast<size_t>(st.st_size));
  char buf[65536];
  while (true) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      *why = std::string("cannot be read: ") + std::strerror(errno);
      ::close(fd);
      return std::nullopt;
    }
    if (n == 0) break;
    if (out.size() + static_cast<size_t>(n) > max_bytes) {  // it grew while being read
      *why = "grew past " + human_size(max_bytes) + " while being read";
      ::close(fd);
      return std::nullopt;
    }
    out.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  return out;
}

// rel's components: none empty, ".", ".." or absolute (what read_beneath's fallback walks).
std::optional<std::vector<std::string>> plain_components(const std::string& rel) {
  if (rel.empty() || rel[0] == '/') return std::nullopt;
  std::vector<std::string> parts;
  size_t at = 0;
  while (true) {
    size_t slash = rel.find('/', at);
    std::string part = rel.substr(at, slash == std::string::npos ? std::string::npos : slash - at);
    if (part.empty() || part == "." || part == "..") return std::nullopt;
    parts.push_back(part);
    if (slash == std::string::npos) break;
    at = slash + 1;
  }
  return parts;
}

}  // namespace

std::optional<std::string> read_regular(const fs::path& path, uint64_t max_bytes, std::string* why) {
  struct stat st;
  int fd = open_regular(path, &st, why);
  if (fd < 0) return std::nullopt;
  return read_open_regular(fd, st, max_bytes, why);
}

std::optional<std::string> read_beneath(const fs::path& root, const std::string& rel, uint64_t max_bytes,
                                        std::string* why) {
  int dir = ::open(root.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (dir < 0) {
    *why = "cannot be opened: its directory " + root.string() + ": " + std::strerror(errno);
    return std::nullopt;
  }
  open_how how{};
  how.flags = O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY;
  how.resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS;
  int fd = static_cast<int>(::syscall(SYS_openat2, dir, rel.c_str(), &how, sizeof how));
  int e = errno;
  if (fd < 0 && e == ENOSYS) {  // a kernel before 5.6: each component opened alone, no link followed
    auto parts = plain_components(rel);
    int at = parts ? ::dup(dir) : -1;
    e = parts ? 0 : EXDEV;
    for (size_t i = 0; at >= 0 && parts && i < parts->size(); ++i) {
      bool last = i + 1 == parts->size();
      int next = ::openat(at, (*parts)[i].c_str(),
                          last ? O_RDONLY | O_NONBLOCK | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY
                               : O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
      e = errno;
      ::close(at);
      at = next;
    }
    fd = at;
  }
  ::close(dir);
  if (fd < 0) {
    if (e == EXDEV || e == ELOOP) {
      *why = "leads outside " + root.string() + " (a symbolic link or \"..\" on its way)";
    } else if (e == ENOENT) {
      *why = "does not exist";
    } else if (e == ENXIO) {
      *why = "is a socket or a FIFO";
    } else {
      *why = std::string("cannot be opened: ") + std::strerror(e);
    }
    return std::nullopt;
  }
  struct stat st;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    *why = "is " + file_kind(st.st_mode);
    ::close(fd);
    return std::nullopt;
  }
  ::fcntl(fd, F_SETFL, 0);
  return read_open_regular(fd, st, max_bytes, why);
}

namespace {

// Up to max_bytes of fd from `offset` on (fewer at its end), in bounded chunks; false with *why.
bool read_span(int fd, uint64_t offset, uint64_t max_bytes, std::string* out, std::string* why) {
  char buf[65536];
  while (out->size() < max_bytes) {
    size_t want = static_cast<size_t>(std::min<uint64_t>(sizeof buf, max_bytes - out->size()));
    ssize_t n = ::pread(fd, buf, want, static_cast<off_t>(offset + out->size()));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      *why = std::string("cannot be read: ") + std::strerror(errno);
      return false;
    }
    if (n == 0) break;
    out->append(buf, static_cast<size_t>(n));
  }
  return true;
}

// The part of a regular file from `offset(size)` on, at most max_bytes; *left_out the bytes not read.
template <typename Offset>
std::optional<std::string> read_part(const fs::path& path, uint64_t max_bytes, std::string* why, uint64_t* left_out,
                                     Offset offset) {
  struct stat st;
  int fd = open_regular(path, &st, why);
  if (fd < 0) return std::nullopt;
  uint64_t size = static_cast<uint64_t>(st.st_size), from = offset(size);
  std::string out;
  out.reserve(static_cast<size_t>(std::min(max_bytes, size - std::min(from, size))));
  bool ok = read_span(fd, from, max_bytes, &out, why);
  // The file may have grown or shrunk meanwhile: what was left out is judged by its size now.
  if (::fstat(fd, &st) == 0) size = std::max(size, static_cast<uint64_t>(st.st_size));
  ::close(fd);
  if (!ok) return std::nullopt;
  if (left_out) *left_out = size > out.size() ? size - out.size() : 0;
  return out;
}

}  // namespace

std::optional<std::string> read_tail(const fs::path& path, uint64_t max_bytes, std::string* why, uint64_t* left_out) {
  return read_part(path, max_bytes, why, left_out,
                   [&](uint64_t size) { return size > max_bytes ? size - max_bytes : 0; });
}

std::optional<std::string> read_head(const fs::path& path, uint64_t max_bytes, std::string* why, uint64_t* left_out) {
  return read_part(path, max_bytes, why, left_out, [](uint64_t) { return uint64_t{0}; });
}

std::string tail_of_log(const fs::path& path, size_t lines) {
  std::string why;
  return tail_lines(read_tail(path, 64 << 10, &why).value_or(""), lines);
}

namespace {
// Whether a failure to make a name (errno `e`) is the name's: too long for the filesystem, not one it
// takes, or a directory or file in its way. Not the filesystem's own state (full, read-only, denied).
bool name_not_held(int e) { return e == ENAMETOOLONG || e == EISDIR || e == ENOTDIR || e == EILSEQ || e == EINVAL; }

// Writes all of buf to fd; false with errno set.
bool write_all(int fd, const char* p, size_t n) {
  while (n > 0) {
    ssize_t w = ::write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) return false;
    p += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

}  // namespace

bool copy_regular_atomic(const fs::path& from, const fs::path& to, uint64_t max_bytes, std::string* err,
                         bool* from_failed) {
  bool source = false;  // the failure is from's: set before each of its returns
  if (!from_failed) from_failed = &source;
  *from_failed = true;
  struct stat st;
  std::string why;
  int in = open_regular(from, &st, &why);
  if (in < 0) {
    *err = from.string() + " " + why;
    return false;
  }
  if (static_cast<uint64_t>(st.st_size) > max_bytes) {
    *err = from.string() + " is " + human_size(static_cast<uint64_t>(st.st_size));
    ::close(in);
    return false;
  }
  *from_failed = false;
  std::error_code ec;
  if (to.has_parent_path()) fs::create_directories(to.parent_path(), ec);
  fs::path tmp = temp_beside(to);
  int out = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (out < 0) {
    *from_failed = name_not_held(errno);
    *err = "cannot create " + to.string() + ": " + std::strerror(errno);
    ::close(in);
    return false;
  }
  char buf[65536];
  uint64_t copied = 0;
  bool ok = true;
  while (ok) {
    ssize_t n = ::read(in, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      ok = n == 0;
      if (!ok) *err = "cannot read " + from.string() + ": " + std::strerror(errno);
      *from_failed = !ok;
      break;
    }
    copied += static_cast<uint64_t>(n);
    if (copied > max_bytes) {
      *err = from.string() + " grew past " + human_size(max_bytes) + " while being copied";
      *from_failed = true;
      ok = false;
    } else if (!write_all(out, buf, static_cast<size_t>(n))) {
      *err = "cannot write " + to.string() + ": " + std::strerror(errno);
      ok = false;
    }
  }
  ::close(in);
  ::fchmod(out, st.st_mode & 0777);
  ::close(out);
  if (ok && ::rename(tmp.c_str(), to.c_str()) != 0) {
    *from_failed = name_not_held(errno);
    *err = "cannot rename into " + to.string() + ": " + std::strerror(errno);
    ok = false;
  }
  if (!ok) ::unlink(tmp.c_str());
  return ok;
}

void set_owner(const fs::path& path, unsigned uid, unsigned gid) {
  ::lchown(path.c_str(), uid, gid);
  std::error_code ec;
  if (!fs::is_directory(fs::symlink_status(path, ec))) return;
  for (auto it = fs::recursive_directory_iterator(path, ec); !ec && it != fs::recursive_directory_iterator();
       it.increment(ec)) {
    ::lchown(it->path().c_str(), uid, gid);
  }
}

void own_like(const fs::path& path, const fs::path& like) {
  if (::geteuid() != 0) return;
  struct stat st, mine;
  if (::stat(like.c_str(), &st) != 0 || ::lstat(path.c_str(), &mine) != 0) return;
  if (mine.st_uid != st.st_uid || mine.st_gid != st.st_gid) ::lchown(path.c_str(), st.st_uid, st.st_gid);
}

fs::path make_temp_dir(const fs::path& parent, const std::string& prefix) {
  std::error_code ec;
  fs::create_directories(parent, ec);
  std::string tmpl = (parent / (prefix + "-XXXXXX")).string();
  std::vector<char> buf(tmpl.begin(), tmpl.end());
  buf.push_back('\0');
  if (::mkdtemp(buf.data()) == nullptr) {
    throw std::runtime_error("cannot create a temporary directory under " + parent.string() + ": " +
                             std::strerror(errno));
  }
  return fs::path(buf.data());
}

void remove_tree(const fs::path& path) {
  std::error_code ec;
  fs::remove_all(path, ec);
}

std::vector<fs::path> list_files(const fs::path& root) {
  std::vector<fs::path> out;
  std::error_code ec;
  if (!fs::is_directory(root, ec)) return out;
  for (auto it = fs::recursive_directory_iterator(root, ec); !ec && it != fs::recursive_directory_iterator();
       it.increment(ec)) {
    if (it->is_regular_file(ec) || it->is_symlink(ec)) out.push_back(it->path().lexically_relative(root));
  }
  std::sort(out.begin(), out.end());
  return out;
}

FileLock::FileLock(const fs::path& path) {
  std::error_code ec;
  fs::create_directories(path.parent_path(), ec);
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd_ < 0) return;
  while (::flock(fd_, LOCK_EX) != 0) {
    if (errno != EINTR) {
      ::close(fd_);
      fd_ = -1;
      return;
    }
  }
}

FileLock::~FileLock() {
  if (fd_ >= 0) {
    ::flock(fd_, LOCK_UN);
    ::close(fd_);
  }
}

}  // namespace anvil
