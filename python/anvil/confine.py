"""Confinement of the candidate's process (docs/anti-hacking.md, "Confinement").

The judge forks a supervisor (still trusted: it never runs candidate code), which calls enter():

  - new mount, PID, IPC and UTS namespaces (and a user namespace when anvil is not root), so that
    the candidate's process is PID 1 of its own PID namespace: whatever it starts dies with it,
    and it sees no other process;
  - a new root, a small tmpfs, holding only the toolchain's system directories
    (share/sandbox.json), the paths the caller names (the candidate, the task, Python and anvil's
    modules, anvil's runtime libraries), all bound read-only; private, size-limited tmpfs on /tmp
    and /dev/shm; a minimal /dev (and the GPU's nodes); a fresh /proc with the kernel's knobs
    read-only or masked; /sys read-only. The rest of the host (the anvil cache and its warm-zygote
    socket, other evaluations, home directories, /run's sockets) does not exist in there;
  - the supervisor forks the candidate's process into the new PID namespace and waits for it; it
    dies with the judge, and the candidate's process dies with it (PR_SET_PDEATHSIG), and the judge
    itself is PID 1 of a namespace anvil made, so nothing outlives the evaluation;
  - the candidate's process then drops to an unprivileged user (when anvil is root, a uid of its
    own drawn from share/sandbox.json's candidate_uid range; the caller's own uid, mapped,
    otherwise), keeps no capabilities, sets
    no_new_privs, may run at most share/sandbox.json's `processes` processes and threads
    (RLIMIT_NPROC: a fork bomb gets EAGAIN), and gets an environment of allow-listed variables
    only;
  - last, the system-call filter of anvil's jails (src/anvil/util/syscall_filter.h, the program
    anvil built and sent in the request): no new namespaces (a user namespace would give the
    candidate every capability in it), mounts, ptrace, bpf, keyrings, io_uring or kernel modules.

Every step that fails raises ConfinementError naming it: the judge then refuses to evaluate, it
never runs candidate code unconfined. enter() returns only in the candidate's process.
"""
import copy
import ctypes
import fnmatch
import functools
import json
import os
import random
import resource
import signal

from anvil import share

CLONE_NEWNS = 0x00020000
CLONE_NEWUTS = 0x04000000
CLONE_NEWIPC = 0x08000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000
MS_RDONLY = 1
MS_NOSUID = 2
MS_NODEV = 4
MS_NOEXEC = 8
MS_BIND = 0x1000
MS_REC = 0x4000
MS_PRIVATE = 1 << 18
MNT_DETACH = 2
AT_FDCWD = -100
AT_RECURSIVE = 0x8000
MOUNT_ATTR_RDONLY = 0x1
MOUNT_ATTR_NOSUID = 0x2
PR_SET_PDEATHSIG = 1
PR_SET_DUMPABLE = 4
PR_CAPBSET_DROP = 24
PR_SET_CHILD_SUBREAPER = 36
PR_SET_SECCOMP = 22
SECCOMP_MODE_FILTER = 2
PR_SET_NO_NEW_PRIVS = 38
LAST_CAP = 63
SYSCALLS = {"x86_64": {"pivot_root": 155, "mount_setattr": 442, "capset": 126},
            "aarch64": {"pivot_root": 41, "mount_setattr": 442, "capset": 91}}
ENV_KEEP = ("PATH", "LANG", "LC_ALL", "CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "CUDA_MODULE_LOADING",
            "LD_LIBRARY_PATH", "PYTHONUNBUFFERED", "PYTHONDONTWRITEBYTECODE", "OMP_NUM_THREADS",
            "NVIDIA_VISIBLE_DEVICES", "NVIDIA_DRIVER_CAPABILITIES", "NCCL_NVLS_ENABLE",
            "TORCH_SYMM_MEM_DISABLE_MULTICAST", "NVSHMEM_DISABLE_NVLS")
