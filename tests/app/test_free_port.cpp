// free_tcp_port: runs of free ports below the kernel's ephemeral range, for servers that must be dialled
// before they listen (a trainer's control + patch ports, the c10d master port).
#include <catch2/catch.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fstream>
#include <stdexcept>

#include "app/free_port.h"

namespace {

/// A socket bound to 127.0.0.1:port and listening, or -1 when that port is taken.
int listen_on(int port) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  ::inet_pton(AF_INET, "127.0.0.1", &addr.sin_addr);
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 || ::listen(fd, 1) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

}  // namespace

TEST_CASE("free_tcp_port: consecutive ports, all bindable, below the ephemeral range", "[app][ports]") {
  const auto [first, last] = pulse::app::ephemeral_port_range();
  std::ifstream proc("/proc/sys/net/ipv4/ip_local_port_range");
  int want_first = 0, want_last = 0;
  REQUIRE(proc >> want_first >> want_last);  // Linux: the file the range is read from
  CHECK(first == want_first);
  CHECK(last == want_last);
  for (int count : {1, 2, 5}) {
    INFO("count " << count);
    const int p = pulse::app::free_tcp_port("127.0.0.1", count);
    if (first - count >= 1024 + 1024) {  // room below the range: the run lies there
      CHECK(p >= 1024);
      CHECK(p + count - 1 < first);
    }
    int fds[5];
    for (int i = 0; i < count; ++i) {
      fds[i] = listen_on(p + i);
      CHECK(fds[i] >= 0);
    }
    // While they are held, another call returns a run that avoids every one of them.
    const int q = pulse::app::free_tcp_port("localhost", count);
    CHECK((q + count - 1 < p || q > p + count - 1));
    for (int i = 0; i < count; ++i)
      if (fds[i] >= 0) ::close(fds[i]);
  }
}

TEST_CASE("free_tcp_port: a bad count or host is refused naming it", "[app][ports]") {
  CHECK_THROWS_AS(pulse::app::free_tcp_port("127.0.0.1", 0), std::invalid_argument);
  CHECK_THROWS_WITH(pulse::app::free_tcp_port("127.0.0.1", 65),
                    Catch::Contains("count must be 1..64, got 65"));
  CHECK_THROWS_WITH(pulse::app::free_tcp_port("not-an-address"),
                    Catch::Contains("'not-an-address' is not an IPv4 address"));
  // 192.0.2.1 (TEST-NET-1, RFC 5737) is no address of this machine: the bind error, not "no free port".
  CHECK_THROWS_WITH(pulse::app::free_tcp_port("192.0.2.1", 2), Catch::Contains("cannot bind 192.0.2.1:"));
}
