#include "app/control.h"

#include "sync/http_common.h"
#include "sync/httplib_config.h"

#include <chrono>
#include <stdexcept>

namespace pulse::app {

using nlohmann::json;

// ---------------------------------------------------------------------------------------------------------
ControlServer::ControlServer(std::string host, int port, std::string token, RegisterReply bootstrap,
                             std::string tokenizer_bytes, int64_t n_workers)
    : host_(std::move(host)),
      token_(std::move(token)),
      port_(port),
      boot_(std::move(bootstrap)),
      tokenizer_bytes_(std::move(tokenizer_bytes)),
      n_workers_(n_workers),
      server_(std::make_unique<httplib::Server>()) {
  auto& srv = *server_;
  // Long polls hold a thread each: room for every worker's poll plus its reports.
  size_t pool = static_cast<size_t>(2 * n_workers_ + 4);
  srv.new_task_queue = [pool] { return new httplib::ThreadPool(pool); };
  srv.set_exception_handler([](const httplib::Request& req, httplib::Response& res, std::exception_ptr ep) {
    std::string what = "unknown error";
    try {
      std::rethrow_exception(ep);
    } catch (const std::exception& e) {
      what = e.what();
    } catch (...) {
    }
    res.status = 400;  // a malformed request: retrying the same bytes cannot help
    res.set_content(json{{"error", req.path + ": " + what}}.dump(), "application/json");
  });
  srv.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    return sync::authorize_bearer(req, res, token_) ? httplib::Server::HandlerResponse::Unhandled
                                                    : httplib::Server::HandlerResponse::Handled;
  });
  srv.Post("/v1/register", [this](const httplib::Request& req, httplib::Response& res) {
    json body = json::parse(req.body, nullptr, false);
    if (!body.is_object() || !body.contains("worker") || !body["worker"].is_string()) {
      res.status = 400;
      res.set_content("{\"error\":\"expected {\\\"worker\\\": id}\"}", "application/json");
      return;
    }
    std::string id = body["worker"].get<std::string>();
    int64_t index = -1;
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (size_t i = 0; i < workers_.size(); ++i)
        if (workers_[i] == id) index = static_cast<int64_t>(i);  // a restarted worker keeps its slot
      if (index < 0) {
        if (static_cast<int64_t>(workers_.size()) >= n_workers_) {
          res.status = 409;
          res.set_content("{\"error\":\"the run already has all its workers\"}", "application/json");
          return;
        }
        workers_.push_back(id);
        index = static_cast<int64_t>(workers_.size()) - 1;
      }
    }
    cv_.notify_all();
    RegisterReply out = boot_;
    out.index = index;
    res.set_content(json(out).dump(), "application/json");
  });
  srv.Get("/v1/tokenizer", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(tokenizer_bytes_, "application/octet-stream");
  });
  srv.Get("/v1/job", [this](const httplib::Request& req, httplib::Response& res) {
    uint64_t after = 0;
    int64_t worker = -1;
    try {
      after = std::stoull(req.get_param_value("after"));
      worker = std::stoll(req.get_param_value("worker"));
    } catch (const std::exception&) {
      res.status = 400;
      res.set_content("{\"error\":\"expected ?after=SEQ&worker=INDEX\"}", "application/json");
      return;
    }
    std::unique_lock<std::mutex> lock(mu_);
    bool ready = cv_.wait_for(lock, std::chrono::seconds(10), [&] { return job_.seq > after || stopping_; });
    if (!ready || job_.seq <= after) {
      res.status = 204;
      return;
    }
    Job out = job_;
    if (worker >= 0 && worker < static_cast<int64_t>(job_work_.size())) out.work = job_work_[worker];
    lock.unlock();
    res.set_content(json(out).dump(), "application/json");
  });
  srv.Post("/v1/report", [this](const httplib::Request& req, httplib::Response& res) {
    WorkerReport report;
    try {
      report = parse_message_text<WorkerReport>(req.body, "worker report");
    } catch (const MessageError& e) {
      res.status = 400;
      res.set_content(json{{"error", e.what()}}.dump(), "application/json");
      return;
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (report.worker < 0 || report.worker >= n_workers_) {
        res.status = 400;
        res.set_content(
            json{{"error", "worker report: no worker slot " + std::to_string(report.worker)}}.dump(),
            "application/json");
        return;
      }
      if (report.seq == job_.seq) {
        if (!report.error.empty())
          worker_error_ = "worker " + std::to_string(report.worker) + " (" + workers_.at(report.worker) +
                          "): " + report.error;
        const int64_t worker = report.worker;
        reports_[worker] = std::move(report);
      }
    }
    cv_.notify_all();
    res.set_content("{}", "application/json");
  });
}

