// The control server (app/wire/control.h) against hostile and careless peers: reports whose fields are out
// of range (token ids past the vocabulary or past int32, rollout counts, shares, timings) get a 4xx naming
// the field and drop the worker while the job goes on; too many bad reports fail the job with a clear
// error; idle sockets do not delay an authorized request; 405/404/413 with JSON bodies; a huge name is not
// echoed. Hand-written members over loopback HTTP, no model: fast.
#include <catch2/catch.hpp>

#include <chrono>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "app/wire/control.h"
#include "app/wire/report_check.h"
#include "sync/httplib_config.h"
#include "tests/sync/raw_http_util.h"

using namespace pulse;
using nlohmann::json;
using Clock = std::chrono::steady_clock;

namespace {

constexpr int64_t kGroup = 2, kVocab = 10;

/// Two members at most; the report limits: group 2, vocabulary 10, 50 positions (set_report_limits).
app::ControlServer make_server(int64_t max_bad_reports) {
  return app::ControlServer("127.0.0.1", 0, "secret", app::RegisterReply{}, "tok", 2,
                            app::FleetPolicy{2, 30, 600, 256ull << 20, max_bad_reports});
}

const app::ReportLimits kLimits{kGroup, kVocab, 50};

std::vector<app::JobWork> one_share() {
  std::vector<app::JobWork> w(1);
  w[0].problems.resize(1);
  return w;
}

/// A valid report for a share of one prompt.
app::WorkerReport good_report(const app::Job& job) {
  app::WorkerReport r;
  r.seq = job.seq;
  r.share = job.work.at(0).share;
  r.version = job.version;
  r.root_hash = "00";
  for (int64_t g = 0; g < kGroup; ++g) {
    rl::Rollout x;
    x.prompt_ids = {1, 2, 3};
    x.response_ids = {4, 5};
    x.sampler_logprobs = {-0.5f, -1.0f};
    x.reward = 1;
    r.rollouts.push_back(x);
  }
  r.tokens = 2 * kGroup;
  return r;
}

httplib::Headers auth() {
  return {{"Authorization", "Bearer secret"}};
}

}  // namespace

TEST_CASE("control: each bad report field gets a 4xx naming it, the worker is dropped, the job goes on",
          "[app][fleet][hostile]") {
  auto server = make_server(100);
  server.set_report_limits(kLimits);
  server.start();
  const uint64_t id = server.post_job(app::JobKind::Generate, 3, 7, one_share());
  struct Case {
    const char* what;
    std::function<void(json&)> mutate;
    int status;
    std::string says;
  };
  const uint64_t wrap = (1ull << 32) + 5;  // wrapped to 5 by a plain int32 conversion: in range, trained on
  const std::vector<Case> cases = {
      {"id past int32", [&](json& j) { j["rollouts"][0]["response_ids"][0] = wrap; }, 400,
       "field 'rollouts': item 0: field 'response_ids': item 0: 4294967301 is outside the integer range"},
      {"id past the vocabulary", [](json& j) { j["rollouts"][1]["prompt_ids"][2] = 2147483647; }, 422,
       "field 'rollouts[1].prompt_ids[2]': token id 2147483647 outside the vocabulary [0, 10)"},
      {"negative id", [](json& j) { j["rollouts"][0]["response_ids"][1] = -1; }, 422,
       "rollouts[0].response_ids[1]"},
      {"one rollout, not 1 x 2", [](json& j) { j["rollouts"].erase(1); }, 422,
       "field 'rollouts': 1 rollouts, expected 1 prompts x 2"},
      {"share 2^64", [](json& j) { j["share"] = json::parse("18446744073709551616"); }, 400, "field 'share'"},
      {"share -2^63", [](json& j) { j["share"] = INT64_MIN; }, 422, "field 'share': -9223372036854775808"},
      {"share past the job's", [](json& j) { j["share"] = 1; }, 422, "field 'share': 1 is not a share"},
      {"tokens", [](json& j) { j["tokens"] = 999; }, 422, "field 'tokens'"},
      {"log-prob > 0", [](json& j) { j["rollouts"][0]["sampler_logprobs"][0] = 0.5; }, 422,
       "rollouts[0].sampler_logprobs[0]"},
      {"problem_index", [](json& j) { j["rollouts"][1]["problem_index"] = 3; }, 422,
       "rollouts[1].problem_index"},
      {"reward type", [](json& j) { j["rollouts"][0]["reward"] = "x"; }, 400, "field 'reward'"},
      {"generate_ms", [](json& j) { j["generate_ms"] = -1; }, 422, "field 'generate_ms'"},
      {"root_hash", [](json& j) { j["root_hash"] = "zz"; }, 422, "field 'root_hash'"},
  };
  int64_t drops = 0;
  for (const auto& c : cases) {
    INFO(c.what);
    app::ControlClient bad(server.url(), "secret", 5, 0);
    const app::RegisterReply reg = bad.register_worker("bad");
    const app::Job job = bad.next_job(0);  // the orphaned share comes to the new member
    REQUIRE(job.work.size() == 1);
    json body = good_report(job);
    c.mutate(body);
    httplib::Client raw(server.url());
    auto res = raw.Post(("/v1/report?worker=" + reg.key).c_str(), auth(), body.dump(), "application/json");
    REQUIRE(res);
    CHECK(res->status == c.status);
    CHECK_THAT(res->body, Catch::Contains(c.says));
    CHECK(json::parse(res->body, nullptr, false).is_object());
    CHECK(server.live_ids().empty());  // dropped as faulty
    CHECK(server.events().drops == ++drops);
  }
  // The text of the 2^32+5 refusal names the field; the report never counted: a good member finishes.
  app::ControlClient good(server.url(), "secret", 5, 0);
  good.register_worker("good");
  const app::Job job = good.next_job(0);
  REQUIRE(job.work.size() == 1);
  good.report(good_report(job));
  const auto reports = server.wait_job(id, {});
  REQUIRE(reports.size() == 1);
  CHECK(reports[0].worker_id == "good");
  CHECK(reports[0].rollouts.at(0).response_ids == std::vector<int32_t>{4, 5});
  server.stop();
}

