// The accept gate of the plain-HTTP servers (sync/http_gate.h): one poll() loop holds the connections
// until their heads are complete and authorized; the request pool reads bodies and runs httplib's routing.
#include "sync/http_gate.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <list>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "sync/http_common.h"

namespace pulse::sync {

namespace {

using Clock = std::chrono::steady_clock;

constexpr double kDrainSeconds = 1.0;         // how long a refused client may keep sending
constexpr size_t kDrainMaxBytes = 64u << 20;  // ... and how much of it we read and discard
constexpr size_t kReadChunkBytes = 64u << 10;

int millis(double seconds) {
  return static_cast<int>(std::min(3.6e6, std::max(0.0, std::ceil(seconds * 1000))));
}

std::string peer_ip(int fd) {
  sockaddr_storage a{};
  socklen_t n = sizeof a;
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&a), &n) != 0) return "?";
  char text[INET6_ADDRSTRLEN] = "?";
  if (a.ss_family == AF_INET)
    ::inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(&a)->sin_addr, text, sizeof text);
  else if (a.ss_family == AF_INET6)
    ::inet_ntop(AF_INET6, &reinterpret_cast<sockaddr_in6*>(&a)->sin6_addr, text, sizeof text);
  return text;
}

void ip_and_port(int fd, bool peer, std::string& ip, int& port) {
  sockaddr_storage a{};
  socklen_t n = sizeof a;
  const int rc = peer ? ::getpeername(fd, reinterpret_cast<sockaddr*>(&a), &n)
                      : ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &n);
  if (rc != 0) return;
  char text[INET6_ADDRSTRLEN] = "";
  if (a.ss_family == AF_INET) {
    const auto* v4 = reinterpret_cast<sockaddr_in*>(&a);
    ::inet_ntop(AF_INET, &v4->sin_addr, text, sizeof text);
    port = ntohs(v4->sin_port);
  } else if (a.ss_family == AF_INET6) {
    const auto* v6 = reinterpret_cast<sockaddr_in6*>(&a);
    ::inet_ntop(AF_INET6, &v6->sin6_addr, text, sizeof text);
    port = ntohs(v6->sin6_port);
  }
  ip = text;
}

/// Sends all of `bytes` within `timeout_s` (the socket is non-blocking); false when cut or too slow.
bool send_all(int fd, const std::string& bytes, double timeout_s) {
  const auto deadline =
      Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeout_s));
  for (size_t off = 0; off < bytes.size();) {
    const ssize_t n = ::send(fd, bytes.data() + off, bytes.size() - off, MSG_NOSIGNAL);
    if (n > 0) {
      off += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) return false;
    const double left = std::chrono::duration<double>(deadline - Clock::now()).count();
    pollfd p{fd, POLLOUT, 0};
    if (left <= 0 || ::poll(&p, 1, millis(left)) <= 0) return false;
  }
  return true;
}

const char* reason_phrase(int status) {
  switch (status) {
    case 400:
      return "Bad Request";
    case 401:
      return "Unauthorized";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 408:
      return "Request Timeout";
    case 411:
      return "Length Required";
    case 413:
      return "Payload Too Large";
    case 431:
      return "Request Header Fields Too Large";
    case 503:
      return "Service Unavailable";
    default:
      return "Error";
  }
}

/// A complete error answer: JSON body {"error": message}, the message (ASCII) in X-Pulse-Error, and
/// Connection: close. `extra` holds further header lines, each ending in CRLF.
std::string error_answer(int status, const std::string& message, const std::string& extra = "") {
  const std::string body = nlohmann::json{{"error", printable_ascii(message, 4000, true)}}.dump();
  return "HTTP/1.1 " + std::to_string(status) + " " + reason_phrase(status) +
         "\r\nContent-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) +
         "\r\nConnection: close\r\nX-Pulse-Error: " + printable_ascii(message, 1000) + "\r\n" + extra +
         "\r\n" + body;
}

std::string trim(const std::string& s) {
  size_t b = 0, e = s.size();
  while (b < e && (s[b] == ' ' || s[b] == '\t')) ++b;
  while (e > b && (s[e - 1] == ' ' || s[e - 1] == '\t')) --e;
  return s.substr(b, e - b);
}

bool iequals(const std::string& a, const char* b) {
  const size_t n = std::strlen(b);
  if (a.size() != n) return false;
  for (size_t i = 0; i < n; ++i)
    if (std::tolower(static_cast<unsigned char>(a[i])) != std::tolower(static_cast<unsigned char>(b[i])))
      return false;
  return true;
}

