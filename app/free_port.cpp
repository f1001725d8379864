#include "app/free_port.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <random>
#include <stdexcept>
#include <vector>

namespace pulse::app {
namespace {

/// A TCP socket bound to host:port (port 0: the kernel picks), or fd -1 and the bind's errno.
struct Bound {
  int fd = -1;
  int port = 0;
  int err = 0;
};

Bound bind_port(const in_addr& host, int port) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr = host;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) throw std::runtime_error("free_tcp_port: socket: " + std::string(std::strerror(errno)));
  socklen_t len = sizeof(addr);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    const int err = errno;
    ::close(fd);
    return {-1, 0, err};
  }
  return {fd, ntohs(addr.sin_port), 0};
}

/// True when first..first+count-1 are all bindable at once (all closed again before it returns); false
/// when one is in use. Throws std::runtime_error naming host and port for any other bind error (an
/// address that is not this machine's, say): no other port would do better.
bool run_free(const std::string& name, const in_addr& host, int first, int count) {
  std::vector<int> fds;
  int err = 0;
  for (int i = 0; i < count && err == 0; ++i) {
    const Bound b = bind_port(host, first + i);
    err = b.err;
    if (b.fd >= 0) fds.push_back(b.fd);
    if (err != 0 && err != EADDRINUSE)
      throw std::runtime_error("free_tcp_port: cannot bind " + name + ":" + std::to_string(first + i) + ": " +
                               std::strerror(err));
  }
  for (int fd : fds) ::close(fd);
  return err == 0;
}

}  // namespace

std::pair<int, int> ephemeral_port_range() {
  std::ifstream in("/proc/sys/net/ipv4/ip_local_port_range");
  int first = 0, last = 0;
  if (in >> first >> last && first > 0 && first <= last && last <= 65535) return {first, last};
  return {32768, 60999};
}

int free_tcp_port(const std::string& host, int count) {
  if (count < 1 || count > 64)
    throw std::invalid_argument("free_tcp_port: count must be 1..64, got " + std::to_string(count));
  in_addr addr{};
  if (::inet_pton(AF_INET, host == "localhost" ? "127.0.0.1" : host.c_str(), &addr) != 1)
    throw std::invalid_argument("free_tcp_port: '" + host + "' is not an IPv4 address; give --master-port");
  std::random_device seed;
  std::mt19937 rng(seed());
  // Below the ephemeral range, above the privileged ports (1..1023): 16 K ports when the range starts at
  // Linux's default 32768, so that concurrent callers (tests run in parallel) rarely draw the same run.
  const int top = ephemeral_port_range().first - count;
  const int bottom = std::max(1024, top - 16384);
  if (top - bottom >= 1024) {
    std::uniform_int_distribution<int> pick(bottom, top);
    for (int attempt = 0; attempt < 256; ++attempt) {
      const int first = pick(rng);
      if (run_free(host, addr, first, count)) return first;
    }
  }
  // No room below the range (or all taken): the kernel's pick, with its neighbours checked.
  for (int attempt = 0; attempt < 256; ++attempt) {
    const Bound b = bind_port(addr, 0);
    if (b.fd < 0)
      throw std::runtime_error("free_tcp_port: cannot bind " + host + ":0: " + std::strerror(b.err));
    ::close(b.fd);
    if (b.port + count - 1 <= 65535 && run_free(host, addr, b.port, count)) return b.port;
  }
  throw std::runtime_error("free_tcp_port: found no " + std::to_string(count) +
                           " free consecutive port(s) on " + host);
}

}  // namespace pulse::app
