// The rank launcher (include/tpc/Driver/Compile.h): N local ranks of one binary, with
// torchrun's environment and a fresh rendezvous directory; each rank's output prefixed; the
// first failure stops them all.
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
  std::optional<std::chrono::steady_clock::time_point> killedAt;
  while (running > 0) {
    std::vector<pollfd> polls;
    for (Rank &r : ranks)
      if (r.out >= 0)
        polls.push_back({r.out, POLLIN, 0});
    if (!polls.empty())
      poll(polls.data(), polls.size(), 100);
    else
      usleep(100000);
    for (int i = 0; i < o.ranks; ++i) {
      Rank &r = ranks[i];
      if (r.out >= 0) {
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
          for (Rank &other : ranks)
            if (other.running)
              kill(other.pid, SIGTERM);
          killedAt = std::chrono::steady_clock::now();
        }
      }
    }
    if (killedAt && std::chrono::steady_clock::now() - *killedAt > std::chrono::seconds(5))
      for (Rank &other : ranks)
        if (other.running)
          kill(other.pid, SIGKILL);
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
