// peer.h: who is at the other end of a loopback TCP connection.
//
// The kernel keeps every TCP socket of this network namespace with its owner's uid. The peer of an
// accepted loopback connection is the socket whose local address is our remote one and whose
// remote address is our local one; its uid is the user who connected. It is asked for by its
// 4-tuple through sock_diag (what `ss` uses: exact, in constant time), or where that is missing
// found in /proc/self/net/tcp{,6}. A socket no process holds any more (its owner closed it: an
// orphan, or a TIME_WAIT entry, listed as uid 0 whoever made it) has no owner to tell: unknown,
// never root.
// Only meaningful on loopback: a remote peer's socket lives on another host.
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>

namespace anvil {

// The uid owning the other end of the connected loopback socket `fd`; nullopt and *error when it
// cannot be told (not a TCP socket, the peer closed or gone, the kernel's table unreadable).
std::optional<uid_t> loopback_peer_uid(int fd, std::string* error);

}  // namespace anvil