/// Runs the accept loop's task (GatedServer::process_and_close_socket, which only hands the socket to the
/// gate) on the accept thread itself: no pool thread is taken before the head is authorized.
struct InlineQueue : httplib::TaskQueue {
  void enqueue(std::function<void()> fn) override { fn(); }
  void shutdown() override {}
};

/// What httplib's process_request reads and writes: the buffered request (head + body, read by the request
/// thread) as input, the socket as output.
class BufferedRequestStream : public httplib::Stream {
 public:
  BufferedRequestStream(int fd, std::string input, double write_timeout_s)
      : fd_(fd), in_(std::move(input)), write_timeout_s_(write_timeout_s) {}
  bool is_readable() const override { return pos_ < in_.size(); }
  bool is_writable() const override {
    pollfd p{fd_, POLLOUT, 0};
    return ::poll(&p, 1, millis(write_timeout_s_)) > 0 && (p.revents & (POLLERR | POLLHUP | POLLNVAL)) == 0;
  }
  ssize_t read(char* ptr, size_t size) override {
    const size_t n = std::min(size, in_.size() - pos_);
    std::memcpy(ptr, in_.data() + pos_, n);
    pos_ += n;
    return static_cast<ssize_t>(n);
  }
  ssize_t write(const char* ptr, size_t size) override {
    if (!is_writable()) return -1;
    const ssize_t n = ::send(fd_, ptr, size, MSG_NOSIGNAL);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return 0;
    return n;
  }
  void get_remote_ip_and_port(std::string& ip, int& port) const override { ip_and_port(fd_, true, ip, port); }
  void get_local_ip_and_port(std::string& ip, int& port) const override { ip_and_port(fd_, false, ip, port); }
  // httplib consults socket() only to refuse descriptors select() cannot watch; this stream polls.
  socket_t socket() const override { return fd_ < FD_SETSIZE ? fd_ : 0; }

 private:
  int fd_;
  std::string in_;
  size_t pos_ = 0;
  double write_timeout_s_;
};

}  // namespace

// ---------------------------------------------------------------------------------------------------------
struct GatedServer::Gate {
  /// A connection at the gate: reading its head, or draining after a refusal.
  struct Conn {
    int fd = -1;
    std::string ip;
    Clock::time_point deadline;
    std::string buf;
    bool draining = false;
    size_t drained = 0;
    bool closed = false;
  };
  /// An authorized request handed to the pool.
  struct Passed {
    int fd = -1;
    std::string head;     ///< request line and headers, CRLF CRLF included (Expect removed)
    std::string body;     ///< the body bytes read with the head
    uint64_t length = 0;  ///< Content-Length
    bool expect_continue = false;
  };

  GatedServer& server;
  const std::string token;
  const std::vector<GateRoute> routes;
  const GateOptions opt;
  std::unique_ptr<httplib::ThreadPool> pool;
  int wake[2] = {-1, -1};
  std::mutex mu;  // guards inbox, stopping
  std::vector<int> inbox;
  bool stopping = false;
  bool shut = false;
  std::thread thread;
  mutable std::mutex stats_mu;
  GateStats stats;
  std::list<Conn> conns;  // the gate thread's, oldest first

  Gate(GatedServer& s, std::string t, std::vector<GateRoute> r, GateOptions o)
      : server(s), token(std::move(t)), routes(std::move(r)), opt(o) {
    if (::pipe(wake) != 0) throw std::runtime_error(std::string("http gate: pipe: ") + std::strerror(errno));
    for (int fd : wake) ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
    pool = std::make_unique<httplib::ThreadPool>(std::max<size_t>(1, opt.threads));
    thread = std::thread([this] { loop(); });
  }

  void count(uint64_t GateStats::*field) {
    std::lock_guard<std::mutex> lock(stats_mu);
    stats.*field += 1;
  }

  std::string route_list() const {
    std::string out;
    for (const auto& r : routes)
      for (const auto& m : r.methods)
        out += (out.empty() ? "" : ", ") + m + " " + r.path + (r.prefix ? "..." : "");
    return out;
  }

  // Accept thread.
  void admit(int fd) {
    ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
    std::lock_guard<std::mutex> lock(mu);
    if (stopping) {
      ::close(fd);
      return;
    }
    inbox.push_back(fd);
    const char b = 1;
    [[maybe_unused]] ssize_t n = ::write(wake[1], &b, 1);
  }

  void close_conn(Conn& c) {
    if (c.closed) return;
    ::close(c.fd);
    c.closed = true;
  }

