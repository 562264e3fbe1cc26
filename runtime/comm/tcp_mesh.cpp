// The collectives between hosts over plain TCP (tcp_mesh.h).
#include "tcp_mesh.h"

#include <arpa/inet.h>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdexcept>
#include <sys/socket.h>
#include <thread>
#include <unistd.h>

namespace tpcrt {

namespace {

using Clock = std::chrono::steady_clock;

void closeAll(std::vector<int> &fds) {
  for (int &fd : fds)
    if (fd >= 0)
      ::close(fd), fd = -1;
}

/// "a.b.c.d:port" into `addr`.
bool parseAddress(const std::string &text, sockaddr_in &addr) {
  size_t colon = text.rfind(':');
  addr = {};
  addr.sin_family = AF_INET;
  if (colon == std::string::npos ||
      ::inet_pton(AF_INET, text.substr(0, colon).c_str(), &addr.sin_addr) != 1)
    return false;
  addr.sin_port = htons(uint16_t(std::atoi(text.c_str() + colon + 1)));
  return true;
}

/// Reads or writes all of `n` bytes on a blocking socket; false on failure.
template <typename Io> bool whole(Io io, int fd, char *at, size_t n) {
  while (n > 0) {
    ssize_t done = io(fd, at, n);
    if (done <= 0)
      return false;
    at += done, n -= size_t(done);
  }
  return true;
}

} // namespace

std::unique_ptr<TcpMeshCommunicator>
TcpMeshCommunicator::connect(gloo::rendezvous::Store &store, const std::string &tag, int index,
                             int count, const std::string &address, int timeoutSeconds,
                             std::vector<std::string> names, std::string &error) {
  std::vector<int> sockets(size_t(count), -1);
  sockaddr_in addr{};
  int listener = -1;
  auto fail = [&](const std::string &why) {
    error = "cannot connect the hosts' TCP mesh: " + why;
    closeAll(sockets);
    if (listener >= 0)
      ::close(listener);
    return nullptr;
  };
  // Every member listens; member j connects to each member i < j and says who it is.
  if (!parseAddress(address + ":0", addr))
    return fail("no address to listen on (" + address + ")");
  listener = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  socklen_t length = sizeof addr;
  if (listener < 0 || ::bind(listener, reinterpret_cast<sockaddr *>(&addr), sizeof addr) != 0 ||
      ::listen(listener, count) != 0 ||
      ::getsockname(listener, reinterpret_cast<sockaddr *>(&addr), &length) != 0)
    return fail(std::string("cannot listen on ") + address + ": " + std::strerror(errno));
  std::string mine = address + ":" + std::to_string(ntohs(addr.sin_port));
  try {
    store.set(tag + "/" + std::to_string(index), std::vector<char>(mine.begin(), mine.end()));
    for (int i = 0; i < index; ++i) {
      std::vector<char> theirs = store.get(tag + "/" + std::to_string(i));
      sockaddr_in peer{};
      if (!parseAddress(std::string(theirs.begin(), theirs.end()), peer))
        return fail(names[size_t(i)] + " published no address");
      int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
      sockets[size_t(i)] = fd;
      // Linux bounds a connect by the send timeout: an unreachable host fails it in time.
      timeval tv{timeoutSeconds, 0};
      ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
      int32_t me = index;
      if (::connect(fd, reinterpret_cast<sockaddr *>(&peer), sizeof peer) != 0 ||
          !whole([](int f, char *p, size_t n) { return ::send(f, p, n, MSG_NOSIGNAL); }, fd,
                 reinterpret_cast<char *>(&me), sizeof me))
        return fail("cannot reach " + names[size_t(i)] + ": " + std::strerror(errno));
    }
  } catch (const std::exception &e) {
    return fail(e.what());
  }
  // The members after this one connect to it, each naming itself first.
  auto deadline = Clock::now() + std::chrono::seconds(timeoutSeconds);
  for (int accepted = index + 1; accepted < count; ++accepted) {
    pollfd p{listener, POLLIN, 0};
    int left = int(std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now())
                       .count());
    if (left <= 0 || ::poll(&p, 1, left) <= 0)
      return fail("the members after " + names[size_t(index)] + " did not connect within " +
                  std::to_string(timeoutSeconds) + " s");
    int fd = ::accept4(listener, nullptr, nullptr, SOCK_CLOEXEC);
    timeval tv{timeoutSeconds, 0};
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    int32_t who = -1;
    if (fd < 0 || !whole(::read, fd, reinterpret_cast<char *>(&who), sizeof who) ||
        who <= index || who >= count || sockets[size_t(who)] >= 0) {
      if (fd >= 0)
        ::close(fd);
      return fail("a connection that is no member's");
    }
    sockets[size_t(who)] = fd;
  }
  ::close(listener);
  listener = -1;
  for (int fd : sockets)
    if (fd >= 0) {
      int one = 1;
      ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
    }
  return std::unique_ptr<TcpMeshCommunicator>(
      new TcpMeshCommunicator(index, count, std::move(sockets), timeoutSeconds, std::move(names)));
}