_NEVER_KEPT = ("/", "/tmp", "/dev/shm", "/run")
NEW_ROOT = "/tmp"  # the mount point the new root's tmpfs covers until pivot_root moves it to /


class ConfinementError(Exception):
    """A step of the confinement failed: the candidate must not run."""


class _MountAttr(ctypes.Structure):
    _fields_ = [("attr_set", ctypes.c_uint64), ("attr_clr", ctypes.c_uint64),
                ("propagation", ctypes.c_uint64), ("userns_fd", ctypes.c_uint64)]


def settings():
    """share/sandbox.json, the confinement's constants shared with the C++ jail: under $ANVIL_HOME
    (anvil sets it for the runner), else beside this package in anvil's tree. Read once (a process
    that has entered its new root, where share/ is not, keeps what it read before)."""
    return copy.deepcopy(_settings())


@functools.lru_cache(maxsize=None)
def _settings():
    path = share.path("sandbox.json")
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError) as e:
        raise ConfinementError("cannot read the confinement's settings %s: %s" % (path, e))


def _libc():
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    return libc


def _check(rc, what):
    if rc != 0:
        err = ctypes.get_errno()
        raise ConfinementError("%s: %s" % (what, os.strerror(err) if err else "failed"))


def _syscall(name):
    table = SYSCALLS.get(os.uname().machine)
    if table is None:
        raise ConfinementError("no system call table for %s" % os.uname().machine)
    return table[name]


def non_dumpable():
    """Make this process non-dumpable (no ptrace, no /proc/PID/mem by the same user); returns an
    error string or None."""
    if _libc().prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0:
        return "prctl(PR_SET_DUMPABLE): %s" % os.strerror(ctypes.get_errno())
    return None


def subreaper():
    """Make this process the reaper of its orphaned descendants; returns an error string or None."""
    if _libc().prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        return "prctl(PR_SET_CHILD_SUBREAPER): %s" % os.strerror(ctypes.get_errno())
    return None


def die_with_parent():
    _libc().prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


# ---------------------------------------------------------------------------------------------
# The new root

class _Root:
    """Draws the new root under NEW_ROOT (set-up steps raise ConfinementError)."""

    def __init__(self, libc, conf):
        self.libc = libc
        self.conf = conf
        self.bound = []  # host paths already visible (a path under one needs no bind of its own)

    def path(self, p):
        return NEW_ROOT + p

    def mount(self, source, target, fstype, flags, data, what):
        _check(self.libc.mount(source, target.encode(), fstype, flags, data), what)

    def setattr(self, target, attr_set, recursive=True):
        attr = _MountAttr(attr_set, 0, 0, 0)
        rc = self.libc.syscall(_syscall("mount_setattr"), AT_FDCWD, target.encode(),
                               AT_RECURSIVE if recursive else 0, ctypes.byref(attr),
                               ctypes.c_size_t(ctypes.sizeof(attr)))
        _check(rc, "mount_setattr(%s, read-only)" % target)

    def tmpfs(self, target, size, mode):
        os.makedirs(target, exist_ok=True)
        self.mount(b"tmpfs", target, b"tmpfs", MS_NOSUID | MS_NODEV,
                   ("mode=%o,size=%d" % (mode, size)).encode(), "mount(tmpfs on %s)" % target)

    def covered(self, p):
        return any(p == b or p.startswith(b.rstrip("/") + "/") for b in self.bound)

    def bind(self, fd, host_path, read_only=True):
        """Bind what fd opens (O_PATH) at host_path inside the new root."""
        target = self.path(host_path)
        if os.path.isdir("/proc/self/fd/%d" % fd):
            os.makedirs(target, exist_ok=True)
        else:
            os.makedirs(os.path.dirname(target), exist_ok=True)
            if not os.path.exists(target):
                open(target, "a").close()
        self.mount(("/proc/self/fd/%d" % fd).encode(), target, None, MS_BIND | MS_REC, None,
                   "mount(bind %s)" % host_path)
        if read_only:
            self.setattr(target, MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID)
        self.bound.append(host_path)