  /// Answers a refusal and lets the client finish sending (drain) before the close.
  void refuse(Conn& c, int status, const std::string& message, const std::string& extra = "") {
    count(&GateStats::refused);
    if (status == 401) count(&GateStats::unauthorized);
    if (status == 404) count(&GateStats::not_found);
    const std::string answer = error_answer(status, message, extra);
    [[maybe_unused]] ssize_t n = ::send(c.fd, answer.data(), answer.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    ::shutdown(c.fd, SHUT_WR);
    c.draining = true;
    c.buf.clear();
    c.buf.shrink_to_fit();
    c.deadline = Clock::now() +
                 std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(kDrainSeconds));
  }

  void evict(Conn& c, const std::string& why) {
    if (!c.draining) {
      count(&GateStats::evicted);
      count(&GateStats::refused);
      const std::string answer = error_answer(503, why);
      [[maybe_unused]] ssize_t n = ::send(c.fd, answer.data(), answer.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    }
    close_conn(c);
  }

  void add(int fd) {
    count(&GateStats::accepted);
    Conn c;
    c.fd = fd;
    c.ip = peer_ip(fd);
    c.deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                    std::chrono::duration<double>(opt.head_timeout_s));
    auto live = [](const Conn& x) { return !x.closed; };
    size_t same_ip = 0, all = 0;
    for (const auto& x : conns) {
      if (!live(x)) continue;
      ++all;
      same_ip += x.ip == c.ip ? 1 : 0;
    }
    // The oldest go first: a prompt client's head arrives with its connection, a stalling one's never.
    for (auto it = conns.begin(); it != conns.end() && same_ip >= std::max<size_t>(1, opt.max_pending_per_ip);
         ++it) {
      if (it->closed || it->ip != c.ip) continue;
      evict(*it, "too many connections from " + c.ip + " waiting to send their request head (" +
                     std::to_string(opt.max_pending_per_ip) + " at most): the oldest is closed");
      --same_ip;
      --all;
    }
    for (auto it = conns.begin(); it != conns.end() && all >= std::max<size_t>(1, opt.max_pending); ++it) {
      if (it->closed) continue;
      evict(*it, "too many connections waiting to send their request head (" +
                     std::to_string(opt.max_pending) + " at most): the oldest is closed");
      --all;
    }
    conns.push_back(std::move(c));
  }

