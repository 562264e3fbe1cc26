// All-reduce latency between local ranks, for each transport a tp group on one machine can
// use: forks `world` ranks, connects them as the binaries do (TPC_TRANSPORT), and times
// all_reduce of 1 KB, 64 KB and 1 MB of fp32, median of many calls after a warm-up; then
// checks that every rank's sum of the same random inputs has the same bits (tpc's ranks
// decide the next token each on its own copy of the logits), and, printed after the table,
// that messages go round a ring of the ranks whole (send/recv) and that the group splits
// into parts that sum each on their own (split), as pipeline stages use them. Under mpirun
// the processes mpirun started are the ranks, on MPI's collectives (mpi) and on shared memory
// (shm). Under tpc launch --nnodes or torchrun (MASTER_ADDR, RANK, WORLD_SIZE set) this process
// is one rank of a group that may span hosts: it meets at rank 0's store as the binaries do,
// on the transport they choose (auto: shared memory, the hierarchy over hosts, or Gloo's mesh)
// and on Gloo's flat mesh (gloo), each on a store port of its own (MASTER_PORT + 2, + 3).
// TPC_COMM_SIZES=B1,B2,B3 times three other sizes, in bytes (a model's decode all-reduce).
//   tpc-comm-latency [WORLD] [CALLS]      (defaults 2 and 2000)
//   mpirun -n WORLD tpc-comm-latency WORLD [CALLS]
//   tpc launch --nnodes H ... tpc-comm-latency WORLD [CALLS]
#include "tpcrt/comm.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

using namespace tpcrt;

