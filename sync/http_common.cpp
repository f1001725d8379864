// Bearer tokens, error answers and the retry loop shared by every pulse HTTP server and client
// (sync/http_common.h).
#include "sync/http_common.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <stdexcept>
#include <thread>

#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "sync/httplib_config.h"
#include "sync/transport_source.h"

namespace pulse::sync {

namespace {

std::string trim(const std::string& s) {
  size_t b = 0, e = s.size();
  while (b < e && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1]))) --e;
  return s.substr(b, e - b);
}

}  // namespace

bool constant_time_equal(const std::string& a, const std::string& b) {
  const size_t n = std::max(a.size(), b.size());
  // volatile: keeps the compiler from turning the loop into an early-exit comparison.
  volatile unsigned diff = a.size() == b.size() ? 0u : 1u;
  for (size_t i = 0; i < n; ++i) {
    const unsigned char x = i < a.size() ? static_cast<unsigned char>(a[i]) : 0;
    const unsigned char y = i < b.size() ? static_cast<unsigned char>(b[i]) : 0;
    diff = diff | static_cast<unsigned>(x ^ y);
  }
  return diff == 0;
}

bool bearer_token_matches(const std::string& authorization, const std::string& expected_token) {
  if (expected_token.empty()) return true;
  return constant_time_equal(authorization, "Bearer " + expected_token);
}

bool authorize_bearer(const httplib::Request& req, httplib::Response& res,
                      const std::string& expected_token) {
  if (bearer_token_matches(req.get_header_value("Authorization"), expected_token)) return true;
  res.set_header("WWW-Authenticate", "Bearer realm=\"pulse\"");
  set_error_response(
      res, 401,
      req.has_header("Authorization") ? "wrong bearer token" : "missing 'Authorization: Bearer' header");
  return false;
}

std::string load_token(const std::string& env_var, const std::string& file) {
  if (!env_var.empty()) {
    const char* v = std::getenv(env_var.c_str());
    if (v != nullptr && !trim(v).empty()) return trim(v);
  }
  if (file.empty()) return "";
  std::ifstream in(file);
  if (!in) throw std::runtime_error("cannot read token file '" + file + "'");
  std::string line;
  std::getline(in, line);
  line = trim(line);
  if (line.empty()) throw std::runtime_error("token file '" + file + "' is empty (first line)");
  return line;
}

void listen_exclusively(httplib::Server& server) {
  server.set_socket_options([](socket_t sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, reinterpret_cast<void*>(&yes), sizeof(yes));
  });
}

std::string bind_failure_reason(const std::string& host, int port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* found = nullptr;
  const std::string service = std::to_string(port);
  if (const int rc = ::getaddrinfo(host.c_str(), service.c_str(), &hints, &found); rc != 0)
    return "host '" + host + "' does not resolve: " + ::gai_strerror(rc);
  std::string reason;
  for (const addrinfo* a = found; a; a = a->ai_next) {
    const int fd = ::socket(a->ai_family, a->ai_socktype, a->ai_protocol);
    if (fd < 0) {
      reason = std::strerror(errno);
      continue;
    }
    int yes = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
    const bool bound = ::bind(fd, a->ai_addr, a->ai_addrlen) == 0;
    if (!bound) reason = std::strerror(errno);
    ::close(fd);
    if (bound) {
      reason.clear();
      break;
    }
  }
  ::freeaddrinfo(found);
  return reason;
}

bool parse_decimal_u64(const std::string& text, uint64_t& out) {
  if (text.empty() || text.size() > 20) return false;
  uint64_t v = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return false;
    const auto d = static_cast<uint64_t>(c - '0');
    if (v > (UINT64_MAX - d) / 10) return false;
    v = v * 10 + d;
  }
  out = v;
  return true;
}

std::string printable_ascii(const std::string& text, size_t max_bytes, bool keep_line_breaks) {
  std::string out;
  out.reserve(std::min(text.size(), max_bytes) + 32);
  size_t i = 0;
  for (; i < text.size() && out.size() < max_bytes; ++i) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    if (keep_line_breaks && c == '\n') {
      out += '\n';
    } else if (c == '\r' || c == '\n' || c == '\t') {
      out += ' ';
    } else if (c < 0x20 || c > 0x7e) {
      char hex[8];
      std::snprintf(hex, sizeof hex, "\\x%02X", c);
      out += hex;
    } else {
      out += static_cast<char>(c);
    }
  }
  if (i < text.size()) out += "... (" + std::to_string(text.size()) + " bytes)";
  return out;
}

void set_error_response(httplib::Response& res, int status, const std::string& message) {
  res.status = status;
  // An earlier answer's header (e.g. a handler's error before the exception handler's) would go out too.
  res.headers.erase("X-Pulse-Error");
  res.set_header("X-Pulse-Error", printable_ascii(message, 1000));
  res.set_content(nlohmann::json{{"error", printable_ascii(message, 4000, true)}}.dump(), "application/json");
}

std::string server_message(const std::string& body) {
  try {
    const auto j = nlohmann::json::parse(body);
    if (j.is_object() && j.contains("error") && j["error"].is_string()) return j["error"].get<std::string>();
  } catch (const std::exception&) {
  }
  return body.substr(0, 300);
}

double backoff_seconds(const RetryPolicy& policy, int retry) {
  double s = std::max(0.0, policy.backoff_initial_s);
  for (int i = 0; i < retry && s < policy.backoff_max_s; ++i) s *= 2;
  return std::min(s, policy.backoff_max_s);
}

bool retryable_status(int status) {
  return status >= 500 || status == 408 || status == 429;
}

void retry_loop(const RetryPolicy& policy, const std::string& url, const std::string& route,
                const std::function<AttemptOutcome()>& attempt, RetryCounters* counters) {
  for (int n = 0;; ++n) {
    if (counters) ++counters->attempts;
    const AttemptOutcome out = attempt();
    if (out.done) return;
    const bool network = out.status == 0;
    if (!network && !out.retry && !retryable_status(out.status)) {
      const std::string msg = url + " " + route + ": HTTP " + std::to_string(out.status) + ": " + out.detail;
      if (out.status == 410) throw VersionGoneError(out.status, msg);
      throw TransportError(out.status, msg);
    }
    if (n >= policy.max_retries) {
      const std::string last =
          network ? out.detail : "HTTP " + std::to_string(out.status) + ": " + out.detail;
      throw TransportError(
          out.status, url + " " + route + " failed after " + std::to_string(n + 1) + " attempts: " + last);
    }
    if (counters) ++counters->retries;
    std::this_thread::sleep_for(std::chrono::duration<double>(backoff_seconds(policy, n)));
  }
}

httplib::Result request_with_retries(const RetryPolicy& policy, const std::string& url,
                                     const std::string& route,
                                     const std::function<httplib::Result()>& request,
                                     RetryCounters* counters) {
  httplib::Result res(nullptr, httplib::Error::Unknown);
  retry_loop(
      policy, url, route,
      [&] {
        res = request();
        AttemptOutcome out;
        if (!res) {
          out.detail = httplib::to_string(res.error());
        } else {
          out.status = res->status;
          out.done = res->status < 400;
          if (!out.done) out.detail = server_message(res->body);
        }
        return out;
      },
      counters);
  return res;
}

}  // namespace pulse::sync
