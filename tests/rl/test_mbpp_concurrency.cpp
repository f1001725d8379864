// MBPP sandbox under concurrency: several threads each running grade_batch (itself parallel) at once,
// as `pulse run` does with more than one in-process inference worker. Every verdict must still be
// right and the whole thing must finish: a hang fails the test through a watchdog instead of blocking.
// LibTorch before Catch2: c10/glog define a CHECK macro that Catch2's must replace (as with the PCH).
#include <torch/torch.h>

#include "tests/torch_catch.h"

#include <atomic>
#include <chrono>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "datasets/loaders.h"
#include "rl/grader.h"
#include "rl/mbpp_sandbox.h"
#include "tests/test_paths.h"

using namespace pulse::rl;

namespace {

struct Batch {
  std::vector<const Problem*> problems;
  std::vector<std::string> responses;
  std::vector<int> expect;  // 1 pass, 0 wrong, -1 timeout (infinite loop)
};

// 8 tasks per caller: references, other tasks' programs (wrong), and one infinite loop.
Batch make_batch(const std::vector<Problem>& tasks, size_t caller) {
  Batch b;
  for (size_t k = 0; k < 8; ++k) {
    size_t i = (caller * 37 + k * 13) % tasks.size();
    b.problems.push_back(&tasks[i]);
    if (k == 5) {
      b.responses.push_back("```python\nwhile True:\n    pass\n```");
      b.expect.push_back(-1);
    } else if (k % 2 == 0) {
      b.responses.push_back("```python\n" + tasks[i].solution + "\n```");
      b.expect.push_back(1);
    } else {
      b.responses.push_back("```python\n" + tasks[(i + 1) % tasks.size()].solution + "\n```");
      b.expect.push_back(0);
    }
  }
  return b;
}

}  // namespace

TEST_CASE("concurrent grade_batch callers all finish with correct verdicts", "[grader][mbpp][concurrency]") {
  REQUIRE(sandbox_available());
  const std::vector<Problem> tasks =
      pulse::datasets::load_mbpp_jsonl(pulse::test::shared_path("datasets/mbpp.jsonl"));
  REQUIRE(tasks.size() > 100);
  const size_t callers = 3;
  std::vector<Batch> batches;
  for (size_t c = 0; c < callers; ++c) batches.push_back(make_batch(tasks, c));

  // Each caller grades on 0 threads (= one per hardware thread), like rl::collect_rollouts in a worker.
  // The futures own their threads; a hang is reported by wait_for, and the stuck threads are detached
  // by leaking the future state (the test process then exits with the failure rather than blocking).
  auto results = std::make_shared<std::vector<std::vector<RewardResult>>>(callers);
  auto batches_ptr = std::make_shared<std::vector<Batch>>(batches);
  // Meanwhile another thread runs BLAS matrix products, as the other worker's generation does: a fork
  // in a grading thread must not break a BLAS call in flight (OpenBLAS's atfork handler once did).
  auto blas_products = std::make_shared<std::atomic<int64_t>>(0);
  auto blas_wrong = std::make_shared<std::atomic<int64_t>>(0);
  auto all = std::make_shared<std::future<void>>(
      std::async(std::launch::async, [results, batches_ptr, blas_products, blas_wrong] {
        std::atomic<bool> grading_done{false};
        std::thread blas([&] {
          torch::Tensor a = torch::ones({384, 384});
          while (!grading_done.load()) {
            torch::Tensor c = torch::mm(a, a);
            if (c[7][11].item<float>() != 384.0f) blas_wrong->fetch_add(1);
            blas_products->fetch_add(1);
          }
        });
        std::vector<std::thread> pool;
        for (size_t c = 0; c < batches_ptr->size(); ++c)
          pool.emplace_back([&, c] {
            (*results)[c] = grade_batch((*batches_ptr)[c].problems, (*batches_ptr)[c].responses, 0);
          });
        for (auto& t : pool) t.join();
        grading_done = true;
        blas.join();
      }));
  bool finished = all->wait_for(std::chrono::seconds(120)) == std::future_status::ready;
  if (!finished) {
    new std::shared_ptr<std::future<void>>(all);  // never destroyed: ~future would block on the hang
    FAIL(
        "concurrent grade_batch + BLAS did not finish within 120 s (deadlock, or a pipe that never saw EOF)");
  }
  all->get();
  CHECK(blas_products->load() > 0);
  CHECK(blas_wrong->load() == 0);
  for (size_t c = 0; c < callers; ++c) {
    const Batch& b = batches[c];
    REQUIRE((*results)[c].size() == b.problems.size());
    for (size_t k = 0; k < b.problems.size(); ++k) {
      const RewardResult& r = (*results)[c][k];
      INFO("caller " << c << " item " << k << " " << b.problems[k]->id << ": " << r.reason);
      CHECK_FALSE(r.infrastructure_error);
      if (b.expect[k] == 1) CHECK(r.score == 1.0);
      if (b.expect[k] == 0) CHECK(r.score == 0.0);
      if (b.expect[k] == -1) {
        CHECK(r.score == 0.0);
        // Stopped by the wall clock, or by RLIMIT_CPU (SIGXCPU, which bwrap reports as exit 128 + 24).
        CHECK((r.reason == "timeout" || r.reason == "cpu_limit"));
      }
    }
  }
}
