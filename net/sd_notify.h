// The service manager's readiness protocol (systemd's sd_notify(3), Type=notify), written by hand
// so that turnstiled needs no libsystemd: a state such as "READY=1" is one datagram to the
// AF_UNIX socket named by $NOTIFY_SOCKET ("@name" for the abstract namespace). Without the
// variable (not started by a service manager that asked for it) nothing is sent.
//
// turnstiled sends READY=1 once its listeners are up (and, when configured, the fence journal is
// open and the raft node has started), and STOPPING=1 when a signal starts the drain
// (docs/install.md, "The systemd unit").
//
// Thread affinity: any thread; each call opens and closes its own socket.
#pragma once

#include <string>
#include <string_view>

namespace turnstile::net {

// Sends `state` to $NOTIFY_SOCKET. False when the variable is unset or empty, or the send fails
// (the daemon runs on either way: the service manager then sees a timeout, not a crash).
bool notify_service_manager(std::string_view state);

// Sends `state` to the socket at `socket_path` (a file system path, or "@name" for the abstract
// namespace). False when the path is empty, too long, or the send fails.
bool notify_socket(const std::string& socket_path, std::string_view state);

}  // namespace turnstile::net
