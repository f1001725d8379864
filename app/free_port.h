// Free TCP ports for servers whose port must be known before they start: the c10d master port of
// `pulse launch`, and in tests a `pulse trainer`'s control + patch ports that workers started first dial.
#pragma once
#include <string>
#include <utility>

namespace pulse::app {

/// The kernel's ephemeral port range [first, last], where connect() and bind(port 0) pick local ports:
/// read from /proc/sys/net/ipv4/ip_local_port_range; Linux's default {32768, 60999} when unreadable.
/// Thread safe.
std::pair<int, int> ephemeral_port_range();

/// The first of `count` consecutive TCP ports (1..64) that were all free on `host` (an IPv4 address or
/// "localhost") a moment ago: bound together, then closed. They are chosen at random below the ephemeral
/// range, so that no outgoing connection of any process (HTTP clients, Gloo's mesh) takes one of them
/// before the caller's server binds it; bind(port 0) would hand out a port from that range. Falls back to
/// bind(port 0) when the range leaves no room below it. Thread safe. Throws std::invalid_argument for a
/// bad count or host, std::runtime_error naming the host when it cannot bind there (not an address of
/// this machine) or found no such run of ports.
int free_tcp_port(const std::string& host, int count = 1);

}  // namespace pulse::app
