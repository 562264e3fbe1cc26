// The rank launcher (include/tpc/Driver/Compile.h): N local ranks of one binary, with
// torchrun's environment and a fresh rendezvous directory; each rank's output prefixed; the
// first failure stops them all, after a grace in which the others may stop by themselves and say
// why (a server answers its clients first).
#include "tpc/Driver/Compile.h"

#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/raw_ostream.h"

#include <fmt/core.h>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <optional>
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

/// Only the pipes with something to read (or closed): a read of a quiet rank's pipe would
/// wait for its output, and a server's ranks are quiet for as long as it serves.
bool readable(const std::vector<pollfd> &polls, int fd) {
  for (const pollfd &p : polls)
    if (p.fd == fd)
      return (p.revents & (POLLIN | POLLHUP | POLLERR)) != 0;
  return false;
}

/// A fresh rendezvous directory under /tmp, in `dir`; false (reported) where none can be made.
bool makeRendezvous(std::string &dir) {
  char pattern[] = "/tmp/tpc-launch-XXXXXX";
  if (!mkdtemp(pattern)) {
    reportError(std::string("cannot create a rendezvous directory: ") + std::strerror(errno));
    return false;
  }
  dir = pattern;
  return true;
}

/// This node's ranks: how many, the first's global rank, and the world of every node's.
struct NodeRanks {
  int count = 0, first = 0, world = 0;
};

/// This node's ranks from the world and the node options; reported where they do not fit.
std::optional<NodeRanks> placeRanks(const LaunchOptions &o) {
  const NodeOptions &n = o.nodes;
  if (!n.spansHosts())
    return NodeRanks{o.ranks, 0, o.ranks};
  if (n.nnodes < 1 || n.nnodes > 4096) {
    reportError(fmt::format("--nnodes must be from 1 to 4096, got {}", n.nnodes));
    return std::nullopt;
  }
  if (n.nodeRank < 0 || n.nodeRank >= n.nnodes) {
    reportError(fmt::format("--node-rank must be from 0 to {} (--nnodes {}), got {}",
                            n.nnodes - 1, n.nnodes, n.nodeRank));
    return std::nullopt;
  }
  if (n.masterAddr.empty()) {
    reportError("--nnodes above 1 needs --master-addr: the address of node 0, where rank 0 "
                "serves the rendezvous");
    return std::nullopt;
  }
  if (n.masterPort < 1 || n.masterPort > 65535) {
    reportError(fmt::format("--master-port must be from 1 to 65535, got {}", n.masterPort));
    return std::nullopt;
  }
  std::vector<int> perNode;
  if (n.nprocPerNode.empty()) {
    if (o.ranks < 1 || o.ranks % n.nnodes != 0) {
      reportError(fmt::format("{} ranks do not divide over {} nodes: give --nproc-per-node, "
                              "one count or one per node (\"2,1\")",
                              o.ranks, n.nnodes));
      return std::nullopt;
    }
    perNode.assign(size_t(n.nnodes), o.ranks / n.nnodes);
  } else {
    llvm::SmallVector<llvm::StringRef> parts;
    llvm::StringRef(n.nprocPerNode).split(parts, ',');
    for (llvm::StringRef part : parts) {
      int count = 0;
      if (part.trim().getAsInteger(10, count) || count < 1 || count > 4096) {
        reportError(fmt::format("--nproc-per-node must be a count from 1 to 4096, or one per "
                                "node separated by commas; '{}' is not",
                                n.nprocPerNode));
        return std::nullopt;
      }
      perNode.push_back(count);
    }
    if (perNode.size() == 1)
      perNode.assign(size_t(n.nnodes), perNode[0]);
    if (perNode.size() != size_t(n.nnodes)) {
      reportError(fmt::format("--nproc-per-node gives {} counts for {} nodes", perNode.size(),
                              n.nnodes));
      return std::nullopt;
    }
  }
  int world = 0;
  for (int count : perNode)
    world += count;
  if (o.ranks > 0 && world != o.ranks) {
    reportError(fmt::format("--nproc-per-node {} makes {} ranks over the nodes, but the job "
                            "has {}",
                            n.nprocPerNode, world, o.ranks));
    return std::nullopt;
  }
  NodeRanks mine{perNode[size_t(n.nodeRank)], 0, world};
  for (int k = 0; k < n.nodeRank; ++k)
    mine.first += perNode[size_t(k)];
  return mine;
}

