// free_tcp_port: runs of free ports below the kernel's ephemeral range, for servers that must be dialled
// before they listen (a trainer's control + patch ports, the c10d master port).
#include <catch2/catch.hpp>

#include <fstream>
#include <memory>
#include <stdexcept>
#include <vector>

#include "app/free_port.h"
#include "tests/app/run_test_util.h"

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
    {
      std::vector<std::unique_ptr<pulse::test_run::PortHolder>> held;  // REQUIREs each bind
      for (int i = 0; i < count; ++i) held.push_back(std::make_unique<pulse::test_run::PortHolder>(p + i));
      // While they are held, another call returns a run that avoids every one of them.
      const int q = pulse::app::free_tcp_port("localhost", count);
      CHECK((q + count - 1 < p || q > p + count - 1));
    }
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
