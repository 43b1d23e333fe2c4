// A minimal parallel-for for the CPU back end: tasks are handed out one at a time from an atomic
// counter (tasks differ in length: topk_length varies per query), the calling thread works too,
// and a thread that cannot be started only means fewer workers, never a lost task.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <thread>
#include <vector>

namespace sparse_mla::cpu {

// Workers to use for `num_tasks` tasks when the caller asks for `requested` threads
// (RunOptions::num_threads; 0 = every hardware thread).
inline int worker_count(int64_t num_tasks, int requested) {
  // Read once per process: glibc answers hardware_concurrency() by reading
  // /sys/devices/system/cpu/online, an open + read + close that cost ~10 us per call.
  static const int hw = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  // Oversubscription is allowed (tests use it to vary the split) but bounded: every worker owns
  // a tile, so an absurd request must not turn into gigabytes of tiles.
  int want = requested > 0 ? std::min(requested, std::max(4 * hw, 16)) : hw;
  return static_cast<int>(std::clamp<int64_t>(num_tasks, 1, want));
}

// Calls fn(task, worker) for every task in [0, num_tasks) on `workers` threads (worker ids
// 0..workers-1; worker 0 is the calling thread). Returns when all tasks are done.
template <typename Fn>
void parallel_for(int64_t num_tasks, int workers, Fn&& fn) {
  std::atomic<int64_t> next{0};
  auto work = [&](int worker) {
    for (int64_t task = next.fetch_add(1); task < num_tasks; task = next.fetch_add(1)) {
      fn(task, worker);
    }
  };
  std::vector<std::thread> threads;
  for (int w = 1; w < workers; ++w) {
    try {
      threads.emplace_back(work, w);
    } catch (...) {
      break;  // fewer workers; the counter still hands out every task
    }
  }
  work(0);
  for (std::thread& t : threads) t.join();
}

}  // namespace sparse_mla::cpu
