// HTTP transport on loopback: bearer auth on every route, bad requests, Range resume of a cut transfer,
// a corrupted patch rejected and fetched again, a late worker catching up, retries, TLS. Token checks and
// the retry loop on their own: test_http_common.cpp.
#include <catch2/catch.hpp>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <thread>

#include "sync/hash.h"
#include "sync/patch.h"
#include "sync/transport_http.h"
#include "sync/version_store.h"
#include "sync/worker_replica.h"
#include "tests/sync/test_transport_util.h"

#include "sync/httplib_config.h"

using namespace pulse::sync;
using pulse::test::ToyModel;

namespace {

const char* kToken = "test-token-0123456789";

/// A trainer: store + server on an ephemeral loopback port, versions 0..last published.
struct Trainer {
  ToyModel model;
  VersionStore store;
  PatchServer server;
  Trainer(uint64_t seed, RetentionPolicy policy, std::string token = kToken)
      : model(seed), store("", policy, pulse::test::test_codec()), server(store, options(token)) {
    server.start();
  }
  static HttpServerOptions options(const std::string& token) {
    HttpServerOptions o;
    o.token = token;
    o.threads = 2;
    return o;
  }
  void publish_to(uint64_t last) {
    if (!store.published()) store.publish(0, model.views());
    for (uint64_t v = store.head().version + 1; v <= last; ++v) {
      model.step();
      store.publish(v, model.views());
    }
  }
  HttpClientOptions client(const std::string& token = kToken) const {
    HttpClientOptions o;
    o.url = server.url();
    o.token = token;
    o.max_retries = 3;
    o.backoff_initial_s = 0.01;
    o.backoff_max_s = 0.05;
    o.timeout_s = 5;
    return o;
  }
};

httplib::Headers bearer(const std::string& token) {
  return {{"Authorization", "Bearer " + token}};
}

}  // namespace

TEST_CASE("every route answers 401 without the right bearer token", "[sync][http]") {
  Trainer t(21, RetentionPolicy{5, 2});
  t.publish_to(3);
  httplib::Client raw(t.server.url());
  const std::vector<std::string> gets = {
      "/v1/head", "/v1/patch?from=0&to=1", "/v1/anchor/latest", "/v1/anchor/0", "/v1/nope", "/"};
  for (const auto& path : gets) {
    INFO("GET " << path);
    auto missing = raw.Get(path.c_str());
    REQUIRE(missing);
    CHECK(missing->status == 401);
    CHECK(missing->get_header_value("WWW-Authenticate").find("Bearer") == 0);
    auto wrong = raw.Get(path.c_str(), bearer("test-token-0123456788"));
    REQUIRE(wrong);
    CHECK(wrong->status == 401);
    auto prefix = raw.Get(path.c_str(), bearer("test-token"));
    REQUIRE(prefix);
    CHECK(prefix->status == 401);
  }
  const std::string body =
      R"({"worker":"w","version":1,"root_hash":")" + hash_hex(t.store.root_hash_of(1)) + "\"}";
  auto post = raw.Post("/v1/confirm", body, "application/json");
  REQUIRE(post);
  CHECK(post->status == 401);
  auto post_wrong = raw.Post("/v1/confirm", bearer("nope"), body, "application/json");
  REQUIRE(post_wrong);
  CHECK(post_wrong->status == 401);
  CHECK(t.store.worker_versions().empty());  // nothing got through
  CHECK(t.server.stats().unauthorized == 3 * gets.size() + 2);

  // The typed client reports the status.
  PatchClient bad(t.client("wrong"));
  try {
    bad.head();
    FAIL("head() with a wrong token must throw");
  } catch (const TransportError& e) {
    CHECK(e.status == 401);
  }
  // And with the right token every route works.
  auto ok = raw.Get("/v1/head", bearer(kToken));
  REQUIRE(ok);
  CHECK(ok->status == 200);
  CHECK(ok->body.find("\"version\":3") != std::string::npos);
  auto confirm = raw.Post("/v1/confirm", bearer(kToken), body, "application/json");
  REQUIRE(confirm);
  CHECK(confirm->status == 200);
  CHECK(t.store.worker_versions().at("w") == 1);
}