TEST_CASE("control: when every worker keeps sending bad reports the job fails with the reason",
          "[app][fleet][hostile]") {
  auto server = make_server(2);
  server.set_report_limits(kLimits);
  server.start();
  const uint64_t id = server.post_job(app::JobKind::Generate, 1, 4, one_share());
  for (int i = 0; i < 3; ++i) {
    app::ControlClient bad(server.url(), "secret", 5, 0);
    const app::RegisterReply reg = bad.register_worker("faulty");
    const app::Job job = bad.next_job(0);
    json body = good_report(job);
    body["rollouts"][0]["response_ids"][0] = 11;
    httplib::Client raw(server.url());
    auto res = raw.Post(("/v1/report?worker=" + reg.key).c_str(), auth(), body.dump(), "application/json");
    REQUIRE(res);
    CHECK(res->status == 422);
  }
  CHECK_THROWS_WITH(server.wait_job(id, {}),
                    Catch::Contains("step 4: 3 bad worker reports for one job (more than 2") &&
                        Catch::Contains("outside the vocabulary"));
  server.stop();
}

TEST_CASE("control: idle sockets do not delay registration, and 405, 404, 413 and a huge name, all JSON",
          "[app][fleet][hostile]") {
  auto server = make_server(0);
  server.start();
  std::vector<test::RawSocket> idle;
  for (int i = 0; i < 30; ++i) {
    idle.emplace_back(server.port());
    idle.back().send("P");
  }
  // Bounded by the gate's own head timeout (5 s), which the stalling sockets would otherwise hold.
  const auto t0 = Clock::now();
  app::ControlClient c(server.url(), "secret", 10, 0);
  const app::RegisterReply reg = c.register_worker("w");
  CHECK(reg.worker_id == "w");
  CHECK(std::chrono::duration<double>(Clock::now() - t0).count() < 2.0);

  httplib::Client raw(server.url());
  auto get_register = raw.Get("/v1/register", auth());
  REQUIRE(get_register);
  CHECK(get_register->status == 405);  // was 404
  CHECK(get_register->get_header_value("Allow") == "POST");
  CHECK(json::parse(get_register->body, nullptr, false).is_object());
  auto unknown = raw.Get("/v1/nothing", auth());
  REQUIRE(unknown);
  CHECK(unknown->status == 404);
  CHECK_THAT(unknown->body, Catch::Contains("unknown route GET /v1/nothing"));  // was an empty body
  // A 50 MB name: refused by size before it is read (was echoed back in a 52 MB 400).
  const std::string huge = "{\"worker\":\"" + std::string(50u << 20, 'n') + "\"}";
  auto big = raw.Post("/v1/register", auth(), huge, "application/json");
  REQUIRE(big);
  CHECK(big->status == 413);
  CHECK(big->body.size() < 2000);
  // A long name inside the limit comes back cut.
  auto long_name = raw.Post("/v1/register", auth(), "{\"worker\":\"" + std::string(60000, 'n') + "\"}",
                            "application/json");
  REQUIRE(long_name);
  CHECK(long_name->status == 400);
  CHECK(long_name->body.size() < 5000);
  // Invalid UTF-8: 400 (not a retryable 500), an ASCII header.
  auto utf8 =
      raw.Post(("/v1/report?worker=" + reg.key).c_str(), auth(), "{\"worker\":\"\xff\"}", "application/json");
  REQUIRE(utf8);
  CHECK(utf8->status == 400);
  CHECK_THAT(utf8->body, Catch::Contains("worker report: not JSON"));
  CHECK(test::printable(utf8->get_header_value("X-Pulse-Error")));
  server.stop();
}

TEST_CASE("control: a sync-only report to a generate job (a member holding no share) still counts",
          "[app][fleet][hostile]") {
  auto server = make_server(0);
  server.set_report_limits(kLimits);
  server.start();
  app::ControlClient a(server.url(), "secret", 5, 0), b(server.url(), "secret", 5, 0);
  a.register_worker("a");
  b.register_worker("b");
  const uint64_t id = server.post_job(app::JobKind::Generate, 2, 1, one_share());
  const app::Job ja = a.next_job(0), jb = b.next_job(0);
  REQUIRE(ja.work.size() == 1);
  REQUIRE(jb.work.empty());  // synced only: its report has no share
  app::WorkerReport synced;
  synced.seq = jb.seq;
  synced.version = 2;
  synced.root_hash = "00";
  b.report(synced);  // 200: not a bad report
  a.report(good_report(ja));
  CHECK(server.wait_job(id, {}).size() == 1);
  CHECK(server.live_ids() == std::vector<std::string>{"a", "b"});
  CHECK(server.events().drops == 0);
  server.stop();
}