/// In the forked child: rank `r`'s output into the pipe `fds`, torchrun's environment, then
/// the binary.
[[noreturn]] void execRank(int local, const NodeRanks &node, int fds[2],
                           const std::string &dir, const LaunchOptions &o,
                           bool rankZeroOnTerminal) {
  dup2(fds[1], STDOUT_FILENO);
  dup2(fds[1], STDERR_FILENO);
  close(fds[0]);
  close(fds[1]);
  int r = node.first + local;
  setenv("RANK", std::to_string(r).c_str(), 1);
  setenv("LOCAL_RANK", std::to_string(local).c_str(), 1);
  setenv("WORLD_SIZE", std::to_string(node.world).c_str(), 1);
  setenv("LOCAL_WORLD_SIZE", std::to_string(node.count).c_str(), 1);
  if (o.nodes.spansHosts()) {
    // Rank 0's store on node 0 (the binary serves and finds it), no directory.
    setenv("MASTER_ADDR", o.nodes.masterAddr.c_str(), 1);
    setenv("MASTER_PORT", std::to_string(o.nodes.masterPort).c_str(), 1);
    setenv("GROUP_RANK", std::to_string(o.nodes.nodeRank).c_str(), 1);
    unsetenv("TPC_RENDEZVOUS_DIR");
    unsetenv("TORCHELASTIC_USE_AGENT_STORE");
  } else {
    setenv("TPC_RENDEZVOUS_DIR", dir.c_str(), 1);
  }
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

/// When a rank failed, or the ranks were sent SIGTERM, if that has happened: the deadlines
/// count from it. (A flag and a time rather than an optional: GCC takes an optional member's
/// time for uninitialized, -Wmaybe-uninitialized.)
struct Moment {
  bool happened = false;
  std::chrono::steady_clock::time_point at{};

  void mark() {
    happened = true;
    at = std::chrono::steady_clock::now();
  }
  /// Whether it happened more than `limit` ago.
  bool passed(std::chrono::seconds limit) const {
    return happened && std::chrono::steady_clock::now() - at > limit;
  }
};

/// The launcher's SIGTERM and SIGINT handlers while it forwards them to the ranks
/// (forwardSignals), and the ones they replaced.
struct SignalForwarding {
  struct sigaction previousTerm {}, previousInt {};

  void install() {
    struct sigaction action {};
    action.sa_handler = onSignal; // no SA_RESTART: poll() returns at once
    sigemptyset(&action.sa_mask);
    sigaction(SIGTERM, &action, &previousTerm);
    sigaction(SIGINT, &action, &previousInt);
  }
  void restore() {
    sigaction(SIGTERM, &previousTerm, nullptr);
    sigaction(SIGINT, &previousInt, nullptr);
  }
};

/// The running ranks: their output relayed as it comes, each reaped as it stops; the first
/// failure stops the others, after the grace.
class RankGroup {
public:
  RankGroup(const LaunchOptions &o, NodeRanks node)
      : o(o), node(node), ranks(size_t(node.count)) {}

  /// Forks every rank; false (reported) where a pipe cannot be made.
  bool start(const std::string &dir) {
    // Rank 0's output, streamed as it comes, reaches a terminal through its pipe: the binary
    // may show it the weights' load (TPC_PROGRESS, which a user's setting overrides).
    bool rankZeroOnTerminal = o.rankZeroRaw && isatty(o.ranksToStderr ? STDERR_FILENO
                                                                        : STDOUT_FILENO);
    for (int r = 0; r < node.count; ++r) {
      int fds[2];
      if (pipe(fds) != 0) {
        reportError(std::string("pipe: ") + std::strerror(errno));
        return false;
      }
      pid_t pid = fork();
      if (pid == 0)
        execRank(r, node, fds, dir, o, rankZeroOnTerminal);
      close(fds[1]);
      ranks[r].pid = pid;
      ranks[r].out = fds[0];
    }
    running = node.count;
    return true;
  }

  /// Until every rank has stopped; the exit code.
  int wait() {
    while (running > 0) {
      forwardReceivedSignals();
      std::vector<pollfd> polls = pollOutputs();
      for (int i = 0; i < node.count; ++i) {
        relayOutput(i, polls);
        reap(i);
      }
      enforceDeadlines();
    }
    return status;
  }

  /// What the ranks left without a newline.
  void flushAll() {
    for (int i = 0; i < node.count; ++i)
      flushLines(node.first + i, ranks[size_t(i)], true, o);
  }

private:
  /// The first signal asks rank 0 to stop (a server drains and stops its peers); a further
  /// one, or the first once rank 0 has stopped, kills every rank.
  void forwardReceivedSignals() {
    if (signalsReceived <= forwarded)
      return;
    ++forwarded;
    if (forwarded == 1 && ranks[0].running)
      kill(ranks[0].pid, SIGTERM);
    else
      for (Rank &r : ranks)
        if (r.running)
          kill(r.pid, SIGKILL);
  }

  /// Waits up to 100 ms for output from the ranks' open pipes.
  std::vector<pollfd> pollOutputs() {
    std::vector<pollfd> polls;
    for (Rank &r : ranks)
      if (r.out >= 0)
        polls.push_back({r.out, POLLIN, 0});
    if (!polls.empty())
      poll(polls.data(), polls.size(), 100);
    else
      usleep(100000);
    return polls;
  }

  /// Rank `i`'s output that has come, its complete lines printed.
  void relayOutput(int i, const std::vector<pollfd> &polls) {
    Rank &r = ranks[i];
    if (r.out < 0 || !readable(polls, r.out))
      return;
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
    flushLines(node.first + i, r, r.out < 0, o);
  }

  /// Rank `i`'s exit, where it has stopped; the first failure starts the grace.
  void reap(int i) {
    Rank &r = ranks[i];
    int code;
    if (!r.running || waitpid(r.pid, &code, WNOHANG) != r.pid)
      return;
    r.running = false;
    --running;
    bool ok = WIFEXITED(code) && WEXITSTATUS(code) == 0;
    if (ok || status != 0)
      return;
    status = 1;
    std::string why = WIFSIGNALED(code) ? fmt::format("was killed by signal {}", WTERMSIG(code))
                                        : fmt::format("exited with code {}", WEXITSTATUS(code));
    llvm::errs() << fmt::format("{}: rank {} {}; stopping the other ranks{}\n", o.name,
                                node.first + i, why,
                                o.nodes.spansHosts() ? " of this node" : "");
    failedAt.mark();
    if (o.failureGraceSeconds <= 0)
      terminateAll();
  }

  /// SIGTERM once the grace after a failure has passed; SIGKILL 5 s after the SIGTERM.
  void enforceDeadlines() {
    if (!killedAt.happened && failedAt.passed(std::chrono::seconds(o.failureGraceSeconds)))
      terminateAll();
    if (killedAt.passed(std::chrono::seconds(5)))
      for (Rank &other : ranks)
        if (other.running)
          kill(other.pid, SIGKILL);
  }

  void terminateAll() {
    for (Rank &other : ranks)
      if (other.running)
        kill(other.pid, SIGTERM);
    killedAt.mark();
  }

  const LaunchOptions &o;
  NodeRanks node;
  std::vector<Rank> ranks;
  int status = 0, running = 0;
  Moment killedAt, failedAt;
  int forwarded = 0; // of signalsReceived
};

} // namespace

int launchRanks(const LaunchOptions &o) {
  std::optional<NodeRanks> node = placeRanks(o);
  if (!node)
    return 2;
  std::string dir = o.rendezvous;
  bool ownDir = dir.empty() && !o.nodes.spansHosts();
  if (ownDir && !makeRendezvous(dir))
    return 1;
  RankGroup group(o, *node);
  if (!group.start(dir))
    return 1;
  SignalForwarding signals;
  if (o.forwardSignals)
    signals.install();
  int status = group.wait();
  if (o.forwardSignals)
    signals.restore();
  group.flushAll();
  if (ownDir) {
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  }
  return status;
}

} // namespace tpc::driver
