// `pulse worker` command-line refusals and its registration wait: a --trainer that is not a URL is refused
// at parse time naming the option (it was tried and reported as "not reachable"), and --register-wait is
// waited out in full before the worker gives up (it gave up after 1 s of a 2 s wait).
#include <catch2/catch.hpp>

#include <chrono>
#include <string>
#include <vector>

#include "app/wire/control.h"
#include "app/free_port.h"
#include "tests/app/cli_test_util.h"

using pulse::test_cli::pulse_cli;

TEST_CASE("pulse worker refuses a --trainer that is not an http(s) URL with a host", "[app][cli][worker]") {
  for (const std::string bad : {"notaurl", "10.0.0.5:29600", "http://", "https://:29600", "ftp://host:1"}) {
    INFO(bad);
    const auto r = pulse_cli({"worker", "--trainer", bad});
    CHECK(r.code != 0);
    CHECK_THAT(r.err, Catch::Contains("--trainer") && Catch::Contains("is not an http:// or https:// URL"));
  }
  const auto neg = pulse_cli({"worker", "--trainer", "http://127.0.0.1:1", "--register-wait", "-1"});
  CHECK(neg.code != 0);
  CHECK_THAT(neg.err, Catch::Contains("--register-wait"));
}

TEST_CASE("pulse worker waits the whole --register-wait for an absent trainer, then says how long",
          "[app][cli][worker]") {
  const int port = pulse::app::free_tcp_port("127.0.0.1");  // nobody listens there
  const auto t0 = std::chrono::steady_clock::now();
  const auto r = pulse_cli(
      {"worker", "--trainer", "http://127.0.0.1:" + std::to_string(port), "--register-wait", "2", "--quiet"});
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  CHECK(r.code != 0);
  CHECK_THAT(r.err, Catch::Contains("gave up after 2.") && Catch::Contains("--register-wait") &&
                        Catch::Contains("not reachable"));
  CHECK(s >= 2.0);
  CHECK(s < 6.0);
}

TEST_CASE("pulse worker refuses a bad --id at once, before waiting to register", "[app][cli][worker]") {
  for (const std::string& bad : std::vector<std::string>{"bad id!", ".hidden", "a/b", std::string(65, 'w')}) {
    INFO(bad);
    const auto r =
        pulse_cli({"worker", "--trainer", "http://127.0.0.1:1", "--register-wait", "0", "--id", bad});
    CHECK(r.code != 0);
    CHECK_THAT(r.err, Catch::Contains("--id") && Catch::Contains("letters, digits"));
  }
  CHECK(pulse::app::valid_worker_name("gpu-a.0_1"));
  CHECK_FALSE(pulse::app::valid_worker_name(""));
}
