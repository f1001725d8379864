#include "app/wire/control.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdio>
#include <random>
#include <stdexcept>

#include "sync/hash.h"
#include "sync/http_common.h"
#include "sync/http_gate.h"
#include "sync/httplib_config.h"
#include "sync/transport_source.h"

namespace pulse::app {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

namespace {

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

std::string random_key() {
  std::random_device rd;
  return sync::hash_hex((static_cast<uint64_t>(rd()) << 32) ^ rd()) +
         sync::hash_hex((static_cast<uint64_t>(rd()) << 32) ^ rd());
}

/// Seconds as a short text: "30", "0.6".
std::string secs(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", s);
  return buf;
}

// 410 Gone: the key names no live member (dropped, or the trainer restarted); the worker registers again,
// unless the message says another registration took its name (kReplacedMarker).
void refuse_gone(httplib::Response& res, const std::string& message) {
  sync::set_error_response(res, 410, message);
}

/// A handler's answer: `out` is the body, or the error message when status >= 400.
void answer(httplib::Response& res, int status, const std::string& out) {
  if (status >= 400) return sync::set_error_response(res, status, out);
  res.status = status;
  res.set_content(out, "application/json");
}

}  // namespace

bool valid_worker_name(const std::string& name) {
  if (name.empty() || name.size() > 64 || name[0] == '.') return false;
  for (char c : name)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-')) return false;
  return true;
}

// ---------------------------------------------------------------------------------------------------------
ControlServer::ControlServer(std::string host, int port, std::string token, RegisterReply bootstrap,
                             std::string tokenizer_bytes, int64_t n_workers,
                             std::optional<FleetPolicy> policy)
    : host_(std::move(host)),
      token_(std::move(token)),
      port_(port),
      boot_(std::move(bootstrap)),
      tokenizer_bytes_(std::move(tokenizer_bytes)),
      policy_(policy ? *policy : FleetPolicy{n_workers, 30, 600}),
      none_live_since_(Clock::now()) {
  if (policy_.max_workers < 1) throw std::invalid_argument("control server: max_workers must be >= 1");
  if (policy_.max_bad_reports <= 0) policy_.max_bad_reports = 2 * policy_.max_workers;
  // Long polls hold a thread each: room for every member's poll, its reports and heartbeats, and a few
  // members that replace dead ones.
  sync::GateOptions gate;
  gate.threads = static_cast<size_t>(3 * policy_.max_workers + 8);
  const std::vector<sync::GateRoute> routes = {{"/v1/register", false, {"POST"}, sync::kMaxSmallBodyBytes},
                                               {"/v1/tokenizer", false, {"GET"}, 0},
                                               {"/v1/job", false, {"GET"}, 0},
                                               {"/v1/report", false, {"POST"}, policy_.max_report_bytes},
                                               {"/v1/heartbeat", false, {"POST"}, sync::kMaxSmallBodyBytes}};
  server_ = std::make_unique<sync::GatedServer>(token_, routes, gate);
  sync::listen_exclusively(*server_);
  install_routes();
}

ControlServer::~ControlServer() {
  stop();
}

void ControlServer::install_routes() {
  auto& srv = *server_;
  srv.set_error_handler(httplib::Server::HandlerWithResponse([this](const httplib::Request& req,
                                                                    httplib::Response& res) {
    if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
    // httplib's own refusals (404, 400 unreadable request, ...): JSON bodies too.
    sync::set_error_response(res, res.status,
                             "HTTP " + std::to_string(res.status) + " for " + req.method + " " + req.path +
                                 (res.status == 404 ? "; routes: " + server_->route_list() : ""));
    return httplib::Server::HandlerResponse::Handled;
  }));
  srv.set_exception_handler([](const httplib::Request& req, httplib::Response& res, std::exception_ptr ep) {
    std::string what = "unknown error";
    try {
      std::rethrow_exception(ep);
    } catch (const std::exception& e) {
      what = e.what();
    } catch (...) {
    }
    // A malformed request: retrying the same bytes cannot help.
    sync::set_error_response(res, 400, req.path + ": " + what);
  });
  srv.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    return sync::authorize_bearer(req, res, token_) ? httplib::Server::HandlerResponse::Unhandled
                                                    : httplib::Server::HandlerResponse::Handled;
  });
  srv.Post("/v1/register", [this](const httplib::Request& req, httplib::Response& res) {
    int status = 200;
    std::string out;
    handle_register(req.body, status, out);
    answer(res, status, out);
  });
  srv.Get("/v1/tokenizer", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(tokenizer_bytes_, "application/octet-stream");
  });
  srv.Post("/v1/heartbeat", [this](const httplib::Request& req, httplib::Response& res) {
    std::lock_guard<std::mutex> lock(mu_);
    Member* m = find_locked(req.get_param_value("worker"));
    if (!m) return refuse_gone(res, gone_message_locked(req.get_param_value("worker"), "heartbeat"));
    m->seen = Clock::now();
    res.set_content("{}", "application/json");
  });
  srv.Get("/v1/job", [this](const httplib::Request& req, httplib::Response& res) {
    uint64_t after = 0;
    if (!sync::parse_decimal_u64(req.get_param_value("after"), after))
      return sync::set_error_response(res, 400, "query parameter 'after': expected ?after=SEQ&worker=KEY");
    std::unique_lock<std::mutex> lock(mu_);
    Member* m = find_locked(req.get_param_value("worker"));
    if (!m) return refuse_gone(res, gone_message_locked(req.get_param_value("worker"), "job"));
    const int64_t slot = m->slot;
    m->seen = Clock::now();
    const double poll_s = std::min(10.0, policy_.lease_s / 2);
    bool ready = cv_.wait_for(lock, std::chrono::duration<double>(poll_s), [&] {
      return stopping_ || !members_[slot].live || deliverable_locked(members_[slot], after);
    });
    Member& me = members_[slot];
    if (!me.live) return refuse_gone(res, gone_message_locked(me.key, "job"));
    me.seen = Clock::now();
    if (!ready || stopping_ || !deliverable_locked(me, after)) {
      res.status = 204;
      return;
    }
    if (kind_ == JobKind::Stop) me.got_stop = true;
    Job out = job_for_locked(me);
    lock.unlock();
    cv_.notify_all();
    res.set_content(json(out).dump(), "application/json");
  });
  srv.Post("/v1/report", [this](const httplib::Request& req, httplib::Response& res) {
    int status = 200;
    std::string out = "{}";
    handle_report(req.get_param_value("worker"), req.body, status, out);
    answer(res, status, out);
  });
}

