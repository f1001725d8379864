// sync/http_common.h: constant-time token checks, bearer authorization, token loading, error answers and
// the one retry loop (on its own and against a loopback server that fails before it answers).
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <thread>

#include "sync/http_common.h"
#include "sync/transport_source.h"
#include "tests/sync/test_transport_util.h"

#include "sync/httplib_config.h"

using namespace pulse::sync;

TEST_CASE("constant_time_equal: equal, different, prefix, empty, different lengths", "[sync][http]") {
  CHECK(constant_time_equal("abc", "abc"));
  CHECK(constant_time_equal("", ""));
  const std::string token = "test-token-0123456789";
  CHECK(constant_time_equal(token, std::string(token)));
  CHECK_FALSE(constant_time_equal("abc", "abd"));   // last byte differs
  CHECK_FALSE(constant_time_equal("xbc", "abc"));   // first byte differs
  CHECK_FALSE(constant_time_equal("abc", "abcd"));  // a is a prefix of b
  CHECK_FALSE(constant_time_equal("abcd", "abc"));  // b is a prefix of a
  CHECK_FALSE(constant_time_equal("", "a"));        // empty vs not
  CHECK_FALSE(constant_time_equal("a", ""));
  CHECK_FALSE(constant_time_equal("abc", std::string("abc\0", 4)));  // a trailing NUL still counts
  CHECK_FALSE(constant_time_equal(token, token.substr(0, 10)));
  CHECK_FALSE(constant_time_equal(std::string(64, 'a'), std::string(63, 'a') + "b"));
}

TEST_CASE("bearer_token_matches and authorize_bearer", "[sync][http]") {
  CHECK(bearer_token_matches("Bearer s3cret", "s3cret"));
  CHECK_FALSE(bearer_token_matches("Bearer s3cre", "s3cret"));    // prefix of the token
  CHECK_FALSE(bearer_token_matches("Bearer s3cret2", "s3cret"));  // token plus a byte
  CHECK_FALSE(bearer_token_matches("s3cret", "s3cret"));          // no scheme
  CHECK_FALSE(bearer_token_matches("bearer s3cret", "s3cret"));   // the scheme is compared exactly
  CHECK_FALSE(bearer_token_matches("", "s3cret"));                // no header
  CHECK_FALSE(bearer_token_matches("Bearer ", "s3cret"));
  CHECK(bearer_token_matches("", ""));  // authentication off
  CHECK(bearer_token_matches("Bearer anything", ""));

  httplib::Request req;
  httplib::Response res;
  CHECK(authorize_bearer(req, res, ""));
  CHECK_FALSE(authorize_bearer(req, res, "s3cret"));
  CHECK(res.status == 401);
  CHECK(res.get_header_value("WWW-Authenticate") == "Bearer realm=\"pulse\"");
  CHECK(server_message(res.body) == "missing 'Authorization: Bearer' header");
  CHECK(res.get_header_value("X-Pulse-Error") == "missing 'Authorization: Bearer' header");

  req.headers.emplace("Authorization", "Bearer nope");
  httplib::Response wrong;
  CHECK_FALSE(authorize_bearer(req, wrong, "s3cret"));
  CHECK(wrong.status == 401);
  CHECK(server_message(wrong.body) == "wrong bearer token");

  httplib::Request good;
  good.headers.emplace("Authorization", "Bearer s3cret");
  httplib::Response untouched;
  CHECK(authorize_bearer(good, untouched, "s3cret"));
  CHECK(untouched.body.empty());
}

TEST_CASE("load_token: environment first, then the file's first line", "[sync][http]") {
  const std::string dir = pulse::test::make_temp_dir("token");
  const std::string file = dir + "/token";
  std::ofstream(file) << "  s3cret-from-file \nsecond line ignored\n";
  ::unsetenv("PULSE_TEST_TOKEN_UNSET");
  CHECK(load_token("PULSE_TEST_TOKEN_UNSET", file) == "s3cret-from-file");
  ::setenv("PULSE_TEST_TOKEN", "from-env", 1);
  CHECK(load_token("PULSE_TEST_TOKEN", file) == "from-env");
  CHECK(load_token("PULSE_TEST_TOKEN_UNSET", "") == "");
  CHECK_THROWS_WITH(load_token("PULSE_TEST_TOKEN_UNSET", dir + "/missing"), Catch::Contains("missing"));
  std::ofstream(dir + "/empty") << "\n";
  CHECK_THROWS_WITH(load_token("", dir + "/empty"), Catch::Contains("empty"));
  std::filesystem::remove_all(dir);
}

TEST_CASE("set_error_response and server_message", "[sync][http]") {
  httplib::Response res;
  set_error_response(res, 409, "line one\nline two");
  CHECK(res.status == 409);
  CHECK(res.get_header_value("Content-Type") == "application/json");
  CHECK(server_message(res.body) == "line one\nline two");
  CHECK(res.get_header_value("X-Pulse-Error") == "line one line two");
  CHECK(server_message("plain text") == "plain text");
  CHECK(server_message(std::string(400, 'x')).size() == 300);
  CHECK(server_message("{\"error\": 3}") == "{\"error\": 3}");
}

TEST_CASE("backoff doubles up to its cap, which statuses are retried", "[sync][http]") {
  const RetryPolicy p{5, 0.05, 0.3};
  CHECK(backoff_seconds(p, 0) == Approx(0.05));
  CHECK(backoff_seconds(p, 1) == Approx(0.1));
  CHECK(backoff_seconds(p, 2) == Approx(0.2));
  CHECK(backoff_seconds(p, 3) == Approx(0.3));
  CHECK(backoff_seconds(p, 1000) == Approx(0.3));
  for (int s : {500, 502, 503, 504, 408, 429}) CHECK(retryable_status(s));
  for (int s : {200, 204, 400, 401, 404, 409, 410, 416}) CHECK_FALSE(retryable_status(s));
}

