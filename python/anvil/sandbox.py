"""Confinement of the candidate's process (docs/anti-hacking.md, "Two processes").

non_dumpable(): the judge (and the zygote) makes itself non-dumpable, so a process of the same user without
CAP_SYS_PTRACE can neither ptrace it nor read or write its memory through /proc/PID/mem.

confine(): the candidate's process, right after the fork and before any candidate code, gets
  - its own mount namespace in which every mount but /dev and /proc is read-only (mount_setattr,
    recursively), with
    fresh private tmpfs mounts on /tmp and /dev/shm (what it must still read there, bound back
    read-only): it cannot change anvil, its caches, torch, or leave anything behind for a later
    evaluation;
  - no capabilities (bounding set dropped, then capset to none) and no_new_privs, so it cannot
    undo the mounts, ptrace the judge or regain privileges through a setuid binary.
When not root, a user namespace (uid mapped to itself) provides the rights to do so. Every step
that fails is reported by name; confine() returns what it achieved, never raises.
"""
import ctypes
import os

CLONE_NEWNS = 0x00020000
CLONE_NEWUSER = 0x10000000
MS_BIND = 0x1000
MS_REC = 0x4000
MS_PRIVATE = 1 << 18
MS_NOSUID = 2
MS_NODEV = 4
AT_FDCWD = -100
AT_RECURSIVE = 0x8000
MOUNT_ATTR_RDONLY = 0x1
SYS_MOUNT_SETATTR = 442  # the same number on x86_64 and aarch64
PR_SET_DUMPABLE = 4
PR_SET_CHILD_SUBREAPER = 36
PR_SET_NO_NEW_PRIVS = 38
PR_CAPBSET_DROP = 24
SYS_CAPSET = {"x86_64": 126, "aarch64": 91}
LAST_CAP = 63


class _MountAttr(ctypes.Structure):
    _fields_ = [("attr_set", ctypes.c_uint64), ("attr_clr", ctypes.c_uint64),
                ("propagation", ctypes.c_uint64), ("userns_fd", ctypes.c_uint64)]


def _libc():
    return ctypes.CDLL(None, use_errno=True)


def _fail(what):
    err = ctypes.get_errno()
    return "%s: %s" % (what, os.strerror(err) if err else "failed")


def non_dumpable():
    """Make this process non-dumpable; returns an error string or None."""
    libc = _libc()
    if libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0:
        return _fail("prctl(PR_SET_DUMPABLE)")
    return None


def subreaper():
    """Make this process the reaper of its orphaned descendants (a candidate's double-forked
    daemon lands here, where the judge sees and kills it); returns an error string or None."""
    if _libc().prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        return _fail("prctl(PR_SET_CHILD_SUBREAPER)")
    return None


def _write(path, text):
    with open(path, "w") as f:
        f.write(text)


def _under(path, top):
    path = os.path.realpath(path)
    return path == top or path.startswith(top.rstrip("/") + "/")


def _setattr(libc, path, attr):
    syscall = libc.syscall
    syscall.restype = ctypes.c_long
    return syscall(SYS_MOUNT_SETATTR, AT_FDCWD, path.encode() if isinstance(path, str) else path, AT_RECURSIVE,
                   ctypes.byref(attr), ctypes.c_size_t(ctypes.sizeof(attr)))


def _private_tmpfs(libc, target, keep_visible, errors):
    """Mount a fresh tmpfs on target, then bind every path of keep_visible that lies under it
    back in place, read-only (a checkout, venv or candidate in /tmp stays visible, nothing else
    of the old /tmp does). Returns whether the tmpfs was mounted."""
    roots = []
    for p in sorted({os.path.realpath(p) for p in keep_visible if _under(p, target) and os.path.exists(p)}):
        if not any(_under(p, r) for r in roots):
            roots.append(p)
    held = []
    for p in roots:
        try:
            held.append((p, os.open(p, os.O_PATH | os.O_CLOEXEC)))
        except OSError as e:
            errors.append("open(%s): %s" % (p, e.strerror))
    try:
        if libc.mount(b"tmpfs", target.encode(), b"tmpfs", MS_NOSUID | MS_NODEV, b"mode=1777") != 0:
            errors.append(_fail("mount(tmpfs on %s)" % target))
            return False
        readonly = _MountAttr(MOUNT_ATTR_RDONLY, 0, 0, 0)
        for p, fd in held:
            source = "/proc/self/fd/%d" % fd
            try:
                if os.path.isdir(source):
                    os.makedirs(p, exist_ok=True)
                else:
                    os.makedirs(os.path.dirname(p), exist_ok=True)
                    open(p, "a").close()
            except OSError as e:
                errors.append("mount point %s: %s" % (p, e.strerror))
                continue
            if libc.mount(source.encode(), p.encode(), None, MS_BIND | MS_REC, None) != 0:
                errors.append(_fail("mount(bind %s)" % p))
            elif _setattr(libc, p, readonly) != 0:
                errors.append(_fail("mount_setattr(%s, read-only)" % p))
        return True
    finally:
        for _p, fd in held:
            os.close(fd)


