// cpp-httplib 0.11 as packaged by Debian is split: httplib.h declares, libcpp-httplib.so defines (linked
// through pkg-config cpp-httplib). The library was built with OpenSSL, zlib and brotli, which change class
// layouts in the header, so httplib.h is included only through sync/httplib_config.h.
#include "sync/transport_http.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <map>
#include <mutex>
#include <thread>

#include <xxhash.h>
#include <nlohmann/json.hpp>

#include "sync/hash.h"
#include "sync/http_common.h"
#include "sync/http_gate.h"

#include "sync/httplib_config.h"

namespace pulse::sync {

namespace {

using json = nlohmann::json;

constexpr size_t kSendChunkBytes = 1u << 20;  // bytes handed to the socket per write
constexpr size_t kMaxErrorBodyBytes = 1u << 16;

/// Strict decimal uint64: digits only, no sign, no overflow.
bool parse_u64(const std::string& s, uint64_t& out) {
  if (s.empty() || s.size() > 20) return false;
  uint64_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
    const uint64_t d = static_cast<uint64_t>(c - '0');
    if (v > (UINT64_MAX - d) / 10) return false;
    v = v * 10 + d;
  }
  out = v;
  return true;
}

bool parse_hex64(const std::string& s, uint64_t& out) {
  if (s.empty() || s.size() > 16) return false;
  uint64_t v = 0;
  for (char c : s) {
    int d;
    if (c >= '0' && c <= '9')
      d = c - '0';
    else if (c >= 'a' && c <= 'f')
      d = c - 'a' + 10;
    else if (c >= 'A' && c <= 'F')
      d = c - 'A' + 10;
    else
      return false;
    v = (v << 4) | static_cast<uint64_t>(d);
  }
  out = v;
  return true;
}

std::string etag_of(const std::vector<uint8_t>& bytes) {
  return "\"" + hash_hex(XXH3_64bits(bytes.data(), bytes.size())) + "-" + std::to_string(bytes.size()) + "\"";
}

/// Takes one unit from a fault-injection counter; true when one was left.
bool take_one(std::atomic<int>& counter) {
  int n = counter.load();
  while (n > 0) {
    if (counter.compare_exchange_weak(n, n - 1)) return true;
  }
  return false;
}

constexpr const char* kRoutes =
    "GET /v1/head, GET /v1/patch?from=A&to=B, GET /v1/anchor/{V|latest}, POST /v1/confirm";

/// What the gate lets through: the routes above; only /v1/confirm has a body (a small JSON object).
std::vector<GateRoute> patch_routes() {
  return {{"/v1/head", false, {"GET"}, 0},
          {"/v1/patch", false, {"GET"}, 0},
          {"/v1/anchor/", true, {"GET"}, 0},
          {"/v1/confirm", false, {"POST"}, kMaxSmallBodyBytes}};
}

}  // namespace

// ---- server ---------------------------------------------------------------------------------------------

struct PatchServer::Impl {
  VersionStore& store;
  HttpServerOptions opt;
  std::unique_ptr<httplib::Server> server;
  GatedServer* gated = nullptr;  ///< `server` when it is gated (plain HTTP)
  std::thread thread;
  int port = 0;
  bool running = false;
  std::atomic<int> truncate_next{0}, corrupt_next{0};

  mutable std::mutex mu;  // guards stats and etags
  HttpServerStats stats;
  std::map<const void*, std::pair<std::weak_ptr<const std::vector<uint8_t>>, std::string>> etags;

  Impl(VersionStore& s, HttpServerOptions o) : store(s), opt(std::move(o)) {}

  void count(uint64_t HttpServerStats::*field, uint64_t n = 1) {
    std::lock_guard<std::mutex> lock(mu);
    stats.*field += n;
  }

  std::string etag(const Blob& blob) {
    std::lock_guard<std::mutex> lock(mu);
    for (auto it = etags.begin(); it != etags.end();) {  // forget blobs retention has dropped
      it = it->second.first.expired() ? etags.erase(it) : std::next(it);
    }
    auto it = etags.find(blob.get());
    if (it != etags.end()) return it->second.second;
    std::string tag = etag_of(*blob);
    etags[blob.get()] = {blob, tag};
    return tag;
  }