def _open_path(p):
    return os.open(p, os.O_PATH | os.O_CLOEXEC)


def _matching(directory, patterns):
    """Entries of `directory` named by `patterns` (a name ending in * is a prefix)."""
    try:
        entries = sorted(os.listdir(directory))
    except OSError:
        return []
    return [e for e in entries if any(fnmatch.fnmatchcase(e, p) for p in patterns)]


def _sources(conf, keep_visible, gpu):
    """[(kind, host path, fd or link target)] opened before anything is covered: the system
    directories (a symlink among them is kept as a link) and the listed /etc entries, the caller's
    paths, the /dev nodes."""
    out = []
    for d in conf["system_dirs"]:
        if os.path.islink(d):
            out.append(("link", d, os.readlink(d)))
        elif os.path.isdir(d):
            out.append(("dir", d, _open_path(d)))
    for name in _matching("/etc", conf["etc"]):
        out.append(("dir", "/etc/" + name, _open_path("/etc/" + name)))
    for p in sorted({os.path.abspath(p) for p in keep_visible if p}):
        if p in _NEVER_KEPT or any(p == d or p.startswith(d + "/") for d in ("/proc", "/sys")) or (
                p.startswith("/dev/") and not p.startswith("/dev/shm/")):
            continue  # the new root's own mounts (the private /tmp is not the host's)
        if os.path.exists(p):
            out.append(("keep", p, _open_path(p)))
    names = list(conf["dev"]) + (_matching("/dev", conf["gpu_dev"]) if gpu else [])
    for n in names:
        p = "/dev/" + n
        if os.path.exists(p):
            out.append(("dev", p, _open_path(p)))
    return out


def _draw_root(libc, conf, sources):
    """The new root's tree: system directories, the private tmpfs mounts and /dev first, then the
    caller's paths on top (one under /tmp stays visible, read-only, in the private /tmp)."""
    root = _Root(libc, conf)
    root.tmpfs(NEW_ROOT, 16 << 20, 0o755)
    for kind, p, ref in sources:
        if kind == "link":
            os.symlink(ref, root.path(p))
        elif kind == "dir":
            root.bind(ref, p)
    root.tmpfs(root.path("/tmp"), conf["tmp_bytes"], 0o1777)
    dev = root.path("/dev")
    root.tmpfs(dev, 1 << 20, 0o755)
    for kind, p, ref in sources:
        if kind == "dev":
            root.bind(ref, p, read_only=False)
    for name, target in (("fd", "/proc/self/fd"), ("stdin", "/proc/self/fd/0"), ("stdout", "/proc/self/fd/1"),
                         ("stderr", "/proc/self/fd/2")):
        os.symlink(target, os.path.join(dev, name))
    root.tmpfs(root.path("/dev/shm"), conf["shm_bytes"], 0o1777)
    for kind, p, ref in sources:
        if kind == "keep" and not root.covered(p):
            root.bind(ref, p)
    os.makedirs(root.path("/proc"), exist_ok=True)
    os.makedirs(root.path("/.old"), exist_ok=True)
    return root


