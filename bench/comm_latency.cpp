// All-reduce latency between local ranks, for each transport a tp group on one machine can
// use: forks `world` ranks, connects them as the binaries do (TPC_TRANSPORT), and times
// all_reduce of 1 KB, 64 KB and 1 MB of fp32, median of many calls after a warm-up.
//   tpc-comm-latency [WORLD] [CALLS]      (defaults 2 and 2000)
#include "tpcrt/comm.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

using namespace tpcrt;

namespace {

/// Rank `rank`'s medians in microseconds, one per size, written to `fd` by rank 0.
bool measure(int rank, int world, const std::string &dir, int calls, int fd) {
  std::string error;
  auto group = Comm::connect({rank, world, dir, "127.0.0.1", 60}, error);
  if (!group) {
    std::fprintf(stderr, "rank %d: %s\n", rank, error.c_str());
    return false;
  }
  Communicator &comm = group->communicator();
  for (size_t bytes : {size_t(1) << 10, size_t(64) << 10, size_t(1) << 20}) {
    std::vector<float> data(bytes / sizeof(float), 1.0f);
    std::vector<double> micros;
    int n = bytes >= (size_t(1) << 20) ? std::max(calls / 10, 20) : calls;
    group->barrier(); // then back to back, as OSU's osu_allreduce and nccl-tests time them
    for (int i = 0; i < n + n / 10; ++i) {
      auto start = std::chrono::steady_clock::now();
      comm.allReduce(data.data(), data.size());
      double us =
          std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start)
              .count();
      if (i >= n / 10) // the first tenth warms up
        micros.push_back(us);
    }
    std::nth_element(micros.begin(), micros.begin() + micros.size() / 2, micros.end());
    double median = micros[micros.size() / 2];
    if (rank == 0 && ::write(fd, &median, sizeof median) != sizeof median)
      return false;
  }
  group->barrier();
  group->retire();
  return true;
}

} // namespace

int main(int argc, char **argv) {
  int world = argc > 1 ? std::atoi(argv[1]) : 2, calls = argc > 2 ? std::atoi(argv[2]) : 2000;
  if (world < 2 || calls < 10) {
    std::fprintf(stderr, "usage: tpc-comm-latency [WORLD >= 2] [CALLS >= 10]\n");
    return 2;
  }
  std::printf("all_reduce latency, %d local ranks, median microseconds of back-to-back calls\n",
              world);
  std::printf("%-10s %10s %10s %10s\n", "transport", "1 KB", "64 KB", "1 MB");
  for (const char *transport : {"gloo", "shm"}) {
    ::setenv("TPC_TRANSPORT", transport, 1);
    char dir[] = "/tmp/tpc-comm-latency-XXXXXX";
    if (!::mkdtemp(dir))
      return 1;
    int pipefd[2];
    if (::pipe(pipefd) != 0)
      return 1;
    std::vector<pid_t> pids;
    for (int r = 0; r < world; ++r) {
      pid_t pid = ::fork();
      if (pid == 0)
        ::_exit(measure(r, world, dir, calls, pipefd[1]) ? 0 : 1);
      pids.push_back(pid);
    }
    ::close(pipefd[1]);
    bool ok = true;
    for (pid_t pid : pids) {
      int status = 0;
      ::waitpid(pid, &status, 0);
      ok &= WIFEXITED(status) && WEXITSTATUS(status) == 0;
    }
    double medians[3] = {};
    ok &= ::read(pipefd[0], medians, sizeof medians) == ssize_t(sizeof medians);
    ::close(pipefd[0]);
    if (!ok) {
      std::fprintf(stderr, "tpc-comm-latency: the %s run failed\n", transport);
      return 1;
    }
    std::printf("%-10s %10.1f %10.1f %10.1f\n", transport, medians[0], medians[1], medians[2]);
  }
  return 0;
}
