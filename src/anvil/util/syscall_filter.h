// syscall_filter.h: the system calls a jailed program is refused (seccomp).
//
// Nothing anvil jails (a shell's commands, nvcc and the host compiler, Nsight Compute and the code
// it profiles) needs to make namespaces, mount, trace another process or load kernel code; a
// hostile program would use each to widen its jail (a user namespace gives it every capability in
// it) or to reach the kernel's less-trodden paths. Refused with EPERM:
//   namespaces   unshare, setns, and clone with any CLONE_NEW* flag (clone3, whose flags the filter
//                cannot read, answers ENOSYS: the C library falls back to clone)
//   mounts       mount, umount2, pivot_root, and the new mount API (open_tree, move_mount, fs*)
//   tracing      ptrace, process_vm_readv/writev
//   kernel code  bpf, init/finit/delete_module, kexec_load/kexec_file_load
//   and          keyctl/add_key/request_key (keyrings are not namespaced), open_by_handle_at,
//                userfaultfd, io_uring_*, swapon/swapoff, reboot, acct, syslog
// Any other architecture's calls (32-bit int 0x80 on x86-64) kill the process.
#pragma once

#include <linux/filter.h>

#include <string>
#include <vector>

namespace anvil {

struct SyscallFilter {
  std::vector<sock_filter> program;  // classic BPF, as seccomp(2) takes it
  std::string error;                 // why there is none (then program is empty)
  bool ok() const { return !program.empty(); }
};

// The jail's filter for this machine's architecture, built once (libseccomp) and then shared.
const SyscallFilter& jail_syscall_filter();

// Installs `f` on the calling thread (and what it execs); in a forked child: no allocation.
// PR_SET_NO_NEW_PRIVS must be set first. False with errno set when the kernel refuses it.
bool install_syscall_filter(const SyscallFilter& f);

}  // namespace anvil
