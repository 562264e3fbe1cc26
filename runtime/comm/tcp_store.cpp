// The TCP store (tcp_store.h): rank 0's server, one thread polling its connections, and a
// rank's client.
#include "tcp_store.h"

#include <arpa/inet.h>
#include <cerrno>
#include <cstddef>
#include <cstring>
#include <fcntl.h>
#include <map>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdexcept>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

namespace tpcrt {

namespace {

enum Op : uint8_t { Hello = 1, Set = 2, Claim = 3, Get = 4 };
enum Status : uint8_t { Ok = 0, Absent = 1, Refused = 2, Taken = 3 };

// Bounds on what a connection may send: the store holds a few hundred bytes a rank.
constexpr uint32_t kMaxKey = 1024;
constexpr uint32_t kMaxValue = 1 << 20;
constexpr size_t kMaxStored = size_t(64) << 20;
constexpr size_t kMaxConnections = 1024;

void putLength(std::string &out, uint32_t n) {
  for (int i = 0; i < 4; ++i)
    out += char((n >> (8 * i)) & 0xff);
}

uint32_t readLength(const std::string &in, size_t at) {
  uint32_t n = 0;
  for (int i = 0; i < 4; ++i)
    n |= uint32_t(uint8_t(in[at + size_t(i)])) << (8 * i);
  return n;
}

std::string frame(uint8_t op, const std::string &key, const std::string &value) {
  std::string out(1, char(op));
  putLength(out, uint32_t(key.size()));
  out += key;
  putLength(out, uint32_t(value.size()));
  out += value;
  return out;
}

std::string answer(uint8_t status, const std::string &text) {
  std::string out(1, char(status));
  putLength(out, uint32_t(text.size()));
  return out + text;
}

/// Where `at` is, as a socket address: the IPv4 address of its host (a name or a dotted
/// address) and its port, or its abstract Unix socket. False where it has none.
bool resolve(const Endpoint &at, sockaddr_storage &addr, socklen_t &length, std::string &error) {
  addr = {};
  if (!at.socket.empty()) {
    auto *un = reinterpret_cast<sockaddr_un *>(&addr);
    if (at.socket.size() + 1 > sizeof un->sun_path) {
      error = "the rendezvous socket name '" + at.socket + "' is too long";
      return false;
    }
    // An abstract name: a leading NUL, no file, gone with the process that holds it.
    un->sun_family = AF_UNIX;
    std::memcpy(un->sun_path + 1, at.socket.data(), at.socket.size());
    length = socklen_t(offsetof(sockaddr_un, sun_path) + 1 + at.socket.size());
    return true;
  }
  addrinfo hints{}, *found = nullptr;
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  int rc = ::getaddrinfo(at.host.c_str(), std::to_string(at.port).c_str(), &hints, &found);
  if (rc != 0 || !found) {
    error = "cannot resolve " + at.host + ": " + ::gai_strerror(rc);
    return false;
  }
  std::memcpy(&addr, found->ai_addr, sizeof(sockaddr_in));
  length = sizeof(sockaddr_in);
  ::freeaddrinfo(found);
  return true;
}

/// Whether connected socket `fd` reached itself: a TCP connect to a port on this machine
/// where nothing listens yet can be given that very port as its own and open onto itself.
bool connectedToItself(int fd) {
  sockaddr_storage mine{}, peer{};
  socklen_t mineLength = sizeof mine, peerLength = sizeof peer;
  if (::getsockname(fd, reinterpret_cast<sockaddr *>(&mine), &mineLength) != 0 ||
      ::getpeername(fd, reinterpret_cast<sockaddr *>(&peer), &peerLength) != 0 ||
      mine.ss_family != AF_INET)
    return false;
  return mineLength == peerLength && std::memcmp(&mine, &peer, mineLength) == 0;
}

/// One client of the server: what it sent that is not a whole frame yet, what is to go back.
struct Client {
  int fd;
  std::chrono::steady_clock::time_point since; // accepted
  std::string in, out;
  bool greeted = false, closing = false;
};

/// How long a connection may take to say hello: one that does not is closed, so that
/// connections from anything else on the network cannot take the ranks' places.
constexpr auto kHelloWithin = std::chrono::seconds(10);

} // namespace

// ---- the server ----

std::unique_ptr<TcpStoreServer> TcpStoreServer::start(const Endpoint &at, const std::string &runId,
                                                      int world, std::string &error) {
  sockaddr_storage addr{};
  socklen_t length = 0;
  if (!resolve(at, addr, length, error))
    return nullptr;
  int fd = ::socket(addr.ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  int one = 1;
  if (addr.ss_family == AF_INET)
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr *>(&addr), length) != 0 ||
      ::listen(fd, 256) != 0) {
    error = "rank 0 cannot serve the rendezvous store on " + at.str() + ": " +
            std::strerror(errno) +
            (errno == EADDRINUSE && !at.socket.empty()
                 ? " (another job with the same run id and MASTER_PORT holds it)"
             : errno == EADDRINUSE
                 ? " (another job's store, or another program, holds the port: choose "
                   "another --master-port)"
             : errno == EADDRNOTAVAIL
                 ? " (" + at.host + " is not an address of this machine: rank 0 runs on the "
                   "node at MASTER_ADDR, --node-rank 0)"
                 : "");
    if (fd >= 0)
      ::close(fd);
    return nullptr;
  }
  std::unique_ptr<TcpStoreServer> server(new TcpStoreServer(fd, runId, world));
  if (::pipe2(server->wake, O_CLOEXEC | O_NONBLOCK) != 0) {
    error = std::string("pipe: ") + std::strerror(errno);
    return nullptr;
  }
  server->thread = std::thread([s = server.get()] { s->serve(); });
  return server;
}

