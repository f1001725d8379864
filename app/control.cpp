#include "app/control.h"

#include "sync/httplib_config.h"

#include <chrono>
#include <stdexcept>

namespace pulse::app {

using nlohmann::json;

json problem_to_json(const rl::Problem& p) {
  return json{{"id", p.id},
              {"kind", p.kind == rl::TaskKind::Code ? "code" : "math"},
              {"question", p.question},
              {"answer", p.answer},
              {"solution", p.solution},
              {"subject", p.subject},
              {"level", p.level},
              {"tests", p.tests},
              {"test_setup_code", p.test_setup_code}};
}

rl::Problem problem_from_json(const json& j) {
  rl::Problem p;
  p.id = j.at("id").get<std::string>();
  p.kind = j.at("kind").get<std::string>() == "code" ? rl::TaskKind::Code : rl::TaskKind::Math;
  p.question = j.at("question").get<std::string>();
  p.answer = j.at("answer").get<std::string>();
  p.solution = j.at("solution").get<std::string>();
  p.subject = j.at("subject").get<std::string>();
  p.level = j.at("level").get<int>();
  p.tests = j.at("tests").get<std::vector<std::string>>();
  p.test_setup_code = j.at("test_setup_code").get<std::string>();
  return p;
}

json rollout_to_json(const rl::Rollout& r) {
  return json{{"problem_index", r.problem_index},
              {"group", r.group},
              {"prompt_ids", r.prompt_ids},
              {"response_ids", r.response_ids},
              {"sampler_logprobs", r.sampler_logprobs},
              {"reward", r.reward},
              {"reward_reason", r.reward_reason},
              {"truncated", r.truncated},
              {"infrastructure_error", r.infrastructure_error},
              {"policy_version", r.policy_version}};
}

rl::Rollout rollout_from_json(const json& j) {
  rl::Rollout r;
  r.problem_index = j.at("problem_index").get<int64_t>();
  r.group = j.at("group").get<int64_t>();
  r.prompt_ids = j.at("prompt_ids").get<std::vector<int32_t>>();
  r.response_ids = j.at("response_ids").get<std::vector<int32_t>>();
  // float -> double (exact) on the wire, double -> float back: bit-identical log-probs.
  r.sampler_logprobs = j.at("sampler_logprobs").get<std::vector<float>>();
  r.reward = j.at("reward").get<double>();
  r.reward_reason = j.at("reward_reason").get<std::string>();
  r.truncated = j.at("truncated").get<bool>();
  r.infrastructure_error = j.at("infrastructure_error").get<bool>();
  r.policy_version = j.at("policy_version").get<uint64_t>();
  return r;
}

// ---------------------------------------------------------------------------------------------------------
ControlServer::ControlServer(std::string host, int port, std::string token, WorkerBootstrap bootstrap,
                             int64_t n_workers)
    : host_(std::move(host)),
      token_(std::move(token)),
      port_(port),
      boot_(std::move(bootstrap)),
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
    if (token_.empty()) return httplib::Server::HandlerResponse::Unhandled;
    if (req.get_header_value("Authorization") == "Bearer " + token_)
      return httplib::Server::HandlerResponse::Unhandled;
    res.status = 401;
    res.set_content("{\"error\":\"missing or wrong bearer token\"}", "application/json");
    return httplib::Server::HandlerResponse::Handled;
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
    json out{{"index", index},
             {"patch_url", boot_.patch_url},
             {"patch_dir", boot_.patch_dir},
             {"config", boot_.config},
             {"model_config", boot_.model_config},
             {"tokenizer_name", boot_.tokenizer_name}};
    res.set_content(out.dump(), "application/json");
  });
  srv.Get("/v1/tokenizer", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(boot_.tokenizer_bytes, "application/octet-stream");
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
    json out = job_.body;
    out["seq"] = job_.seq;
    const json& work = job_.body["work"];
    out["work"] = worker >= 0 && worker < static_cast<int64_t>(work.size()) ? work[worker] : json::object();
    lock.unlock();
    res.set_content(out.dump(), "application/json");
  });
  srv.Post("/v1/report", [this](const httplib::Request& req, httplib::Response& res) {
    json body = json::parse(req.body, nullptr, false);
    if (!body.is_object() || !body.contains("worker") || !body.contains("seq")) {
      res.status = 400;
      res.set_content("{\"error\":\"expected a report with worker and seq\"}", "application/json");
      return;
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (body["seq"].get<uint64_t>() == job_.seq) {
        if (body.contains("error"))
          worker_error_ = "worker " + body["worker"].dump() + ": " + body["error"].get<std::string>();
        const int64_t worker = body["worker"].get<int64_t>();  // before the move below
        reports_[worker] = std::move(body);
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

std::vector<json> ControlServer::run_job(const std::string& kind, uint64_t version, int64_t step,
                                         const std::vector<json>& work, const std::function<void()>& check) {
  return wait_job(post_job(kind, version, step, work), check);
}

uint64_t ControlServer::post_job(const std::string& kind, uint64_t version, int64_t step,
                                 const std::vector<json>& work) {
  uint64_t seq = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    job_.seq += 1;
    job_.body = json{{"kind", kind}, {"version", version}, {"step", step}, {"work", work}};
    reports_.clear();
    seq = job_.seq;
  }
  cv_.notify_all();
  return seq;
}

std::vector<json> ControlServer::wait_job(uint64_t seq, const std::function<void()>& check) {
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
  std::vector<json> out;
  for (int64_t i = 0; i < n_workers_; ++i) out.push_back(reports_.at(i));
  return out;
}

void ControlServer::post_stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    job_.seq += 1;
    job_.body = json{{"kind", "stop"}, {"version", 0}, {"step", -1}, {"work", json::array()}};
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

  /// Runs `request` with retries on network errors and 5xx; throws on 4xx or exhausted retries.
  httplib::Result call(const std::string& what, const std::function<httplib::Result()>& request) {
    double backoff = 0.05;
    for (int attempt = 0;; ++attempt) {
      httplib::Result res = request();
      if (res && res->status < 500) {
        if (res->status >= 400)
          throw std::runtime_error(url + " " + what + ": HTTP " + std::to_string(res->status) + " " +
                                   res->body);
        return res;
      }
      if (attempt >= max_retries) {
        std::string why = res ? "HTTP " + std::to_string(res->status) : httplib::to_string(res.error());
        throw std::runtime_error(url + " " + what + ": " + why + " after " + std::to_string(attempt + 1) +
                                 " attempts");
      }
      std::this_thread::sleep_for(std::chrono::duration<double>(backoff));
      backoff = std::min(backoff * 2, 2.0);
    }
  }
};

ControlClient::ControlClient(std::string url, std::string token, double timeout_s, int max_retries)
    : impl_(std::make_unique<Impl>(std::move(url), std::move(token), timeout_s, max_retries)) {}
ControlClient::~ControlClient() = default;

json ControlClient::register_worker(const std::string& worker_id) {
  std::string body = json{{"worker", worker_id}}.dump();
  auto res = impl_->call("POST /v1/register",
                         [&] { return impl_->client.Post("/v1/register", body, "application/json"); });
  json out = json::parse(res->body);
  impl_->index = out.at("index").get<int64_t>();
  return out;
}

std::string ControlClient::tokenizer() {
  auto res = impl_->call("GET /v1/tokenizer", [&] { return impl_->client.Get("/v1/tokenizer"); });
  return res->body;
}

json ControlClient::next_job(uint64_t after_seq) {
  // The worker index is sent so that the server returns only this worker's share of the work.
  for (;;) {
    std::string path =
        "/v1/job?after=" + std::to_string(after_seq) + "&worker=" + std::to_string(impl_->index);
    auto res = impl_->call("GET /v1/job", [&] { return impl_->client.Get(path.c_str()); });
    if (res->status == 204) continue;
    return json::parse(res->body);
  }
}

void ControlClient::report(const json& report) {
  std::string body = report.dump();
  impl_->call("POST /v1/report", [&] { return impl_->client.Post("/v1/report", body, "application/json"); });
}

}  // namespace pulse::app
