// sandbox.cpp: confining the agent's shell commands.
//
// Both methods give the command the same world:
//   /                 the host's tree, read-only (recursively: every mount under it)
//   WORKDIR           writable (the only writable place that outlives the command)
//   WORKDIR/model.py  ... the protected files: bound read-only
//   /tmp, /dev/shm    private, empty tmpfs (writable; gone with the command)
//   /dev              a minimal tmpfs: null zero full random urandom tty, the fd
//                     links, and the GPU nodes (nvidia*, nvidia-caps, dri, kfd);
//                     the host's disks, loop devices, kmsg... are absent (as root,
//                     a read-only mount does not stop writes to a device node)
//   /run              an empty read-only tmpfs: the host daemons' unix sockets
//                     (docker, postgres, dbus) are out of reach (unless network)
//   the anvil cache   ($ANVIL_CACHE or ~/.cache/anvil, when it exists) an empty
//                     read-only tmpfs, so commands cannot tamper with shared
//                     builds; a workdir inside the cache stays visible
//   /proc             the sandbox's own (its processes only)
// plus no network (a new network namespace: only a loopback that is down), its
// own IPC, UTS and PID namespaces (when the shell exits, everything it started
// dies, so a background job cannot hold the output pipe open or outlive the
// timeout), a new session (no controlling terminal), no capabilities,
// no_new_privs, stdin from /dev/null, and a clean environment.
//
// Method "bubblewrap": the same picture drawn with bwrap's options.
//
// Method "namespaces" (no bwrap, e.g. the GPU host): the child unshares user
// (when not root, or root without CAP_SYS_ADMIN), mount, network, IPC, UTS and
// PID namespaces, then forks PID 1 of the new PID namespace, which clones the
// trees it needs (the workdir, the device nodes: open_tree) before covering
// their parents, sets up the mounts, makes the whole tree read-only in one
// mount_setattr(AT_RECURSIVE) and the workdir, /tmp and /dev/shm writable
// again, drops every capability and sets no_new_privs; it then forks the shell
// and reaps orphans until the shell exits, as bwrap's own PID 1 does. It needs
// Linux 5.12 (mount_setattr). Every step that fails is reported by name over a
// close-on-exec pipe ("sandbox: unshare(CLONE_NEWUSER): Operation not
// permitted") and the command does not run: never unconfined.
//
// Everything the child needs (argument and environment arrays, paths, step
// names) is prepared before fork: the child of a multithreaded process makes
// only system calls.
#include "anvil/agent/sandbox.h"

#include <fcntl.h>
#include <linux/capability.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "anvil/util/fs.h"
#include "anvil/util/subprocess.h"

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
constexpr uint64_t kMountAttrRdonly = 0x1;
constexpr unsigned kAtRecursive = 0x8000;
constexpr unsigned kOpenTreeClone = 1;
constexpr unsigned kMoveMountFEmptyPath = 0x4;

constexpr int kErrFd = 3;  // in the child: the set-up error pipe (namespaces) or bwrap's status pipe

// A failed set-up step, as the child sends it to the parent.
struct ChildError {
  char tag[8];  // kTag: tells it from bwrap's JSON status on the same pipe
  int err;
  char step[244];
};
constexpr char kTag[8] = "anvilsb";

// The picture of the sandbox both methods draw, computed in the parent.
struct Plan {
  std::string workdir;                     // canonical
  std::vector<std::string> workdir_chain;  // "/a", "/a/b", ..., workdir (mkdir -p under a fresh tmpfs)
  std::vector<std::string> protect;        // canonical paths of the protected files that exist
  std::string cache;                       // the anvil cache to hide, or ""
  bool cache_in_workdir = false;           // hide it after the workdir is mounted
  bool mask_run = false;
  bool network = false;
  std::vector<std::string> dev;  // /dev entries brought into the minimal /dev
  std::vector<char> dev_is_dir;
  std::string command;
  std::vector<std::string> env;
};

