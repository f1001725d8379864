// Nothing non-finite is published (issue 11): the publisher refuses NaN/Inf weights before encoding, the
// metrics row says when the optimizer refused a step, and a malformed worker report is answered 400 with
// a message naming the field (never a bare JSON type error).
#include <catch2/catch.hpp>

#include <cstring>
#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "app/config.h"
#include "app/trainer/publisher.h"
#include "app/trainer/step_record.h"
#include "app/wire/control.h"
#include "sync/http_common.h"
#include "sync/httplib_config.h"
#include "tests/app/run_test_util.h"

using nlohmann::json;
using namespace pulse;

namespace {

/// A BF16 view over `bits` named `name`.
sync::TensorView bf16_view(const std::string& name, const std::vector<uint16_t>& bits) {
  return sync::TensorView{name,
                          sync::DType::BF16,
                          {static_cast<int64_t>(bits.size())},
                          reinterpret_cast<const uint8_t*>(bits.data()),
                          bits.size() * 2};
}

}  // namespace

TEST_CASE("require_finite_weights finds NaN/Inf bit patterns and names tensor and element",
          "[app][publish][nonfinite]") {
  std::vector<uint16_t> ok(10000, 0x3F80);  // 1.0
  ok[17] = 0x7F7F;                          // the largest finite BF16
  ok[18] = 0xFF7F;                          // and its negative
  ok[19] = 0x0001;                          // a denormal
  std::vector<uint16_t> bad = ok;
  CHECK_NOTHROW(app::require_finite_weights({bf16_view("a", ok), bf16_view("b", bad)}, "v1"));

  bad[9000] = 0x7FC0;  // quiet NaN, past the first block of the scan
  bad[9001] = 0x7F80;
  CHECK_THROWS_WITH(
      app::require_finite_weights({bf16_view("a", ok), bf16_view("b", bad)}, "publish version 3"),
      Catch::Equals("publish version 3: tensor 'b' element 9000 is NaN (BF16 bits 0x7fc0); "
                    "non-finite weights are never published"));
  bad[9000] = 0xFF80;
  CHECK_THROWS_WITH(app::require_finite_weights({bf16_view("b", bad)}, "x"),
                    Catch::StartsWith("x: tensor 'b' element 9000 is -Inf"));
  bad[9000] = 0x3F80;
  CHECK_THROWS_WITH(app::require_finite_weights({bf16_view("b", bad)}, "x"),
                    Catch::StartsWith("x: tensor 'b' element 9001 is +Inf"));

  std::vector<float> f32(5, 0.5f);
  f32[3] = std::numeric_limits<float>::infinity();
  sync::TensorView fv{"f", sync::DType::F32, {5}, reinterpret_cast<const uint8_t*>(f32.data()), 20};
  CHECK_THROWS_WITH(app::require_finite_weights({fv}, "x"),
                    Catch::StartsWith("x: tensor 'f' element 3 is +Inf"));
}

TEST_CASE("Publisher::publish refuses a NaN BF16 view and publishes nothing for it",
          "[app][publish][nonfinite]") {
  const test_run::ScopedTempDir scoped("nonfinite-publish");
  const std::string& dir = scoped.path;
  app::Config config;
  std::vector<uint16_t> w(64, 0x3F80);
  app::Publisher pub(config, dir, "", 0, {bf16_view("model.w", w)});

  std::vector<uint16_t> nan = w;
  nan[42] = 0xFFC1;  // a negative NaN with payload
  CHECK_THROWS_WITH(pub.publish(1, {bf16_view("model.w", nan)}),
                    Catch::Contains("tensor 'model.w' element 42 is NaN"));
  // Version 1 was never published: the finite weights still go out as version 1.
  w[3] = 0x4000;
  const app::PublishStats st = pub.publish(1, {bf16_view("model.w", w)});
  CHECK(st.changed == 1);
  pub.stop();

  std::vector<uint16_t> inf = w;
  inf[0] = 0x7F80;
  CHECK_THROWS_WITH(app::Publisher(config, dir, "", 0, {bf16_view("model.w", inf)}),
                    Catch::Contains("publish version 0: tensor 'model.w' element 0 is +Inf"));
}

TEST_CASE("the metrics row records an optimizer refusal", "[app][publish][nonfinite]") {
  app::StepRecord r;
  json row = r.to_json();
  CHECK(row["refused_nonfinite"] == false);
  CHECK(row["refused_reason"] == "none");
  CHECK(row["refused_nonfinite_steps"] == 0);
  r.refused_nonfinite = true;
  r.refused_reason = "nonfinite_update";
  r.refused_nonfinite_steps = 2;
  row = r.to_json();
  CHECK(row["refused_nonfinite"] == true);
  CHECK(row["refused_reason"] == "nonfinite_update");
  CHECK(row["refused_nonfinite_steps"] == 2);
}

TEST_CASE("a worker report with \"version\": null is answered 400 naming the field",
          "[app][control][nonfinite]") {
  app::ControlServer server("127.0.0.1", 0, "", app::RegisterReply{}, "tok", 1);
  server.start();
  app::WorkerReport report;
  report.worker = 0;
  json body = report;
  body["version"] = nullptr;  // what a NaN/Inf number becomes in JSON

  // A registered member's report: the server checks the lease key before it reads the body.
  app::ControlClient first(server.url(), "", 5, 0);
  const app::RegisterReply reg = first.register_worker("first");
  httplib::Client client("127.0.0.1", server.port());
  auto res = client.Post(("/v1/report?worker=" + reg.key).c_str(), body.dump(), "application/json");
  REQUIRE(res);
  CHECK(res->status == 400);
  const json answer = json::parse(res->body);
  const std::string error = answer.at("error").get<std::string>();
  CHECK(error == "worker report: field 'version': must be an integer in [0, 18446744073709551615], got null");
  CHECK_THAT(error, !Catch::Contains("json.exception"));

  // The worker's client surfaces the same words (not retried: a 4xx cannot get better).
  // (A refused report drops its member: the second report comes from a second one.)
  app::ControlClient worker(server.url(), "", 5, 0);
  worker.register_worker("second");
  app::WorkerReport nan_reward = report;
  rl::Rollout ro;
  ro.response_ids = {5};
  ro.sampler_logprobs = {-1.0f};
  ro.reward = std::numeric_limits<double>::quiet_NaN();  // serialized as null
  nan_reward.rollouts.push_back(ro);
  try {
    worker.report(nan_reward);
    FAIL("a report with a NaN reward was accepted");
  } catch (const std::exception& e) {
    const std::string what = e.what();
    INFO(what);
    CHECK_THAT(what, Catch::Contains("HTTP 400"));
    CHECK_THAT(what, Catch::Contains("field 'rollouts'"));
    CHECK_THAT(what, Catch::Contains("field 'reward'"));
    CHECK_THAT(what, !Catch::Contains("json.exception"));
  }
  server.stop();
}
