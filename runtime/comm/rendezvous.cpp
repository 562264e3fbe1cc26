// Where a Gloo group's ranks meet (rendezvous.h): a directory, or rank 0's TCP store; the
// claims, the reasons left there, and the probes that name a lost peer.
#include "rendezvous.h"

#include "group.h"
#include "tcp_store.h"

#include <gloo/rendezvous/file_store.h>

#include <arpa/inet.h>
#include <cerrno>
#include <chrono>
#include <thread>
#include <utility>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <fstream>
#include <map>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

namespace tpcrt {

std::string Claim::str() const { return host + "\t" + std::to_string(pid) + "\t" + probe; }

std::optional<Claim> Claim::parse(const std::string &text) {
  size_t a = text.find('\t');
  size_t b = a == std::string::npos ? a : text.find('\t', a + 1);
  if (b == std::string::npos)
    return std::nullopt;
  Claim claim;
  claim.host = text.substr(0, a);
  claim.pid = std::atol(text.substr(a + 1, b - a - 1).c_str());
  claim.probe = text.substr(b + 1);
  while (!claim.probe.empty() && (claim.probe.back() == '\n' || claim.probe.back() == '\r'))
    claim.probe.pop_back();
  return claim;
}

std::string thisHost() {
  const char *node = std::getenv("GROUP_RANK");
  if (node && *node) {
    char *end = nullptr;
    long n = std::strtol(node, &end, 10);
    if (*end == '\0' && n >= 0 && n < (1 << 20))
      return "node " + std::to_string(n);
  }
  return hostName();
}

namespace {

/// How a probe of a peer's address came out.
enum class Probe { Answered, Refused, Unreachable, Unknown };

/// Connects to `address` ("a.b.c.d:port") for at most `millis`.
Probe probe(const std::string &address, int millis) {
  size_t colon = address.rfind(':');
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  if (colon == std::string::npos ||
      ::inet_pton(AF_INET, address.substr(0, colon).c_str(), &addr.sin_addr) != 1)
    return Probe::Unknown;
  addr.sin_port = htons(uint16_t(std::atoi(address.c_str() + colon + 1)));
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0)
    return Probe::Unknown;
  Probe result = Probe::Answered;
  if (::connect(fd, reinterpret_cast<sockaddr *>(&addr), sizeof addr) != 0) {
    if (errno != EINPROGRESS) {
      result = errno == ECONNREFUSED ? Probe::Refused : Probe::Unreachable;
    } else {
      pollfd p{fd, POLLOUT, 0};
      int error = 0;
      socklen_t length = sizeof error;
      if (::poll(&p, 1, millis) <= 0)
        result = Probe::Unreachable;
      else if (::getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &length) == 0 && error != 0)
        result = error == ECONNREFUSED ? Probe::Refused : Probe::Unreachable;
    }
  }
  ::close(fd);
  return result;
}

/// A socket that accepts connections (the kernel completes them; nobody reads) for as long
/// as this process lives: a peer's probe tells a process gone (refused) from a host gone
/// (no answer) from a process that is there but silent (connected). "" where none could be
/// made.
std::string openProbe(const std::string &address, int &fd) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  if (::inet_pton(AF_INET, address.c_str(), &addr.sin_addr) != 1)
    return "";
  fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  socklen_t length = sizeof addr;
  if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr *>(&addr), sizeof addr) != 0 ||
      ::listen(fd, 64) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr *>(&addr), &length) != 0)
    return "";
  return address + ":" + std::to_string(ntohs(addr.sin_port));
}

// ---- a directory ----

std::string claimPath(const std::string &dir, int rank) {
  return dir + "/tpc.rank" + std::to_string(rank);
}

std::string exitPath(const std::string &dir, int rank) {
  return dir + "/tpc.exit" + std::to_string(rank);
}

/// `dir`, made where it is not there yet (Gloo's FileStore takes its real path).
const std::string &made(const std::string &dir) {
  ::mkdir(dir.c_str(), 0700);
  return dir;
}

class DirRendezvous : public Rendezvous {
public:
  DirRendezvous(const CommOptions &options) : dir(options.rendezvousDir), files(made(dir)) {
    listenAddress = options.host;
  }