  void serve_blob(const httplib::Request& req, httplib::Response& res, Blob blob, uint64_t base,
                  uint64_t version) {
    res.set_header("ETag", etag(blob));
    res.set_header("Accept-Ranges", "bytes");
    res.set_header("X-Pulse-Base-Version", std::to_string(base));
    res.set_header("X-Pulse-Version", std::to_string(version));
    if (!req.ranges.empty()) count(&HttpServerStats::ranged_requests);
    if (take_one(corrupt_next)) {
      count(&HttpServerStats::corrupted);
      auto bad = std::make_shared<std::vector<uint8_t>>(*blob);
      if (!bad->empty()) (*bad)[bad->size() / 2] ^= 0x40;
      blob = std::move(bad);
    }
    const bool cut = take_one(truncate_next);
    if (cut) count(&HttpServerStats::truncated);
    // Streamed from the shared buffer; httplib passes the Range-selected window as (offset, length).
    res.set_content_provider(blob->size(), "application/octet-stream",
                             [this, blob, cut](size_t offset, size_t length, httplib::DataSink& sink) {
                               const size_t end = cut ? offset + length / 2 : offset + length;
                               for (size_t pos = offset; pos < end;) {
                                 const size_t n = std::min(kSendChunkBytes, end - pos);
                                 if (!sink.write(reinterpret_cast<const char*>(blob->data()) + pos, n))
                                   return false;
                                 count(&HttpServerStats::body_bytes_sent, n);
                                 pos += n;
                               }
                               return !cut;  // false aborts the response and closes the connection mid-body
                             });
  }

  void install_routes() {
    auto& s = *server;
    s.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
      count(&HttpServerStats::requests);
      if (authorize_bearer(req, res, opt.token)) return httplib::Server::HandlerResponse::Unhandled;
      count(&HttpServerStats::unauthorized);
      return httplib::Server::HandlerResponse::Handled;
    });
    s.set_error_handler(httplib::Server::HandlerWithResponse([this](const httplib::Request& req,
                                                                    httplib::Response& res) {
      if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
      count(&HttpServerStats::bad_requests);
      if (res.status == 404) {
        set_error_response(res, 404, "unknown route " + req.method + " " + req.path + "; routes: " + kRoutes);
      } else {  // httplib's own refusals (400 unreadable request, 416 bad Range, ...): JSON bodies too
        set_error_response(res, res.status,
                           "HTTP " + std::to_string(res.status) + " for " + req.method + " " + req.path);
      }
      return httplib::Server::HandlerResponse::Handled;
    }));
    s.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
      std::string what = "unknown exception";
      try {
        std::rethrow_exception(ep);
      } catch (const std::exception& e) {
        what = e.what();
      } catch (...) {
      }
      set_error_response(res, 500, "internal error: " + what);
    });

    s.Get("/v1/head", [this](const httplib::Request&, httplib::Response& res) {
      const bool published = store.published();
      const VersionHead h = store.head();
      json j{{"version", h.version},
             {"root_hash", hash_hex(h.root_hash)},
             {"published", published},
             {"latest_anchor", published ? store.latest_anchor_version() : 0}};
      res.set_content(j.dump(), "application/json");
    });

    s.Get("/v1/patch", [this](const httplib::Request& req, httplib::Response& res) {
      uint64_t from = 0, to = 0;
      for (const char* key : {"from", "to"}) {
        if (!req.has_param(key)) {
          count(&HttpServerStats::bad_requests);
          return set_error_response(
              res, 400, std::string("missing query parameter '") + key + "' (GET /v1/patch?from=A&to=B)");
        }
        const std::string value = req.get_param_value(key);
        if (!parse_u64(value, std::string(key) == "from" ? from : to)) {
          count(&HttpServerStats::bad_requests);
          return set_error_response(res, 400,
                                    std::string("query parameter '") + key +
                                        "' must be a non-negative decimal integer, got '" + value + "'");
        }
      }
      if (!store.published()) return set_error_response(res, 503, "no version published yet");
      Blob blob;
      try {
        blob = store.patch(from, to);
      } catch (const std::out_of_range& e) {
        return set_error_response(res, 410, e.what());
      } catch (const std::invalid_argument& e) {
        count(&HttpServerStats::bad_requests);
        return set_error_response(res, 400, e.what());
      }
      serve_blob(req, res, blob, from, to);
    });

    s.Get(R"(/v1/anchor/([^/]+))", [this](const httplib::Request& req, httplib::Response& res) {
      const std::string which = req.matches[1];
      uint64_t version = 0;
      const bool latest = which == "latest";
      if (!latest && !parse_u64(which, version)) {
        count(&HttpServerStats::bad_requests);
        return set_error_response(
            res, 400,
            "anchor version must be a non-negative decimal integer or 'latest', got '" + which + "'");
      }
      if (!store.published()) return set_error_response(res, 503, "no version published yet");
      Blob blob;
      try {
        if (latest) version = store.latest_anchor_version();
        blob = store.anchor(version);
      } catch (const std::out_of_range& e) {
        return set_error_response(res, 404, e.what());
      }
      serve_blob(req, res, blob, 0, version);
    });

    s.Post("/v1/confirm", [this](const httplib::Request& req, httplib::Response& res) {
      std::string worker;
      uint64_t version = 0, hash = 0;
      try {
        const json j = json::parse(req.body);
        if (!j.is_object()) throw std::invalid_argument("body must be a JSON object");
        if (!j.contains("worker") || !j["worker"].is_string() || j["worker"].get<std::string>().empty()) {
          throw std::invalid_argument("field 'worker' must be a non-empty string");
        }
        if (!j.contains("version") || !j["version"].is_number_unsigned()) {
          throw std::invalid_argument("field 'version' must be a non-negative integer");
        }
        if (!j.contains("root_hash") || !j["root_hash"].is_string() ||
            !parse_hex64(j["root_hash"].get<std::string>(), hash)) {
          throw std::invalid_argument("field 'root_hash' must be a string of up to 16 hex digits");
        }
        worker = j["worker"].get<std::string>();
        version = j["version"].get<uint64_t>();
      } catch (const std::exception& e) {
        count(&HttpServerStats::bad_requests);
        return set_error_response(res, 400, std::string("bad /v1/confirm body: ") + e.what());
      }
      try {
        store.confirm(worker, version, hash);
      } catch (const HashMismatchError& e) {
        return set_error_response(res, 409, e.what());
      } catch (const std::invalid_argument& e) {
        count(&HttpServerStats::bad_requests);
        return set_error_response(res, 400, e.what());
      }
      res.set_content(json{{"ok", true}}.dump(), "application/json");
    });
  }
};