bool within(const std::string& path, const std::string& dir) {
  if (dir == "/") return true;
  return path == dir || (path.size() > dir.size() && path.compare(0, dir.size(), dir) == 0 && path[dir.size()] == '/');
}

std::string cache_dir() {
  if (const char* c = std::getenv("ANVIL_CACHE"); c && *c) return c;
  if (const char* h = std::getenv("HOME"); h && *h) return std::string(h) + "/.cache/anvil";
  return "";
}

// A small clean environment: nothing of anvil's own (API keys, tokens) leaks
// in; what makes nvcc and python behave as they do for the harness is kept.
std::vector<std::string> clean_env(const SandboxOptions& o) {
  std::vector<std::string> env = {
      "PATH=/usr/local/cuda/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
      "HOME=" + o.workdir.string(), "LANG=C.UTF-8", "TERM=dumb", "TMPDIR=/tmp",
      // stdout and stderr are merged: keep Python's in the order written
      "PYTHONUNBUFFERED=1"};
  if (const char* p = std::getenv("PATH"); p && *p) env[0] = std::string("PATH=") + p;
  for (const char* k : {"CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "NVIDIA_VISIBLE_DEVICES",
                        "NVIDIA_DRIVER_CAPABILITIES", "CUDA_HOME", "CUDA_PATH", "LD_LIBRARY_PATH",
                        "TORCH_CUDA_ARCH_LIST", "ANVIL_PYTHON", "PYTHONPATH", "VIRTUAL_ENV", "CONDA_PREFIX"}) {
    if (const char* v = std::getenv(k); v && *v) env.push_back(std::string(k) + "=" + v);
  }
  for (const auto& e : o.env) {  // opts.env replaces a variable of the same name
    std::string name = e.substr(0, e.find('='));
    std::erase_if(env, [&](const std::string& x) { return x.compare(0, name.size() + 1, name + "=") == 0; });
    env.push_back(e);
  }
  return env;
}

// Device nodes of the minimal /dev: the usual character devices and the GPUs'.
void device_nodes(Plan& p) {
  std::error_code ec;
  for (const char* n : {"null", "zero", "full", "random", "urandom", "tty"}) {
    fs::path d = fs::path("/dev") / n;
    if (fs::symlink_status(d, ec).type() == fs::file_type::character) {
      p.dev.push_back(d.string());
      p.dev_is_dir.push_back(0);
    }
  }
  std::vector<fs::path> gpu;
  for (auto it = fs::directory_iterator("/dev", ec); !ec && it != fs::directory_iterator(); it.increment(ec)) {
    std::string n = it->path().filename().string();
    if (n.rfind("nvidia", 0) == 0 || n == "dri" || n == "kfd") gpu.push_back(it->path());
  }
  std::sort(gpu.begin(), gpu.end());
  for (const auto& d : gpu) {
    auto t = fs::symlink_status(d, ec).type();
    if (t != fs::file_type::character && t != fs::file_type::directory) continue;
    p.dev.push_back(d.string());
    p.dev_is_dir.push_back(t == fs::file_type::directory);
  }
}

