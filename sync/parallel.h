// A tiny work-sharing loop on std::thread: the codec's only concurrency primitive.
#pragma once
#include <algorithm>
#include <atomic>
#include <cstddef>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

namespace pulse::sync {

/// Threads to use for `requested` (0 = all hardware threads), never more than `items`, at least 1.
inline int resolve_threads(int requested, size_t items) {
  size_t n =
      requested > 0 ? static_cast<size_t>(requested) : std::max(1u, std::thread::hardware_concurrency());
  n = std::min(n, std::max<size_t>(items, 1));
  return static_cast<int>(n);
}

/// Calls fn(i) for i in [0, n) on up to `threads` threads (0 = all), items handed out in order (put the
/// biggest first). The first exception thrown by any fn is rethrown after every thread has stopped.
template <typename F>
void parallel_for(size_t n, int threads, F&& fn) {
  const int workers = resolve_threads(threads, n);
  if (workers <= 1) {
    for (size_t i = 0; i < n; ++i) fn(i);
    return;
  }
  std::atomic<size_t> next{0};
  std::exception_ptr error;
  std::mutex error_mutex;
  auto work = [&] {
    for (size_t i; (i = next.fetch_add(1)) < n;) {
      try {
        fn(i);
      } catch (...) {
        std::lock_guard<std::mutex> lock(error_mutex);
        if (!error) error = std::current_exception();
        next.store(n);
      }
    }
  };
  std::vector<std::thread> pool;
  for (int t = 1; t < workers; ++t) pool.emplace_back(work);
  work();
  for (auto& th : pool) th.join();
  if (error) std::rethrow_exception(error);
}

}  // namespace pulse::sync
