#include "anvil/util/peer.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

namespace anvil {

namespace {

// An address as the kernel prints it in /proc/net/tcp{,6}: each 32-bit word of the address in
// network order, read as a native integer, "%08X"; then ":" and the port, "%04X".
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
  const std::string want_local = table_address(remote), want_remote = table_address(local);
  const char* table = local.ss_family == AF_INET ? "/proc/self/net/tcp" : "/proc/self/net/tcp6";
  std::ifstream in(table);
  if (!in) {
    *error = std::string("cannot read ") + table;
    return std::nullopt;
  }
  std::string line;
  std::getline(in, line);  // the column names
  while (std::getline(in, line)) {
    // sl local_address rem_address st tx_queue:rx_queue tr:tm->when retrnsmt uid ...
    std::istringstream f(line);
    std::string sl, la, ra, st, queues, timer, retr;
    unsigned long uid = 0;
    if (!(f >> sl >> la >> ra >> st >> queues >> timer >> retr >> uid)) continue;
    if (la == want_local && ra == want_remote) return static_cast<uid_t>(uid);
  }
  *error = std::string("the peer's socket is not in ") + table + " (it closed, or is not on this host)";
  return std::nullopt;
}

}  // namespace anvil