PatchServer::PatchServer(VersionStore& store, HttpServerOptions options)
    : impl_(std::make_unique<Impl>(store, std::move(options))) {
  const auto& o = impl_->opt;
  if (o.tls_cert.empty() != o.tls_key.empty()) {
    throw std::invalid_argument("TLS needs both tls_cert and tls_key (got only one)");
  }
  if (!o.tls_cert.empty()) {
#ifdef CPPHTTPLIB_OPENSSL_SUPPORT
    impl_->server = std::make_unique<httplib::SSLServer>(o.tls_cert.c_str(), o.tls_key.c_str());
    if (!impl_->server->is_valid()) {
      throw std::runtime_error("cannot load TLS certificate '" + o.tls_cert + "' / key '" + o.tls_key + "'");
    }
#else
    throw std::runtime_error("TLS not available in this build (cpp-httplib without OpenSSL)");
#endif
  } else {
    // Plain HTTP goes through the accept gate (sync/http_gate.h): no client without the token can hold a
    // request thread, and bodies are bounded per route.
    GateOptions gate;
    gate.threads = static_cast<size_t>(std::max(1, o.threads));
    gate.head_timeout_s = o.head_timeout_s;
    gate.body_timeout_s = o.read_timeout_s;
    gate.write_timeout_s = o.write_timeout_s;
    auto gated = std::make_unique<GatedServer>(o.token, patch_routes(), gate);
    impl_->gated = gated.get();
    impl_->server = std::move(gated);
  }
  if (!impl_->gated) {
    const size_t threads = static_cast<size_t>(std::max(1, o.threads));
    impl_->server->new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  }
  auto usec = [](double s) {
    return static_cast<time_t>((s - static_cast<double>(static_cast<time_t>(s))) * 1e6);
  };
  impl_->server->set_read_timeout(static_cast<time_t>(o.read_timeout_s), usec(o.read_timeout_s));
  impl_->server->set_write_timeout(static_cast<time_t>(o.write_timeout_s), usec(o.write_timeout_s));
  listen_exclusively(*impl_->server);
  impl_->install_routes();
}

PatchServer::~PatchServer() {
  stop();
}