void ControlServer::handle_register(const std::string& text, int& status, std::string& out) {
  json body = json::parse(text, nullptr, false);
  if (!body.is_object() || (body.contains("worker") && !body["worker"].is_string())) {
    status = 400;
    out = "expected {\"worker\": name}";
    return;
  }
  const std::string name = body.value("worker", std::string());
  if (!name.empty() && !valid_worker_name(name)) {
    status = 400;
    out = "worker name '" + sync::printable_ascii(name, 80) + "': use 1..64 letters, digits, '.', '_' or '-'";
    return;
  }
  RegisterReply reply;
  {
    std::lock_guard<std::mutex> lock(mu_);
    sweep_locked();
    for (auto& m : members_)
      if (m.live && m.id == name) {
        m.replaced = true;
        drop_locked(m, "registered again (a restarted worker replaces it)");
      }
    if (live_count_locked() >= policy_.max_workers) {
      status = 409;
      out = "the run already has its " + std::to_string(policy_.max_workers) +
            " live workers (a dead worker's place frees when its lease of " + secs(policy_.lease_s) +
            " s expires)";
      return;
    }
    Member m;
    m.slot = static_cast<int64_t>(members_.size());
    m.id = name.empty() ? "w" + std::to_string(m.slot) : name;
    m.key = random_key();
    m.seen = Clock::now();
    members_.push_back(m);
    events_.joins += 1;
    spdlog::info("worker {} joined (slot {}; {} of {} live)", m.id, m.slot, live_count_locked(),
                 policy_.max_workers);
    if (kind_ == JobKind::Generate) assign_orphans_locked();
    reply = boot_;
    reply.index = m.slot;
    reply.worker_id = m.id;
    reply.key = m.key;
    reply.lease_s = policy_.lease_s;
  }
  cv_.notify_all();
  out = json(reply).dump();
}

