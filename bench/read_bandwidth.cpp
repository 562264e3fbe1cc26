// The machine's read bandwidth, as a decode step sees it: each of THREADS threads, pinned to
// its own CPU, streams its own 256 MiB buffer (first touched by that thread, in transparent
// huge pages where the system allows them) into sums; bytes
// read by all threads over the wall time from the first thread's start to the last one's end.
//
// The floor an engine is measured against must be the best read the CPU can make, or a good
// kernel runs "under" it (llama.cpp's f32 decode once ran at 0.79x of this program's floor on
// a Zen 5 core, when it read with one stream of 32-byte loads). So each run tries every way
// to load: 32- or 64-byte vectors (64 where the CPU has AVX-512), 1, 2, 4 or 8 streams (the
// buffer cut into that many parts, read side by side, as a kernel reads several rows of W),
// with and without a software prefetch 1 KiB ahead of each stream. The best way's rate, best
// of RUNS, is the floor. Built by bench/weights.sh and bench/vs_transformers.sh with -O3
// -march=native.
//
//   read_bandwidth THREADS [RUNS] [-v]   prints "read bandwidth, T threads: X GB/s (best of R
//                                        runs of N ways to load; the best: ...)"; -v also
//                                        each way's best rate
#include <pthread.h>
#include <sched.h>
#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace {

constexpr size_t kBytesPerThread = size_t(256) << 20;
constexpr size_t kHugePage = size_t(2) << 20;
constexpr size_t kPrefetchAhead = 1024;
using Clock = std::chrono::steady_clock;
volatile float sink;

/// One way to read: kBytes-wide loads, kStreams parts side by side, kPrefetch or not. Each
/// step reads two cache lines of every stream into 128 / kBytes running sums, so the loads
/// and not the adds' latency set the pace.
template <int kBytes> struct VecOf;
template <> struct VecOf<32> {
  typedef float type __attribute__((vector_size(32)));
};
template <> struct VecOf<64> {
  typedef float type __attribute__((vector_size(64)));
};

template <int kBytes, int kStreams, bool kPrefetch> float readWay(const char *data, size_t bytes) {
  using Vec = typename VecOf<kBytes>::type;
  constexpr int kSums = 128 / kBytes;
  const size_t part = bytes / kStreams / 128 * 128;
  Vec acc[kSums] = {};
  for (size_t offset = 0; offset < part; offset += 128)
    for (int s = 0; s < kStreams; ++s) {
      const char *line = data + size_t(s) * part + offset;
      if constexpr (kPrefetch)
        __builtin_prefetch(line + kPrefetchAhead);
      for (int k = 0; k < kSums; ++k)
        acc[k] += *reinterpret_cast<const Vec *>(line + k * kBytes);
    }
  float total = 0;
  for (const Vec &v : acc)
    for (int k = 0; k < kBytes / 4; ++k)
      total += v[k];
  return total;
}

struct Way {
  const char *name;
  float (*read)(const char *, size_t);
};
#define TPC_WAYS(BYTES, STREAMS)                                                             \
  Way{#BYTES "-byte loads, streams " #STREAMS, readWay<BYTES, STREAMS, false>},             \
      Way{#BYTES "-byte loads, streams " #STREAMS ", prefetched", readWay<BYTES, STREAMS, true>}
const Way kWays[] = {
    TPC_WAYS(32, 1), TPC_WAYS(32, 2), TPC_WAYS(32, 4), TPC_WAYS(32, 8),
#if defined(__AVX512F__)
    TPC_WAYS(64, 1), TPC_WAYS(64, 2), TPC_WAYS(64, 4), TPC_WAYS(64, 8),
#endif
};
#undef TPC_WAYS

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
  bool verbose = argc > 3 && std::strcmp(argv[3], "-v") == 0;
  std::vector<int> cpus = allowedCpus();
  if (threads < 1 || runs < 1 || size_t(threads) > cpus.size()) {
    std::fprintf(stderr,
                 "usage: %s THREADS [RUNS] [-v]: THREADS from 1 to %zu, the CPUs allowed\n",
                 argv[0], cpus.size());
    return 2;
  }
  constexpr size_t kWayCount = std::size(kWays);
  // Threads that live through every run, each with its buffer: a round is one way read by
  // all of them from a common start (`round` moves on), its end when `done` reaches threads.
  std::atomic<int> ready{0}, done{0};
  std::atomic<long> round{-1};
  std::vector<Clock::time_point> starts(static_cast<size_t>(threads));
  std::vector<Clock::time_point> ends(static_cast<size_t>(threads));
  std::vector<std::thread> pool;
  const long rounds = long(runs) * long(kWayCount);
  for (int t = 0; t < threads; ++t)
    pool.emplace_back([&, t] {
      cpu_set_t one;
      CPU_ZERO(&one);
      CPU_SET(cpus[size_t(t)], &one);
      pthread_setaffinity_np(pthread_self(), sizeof one, &one);
      // In huge pages where the system gives them, as tpc holds its weights
      // (cpu::allocateStreamed): fewer TLB walks read faster, on a Zen 4 core 1.1-1.2x.
      char *buffer = static_cast<char *>(std::aligned_alloc(kHugePage, kBytesPerThread));
      ::madvise(buffer, kBytesPerThread, MADV_HUGEPAGE);
      for (size_t i = 0; i < kBytesPerThread; i += 4096) // its pages are this thread's
        std::memset(buffer + i, int(i & 7), 4096);
      ++ready;
      for (long seen = -1; seen + 1 < rounds;) {
        long r;
        while ((r = round.load(std::memory_order_acquire)) == seen)
          std::this_thread::yield(); // the main thread may need this CPU to start the round
        seen = r;
        starts[size_t(t)] = Clock::now();
        sink = kWays[size_t(r) % kWayCount].read(buffer, kBytesPerThread);
        ends[size_t(t)] = Clock::now();
        done.fetch_add(1, std::memory_order_acq_rel);
      }
      std::free(buffer);
    });
  while (ready.load() < threads)
    std::this_thread::yield();
  std::vector<double> best(kWayCount, 0);
  for (long r = 0; r < rounds; ++r) {
    done.store(0);
    round.store(r, std::memory_order_release);
    while (done.load(std::memory_order_acquire) < threads)
      std::this_thread::yield();
    // From the first thread's start to the last one's end: a thread that saw the round late
    // counts from the first.
    double seconds = std::chrono::duration<double>(*std::max_element(ends.begin(), ends.end()) -
                                                   *std::min_element(starts.begin(), starts.end()))
                         .count();
    double &way = best[size_t(r) % kWayCount];
    way = std::max(way, double(threads) * double(kBytesPerThread) / seconds / 1e9);
  }
  for (std::thread &thread : pool)
    thread.join();
  size_t top = size_t(std::max_element(best.begin(), best.end()) - best.begin());
  if (verbose)
    for (size_t w = 0; w < kWayCount; ++w)
      std::printf("  %-45s %6.1f GB/s\n", kWays[w].name, best[w]);
  std::printf("read bandwidth, %d thread%s: %.1f GB/s (best of %d runs of %zu ways to load; "
              "the best: %s)\n",
              threads, threads == 1 ? "" : "s", best[top], runs, kWayCount, kWays[top].name);
  return 0;
}