TEST_CASE("a second server cannot listen on a port a live server holds", "[sync][http]") {
  // cpp-httplib's default SO_REUSEPORT let two processes share a port, the kernel splitting the clients.
  Trainer t(3, RetentionPolicy{});
  HttpServerOptions o = Trainer::options(kToken);
  o.port = t.server.port();
  o.port_origin = "transport.port + 1";  // the error says which setting chose the port
  PatchServer second(t.store, o);
  CHECK_THROWS_WITH(second.start(),
                    Catch::Contains("cannot bind HTTP server to 127.0.0.1:" + std::to_string(o.port) +
                                    " (transport.port + 1): Address already in use"));
  // An address that is not this machine's (192.0.2.1: TEST-NET-1, RFC 5737), or no address at all.
  HttpServerOptions away = o;
  away.host = "192.0.2.1";
  PatchServer remote(t.store, away);
  CHECK_THROWS_WITH(remote.start(),
                    Catch::Contains("192.0.2.1:" + std::to_string(o.port) +
                                    " (transport.port + 1): Cannot assign requested address"));
  away.host = "no-such-host.invalid";
  PatchServer unnamed(t.store, away);
  CHECK_THROWS_WITH(unnamed.start(), Catch::Contains("host 'no-such-host.invalid' does not resolve"));
  // Once the first one stops, the port can be bound again at once.
  t.server.stop();
  PatchServer third(t.store, o);
  third.start();
  CHECK(third.port() == o.port);
  third.stop();
}

TEST_CASE("bad requests get 400/404/409/410 with a clear message", "[sync][http]") {
  Trainer t(22, RetentionPolicy{3, 1});
  httplib::Client raw(t.server.url());
  const auto h = bearer(kToken);
  // Before the first publish.
  auto early = raw.Get("/v1/anchor/latest", h);
  REQUIRE(early);
  CHECK(early->status == 503);
  t.publish_to(8);  // anchors 6 (keep 1) -> versions < 6 gone

  struct Case {
    std::string path;
    int status;
    std::string says;
  };
  const std::vector<Case> cases = {
      {"/v1/patch?from=1", 400, "missing query parameter 'to'"},
      {"/v1/patch?to=1", 400, "missing query parameter 'from'"},
      {"/v1/patch?from=abc&to=2", 400, "'from' must be a non-negative decimal integer, got 'abc'"},
      {"/v1/patch?from=-1&to=2", 400, "got '-1'"},
      {"/v1/patch?from=1&to=99999999999999999999999", 400, "'to' must be"},
      {"/v1/patch?from=7&to=7", 400, "below the target"},
      {"/v1/patch?from=7&to=9", 400, "beyond head 8"},
      {"/v1/patch?from=2&to=8", 410, "no longer reconstructible"},
      {"/v1/anchor/x1", 400, "got 'x1'"},
      {"/v1/anchor/7", 404, "no anchor stored for version 7"},
      {"/v1/unknown", 404, "unknown route GET /v1/unknown"},
  };
  for (const auto& c : cases) {
    INFO(c.path);
    auto res = raw.Get(c.path.c_str(), h);
    REQUIRE(res);
    CHECK(res->status == c.status);
    CHECK_THAT(res->body, Catch::Contains(c.says));
  }
  auto bad_json = raw.Post("/v1/confirm", h, "{not json", "application/json");
  REQUIRE(bad_json);
  CHECK(bad_json->status == 400);
  auto bad_field =
      raw.Post("/v1/confirm", h, R"({"worker":"w","version":-3,"root_hash":"00"})", "application/json");
  REQUIRE(bad_field);
  CHECK(bad_field->status == 400);
  CHECK_THAT(bad_field->body, Catch::Contains("'version'"));
  auto mismatch =
      raw.Post("/v1/confirm", h, R"({"worker":"w","version":8,"root_hash":"0123"})", "application/json");
  REQUIRE(mismatch);
  CHECK(mismatch->status == 409);

  PatchClient client(t.client());
  CHECK_THROWS_AS(client.patch(2, 8), VersionGoneError);
  try {
    client.patch(8, 9);
    FAIL("patch beyond head must throw");
  } catch (const TransportError& e) {
    CHECK(e.status == 400);
    CHECK_THAT(e.what(), Catch::Contains("beyond head"));
  }
}