void ControlServer::handle_report(const std::string& key, const std::string& text, int& status,
                                  std::string& out) {
  WorkerReport report;
  std::string unreadable;
  try {
    report = parse_message_text<WorkerReport>(text, "worker report");
  } catch (const MessageError& e) {
    unreadable = e.what();
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    Member* m = find_locked(key);
    if (!m) {
      status = 410;
      out = gone_message_locked(key, "worker report");
      return;
    }
    m->seen = Clock::now();
    if (!unreadable.empty()) {
      status = 400;
      out = unreadable;
      refuse_report_locked(*m, unreadable);
    } else if (report.seq < first_wire_ || report.seq > wire_) {
      return;  // a report for an earlier job: ignored
    } else if (!report.error.empty()) {
      report.worker = m->slot;
      worker_error_ = "worker " + m->id + ": " + report.error;
      m->reported_job = job_id_;
    } else {
      // The meaning, before the report counts: a share of this job (or -1: a sync-only report, which a
      // member holding no share of a generate job sends too), rollouts that fit it.
      std::string bad;
      const auto n_shares = static_cast<int64_t>(shares_.size());
      if (kind_ == JobKind::Generate && (report.share < -1 || report.share >= n_shares)) {
        bad = "field 'share': " + std::to_string(report.share) + " is not a share of job seq " +
              std::to_string(report.seq) + " (0.." + std::to_string(n_shares - 1) +
              ", or -1 for a sync only)";
      } else if (kind_ != JobKind::Generate && report.share != -1) {
        bad = "field 'share': " + std::to_string(report.share) + " in a report for a " +
              job_kind_name(kind_) + " job (no shares)";
      } else if (kind_ == JobKind::Generate && report.share >= 0 && limits_.group_size > 0) {
        try {
          check_share_report(report,
                             static_cast<int64_t>(shares_[static_cast<size_t>(report.share)].problems.size()),
                             limits_);
        } catch (const MessageError& e) {
          bad = std::string("share ") + std::to_string(report.share) + ": " + e.what();
        }
      }
      if (!bad.empty()) {
        status = 422;
        out = "worker report: " + bad;
        refuse_report_locked(*m, out);
      } else {
        report.worker = m->slot;
        report.worker_id = m->id;
        if (report.share >= 0) {
          auto& slot = done_[static_cast<size_t>(report.share)];
          if (!slot) slot = std::move(report);
        } else {
          sync_reports_.push_back(std::move(report));
        }
        m->reported_job = job_id_;
      }
    }
  }
  cv_.notify_all();
}

void ControlServer::refuse_report_locked(Member& m, const std::string& why) {
  bad_reports_ += 1;
  drop_locked(m, "sent a bad report (" + sync::printable_ascii(why, 300) + ")");
  if (bad_reports_ > policy_.max_bad_reports && worker_error_.empty())
    worker_error_ = "step " + std::to_string(step_) + ": " + std::to_string(bad_reports_) +
                    " bad worker reports for one job (more than " + std::to_string(policy_.max_bad_reports) +
                    "; every worker that reports is faulty?); the last, from worker " + m.id + ": " +
                    sync::printable_ascii(why, 300);
}

ControlServer::Member* ControlServer::find_locked(const std::string& key) {
  if (key.empty()) return nullptr;
  for (auto& m : members_)
    if (m.live && sync::constant_time_equal(m.key, key)) return &m;
  return nullptr;
}

