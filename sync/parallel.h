// Tiny work-sharing loops on std::thread: the codec's only concurrency primitives.
#pragma once
#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <utility>
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

/// Where a first-stage item of parallel_two_stage hands its follow-up work (e.g. the compression of the
/// streams a scan produced). Thread safe.
class FollowUps {
 public:
  /// Queues fn to run on some worker; `bytes` is its size (bytes it reads), counted in the backlog.
  void submit(std::function<void()> fn, uint64_t bytes) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (stopped_) return;  // an item failed: nothing more runs
      queue_.emplace_back(std::move(fn), bytes);
      backlog_ += bytes;
    }
    wake_.notify_one();
  }

 private:
  template <typename F>
  friend void parallel_two_stage(size_t, int, uint64_t, F&&);
  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::pair<std::function<void()>, uint64_t>> queue_;
  uint64_t backlog_ = 0;  ///< bytes of the queued follow-ups
  bool stopped_ = false;
};

/// Calls first(i, follow_ups) for i in [0, n) (handed out in order: put the biggest first) and every
/// follow-up those calls submit, on up to `threads` threads (0 = all; at most 2n). A worker takes the next
/// first-stage item while the queued follow-ups hold under `backlog_bytes`, else the oldest follow-up: on a
/// few threads the long, memory-bound first-stage items (scans) then run beside the short, compute-bound
/// follow-ups (compression) instead of in lockstep, and the follow-ups even out the threads' ends. On
/// one thread each item's follow-ups run right after it (its output still in cache). The first exception
/// thrown is rethrown after every thread has stopped (the remaining items are dropped).
template <typename F>
void parallel_two_stage(size_t n, int threads, uint64_t backlog_bytes, F&& first) {
  FollowUps follow;
  // Up to two workers per item: one item's follow-ups (a big tensor's frames) can share the threads.
  const int workers = resolve_threads(threads, 2 * n);
  if (workers <= 1) {
    for (size_t i = 0; i < n; ++i) {
      first(i, follow);
      while (!follow.queue_.empty()) {
        auto task = std::move(follow.queue_.front().first);
        follow.queue_.pop_front();
        task();
      }
    }
    return;
  }
  size_t next = 0;  // the next first-stage item; guarded by follow.mutex_
  int running = 0;  // first-stage items in progress (they may still submit)
  std::exception_ptr error;
  auto work = [&] {
    std::unique_lock<std::mutex> lock(follow.mutex_);
    for (;;) {
      const bool take_first = next < n && (follow.backlog_ < backlog_bytes || follow.queue_.empty());
      if (!take_first && follow.queue_.empty()) {
        if (next >= n && running == 0) break;
        follow.wake_.wait(lock);
        continue;
      }
      std::function<void()> task;
      size_t item = 0;
      if (take_first) {
        item = next++;
        ++running;
      } else {
        task = std::move(follow.queue_.front().first);
        follow.backlog_ -= follow.queue_.front().second;
        follow.queue_.pop_front();
      }
      lock.unlock();
      std::exception_ptr failed;
      try {
        if (take_first)
          first(item, follow);
        else
          task();
      } catch (...) {
        failed = std::current_exception();
      }
      lock.lock();
      if (take_first) --running;
      if (failed) {
        if (!error) error = failed;
        next = n;
        follow.stopped_ = true;
        follow.queue_.clear();
        follow.backlog_ = 0;
      }
      if (take_first || failed) follow.wake_.notify_all();  // waiters re-check: the stage may be done
    }
  };
  std::vector<std::thread> pool;
  for (int t = 1; t < workers; ++t) pool.emplace_back(work);
  work();
  for (auto& th : pool) th.join();
  if (error) std::rethrow_exception(error);
}

}  // namespace pulse::sync
