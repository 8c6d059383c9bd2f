// jail.cpp: the picture of a jail (computed once, in the parent) and the two methods that draw it.
//
// The picture is a list of operations in mount order, parents before children:
//   Bind    a host file or directory at the same path (read-only, writable, or a device node)
//   Tmpfs   a fresh tmpfs (/dev, /tmp, /dev/shm, and the empty directories that hide a path)
//   Symlink a link (/bin -> usr/bin on merged-/usr systems, /dev/fd -> /proc/self/fd)
//   Dir     an empty directory of the (read-only) root
// followed by /proc: a fresh procfs, its kernel knobs bound read-only over themselves and a few
// entries masked. Method "bubblewrap" turns the list into bwrap's options. Method "namespaces"
// does it itself: in PID 1 of the new namespaces it clones every bound tree (open_tree) before
// anything is covered, builds the new root in a tmpfs (move_mount, mkdir, symlink), sets each
// mount's attributes (mount_setattr: read-only unless writable, nosuid, nodev unless a device),
// mounts /proc, pivots into the new root, drops to the unprivileged user, sets the rlimits, installs
// the system-call filter (syscall_filter.h; bwrap gets it as --seccomp), forks the program and
// reaps orphans until it exits (its exit ends the whole PID namespace).
//
// Everything the child needs (paths, step names, argument arrays) is prepared before fork: the
// child of a multithreaded process makes only system calls. A failed step is sent to the parent
// over a close-on-exec pipe as {tag, errno, step} and the program never runs.
#include "anvil/util/jail.h"

#include <fcntl.h>
#include <grp.h>
#include <linux/capability.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <random>

#include <nlohmann/json.hpp>

#include "anvil/util/fs.h"
#include "anvil/util/subprocess.h"
#include "anvil/util/syscall_filter.h"

// System calls newer than some C libraries (numbers shared by x86_64 and aarch64).
#ifndef SYS_open_tree
#define SYS_open_tree 428
#endif
#ifndef SYS_move_mount
#define SYS_move_mount 429
#endif
#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434
#endif
#ifndef SYS_close_range
#define SYS_close_range 436
#endif
#ifndef SYS_mount_setattr
#define SYS_mount_setattr 442
#endif