std::string ControlServer::gone_message_locked(const std::string& key, const char* what) const {
  if (!key.empty())
    for (const auto& m : members_)
      if (!m.live && sync::constant_time_equal(m.key, key)) {
        if (m.replaced)
          return std::string(what) + ": " + kReplacedMarker + " '" + m.id +
                 "' registered after this one (two processes with the same --id, or this one was restarted)";
        return std::string(what) + ": this worker was dropped (lease of " + secs(policy_.lease_s) +
               " s missed): register again";
      }
  return std::string(what) + ": unknown worker key (dropped, or the trainer restarted): register again";
}

int64_t ControlServer::live_count_locked() const {
  int64_t n = 0;
  for (const auto& m : members_) n += m.live ? 1 : 0;
  return n;
}

void ControlServer::sweep_locked() {
  const auto now = Clock::now();
  // A member that took the stop job left when told to (e.g. during the trainer's final Pass@1): no drop.
  for (auto& m : members_)
    if (m.live && !m.got_stop && std::chrono::duration<double>(now - m.seen).count() > policy_.lease_s)
      drop_locked(m, "missed its lease of " + secs(policy_.lease_s) + " s");
}

void ControlServer::drop_locked(Member& m, const std::string& why) {
  m.live = false;
  last_drop_ = "worker " + m.id + " " + why;
  events_.drops += 1;
  int64_t shares = 0, prompts = 0;
  for (size_t i = 0; i < shares_.size(); ++i) {
    if (owner_[i] == m.slot && !done_[i]) {
      owner_[i] = -1;
      ++shares;
      prompts += static_cast<int64_t>(shares_[i].problems.size());
    }
  }
  events_.reassigned_shares += shares;
  events_.reassigned_prompts += prompts;
  const int64_t live = live_count_locked();
  if (live == 0) none_live_since_ = Clock::now();
  if (shares > 0) {
    spdlog::warn("worker {} {}: dropped; its {} unfinished prompts of step {} go to {}", m.id, why, prompts,
                 step_,
                 live > 0 ? "the " + std::to_string(live) + " live worker(s)" : "the next worker to join");
  } else {
    spdlog::warn("worker {} {}: dropped ({} live)", m.id, why, live);
  }
  assign_orphans_locked();
}

void ControlServer::assign_orphans_locked() {
  bool assigned = false;
  for (size_t i = 0; i < shares_.size(); ++i) {
    if (owner_[i] >= 0 || done_[i]) continue;
    int64_t best = -1, best_load = 0;
    for (const auto& m : members_) {
      if (!m.live) continue;
      int64_t load = 0;
      for (size_t k = 0; k < shares_.size(); ++k) load += owner_[k] == m.slot && !done_[k] ? 1 : 0;
      if (best < 0 || load < best_load) {
        best = m.slot;
        best_load = load;
      }
    }
    if (best < 0) return;  // nobody live: assigned when someone registers
    owner_[i] = best;
    assigned = true;
  }
  if (assigned) wire_ += 1;  // the new owners' polls see a newer seq
}

bool ControlServer::deliverable_locked(const Member& m, uint64_t after) const {
  if (wire_ <= after || job_id_ == 0) return false;
  if (kind_ == JobKind::Stop) return true;
  if (m.reported_job != job_id_) return true;
  for (size_t i = 0; i < shares_.size(); ++i)
    if (owner_[i] == m.slot && !done_[i]) return true;
  return false;
}

Job ControlServer::job_for_locked(const Member& m) const {
  Job out;
  out.seq = wire_;
  out.kind = kind_;
  out.version = version_;
  out.step = step_;
  for (size_t i = 0; i < shares_.size(); ++i)
    if (owner_[i] == m.slot && !done_[i]) out.work.push_back(shares_[i]);
  return out;
}