def confine(keep_visible=()):
    """Confine this process (see the module docstring). Paths of `keep_visible` (the candidate,
    the task, where Python and anvil load from) under /tmp or /dev/shm are bound back, read-only,
    into the private tmpfs mounted there. TMPDIR points at the first private tmpfs. Returns
    {"filesystem": str, "capabilities": str, "errors": [str]}."""
    libc = _libc()
    errors = []
    state = {"filesystem": "not isolated", "capabilities": "kept", "errors": errors}
    uid, gid = os.geteuid(), os.getegid()
    flags = CLONE_NEWNS if uid == 0 else CLONE_NEWNS | CLONE_NEWUSER
    if libc.unshare(flags) != 0:
        errors.append(_fail("unshare(mount namespace)"))
    else:
        ok = True
        if uid != 0:
            try:
                _write("/proc/self/setgroups", "deny")
                _write("/proc/self/uid_map", "%d %d 1" % (uid, uid))
                _write("/proc/self/gid_map", "%d %d 1" % (gid, gid))
            except OSError as e:
                errors.append("user namespace maps: %s" % e)
                ok = False
        if ok and libc.mount(None, b"/", None, MS_REC | MS_PRIVATE, None) != 0:
            errors.append(_fail("mount(/, private)"))
            ok = False
        if ok:
            attr = _MountAttr(MOUNT_ATTR_RDONLY, 0, 0, 0)
            syscall = libc.syscall
            syscall.restype = ctypes.c_long
            if syscall(SYS_MOUNT_SETATTR, AT_FDCWD, b"/", AT_RECURSIVE, ctypes.byref(attr),
                       ctypes.c_size_t(ctypes.sizeof(attr))) != 0:
                errors.append(_fail("mount_setattr(/, read-only, recursive)"))
                ok = False
        if ok:
            # Device nodes and /proc stay writable: the NVIDIA driver fails (CUDA error 304)
            # without them, and with no capabilities left they cannot be abused.
            clear = _MountAttr(0, MOUNT_ATTR_RDONLY, 0, 0)
            for path in (b"/dev", b"/proc"):
                if os.path.isdir(path) and syscall(SYS_MOUNT_SETATTR, AT_FDCWD, path, AT_RECURSIVE,
                                                   ctypes.byref(clear), ctypes.c_size_t(ctypes.sizeof(clear))) != 0:
                    errors.append(_fail("mount_setattr(%s, writable)" % path.decode()))
            private = []
            for target in ("/tmp", "/dev/shm"):
                if os.path.isdir(target) and _private_tmpfs(libc, target, keep_visible, errors):
                    private.append(target)
            state["filesystem"] = "read-only; private tmpfs on " + (", ".join(private) if private else "nothing")
            if private:
                import tempfile

                os.environ["TMPDIR"] = private[0]
                tempfile.tempdir = None  # recomputed from TMPDIR on next use
    _drop_capabilities(libc, state, errors)
    return state


def _drop_capabilities(libc, state, errors):
    for cap in range(LAST_CAP + 1):
        libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0)  # EINVAL past the last capability: fine
    if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        errors.append(_fail("prctl(PR_SET_NO_NEW_PRIVS)"))
    number = SYS_CAPSET.get(os.uname().machine)
    if number is None:
        errors.append("capset: unknown machine %s" % os.uname().machine)
        return
    header = (ctypes.c_uint32 * 2)(0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3, this process
    data = (ctypes.c_uint32 * 6)()  # effective, permitted, inheritable: all zero, two words each
    syscall = libc.syscall
    syscall.restype = ctypes.c_long
    if syscall(number, ctypes.byref(header), ctypes.byref(data)) != 0:
        errors.append(_fail("capset(none)"))
        return
    state["capabilities"] = "none"