TcpMeshCommunicator::TcpMeshCommunicator(int index, int count, std::vector<int> sockets,
                                         int timeoutSeconds, std::vector<std::string> names)
    : Communicator(index, count, sizeof(float)), sockets(std::move(sockets)),
      timeoutSeconds(timeoutSeconds), names(std::move(names)) {}

TcpMeshCommunicator::~TcpMeshCommunicator() { closeAll(sockets); }

void TcpMeshCommunicator::move(const std::vector<const char *> &send,
                               const std::vector<size_t> &sendBytes,
                               const std::vector<char *> &recv,
                               const std::vector<size_t> &recvBytes) {
  std::vector<size_t> sent(static_cast<size_t>(world), 0), got(static_cast<size_t>(world), 0);
  auto deadline = Clock::now() + std::chrono::seconds(timeoutSeconds);
  std::vector<pollfd> polls;
  std::vector<int> peerOf;
  for (;;) {
    polls.clear();
    peerOf.clear();
    for (int p = 0; p < world; ++p) {
      if (p == rank)
        continue;
      short events = short((sent[size_t(p)] < sendBytes[size_t(p)] ? POLLOUT : 0) |
                           (got[size_t(p)] < recvBytes[size_t(p)] ? POLLIN : 0));
      if (events) {
        polls.push_back({sockets[size_t(p)], events, 0});
        peerOf.push_back(p);
      }
    }
    if (polls.empty())
      return;
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    int ready = left.count() > 0 ? ::poll(polls.data(), polls.size(), int(left.count())) : 0;
    if (ready < 0 && errno == EINTR)
      continue;
    if (ready <= 0) {
      std::string silent;
      for (int p : peerOf)
        silent += (silent.empty() ? "" : ", ") + names[size_t(p)];
      throw std::runtime_error("TCP between hosts: no answer from " + silent + " within " +
                               std::to_string(timeoutSeconds) + " s (--timeout)");
    }
    for (size_t i = 0; i < polls.size(); ++i) {
      int p = peerOf[i], fd = polls[i].fd;
      size_t q = size_t(p);
      if (polls[i].revents & (POLLIN | POLLHUP | POLLERR) && got[q] < recvBytes[q]) {
        ssize_t n = ::recv(fd, recv[q] + got[q], recvBytes[q] - got[q], 0);
        if (n == 0)
          throw std::runtime_error("TCP between hosts: " + names[q] + " closed its connection");
        if (n < 0 && errno != EAGAIN && errno != EINTR)
          throw std::runtime_error("TCP between hosts: reading from " + names[q] + ": " +
                                   std::strerror(errno));
        if (n > 0)
          got[q] += size_t(n);
      }
      if (polls[i].revents & (POLLOUT | POLLERR) && sent[q] < sendBytes[q]) {
        ssize_t n = ::send(fd, send[q] + sent[q], sendBytes[q] - sent[q],
                           MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n < 0 && errno != EAGAIN && errno != EINTR)
          throw std::runtime_error("TCP between hosts: writing to " + names[q] + ": " +
                                   std::strerror(errno));
        if (n > 0)
          sent[q] += size_t(n);
      }
    }
  }
}