bool ControlServer::complete_locked() const {
  if (kind_ == JobKind::Generate) {
    for (const auto& d : done_)
      if (!d) return false;
    return true;
  }
  int64_t live = 0;
  for (const auto& m : members_) {
    if (!m.live) continue;
    ++live;
    if (m.reported_job != job_id_) return false;
  }
  return live > 0;
}

void ControlServer::start() {
  if (port_ == 0) {
    port_ = server_->bind_to_any_port(host_);
  } else if (!server_->bind_to_port(host_, port_)) {
    const std::string why = sync::bind_failure_reason(host_, port_);
    throw std::runtime_error("control server: cannot bind " + host_ + ":" + std::to_string(port_) +
                             " (transport.port on transport.host, shifted by 2 per trainer rank): " +
                             (why.empty() ? "in use by another process?" : why) +
                             "; set another transport.port (0: free ports) or transport.host");
  }
  if (port_ < 0) throw std::runtime_error("control server: cannot bind " + host_ + " to a free port");
  thread_ = std::thread([this] { server_->listen_after_bind(); });
  while (!server_->is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  sweeper_ = std::thread([this] {
    std::unique_lock<std::mutex> lock(mu_);
    while (!stopping_) {
      cv_.wait_for(lock, std::chrono::milliseconds(100));
      const int64_t before = events_.drops;
      sweep_locked();
      if (events_.drops != before) {
        lock.unlock();
        cv_.notify_all();
        lock.lock();
      }
    }
  });
}

void ControlServer::stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (sweeper_.joinable()) sweeper_.join();
  if (server_) server_->shutdown();
  if (thread_.joinable()) thread_.join();
}

int ControlServer::port() const {
  return port_;
}
std::string ControlServer::url() const {
  return "http://" + host_ + ":" + std::to_string(port_);
}

void ControlServer::set_report_limits(const ReportLimits& limits) {
  std::lock_guard<std::mutex> lock(mu_);
  limits_ = limits;
}

void ControlServer::set_bootstrap(RegisterReply bootstrap) {
  std::lock_guard<std::mutex> lock(mu_);
  boot_ = std::move(bootstrap);
}

FleetEvents ControlServer::events() const {
  std::lock_guard<std::mutex> lock(mu_);
  FleetEvents e = events_;
  e.live = live_count_locked();
  return e;
}

std::vector<std::string> ControlServer::live_ids() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::string> out;
  for (const auto& m : members_)
    if (m.live) out.push_back(m.id);
  return out;
}

std::vector<std::string> ControlServer::wait_for_workers(double grace_s, const std::function<void()>& check) {
  std::unique_lock<std::mutex> lock(mu_);
  const auto t0 = Clock::now();
  auto last_note = t0;
  bool have_first = false;
  Clock::time_point first_live = t0;
  for (;;) {
    const int64_t live = live_count_locked();
    if (live >= policy_.max_workers) break;
    if (live > 0 && !have_first) first_live = Clock::now();
    have_first = live > 0;
    if (have_first && seconds_since(first_live) >= grace_s) {
      spdlog::warn("starting with {} of {} workers; the others get work once they register", live,
                   policy_.max_workers);
      break;
    }
    if (live == 0 && seconds_since(none_live_since_) > policy_.no_worker_timeout_s)
      throw std::runtime_error(
          "no inference worker registered at " + url() + " within " + secs(policy_.no_worker_timeout_s) +
          " s (transport.no_worker_timeout_s): start `pulse worker --trainer " + url() + "`");
    if (seconds_since(last_note) >= 30) {
      spdlog::info("waiting for workers at {}: {} of {} registered", url(), live, policy_.max_workers);
      last_note = Clock::now();
    }
    cv_.wait_for(lock, std::chrono::milliseconds(100));
    lock.unlock();
    if (check) check();
    lock.lock();
  }
  std::vector<std::string> out;
  for (const auto& m : members_)
    if (m.live) out.push_back(m.id);
  return out;
}

