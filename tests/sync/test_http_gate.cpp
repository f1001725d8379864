// The accept gate (sync/http_gate.h) on the patch server, as a stranger without the token and a careless
// client would use it: idle and slow sockets that must not delay an authorized request, heads too big or too
// slow, wrong methods, oversized or short bodies, chunked bodies, invalid UTF-8. Every refusal is JSON with
// an ASCII X-Pulse-Error header.
#include <catch2/catch.hpp>

#include <chrono>
#include <memory>
#include <nlohmann/json.hpp>
#include <thread>
#include <vector>

#include "sync/http_common.h"
#include "sync/transport_http.h"
#include "sync/version_store.h"
#include "tests/sync/raw_http_util.h"
#include "tests/sync/test_transport_util.h"

#include "sync/httplib_config.h"

using namespace pulse::sync;
using pulse::test::printable;
using pulse::test::raw_body;
using pulse::test::raw_header;
using pulse::test::raw_status;
using pulse::test::RawSocket;
using Clock = std::chrono::steady_clock;

namespace {

const char* kToken = "gate-token-0123456789";

struct GateTrainer {
  pulse::test::ToyModel model{31};
  VersionStore store{"", RetentionPolicy{5, 2}, pulse::test::test_codec()};
  PatchServer server;
  explicit GateTrainer(HttpServerOptions o) : server(store, with_token(o)) {
    store.publish(0, model.views());
    server.start();
  }
  static HttpServerOptions with_token(HttpServerOptions o) {
    o.token = kToken;
    return o;
  }
};

HttpServerOptions small_pool() {
  HttpServerOptions o;
  o.threads = 2;  // what a few stalling sockets used to fill
  return o;
}

std::string authorized_head(const std::string& method, const std::string& target,
                            const std::string& extra = "") {
  return method + " " + target + " HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + kToken + "\r\n" + extra +
         "\r\n";
}

/// A refusal: the status, a JSON {"error"} body naming `says`, an ASCII X-Pulse-Error header.
void check_refusal(const std::string& answer, int status, const std::string& says) {
  INFO(answer.substr(0, 600));
  CHECK(raw_status(answer) == status);
  const auto body = nlohmann::json::parse(raw_body(answer), nullptr, false);
  REQUIRE(body.is_object());
  CHECK_THAT(body.value("error", std::string()), Catch::Contains(says));
  CHECK(!raw_header(answer, "X-Pulse-Error").empty());
  CHECK(printable(raw_header(answer, "X-Pulse-Error")));
}

}  // namespace

