// What every pulse HTTP server and client shares (the PULSESync patch server/client in
// sync/transport_http.h and the trainer's control channel in app/wire/control.h): bearer-token loading and a
// constant-time check of it, JSON error answers, and the one retry loop with capped exponential backoff.
//
// Only forward declarations of cpp-httplib here; the functions taking httplib types are defined in
// sync/http_common.cpp, and callers include sync/httplib_config.h to build those objects.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

namespace httplib {
struct Request;
struct Response;
class Result;
class Server;
}  // namespace httplib

namespace pulse::sync {

// ---- authentication ---------------------------------------------------------------------------------------

/// Constant-time equality for secrets such as bearer tokens: every byte of the longer string is compared
/// without early exit, so the time depends only on the two lengths. Thread-safe (pure).
bool constant_time_equal(const std::string& a, const std::string& b);

/// True when `authorization` (the value of an Authorization header, "" when absent) is exactly
/// "Bearer <expected_token>", compared in constant time (constant_time_equal). An empty `expected_token`
/// means authentication is off and always matches. Thread-safe (pure).
bool bearer_token_matches(const std::string& authorization, const std::string& expected_token);

/// The check for a server's pre-routing handler: true when `req` may proceed (bearer_token_matches on its
/// Authorization header). Otherwise fills `res` with 401, "WWW-Authenticate: Bearer realm=\"pulse\"" and
/// the error (set_error_response) "missing 'Authorization: Bearer' header" or "wrong bearer token", and
/// returns false. Thread-safe (touches only `res`).
bool authorize_bearer(const httplib::Request& req, httplib::Response& res, const std::string& expected_token);

/// The bearer token: the value of environment variable `env_var` when set and non-empty, else the first
/// line of `file` (surrounding whitespace trimmed) when `file` is non-empty, else "" (no authentication).
/// Throws std::runtime_error naming the file when it cannot be read or holds an empty token. Thread-safe as
/// std::getenv is (no concurrent setenv).
std::string load_token(const std::string& env_var, const std::string& file);

// ---- listening sockets ------------------------------------------------------------------------------------

/// Makes `server`'s listening socket exclusive: SO_REUSEADDR only (a restarted server rebinds its port while
/// old connections linger in TIME_WAIT), not cpp-httplib's default SO_REUSEPORT, with which a second
/// process could listen on the same port and the kernel would split the clients between the two (two
/// trainers on the default transport.port). Call before binding; bind_to_port then fails when the port is
/// taken. Not thread-safe (configures `server`).
void listen_exclusively(httplib::Server& server);

/// Why a server could not bind host:port, found by trying it again (cpp-httplib reports only false):
/// "host 'x' does not resolve: ...", "Address already in use" (taken), "Cannot assign requested address"
/// (not an address of this machine), ...; "" when the second try succeeds (the port was freed meanwhile).
/// Binds and closes a socket of its own with SO_REUSEADDR, as listen_exclusively's servers do.
/// Thread-safe.
std::string bind_failure_reason(const std::string& host, int port);

/// The body limit of the routes that take small JSON objects (register, heartbeat, confirm): 413 beyond.
inline constexpr uint64_t kMaxSmallBodyBytes = 64 * 1024;

/// Strict decimal uint64 (query parameters, Content-Length): digits only, no sign, no space, no overflow.
/// Thread-safe (pure).
bool parse_decimal_u64(const std::string& text, uint64_t& out);

// ---- error answers ----------------------------------------------------------------------------------------

/// `text` made safe for a header or a log line: bytes outside printable ASCII (controls, 0x7F, non-ASCII
/// and invalid UTF-8 alike) written as \xNN, line breaks as spaces (kept when `keep_line_breaks`, for a
/// JSON string); cut to at most about `max_bytes`, the
/// cut said with "... (N bytes)" so that a huge input is never echoed whole. Thread-safe (pure).
std::string printable_ascii(const std::string& text, size_t max_bytes, bool keep_line_breaks = false);

/// Sets `status`, the body {"error": message} (application/json; the message as printable_ascii, at most
/// about 4000 bytes) and the header X-Pulse-Error (the same, at most about 1000 bytes: httplib applies a
/// request's Range to error bodies too, so a resuming client may only see the header). Replaces an
/// earlier error answer on `res`. Thread-safe (touches only `res`).
void set_error_response(httplib::Response& res, int status, const std::string& message);

/// The text of an error answer: the "error" string of a JSON object body, else the first 300 bytes.
/// Thread-safe (pure).
std::string server_message(const std::string& body);

// ---- retries ----------------------------------------------------------------------------------------------

/// How often and how patiently a client retries.
struct RetryPolicy {
  int max_retries = 5;              ///< retries after the first attempt (0 = one attempt only)
  double backoff_initial_s = 0.05;  ///< wait before the first retry; doubled per retry ...
  double backoff_max_s = 2.0;       ///< ... up to this cap
};

/// Attempts made and retries (backoff waits) taken, accumulated over calls. Not synchronized: one per client.
struct RetryCounters {
  uint64_t attempts = 0, retries = 0;
};

/// Seconds to wait before retry `retry` (0-based): backoff_initial_s * 2^retry, capped at backoff_max_s.
double backoff_seconds(const RetryPolicy& policy, int retry);

/// True for answers worth retrying: 5xx, 408 Request Timeout and 429 Too Many Requests.
bool retryable_status(int status);

/// How one attempt ended, for requests that read the body themselves (see retry_loop).
struct AttemptOutcome {
  bool done = false;   ///< success: the loop returns
  int status = 0;      ///< HTTP status of the answer; 0 = no answer (network error, cut connection)
  std::string detail;  ///< the network error text (status 0) or the server's message (an error answer)
  bool retry = false;  ///< retry even a non-retryable status (the caller reset its own state, e.g. 416)
};

/// The one retry loop. Calls `attempt` until it returns done; an outcome with status 0, a retryable_status
/// or `retry` set is retried after sleeping backoff_seconds (on the calling thread). Throws
///   VersionGoneError(410, "<url> <route>: HTTP 410: <detail>") on 410 Gone,
///   TransportError(status, "<url> <route>: HTTP <status>: <detail>") on any other non-retryable status,
///   TransportError(last status or 0, "<url> <route> failed after <n> attempts: <last error>") once
///     policy.max_retries retries are spent (<last error>: "HTTP <status>: <detail>" or the network error).
/// `route` names the request, e.g. "GET /v1/head". Exceptions from `attempt` propagate unchanged.
/// `counters` (optional) is updated per attempt and per retry. Reentrant; not thread-safe on `counters`.
void retry_loop(const RetryPolicy& policy, const std::string& url, const std::string& route,
                const std::function<AttemptOutcome()>& attempt, RetryCounters* counters = nullptr);

/// retry_loop for a plain httplib request: returns the first answer whose status is below 400 (2xx, 204,
/// 3xx); network errors, 5xx, 408 and 429 are retried; the error detail is server_message(body). Same
/// exceptions and thread safety as retry_loop.
httplib::Result request_with_retries(const RetryPolicy& policy, const std::string& url,
                                     const std::string& route,
                                     const std::function<httplib::Result()>& request,
                                     RetryCounters* counters = nullptr);

}  // namespace pulse::sync
