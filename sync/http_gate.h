// The accept gate in front of every plain-HTTP pulse server (the patch server, sync/transport_http.h, and
// the trainer's control server, app/wire/control.h): no client without the bearer token can hold one of
// the request threads.
//
// cpp-httplib 0.11 hands each accepted socket to a pool thread that then waits for the request head, read
// timeout by read timeout, and for keep-alive requests after it: a few sockets that send a byte now and then
// hold the whole (small) pool. GatedServer instead keeps every new connection in one poll() loop (the
// gate thread) until its head is complete, then checks, in this order:
//   the head within GateOptions::max_head_bytes (431) and head_timeout_s of the accept (408); printable
//   ASCII only (400); a well-formed request line (400); the bearer token (401); a known route (404); a
//   method the route takes (405, with Allow); no Transfer-Encoding (411); Content-Length within the route's
//   max_body_bytes (413).
// The gate answers refusals itself (JSON {"error": ...} bodies, ASCII X-Pulse-Error headers, Connection:
// close) and closes after draining what the client still sends (for up to a second), so that the client
// reads the answer instead of a reset. Only authorized heads reach the request pool, whose thread reads the
// body (an answer 408 when no byte comes for body_timeout_s) and runs httplib's routing on the buffered
// request: one request per connection (no keep-alive: an idle connection never holds a thread).
// Unauthorized connections pending at the gate are capped per client IP and in all; beyond a cap the
// oldest pending one is closed (503), so a flood cannot keep a new, prompt client out.
//
// TLS servers (httplib::SSLServer) are not gated: their heads are encrypted below httplib.
#pragma once
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "sync/httplib_config.h"

namespace pulse::sync {

/// One route a gated server takes: `path` exactly (or every path starting with it when `prefix`), with
/// these methods ("GET", "POST") and at most `max_body_bytes` of request body (Content-Length).
struct GateRoute {
  std::string path;
  bool prefix = false;
  std::vector<std::string> methods;
  uint64_t max_body_bytes = 0;
};

/// Limits of the gate and of the request pool behind it.
struct GateOptions {
  double head_timeout_s = 5;          ///< the whole request head must arrive within this (408 otherwise)
  size_t max_head_bytes = 16 * 1024;  ///< request line + headers at most (431 beyond)
  size_t max_pending = 256;           ///< connections waiting for their head, in all (oldest closed beyond)
  size_t max_pending_per_ip = 32;     ///< ... from one client IP address
  double body_timeout_s = 30;         ///< an authorized body stalled this long (no byte) gets 408
  double write_timeout_s = 30;        ///< an answer the client does not read for this long is cut
  size_t threads = 8;                 ///< request threads (authorized requests only)
};

/// Counters of the gate since the server started (cumulative).
struct GateStats {
  uint64_t accepted = 0;       ///< connections accepted
  uint64_t passed = 0;         ///< heads that reached the request pool
  uint64_t refused = 0;        ///< answered by the gate (401, 404, 405, 408, 411, 413, 431, 400, 503)
  uint64_t unauthorized = 0;   ///< of those: no or a wrong bearer token (401)
  uint64_t not_found = 0;      ///< of those: unknown routes (404)
  uint64_t timed_out = 0;      ///< of those: heads not complete within head_timeout_s (408)
  uint64_t evicted = 0;        ///< of those: closed to make room for a newer connection (503)
  uint64_t body_timeouts = 0;  ///< authorized bodies that stalled (408 from the request pool)
};

/// A cpp-httplib server behind the gate. Register handlers as on httplib::Server; the routes given here
/// must cover them (a path not listed is 404 at the gate). Do not replace new_task_queue. Call
/// shutdown() (not only stop()) before destruction to stop the gate and join the request threads.
/// Thread-safe as httplib::Server is (stats() from any thread).
class GatedServer : public httplib::Server {
 public:
  /// `token`: the bearer token every request must carry ("" = none); `routes`: what the server takes.
  GatedServer(std::string token, std::vector<GateRoute> routes, GateOptions options);
  ~GatedServer() override;
  GatedServer(const GatedServer&) = delete;
  GatedServer& operator=(const GatedServer&) = delete;

  /// Stops listening, closes the connections pending at the gate and joins the gate and request threads
  /// (a request in progress finishes first). Idempotent.
  void shutdown();

  GateStats stats() const;

  /// The routes as one line for error messages: "GET /v1/head, POST /v1/confirm, ...".
  std::string route_list() const;

 private:
  struct Gate;
  bool process_and_close_socket(socket_t sock) override;

  std::unique_ptr<Gate> gate_;
};

}  // namespace pulse::sync
