#include "anvil/util/syscall_filter.h"

#include <linux/seccomp.h>
#include <sched.h>
#include <seccomp.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>

namespace anvil {

namespace {

constexpr const char* kRefused[] = {
    "unshare", "setns",
    "mount", "umount2", "pivot_root", "open_tree", "move_mount", "fsopen", "fsconfig", "fsmount", "fspick",
    "mount_setattr",
    "ptrace", "process_vm_readv", "process_vm_writev",
    "bpf", "init_module", "finit_module", "delete_module", "kexec_load", "kexec_file_load",
    "keyctl", "add_key", "request_key", "open_by_handle_at", "userfaultfd",
    "io_uring_setup", "io_uring_enter", "io_uring_register",
    "swapon", "swapoff", "reboot", "acct", "syslog"};

constexpr unsigned long kNewNamespaces[] = {CLONE_NEWUSER, CLONE_NEWNS, CLONE_NEWPID, CLONE_NEWNET,
                                            CLONE_NEWIPC,  CLONE_NEWUTS, CLONE_NEWCGROUP};

SyscallFilter build() {
  SyscallFilter f;
  std::unique_ptr<void, void (*)(scmp_filter_ctx)> ctx(seccomp_init(SCMP_ACT_ALLOW), seccomp_release);
  if (!ctx) {
    f.error = "seccomp_init failed";
    return f;
  }
  // One rule: `name` answers errno `err` (when its first argument has every bit of `flag`, if one
  // is given); a call this architecture (or this libseccomp) does not have is skipped.
  auto rule = [&](const char* name, int err, unsigned long flag = 0) -> bool {
    int nr = seccomp_syscall_resolve_name(name);
    if (nr == __NR_SCMP_ERROR) return true;
    int rc = flag ? seccomp_rule_add(ctx.get(), SCMP_ACT_ERRNO(err), nr, 1, SCMP_A0(SCMP_CMP_MASKED_EQ, flag, flag))
                  : seccomp_rule_add(ctx.get(), SCMP_ACT_ERRNO(err), nr, 0);
    if (rc != 0) f.error = std::string("seccomp_rule_add(") + name + "): " + std::strerror(-rc);
    return rc == 0;
  };
  for (const char* name : kRefused) {
    if (!rule(name, EPERM)) return f;
  }
  for (unsigned long flag : kNewNamespaces) {  // clone's first argument is its flags on x86-64 and arm64
    if (!rule("clone", EPERM, flag)) return f;
  }
  if (!rule("clone3", ENOSYS)) return f;  // its flags lie behind a pointer: ENOSYS, and libc falls back to clone
  // The program, out of libseccomp through a memory file.
  int fd = memfd_create("anvil-seccomp", MFD_CLOEXEC);
  if (fd < 0) {
    f.error = std::string("memfd_create: ") + std::strerror(errno);
    return f;
  }
  int rc = seccomp_export_bpf(ctx.get(), fd);
  off_t size = lseek(fd, 0, SEEK_END);
  if (rc != 0 || size <= 0 || size % sizeof(sock_filter) != 0) {
    f.error = rc != 0 ? std::string("seccomp_export_bpf: ") + std::strerror(-rc) : "seccomp_export_bpf wrote no program";
    close(fd);
    return f;
  }
  std::vector<sock_filter> prog(static_cast<size_t>(size) / sizeof(sock_filter));
  ssize_t got = pread(fd, prog.data(), static_cast<size_t>(size), 0);
  close(fd);
  if (got != size) {
    f.error = "cannot read the exported seccomp program back";
    return f;
  }
  f.program = std::move(prog);
  return f;
}

}  // namespace

const SyscallFilter& jail_syscall_filter() {
  static const SyscallFilter f = build();
  return f;
}

bool install_syscall_filter(const SyscallFilter& f) {
  if (!f.ok()) {
    errno = EINVAL;
    return false;
  }
  sock_fprog prog{static_cast<unsigned short>(f.program.size()), const_cast<sock_filter*>(f.program.data())};
  return prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog, 0, 0) == 0;
}

}  // namespace anvil