  bool claim(const CommOptions &options, std::string &error) {
    if (::access((dir + "/tpc.retired").c_str(), F_OK) == 0) {
      error = "rendezvous directory " + dir + " is stale: an earlier job finished there; use "
              "a fresh directory";
      return false;
    }
    // Each rank claims its place once; a claim already there is an earlier job's.
    std::string path = claimPath(dir, options.rank);
    int fd = ::open(path.c_str(), O_CREAT | O_EXCL | O_WRONLY, 0600);
    if (fd < 0) {
      error = errno == EEXIST ? "rendezvous directory " + dir + " is stale: rank " +
                                    std::to_string(options.rank) +
                                    " of an earlier job joined it; use a fresh directory"
                              : "cannot use rendezvous directory " + dir + ": " +
                                    std::strerror(errno);
      return false;
    }
    std::string text = Claim{thisHost(), long(::getpid()), ""}.str() + "\n";
    bool written = ::write(fd, text.data(), text.size()) == ssize_t(text.size());
    ::close(fd);
    if (!written)
      error = "cannot write to rendezvous directory " + dir + ": " + std::strerror(errno);
    return written;
  }

  gloo::rendezvous::Store &store() override { return files; }

  std::optional<Claim> claimOf(int rank) override {
    std::ifstream in(claimPath(dir, rank));
    std::string text;
    return std::getline(in, text) ? Claim::parse(text) : std::nullopt;
  }

  std::string exitOf(int rank) override {
    std::ifstream in(exitPath(dir, rank));
    std::string reason;
    std::getline(in, reason);
    return reason;
  }

  void recordExit(int rank, const std::string &reason) override {
    std::ofstream(exitPath(dir, rank)) << reason << "\n";
  }

  void retire() override {
    int fd = ::open((dir + "/tpc.retired").c_str(), O_CREAT | O_WRONLY, 0600);
    if (fd >= 0)
      ::close(fd);
  }

  std::string where() const override { return "directory " + dir; }

private:
  std::string dir;
  gloo::rendezvous::FileStore files;
};

// ---- rank 0's TCP store ----

class TcpRendezvous : public Rendezvous {
public:
  ~TcpRendezvous() override {
    if (probeFd >= 0)
      ::close(probeFd);
  }

  bool join(const CommOptions &options, std::string &error) {
    Endpoint at{options.storeHost, options.storePort, options.storeSocket};
    // The address peers reach this rank at: --host where it is given beyond loopback, else
    // the one this machine reaches the store from.
    listenAddress = options.host;
    if (listenAddress.rfind("127.", 0) == 0) {
      std::string routed = localAddressFor(at.host);
      if (routed.empty()) {
        error = "no route from this machine to the rendezvous store's host " + at.host;
        return false;
      }
      listenAddress = routed;
    }
    if (options.rank == 0) {
      server = TcpStoreServer::start(at, options.runId, options.world, error);
      if (!server)
        return false;
    }
    auto timeout = std::chrono::seconds(options.timeoutSeconds);
    client = TcpStore::connect(at, options.runId, options.world, options.rank, timeout, error);
    if (!client)
      return false;
    std::string probeAddress = openProbe(listenAddress, probeFd);
    Claim mine{thisHost(), long(::getpid()), probeAddress};
    std::string held;
    try {
      if (!client->claim("tpc/claim/" + std::to_string(options.rank), mine.str(), held)) {
        std::optional<Claim> other = Claim::parse(held);
        error = "two ranks claim rank " + std::to_string(options.rank) + ": this one, on " +
                mine.host + ", and one on " + (other ? other->host : "an unknown host") +
                (other ? " (process " + std::to_string(other->pid) + ")" : "") +
                " that joined through " + where() + " first; check RANK or --node-rank on each host";
        return false;
      }
    } catch (const std::exception &e) {
      error = e.what();
      return false;
    }
    return true;
  }

  gloo::rendezvous::Store &store() override { return *client; }

  std::optional<Claim> claimOf(int rank) override {
    std::optional<std::string> text = ask("tpc/claim/" + std::to_string(rank));
    return text ? Claim::parse(*text) : std::nullopt;
  }

  std::string exitOf(int rank) override {
    return ask("tpc/exit/" + std::to_string(rank)).value_or("");
  }

  std::string refusals() override {
    std::optional<std::string> refused = ask("tpc/refused");
    return refused ? "; the store refused: " + *refused : "";
  }

  void recordExit(int rank, const std::string &reason) override {
    if (gone)
      return;
    try {
      client->set("tpc/exit/" + std::to_string(rank),
                  std::vector<char>(reason.begin(), reason.end()));
    } catch (const std::exception &) {
      gone = true;
    }
  }