Plan make_plan(const std::string& command, const SandboxOptions& o) {
  Plan p;
  p.workdir = o.workdir.string();
  fs::path acc = "/";
  for (const auto& part : o.workdir.relative_path()) {
    acc /= part;
    p.workdir_chain.push_back(acc.string());
  }
  std::error_code ec;
  for (const auto& f : o.read_only) {
    fs::path path = o.workdir / f;
    // A symlink is not followed: its target is either outside (read-only
    // already) or another file of the workdir, which is not protected.
    if (!fs::exists(fs::symlink_status(path, ec))) continue;
    if (fs::is_symlink(fs::symlink_status(path, ec))) continue;
    std::string c = fs::weakly_canonical(path, ec).string();
    if (!ec && within(c, p.workdir) && c != p.workdir) p.protect.push_back(c);
  }
  p.network = o.network;
  p.mask_run = !o.network && fs::is_directory("/run", ec) && !within(p.workdir, "/run");
  std::string cache = cache_dir();
  if (!cache.empty() && fs::is_directory(cache, ec)) {
    cache = fs::canonical(cache, ec).string();
    // Under /tmp or /run it is hidden already, unless it lies inside the
    // workdir, which is bound back in whole; the tree itself cannot be hidden.
    bool hidden = (within(cache, "/tmp") || (p.mask_run && within(cache, "/run"))) && !within(cache, p.workdir);
    if (!ec && cache != "/" && !hidden) {
      p.cache = cache;
      p.cache_in_workdir = within(cache, p.workdir) && cache != p.workdir;
    }
  }
  device_nodes(p);
  p.command = command;
  p.env = clean_env(o);
  return p;
}

// /proc entries that answer to uid 0 without capabilities: bound read-only in both methods.
const char* const kProcReadOnly[] = {"/proc/sys", "/proc/sysrq-trigger", "/proc/irq", "/proc/bus", "/proc/fs"};

std::vector<std::string> bwrap_argv(const std::string& bwrap, const Plan& p) {
  const std::string& wd = p.workdir;
  std::vector<std::string> a = {bwrap, "--ro-bind", "/", "/", "--dev", "/dev"};
  for (const auto& d : p.dev) {
    if (d.rfind("/dev/nvidia", 0) == 0 || d == "/dev/dri" || d == "/dev/kfd") a.insert(a.end(), {"--dev-bind", d, d});
  }
  a.insert(a.end(),
           {"--perms", "1777", "--tmpfs", "/dev/shm", "--proc", "/proc", "--perms", "1777", "--tmpfs", "/tmp"});
  // The kernel's knobs read-only, as in method "namespaces" (bwrap leaves them writable to root).
  for (const char* q : kProcReadOnly) {
    if (access(q, F_OK) == 0) a.insert(a.end(), {"--ro-bind", q, q});
  }
  if (p.mask_run) a.insert(a.end(), {"--tmpfs", "/run"});
  if (!p.cache.empty() && !p.cache_in_workdir) a.insert(a.end(), {"--tmpfs", p.cache});
  a.insert(a.end(), {"--bind", wd, wd});
  if (p.cache_in_workdir) a.insert(a.end(), {"--tmpfs", p.cache});
  for (const auto& f : p.protect) a.insert(a.end(), {"--ro-bind", f, f});
  // Read-only only now: bwrap makes the workdir's mount point inside them first.
  if (p.mask_run) a.insert(a.end(), {"--remount-ro", "/run"});
  if (!p.cache.empty()) a.insert(a.end(), {"--remount-ro", p.cache});
  if (!p.network) a.push_back("--unshare-net");
  a.insert(a.end(),
           {"--unshare-ipc", "--unshare-pid", "--unshare-uts", "--die-with-parent", "--new-session", "--cap-drop",
            "ALL", "--json-status-fd", std::to_string(kErrFd), "--chdir", wd, "--", "/bin/bash", "-c", p.command});
  return a;
}

// ---- the child ------------------------------------------------------------------------------

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

// Everything method "namespaces" does in the child; step names are prepared in the parent.
struct NsChild {
  const Plan* plan;
  bool userns;
  std::string uid_map, gid_map;
  std::vector<std::string> dev_open_step, dev_bind_step, protect_bind_step, protect_ro_step;
  std::string cache_step;
  std::vector<int> dev_fd;  // sized in the parent
  std::vector<char*> argv, envp;
};