void TcpMeshCommunicator::runAllGatherV(const void *in, const std::vector<size_t> &counts,
                                        void *out) {
  std::vector<const char *> send(static_cast<size_t>(world), static_cast<const char *>(in));
  std::vector<size_t> sendBytes(static_cast<size_t>(world), counts[size_t(rank)] * sizeof(float));
  std::vector<char *> recv(static_cast<size_t>(world));
  std::vector<size_t> recvBytes(static_cast<size_t>(world));
  char *y = static_cast<char *>(out);
  for (int p = 0; p < world; ++p) {
    recv[size_t(p)] = y;
    recvBytes[size_t(p)] = counts[size_t(p)] * sizeof(float);
    y += recvBytes[size_t(p)];
  }
  std::memcpy(recv[size_t(rank)], in, recvBytes[size_t(rank)]);
  sendBytes[size_t(rank)] = recvBytes[size_t(rank)] = 0;
  move(send, sendBytes, recv, recvBytes);
}

void TcpMeshCommunicator::runAllGather(const void *in, size_t count, void *out) {
  runAllGatherV(in, std::vector<size_t>(static_cast<size_t>(world), count), out);
}

void TcpMeshCommunicator::runAllReduce(void *data, size_t count) {
  staging.resize(count * size_t(world));
  runAllGather(data, count, staging.data());
  // Member order on every member: the same bits everywhere.
  float *x = static_cast<float *>(data);
  std::memcpy(x, staging.data(), count * sizeof(float));
  for (int m = 1; m < world; ++m) {
    const float *part = staging.data() + size_t(m) * count;
    for (size_t i = 0; i < count; ++i)
      x[i] += part[i];
  }
}

void TcpMeshCommunicator::runAllToAll(const void *in, size_t count, void *out) {
  const char *x = static_cast<const char *>(in);
  char *y = static_cast<char *>(out);
  size_t bytes = count * sizeof(float);
  std::vector<const char *> send(static_cast<size_t>(world));
  std::vector<char *> recv(static_cast<size_t>(world));
  std::vector<size_t> sizes(static_cast<size_t>(world), bytes);
  for (int p = 0; p < world; ++p) {
    send[size_t(p)] = x + size_t(p) * bytes;
    recv[size_t(p)] = y + size_t(p) * bytes;
  }
  std::memcpy(recv[size_t(rank)], send[size_t(rank)], bytes);
  sizes[size_t(rank)] = 0;
  move(send, sizes, recv, sizes);
}

void TcpMeshCommunicator::runReduceScatter(const void *in, size_t count, void *out) {
  // Each member's part r goes to member r, which sums them in member order.
  staging.resize(count * size_t(world));
  runAllToAll(in, count, staging.data());
  float *y = static_cast<float *>(out);
  std::memcpy(y, staging.data(), count * sizeof(float));
  for (int m = 1; m < world; ++m)
    for (size_t i = 0; i < count; ++i)
      y[i] += staging[size_t(m) * count + i];
}

// A message is a move with one peer's bytes: the pair's socket keeps the messages in order.
void TcpMeshCommunicator::runSend(const void *data, size_t count, int peer) {
  std::vector<const char *> send(size_t(world), static_cast<const char *>(data));
  std::vector<size_t> sendBytes(size_t(world), 0), none(size_t(world), 0);
  sendBytes[size_t(peer)] = count * sizeof(float);
  move(send, sendBytes, std::vector<char *>(size_t(world)), none);
}

void TcpMeshCommunicator::runRecv(void *data, size_t count, int peer) {
  std::vector<char *> recv(size_t(world), static_cast<char *>(data));
  std::vector<size_t> recvBytes(size_t(world), 0), none(size_t(world), 0);
  recvBytes[size_t(peer)] = count * sizeof(float);
  move(std::vector<const char *>(size_t(world)), none, recv, recvBytes);
}

} // namespace tpcrt