namespace {

/// What rank 0 reports of one transport.
struct Result {
  double medians[3]; // microseconds, for each of sizes()
  bool sameBits;     // every rank summed to the same bits
  bool messages;     // every message of the ring arrived whole
  bool split;        // the even and the odd ranks' parts summed their own
};

/// The three sizes timed, in bytes: 1 KB, 64 KB and 1 MB, or TPC_COMM_SIZES's.
std::vector<size_t> sizes() {
  std::vector<size_t> out = {size_t(1) << 10, size_t(64) << 10, size_t(1) << 20};
  if (const char *given = std::getenv("TPC_COMM_SIZES")) {
    size_t a = 0, b = 0, c = 0;
    if (std::sscanf(given, "%zu,%zu,%zu", &a, &b, &c) == 3 && a >= 4 && b >= 4 && c >= 4 &&
        c <= (size_t(1) << 30))
      out = {a / 4 * 4, b / 4 * 4, c / 4 * 4};
  }
  return out;
}

/// Whether every rank's all_reduce of the same inputs has the same bits: sums of mixed
/// magnitudes, one that fits a shared-memory slot and one that takes rounds.
bool sameBitsEverywhere(Comm &group) {
  Communicator &comm = group.communicator();
  float mismatches = 0;
  for (size_t n : {size_t(16) << 10, size_t(300) << 10}) {
    std::vector<float> data(n), all(n * size_t(group.world()));
    uint32_t x = 2463534242u + uint32_t(group.rank()) * 977u;
    for (float &v : data) { // xorshift: values from 1e-4 to 1e4, both signs
      x ^= x << 13, x ^= x >> 17, x ^= x << 5;
      v = float(int32_t(x % 20001) - 10000) * std::pow(10.0f, float(int(x >> 24) % 9 - 4)) /
          10000.0f;
    }
    comm.allReduce(data.data(), n);
    comm.allGather(data.data(), n, all.data());
    for (int r = 0; r < group.world(); ++r)
      if (std::memcmp(all.data() + size_t(r) * n, data.data(), n * sizeof(float)) != 0)
        mismatches += 1;
  }
  comm.allReduce(&mismatches, 1);
  return mismatches == 0;
}

/// Whether each rank's message to the next (a slot and more of floats) arrives whole, on every
/// rank. Half the ranks receive first, so that a send that waits for its receiver (MPI's, for
/// a message this large) waits on one that is receiving.
bool ringOfMessages(Comm &group) {
  Communicator &comm = group.communicator();
  int rank = group.rank(), world = group.world();
  const size_t n = (size_t(1) << 20) / sizeof(float) + 3;
  auto from = [n](int r) {
    std::vector<float> m(n);
    for (size_t i = 0; i < n; ++i)
      m[i] = float((size_t(r) * 7919 + i) % (size_t(1) << 24));
    return m;
  };
  std::vector<float> mine = from(rank), got(n);
  int next = (rank + 1) % world, previous = (rank + world - 1) % world;
  if (rank % 2 == 0)
    comm.send(mine.data(), n, next);
  comm.recv(got.data(), n, previous);
  if (rank % 2 == 1)
    comm.send(mine.data(), n, next);
  float failed = got == from(previous) ? 0 : 1;
  comm.allReduce(&failed, 1);
  return failed == 0;
}

/// Whether the group splits into its even and its odd ranks, each part ordered from the
/// highest rank down, and each part's sum of its ranks is its own.
bool splitsIntoParts(Comm &group) {
  int rank = group.rank(), world = group.world();
  std::string error;
  std::unique_ptr<Comm> part = group.split(rank % 2, -rank, error);
  float failed = 1;
  if (part) {
    float sum = float(rank), want = 0;
    int members = 0, above = 0;
    for (int r = rank % 2; r < world; r += 2) {
      want += float(r);
      ++members;
      above += r > rank;
    }
    part->communicator().allReduce(&sum, 1);
    failed = sum == want && part->world() == members && part->rank() == above ? 0 : 1;
  } else {
    std::fprintf(stderr, "rank %d: %s\n", rank, error.c_str());
  }
  part.reset(); // before the group it is part of
  group.communicator().allReduce(&failed, 1);
  return failed == 0;
}

/// Rank `rank`'s medians in microseconds, one per size, and whether the ranks agree bit for
/// bit, into `result` (rank 0's are the report).
bool measure(int rank, int world, const std::string &dir, int calls, Result &result) {
  std::string error;
  CommOptions options{rank, world, dir, "127.0.0.1", 60};
  if (dir.empty() && !storeFromEnv(options, error)) {
    std::fprintf(stderr, "rank %d: %s\n", rank, error.c_str());
    return false;
  }
  auto group = Comm::connect(options, error);
  if (!group) {
    std::fprintf(stderr, "rank %d: %s\n", rank, error.c_str());
    return false;
  }
  Communicator &comm = group->communicator();
  int size = 0;
  for (size_t bytes : sizes()) {
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
    result.medians[size] = micros[micros.size() / 2];
    ++size;
  }
  result.sameBits = sameBitsEverywhere(*group);
  result.messages = ringOfMessages(*group);
  result.split = splitsIntoParts(*group);
  group->barrier();
  group->retire();
  return true;
}

void printRow(const char *transport, const Result &r) {
  std::printf("%-10s %10.1f %10.1f %10.1f %10s\n", transport, r.medians[0], r.medians[1],
              r.medians[2], r.sameBits ? "yes" : "NO");
}

/// Where the checks after the table failed: the transports, each with what failed.
struct Checks {
  std::string messages, split;

