#include "app/free_port.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <random>
#include <stdexcept>
#include <vector>

namespace pulse::app {
namespace {

/// Binds a TCP socket to host:port (port 0 = the kernel picks); returns the fd and the bound port, or
/// fd -1 when the port is taken.
std::pair<int, int> bind_port(const in_addr& host, int port) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr = host;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) throw std::runtime_error("free_tcp_port: socket: " + std::string(std::strerror(errno)));
  socklen_t len = sizeof(addr);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    ::close(fd);
    return {-1, 0};
  }
  return {fd, ntohs(addr.sin_port)};
}

/// True when first..first+count-1 are all bindable at once (all closed again before it returns).
bool run_free(const in_addr& host, int first, int count) {
  std::vector<int> fds;
  bool ok = true;
  for (int i = 0; i < count && ok; ++i) {
    const int fd = bind_port(host, first + i).first;
    ok = fd >= 0;
    if (ok) fds.push_back(fd);
  }
  for (int fd : fds) ::close(fd);
  return ok;
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
      if (run_free(addr, first, count)) return first;
    }
  }
  // No room below the range (or all taken): the kernel's pick, with its neighbours checked.
  for (int attempt = 0; attempt < 256; ++attempt) {
    const auto [fd, first] = bind_port(addr, 0);
    if (fd < 0) break;
    ::close(fd);
    if (first + count - 1 <= 65535 && run_free(addr, first, count)) return first;
  }
  throw std::runtime_error("free_tcp_port: found no " + std::to_string(count) +
                           " free consecutive port(s) on " + host + ": " + std::strerror(errno));
}

}  // namespace pulse::app