  void on_readable(Conn& c) {
    char chunk[16 * 1024];
    if (c.draining) {
      for (;;) {
        const ssize_t n = ::recv(c.fd, chunk, sizeof chunk, 0);
        if (n > 0) {
          c.drained += static_cast<size_t>(n);
          if (c.drained > kDrainMaxBytes) return close_conn(c);
          continue;
        }
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return;
        return close_conn(c);  // end of stream or error
      }
    }
    const size_t cap = opt.max_head_bytes + 4;  // room for the CRLF CRLF that ends a head of the limit
    const size_t before = c.buf.size();
    while (c.buf.size() <= cap) {
      const size_t want = std::min(sizeof chunk, cap + 1 - c.buf.size());
      const ssize_t n = ::recv(c.fd, chunk, want, 0);
      if (n > 0) {
        c.buf.append(chunk, static_cast<size_t>(n));
        continue;
      }
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) break;
      return close_conn(c);  // the client left before its head was complete
    }
    const size_t from = before >= 3 ? before - 3 : 0;
    const size_t end = c.buf.find("\r\n\r\n", from);
    if (end != std::string::npos && end + 4 <= cap) return decide(c, end + 4);
    if (c.buf.size() > opt.max_head_bytes)
      refuse(c, 431,
             "request head (request line and headers) over " + std::to_string(opt.max_head_bytes) + " bytes");
  }

  /// The head is buf[0, head_end): check it and refuse it or pass it to the request pool.
  void decide(Conn& c, size_t head_end) {
    for (size_t i = 0; i + 4 < head_end; ++i) {
      const unsigned char b = static_cast<unsigned char>(c.buf[i]);
      if ((b < 0x20 || b > 0x7e) && b != '\t' && b != '\r' && b != '\n') {
        char hex[8];
        std::snprintf(hex, sizeof hex, "0x%02X", b);
        return refuse(c, 400,
                      std::string("request head: byte ") + hex + " at offset " + std::to_string(i) +
                          " is not printable ASCII");
      }
    }
    std::vector<std::string> lines;
    for (size_t pos = 0; pos < head_end - 2;) {
      const size_t eol = c.buf.find("\r\n", pos);
      lines.push_back(c.buf.substr(pos, eol - pos));
      pos = eol + 2;
    }
    // Request line: METHOD SP TARGET SP HTTP/1.x
    const std::string& rl = lines.front();
    const size_t s1 = rl.find(' '), s2 = s1 == std::string::npos ? s1 : rl.find(' ', s1 + 1);
    std::string method, target, version;
    if (s2 != std::string::npos) {
      method = rl.substr(0, s1);
      target = rl.substr(s1 + 1, s2 - s1 - 1);
      version = rl.substr(s2 + 1);
    }
    const bool method_ok = !method.empty() && std::all_of(method.begin(), method.end(),
                                                          [](char ch) { return ch >= 'A' && ch <= 'Z'; });
    if (!method_ok || target.empty() || target[0] != '/' || (version != "HTTP/1.1" && version != "HTTP/1.0"))
      return refuse(c, 400, "malformed request line '" + rl.substr(0, 200) + "'");
    std::string authorization, transfer_encoding, content_length;
    bool has_auth = false, has_length = false, expect_continue = false;
    std::string head = rl + "\r\n";
    for (size_t i = 1; i < lines.size(); ++i) {
      const std::string& line = lines[i];
      const size_t colon = line.find(':');
      if (colon == std::string::npos || colon == 0 || line[0] == ' ' || line[0] == '\t' ||
          line.find_first_of(" \t") < colon)
        return refuse(c, 400,
                      "malformed header line " + std::to_string(i) + " '" + line.substr(0, 100) + "'");
      const std::string name = line.substr(0, colon), value = trim(line.substr(colon + 1));
      if (iequals(name, "Expect")) {
        // Answered here (100 Continue before the body is read); httplib must not answer it again.
        expect_continue = iequals(value, "100-continue");
        continue;
      }
      if (iequals(name, "Authorization") && !has_auth) {
        authorization = value;
        has_auth = true;
      } else if (iequals(name, "Transfer-Encoding")) {
        transfer_encoding = value;
      } else if (iequals(name, "Content-Length")) {
        if (has_length && value != content_length)
          return refuse(c, 400, "two different Content-Length headers");
        content_length = value;
        has_length = true;
      }
      head += line + "\r\n";
    }
    head += "\r\n";
    if (!bearer_token_matches(authorization, token))
      return refuse(c, 401, has_auth ? "wrong bearer token" : "missing 'Authorization: Bearer' header",
                    "WWW-Authenticate: Bearer realm=\"pulse\"\r\n");
    const std::string path = target.substr(0, target.find('?'));
    const GateRoute* route = nullptr;
    for (const auto& r : routes)
      if (r.prefix ? path.compare(0, r.path.size(), r.path) == 0 : path == r.path) {
        route = &r;
        break;
      }
    if (!route)
      return refuse(c, 404,
                    "unknown route " + method + " " + path.substr(0, 200) + "; routes: " + route_list());
    if (std::find(route->methods.begin(), route->methods.end(), method) == route->methods.end()) {
      std::string allow;
      for (const auto& m : route->methods) allow += (allow.empty() ? "" : ", ") + m;
      return refuse(c, 405,
                    "method " + method + " not allowed on " + route->path + " (allowed: " + allow + ")",
                    "Allow: " + allow + "\r\n");
    }
    if (!transfer_encoding.empty())
      return refuse(c, 411,
                    "Transfer-Encoding '" + transfer_encoding.substr(0, 50) +
                        "' is not accepted: send the body with a Content-Length");
    uint64_t length = 0;
    if (has_length && !parse_decimal_u64(content_length, length))
      return refuse(c, 400, "Content-Length '" + content_length.substr(0, 50) + "' is not a byte count");
    if (length > route->max_body_bytes)
      return refuse(c, 413,
                    "request body of " + std::to_string(length) + " bytes is over the limit of " +
                        std::to_string(route->max_body_bytes) + " bytes for " + method + " " + route->path);
    Passed p;
    p.fd = c.fd;
    p.head = std::move(head);
    p.length = length;
    p.expect_continue = expect_continue;
    p.body = c.buf.substr(head_end, static_cast<size_t>(std::min<uint64_t>(length, c.buf.size() - head_end)));
    c.closed = true;  // the request thread owns the socket now
    count(&GateStats::passed);
    auto shared = std::make_shared<Passed>(std::move(p));
    pool->enqueue([this, shared] { serve(*shared); });
  }

  // Request thread: reads the rest of the body, then lets httplib route the buffered request.
  void serve(Passed& p) {
    if (p.body.size() < p.length) {
      if (p.expect_continue && !send_all(p.fd, "HTTP/1.1 100 Continue\r\n\r\n", opt.write_timeout_s)) {
        ::close(p.fd);
        return;
      }
      p.body.reserve(static_cast<size_t>(p.length));
      std::vector<char> chunk(kReadChunkBytes);
      while (p.body.size() < p.length) {
        pollfd pf{p.fd, POLLIN, 0};
        const int ready = ::poll(&pf, 1, millis(opt.body_timeout_s));
        if (ready == 0) {
          count(&GateStats::body_timeouts);
          send_all(p.fd,
                   error_answer(408, "request body: " + std::to_string(p.body.size()) + " of " +
                                         std::to_string(p.length) +
                                         " bytes (Content-Length) arrived, then none for " +
                                         std::to_string(opt.body_timeout_s) + " s"),
                   opt.write_timeout_s);
          ::shutdown(p.fd, SHUT_WR);
          ::close(p.fd);
          return;
        }
        const size_t want = static_cast<size_t>(std::min<uint64_t>(chunk.size(), p.length - p.body.size()));
        const ssize_t n = ::recv(p.fd, chunk.data(), want, 0);
        if (n > 0) {
          p.body.append(chunk.data(), static_cast<size_t>(n));
        } else if (ready < 0 || n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
          ::close(p.fd);  // the client left
          return;
        }
      }
    }
    BufferedRequestStream strm(p.fd, p.head + p.body, opt.write_timeout_s);
    p.body.clear();
    p.body.shrink_to_fit();
    bool connection_closed = false;
    server.process_request(strm, true, connection_closed, nullptr);
    ::shutdown(p.fd, SHUT_WR);
    ::close(p.fd);
  }

  void loop() {
    std::vector<pollfd> fds;
    std::vector<std::list<Conn>::iterator> at;
    for (;;) {
      std::vector<int> fresh;
      {
        std::lock_guard<std::mutex> lock(mu);
        if (stopping) break;
        fresh.swap(inbox);
      }
      for (int fd : fresh) add(fd);
      conns.remove_if([](const Conn& x) { return x.closed; });
      fds.assign(1, pollfd{wake[0], POLLIN, 0});
      at.clear();
      auto now = Clock::now();
      double wait_s = 1.0;
      for (auto it = conns.begin(); it != conns.end(); ++it) {
        fds.push_back(pollfd{it->fd, POLLIN, 0});
        at.push_back(it);
        wait_s = std::min(wait_s, std::chrono::duration<double>(it->deadline - now).count());
      }
      ::poll(fds.data(), fds.size(), millis(wait_s));
      if (fds[0].revents != 0) {
        char drain[64];
        while (::read(wake[0], drain, sizeof drain) > 0) {
        }
      }
      for (size_t i = 0; i < at.size(); ++i)
        if (fds[i + 1].revents != 0 && !at[i]->closed) on_readable(*at[i]);
      now = Clock::now();
      for (auto& c : conns) {
        if (c.closed || c.deadline > now) continue;
        if (c.draining) {
          close_conn(c);
        } else {
          count(&GateStats::timed_out);
          refuse(c, 408,
                 "request head not complete within " + std::to_string(opt.head_timeout_s) + " s (" +
                     std::to_string(c.buf.size()) + " bytes arrived)");
        }
      }
    }
    for (auto& c : conns) close_conn(c);
    conns.clear();
    std::lock_guard<std::mutex> lock(mu);
    for (int fd : inbox) ::close(fd);
    inbox.clear();
  }

  void shutdown() {
    {
      std::lock_guard<std::mutex> lock(mu);
      if (shut) return;
      shut = true;
      stopping = true;
      const char b = 1;
      [[maybe_unused]] ssize_t n = ::write(wake[1], &b, 1);
    }
    if (thread.joinable()) thread.join();
    pool->shutdown();
    for (int& fd : wake) {
      ::close(fd);
      fd = -1;
    }
  }
};

GatedServer::GatedServer(std::string token, std::vector<GateRoute> routes, GateOptions options)
    : gate_(std::make_unique<Gate>(*this, std::move(token), std::move(routes), options)) {
  new_task_queue = [] { return new InlineQueue; };
  auto usec = [](double s) {
    return static_cast<time_t>((s - static_cast<double>(static_cast<time_t>(s))) * 1e6);
  };
  set_write_timeout(static_cast<time_t>(options.write_timeout_s), usec(options.write_timeout_s));
}

GatedServer::~GatedServer() {
  shutdown();
}

void GatedServer::shutdown() {
  stop();
  gate_->shutdown();
}

GateStats GatedServer::stats() const {
  std::lock_guard<std::mutex> lock(gate_->stats_mu);
  return gate_->stats;
}

std::string GatedServer::route_list() const {
  return gate_->route_list();
}

bool GatedServer::process_and_close_socket(socket_t sock) {
  gate_->admit(sock);
  return true;
}

}  // namespace pulse::sync