def _finish_root(libc, conf):
    """In the new PID namespace: its own /proc (knobs read-only, some files masked), then the new
    root becomes / (the host's tree detached) and / itself read-only."""
    root = _Root(libc, conf)
    proc = root.path("/proc")
    root.mount(b"proc", proc, b"proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, None, "mount(proc)")
    for name in conf["proc_read_only"]:
        p = os.path.join(proc, name)
        if os.path.exists(p):
            root.mount(p.encode(), p, None, MS_BIND | MS_REC, None, "mount(bind /proc/%s)" % name)
            root.setattr(p, MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID)
    null = root.path("/dev/null")
    for name in conf["proc_masked"]:
        p = os.path.join(proc, name)
        if os.path.isfile(p):
            root.mount(null.encode(), p, None, MS_BIND, None, "mount(mask /proc/%s)" % name)
    rc = libc.syscall(_syscall("pivot_root"), NEW_ROOT.encode(), root.path("/.old").encode())
    _check(rc, "pivot_root")
    os.chdir("/")
    _check(libc.umount2(b"/.old", MNT_DETACH), "umount2(old root)")
    os.rmdir("/.old")
    root.setattr("/", MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID, recursive=False)


# ---------------------------------------------------------------------------------------------
# Privileges and environment

def _drop_privileges(libc, conf, was_root):
    for cap in range(LAST_CAP + 1):
        libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0)  # EINVAL past the last capability: fine
    if was_root:
        uid, gid = candidate_uid(conf), int(conf["gid"])
        try:
            os.setgroups([])
            os.setresgid(gid, gid, gid)
            os.setresuid(uid, uid, uid)  # from root to another uid: every capability goes
        except OSError as e:
            raise ConfinementError("dropping to uid %d: %s" % (uid, e.strerror))
    else:
        header = (ctypes.c_uint32 * 2)(0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3, this process
        data = (ctypes.c_uint32 * 6)()
        _check(libc.syscall(_syscall("capset"), ctypes.byref(header), ctypes.byref(data)), "capset(none)")
    _check(libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "prctl(PR_SET_NO_NEW_PRIVS)")
    with open("/proc/self/status") as f:
        caps = [line.split()[1] for line in f if line.startswith(("CapEff", "CapPrm"))]
    if any(int(c, 16) for c in caps):
        raise ConfinementError("capabilities are left after dropping them: %s" % caps)


def candidate_uid(conf):
    """The uid of the candidate's process when anvil is root: one drawn at random from
    share/sandbox.json's [candidate_uid_base, + candidate_uid_span), not the jails' shared uid, so
    that RLIMIT_NPROC (counted per uid) counts this evaluation's processes alone: concurrent
    evaluations neither share a budget nor can one's fork bomb starve another's threads."""
    base, span = int(conf["candidate_uid_base"]), int(conf["candidate_uid_span"])
    return base + random.SystemRandom().randrange(span)


def _cap_processes(conf):
    """RLIMIT_NPROC at share/sandbox.json's `processes` (threads count too): a fork bomb gets
    EAGAIN instead of the host's PIDs. Set after the privileges went: counted in this user
    namespace (this evaluation's) when anvil is not root, for this evaluation's own uid
    (candidate_uid) when it is."""
    n = int(conf.get("processes") or 0)
    if n:
        try:
            resource.setrlimit(resource.RLIMIT_NPROC, (n, n))
        except (OSError, ValueError) as e:
            raise ConfinementError("setrlimit(RLIMIT_NPROC, %d): %s" % (n, e))


def data_bytes():
    """This process's private writable memory (the kernel's VmData: what RLIMIT_DATA counts), or None."""
    try:
        with open("/proc/self/status", encoding="utf-8") as f:
            for line in f:
                if line.startswith("VmData:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def limit_data(extra_bytes):
    """RLIMIT_DATA, soft and hard, at this process's private writable memory now plus `extra_bytes`
    (an allocation beyond it fails: torch raises, the candidate's own runtime_error), so that one
    evaluation's candidate cannot hold the host's memory that its neighbours need. Without
    CAP_SYS_RESOURCE it can never be raised again. Device memory, the GPU driver's address-space
    reservations (not writable) and shared mappings are not counted; shared memory files are bounded
    by RLIMIT_FSIZE and the private /dev/shm's size. Returns what was set, for the report:
    {"rlimit_data_bytes", "extra_bytes"}; raises ConfinementError."""
    now = data_bytes()
    if now is None:
        raise ConfinementError("cannot read this process's VmData (/proc/self/status)")
    limit = int(now + extra_bytes)
    try:
        resource.setrlimit(resource.RLIMIT_DATA, (limit, limit))
    except (OSError, ValueError) as e:
        raise ConfinementError("setrlimit(RLIMIT_DATA, %d): %s" % (limit, e))
    return {"rlimit_data_bytes": limit, "extra_bytes": int(extra_bytes)}


def clean_environment(extra=None):
    """os.environ reduced to the allow-list (nothing of the caller's: no API keys, no tokens), with
    HOME and TMPDIR on the private /tmp, and USER and LOGNAME set (getpass.getuser(), which
    torch's and Triton's caches call, asks them before the password database, which has no entry
    for candidate_uid). TRITON_HOME too: Triton, imported by the zygote before this, took the
    caller's home as its default then (its JIT cache would be under /root, read-only here: every
    Triton single file a runtime_error, H100 2026-12-07); it reads the variable at each use."""
    keep = {k: os.environ[k] for k in ENV_KEEP if k in os.environ}
    keep.setdefault("PATH", "/usr/local/bin:/usr/bin:/bin")
    keep.update(HOME="/tmp", TMPDIR="/tmp", USER="sandbox", LOGNAME="sandbox", TRITON_HOME="/tmp",
                **(extra or {}))
    os.environ.clear()
    os.environ.update(keep)
    import tempfile

    tempfile.tempdir = None


# ---------------------------------------------------------------------------------------------
# The runner's own PID namespace (anvil.zygote; the C++ launcher does the same for a fresh runner)

def new_pid_namespace(network=False):
    """Make this process's next child PID 1 of a new PID namespace (with a user namespace mapping
    this uid to itself when not root), and with `network` give this process a network namespace
    of its own: when that child ends, everything below it ends. Call in a single-threaded process;
    raises ConfinementError."""
    libc = _libc()
    uid, gid = os.geteuid(), os.getegid()
    net = CLONE_NEWNET if network else 0
    if uid == 0:
        _check(libc.unshare(CLONE_NEWPID | net), "unshare(PID%s namespace)" % (", network" if net else ""))
        return
    _check(libc.unshare(CLONE_NEWUSER | CLONE_NEWPID | net),
           "unshare(user, PID%s namespaces)" % (", network" if net else ""))
    try:
        for path, text in (("/proc/self/setgroups", "deny"), ("/proc/self/uid_map", "%d %d 1" % (uid, uid)),
                           ("/proc/self/gid_map", "%d %d 1" % (gid, gid))):
            with open(path, "w") as f:
                f.write(text)
    except OSError as e:
        raise ConfinementError("user namespace maps: %s" % e)


def own_proc():
    """In PID 1 of a new PID namespace (the runner): a mount namespace of its own with a /proc of
    this namespace, so that the pids /proc lists are the ones fork() and kill() use here. Returns
    an error string or None (the runner then works with the host's /proc)."""
    libc = _libc()
    try:
        _check(libc.unshare(CLONE_NEWNS), "unshare(mount namespace)")
        _check(libc.mount(None, b"/", None, MS_REC | MS_PRIVATE, None), "mount(/, private)")
        _check(libc.mount(b"proc", b"/proc", b"proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, None), "mount(proc)")
    except ConfinementError as e:
        return str(e)
    return None


# ---------------------------------------------------------------------------------------------
# The whole of it

class _SockFprog(ctypes.Structure):  # struct sock_fprog
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def install_syscall_filter(program):
    """Installs `program` (classic BPF, 8-byte instructions: anvil's jail filter) on this process and
    everything it starts. no_new_privs must be set first. Raises ConfinementError."""
    if not program or len(program) % 8:
        raise ConfinementError("the system-call filter is not a BPF program (%d bytes)" % len(program))
    buf = ctypes.create_string_buffer(bytes(program), len(program))
    prog = _SockFprog(len(program) // 8, ctypes.cast(buf, ctypes.c_void_p))
    _check(_libc().prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(prog), 0, 0),
           "prctl(PR_SET_SECCOMP): the system-call filter")


def enter(keep_visible, gpu, pid_pipe=None, syscall_filter=None):
    """Confine as the module docstring says. Called in the supervisor (a fresh fork of the judge,
    single-threaded); returns in the candidate's process only, with {"filesystem", "user",
    "namespaces"} describing what it got. Three processes: the supervisor (in the judge's PID
    namespace) waits for the new namespace's PID 1, which waits for the candidate's process; each
    exits with its child's status and dies with its parent. pid_pipe (the judge's) is closed by
    all three. syscall_filter: the BPF program installed last (None: none). Raises
    ConfinementError."""
    die_with_parent()
    libc = _libc()
    conf = settings()
    was_root = os.geteuid() == 0
    uid, gid = os.geteuid(), os.getegid()
    flags = CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWIPC | CLONE_NEWUTS | (0 if was_root else CLONE_NEWUSER)
    _check(libc.unshare(flags), "unshare(mount, PID, IPC, UTS%s namespaces)" % ("" if was_root else ", user"))
    if not was_root:
        try:
            for path, text in (("/proc/self/setgroups", "deny"), ("/proc/self/uid_map", "%d %d 1" % (uid, uid)),
                               ("/proc/self/gid_map", "%d %d 1" % (gid, gid))):
                with open(path, "w") as f:
                    f.write(text)
        except OSError as e:
            raise ConfinementError("user namespace maps: %s" % e)
    _check(libc.mount(None, b"/", None, MS_REC | MS_PRIVATE, None), "mount(/, private)")
    sources = _sources(conf, keep_visible, gpu)  # opened in the new mount namespace: binds need that
    _draw_root(libc, conf, sources)
    for _kind, _p, ref in sources:
        if isinstance(ref, int):
            os.close(ref)
    init = os.fork()  # PID 1 of the new namespace: it only waits, so that the candidate's process
    if init:          # keeps ordinary signal semantics (PID 1 ignores its own SIGABRT, SIGTERM, ...)
        if pid_pipe is not None:
            os.close(pid_pipe)
        _wait_and_exit(init)
    die_with_parent()
    _finish_root(libc, conf)
    try:
        libc.sethostname(b"anvil", 5)
    except Exception:  # noqa: BLE001 - cosmetic
        pass
    worker = os.fork()
    if worker:
        _wait_and_exit(worker)  # when the candidate's process ends, the namespace ends with this one
    die_with_parent()
    if pid_pipe is not None:
        os.close(pid_pipe)
    _drop_privileges(libc, conf, was_root)
    _cap_processes(conf)
    if syscall_filter is not None:
        install_syscall_filter(syscall_filter)
    return {"syscall_filter": "%d instructions" % (len(syscall_filter) // 8) if syscall_filter else "none",
            "filesystem": "new root: system directories and %d named paths read-only; private /tmp (%d MiB) and "
                          "/dev/shm (%d MiB); minimal /dev; own /proc" % (
                              sum(1 for k, _p, _r in sources if k == "keep"), conf["tmp_bytes"] >> 20,
                              conf["shm_bytes"] >> 20),
            "user": "uid %d" % os.getuid(),
            "namespaces": "mount, PID (pid %d), IPC, UTS%s; network: the runner's" % (
                os.getpid(), "" if was_root else ", user")}


def _wait_and_exit(child):
    """Wait for `child` and exit with its status (a signal N as 128 + N)."""
    code = 70
    try:
        while True:
            pid, status = os.waitpid(child, 0)
            if pid == child:
                code = os.waitstatus_to_exitcode(status)
                code = 128 - code if code < 0 else code
                break
    except ChildProcessError:
        pass
    os._exit(code & 0xFF)