TEST_CASE("gate: dozens of idle and slow sockets do not delay an authorized request", "[sync][http][gate]") {
  GateTrainer t(small_pool());
  std::vector<RawSocket> idle, slow;
  for (int i = 0; i < 20; ++i) idle.emplace_back(t.server.port());
  for (int i = 0; i < 30; ++i) {
    slow.emplace_back(t.server.port());
    slow.back().send("G");  // a head begun, never finished
  }
  httplib::Client client(t.server.url());
  client.set_read_timeout(10, 0);
  const httplib::Headers auth = {{"Authorization", std::string("Bearer ") + kToken}};
  // Before the gate each of the 2 threads sat on a stalling socket until its 5 s read timeout, and the
  // request waited behind them; now it is answered as soon as its head is in. Bounded by the head
  // timeout, not timed as a speed: 2 s is far below the 5 s the stalling sockets may take.
  for (int round = 0; round < 5; ++round) {
    for (auto& s : slow) s.send("E");  // a byte now and then keeps the old per-read timeout from firing
    const auto t0 = Clock::now();
    auto res = client.Get("/v1/head", auth);
    const double took = std::chrono::duration<double>(Clock::now() - t0).count();
    REQUIRE(res);
    CHECK(res->status == 200);
    CHECK(took < 2.0);
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  // 50 pending sockets from one address: over the per-IP cap (32), the oldest were closed with 503.
  const std::string first = idle.front().read_all(2);
  check_refusal(first, 503, "too many connections");
}

TEST_CASE("gate: heads too slow (408) or too big (431), wrong methods (405), unknown routes (404)",
          "[sync][http][gate]") {
  HttpServerOptions o = small_pool();
  o.head_timeout_s = 0.5;
  GateTrainer t(o);
  {
    RawSocket s(t.server.port());
    s.send("GET /v1/head HTTP/1.1\r\nHost: x\r\n");  // never finished
    check_refusal(s.read_all(5), 408, "request head not complete within");
  }
  {
    RawSocket s(t.server.port());
    s.send("GET /v1/head HTTP/1.1\r\nX-Big: " + std::string(20000, 'a') + "\r\n\r\n");
    check_refusal(s.read_all(5), 431, "request head");
  }
  {
    RawSocket s(t.server.port());
    s.send(authorized_head("POST", "/v1/head", "Content-Length: 0\r\n"));
    const std::string answer = s.read_all(5);
    check_refusal(answer, 405, "method POST not allowed on /v1/head");
    CHECK(raw_header(answer, "Allow") == "GET");
  }
  {
    RawSocket s(t.server.port());
    s.send(authorized_head("GET", "/v1/confirm"));
    const std::string answer = s.read_all(5);
    check_refusal(answer, 405, "not allowed");
    CHECK(raw_header(answer, "Allow") == "POST");
  }
  {
    RawSocket s(t.server.port());
    s.send(authorized_head("GET", "/nope"));
    check_refusal(s.read_all(5), 404, "unknown route GET /nope");
  }
  {
    RawSocket s(t.server.port());  // unauthorized: 401 before anything else is looked at
    s.send("DELETE /nope HTTP/1.1\r\nHost: x\r\n\r\n");
    check_refusal(s.read_all(5), 401, "missing 'Authorization: Bearer' header");
  }
  {
    RawSocket s(t.server.port());
    s.send("GET /v1/head HTTP/1.1\r\nX-Bad: \xff\xfe\r\n\r\n");
    check_refusal(s.read_all(5), 400, "not printable ASCII");
  }
}

TEST_CASE("gate: bodies over a route's limit (413), chunked (411), shorter than Content-Length (408)",
          "[sync][http][gate]") {
  HttpServerOptions o = small_pool();
  o.read_timeout_s = 0.5;  // a stalled body
  GateTrainer t(o);
  {
    RawSocket s(t.server.port());
    s.send(authorized_head("POST", "/v1/confirm", "Content-Length: 10000000\r\n"));
    s.send(std::string(1 << 20, 'x'));  // drained, not read: the answer still arrives
    check_refusal(s.read_all(5), 413, "over the limit of 65536 bytes for POST /v1/confirm");
  }
  {
    RawSocket s(t.server.port());  // a GET with a body
    s.send(authorized_head("GET", "/v1/head", "Content-Length: 100\r\n"));
    check_refusal(s.read_all(5), 413, "over the limit of 0 bytes");
  }
  {
    RawSocket s(t.server.port());
    s.send(authorized_head("POST", "/v1/confirm", "Transfer-Encoding: chunked\r\n") +
           "5\r\nhello\r\n0\r\n\r\n");
    check_refusal(s.read_all(5), 411, "Transfer-Encoding");
  }
  {
    RawSocket s(t.server.port());  // Content-Length larger than the body: answered, not left hanging
    s.send(authorized_head("POST", "/v1/confirm", "Content-Length: 100\r\n") + "{\"worker\":");
    check_refusal(s.read_all(5), 408, "10 of 100 bytes");
  }
  {
    RawSocket s(t.server.port());
    s.send(authorized_head("POST", "/v1/confirm", "Content-Length: 99999999999999999999999\r\n"));
    check_refusal(s.read_all(5), 400, "Content-Length");
  }
  // The server still answers normally afterwards.
  httplib::Client client(t.server.url());
  auto res = client.Get("/v1/head", httplib::Headers{{"Authorization", std::string("Bearer ") + kToken}});
  REQUIRE(res);
  CHECK(res->status == 200);
}

TEST_CASE("gate: invalid UTF-8 in a body is 400 with an ASCII header, a huge field is not echoed",
          "[sync][http][gate]") {
  GateTrainer t(small_pool());
  httplib::Client client(t.server.url());
  const httplib::Headers auth = {{"Authorization", std::string("Bearer ") + kToken}};
  auto bad = client.Post("/v1/confirm", auth, "{\"worker\":\"\xff\xfe\",\"version\":0,\"root_hash\":\"00\"}",
                         "application/json");
  REQUIRE(bad);
  CHECK(bad->status == 400);  // was 500 (retryable), from a raw 0xFF in the header
  CHECK(printable(bad->get_header_value("X-Pulse-Error")));
  CHECK(nlohmann::json::parse(bad->body, nullptr, false).is_object());
  CHECK_THAT(bad->body, Catch::Contains("bad /v1/confirm body"));
  // A long worker name inside the limit comes back cut, not whole.
  const std::string big(60000, 'n');
  auto huge =
      client.Post("/v1/confirm", auth, "{\"worker\":\"" + big + "\",\"version\":5,\"root_hash\":\"zz\"}",
                  "application/json");
  REQUIRE(huge);
  CHECK(huge->status == 400);
  CHECK(huge->body.size() < 5000);
  CHECK(huge->get_header_value("X-Pulse-Error").size() < 1100);
}

TEST_CASE("printable_ascii escapes bytes outside printable ASCII and cuts long text", "[sync][http][gate]") {
  CHECK(printable_ascii("ok \xff\n\x01", 100) == "ok \\xFF \\x01");
  CHECK(printable_ascii(std::string(50, 'a'), 10) == std::string(10, 'a') + "... (50 bytes)");
  uint64_t v = 0;
  CHECK(parse_decimal_u64("18446744073709551615", v));
  CHECK(v == UINT64_MAX);
  CHECK_FALSE(parse_decimal_u64("18446744073709551616", v));
  CHECK_FALSE(parse_decimal_u64("-1", v));
  CHECK_FALSE(parse_decimal_u64(" 1", v));
}
