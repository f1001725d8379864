// The unbiased pass@k estimator (Chen et al. 2021) and report formatting.
#include <catch2/catch.hpp>

#include <cmath>
#include <nlohmann/json.hpp>

#include "rl/eval.h"

using namespace pulse;

namespace {
/// 1 - C(n-c,k)/C(n,k) through log-gamma, independent of the product form used by pass_at_k.
double pass_at_k_lgamma(int64_t n, int64_t c, int64_t k) {
  if (n - c < k) return 1.0;
  auto lc = [](double a, double b) {
    return std::lgamma(a + 1) - std::lgamma(b + 1) - std::lgamma(a - b + 1);
  };
  return 1.0 - std::exp(lc(n - c, k) - lc(n, k));
}
}  // namespace

TEST_CASE("pass@k: unbiased estimator values", "[eval]") {
  CHECK(rl::pass_at_k(5, 2, 1) == Approx(0.4));
  CHECK(rl::pass_at_k(5, 2, 2) == Approx(1.0 - 3.0 / 10.0));  // C(3,2)/C(5,2)
  CHECK(rl::pass_at_k(5, 0, 3) == 0.0);
  CHECK(rl::pass_at_k(5, 3, 3) == 1.0);  // n - c < k
  CHECK(rl::pass_at_k(10, 10, 10) == 1.0);
  CHECK(rl::pass_at_k(1, 1, 1) == 1.0);
  CHECK(rl::pass_at_k(200, 13, 10) == Approx(pass_at_k_lgamma(200, 13, 10)).epsilon(1e-10));
  CHECK(rl::pass_at_k(1000, 500, 100) == Approx(pass_at_k_lgamma(1000, 500, 100)).epsilon(1e-10));
  CHECK_THROWS_AS(rl::pass_at_k(5, 6, 1), std::invalid_argument);
  CHECK_THROWS_AS(rl::pass_at_k(5, 2, 6), std::invalid_argument);
  CHECK_THROWS_AS(rl::pass_at_k(5, 2, 0), std::invalid_argument);
}

TEST_CASE("eval report: JSON and table carry the per-subject and per-level counts", "[eval]") {
  rl::EvalReport r;
  r.problems = 3;
  r.pass_at_1 = 2.0 / 3;
  r.pass_at_k = 2.0 / 3;
  r.by_subject["Algebra"] = {2, 2};
  r.by_subject["Geometry"] = {0, 1};
  r.by_level["Level 1"] = {1, 1};
  r.by_level["Level 5"] = {1, 2};
  const auto j = r.to_json();
  CHECK(j.at("by_subject").at("Algebra").at("correct") == 2);
  CHECK(j.at("by_level").at("Level 5").at("total") == 2);
  CHECK(j.at("pass_at_1").get<double>() == Approx(2.0 / 3));
  const std::string t = r.table();
  CHECK(t.find("Geometry") != std::string::npos);
  CHECK(t.find("0.5000") != std::string::npos);  // Level 5: 1/2
  // pass@1 once when k = 1 (it printed "pass@1 0.6667, pass@1 0.6667"); pass@k beside it otherwise.
  r.k = 1;
  r.n_samples = 1;
  const std::string one = r.table();
  CHECK(one.find("pass@1 0.6667") != std::string::npos);
  CHECK(one.find("pass@1", one.find("pass@1") + 1) == std::string::npos);
  r.k = 4;
  r.n_samples = 8;
  r.pass_at_k = 1.0;
  CHECK(r.table().find("n=8: pass@1 0.6667, pass@4 1.0000") != std::string::npos);
}
