#include "anvil/util/peer.h"

#include <arpa/inet.h>
#include <linux/inet_diag.h>
#include <linux/netlink.h>
#include <linux/sock_diag.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

namespace anvil {

namespace {

struct Found {
  bool answered = false;  // the lookup itself worked (found or not)
  bool found = false;
  unsigned long inode = 0;  // of the socket's file: 0 once no process holds it
  uid_t uid = 0;
  std::string error;
  // Whether the uid is its owner's. A socket no process holds any more (closed: an orphan, or kept
  // as a TIME_WAIT entry, which the kernel lists with uid 0 and the substate FIN_WAIT2 whoever made
  // it) has inode 0: its owner is unknown, never root.
  bool owner_known() const { return inode != 0; }
};

// The kernel's own lookup of the socket with this 4-tuple (sock_diag: what `ss` uses), exact and
// in constant time however many sockets the host has.
Found diag_lookup(const sockaddr_storage& peer_local, const sockaddr_storage& peer_remote) {
  Found f;
  int nl = socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_SOCK_DIAG);
  if (nl < 0) {
    f.error = std::string("sock_diag: ") + std::strerror(errno);
    return f;
  }
  struct {
    nlmsghdr nlh;
    inet_diag_req_v2 r;
  } req{};
  req.nlh.nlmsg_len = sizeof req;
  req.nlh.nlmsg_type = SOCK_DIAG_BY_FAMILY;
  req.nlh.nlmsg_flags = NLM_F_REQUEST;
  req.r.sdiag_family = static_cast<uint8_t>(peer_local.ss_family);
  req.r.sdiag_protocol = IPPROTO_TCP;
  req.r.idiag_states = ~0u;
  req.r.id.idiag_cookie[0] = req.r.id.idiag_cookie[1] = INET_DIAG_NOCOOKIE;
  if (peer_local.ss_family == AF_INET) {
    const auto& l = reinterpret_cast<const sockaddr_in&>(peer_local);
    const auto& r = reinterpret_cast<const sockaddr_in&>(peer_remote);
    req.r.id.idiag_sport = l.sin_port;
    req.r.id.idiag_dport = r.sin_port;
    std::memcpy(req.r.id.idiag_src, &l.sin_addr, 4);
    std::memcpy(req.r.id.idiag_dst, &r.sin_addr, 4);
  } else {
    const auto& l = reinterpret_cast<const sockaddr_in6&>(peer_local);
    const auto& r = reinterpret_cast<const sockaddr_in6&>(peer_remote);
    req.r.id.idiag_sport = l.sin6_port;
    req.r.id.idiag_dport = r.sin6_port;
    std::memcpy(req.r.id.idiag_src, &l.sin6_addr, 16);
    std::memcpy(req.r.id.idiag_dst, &r.sin6_addr, 16);
  }
  sockaddr_nl kernel{};
  kernel.nl_family = AF_NETLINK;
  timeval tv{1, 0};
  setsockopt(nl, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  if (sendto(nl, &req, sizeof req, 0, reinterpret_cast<sockaddr*>(&kernel), sizeof kernel) != sizeof req) {
    f.error = std::string("sock_diag: send: ") + std::strerror(errno);
    close(nl);
    return f;
  }
  alignas(nlmsghdr) char buf[8192];
  ssize_t n = recv(nl, buf, sizeof buf, 0);
  int recv_errno = errno;
  close(nl);
  if (n < 0) {
    f.error = std::string("sock_diag: recv: ") + std::strerror(recv_errno);
    return f;
  }
  for (auto* h = reinterpret_cast<nlmsghdr*>(buf); NLMSG_OK(h, static_cast<unsigned>(n)); h = NLMSG_NEXT(h, n)) {
    if (h->nlmsg_type == NLMSG_ERROR) {
      int err = -reinterpret_cast<nlmsgerr*>(NLMSG_DATA(h))->error;
      if (err == ENOENT) {  // no such socket: the peer is gone
        f.answered = true;
        return f;
      }
      f.error = std::string("sock_diag: ") + std::strerror(err);
      return f;
    }
    if (h->nlmsg_type == SOCK_DIAG_BY_FAMILY) {
      const auto* m = reinterpret_cast<const inet_diag_msg*>(NLMSG_DATA(h));
      f.answered = f.found = true;
      f.inode = m->idiag_inode;
      f.uid = m->idiag_uid;
      return f;
    }
  }
  f.error = "sock_diag: no answer";
  return f;
}

// An address as /proc/net/tcp{,6} prints it: each 32-bit word in network order read as a native
// integer, "%08X"; then ":" and the port, "%04X".
std::string table_address(const sockaddr_storage& a) {
  char buf[64];
  std::string out;
  if (a.ss_family == AF_INET) {
    const auto& in = reinterpret_cast<const sockaddr_in&>(a);
    std::snprintf(buf, sizeof buf, "%08X:%04X", static_cast<unsigned>(in.sin_addr.s_addr), ntohs(in.sin_port));
    return buf;
  }
  const auto& in6 = reinterpret_cast<const sockaddr_in6&>(a);
  for (int i = 0; i < 4; ++i) {
    uint32_t w = 0;
    std::memcpy(&w, in6.sin6_addr.s6_addr + 4 * i, 4);
    std::snprintf(buf, sizeof buf, "%08X", static_cast<unsigned>(w));
    out += buf;
  }
  std::snprintf(buf, sizeof buf, ":%04X", ntohs(in6.sin6_port));
  return out + buf;
}

// Where sock_diag is not there (a kernel without inet_diag): the same lookup in the kernel's
// listing, line by line.
Found table_lookup(const sockaddr_storage& peer_local, const sockaddr_storage& peer_remote) {
  Found f;
  const std::string want_local = table_address(peer_local), want_remote = table_address(peer_remote);
  const char* table = peer_local.ss_family == AF_INET ? "/proc/self/net/tcp" : "/proc/self/net/tcp6";
  std::ifstream in(table);
  if (!in) {
    f.error = std::string("cannot read ") + table;
    return f;
  }
  f.answered = true;
  std::string line;
  std::getline(in, line);  // the column names
  while (std::getline(in, line)) {
    // sl local_address rem_address st tx_queue:rx_queue tr:tm->when retrnsmt uid timeout inode ...
    std::istringstream s(line);
    std::string sl, la, ra, st, queues, timer, retr;
    unsigned long uid = 0, timeout = 0, inode = 0;
    if (!(s >> sl >> la >> ra >> st >> queues >> timer >> retr >> uid >> timeout >> inode)) continue;
    if (la == want_local && ra == want_remote) {
      f.found = true;
      f.inode = inode;
      f.uid = static_cast<uid_t>(uid);
      return f;
    }
  }
  return f;
}

}  // namespace

std::optional<uid_t> loopback_peer_uid(int fd, std::string* error) {
  sockaddr_storage local{}, remote{};
  socklen_t ll = sizeof local, rl = sizeof remote;
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&local), &ll) != 0 ||
      getpeername(fd, reinterpret_cast<sockaddr*>(&remote), &rl) != 0) {
    *error = std::string("not a connected socket: ") + std::strerror(errno);
    return std::nullopt;
  }
  if (local.ss_family != remote.ss_family || (local.ss_family != AF_INET && local.ss_family != AF_INET6)) {
    *error = "not a TCP/IP connection";
    return std::nullopt;
  }
  // The peer's socket: its local address is our remote one and the other way round.
  Found f = diag_lookup(remote, local);
  if (!f.answered) {
    std::string why = f.error;
    f = table_lookup(remote, local);
    if (!f.answered) {
      *error = why + "; " + f.error;
      return std::nullopt;
    }
  }
  if (!f.found) {
    *error = "the peer's socket is gone (closed, or not on this host)";
    return std::nullopt;
  }
  if (!f.owner_known()) {
    *error = "the peer closed its socket (a closed socket's owner is not kept)";
    return std::nullopt;
  }
  return f.uid;
}

}  // namespace anvil
