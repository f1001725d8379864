// Raw loopback sockets for the hostile-client tests: exact bytes out (slow, idle, malformed), the raw
// answer back. Linux only, 127.0.0.1 only; every socket closes with its owner.
#pragma once
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <stdexcept>
#include <string>
#include <utility>

namespace pulse::test {

/// A connected loopback TCP socket, closed on destruction.
struct RawSocket {
  int fd = -1;
  explicit RawSocket(int port) {
    fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd < 0 || ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0)
      throw std::runtime_error("raw socket: cannot connect to 127.0.0.1:" + std::to_string(port));
  }
  RawSocket(RawSocket&& o) noexcept : fd(o.fd) { o.fd = -1; }
  RawSocket& operator=(RawSocket&& o) noexcept {
    std::swap(fd, o.fd);
    return *this;
  }
  RawSocket(const RawSocket&) = delete;
  ~RawSocket() {
    if (fd >= 0) ::close(fd);
  }
  bool send(const std::string& bytes) const {
    return ::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(bytes.size());
  }
  /// Everything the server sends until it closes, or until `timeout_s` passed.
  std::string read_all(double timeout_s) const {
    std::string out;
    const auto end =
        std::chrono::steady_clock::now() + std::chrono::milliseconds(static_cast<int>(timeout_s * 1000));
    char buf[4096];
    for (;;) {
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(end - std::chrono::steady_clock::now())
              .count();
      if (left <= 0) return out;
      pollfd p{fd, POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(left)) <= 0) return out;
      const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
      if (n <= 0) return out;
      out.append(buf, static_cast<size_t>(n));
    }
  }
};

/// The status code of a raw HTTP answer ("HTTP/1.1 408 ..."), 0 when none.
inline int raw_status(const std::string& answer) {
  if (answer.rfind("HTTP/1.", 0) != 0 || answer.size() < 12) return 0;
  return std::stoi(answer.substr(9, 3));
}

/// The value of header `name` in a raw answer ("" when absent); names compared exactly.
inline std::string raw_header(const std::string& answer, const std::string& name) {
  const size_t at = answer.find("\r\n" + name + ": ");
  if (at == std::string::npos) return "";
  const size_t from = at + 4 + name.size();
  return answer.substr(from, answer.find("\r\n", from) - from);
}

/// The body of a raw answer (after the head).
inline std::string raw_body(const std::string& answer) {
  const size_t at = answer.find("\r\n\r\n");
  return at == std::string::npos ? "" : answer.substr(at + 4);
}

/// True when every byte of `s` is printable ASCII.
inline bool printable(const std::string& s) {
  for (unsigned char c : s)
    if (c < 0x20 || c > 0x7e) return false;
  return true;
}

}  // namespace pulse::test