  std::string where() const override {
    return "rank 0's store on " + client->endpoint().str();
  }

  /// Bounds each call on the store from now on (after a failure, where rank 0's host may be
  /// the one lost).
  void shortenCalls() { client->limitCalls(std::chrono::seconds(2)); }

private:
  /// The key's value now; none once the store failed a call (it went with rank 0's host).
  std::optional<std::string> ask(const std::string &key) {
    if (gone)
      return std::nullopt;
    try {
      return client->tryGet(key);
    } catch (const std::exception &) {
      gone = true;
      return std::nullopt;
    }
  }

  std::unique_ptr<TcpStoreServer> server;
  std::unique_ptr<TcpStore> client;
  int probeFd = -1;
  bool gone = false;
};

} // namespace

std::unique_ptr<Rendezvous> Rendezvous::join(const CommOptions &options, std::string &error) {
  if (!options.rendezvousDir.empty()) {
    try {
      auto dir = std::make_unique<DirRendezvous>(options);
      return dir->claim(options, error) ? std::move(dir) : nullptr;
    } catch (const std::exception &e) {
      error = "cannot use rendezvous directory " + options.rendezvousDir + ": " + e.what();
      return nullptr;
    }
  }
  auto tcp = std::make_unique<TcpRendezvous>();
  return tcp->join(options, error) ? std::move(tcp) : nullptr;
}

const std::vector<std::optional<Claim>> &Rendezvous::readClaims(int world) {
  known.clear();
  for (int r = 0; r < world; ++r)
    known.push_back(claimOf(r));
  return known;
}

std::string Rendezvous::lostPeers(const CommOptions &options) {
  if (auto *tcp = dynamic_cast<TcpRendezvous *>(this))
    tcp->shortenCalls();
  std::string here = thisHost();
  // Per host: what came of its ranks.
  std::map<std::string, std::vector<std::string>> lost;
  std::vector<std::string> stopped;
  std::map<std::string, Probe> hostProbe;
  // A process being killed closes its sockets one by one, so the connection whose reset told
  // of it may go before its probe's socket does, which then still answers for a moment. So
  // a probe that answers is asked again 200 ms later (once for all of them, not a wait each),
  // where a dying process refuses and a stalled one still answers.
  bool waited = false;
  auto answered = [&](const std::string &address) {
    Probe first = probe(address, 1000);
    if (first != Probe::Answered)
      return first;
    if (!std::exchange(waited, true))
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    return probe(address, 1000);
  };
  for (int r = 0; r < options.world; ++r) {
    if (r == options.rank)
      continue;
    std::string rank = "rank " + std::to_string(r);
    if (std::string reason = exitOf(r); !reason.empty()) {
      stopped.push_back(rank + " stopped: " + reason);
      continue;
    }
    std::optional<Claim> claim = size_t(r) < known.size() ? known[size_t(r)] : claimOf(r);
    if (!claim)
      continue;
    if (claim->host == here) {
      if (processEnded(claim->pid))
        lost[""].push_back(rank + " (process " + std::to_string(claim->pid) + " is gone)");
      continue;
    }
    if (claim->probe.empty())
      continue;
    Probe &seen = hostProbe.try_emplace(claim->host, Probe::Unknown).first->second;
    if (seen == Probe::Unreachable)
      lost[claim->host].push_back(rank);
    else if (Probe now = answered(claim->probe); now == Probe::Refused) {
      lost[claim->host].push_back(rank + " (its process is gone: nothing listens at " +
                                  claim->probe + ")");
    } else if (now == Probe::Unreachable) {
      seen = now;
      lost[claim->host].push_back(rank);
    } else if (now == Probe::Answered) {
      lost[claim->host].push_back(rank + " (its host answers but the rank is silent: stalled?)");
    }
  }
  std::vector<std::string> parts;
  for (auto &[host, ranks] : lost) {
    if (host.empty())
      parts.push_back("lost " + joinList(ranks, ", "));
    else if (hostProbe[host] == Probe::Unreachable)
      parts.push_back("lost " + host + " (" + joinList(ranks, ", ") +
                      "): unreachable, no answer within 1 s");
    else
      parts.push_back("lost " + host + ": " + joinList(ranks, ", "));
  }
  if (!parts.empty())
    return joinList(parts, "; ");
  return joinList(stopped, "; ");
}

} // namespace tpcrt