TcpStoreServer::TcpStoreServer(int listener, std::string runId, int world)
    : listener(listener), runId(std::move(runId)), world(world) {}

TcpStoreServer::~TcpStoreServer() {
  if (thread.joinable()) {
    char byte = 0;
    (void)!::write(wake[1], &byte, 1);
    thread.join();
  }
  for (int fd : {listener, wake[0], wake[1]})
    if (fd >= 0)
      ::close(fd);
}

void TcpStoreServer::serve() {
  std::map<std::string, std::string> values;
  size_t stored = 0;
  std::vector<Client> clients;

  // What one whole frame asks; the answer is queued. False where the frame is refused and the
  // connection is to close once the answer is out.
  auto handle = [&](Client &c, uint8_t op, const std::string &key, const std::string &value) {
    if (!c.greeted && op != Hello) {
      c.out += answer(Refused, "the first request must be a hello");
      return false;
    }
    switch (op) {
    case Hello: {
      int theirWorld = -1, theirRank = -1;
      if (std::sscanf(value.c_str(), "%d %d", &theirWorld, &theirRank) != 2 || theirRank < 0 ||
          theirRank >= theirWorld) {
        c.out += answer(Refused, "a malformed hello");
        return false;
      }
      std::string why;
      if (key != runId)
        why = "the store belongs to run '" + runId + "', not '" + key + "'";
      else if (theirWorld != world)
        why = "rank 0 runs a world of " + std::to_string(world) + " ranks, and rank " +
              std::to_string(theirRank) + " was given " + std::to_string(theirWorld);
      if (!why.empty()) {
        // Kept for rank 0, whose own wait for the missing ranks can then say why.
        std::string &refused = values["tpc/refused"];
        if (refused.size() < 4096)
          refused += (refused.empty() ? "" : "; ") + why;
        c.out += answer(Refused, why);
        return false;
      }
      c.greeted = true;
      c.out += answer(Ok, "");
      return true;
    }
    case Set:
    case Claim: {
      auto it = values.find(key);
      if (op == Claim && it != values.end()) {
        c.out += answer(Taken, it->second);
        return true;
      }
      size_t before = it == values.end() ? 0 : key.size() + it->second.size();
      if (stored - before + key.size() + value.size() > kMaxStored) {
        c.out += answer(Refused, "the store is full");
        return false;
      }
      stored = stored - before + key.size() + value.size();
      values[key] = value;
      c.out += answer(Ok, "");
      return true;
    }
    case Get: {
      auto it = values.find(key);
      c.out += it == values.end() ? answer(Absent, "") : answer(Ok, it->second);
      return true;
    }
    default:
      c.out += answer(Refused, "unknown request " + std::to_string(op));
      return false;
    }
  };

  // The whole frames `c` sent; false once it sent something it may not.
  auto readFrames = [&](Client &c) {
    for (;;) {
      if (c.in.size() < 5)
        return true;
      uint32_t keyLength = readLength(c.in, 1);
      if (keyLength > kMaxKey)
        return handle(c, 0, "", ""), false;
      if (c.in.size() < 9 + size_t(keyLength))
        return true;
      uint32_t valueLength = readLength(c.in, 5 + keyLength);
      if (valueLength > kMaxValue)
        return handle(c, 0, "", ""), false;
      size_t whole = 9 + size_t(keyLength) + valueLength;
      if (c.in.size() < whole)
        return true;
      bool ok = handle(c, uint8_t(c.in[0]), c.in.substr(5, keyLength),
                       c.in.substr(9 + keyLength, valueLength));
      c.in.erase(0, whole);
      if (!ok)
        return false;
    }
  };

  for (;;) {
    std::vector<pollfd> polls{{wake[0], POLLIN, 0}, {listener, POLLIN, 0}};
    for (const Client &c : clients)
      polls.push_back({c.fd, short(c.closing ? POLLOUT : POLLIN | (c.out.empty() ? 0 : POLLOUT)), 0});
    if (::poll(polls.data(), polls.size(), 1000) < 0 && errno != EINTR)
      return;
    if (polls[0].revents)
      return;
    for (size_t i = 0; i < clients.size(); ++i) {
      Client &c = clients[i];
      short events = polls[i + 2].revents;
      if (events & POLLIN) {
        char buffer[4096];
        ssize_t got = ::recv(c.fd, buffer, sizeof buffer, 0);
        if (got <= 0 && !(got < 0 && (errno == EAGAIN || errno == EINTR))) {
          c.closing = true;
          c.out.clear();
        } else if (got > 0) {
          c.in.append(buffer, size_t(got));
          if (!readFrames(c))
            c.closing = true;
        }
      }
      if (!c.out.empty() && (events & (POLLOUT | POLLIN))) {
        ssize_t sent = ::send(c.fd, c.out.data(), c.out.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
        if (sent > 0)
          c.out.erase(0, size_t(sent));
        else if (sent < 0 && errno != EAGAIN && errno != EINTR)
          c.out.clear(), c.closing = true;
      }
      if (events & (POLLERR | POLLHUP))
        c.out.clear(), c.closing = true;
    }
    // Closed once what they are owed has gone; those that never said hello, after a while.
    auto now = std::chrono::steady_clock::now();
    for (Client &c : clients) {
      if (!c.greeted && now - c.since > kHelloWithin)
        c.closing = true;
      if (c.closing && now - c.since > kHelloWithin)
        c.out.clear(); // a closing client that does not read its answer is not waited for
    }
    for (size_t i = clients.size(); i-- > 0;)
      if (clients[i].closing && clients[i].out.empty()) {
        ::close(clients[i].fd);
        clients.erase(clients.begin() + long(i));
      }
    if (polls[1].revents & POLLIN) {
      int fd = ::accept4(listener, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
      if (fd >= 0 && clients.size() >= kMaxConnections)
        ::close(fd);
      else if (fd >= 0)
        clients.push_back({fd, std::chrono::steady_clock::now(), "", "", false, false});
    }
  }
}

// ---- a rank's client ----

std::unique_ptr<TcpStore> TcpStore::connect(const Endpoint &at, const std::string &runId,
                                            int world, int rank,
                                            std::chrono::milliseconds timeout,
                                            std::string &error) {
  sockaddr_storage addr{};
  socklen_t length = 0;
  if (!resolve(at, addr, length, error))
    return nullptr;
  using Clock = std::chrono::steady_clock;
  auto deadline = Clock::now() + timeout;
  std::string last;
  for (;;) {
    int fd = ::socket(addr.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
      error = std::string("socket: ") + std::strerror(errno);
      return nullptr;
    }
    // Every call on it is bounded: a store that stops answering fails the call.
    timeval tv{long(timeout.count() / 1000), long(timeout.count() % 1000) * 1000};
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    int one = 1;
    if (addr.ss_family == AF_INET)
      ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    bool connected = ::connect(fd, reinterpret_cast<sockaddr *>(&addr), length) == 0;
    if (connected && connectedToItself(fd)) {
      // It holds the port rank 0 is to listen on: let it go, and try again.
      connected = false;
      errno = ECONNREFUSED;
    }
    if (connected) {
      std::unique_ptr<TcpStore> store(new TcpStore(fd, at, timeout));
      std::string said;
      int status = store->call(Hello, runId, std::to_string(world) + " " + std::to_string(rank),
                               said);
      if (status == Ok)
        return store;
      error = status < 0 ? said : "the rendezvous store on " + at.str() + " refused rank " +
                                      std::to_string(rank) + ": " + said;
      return nullptr;
    }
    last = std::strerror(errno);
    ::close(fd);
    if (Clock::now() >= deadline) {
      error = "no rendezvous store on " + at.str() + " within " +
              std::to_string(timeout.count() / 1000) + " s (" + last +
              "): is rank 0 started, on the node at that address?";
      return nullptr;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

TcpStore::~TcpStore() { ::close(fd); }

void TcpStore::limitCalls(std::chrono::milliseconds limit) {
  timeval tv{long(limit.count() / 1000), long(limit.count() % 1000) * 1000};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
}

int TcpStore::call(uint8_t op, const std::string &key, const std::string &value,
                   std::string &said) {
  std::string request = frame(op, key, value);
  for (size_t at = 0; at < request.size();) {
    ssize_t sent = ::send(fd, request.data() + at, request.size() - at, MSG_NOSIGNAL);
    if (sent <= 0) {
      said = "the rendezvous store on " + where.str() + " is gone: " + std::strerror(errno);
      return -1;
    }
    at += size_t(sent);
  }
  auto readAll = [&](char *into, size_t n) {
    for (size_t at = 0; at < n;) {
      ssize_t got = ::recv(fd, into + at, n - at, 0);
      if (got <= 0)
        return false;
      at += size_t(got);
    }
    return true;
  };
  char head[5];
  if (!readAll(head, sizeof head)) {
    said = "the rendezvous store on " + where.str() + " did not answer: " +
           (errno == EAGAIN ? "timed out" : std::strerror(errno));
    return -1;
  }
  uint32_t length = readLength(std::string(head, sizeof head), 1);
  if (length > kMaxValue) {
    said = "the rendezvous store on " + where.str() + " sent a malformed answer";
    return -1;
  }
  said.assign(length, '\0');
  if (length && !readAll(said.data(), length)) {
    said = "the rendezvous store on " + where.str() + " did not answer";
    return -1;
  }
  return uint8_t(head[0]);
}

void TcpStore::set(const std::string &key, const std::vector<char> &data) {
  std::string said;
  if (call(Set, key, std::string(data.begin(), data.end()), said) != Ok)
    throw std::runtime_error("rendezvous store: cannot set " + key + ": " + said);
}

std::optional<std::string> TcpStore::tryGet(const std::string &key) {
  std::string said;
  int status = call(Get, key, "", said);
  if (status == Ok)
    return said;
  if (status == Absent)
    return std::nullopt;
  throw std::runtime_error("rendezvous store: cannot get " + key + ": " + said);
}

bool TcpStore::claim(const std::string &key, const std::string &value, std::string &held) {
  std::string said;
  int status = call(Claim, key, value, said);
  if (status == Ok)
    return true;
  if (status == Taken) {
    held = said;
    return false;
  }
  throw std::runtime_error("rendezvous store: cannot claim " + key + ": " + said);
}

void TcpStore::wait(const std::vector<std::string> &keys,
                    const std::chrono::milliseconds &limit) {
  using Clock = std::chrono::steady_clock;
  auto deadline = Clock::now() + limit;
  auto pause = std::chrono::milliseconds(5);
  for (const std::string &key : keys)
    while (!tryGet(key)) {
      if (Clock::now() >= deadline)
        throw std::runtime_error("rendezvous store: no " + key + " within " +
                                 std::to_string(limit.count() / 1000) + " s");
      std::this_thread::sleep_for(pause);
      pause = std::min(pause * 2, std::chrono::milliseconds(100));
    }
}

void TcpStore::wait(const std::vector<std::string> &keys) { wait(keys, timeout); }

std::vector<char> TcpStore::get(const std::string &key) {
  wait({key}, timeout);
  std::optional<std::string> value = tryGet(key);
  return std::vector<char>(value->begin(), value->end());
}

std::string localAddressFor(const std::string &peer) {
  sockaddr_storage addr{};
  socklen_t addrLength = 0;
  std::string error;
  if (!resolve(Endpoint{peer, 9, ""}, addr, addrLength, error))
    return "";
  int fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  sockaddr_in mine{};
  socklen_t length = sizeof mine;
  bool ok = fd >= 0 && ::connect(fd, reinterpret_cast<sockaddr *>(&addr), addrLength) == 0 &&
            ::getsockname(fd, reinterpret_cast<sockaddr *>(&mine), &length) == 0;
  if (fd >= 0)
    ::close(fd);
  char text[INET_ADDRSTRLEN] = {};
  return ok && ::inet_ntop(AF_INET, &mine.sin_addr, text, sizeof text) ? text : "";
}

} // namespace tpcrt
