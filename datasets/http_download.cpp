// HTTP(S) GET with cpp-httplib (datasets/http_download.h).
#include "datasets/http_download.h"

#include <httplib.h>

#include <regex>
#include <stdexcept>

namespace pulse::datasets {

std::string http_get(const std::string& url, double connect_timeout_s, double read_timeout_s) {
  static const std::regex re(R"(^(https?://[^/]+)(/.*)?$)");
  std::smatch m;
  if (!std::regex_match(url, m, re))
    throw std::runtime_error("cannot download " + url + ": not an http(s) URL");
  const std::string path = m[2].matched ? std::string(m[2]) : "/";
  httplib::Client cli(m[1]);
  if (!cli.is_valid())
    throw std::runtime_error("cannot download " + url + ": unsupported URL (no TLS support?)");
  cli.set_follow_location(true);
  auto secs = [](double s, time_t* sec, time_t* usec) {
    *sec = static_cast<time_t>(s);
    *usec = static_cast<time_t>((s - static_cast<double>(*sec)) * 1e6);
  };
  time_t sec = 0, usec = 0;
  secs(connect_timeout_s, &sec, &usec);
  cli.set_connection_timeout(sec, usec);
  secs(read_timeout_s, &sec, &usec);
  cli.set_read_timeout(sec, usec);
  auto res = cli.Get(path);
  if (!res) {
    const httplib::Error err = res.error();
    throw std::runtime_error("cannot download " + url + ": " +
                             (err == httplib::Error::Connection
                                  ? std::string("could not connect (no network, no DNS, or refused)")
                                  : httplib::to_string(err)));
  }
  if (res->status != 200)
    throw std::runtime_error("cannot download " + url + ": HTTP status " + std::to_string(res->status));
  return std::move(res->body);
}

}  // namespace pulse::datasets