TEST_CASE("patch and anchor bodies honour Range requests", "[sync][http]") {
  Trainer t(23, RetentionPolicy{5, 2});
  t.publish_to(6);
  httplib::Client raw(t.server.url());
  const Blob anchor = t.store.anchor(5);
  auto h = bearer(kToken);
  h.emplace("Range", "bytes=100-");
  auto res = raw.Get("/v1/anchor/5", h);
  REQUIRE(res);
  CHECK(res->status == 206);
  CHECK(res->get_header_value("Content-Range") ==
        "bytes 100-" + std::to_string(anchor->size() - 1) + "/" + std::to_string(anchor->size()));
  CHECK(res->body == std::string(anchor->begin() + 100, anchor->end()));
  auto full = raw.Get("/v1/anchor/latest", bearer(kToken));
  REQUIRE(full);
  CHECK(full->status == 200);
  CHECK(full->get_header_value("X-Pulse-Version") == "5");
  CHECK(full->get_header_value("ETag") == res->get_header_value("ETag"));
  CHECK(full->body == std::string(anchor->begin(), anchor->end()));

  // httplib applies a resuming request's Range to error bodies too (here: 416, empty body); the message
  // still travels in X-Pulse-Error, and the plain request gets the real status.
  auto ranged_missing = raw.Get("/v1/anchor/3", h);
  REQUIRE(ranged_missing);
  CHECK(ranged_missing->status >= 400);
  CHECK_THAT(ranged_missing->get_header_value("X-Pulse-Error"),
             Catch::Contains("no anchor stored for version 3"));
  auto missing = raw.Get("/v1/anchor/3", bearer(kToken));
  REQUIRE(missing);
  CHECK(missing->status == 404);
  CHECK_THAT(missing->body, Catch::StartsWith("{\"error\":\"no anchor stored for version 3"));
}

TEST_CASE("a truncated transfer is retried and resumed with Range", "[sync][http]") {
  Trainer t(24, RetentionPolicy{50, 2});
  t.publish_to(12);
  PatchClient client(t.client());
  const Blob expected = t.store.patch(0, 12);  // composed: the largest body here
  t.server.inject_truncation(2);               // two cuts in a row: resume twice
  const auto got = client.patch(0, 12);
  CHECK(got == *expected);
  const auto cs = client.stats();
  const auto ss = t.server.stats();
  CHECK(ss.truncated == 2);
  CHECK(cs.retries == 2);
  CHECK(cs.resumed == 2);
  CHECK(ss.ranged_requests == 2);
  // Resumption means the bytes were not all sent again: the client received exactly the body once.
  CHECK(cs.body_bytes == expected->size());

  // The anchor route resumes too (and /latest pins the version it started with).
  t.server.inject_truncation(1);
  const auto anchor = client.anchor(kLatestAnchor);
  CHECK(anchor == *t.store.anchor(0));
  CHECK(client.stats().resumed == 3);
}

TEST_CASE("a worker over HTTP: late join at 10, corrupted patch refetched, confirms advance baselines",
          "[sync][http]") {
  Trainer t(25, RetentionPolicy{4, 2});
  t.publish_to(10);
  PatchClient client(t.client());
  const VersionHead head = client.head();
  CHECK(head.version == 10);
  CHECK(head.root_hash == t.model.root());

  WorkerReplica worker("w-http");
  auto st = worker.sync_to(client, head.version);
  CHECK(st.used_anchor);
  CHECK(worker.version() == 10);
  CHECK(worker.root_hash() == t.model.root());
  CHECK(pulse::test::same_bytes(worker.views(), t.model.views()));
  CHECK(t.store.worker_versions().at("w-http") == 10);

  t.publish_to(13);
  t.server.inject_corruption(1);
  st = worker.sync_to(client, client.head().version);
  CHECK(t.server.stats().corrupted == 1);
  CHECK(st.rejected == 1);
  CHECK_FALSE(st.used_anchor);
  CHECK(worker.version() == 13);
  CHECK(worker.root_hash() == t.model.root());
  CHECK(t.store.worker_versions().at("w-http") == 13);

  // Cut and corrupted in the same sync: still bit-identical.
  t.publish_to(14);
  t.server.inject_truncation(1);
  t.server.inject_corruption(1);
  worker.sync_to(client, 14);
  CHECK(worker.root_hash() == t.model.root());
}

