// peer.h: who is at the other end of a loopback TCP connection.
//
// The kernel lists every TCP socket of this network namespace with its owner's uid
// (/proc/self/net/tcp and tcp6, the table `ss` and identd read). The peer of an accepted loopback
// connection is the socket whose local address is our remote one and whose remote address is our
// local one; its uid is the user who connected. Only meaningful on loopback: a remote peer's socket
// lives on another host.
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>

namespace anvil {

// The uid owning the other end of the connected loopback socket `fd`; nullopt and *error when it
// cannot be told (not a TCP socket, the peer already gone, the table unreadable).
std::optional<uid_t> loopback_peer_uid(int fd, std::string* error);

}  // namespace anvil