  void add(const char *transport, const Result &r) {
    if (!r.messages)
      messages += (messages.empty() ? "" : ", ") + std::string(transport);
    if (!r.split)
      split += (split.empty() ? "" : ", ") + std::string(transport);
  }
  void print() const {
    std::printf("send/recv: %s\n", messages.empty() ? "ok" : ("FAILED on " + messages).c_str());
    std::printf("split: %s\n", split.empty() ? "ok" : ("FAILED on " + split).c_str());
  }
};

void printHeader(int world, const char *ranks) {
  std::printf("all_reduce latency, %d %s, median microseconds of back-to-back calls\n",
              world, ranks);
  std::vector<size_t> s = sizes();
  auto name = [](size_t b) {
    return b >= (size_t(1) << 20) && b % (size_t(1) << 20) == 0
               ? std::to_string(b >> 20) + " MB"
           : b >= 1024 && b % 1024 == 0 ? std::to_string(b >> 10) + " KB"
                                         : std::to_string(b) + " B";
  };
  std::printf("%-10s %10s %10s %10s %10s\n", "transport", name(s[0]).c_str(),
              name(s[1]).c_str(), name(s[2]).c_str(), "same bits");
}

/// This process as rank `rank`, for each of `transports` in turn; with `storePort`, each
/// meets at a store port of its own from there.
int eachTransport(int rank, int world, int calls, std::vector<const char *> transports,
                  int storePort) {
  Checks checks;
  for (const char *transport : transports) {
    ::setenv("TPC_TRANSPORT", transport, 1);
    if (storePort > 0)
      ::setenv("TPC_STORE_PORT", std::to_string(storePort++).c_str(), 1);
    Result result{};
    if (!measure(rank, world, "", calls, result)) {
      std::fprintf(stderr, "tpc-comm-latency: the %s run failed\n", transport);
      return 1;
    }
    if (rank == 0) {
      printRow(transport, result);
      std::fflush(stdout);
    }
    checks.add(transport, result);
  }
  if (rank == 0)
    checks.print();
  return 0;
}

/// This process's rank from `rankVar`, checked against `worldVar`; -1 where that is not WORLD.
int rankFrom(const char *rankVar, const char *worldVar, int world) {
  if (std::atoi(std::getenv(worldVar)) != world) {
    std::fprintf(stderr, "tpc-comm-latency: WORLD is %d, but %s is %s\n", world, worldVar,
                 std::getenv(worldVar));
    return -1;
  }
  return std::atoi(std::getenv(rankVar));
}

/// Under mpirun: this process is one of the ranks, on MPI's collectives and on shared memory.
int underMpirun(int world, int calls) {
  int rank = rankFrom("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", world);
  if (rank < 0)
    return 2;
  if (rank == 0)
    printHeader(world, "ranks started by mpirun");
  return eachTransport(rank, world, calls, {"mpi", "shm"}, 0);
}

/// Under tpc launch or torchrun: this process is rank RANK, on the transport the binaries
/// choose and on Gloo's flat mesh.
int launched(int world, int calls) {
  int rank = rankFrom("RANK", "WORLD_SIZE", world);
  if (rank < 0)
    return 2;
  if (rank == 0)
    printHeader(world, "ranks met at MASTER_ADDR's store");
  const char *port = std::getenv("MASTER_PORT");
  return eachTransport(rank, world, calls, {"auto", "gloo"}, (port ? std::atoi(port) : 29500) + 2);
}

} // namespace

int main(int argc, char **argv) {
  int world = argc > 1 ? std::atoi(argv[1]) : 2, calls = argc > 2 ? std::atoi(argv[2]) : 2000;
  if (world < 2 || calls < 10) {
    std::fprintf(stderr, "usage: tpc-comm-latency [WORLD >= 2] [CALLS >= 10]\n");
    return 2;
  }
  if (startedByMpirun())
    return underMpirun(world, calls);
  if (std::getenv("MASTER_ADDR") && std::getenv("RANK") && std::getenv("WORLD_SIZE"))
    return launched(world, calls);
  printHeader(world, "local ranks");
  Checks checks;
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
      if (pid == 0) {
        Result result{};
        bool ok = measure(r, world, dir, calls, result) &&
                  (r != 0 || ::write(pipefd[1], &result, sizeof result) == sizeof result);
        ::_exit(ok ? 0 : 1);
      }
      pids.push_back(pid);
    }
    ::close(pipefd[1]);
    bool ok = true;
    for (pid_t pid : pids) {
      int status = 0;
      ::waitpid(pid, &status, 0);
      ok &= WIFEXITED(status) && WEXITSTATUS(status) == 0;
    }
    Result result{};
    ok &= ::read(pipefd[0], &result, sizeof result) == ssize_t(sizeof result);
    ::close(pipefd[0]);
    if (!ok) {
      std::fprintf(stderr, "tpc-comm-latency: the %s run failed\n", transport);
      return 1;
    }
    printRow(transport, result);
    std::fflush(stdout);
    checks.add(transport, result);
  }
  checks.print();
  return 0;
}