std::vector<WorkerReport> ControlServer::run_job(JobKind kind, uint64_t version, int64_t step,
                                                 const std::vector<JobWork>& work,
                                                 const std::function<void()>& check) {
  return wait_job(post_job(kind, version, step, work), check);
}

uint64_t ControlServer::post_job(JobKind kind, uint64_t version, int64_t step,
                                 const std::vector<JobWork>& work) {
  uint64_t id = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    id = ++job_id_;
    first_wire_ = ++wire_;
    kind_ = kind;
    version_ = version;
    step_ = step;
    shares_.clear();
    if (kind == JobKind::Generate) shares_ = work;
    for (size_t i = 0; i < shares_.size(); ++i) shares_[i].share = static_cast<int64_t>(i);
    owner_.assign(shares_.size(), -1);
    done_.assign(shares_.size(), std::nullopt);
    sync_reports_.clear();
    worker_error_.clear();
    bad_reports_ = 0;
    std::vector<int64_t> live;
    for (const auto& m : members_)
      if (m.live) live.push_back(m.slot);
    for (size_t i = 0; i < shares_.size() && !live.empty(); ++i) owner_[i] = live[i % live.size()];
  }
  cv_.notify_all();
  return id;
}

std::vector<WorkerReport> ControlServer::wait_job(uint64_t id, const std::function<void()>& check) {
  std::unique_lock<std::mutex> lock(mu_);
  if (job_id_ != id)
    throw std::logic_error("control server: waiting for job " + std::to_string(id) + " but job " +
                           std::to_string(job_id_) + " replaced it");
  while (!complete_locked() && worker_error_.empty()) {
    if (live_count_locked() == 0 && seconds_since(none_live_since_) > policy_.no_worker_timeout_s)
      throw std::runtime_error("no inference worker alive for " + secs(policy_.no_worker_timeout_s) +
                               " s (transport.no_worker_timeout_s) at step " + std::to_string(step_) +
                               ": start `pulse worker --trainer " + url() + "`" +
                               (last_drop_.empty() ? "" : "; the last drop: " + last_drop_));
    cv_.wait_for(lock, std::chrono::milliseconds(100));
    lock.unlock();
    if (check) check();
    lock.lock();
  }
  if (!worker_error_.empty()) throw std::runtime_error(worker_error_);
  std::vector<WorkerReport> out;
  if (kind_ == JobKind::Generate) {
    for (auto& d : done_) out.push_back(*d);
  } else {
    out = sync_reports_;
    std::sort(out.begin(), out.end(),
              [](const WorkerReport& a, const WorkerReport& b) { return a.worker < b.worker; });
  }
  return out;
}

void ControlServer::post_stop(double wait_s) {
  std::unique_lock<std::mutex> lock(mu_);
  ++job_id_;
  first_wire_ = ++wire_;
  kind_ = JobKind::Stop;
  version_ = 0;
  step_ = -1;
  shares_.clear();
  owner_.clear();
  done_.clear();
  sync_reports_.clear();
  cv_.notify_all();
  // Give the members' polls the stop job before the server goes away (else they would wait for a trainer
  // that is gone for good).
  cv_.wait_for(lock, std::chrono::duration<double>(wait_s), [&] {
    for (const auto& m : members_)
      if (m.live && !m.got_stop) return false;
    return true;
  });
}

// ---------------------------------------------------------------------------------------------------------
struct ControlClient::Impl {
  std::string url, token, key;
  double timeout_s;
  int max_retries;
  httplib::Client client;
  Impl(std::string u, std::string t, double timeout, int retries)
      : url(std::move(u)), token(std::move(t)), timeout_s(timeout), max_retries(retries), client(url) {
    if (!token.empty()) client.set_bearer_token_auth(token.c_str());
    auto secs = static_cast<time_t>(timeout_s);
    client.set_connection_timeout(secs, 0);
    client.set_read_timeout(secs, 0);
    client.set_write_timeout(secs, 0);
  }

