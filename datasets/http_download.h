// One HTTP(S) GET into memory (cpp-httplib client; HTTPS through OpenSSL with the system CA store;
// redirects followed), for `pulse data fetch`.
#pragma once
#include <string>

namespace pulse::datasets {

/// The body of `url` ("https://host[:port]/path" or "http://..."). connect_timeout_s bounds the connection
/// (an unreachable host or a machine without network fails within it, usually at once: no DNS, refused),
/// read_timeout_s each read. Throws std::runtime_error "cannot download <url>: <reason>" on a connection
/// error, an HTTP status other than 200 (after redirects) or a malformed URL.
std::string http_get(const std::string& url, double connect_timeout_s = 10, double read_timeout_s = 120);

}  // namespace pulse::datasets