namespace anvil {

namespace {

struct MountAttr {
  uint64_t attr_set, attr_clr, propagation, userns_fd;
};
constexpr uint64_t kAttrRdonly = 0x1, kAttrNosuid = 0x2, kAttrNodev = 0x4;
constexpr unsigned kAtRecursive = 0x8000;
constexpr unsigned kOpenTreeClone = 1;
constexpr unsigned kMoveMountFEmptyPath = 0x4;

constexpr int kFilterFd = 4;       // in the child of bubblewrap: the system-call filter's program (bwrap --seccomp)
constexpr int kErrFd = 3;          // in the child: the set-up error pipe (namespaces) or bwrap's status pipe
constexpr const char* kRoot = "/tmp";  // where method "namespaces" builds the new root before pivoting into it
constexpr const char* kHostname = "sandbox";  // the host's name stays outside too

// The cap on processes and threads (JailLimits::processes).
uint64_t process_limit(const JailOptions& o) { return o.limits.processes ? o.limits.processes : o.config->processes; }

// The rlimits a jailed program gets: the caller's, and the cap on processes when `processes`
// (bwrap as a user gets that one from prlimit instead: see bwrap_argv).
using Rlimits = std::vector<std::pair<int, rlim_t>>;
Rlimits rlimits_of(const JailOptions& o, bool processes) {
  Rlimits r;
  const JailLimits& l = o.limits;
  if (l.address_space) r.push_back({RLIMIT_AS, l.address_space});
  if (l.cpu_seconds) r.push_back({RLIMIT_CPU, l.cpu_seconds});
  if (l.file_size) r.push_back({RLIMIT_FSIZE, l.file_size});
  if (l.data) r.push_back({RLIMIT_DATA, l.data});
  if (uint64_t n = processes ? process_limit(o) : 0) r.push_back({RLIMIT_NPROC, n});
  return r;
}

// Sets them in this (forked) process; false at the first that fails.
bool apply_rlimits(const Rlimits& limits) {
  for (const auto& [resource, value] : limits) {
    // The hard CPU limit a little above the soft one: SIGXCPU first (a compiler may say so), then SIGKILL.
    rlimit r{value, resource == RLIMIT_CPU ? value + 5 : value};
    if (setrlimit(resource, &r) != 0) return false;
  }
  return true;
}

// A failed set-up step, as the child sends it to the parent.
struct ChildError {
  char tag[8];  // kTag: tells it from bwrap's JSON status on the same pipe
  int err;
  char step[244];
};
constexpr char kTag[8] = "anvilsb";

bool within(const std::string& path, const std::string& dir) {
  if (dir == "/") return true;
  return path == dir || (path.size() > dir.size() && path.compare(0, dir.size(), dir) == 0 && path[dir.size()] == '/');
}

size_t depth(const std::string& p) { return static_cast<size_t>(std::count(p.begin(), p.end(), '/')); }

// ---- the picture -----------------------------------------------------------------------------

struct Op {
  enum class Kind { Bind, Tmpfs, Symlink, Dir } kind = Kind::Dir;
  std::string src;  // Bind: the host path; Symlink: the link's target
  std::string dst;  // the path inside the jail
  bool writable = false;
  bool file = false;    // a bind whose mount point is a file
  bool device = false;  // a device node (or a directory of them): device access kept
  uint64_t size = 0;    // Tmpfs: bytes (0: the kernel's default)
  int mode = 0755;      // Tmpfs
};

struct Picture {
  std::vector<Op> ops;
  std::vector<std::string> proc_read_only;  // "/proc/sys", ... (those the kernel has are handled)
  std::vector<std::string> proc_masked;
  std::string cwd;
};

Op make_op(Op::Kind kind, const std::string& src, const std::string& dst) {
  Op o;
  o.kind = kind;
  o.src = src;
  o.dst = dst;
  return o;
}

Op bind_op(const std::string& path, bool writable, bool file, bool device = false) {
  Op o = make_op(Op::Kind::Bind, path, path);
  o.writable = writable;
  o.file = file;
  o.device = device;
  return o;
}

Op tmpfs_op(const std::string& dst, int mode, uint64_t size, bool writable) {
  Op o = make_op(Op::Kind::Tmpfs, "", dst);
  o.writable = writable;
  o.mode = mode;
  o.size = size;
  return o;
}

Op symlink_op(const std::string& target, const std::string& dst) { return make_op(Op::Kind::Symlink, target, dst); }
Op dir_op(const std::string& dst) { return make_op(Op::Kind::Dir, "", dst); }

bool matches(const std::string& name, const std::string& pattern) {
  if (!pattern.empty() && pattern.back() == '*') return name.rfind(pattern.substr(0, pattern.size() - 1), 0) == 0;
  return name == pattern;
}

// The entries of a host directory whose names match one of the patterns, sorted.
std::vector<fs::path> matching(const fs::path& dir, const std::vector<std::string>& patterns) {
  std::vector<fs::path> out;
  std::error_code ec;
  for (auto it = fs::directory_iterator(dir, ec); !ec && it != fs::directory_iterator(); it.increment(ec)) {
    std::string n = it->path().filename().string();
    if (std::any_of(patterns.begin(), patterns.end(), [&](const std::string& p) { return matches(n, p); }))
      out.push_back(it->path());
  }
  std::sort(out.begin(), out.end());
  return out;
}

// A host entry as it appears in the jail: a symlink is recreated, anything else bound read-only.
void add_host_entry(Picture& p, const fs::path& path) {
  std::error_code ec;
  auto st = fs::symlink_status(path, ec);
  if (ec || !fs::exists(st)) return;
  if (fs::is_symlink(st)) {
    p.ops.push_back(symlink_op(fs::read_symlink(path, ec).string(), path.string()));
  } else if (fs::is_directory(st) || fs::is_regular_file(st)) {
    p.ops.push_back(bind_op(path.string(), false, !fs::is_directory(st)));
  }
}

void add_system(Picture& p, const SystemView& v) {
  for (const auto& d : v.dirs) add_host_entry(p, d);
  p.ops.push_back(dir_op("/etc"));
  for (const auto& e : matching("/etc", v.etc)) add_host_entry(p, e);
}

void add_dev(Picture& p, const JailConfig& c, bool gpu) {
  p.ops.push_back(tmpfs_op("/dev", 0755, 1 << 20, false));
  std::vector<fs::path> nodes;
  for (const auto& n : c.dev) nodes.push_back(fs::path("/dev") / n);
  if (gpu) {
    for (const auto& g : matching("/dev", c.gpu_dev)) nodes.push_back(g);
  }
  std::error_code ec;
  for (const auto& d : nodes) {
    auto t = fs::symlink_status(d, ec).type();
    if (t == fs::file_type::character) p.ops.push_back(bind_op(d.string(), false, true, true));
    if (t == fs::file_type::directory) p.ops.push_back(bind_op(d.string(), false, false, true));
  }
  const char* links[][2] = {{"/proc/self/fd", "/dev/fd"},
                            {"/proc/self/fd/0", "/dev/stdin"},
                            {"/proc/self/fd/1", "/dev/stdout"},
                            {"/proc/self/fd/2", "/dev/stderr"}};
  for (const auto& l : links) p.ops.push_back(symlink_op(l[0], l[1]));
  p.ops.push_back(tmpfs_op("/dev/shm", 01777, c.shm_bytes, true));
}

// A canonical, existing path, or "" with *err.
std::string canonical(const fs::path& path, std::string* err) {
  std::error_code ec;
  fs::path c = fs::canonical(fs::absolute(path, ec), ec);
  if (ec) {
    if (err) *err = path.string() + ": " + ec.message();
    return "";
  }
  return c.string();
}

// Directories already visible: bound whole (the place a path under them can be seen from).
bool visible(const Picture& p, const std::string& path) {
  for (const auto& o : p.ops) {
    if (o.kind == Op::Kind::Bind && !o.file && !o.device && within(path, o.dst)) return true;
  }
  return false;
}

// The caller's part: toolchain paths, binds and hidden paths, parents before children.
bool add_callers(Picture& p, const JailOptions& o, std::string* err) {
  std::vector<Op> mine;
  std::vector<std::string> tools;
  for (const auto& t : o.toolchain) {
    std::string c = canonical(t, nullptr);
    if (!c.empty() && c != "/") tools.push_back(c);
  }
  std::sort(tools.begin(), tools.end());
  for (const auto& t : tools) {
    bool covered = visible(p, t) || std::any_of(mine.begin(), mine.end(), [&](const Op& m) { return within(t, m.dst); });
    if (!covered) mine.push_back(bind_op(t, false, !fs::is_directory(t)));
  }
  for (const auto& b : o.binds) {
    std::string c = canonical(b.path, err);
    if (c.empty()) {
      *err = "bind " + *err;
      return false;
    }
    mine.push_back(bind_op(c, b.writable, !fs::is_directory(c)));
  }
  std::stable_sort(mine.begin(), mine.end(), [](const Op& a, const Op& b) { return depth(a.dst) < depth(b.dst); });
  Picture seen = p;
  seen.ops.insert(seen.ops.end(), mine.begin(), mine.end());
  for (const auto& h : o.hide) {
    std::string c = canonical(h, nullptr);
    if (c.empty() || c == "/" || !visible(seen, c)) continue;  // nothing there, or out of view already
    mine.push_back(tmpfs_op(c, 0755, 1 << 20, false));
  }
  std::stable_sort(mine.begin(), mine.end(), [](const Op& a, const Op& b) { return depth(a.dst) < depth(b.dst); });
  p.ops.insert(p.ops.end(), mine.begin(), mine.end());
  return true;
}

bool make_picture(const JailOptions& o, Picture* out, std::string* err) {
  const JailConfig& c = *o.config;
  Picture p;
  add_system(p, o.view ? *o.view : c.system);
  add_dev(p, c, o.gpu);
  p.ops.push_back(tmpfs_op("/tmp", 01777, c.tmp_bytes, true));
  p.ops.push_back(dir_op("/proc"));
  if (!add_callers(p, o, err)) return false;
  for (const auto& n : c.proc_read_only) p.proc_read_only.push_back("/proc/" + n);
  for (const auto& n : c.proc_masked) p.proc_masked.push_back("/proc/" + n);
  p.cwd = o.cwd.empty() ? "/" : o.cwd.lexically_normal().string();
  *out = std::move(p);
  return true;
}

// ---- method "bubblewrap" -----------------------------------------------------------------------

// The programs method "bubblewrap" runs: bwrap; setpriv as root (to drop to the config's user);
// prlimit as anyone else (to cap processes inside bwrap's user namespace, see run_with).
struct BwrapTools {
  std::string bwrap, setpriv, prlimit;
};

std::vector<std::string> bwrap_argv(const BwrapTools& t, const Picture& p, const JailOptions& o,
                                    const std::vector<std::string>& argv) {
  const std::string& setpriv = t.setpriv;
  std::vector<std::string> a = {t.bwrap, "--unshare-ipc", "--unshare-pid", "--unshare-uts", "--hostname", kHostname,
                                "--die-with-parent", "--new-session", "--cap-drop", "ALL"};
  if (!o.network) a.push_back("--unshare-net");
  if (!setpriv.empty()) {
    // As root bwrap makes no user namespace: setpriv, inside, becomes the unprivileged user.
    // (CAP_DAC_OVERRIDE: bwrap enters the working directory before setpriv drops everything.)
    for (const char* cap : {"CAP_SETUID", "CAP_SETGID", "CAP_SETPCAP", "CAP_DAC_OVERRIDE"}) a.insert(a.end(), {"--cap-add", cap});
  }
  std::vector<std::string> read_only_later;
  // bwrap would make missing parent directories itself, but only its own user could enter them:
  // each is made explicitly, 0755, as method "namespaces" does.
  std::vector<std::string> made, bound;  // directories made here; directories bound from the host
  auto parents = [&](const std::string& dst) {
    for (size_t i = dst.find('/', 1); i != std::string::npos; i = dst.find('/', i + 1)) {
      std::string d = dst.substr(0, i);
      bool there = std::find(made.begin(), made.end(), d) != made.end() ||
                   std::any_of(bound.begin(), bound.end(), [&](const std::string& b) { return within(d, b); });
      if (!there) a.insert(a.end(), {"--perms", "755", "--dir", d});
      made.push_back(d);
    }
  };
  for (const auto& op : p.ops) {
    parents(op.dst);
    if (op.kind == Op::Kind::Bind && !op.file) bound.push_back(op.dst);
    if (op.kind == Op::Kind::Tmpfs || op.kind == Op::Kind::Dir) made.push_back(op.dst);
    switch (op.kind) {
      case Op::Kind::Bind:
        a.insert(a.end(), {op.device ? "--dev-bind" : op.writable ? "--bind" : "--ro-bind", op.src, op.dst});
        break;
      case Op::Kind::Tmpfs: {
        char mode[16];
        std::snprintf(mode, sizeof mode, "%o", op.mode);
        a.insert(a.end(), {"--perms", mode});
        if (op.size) a.insert(a.end(), {"--size", std::to_string(op.size)});
        a.insert(a.end(), {"--tmpfs", op.dst});
        if (!op.writable) read_only_later.push_back(op.dst);
        break;
      }
      case Op::Kind::Symlink:
        a.insert(a.end(), {"--symlink", op.src, op.dst});
        break;
      case Op::Kind::Dir:
        a.insert(a.end(), {"--perms", "755", "--dir", op.dst});
        break;
    }
  }
  a.insert(a.end(), {"--proc", "/proc"});
  for (const auto& q : p.proc_read_only) {
    if (access(q.c_str(), F_OK) == 0) a.insert(a.end(), {"--ro-bind", q, q});
  }
  for (const auto& q : p.proc_masked) {
    struct stat st;
    if (lstat(q.c_str(), &st) != 0) continue;
    if (S_ISDIR(st.st_mode)) {
      a.insert(a.end(), {"--tmpfs", q, "--remount-ro", q});
    } else {
      a.insert(a.end(), {"--ro-bind", "/dev/null", q});
    }
  }
  // Read-only only now: bwrap first makes the mount points of what lies inside them.
  for (const auto& d : read_only_later) a.insert(a.end(), {"--remount-ro", d});
  if (o.syscall_filter) a.insert(a.end(), {"--seccomp", std::to_string(kFilterFd)});
  a.insert(a.end(), {"--remount-ro", "/", "--json-status-fd", std::to_string(kErrFd), "--chdir", p.cwd, "--"});
  if (!setpriv.empty()) {
    const unsigned uid = o.uid.value_or(o.config->uid), gid = o.uid.value_or(o.config->gid);
    a.insert(a.end(), {setpriv, "--reuid=" + std::to_string(uid), "--regid=" + std::to_string(gid),
                       "--clear-groups", "--inh-caps=-all", "--bounding-set=-all", "--no-new-privs", "--"});
  }
  if (uint64_t n = process_limit(o); n && !t.prlimit.empty()) {
    a.insert(a.end(), {t.prlimit, "--nproc=" + std::to_string(n) + ":" + std::to_string(n), "--"});
  }
  a.insert(a.end(), argv.begin(), argv.end());
  return a;
}

// ---- method "namespaces": the child ---------------------------------------------------------------

// Sends the failed step and errno to the parent and exits. Only system calls.
[[noreturn]] void fail(const char* step) {
  ChildError e{};
  std::memcpy(e.tag, kTag, sizeof kTag);
  e.err = errno;
  size_t n = std::min(std::strlen(step), sizeof e.step - 1);
  std::memcpy(e.step, step, n);
  (void)!write(kErrFd, &e, sizeof e);
  _exit(126);
}

bool write_text(const char* path, const std::string& text) {
  int fd = open(path, O_WRONLY | O_CLOEXEC);
  if (fd < 0) return false;
  bool ok = write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  close(fd);
  return ok;
}

int set_attr(const char* path, unsigned flags, uint64_t set, uint64_t clear) {
  MountAttr a{set, clear, 0, 0};
  return static_cast<int>(syscall(SYS_mount_setattr, AT_FDCWD, path, flags, &a, sizeof a));
}

int exit_status_of(int st) { return WIFEXITED(st) ? WEXITSTATUS(st) : WIFSIGNALED(st) ? 128 + WTERMSIG(st) : 1; }

// One operation, ready for the child: paths under kRoot and the step names of its failures.
struct NsOp {
  const Op* op = nullptr;
  std::string at;                  // kRoot + dst
  std::vector<std::string> chain;  // directories to create first (under kRoot), parents first
  std::string tmpfs_data;          // "mode=1777,size=..."
  std::string step_clone, step_mount, step_attr;
  int fd = -1;
};

struct NsProc {
  std::string at, step;
  bool dir = false;
};

struct NsChild {
  bool userns = false;  // a user namespace (not root, or root without CAP_SYS_ADMIN)
  bool drop_to_user = false;  // root: become config uid:gid
  unsigned uid = 0, gid = 0;
  std::string uid_map, gid_map;
  bool network = false;
  std::vector<NsOp> ops;
  std::vector<NsProc> proc_ro, proc_masked;
  std::string root_null;  // kRoot + /dev/null (the masks' source)
  std::string proc_at;
  std::string cwd;
  Rlimits limits;
  const SyscallFilter* filter = nullptr;  // installed last before the program's fork
  std::vector<char*> argv, envp;
};

std::vector<std::string> chain_of(const std::string& dst, bool include_self) {
  std::vector<std::string> out;
  for (size_t i = 1; i <= dst.size(); ++i) {
    if (i == dst.size() ? include_self : dst[i] == '/') out.push_back(kRoot + dst.substr(0, i));
  }
  return out;
}

NsChild prepare_ns(const Picture& p, const JailOptions& o, bool userns) {
  NsChild c;
  c.userns = userns;
  c.drop_to_user = !userns;  // root with CAP_SYS_ADMIN
  c.uid = o.uid.value_or(o.config->uid);
  c.gid = o.uid.value_or(o.config->gid);
  c.uid_map = std::to_string(geteuid()) + " " + std::to_string(geteuid()) + " 1";
  c.gid_map = std::to_string(getegid()) + " " + std::to_string(getegid()) + " 1";
  c.network = o.network;
  for (const auto& op : p.ops) {
    NsOp n;
    n.op = &op;
    n.at = kRoot + op.dst;
    bool dir_point = op.kind == Op::Kind::Tmpfs || op.kind == Op::Kind::Dir || (op.kind == Op::Kind::Bind && !op.file);
    n.chain = chain_of(op.dst, dir_point);
    char data[96];
    std::snprintf(data, sizeof data, "mode=%o%s", op.mode,
                  op.size ? (",size=" + std::to_string(op.size)).c_str() : "");
    n.tmpfs_data = data;
    n.step_clone = "open_tree(" + op.src + ", OPEN_TREE_CLONE)";
    n.step_mount = op.kind == Op::Kind::Bind      ? "bind " + op.src + " (move_mount)"
                   : op.kind == Op::Kind::Tmpfs   ? "mount a tmpfs on " + op.dst
                   : op.kind == Op::Kind::Symlink ? "symlink " + op.dst + " -> " + op.src
                                                  : "mkdir " + op.dst;
    n.step_attr = std::string("mount_setattr(") + op.dst + (op.writable ? ", writable)" : ", read-only)");
    c.ops.push_back(n);
  }
  for (const auto& q : p.proc_read_only) c.proc_ro.push_back({kRoot + q, "bind " + q + " read-only", false});
  for (const auto& q : p.proc_masked) c.proc_masked.push_back({kRoot + q, "mask " + q, false});
  c.root_null = std::string(kRoot) + "/dev/null";
  c.proc_at = std::string(kRoot) + "/proc";
  c.cwd = p.cwd;
  c.limits = rlimits_of(o, true);
  return c;
}

// Clones every bound tree while the host's tree is still in place.
void clone_sources(NsChild& c) {
  for (auto& n : c.ops) {
    if (n.op->kind != Op::Kind::Bind) continue;
    n.fd = static_cast<int>(
        syscall(SYS_open_tree, AT_FDCWD, n.op->src.c_str(), kOpenTreeClone | O_CLOEXEC | kAtRecursive));
    if (n.fd < 0) fail(n.step_clone.c_str());
  }
}

// Lays every operation out under kRoot.
void build_tree(NsChild& c) {
  if (mount("tmpfs", kRoot, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755") != 0) fail("mount a tmpfs for the new root");
  for (auto& n : c.ops) {
    for (const auto& d : n.chain) mkdir(d.c_str(), 0755);  // EEXIST where it is there already
    const Op& op = *n.op;
    bool ok = true;
    if (op.kind == Op::Kind::Bind) {
      if (op.file) {
        int fd = open(n.at.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
        if (fd >= 0) close(fd);
      }
      ok = syscall(SYS_move_mount, n.fd, "", AT_FDCWD, n.at.c_str(), kMoveMountFEmptyPath) == 0;
      close(n.fd);
    } else if (op.kind == Op::Kind::Tmpfs) {
      ok = mount("tmpfs", n.at.c_str(), "tmpfs", MS_NOSUID | MS_NODEV, n.tmpfs_data.c_str()) == 0;
    } else if (op.kind == Op::Kind::Symlink) {
      ok = symlink(op.src.c_str(), n.at.c_str()) == 0;
    }
    if (!ok) fail(n.step_mount.c_str());
  }
}

// Read-only unless writable, nosuid, nodev unless a device; a bind's submounts alike.
void set_attributes(NsChild& c) {
  if (set_attr(kRoot, 0, kAttrRdonly | kAttrNosuid | kAttrNodev, 0) != 0) fail("mount_setattr(/, read-only)");
  for (const auto& n : c.ops) {
    const Op& op = *n.op;
    if (op.kind != Op::Kind::Bind && op.kind != Op::Kind::Tmpfs) continue;
    uint64_t set = kAttrNosuid | (op.writable ? 0 : kAttrRdonly) | (op.device ? 0 : kAttrNodev);
    uint64_t clear = op.writable ? kAttrRdonly : 0;
    if (set_attr(n.at.c_str(), op.kind == Op::Kind::Bind ? kAtRecursive : 0, set, clear) != 0)
      fail(n.step_attr.c_str());
  }
}

// The namespace's own /proc. Writable: the CUDA driver fails to initialise (error 304) under a
// read-only /proc (measured on the H100 host). What answers to uid 0 even without capabilities
// (/proc/sys, /proc/sysrq-trigger, ...) is bound read-only over itself, as container runtimes do;
// the masked entries are covered by an unusable /dev/null (nodev) or an empty directory.
void mount_proc(NsChild& c) {
  if (mount("proc", c.proc_at.c_str(), "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, nullptr) != 0)
    fail("mount a fresh /proc");
  for (const auto& q : c.proc_ro) {
    if (access(q.at.c_str(), F_OK) != 0) continue;
    if (mount(q.at.c_str(), q.at.c_str(), nullptr, MS_BIND | MS_REC, nullptr) != 0 ||
        set_attr(q.at.c_str(), kAtRecursive, kAttrRdonly | kAttrNosuid | kAttrNodev, 0) != 0)
      fail(q.step.c_str());
  }
  for (const auto& q : c.proc_masked) {
    struct stat st;
    if (lstat(q.at.c_str(), &st) != 0) continue;
    bool dir = S_ISDIR(st.st_mode);
    int r = dir ? mount("tmpfs", q.at.c_str(), "tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV, "mode=0555")
                : mount(c.root_null.c_str(), q.at.c_str(), nullptr, MS_BIND, nullptr);
    if (r != 0 || (!dir && set_attr(q.at.c_str(), 0, kAttrRdonly | kAttrNosuid | kAttrNodev, 0) != 0))
      fail(q.step.c_str());
  }
}

// Into the new root: pivot_root, the host's tree detached. Where the host's root is the initial
// rootfs (pivot_root says EINVAL there), the new root is moved over it and chrooted into, as
// container runtimes do; the host's tree is then out of reach without CAP_SYS_CHROOT, dropped next.
void enter_root() {
  if (chdir(kRoot) != 0) fail("chdir(the new root)");
  if (syscall(SYS_pivot_root, ".", ".") == 0) {
    if (umount2(".", MNT_DETACH) != 0) fail("detach the host's root (umount2)");
  } else if (errno != EINVAL || mount(".", "/", nullptr, MS_MOVE, nullptr) != 0 || chroot(".") != 0) {
    fail("pivot_root");
  }
  if (chdir("/") != 0) fail("chdir(/)");
}

// No way back: no capabilities (bounding, ambient, effective, permitted, inheritable), the
// unprivileged user when anvil is root, no privilege gain by exec.
void drop_privileges(const NsChild& c) {
  for (int cap = 0; cap <= 63; ++cap) {
    if (prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 && errno != EINVAL) fail("prctl(PR_CAPBSET_DROP)");
  }
  prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0);
  if (c.drop_to_user) {
    if (setgroups(0, nullptr) != 0) fail("setgroups(none)");
    if (setresgid(c.gid, c.gid, c.gid) != 0) fail("setresgid(the sandbox's gid)");
    if (setresuid(c.uid, c.uid, c.uid) != 0) fail("setresuid(the sandbox's uid)");
  }
  __user_cap_header_struct hdr{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[2] = {};
  if (syscall(SYS_capset, &hdr, data) != 0) fail("capset(no capabilities)");
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) fail("prctl(PR_SET_NO_NEW_PRIVS)");
}

void set_limits(const NsChild& c) {
  if (!apply_rlimits(c.limits)) fail("setrlimit");
}

void enter_namespaces(const NsChild& c) {
  if (c.userns) {
    if (unshare(CLONE_NEWUSER) != 0) fail("unshare(CLONE_NEWUSER)");
    if (!write_text("/proc/self/setgroups", "deny")) fail("write /proc/self/setgroups");
    if (!write_text("/proc/self/uid_map", c.uid_map)) fail("write /proc/self/uid_map");
    if (!write_text("/proc/self/gid_map", c.gid_map)) fail("write /proc/self/gid_map");
  }
  if (unshare(CLONE_NEWNS) != 0) fail("unshare(CLONE_NEWNS)");
  if (!c.network && unshare(CLONE_NEWNET) != 0) fail("unshare(CLONE_NEWNET)");
  if (unshare(CLONE_NEWIPC) != 0) fail("unshare(CLONE_NEWIPC)");
  if (unshare(CLONE_NEWUTS) != 0) fail("unshare(CLONE_NEWUTS)");
  if (unshare(CLONE_NEWPID) != 0) fail("unshare(CLONE_NEWPID)");
}

[[noreturn]] void namespaces_child(NsChild& c) {
  enter_namespaces(c);
  pid_t init = fork();
  if (init < 0) fail("fork (PID 1 of the sandbox)");
  if (init > 0) {
    // This process stays outside the new PID namespace and only mirrors PID 1's status.
    close(kErrFd);
    close(1);
    close(2);
    int st = 0;
    while (waitpid(init, &st, 0) < 0 && errno == EINTR) {
    }
    _exit(exit_status_of(st));
  }
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  umask(022);  // the directories made for mount points must be enterable by the jail's user
  if (mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) fail("make / private (MS_REC|MS_PRIVATE)");
  if (sethostname(kHostname, std::strlen(kHostname)) != 0) fail("sethostname");
  clone_sources(c);
  build_tree(c);
  set_attributes(c);
  mount_proc(c);
  enter_root();
  drop_privileges(c);
  if (chdir(c.cwd.c_str()) != 0) fail("chdir(the working directory)");
  set_limits(c);
  if (c.filter && !install_syscall_filter(*c.filter)) fail("seccomp (the system-call filter)");
  // PID 1 is a fork of anvil: its environment and memory (an API key, serve's token) anvil's. Not
  // dumpable, /proc/1's environ, mem and maps are refused to the program even where it runs as the
  // same user (anvil not root). The program's exec makes it dumpable again, as any program is.
  if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0) fail("prctl(PR_SET_DUMPABLE)");
  pid_t prog = fork();
  if (prog < 0) fail("fork (the program)");
  if (prog == 0) {
    execve(c.argv[0], c.argv.data(), c.envp.data());
    fail("exec the program");
  }
  // PID 1: reap whatever is orphaned to it until the program exits; its exit then ends every
  // other process of the namespace.
  close(kErrFd);
  int devnull = open("/dev/null", O_RDWR | O_CLOEXEC);
  for (int fd : {0, 1, 2}) dup2(devnull, fd);
  while (true) {
    int st = 0;
    pid_t w = waitpid(-1, &st, 0);
    if (w == prog) _exit(exit_status_of(st));
    if (w < 0 && errno != EINTR) _exit(1);
  }
}

bool has_cap_sys_admin() {
  __user_cap_header_struct hdr{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[2] = {};
  if (syscall(SYS_capget, &hdr, data) != 0) return false;
  return (data[0].effective & (1u << CAP_SYS_ADMIN)) != 0;
}

bool drops_to_user() { return geteuid() == 0 && has_cap_sys_admin(); }

// ---- the parent ------------------------------------------------------------------------------

std::string first_lines(const std::string& s, size_t max_bytes) {
  std::string t = s.substr(0, max_bytes);
  while (!t.empty() && (t.back() == '\n' || t.back() == ' ')) t.pop_back();
  return t;
}

// The pipes between the parent and the jail: stdin (when data is given), stdout, stderr (when
// separate) and the set-up error/status pipe. [0] is the read end.
struct Pipes {
  int in[2] = {-1, -1}, out[2] = {-1, -1}, err[2] = {-1, -1}, status[2] = {-1, -1};
  bool open_all(const JailOptions& o) {
    bool ok = pipe2(out, O_CLOEXEC) == 0 && pipe2(status, O_CLOEXEC) == 0;
    if (ok && !o.merge_stderr) ok = pipe2(err, O_CLOEXEC) == 0;
    if (ok && o.stdin_data) ok = pipe2(in, O_CLOEXEC) == 0;
    return ok;
  }
  void close_child_ends() {
    for (int* fd : {&in[0], &out[1], &err[1], &status[1]}) {
      if (*fd >= 0) close(*fd);
      *fd = -1;
    }
  }
  ~Pipes() {
    for (int fd : {in[0], in[1], out[0], out[1], err[0], err[1], status[0], status[1]}) {
      if (fd >= 0) close(fd);
    }
  }
};

// In the forked child, before either method: a new session, and fds 0-3 as the jail expects them
// (and 4, bwrap's filter program, when filter_fd is one).
void child_fds(const Pipes& p, bool bubblewrap, int filter_fd) {
  setsid();
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  int e = fcntl(p.status[1], F_DUPFD_CLOEXEC, 10);
  int w = fcntl(p.out[1], F_DUPFD_CLOEXEC, 10);
  int w2 = p.err[1] >= 0 ? fcntl(p.err[1], F_DUPFD_CLOEXEC, 10) : w;
  int n = p.in[0] >= 0 ? fcntl(p.in[0], F_DUPFD_CLOEXEC, 10) : open("/dev/null", O_RDONLY | O_CLOEXEC);
  int f = filter_fd >= 0 ? fcntl(filter_fd, F_DUPFD_CLOEXEC, 10) : -1;
  if (e < 0 || w < 0 || w2 < 0 || n < 0 || dup2(n, 0) < 0 || dup2(w, 1) < 0 || dup2(w2, 2) < 0 || dup2(e, kErrFd) < 0)
    _exit(125);
  if (filter_fd >= 0 && (f < 0 || dup2(f, kFilterFd) < 0)) _exit(125);
  int keep = filter_fd >= 0 ? kFilterFd : kErrFd;
  if (syscall(SYS_close_range, keep + 1, ~0U, 0) != 0) {
    for (int fd = keep + 1; fd < 65536; ++fd) close(fd);
  }
  // bwrap keeps the status fd across its exec (and closes it before the program's); for
  // "namespaces" it closes on the program's exec.
  fcntl(kErrFd, F_SETFD, bubblewrap ? 0 : FD_CLOEXEC);
  for (int sig = 1; sig < NSIG; ++sig) signal(sig, SIG_DFL);
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
}

// Appends what a pipe has, keeping at most `max` bytes; false at its end.
bool drain(int fd, std::string* into, size_t max, size_t* total) {
  char buf[65536];
  ssize_t r = read(fd, buf, sizeof buf);
  if (r > 0) {
    // Keep reading past the limit, so the program never blocks on a full pipe.
    if (total) *total += static_cast<size_t>(r);
    size_t room = max > into->size() ? max - into->size() : 0;
    into->append(buf, std::min(room, static_cast<size_t>(r)));
    return true;
  }
  return r < 0 && (errno == EINTR || errno == EAGAIN);
}

// Reads the program's output until its pipes are closed and the jail has exited (either may
// come first: `exec >&-` closes the pipe early), killing the whole group at the timeout. The
// child is only reaped by the caller, so its process group cannot be reused before the last kill.
void supervise(pid_t pid, Pipes& pipes, const JailOptions& o, std::chrono::steady_clock::time_point t0,
               JailResult* res) {
  int pidfd = static_cast<int>(syscall(SYS_pidfd_open, pid, 0));
  bool out_eof = false, err_eof = pipes.err[0] < 0, exited = false, killed = false;
  size_t in_done = 0;
  if (pipes.in[1] >= 0) fcntl(pipes.in[1], F_SETFL, O_NONBLOCK);
  std::chrono::steady_clock::time_point drain_until;
  while (!(out_eof && err_eof && exited)) {
    auto now = std::chrono::steady_clock::now();
    if (!killed && o.timeout.count() > 0 && now >= t0 + o.timeout) {
      kill(-pid, SIGKILL);
      kill(pid, SIGKILL);
      killed = res->timed_out = true;
    }
    if (!killed && o.cancel && o.cancel->load()) {
      kill(-pid, SIGKILL);
      kill(pid, SIGKILL);
      killed = res->cancelled = true;
    }
    if (!exited) {
      siginfo_t info{};
      if (waitid(P_PID, static_cast<id_t>(pid), &info, WEXITED | WNOHANG | WNOWAIT) == 0 && info.si_pid == pid) {
        exited = true;
        drain_until = now + std::chrono::milliseconds(500);
      }
    }
    if (out_eof && err_eof && exited) break;
    // Once the jail is gone, whatever still holds a pipe gets a short grace period.
    if (exited && now >= drain_until) break;
    int wait_ms = 100;
    if (!killed && o.timeout.count() > 0) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(t0 + o.timeout - now).count();
      wait_ms = static_cast<int>(std::clamp<long>(left, 0, wait_ms));
    }
    pollfd p[4];
    int np = 0, i_out = -1, i_err = -1, i_in = -1;
    if (!out_eof) i_out = np, p[np++] = {pipes.out[0], POLLIN, 0};
    if (!err_eof) i_err = np, p[np++] = {pipes.err[0], POLLIN, 0};
    if (pipes.in[1] >= 0) i_in = np, p[np++] = {pipes.in[1], POLLOUT, 0};
    if (!exited && pidfd >= 0) p[np++] = {pidfd, POLLIN, 0};
    if (!exited && pidfd < 0) wait_ms = std::min(wait_ms, 10);
    if (poll(p, static_cast<nfds_t>(np), wait_ms) <= 0) continue;
    if (i_out >= 0 && p[i_out].revents) out_eof = !drain(pipes.out[0], &res->output, o.max_output, &res->output_bytes);
    if (i_err >= 0 && p[i_err].revents) err_eof = !drain(pipes.err[0], &res->err_output, o.max_output, nullptr);
    if (i_in >= 0 && p[i_in].revents) {
      const std::string& data = *o.stdin_data;
      ssize_t w = (p[i_in].revents & POLLOUT) && in_done < data.size()
                      ? write(pipes.in[1], data.data() + in_done, data.size() - in_done)
                      : -1;
      if (w > 0) in_done += static_cast<size_t>(w);
      if (in_done >= data.size() || (w < 0 && errno != EAGAIN && errno != EINTR)) {
        close(pipes.in[1]);
        pipes.in[1] = -1;
      }
    }
  }
  if (pidfd >= 0) close(pidfd);
  kill(-pid, SIGKILL);  // nothing of the group outlives the call
}

// What the child said on the status pipe: a failed step (namespaces, or the exec of bwrap), or
// bwrap's JSON status, which has "exit-code" only when the program ran. Returns false with
// res->error when the program did not run.
bool read_status(int fd, bool bubblewrap, bool killed, JailResult* res) {
  std::string said;
  char buf[4096];
  fcntl(fd, F_SETFL, O_NONBLOCK);
  for (ssize_t r; (r = read(fd, buf, sizeof buf)) > 0;) said.append(buf, static_cast<size_t>(r));
  if (said.size() >= sizeof(ChildError) && said.compare(0, sizeof kTag, kTag, sizeof kTag) == 0) {
    ChildError e{};
    std::memcpy(&e, said.data(), sizeof e);
    res->error = "sandbox: " + std::string(e.step, strnlen(e.step, sizeof e.step)) + ": " + std::strerror(e.err);
    return false;
  }
  if (bubblewrap && !killed && said.find("\"exit-code\"") == std::string::npos) {
    res->error = "sandbox: bwrap could not set up the sandbox: " + first_lines(res->err_output + res->output, 2000);
    res->output.clear();
    res->err_output.clear();
    return false;
  }
  return true;
}

// A memory file holding the filter's program at offset 0 (bwrap reads it to its end); -1 on failure.
int program_file(const SyscallFilter& f) {
  int fd = memfd_create("anvil-seccomp", MFD_CLOEXEC);
  if (fd < 0) return -1;
  size_t n = f.program.size() * sizeof(sock_filter);
  if (pwrite(fd, f.program.data(), n, 0) != static_cast<ssize_t>(n)) {
    close(fd);
    return -1;
  }
  return fd;
}

struct FilterFile {  // closed in the parent when run_with returns
  int fd = -1;
  ~FilterFile() {
    if (fd >= 0) close(fd);
  }
};

// Runs argv under one method, without choosing or probing.
JailResult run_with(const std::string& method, const BwrapTools& tools, const std::vector<std::string>& argv,
                    const JailOptions& o) {
  JailResult res;
  res.how = method;
  auto t0 = std::chrono::steady_clock::now();
  Picture pic;
  std::string err;
  if (argv.empty() || argv[0].empty() || argv[0][0] != '/') {
    res.error = "sandbox: the program must be given by its absolute path" + (argv.empty() ? "" : ", not " + argv[0]);
    return res;
  }
  if (!make_picture(o, &pic, &err)) {
    res.error = "sandbox: " + err;
    return res;
  }
  // Everything the child touches is built here.
  bool bubblewrap = method == "bubblewrap";
  std::vector<std::string> args = bubblewrap ? bwrap_argv(tools, pic, o, argv) : argv;
  std::vector<std::string> env = o.env;
  std::vector<char*> args_c, env_c;
  for (auto& a : args) args_c.push_back(a.data());
  args_c.push_back(nullptr);
  for (auto& e : env) env_c.push_back(e.data());
  env_c.push_back(nullptr);
  // bwrap's rlimits are set before its exec: RLIMIT_NPROC only as root (root's own clones are
  // exempt; the count is the config uid's once setpriv has dropped to it). Anyone else gets it from
  // prlimit inside bwrap's user namespace: set before it, the kernel would also check every fork
  // in the jail against the caller's count on the whole host.
  Rlimits bwrap_limits = bubblewrap ? rlimits_of(o, geteuid() == 0) : Rlimits();
  const SyscallFilter* filter = nullptr;
  if (o.syscall_filter) {
    filter = &jail_syscall_filter();
    if (!filter->ok()) {
      res.error = "sandbox: the system-call filter: " + filter->error;
      return res;
    }
  }
  NsChild ns;
  if (!bubblewrap) {
    ns = prepare_ns(pic, o, !drops_to_user());
    ns.filter = filter;
    ns.argv = args_c;
    ns.envp = env_c;
  }
  // bwrap reads the filter's program from a descriptor (--seccomp 4).
  FilterFile filter_fd;
  if (bubblewrap && filter && (filter_fd.fd = program_file(*filter)) < 0) {
    res.error = std::string("sandbox: memfd for the system-call filter: ") + std::strerror(errno);
    return res;
  }
  Pipes pipes;
  if (!pipes.open_all(o)) {
    res.error = std::string("sandbox: pipe: ") + std::strerror(errno);
    return res;
  }
  pid_t parent = getpid();
  pid_t pid = fork();
  if (pid < 0) {
    res.error = std::string("sandbox: fork: ") + std::strerror(errno);
    return res;
  }
  if (pid == 0) {
    child_fds(pipes, bubblewrap, filter_fd.fd);
    if (getppid() != parent) _exit(1);
    if (bubblewrap) {
      apply_rlimits(bwrap_limits);
      execve(args_c[0], args_c.data(), env_c.data());
      fail("exec bwrap");
    }
    namespaces_child(ns);
  }
  pipes.close_child_ends();
  supervise(pid, pipes, o, t0, &res);
  int st = 0;
  while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
  }
  res.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (!read_status(pipes.status[0], bubblewrap, res.timed_out, &res)) return res;
  res.started = true;
  if (WIFEXITED(st)) {
    res.exit_code = WEXITSTATUS(st);
  } else if (WIFSIGNALED(st)) {
    res.signal = WTERMSIG(st);
  }
  return res;
}

// Whether a method works here: one trivial program, run once per process.
struct Probe {
  std::once_flag once;
  bool works = false;
  std::string why;
  BwrapTools tools;  // the programs' paths
};

Probe& probe(const std::string& method, const JailConfig& config) {
  static Probe bw, ns;
  Probe& p = method == "bubblewrap" ? bw : ns;
  std::call_once(p.once, [&] {
    if (method == "bubblewrap") {
      p.tools.bwrap = find_program("bwrap").string();
      if (p.tools.bwrap.empty()) {
        p.why = "bwrap is not on PATH (install bubblewrap)";
        return;
      }
      // --size (the tmpfs limits) came with bubblewrap 0.8.
      SubprocessResult v = run_subprocess({p.tools.bwrap, "--version"});
      int major = 0, minor = 0;
      if (std::sscanf(v.output.c_str(), "bubblewrap %d.%d", &major, &minor) != 2 || (major == 0 && minor < 8)) {
        p.why = "bwrap is older than 0.8 (" + first_lines(v.output, 100) + "), which the tmpfs size limits need";
        return;
      }
      if (geteuid() == 0) {
        p.tools.setpriv = find_program("setpriv").string();
        if (p.tools.setpriv.empty()) {
          p.why = "as root, bwrap needs setpriv (util-linux) to drop to the sandbox's user";
          return;
        }
      } else {
        p.tools.prlimit = find_program("prlimit").string();
        if (p.tools.prlimit.empty()) {
          p.why = "as a user, bwrap needs prlimit (util-linux) to cap the jail's processes";
          return;
        }
      }
    }
    JailOptions o;
    o.config = &config;
    o.timeout = std::chrono::seconds(30);
    o.env = {"PATH=/usr/bin:/bin"};
    JailResult r = run_with(method, p.tools, {"/bin/sh", "-c", "echo ok"}, o);
    p.works = r.started && r.exit_code == 0 && r.output == "ok\n";
    if (!p.works) {
      std::string e = r.error.rfind("sandbox: ", 0) == 0 ? r.error.substr(9) : r.error;
      p.why = !e.empty() ? e
                         : "a trivial program failed (exit code " + std::to_string(r.exit_code) +
                               "): " + first_lines(r.output, 500);
    }
  });
  return p;
}

// The strings of j[key]; the first key missing (or not an array) goes to *missing, after `prefix`.
std::vector<std::string> strings_at(const nlohmann::json& j, const char* key, std::string* missing,
                                    const std::string& prefix = "") {
  std::vector<std::string> out;
  if (!j.is_object() || !j.contains(key) || !j[key].is_array()) {
    if (missing->empty()) *missing = prefix + key;
    return out;
  }
  for (const auto& v : j[key]) {
    if (v.is_string()) out.push_back(v.get<std::string>());
  }
  return out;
}

}  // namespace

bool load_jail_config(const fs::path& file, JailConfig* out, std::string* err) {
  auto text = read_file(file);
  if (!text) {
    *err = "cannot read the sandbox configuration " + file.string();
    return false;
  }
  nlohmann::json j = nlohmann::json::parse(*text, nullptr, false);
  if (!j.is_object()) {
    *err = file.string() + " is not a JSON object";
    return false;
  }
  JailConfig c;
  std::string missing;
  for (const char* k : {"uid", "gid", "tmp_bytes", "shm_bytes", "processes", "episode_uid_base", "episode_uid_span",
                        "shell_data_bytes", "shell_file_bytes"}) {
    if (!j.contains(k) || !j[k].is_number_unsigned()) missing = missing.empty() ? k : missing;
  }
  if (missing.empty()) {
    c.uid = j["uid"].get<unsigned>();
    c.gid = j["gid"].get<unsigned>();
    c.tmp_bytes = j["tmp_bytes"].get<uint64_t>();
    c.shm_bytes = j["shm_bytes"].get<uint64_t>();
    c.processes = j["processes"].get<uint64_t>();
    c.episode_uid_base = j["episode_uid_base"].get<unsigned>();
    c.episode_uid_span = j["episode_uid_span"].get<unsigned>();
    c.shell_data_bytes = j["shell_data_bytes"].get<uint64_t>();
    c.shell_file_bytes = j["shell_file_bytes"].get<uint64_t>();
    if (c.episode_uid_span == 0 || c.episode_uid_base + uint64_t{c.episode_uid_span} > (uint64_t{1} << 32) - 1) {
      missing = "episode_uid_span";
    }
  }
  c.system.dirs = strings_at(j, "system_dirs", &missing);
  c.system.etc = strings_at(j, "etc", &missing);
  const nlohmann::json build = j.contains("build") ? j["build"] : nlohmann::json();
  c.build.dirs = strings_at(build, "system_dirs", &missing, "build.");
  c.build.etc = strings_at(build, "etc", &missing, "build.");
  c.dev = strings_at(j, "dev", &missing);
  c.gpu_dev = strings_at(j, "gpu_dev", &missing);
  c.proc_read_only = strings_at(j, "proc_read_only", &missing);
  c.proc_masked = strings_at(j, "proc_masked", &missing);
  if (!missing.empty()) {
    *err = file.string() + ": \"" + missing + "\" is missing or of the wrong type";
    return false;
  }
  *out = std::move(c);
  return true;
}

std::string JailResult::describe() const {
  if (!started) return error;
  if (timed_out) return "timed out after " + std::to_string(static_cast<long>(seconds + 0.5)) + " s";
  if (cancelled) return "cancelled";
  if (signal) return "killed by signal " + std::to_string(signal) + " (" + strsignal(signal) + ")";
  if (exit_code > 128 && exit_code < 128 + NSIG)
    return "killed by signal " + std::to_string(exit_code - 128) + " (" + strsignal(exit_code - 128) + ")";
  return "exit code " + std::to_string(exit_code);
}

std::string jail_method(const JailConfig& config, std::string* why) {
  const char* forced_c = std::getenv("ANVIL_SANDBOX");
  std::string forced = forced_c ? forced_c : "";
  if (forced == "bubblewrap" || forced == "namespaces") {
    Probe& p = probe(forced, config);
    if (p.works) return forced;
    if (why) *why = "ANVIL_SANDBOX=" + forced + ", but it does not work here: " + p.why;
    return "";
  }
  if (!forced.empty()) {
    if (why) *why = "ANVIL_SANDBOX=" + forced + " is not a method (bubblewrap or namespaces)";
    return "";
  }
  // anvil's own namespaces first: no program to exec (13 ms a jail against bwrap's 35 on the
  // 2-core machine, and a build runs one per unit); bwrap where the kernel lets only it make
  // namespaces (an AppArmor profile, say).
  if (probe("namespaces", config).works) return "namespaces";
  if (probe("bubblewrap", config).works) return "bubblewrap";
  if (why)
    *why = "no way to confine programs here: namespaces: " + probe("namespaces", config).why +
           "; bubblewrap: " + probe("bubblewrap", config).why;
  return "";
}

JailResult run_jailed(const std::vector<std::string>& argv, const JailOptions& opts) {
  JailResult res;
  if (!opts.config) {
    res.error = "sandbox: no configuration given (share/sandbox.json)";
    return res;
  }
  std::string why;
  std::string method = jail_method(*opts.config, &why);
  if (method.empty()) {
    res.error = "sandbox: " + why;
    return res;
  }
  const Probe& p = probe(method, *opts.config);
  return run_with(method, p.tools, argv, opts);
}

// Root with CAP_SYS_ADMIN drops to the config's user; anyone else keeps their own uid (mapped to
// itself by a user namespace).
unsigned jail_uid(const JailConfig& config) { return drops_to_user() ? config.uid : geteuid(); }

unsigned episode_uid(const JailConfig& config) {
  std::random_device rd;
  return config.episode_uid_base + static_cast<unsigned>(rd() % config.episode_uid_span);
}
unsigned jail_gid(const JailConfig& config) { return drops_to_user() ? config.gid : getegid(); }

}  // namespace anvil