void PatchServer::start() {
  auto& im = *impl_;
  if (im.running) return;
  if (im.opt.port == 0) {
    im.port = im.server->bind_to_any_port(im.opt.host);
  } else {
    im.port = im.server->bind_to_port(im.opt.host, im.opt.port) ? im.opt.port : -1;
  }
  if (im.port <= 0) {
    const std::string origin = im.opt.port_origin.empty() ? "" : " (" + im.opt.port_origin + ")";
    const std::string why = bind_failure_reason(im.opt.host, im.opt.port);
    throw std::runtime_error("cannot bind HTTP server to " + im.opt.host + ":" + std::to_string(im.opt.port) +
                             origin + ": " + (why.empty() ? "in use by another process?" : why));
  }
  // The socket already listens after bind, so clients may connect before the accept loop runs.
  im.thread = std::thread([&im] { im.server->listen_after_bind(); });
  for (int i = 0; i < 2000 && !im.server->is_running(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  im.running = true;
}

int PatchServer::port() const {
  return impl_->port;
}

std::string PatchServer::url() const {
  return std::string(impl_->opt.tls_cert.empty() ? "http://" : "https://") + impl_->opt.host + ":" +
         std::to_string(impl_->port);
}

void PatchServer::stop() {
  auto& im = *impl_;
  if (!im.running) return;
  if (im.gated)
    im.gated->shutdown();
  else
    im.server->stop();
  if (im.thread.joinable()) im.thread.join();
  im.running = false;
}

void PatchServer::inject_truncation(int n) {
  impl_->truncate_next += n;
}
void PatchServer::inject_corruption(int n) {
  impl_->corrupt_next += n;
}

HttpServerStats PatchServer::stats() const {
  HttpServerStats s;
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    s = impl_->stats;
  }
  if (impl_->gated) {  // the requests the gate answered never reached the handlers
    const GateStats g = impl_->gated->stats();
    s.requests += g.refused;
    s.unauthorized += g.unauthorized;
    s.bad_requests += g.refused - g.unauthorized;
  }
  return s;
}

// ---- client ---------------------------------------------------------------------------------------------

struct PatchClient::Impl {
  HttpClientOptions opt;
  std::mutex mu;  // one request at a time: httplib::Client is not thread-safe
  std::unique_ptr<httplib::Client> cli;
  HttpClientStats stats;  // requests and retries come from `counters`
  RetryCounters counters;

  explicit Impl(HttpClientOptions o) : opt(std::move(o)) {
    if (opt.url.rfind("http://", 0) != 0 && opt.url.rfind("https://", 0) != 0) {
      throw std::invalid_argument("trainer URL must start with http:// or https://, got '" + opt.url + "'");
    }
    cli = std::make_unique<httplib::Client>(opt.url);
    if (!cli->is_valid()) throw std::invalid_argument("invalid trainer URL '" + opt.url + "'");
    const auto sec = static_cast<time_t>(opt.timeout_s);
    const auto usec = static_cast<time_t>((opt.timeout_s - static_cast<double>(sec)) * 1e6);
    cli->set_connection_timeout(sec, usec);
    cli->set_read_timeout(sec, usec);
    cli->set_write_timeout(sec, usec);
    if (opt.url.rfind("https://", 0) == 0) {
      cli->enable_server_certificate_verification(true);
      if (!opt.ca_cert.empty()) cli->set_ca_cert_path(opt.ca_cert);
    }
  }

  httplib::Headers auth() const {
    httplib::Headers h;
    if (!opt.token.empty()) h.emplace("Authorization", "Bearer " + opt.token);
    return h;
  }

  RetryPolicy retry() const { return RetryPolicy{opt.max_retries, opt.backoff_initial_s, opt.backoff_max_s}; }

  /// A small request (JSON) with retries; returns the body of a 2xx response.
  std::string request_text(const std::string& method, const std::string& path, const std::string& body) {
    auto res = request_with_retries(
        retry(), opt.url, method + " " + path,
        [&] {
          return method == "GET" ? cli->Get(path, auth()) : cli->Post(path, auth(), body, "application/json");
        },
        &counters);
    return res->body;
  }

  /// A binary body with retries and Range resume. `path` is re-pointed once the first response names the
  /// exact version when `pin_anchor` (so that /v1/anchor/latest resumes the same anchor).
  std::vector<uint8_t> fetch(std::string path, bool pin_anchor) {
    std::vector<uint8_t> body;
    std::string etag;
    uint64_t total = 0;
    const std::string original = path;
    retry_loop(
        retry(), opt.url, "GET " + original,
        [&] {
          httplib::Headers headers = auth();
          const bool resuming = !body.empty() && body.size() < total;
          if (resuming) {
            headers.emplace("Range", "bytes=" + std::to_string(body.size()) + "-");
            ++stats.resumed;
          } else {
            body.clear();
          }
          int status = 0;
          bool accept = false;
          std::string error_body, error_header;
          auto res = cli->Get(
              path, headers,
              [&](const httplib::Response& r) {
                status = r.status;
                error_header = r.get_header_value("X-Pulse-Error");
                accept = false;
                if (status == 200) {
                  body.clear();
                  etag = r.get_header_value("ETag");
                  total = std::strtoull(r.get_header_value("Content-Length").c_str(), nullptr, 10);
                  if (pin_anchor && r.has_header("X-Pulse-Version")) {
                    path = "/v1/anchor/" + r.get_header_value("X-Pulse-Version");
                  }
                  body.reserve(total);
                  accept = true;
                } else if (status == 206) {
                  // "bytes START-END/TOTAL": must continue exactly where we stopped, on the same bytes.
                  const std::string cr = r.get_header_value("Content-Range");
                  unsigned long long start = 0, end = 0, all = 0;
                  const bool ok = std::sscanf(cr.c_str(), "bytes %llu-%llu/%llu", &start, &end, &all) == 3;
                  if (!ok || start != body.size() || all != total || r.get_header_value("ETag") != etag) {
                    body.clear();  // the resource changed or the server misbehaved: start over
                    return false;
                  }
                  accept = true;
                }
                return true;
              },
              [&](const char* data, size_t n) {
                if (accept) {
                  body.insert(body.end(), reinterpret_cast<const uint8_t*>(data),
                              reinterpret_cast<const uint8_t*>(data) + n);
                  stats.body_bytes += n;
                } else if (error_body.size() < kMaxErrorBodyBytes) {
                  error_body.append(data, n);
                }
                return true;
              });
          AttemptOutcome out;
          if (!res) {
            out.detail = httplib::to_string(res.error()) + " after " + std::to_string(body.size()) + " of " +
                         std::to_string(total) + " bytes";
            return out;
          }
          out.status = status;
          if (accept) {
            out.done = body.size() == total;
            out.retry = true;
            out.detail =
                "short body (" + std::to_string(body.size()) + " of " + std::to_string(total) + " bytes)";
            return out;
          }
          out.detail = error_header.empty() ? server_message(error_body) : error_header;
          if (status == 416) {  // our Range no longer fits: fetch the whole body again
            body.clear();
            out.retry = true;
          } else if (status == 404 && path != original) {
            path = original;  // the pinned anchor was retired meanwhile: take the newest again
            body.clear();
            out.retry = true;
          }
          return out;
        },
        &counters);
    return body;
  }
};

PatchClient::PatchClient(HttpClientOptions options) : impl_(std::make_unique<Impl>(std::move(options))) {}
PatchClient::~PatchClient() = default;

VersionHead PatchClient::head() {
  std::lock_guard<std::mutex> lock(impl_->mu);
  const std::string body = impl_->request_text("GET", "/v1/head", "");
  try {
    const auto j = json::parse(body);
    VersionHead h;
    h.version = j.at("version").get<uint64_t>();
    if (!parse_hex64(j.at("root_hash").get<std::string>(), h.root_hash))
      throw std::invalid_argument("root_hash");
    return h;
  } catch (const std::exception& e) {
    throw TransportError(200, "malformed /v1/head answer from " + impl_->opt.url + " (" + e.what() +
                                  "): " + body.substr(0, 200));
  }
}

std::vector<uint8_t> PatchClient::patch(uint64_t from, uint64_t to) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->fetch("/v1/patch?from=" + std::to_string(from) + "&to=" + std::to_string(to), false);
}

std::vector<uint8_t> PatchClient::anchor(uint64_t version) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  if (version == kLatestAnchor) return impl_->fetch("/v1/anchor/latest", true);
  return impl_->fetch("/v1/anchor/" + std::to_string(version), false);
}

void PatchClient::confirm(const std::string& worker_id, uint64_t version, uint64_t root_hash) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  const json j{{"worker", worker_id}, {"version", version}, {"root_hash", hash_hex(root_hash)}};
  impl_->request_text("POST", "/v1/confirm", j.dump());
}

HttpClientStats PatchClient::stats() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  HttpClientStats s = impl_->stats;
  s.requests = impl_->counters.attempts;
  s.retries = impl_->counters.retries;
  return s;
}

}  // namespace pulse::sync
