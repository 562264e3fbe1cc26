// The machine's read bandwidth, as a decode step sees it: each of THREADS threads, pinned to
// its own CPU, streams its own 256 MiB buffer (first touched by that thread) with vector
// loads into a sum; bytes read by all threads over the wall time from a common start to the
// last thread's end. Best of RUNS. Built by bench/vs_transformers.sh with -O3 -march=native.
//
//   read_bandwidth THREADS [RUNS]      prints "read bandwidth, T threads: X GB/s (best of R)"
#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

namespace {

constexpr size_t kBytesPerThread = size_t(256) << 20;
using Clock = std::chrono::steady_clock;
volatile float sink;

// Eight independent vector sums, so the loads and not the adds' latency set the pace.
using Vec = float __attribute__((vector_size(32)));

float readAll(const Vec *data, size_t count) {
  Vec acc[8] = {};
  for (size_t i = 0; i + 8 <= count; i += 8)
    for (int j = 0; j < 8; ++j)
      acc[j] += data[i + j];
  float total = 0;
  for (const Vec &v : acc)
    for (int k = 0; k < 8; ++k)
      total += v[k];
  return total;
}

/// The CPUs this process may run on, in order.
std::vector<int> allowedCpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  sched_getaffinity(0, sizeof set, &set);
  std::vector<int> cpus;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &set))
      cpus.push_back(c);
  return cpus;
}

} // namespace

int main(int argc, char **argv) {
  int threads = argc > 1 ? std::atoi(argv[1]) : 1;
  int runs = argc > 2 ? std::atoi(argv[2]) : 5;
  std::vector<int> cpus = allowedCpus();
  if (threads < 1 || runs < 1 || size_t(threads) > cpus.size()) {
    std::fprintf(stderr, "usage: %s THREADS [RUNS]: THREADS from 1 to %zu, the CPUs allowed\n",
                 argv[0], cpus.size());
    return 2;
  }
  size_t count = kBytesPerThread / sizeof(Vec);
  std::atomic<int> ready{0};
  std::atomic<bool> go{false};
  std::vector<Clock::time_point> ends(static_cast<size_t>(threads));
  double best = 0;
  for (int run = 0; run < runs; ++run) {
    ready = 0;
    go = false;
    Clock::time_point start;
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t)
      pool.emplace_back([&, t] {
        cpu_set_t one;
        CPU_ZERO(&one);
        CPU_SET(cpus[size_t(t)], &one);
        pthread_setaffinity_np(pthread_self(), sizeof one, &one);
        std::vector<Vec> buffer(count); // zeroed here: its pages are this thread's
        for (size_t i = 0; i < count; i += 512)
          buffer[i][0] = float(i & 7);
        ++ready;
        while (!go.load(std::memory_order_acquire))
          ;
        sink = readAll(buffer.data(), count); // kept, so the reads are made
        ends[size_t(t)] = Clock::now();
      });
    while (ready.load() < threads)
      std::this_thread::yield();
    start = Clock::now();
    go.store(true, std::memory_order_release);
    for (std::thread &thread : pool)
      thread.join();
    double seconds =
        std::chrono::duration<double>(*std::max_element(ends.begin(), ends.end()) - start)
            .count();
    best = std::max(best, double(threads) * double(kBytesPerThread) / seconds / 1e9);
  }
  std::printf("read bandwidth, %d thread%s: %.1f GB/s (best of %d)\n", threads,
              threads == 1 ? "" : "s", best, runs);
  return 0;
}