ControlServer::~ControlServer() {
  stop();
}

void ControlServer::start() {
  if (port_ == 0) {
    port_ = server_->bind_to_any_port(host_);
  } else if (!server_->bind_to_port(host_, port_)) {
    port_ = -1;
  }
  if (port_ < 0)
    throw std::runtime_error("control server: cannot bind " + host_ + ":" + std::to_string(port_));
  thread_ = std::thread([this] { server_->listen_after_bind(); });
  while (!server_->is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
}

void ControlServer::stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (server_) server_->stop();
  if (thread_.joinable()) thread_.join();
}

int ControlServer::port() const {
  return port_;
}
std::string ControlServer::url() const {
  return "http://" + host_ + ":" + std::to_string(port_);
}

std::vector<std::string> ControlServer::wait_for_workers(const std::function<void()>& check) {
  std::unique_lock<std::mutex> lock(mu_);
  while (static_cast<int64_t>(workers_.size()) < n_workers_) {
    cv_.wait_for(lock, std::chrono::milliseconds(100));
    lock.unlock();
    if (check) check();
    lock.lock();
  }
  return workers_;
}

std::vector<WorkerReport> ControlServer::run_job(JobKind kind, uint64_t version, int64_t step,
                                                 const std::vector<JobWork>& work,
                                                 const std::function<void()>& check) {
  return wait_job(post_job(kind, version, step, work), check);
}

uint64_t ControlServer::post_job(JobKind kind, uint64_t version, int64_t step,
                                 const std::vector<JobWork>& work) {
  uint64_t seq = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    job_.seq += 1;
    job_.kind = kind;
    job_.version = version;
    job_.step = step;
    job_work_ = work;
    reports_.clear();
    seq = job_.seq;
  }
  cv_.notify_all();
  return seq;
}

std::vector<WorkerReport> ControlServer::wait_job(uint64_t seq, const std::function<void()>& check) {
  std::unique_lock<std::mutex> lock(mu_);
  if (job_.seq != seq)
    throw std::logic_error("control server: waiting for job " + std::to_string(seq) + " but job " +
                           std::to_string(job_.seq) + " replaced it");
  while (static_cast<int64_t>(reports_.size()) < n_workers_ && worker_error_.empty()) {
    cv_.wait_for(lock, std::chrono::milliseconds(100));
    lock.unlock();
    if (check) check();
    lock.lock();
  }
  if (!worker_error_.empty()) throw std::runtime_error(worker_error_);
  std::vector<WorkerReport> out;
  for (int64_t i = 0; i < n_workers_; ++i) out.push_back(std::move(reports_.at(i)));
  return out;
}

void ControlServer::post_stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    job_.seq += 1;
    job_.kind = JobKind::Stop;
    job_.version = 0;
    job_.step = -1;
    job_work_.clear();
    reports_.clear();
  }
  cv_.notify_all();
}

// ---------------------------------------------------------------------------------------------------------
struct ControlClient::Impl {
  std::string url, token;
  double timeout_s;
  int max_retries;
  int64_t index = -1;  ///< this worker's slot, from the register answer
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
};

ControlClient::ControlClient(std::string url, std::string token, double timeout_s, int max_retries)
    : impl_(std::make_unique<Impl>(std::move(url), std::move(token), timeout_s, max_retries)) {}
ControlClient::~ControlClient() = default;

RegisterReply ControlClient::register_worker(const std::string& worker_id) {
  std::string body = json{{"worker", worker_id}}.dump();
  auto res = impl_->call("POST /v1/register",
                         [&] { return impl_->client.Post("/v1/register", body, "application/json"); });
  RegisterReply out = parse_message_text<RegisterReply>(res->body, impl_->url + " register answer");
  impl_->index = out.index;
  return out;
}

std::string ControlClient::tokenizer() {
  auto res = impl_->call("GET /v1/tokenizer", [&] { return impl_->client.Get("/v1/tokenizer"); });
  return res->body;
}

Job ControlClient::next_job(uint64_t after_seq) {
  // The worker index is sent so that the server returns only this worker's share of the work.
  for (;;) {
    std::string path =
        "/v1/job?after=" + std::to_string(after_seq) + "&worker=" + std::to_string(impl_->index);
    auto res = impl_->call("GET /v1/job", [&] { return impl_->client.Get(path.c_str()); });
    if (res->status == 204) continue;
    return parse_message_text<Job>(res->body, impl_->url + " job");
  }
}

void ControlClient::report(const WorkerReport& report) {
  std::string body = json(report).dump();
  impl_->call("POST /v1/report", [&] { return impl_->client.Post("/v1/report", body, "application/json"); });
}

}  // namespace pulse::app
