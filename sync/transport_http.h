// HTTP transport of PULSESync patches (cpp-httplib 0.11): a server on the trainer over its VersionStore and
// a client on every worker.
//
// Routes (every one, unknown routes included, answers 401 without "Authorization: Bearer <token>" when
// a token is set; the comparison is constant-time):
//   GET  /v1/head                -> 200 {"version":V,"root_hash":"<16 hex>","latest_anchor":A,"published":b}
//   GET  /v1/patch?from=A&to=B   -> 200/206 application/octet-stream: the stored patch when B == A+1, else a
//                                   composed one; 400 bad parameters, 410 A no longer reconstructible
//   GET  /v1/anchor/V            -> 200/206 the anchor at exactly V (404 when none)
//   GET  /v1/anchor/latest       -> 200/206 the newest anchor (X-Pulse-Version names it)
//   POST /v1/confirm {"worker":"w0","version":V,"root_hash":"<16 hex>"} -> 200; 409 hash mismatch
// Binary bodies carry ETag (xxh3 of the bytes), X-Pulse-Base-Version, X-Pulse-Version, Accept-Ranges, and
// honour "Range: bytes=N-" (206 + Content-Range), which is how clients resume a cut transfer.
// Before the first publish, patch/anchor routes answer 503 (clients retry).
// Plain HTTP is served behind the accept gate (sync/http_gate.h): heads are read and the token checked
// before any thread or body is spent (408/431/401/404/405/413 with JSON bodies); one request per
// connection. Every error answer has a JSON body and an ASCII X-Pulse-Error header.
#pragma once
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "sync/http_common.h"  // load_token, constant_time_equal, RetryPolicy
#include "sync/transport_source.h"
#include "sync/version_store.h"

namespace pulse::sync {

/// Server settings.
struct HttpServerOptions {
  std::string host = "127.0.0.1";
  int port = 0;                   ///< 0 = pick a free port (see PatchServer::port)
  std::string port_origin;        ///< where `port` came from (a setting), named when it cannot be bound
  std::string token;              ///< bearer token; "" = no authentication
  std::string tls_cert, tls_key;  ///< PEM paths; both set = HTTPS (OpenSSL), both empty = plain HTTP
  int threads = 8;                ///< request-handling threads (authorized requests only, plain HTTP)
  double read_timeout_s = 30, write_timeout_s = 30;  ///< a stalled body (408) / unread answer is cut after
  double head_timeout_s = 5;  ///< plain HTTP: a request head must arrive within this of the connect (408)
};

/// Traffic counters.
struct HttpServerStats {
  uint64_t requests = 0, unauthorized = 0, bad_requests = 0;
  uint64_t body_bytes_sent = 0;           ///< patch/anchor body bytes handed to the socket
  uint64_t ranged_requests = 0;           ///< requests that resumed with a Range header
  uint64_t truncated = 0, corrupted = 0;  ///< fault-injection events that fired
};

/// The trainer's HTTP server. Thread-safe; the store must outlive the server.
class PatchServer {
 public:
  /// Throws std::invalid_argument for half-set TLS options and std::runtime_error when TLS is requested
  /// but this build of cpp-httplib lacks OpenSSL, or the cert/key cannot be loaded.
  PatchServer(VersionStore& store, HttpServerOptions options);
  ~PatchServer();
  PatchServer(const PatchServer&) = delete;
  PatchServer& operator=(const PatchServer&) = delete;

  /// Binds and starts serving on a background thread; returns once listening. Throws std::runtime_error
  /// when the address cannot be bound.
  void start();
  /// The bound port (after start()).
  int port() const;
  /// "http://host:port" (or https).
  std::string url() const;
  /// Stops serving and joins the thread. Idempotent.
  void stop();

  /// Fault injection for tests: the next `n` patch/anchor bodies are cut after half of the bytes
  /// (connection closed), or have one byte flipped in the middle.
  void inject_truncation(int n);
  void inject_corruption(int n);

  HttpServerStats stats() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// Client settings.
struct HttpClientOptions {
  std::string url;      ///< "http://127.0.0.1:PORT" or "https://host:port"
  std::string token;    ///< bearer token ("" = none)
  int max_retries = 5;  ///< retries after the first attempt, for network errors and 5xx
  double backoff_initial_s = 0.05, backoff_max_s = 2.0;  ///< doubled per retry, capped
  double timeout_s = 30;                                 ///< connect and per-read timeout (seconds)
  std::string ca_cert;  ///< PEM file to verify an HTTPS server with ("" = system store)
};

/// Traffic counters.
struct HttpClientStats {
  uint64_t requests = 0, retries = 0, resumed = 0;  ///< resumed: requests continuing a partial body
  uint64_t body_bytes = 0;                          ///< body bytes received (resumed bytes not re-counted)
};

/// A worker's client. Thread-safe (one request at a time per client; use one client per thread for
/// parallel fetches).
class PatchClient : public PatchSource {
 public:
  explicit PatchClient(HttpClientOptions options);
  ~PatchClient() override;

  VersionHead head() override;
  /// Retried with exponential backoff on network errors and 5xx; a cut body is resumed with
  /// "Range: bytes=<received>-" as long as the ETag is unchanged. Throws VersionGoneError (410),
  /// TransportError (other 4xx, or retries exhausted).
  std::vector<uint8_t> patch(uint64_t from, uint64_t to) override;
  /// The anchor at `version`, or the newest for kLatestAnchor (UINT64_MAX). Same retry/resume rules.
  std::vector<uint8_t> anchor(uint64_t version) override;
  void confirm(const std::string& worker_id, uint64_t version, uint64_t root_hash) override;

  HttpClientStats stats() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace pulse::sync