// In PID 1 of the new namespaces: the mounts, as in the picture at the top.
void set_up_mounts(NsChild& c) {
  const Plan& p = *c.plan;
  if (mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) fail("make / private (MS_REC|MS_PRIVATE)");
  // Clone what must survive the tmpfs laid over its parent (/tmp, /dev, the cache).
  int wd_fd =
      static_cast<int>(syscall(SYS_open_tree, AT_FDCWD, p.workdir.c_str(), kOpenTreeClone | O_CLOEXEC | kAtRecursive));
  if (wd_fd < 0) fail("open_tree(the workdir, OPEN_TREE_CLONE)");
  for (size_t i = 0; i < p.dev.size(); ++i) {
    c.dev_fd[i] =
        static_cast<int>(syscall(SYS_open_tree, AT_FDCWD, p.dev[i].c_str(), kOpenTreeClone | O_CLOEXEC | kAtRecursive));
    if (c.dev_fd[i] < 0) fail(c.dev_open_step[i].c_str());
  }
  if (mount("tmpfs", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777") != 0) fail("mount a tmpfs on /tmp");
  if (p.mask_run && mount("tmpfs", "/run", "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, "mode=0755") != 0)
    fail("mount a tmpfs on /run");
  if (mount("tmpfs", "/dev", "tmpfs", MS_NOSUID | MS_NOEXEC, "mode=0755") != 0) fail("mount a tmpfs on /dev");
  for (size_t i = 0; i < p.dev.size(); ++i) {
    const char* d = p.dev[i].c_str();
    if (p.dev_is_dir[i]) {
      mkdir(d, 0755);
    } else {
      int fd = open(d, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
      if (fd >= 0) close(fd);
    }
    if (syscall(SYS_move_mount, c.dev_fd[i], "", AT_FDCWD, d, kMoveMountFEmptyPath) != 0)
      fail(c.dev_bind_step[i].c_str());
    close(c.dev_fd[i]);
  }
  const char* links[][2] = {{"/proc/self/fd", "/dev/fd"},
                            {"/proc/self/fd/0", "/dev/stdin"},
                            {"/proc/self/fd/1", "/dev/stdout"},
                            {"/proc/self/fd/2", "/dev/stderr"}};
  for (auto& l : links) {
    if (symlink(l[0], l[1]) != 0) fail("symlink in /dev");
  }
  if (mkdir("/dev/shm", 01777) != 0 || mount("tmpfs", "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777") != 0)
    fail("mount a tmpfs on /dev/shm");
  if (!p.cache.empty() && !p.cache_in_workdir &&
      mount("tmpfs", p.cache.c_str(), "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, "mode=0755") != 0)
    fail(c.cache_step.c_str());
  for (const auto& d : p.workdir_chain) mkdir(d.c_str(), 0755);  // under a fresh tmpfs; EEXIST elsewhere
  if (syscall(SYS_move_mount, wd_fd, "", AT_FDCWD, p.workdir.c_str(), kMoveMountFEmptyPath) != 0)
    fail("mount the workdir (move_mount)");
  close(wd_fd);
  if (set_attr("/", kAtRecursive, kMountAttrRdonly, 0) != 0) fail("mount_setattr(/, MOUNT_ATTR_RDONLY, AT_RECURSIVE)");
  if (set_attr(p.workdir.c_str(), kAtRecursive, 0, kMountAttrRdonly) != 0) fail("mount_setattr(the workdir, writable)");
  if (set_attr("/tmp", 0, 0, kMountAttrRdonly) != 0) fail("mount_setattr(/tmp, writable)");
  if (set_attr("/dev/shm", 0, 0, kMountAttrRdonly) != 0) fail("mount_setattr(/dev/shm, writable)");
  if (p.cache_in_workdir &&
      mount("tmpfs", p.cache.c_str(), "tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, "mode=0755") != 0)
    fail(c.cache_step.c_str());
  for (size_t i = 0; i < p.protect.size(); ++i) {
    const char* f = p.protect[i].c_str();
    if (mount(f, f, nullptr, MS_BIND | MS_REC, nullptr) != 0) fail(c.protect_bind_step[i].c_str());
    if (set_attr(f, kAtRecursive, kMountAttrRdonly, 0) != 0) fail(c.protect_ro_step[i].c_str());
  }
  // The namespace's own /proc. Writable: the CUDA driver fails to initialise
  // (CUDA_ERROR_OPERATING_SYSTEM, 304) under a read-only /proc, as it does
  // under a /proc of another PID namespace (measured on the H100 host). The
  // parts that answer to uid 0 even without capabilities (/proc/sys,
  // /proc/sysrq-trigger, ...) are bound read-only over themselves, as
  // container runtimes do. Where the kernel refuses a new proc (a container
  // that masks parts of /proc), the host's stays: read-only, its other
  // processes beyond reach (no capabilities, another PID namespace), and CUDA
  // unavailable to the command.
  if (mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, nullptr) == 0) {
    for (const char* q : kProcReadOnly) {
      if (access(q, F_OK) != 0) continue;
      if (mount(q, q, nullptr, MS_BIND | MS_REC, nullptr) != 0) fail("bind a /proc entry read-only");
      if (set_attr(q, kAtRecursive, kMountAttrRdonly, 0) != 0) fail("mount_setattr(a /proc entry, read-only)");
    }
  }
}

// No way back: no capabilities (bounding, ambient, effective, permitted, inheritable), no privilege gain by exec.
void drop_privileges() {
  for (int cap = 0; cap <= 63; ++cap) {
    if (prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 && errno != EINVAL) fail("prctl(PR_CAPBSET_DROP)");
  }
  prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0);
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) fail("prctl(PR_SET_NO_NEW_PRIVS)");
  __user_cap_header_struct hdr{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[2] = {};
  if (syscall(SYS_capset, &hdr, data) != 0) fail("capset(no capabilities)");
}

[[noreturn]] void namespaces_child(NsChild& c) {
  const Plan& p = *c.plan;
  if (c.userns) {
    if (unshare(CLONE_NEWUSER) != 0) fail("unshare(CLONE_NEWUSER)");
    if (!write_text("/proc/self/setgroups", "deny")) fail("write /proc/self/setgroups");
    if (!write_text("/proc/self/uid_map", c.uid_map)) fail("write /proc/self/uid_map");
    if (!write_text("/proc/self/gid_map", c.gid_map)) fail("write /proc/self/gid_map");
  }
  if (unshare(CLONE_NEWNS) != 0) fail("unshare(CLONE_NEWNS)");
  if (!p.network && unshare(CLONE_NEWNET) != 0) fail("unshare(CLONE_NEWNET)");
  if (unshare(CLONE_NEWIPC) != 0) fail("unshare(CLONE_NEWIPC)");
  if (unshare(CLONE_NEWUTS) != 0) fail("unshare(CLONE_NEWUTS)");
  if (unshare(CLONE_NEWPID) != 0) fail("unshare(CLONE_NEWPID)");
  pid_t init = fork();
  if (init < 0) fail("fork (PID 1 of the sandbox)");
  if (init > 0) {
    // This process stays outside the new PID namespace and only mirrors PID 1's status.
    close(kErrFd);
    dup2(0, 1);
    dup2(0, 2);
    int st = 0;
    while (waitpid(init, &st, 0) < 0 && errno == EINTR) {
    }
    _exit(exit_status_of(st));
  }
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  set_up_mounts(c);
  if (chdir(p.workdir.c_str()) != 0) fail("chdir(the workdir)");
  drop_privileges();
  pid_t shell = fork();
  if (shell < 0) fail("fork (the shell)");
  if (shell == 0) {
    execve("/bin/bash", c.argv.data(), c.envp.data());
    fail("exec /bin/bash");
  }
  // PID 1: reap whatever is orphaned to it until the shell exits; its exit
  // then ends every other process of the namespace.
  close(kErrFd);
  dup2(0, 1);
  dup2(0, 2);
  while (true) {
    int st = 0;
    pid_t w = waitpid(-1, &st, 0);
    if (w == shell) _exit(exit_status_of(st));
    if (w < 0 && errno != EINTR) _exit(1);
  }
}

bool has_cap_sys_admin() {
  __user_cap_header_struct hdr{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[2] = {};
  if (syscall(SYS_capget, &hdr, data) != 0) return false;
  return (data[0].effective & (1u << CAP_SYS_ADMIN)) != 0;
}

// ---- the parent -----------------------------------------------------------------------------

std::string first_lines(const std::string& s, size_t max_bytes) {
  std::string t = s.substr(0, max_bytes);
  while (!t.empty() && (t.back() == '\n' || t.back() == ' ')) t.pop_back();
  return t;
}

// Runs `command` under one method, without choosing or probing.
SandboxResult run_with(const std::string& method, const std::string& bwrap, const std::string& command,
                       const SandboxOptions& opts) {
  SandboxResult res;
  res.how = method;
  auto t0 = std::chrono::steady_clock::now();
  std::error_code ec;
  SandboxOptions o = opts;
  o.workdir = fs::canonical(fs::absolute(opts.workdir, ec), ec);
  if (ec || !fs::is_directory(o.workdir, ec)) {
    res.error = "sandbox: the workdir " + opts.workdir.string() + " is not a directory";
    return res;
  }
  Plan plan = make_plan(command, o);

  // Everything the child touches is built here.
  std::vector<std::string> bw;
  std::vector<char*> bw_argv;
  NsChild ns;
  ns.plan = &plan;
  std::vector<char*> envp;
  for (auto& e : plan.env) envp.push_back(e.data());
  envp.push_back(nullptr);
  std::string bash = "bash", dash_c = "-c";
  if (method == "bubblewrap") {
    bw = bwrap_argv(bwrap, plan);
    for (auto& a : bw) bw_argv.push_back(a.data());
    bw_argv.push_back(nullptr);
  } else {
    ns.userns = geteuid() != 0 || !has_cap_sys_admin();
    ns.uid_map = std::to_string(geteuid()) + " " + std::to_string(geteuid()) + " 1";
    ns.gid_map = std::to_string(getegid()) + " " + std::to_string(getegid()) + " 1";
    for (const auto& d : plan.dev) {
      ns.dev_open_step.push_back("open_tree(" + d + ", OPEN_TREE_CLONE)");
      ns.dev_bind_step.push_back("bind " + d + " into the sandbox's /dev (move_mount)");
    }
    for (const auto& f : plan.protect) {
      ns.protect_bind_step.push_back("bind the protected " + f);
      ns.protect_ro_step.push_back("mount_setattr(the protected " + f + ", MOUNT_ATTR_RDONLY)");
    }
    ns.cache_step = "hide the anvil cache " + plan.cache + " (mount a tmpfs on it)";
    ns.dev_fd.assign(plan.dev.size(), -1);
    ns.argv = {bash.data(), dash_c.data(), plan.command.data(), nullptr};
    ns.envp = envp;
  }

  int out[2], errp[2];
  if (pipe2(out, O_CLOEXEC) != 0) {
    res.error = std::string("sandbox: pipe: ") + std::strerror(errno);
    return res;
  }
  if (pipe2(errp, O_CLOEXEC) != 0) {
    res.error = std::string("sandbox: pipe: ") + std::strerror(errno);
    close(out[0]);
    close(out[1]);
    return res;
  }
  pid_t parent = getpid();
  pid_t pid = fork();
  if (pid < 0) {
    res.error = std::string("sandbox: fork: ") + std::strerror(errno);
    for (int fd : {out[0], out[1], errp[0], errp[1]}) close(fd);
    return res;
  }
  if (pid == 0) {
    // A new session: its own process group (killed as one on timeout), no controlling terminal.
    setsid();
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(1);
    // fd 0 /dev/null, 1 and 2 the output pipe, 3 the error/status pipe, nothing else.
    int e = fcntl(errp[1], F_DUPFD_CLOEXEC, 10);
    int w = fcntl(out[1], F_DUPFD_CLOEXEC, 10);
    int n = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (e < 0 || w < 0 || n < 0 || dup2(n, 0) < 0 || dup2(w, 1) < 0 || dup2(w, 2) < 0 || dup2(e, kErrFd) < 0)
      _exit(125);
    if (syscall(SYS_close_range, kErrFd + 1, ~0U, 0) != 0) {
      for (int fd = kErrFd + 1; fd < 65536; ++fd) close(fd);
    }
    // bwrap keeps the status fd across its exec (and closes it before the
    // command's); for "namespaces" it closes on the shell's exec.
    fcntl(kErrFd, F_SETFD, method == "bubblewrap" ? 0 : FD_CLOEXEC);
    for (int sig = 1; sig < NSIG; ++sig) signal(sig, SIG_DFL);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    if (method == "bubblewrap") {
      execve(bw_argv[0], bw_argv.data(), envp.data());
      fail("exec bwrap");
    }
    namespaces_child(ns);
  }
  close(out[1]);
  close(errp[1]);

  // Read until the command's side of the pipe is closed and the child has
  // exited (either may come first: `exec >&-` closes the pipe early). The
  // child is only reaped at the end, so its process group cannot be reused
  // before the last kill.
  int pidfd = static_cast<int>(syscall(SYS_pidfd_open, pid, 0));
  bool eof = false, exited = false, killed = false;
  std::chrono::steady_clock::time_point drain_until;
  char buf[65536];
  while (!(eof && exited)) {
    auto now = std::chrono::steady_clock::now();
    if (!killed && o.timeout.count() > 0 && now >= t0 + o.timeout) {
      kill(-pid, SIGKILL);
      kill(pid, SIGKILL);
      killed = res.timed_out = true;
    }
    if (!exited) {
      siginfo_t info{};
      if (waitid(P_PID, static_cast<id_t>(pid), &info, WEXITED | WNOHANG | WNOWAIT) == 0 && info.si_pid == pid) {
        exited = true;
        drain_until = now + std::chrono::milliseconds(500);
      }
    }
    if (exited && eof) break;
    // Once the child is gone, whatever still holds the pipe gets a short grace period.
    if (exited && now >= drain_until) break;
    int wait_ms = 100;
    if (!killed && o.timeout.count() > 0) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(t0 + o.timeout - now).count();
      wait_ms = static_cast<int>(std::clamp<long>(left, 0, wait_ms));
    }
    pollfd p[2];
    int np = 0;
    if (!eof) p[np++] = {out[0], POLLIN, 0};
    if (!exited && pidfd >= 0) p[np++] = {pidfd, POLLIN, 0};
    if (!exited && pidfd < 0) wait_ms = std::min(wait_ms, 10);
    if (poll(p, static_cast<nfds_t>(np), wait_ms) <= 0) continue;
    if (!eof && (p[0].revents & (POLLIN | POLLHUP | POLLERR))) {
      ssize_t r = read(out[0], buf, sizeof buf);
      if (r > 0) {
        // Keep draining past the limit, so the command never blocks on a full pipe.
        res.output_bytes += static_cast<size_t>(r);
        size_t room = o.max_output > res.output.size() ? o.max_output - res.output.size() : 0;
        res.output.append(buf, std::min(room, static_cast<size_t>(r)));
      } else if (r == 0 || (errno != EINTR && errno != EAGAIN)) {
        eof = true;
      }
    }
  }
  close(out[0]);
  if (pidfd >= 0) close(pidfd);
  kill(-pid, SIGKILL);  // nothing of the group outlives the call
  int st = 0;
  while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
  }
  res.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  // What the child said on fd 3: a failed step (namespaces, or exec of bwrap),
  // or bwrap's JSON status, which has "exit-code" only when the command ran.
  std::string said;
  fcntl(errp[0], F_SETFL, O_NONBLOCK);
  for (ssize_t r; (r = read(errp[0], buf, sizeof buf)) > 0;) said.append(buf, static_cast<size_t>(r));
  close(errp[0]);
  if (said.size() >= sizeof(ChildError) && said.compare(0, sizeof kTag, kTag, sizeof kTag) == 0) {
    ChildError e{};
    std::memcpy(&e, said.data(), sizeof e);
    res.error = "sandbox: " + std::string(e.step, strnlen(e.step, sizeof e.step)) + ": " + std::strerror(e.err);
    return res;
  }
  if (method == "bubblewrap" && !killed && said.find("\"exit-code\"") == std::string::npos) {
    res.error = "sandbox: bwrap could not set up the sandbox: " + first_lines(res.output, 2000);
    res.output.clear();
    return res;
  }
  res.started = true;
  if (WIFEXITED(st)) {
    res.exit_code = WEXITSTATUS(st);
  } else if (WIFSIGNALED(st)) {
    res.signal = WTERMSIG(st);
  }
  return res;
}

// Whether a method works here: one trivial command, run once per process.
struct Probe {
  std::once_flag once;
  bool works = false;
  std::string why;
  std::string bwrap;  // the program's path
};

Probe& probe(const std::string& method) {
  static Probe bw, ns;
  Probe& p = method == "bubblewrap" ? bw : ns;
  std::call_once(p.once, [&] {
    if (method == "bubblewrap") {
      p.bwrap = find_program("bwrap").string();
      if (p.bwrap.empty()) {
        p.why = "bwrap is not on PATH (install bubblewrap)";
        return;
      }
    }
    std::error_code ec;
    fs::path dir;
    try {
      dir = make_temp_dir(fs::temp_directory_path(ec), "anvil-sandbox-probe");
    } catch (const std::exception& e) {
      p.why = e.what();
      return;
    }
    SandboxOptions o;
    o.workdir = dir;
    o.timeout = std::chrono::seconds(30);
    SandboxResult r = run_with(method, p.bwrap, "echo ok > probe && cat probe", o);
    remove_tree(dir);
    p.works = r.started && r.exit_code == 0 && r.output == "ok\n";
    if (!p.works) {
      std::string err = r.error.rfind("sandbox: ", 0) == 0 ? r.error.substr(9) : r.error;
      p.why = !err.empty() ? err
                           : "a trivial command failed (exit code " + std::to_string(r.exit_code) +
                                 "): " + first_lines(r.output, 500);
    }
  });
  return p;
}

}  // namespace

std::string sandbox_method(std::string* why) {
  const char* forced_c = std::getenv("ANVIL_SANDBOX");
  std::string forced = forced_c ? forced_c : "";
  if (forced == "bubblewrap" || forced == "namespaces") {
    Probe& p = probe(forced);
    if (p.works) return forced;
    if (why) *why = "ANVIL_SANDBOX=" + forced + ", but it does not work here: " + p.why;
    return "";
  }
  if (!forced.empty()) {
    if (why) *why = "ANVIL_SANDBOX=" + forced + " is not a method (bubblewrap or namespaces)";
    return "";
  }
  if (probe("bubblewrap").works) return "bubblewrap";
  if (probe("namespaces").works) return "namespaces";
  if (why)
    *why = "no way to confine commands here: bubblewrap: " + probe("bubblewrap").why +
           "; namespaces: " + probe("namespaces").why;
  return "";
}

SandboxResult run_sandboxed(const std::string& command, const SandboxOptions& opts) {
  std::string why;
  std::string method = sandbox_method(&why);
  if (method.empty()) {
    SandboxResult res;
    res.error = "sandbox: " + why;
    return res;
  }
  return run_with(method, probe(method).bwrap, command, opts);
}

}  // namespace anvil