TEST_CASE("retry_loop: retries network errors and 5xx, throws on 4xx and when retries run out",
          "[sync][http]") {
  const RetryPolicy fast{3, 0.001, 0.002};
  const std::string url = "http://127.0.0.1:1";

  // Two failures, then success: two retries.
  RetryCounters c;
  int calls = 0;
  retry_loop(
      fast, url, "GET /v1/x",
      [&] {
        AttemptOutcome o;
        if (++calls == 1) {
          o.detail = "Connection";
        } else if (calls == 2) {
          o.status = 503;
          o.detail = "busy";
        } else {
          o.done = true;
        }
        return o;
      },
      &c);
  CHECK(calls == 3);
  CHECK(c.attempts == 3);
  CHECK(c.retries == 2);

  // Exhausted: the message names URL, route, the last error and the attempt count.
  calls = 0;
  try {
    retry_loop(fast, url, "GET /v1/x", [&] {
      ++calls;
      return AttemptOutcome{false, 0, "Connection", false};
    });
    FAIL("must throw");
  } catch (const TransportError& e) {
    CHECK(e.status == 0);
    CHECK(std::string(e.what()) == url + " GET /v1/x failed after 4 attempts: Connection");
  }
  CHECK(calls == 4);
  try {
    retry_loop(RetryPolicy{0, 0, 0}, url, "POST /v1/y", [] {
      return AttemptOutcome{false, 502, "bad gw", false};
    });
    FAIL("must throw");
  } catch (const TransportError& e) {
    CHECK(e.status == 502);
    CHECK(std::string(e.what()) == url + " POST /v1/y failed after 1 attempts: HTTP 502: bad gw");
  }

  // 4xx: no retry; 410 is VersionGoneError.
  calls = 0;
  try {
    retry_loop(fast, url, "GET /v1/x", [&] {
      ++calls;
      return AttemptOutcome{false, 401, "wrong bearer token", false};
    });
    FAIL("must throw");
  } catch (const TransportError& e) {
    CHECK(e.status == 401);
    CHECK(std::string(e.what()) == url + " GET /v1/x: HTTP 401: wrong bearer token");
  }
  CHECK(calls == 1);
  CHECK_THROWS_AS(retry_loop(fast, url, "GET /v1/patch",
                             [] {
                               return AttemptOutcome{false, 410, "gone", false};
                             }),
                  VersionGoneError);

  // `retry` overrides a non-retryable status (the caller reset its state); exceptions pass through.
  calls = 0;
  retry_loop(fast, url, "GET /v1/x", [&] { return AttemptOutcome{++calls == 2, 416, "range", true}; });
  CHECK(calls == 2);
  CHECK_THROWS_WITH(
      retry_loop(fast, url, "GET /v1/x", []() -> AttemptOutcome { throw std::logic_error("mine"); }), "mine");
}

TEST_CASE("request_with_retries against a loopback server", "[sync][http]") {
  httplib::Server srv;
  std::atomic<int> flaky{0};
  srv.set_pre_routing_handler([](const httplib::Request& req, httplib::Response& res) {
    return authorize_bearer(req, res, "tok") ? httplib::Server::HandlerResponse::Unhandled
                                             : httplib::Server::HandlerResponse::Handled;
  });
  srv.Get("/flaky", [&](const httplib::Request&, httplib::Response& res) {
    if (++flaky <= 2) return set_error_response(res, 503, "warming up");
    res.set_content("ok", "text/plain");
  });
  srv.Get("/empty", [](const httplib::Request&, httplib::Response& res) { res.status = 204; });
  srv.Get("/bad", [](const httplib::Request&, httplib::Response& res) {
    set_error_response(res, 400, "no such thing");
  });
  const int port = srv.bind_to_any_port("127.0.0.1");
  REQUIRE(port > 0);
  std::thread th([&] { srv.listen_after_bind(); });
  while (!srv.is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  const std::string url = "http://127.0.0.1:" + std::to_string(port);
  httplib::Client cli(url);
  cli.set_bearer_token_auth("tok");
  const RetryPolicy fast{3, 0.001, 0.002};

  RetryCounters c;
  auto res = request_with_retries(
      fast, url, "GET /flaky", [&] { return cli.Get("/flaky"); }, &c);
  CHECK(res->status == 200);
  CHECK(res->body == "ok");
  CHECK(c.attempts == 3);
  CHECK(c.retries == 2);
  CHECK(request_with_retries(fast, url, "GET /empty", [&] { return cli.Get("/empty"); })->status == 204);
  CHECK_THROWS_WITH(request_with_retries(fast, url, "GET /bad", [&] { return cli.Get("/bad"); }),
                    url + " GET /bad: HTTP 400: no such thing");

  httplib::Client stranger(url);
  stranger.set_bearer_token_auth("tok2");
  try {
    request_with_retries(fast, url, "GET /empty", [&] { return stranger.Get("/empty"); });
    FAIL("a wrong token must throw");
  } catch (const TransportError& e) {
    CHECK(e.status == 401);
    CHECK_THAT(e.what(), Catch::EndsWith("HTTP 401: wrong bearer token"));
  }
  srv.stop();
  th.join();

  // The server is gone: connection errors until the retries run out.
  RetryCounters dead;
  try {
    request_with_retries(
        fast, url, "GET /empty", [&] { return cli.Get("/empty"); }, &dead);
    FAIL("a dead server must throw");
  } catch (const TransportError& e) {
    CHECK(e.status == 0);
    CHECK_THAT(e.what(), Catch::StartsWith(url + " GET /empty failed after 4 attempts: "));
  }
  CHECK(dead.retries == 3);
}
