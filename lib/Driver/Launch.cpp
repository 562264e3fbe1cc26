// The rank launcher (include/tpc/Driver/Compile.h): N local ranks of one binary, with
// torchrun's environment and a fresh rendezvous directory; each rank's output prefixed; the
// first failure stops them all, after a grace in which the others may stop by themselves and say
// why (a server answers its clients first).
#include "tpc/Driver/Compile.h"

#include "llvm/Support/raw_ostream.h"

#include <fmt/core.h>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

namespace tpc::driver {

namespace {

/// SIGTERM and SIGINT the launcher received (forwardSignals).
volatile std::sig_atomic_t signalsReceived = 0;
extern "C" void onSignal(int) { signalsReceived = signalsReceived + 1; }

struct Rank {
  pid_t pid = -1;
  int out = -1;         // read end of the rank's stdout and stderr
  std::string pending;  // a partial line
  bool running = true;
};

void flushLines(int rank, Rank &r, bool all, const LaunchOptions &o) {
  llvm::raw_ostream &os = o.ranksToStderr ? llvm::errs() : llvm::outs();
  if (o.rankZeroRaw && rank == 0) { // streamed text: as it comes, partial lines too
    os << r.pending;
    r.pending.clear();
    os.flush();
    return;
  }
  size_t start = 0;
  for (size_t nl; (nl = r.pending.find('\n', start)) != std::string::npos; start = nl + 1)
    os << "[rank " << rank << "] " << r.pending.substr(start, nl - start) << "\n";
  r.pending.erase(0, start);
  if (all && !r.pending.empty()) {
    os << "[rank " << rank << "] " << r.pending << "\n";
    r.pending.clear();
  }
  os.flush();
}

} // namespace

int launchRanks(const LaunchOptions &o) {
  std::string dir = o.rendezvous;
  bool ownDir = dir.empty();
  if (ownDir) {
    char pattern[] = "/tmp/tpc-launch-XXXXXX";
    if (!mkdtemp(pattern)) {
      reportError(std::string("cannot create a rendezvous directory: ") + std::strerror(errno));
      return 1;
    }
    dir = pattern;
  }
  std::vector<Rank> ranks(o.ranks);
  // Rank 0's output, streamed as it comes, reaches a terminal through its pipe: the binary
  // may show it the weights' load (TPC_PROGRESS, which a user's setting overrides).
  bool rankZeroOnTerminal = o.rankZeroRaw && isatty(o.ranksToStderr ? STDERR_FILENO
                                                                      : STDOUT_FILENO);
  for (int r = 0; r < o.ranks; ++r) {
    int fds[2];
    if (pipe(fds) != 0) {
      reportError(std::string("pipe: ") + std::strerror(errno));
      return 1;
    }
    pid_t pid = fork();
    if (pid == 0) {
      dup2(fds[1], STDOUT_FILENO);
      dup2(fds[1], STDERR_FILENO);
      close(fds[0]);
      close(fds[1]);
      setenv("RANK", std::to_string(r).c_str(), 1);
      setenv("LOCAL_RANK", std::to_string(r).c_str(), 1);
      setenv("WORLD_SIZE", std::to_string(o.ranks).c_str(), 1);
      setenv("LOCAL_WORLD_SIZE", std::to_string(o.ranks).c_str(), 1);
      setenv("TPC_RENDEZVOUS_DIR", dir.c_str(), 1);
      if (r == 0 && rankZeroOnTerminal)
        setenv("TPC_PROGRESS", "terminal", 0);
      std::vector<char *> argv;
      for (const std::string &a : o.command)
        argv.push_back(const_cast<char *>(a.c_str()));
      argv.push_back(nullptr);
      execvp(argv[0], argv.data());
      std::fprintf(stderr, "cannot run %s: %s\n", argv[0], std::strerror(errno));
      _exit(127);
    }
    close(fds[1]);
    ranks[r].pid = pid;
    ranks[r].out = fds[0];
  }

  int status = 0, running = o.ranks;
  std::optional<std::chrono::steady_clock::time_point> killedAt, failedAt;
  int forwarded = 0;
  struct sigaction previousTerm {}, previousInt {};
  if (o.forwardSignals) {
    struct sigaction action {};
    action.sa_handler = onSignal; // no SA_RESTART: poll() returns at once
    sigemptyset(&action.sa_mask);
    sigaction(SIGTERM, &action, &previousTerm);
    sigaction(SIGINT, &action, &previousInt);
  }
  auto terminateAll = [&] {
    for (Rank &other : ranks)
      if (other.running)
        kill(other.pid, SIGTERM);
    killedAt = std::chrono::steady_clock::now();
  };
  while (running > 0) {
    if (signalsReceived > forwarded) {
      ++forwarded;
      if (forwarded == 1 && ranks[0].running)
        kill(ranks[0].pid, SIGTERM);
      else
        for (Rank &r : ranks)
          if (r.running)
            kill(r.pid, SIGKILL);
    }
    std::vector<pollfd> polls;
    for (Rank &r : ranks)
      if (r.out >= 0)
        polls.push_back({r.out, POLLIN, 0});
    if (!polls.empty())
      poll(polls.data(), polls.size(), 100);
    else
      usleep(100000);
    // Only the pipes with something to read (or closed): a read of a quiet rank's pipe would
    // wait for its output, and a server's ranks are quiet for as long as it serves.
    auto readable = [&](int fd) {
      for (const pollfd &p : polls)
        if (p.fd == fd)
          return (p.revents & (POLLIN | POLLHUP | POLLERR)) != 0;
      return false;
    };
    for (int i = 0; i < o.ranks; ++i) {
      Rank &r = ranks[i];
      if (r.out >= 0 && readable(r.out)) {
        char buffer[4096];
        ssize_t got;
        while ((got = read(r.out, buffer, sizeof buffer)) > 0) {
          r.pending.append(buffer, size_t(got));
          if (got < ssize_t(sizeof buffer))
            break;
        }
        if (got == 0) {
          close(r.out);
          r.out = -1;
        }
        flushLines(i, r, r.out < 0, o);
      }
      int code;
      if (r.running && waitpid(r.pid, &code, WNOHANG) == r.pid) {
        r.running = false;
        --running;
        bool ok = WIFEXITED(code) && WEXITSTATUS(code) == 0;
        if (!ok && status == 0) {
          status = 1;
          std::string why = WIFSIGNALED(code)
                                ? fmt::format("was killed by signal {}", WTERMSIG(code))
                                : fmt::format("exited with code {}", WEXITSTATUS(code));
          llvm::errs() << fmt::format("tpc launch: rank {} {}; stopping the other ranks\n", i,
                                      why);
          failedAt = std::chrono::steady_clock::now();
          if (o.failureGraceSeconds <= 0)
            terminateAll();
        }
      }
    }
    if (failedAt && !killedAt &&
        std::chrono::steady_clock::now() - *failedAt >
            std::chrono::seconds(o.failureGraceSeconds))
      terminateAll();
    if (killedAt && std::chrono::steady_clock::now() - *killedAt > std::chrono::seconds(5))
      for (Rank &other : ranks)
        if (other.running)
          kill(other.pid, SIGKILL);
  }
  if (o.forwardSignals) {
    sigaction(SIGTERM, &previousTerm, nullptr);
    sigaction(SIGINT, &previousInt, nullptr);
  }
  for (int i = 0; i < o.ranks; ++i)
    flushLines(i, ranks[i], true, o);
  if (ownDir) {
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  }
  return status;
}

} // namespace tpc::driver