  /// Runs `request` with retries on network errors and 5xx (sync/http_common.h, the patch client's policy);
  /// throws on 4xx or exhausted retries.
  httplib::Result call(const std::string& what, const std::function<httplib::Result()>& request) {
    return sync::request_with_retries(sync::RetryPolicy{max_retries, 0.05, 2.0}, url, what, request);
  }
  std::string with_key(const std::string& path) const {
    return path + (path.find('?') == std::string::npos ? "?" : "&") + "worker=" + key;
  }
};

ControlClient::ControlClient(std::string url, std::string token, double timeout_s, int max_retries)
    : impl_(std::make_unique<Impl>(std::move(url), std::move(token), timeout_s, max_retries)) {}
ControlClient::~ControlClient() = default;

void ControlClient::set_key(const std::string& key) {
  impl_->key = key;
}

RegisterReply ControlClient::register_worker(const std::string& name, double wait_s,
                                             const std::function<void(const std::string&)>& waiting) {
  json body = json::object();
  if (!name.empty()) body["worker"] = name;
  const std::string text = body.dump();
  const auto t0 = Clock::now();
  double backoff = 0.25;
  for (;;) {
    auto res = impl_->client.Post("/v1/register", text, "application/json");
    std::string reason;
    if (!res) {
      reason = "the trainer at " + impl_->url + " is not reachable (" + httplib::to_string(res.error()) + ")";
    } else if (res->status == 200) {
      RegisterReply out = parse_message_text<RegisterReply>(res->body, impl_->url + " register answer");
      impl_->key = out.key;
      return out;
    } else if (res->status == 409 || sync::retryable_status(res->status)) {
      reason = "the trainer at " + impl_->url + " answers HTTP " + std::to_string(res->status) + ": " +
               sync::server_message(res->body);
    } else {
      throw sync::TransportError(res->status, impl_->url + " POST /v1/register: HTTP " +
                                                  std::to_string(res->status) + ": " +
                                                  sync::server_message(res->body));
    }
    const double left = wait_s - seconds_since(t0);
    if (left <= 0) {
      char waited[32];
      std::snprintf(waited, sizeof waited, "%.1f", seconds_since(t0));
      throw sync::TransportError(res ? res->status : 0, impl_->url + " POST /v1/register: gave up after " +
                                                            waited + " s (--register-wait): " + reason);
    }
    if (waiting) waiting(reason);
    // A full run (409) is asked again soon: the trainer is up, and a dead worker's place frees any moment.
    // The last wait is cut to what is left, so the last try comes at the end of the wait, not before it.
    const bool full = res && res->status == 409;
    std::this_thread::sleep_for(
        std::chrono::duration<double>(std::min(left, full ? std::min(backoff, 0.25) : backoff)));
    backoff = std::min(5.0, backoff * 2);
  }
}

std::string ControlClient::tokenizer() {
  auto res = impl_->call("GET /v1/tokenizer", [&] { return impl_->client.Get("/v1/tokenizer"); });
  return res->body;
}

Job ControlClient::next_job(uint64_t after_seq) {
  for (;;) {
    const std::string path = impl_->with_key("/v1/job?after=" + std::to_string(after_seq));
    auto res = impl_->call("GET /v1/job", [&] { return impl_->client.Get(path.c_str()); });
    if (res->status == 204) continue;
    return parse_message_text<Job>(res->body, impl_->url + " job");
  }
}

void ControlClient::report(const WorkerReport& report) {
  const std::string body = json(report).dump();
  const std::string path = impl_->with_key("/v1/report");
  impl_->call("POST /v1/report", [&] { return impl_->client.Post(path.c_str(), body, "application/json"); });
}

void ControlClient::heartbeat() {
  const std::string path = impl_->with_key("/v1/heartbeat");
  auto res = impl_->client.Post(path.c_str(), "{}", "application/json");
  if (res && res->status == 410)
    throw sync::VersionGoneError(
        410, impl_->url + " POST /v1/heartbeat: HTTP 410: " + sync::server_message(res->body));
}

}  // namespace pulse::app