TEST_CASE("three workers follow a publishing trainer concurrently over HTTP", "[sync][http]") {
  Trainer t(28, RetentionPolicy{4, 1});
  t.publish_to(0);
  constexpr uint64_t kLast = 20;
  struct Result {
    uint64_t version = 0, root = 0;
    int syncs = 0;
    std::string error;
  };
  std::vector<Result> results(3);
  std::vector<std::thread> threads;
  for (size_t i = 0; i < results.size(); ++i) {
    threads.emplace_back([&t, &results, i] {
      try {
        PatchClient client(t.client());
        WorkerReplica worker("w" + std::to_string(i));
        for (int iter = 0; iter < 5000 && worker.version() < kLast; ++iter) {
          const VersionHead h = client.head();
          if (worker.empty() || h.version > worker.version()) {
            worker.sync_to(client, h.version);
            ++results[i].syncs;
          }
          std::this_thread::sleep_for(std::chrono::milliseconds(1));
        }
        results[i].version = worker.version();
        results[i].root = worker.root_hash();
      } catch (const std::exception& e) {
        results[i].error = e.what();
      }
    });
  }
  for (uint64_t v = 1; v <= kLast; ++v) {
    t.model.step();
    t.store.publish(v, t.model.views());
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  for (auto& th : threads) th.join();
  for (const auto& r : results) {
    CHECK(r.error == "");
    CHECK(r.version == kLast);
    CHECK(r.root == t.model.root());
    CHECK(r.syncs >= 1);
  }
  for (const auto& [id, v] : t.store.worker_versions()) CHECK(v == kLast);
  CHECK(t.store.worker_versions().size() == 3);
}

TEST_CASE("the client gives up after max_retries on a dead server", "[sync][http]") {
  int port = 0;
  {
    Trainer t(26, RetentionPolicy{});
    port = t.server.port();
  }  // server stopped: the port now refuses connections
  HttpClientOptions o;
  o.url = "http://127.0.0.1:" + std::to_string(port);
  o.max_retries = 2;
  o.backoff_initial_s = 0.001;
  o.timeout_s = 1;
  PatchClient client(o);
  try {
    client.patch(0, 1);
    FAIL("a dead server must make patch() throw");
  } catch (const TransportError& e) {
    CHECK(e.status == 0);
    CHECK_THAT(e.what(), Catch::Contains("after 3 attempts"));
  }
  CHECK(client.stats().retries == 2);
  CHECK_THROWS_AS(PatchClient(HttpClientOptions{"ftp://x", "", 1, 0.1, 1, 1, ""}), std::invalid_argument);
}

TEST_CASE("TLS: half-set options are rejected, a self-signed server is reachable with its CA",
          "[sync][http]") {
  VersionStore store("", RetentionPolicy{}, pulse::test::test_codec());
  HttpServerOptions half;
  half.tls_cert = "/nonexistent.pem";
  CHECK_THROWS_AS(PatchServer(store, half), std::invalid_argument);
  HttpServerOptions missing;
  missing.tls_cert = "/nonexistent-cert.pem";
  missing.tls_key = "/nonexistent-key.pem";
  CHECK_THROWS_WITH(PatchServer(store, missing), Catch::Contains("nonexistent-cert.pem"));

  if (std::system("command -v openssl >/dev/null 2>&1") != 0) {
    WARN("openssl CLI not found: TLS round trip not exercised");
    return;
  }
  const std::string dir = pulse::test::make_temp_dir("tls");
  const std::string cmd =
      "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 1 "
      "-subj /CN=127.0.0.1 -addext subjectAltName=IP:127.0.0.1 -keyout " +
      dir + "/key.pem -out " + dir + "/cert.pem >/dev/null 2>&1";
  REQUIRE(std::system(cmd.c_str()) == 0);
  ToyModel model(27);
  store.publish(0, model.views());
  HttpServerOptions o;
  o.token = kToken;
  o.tls_cert = dir + "/cert.pem";
  o.tls_key = dir + "/key.pem";
  PatchServer server(store, o);
  server.start();
  CHECK(server.url().rfind("https://", 0) == 0);
  HttpClientOptions c;
  c.url = server.url();
  c.token = kToken;
  c.ca_cert = dir + "/cert.pem";
  c.max_retries = 0;
  PatchClient client(c);
  CHECK(client.head().root_hash == model.root());
  CHECK(client.anchor(0) == *store.anchor(0));
  // Without the CA the certificate does not verify.
  HttpClientOptions untrusted = c;
  untrusted.ca_cert.clear();
  PatchClient stranger(untrusted);
  CHECK_THROWS_AS(stranger.head(), TransportError);
  server.stop();
  std::filesystem::remove_all(dir);
}
