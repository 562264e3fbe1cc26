// Private to the runtime's comm/: where the ranks of several machines meet without a shared
// filesystem. Rank 0 serves a small key-value store on MASTER_ADDR (TcpStoreServer); every
// rank, rank 0 too, talks to it as a client (TcpStore), which is also a Gloo rendezvous store.
// Written here because Debian's Gloo has no TCP store and torchrun's own speaks a protocol of
// PyTorch's internals (docs/multi-host.md). Plain C++17, Linux.
//
// The protocol: a frame is an op byte, then a key and a value, each a 32-bit little-endian
// length and its bytes; the answer is a status byte and one such string. HELLO (key: the run
// id, value: "WORLD RANK") must come first and is checked against rank 0's; SET, CLAIM (a SET
// that fails when the key is there) and GET (the value, or "not there yet": a client that waits
// asks again). Every length is bounded, a connection that sends anything else is closed, and
// so is one that has not said hello within 10 s.
#ifndef TPCRT_COMM_TCP_STORE_H
#define TPCRT_COMM_TCP_STORE_H

#include <gloo/rendezvous/store.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace tpcrt {

/// An address and a port, as given (a name or a numeric address); or, where `socket` is set,
/// the abstract Unix socket of that name (ranks all on one machine: no port to find free).
struct Endpoint {
  std::string host;
  int port = 0;
  std::string socket;
  std::string str() const {
    return socket.empty() ? host + ":" + std::to_string(port) : "socket @" + socket;
  }
};

/// The store rank 0 serves, on its own thread, until it is destroyed.
class TcpStoreServer {
public:
  /// Listens on `at` for the ranks of run `runId` in a world of `world`. Null, with `error`,
  /// where the address cannot be had (in use: another job's store, or any other program).
  static std::unique_ptr<TcpStoreServer> start(const Endpoint &at, const std::string &runId,
                                               int world, std::string &error);
  ~TcpStoreServer();

private:
  TcpStoreServer(int listener, std::string runId, int world);
  void serve();

  int listener, wake[2] = {-1, -1};
  std::string runId;
  int world;
  std::thread thread;
};

/// One rank's connection to the store. Every call is bounded by the timeout it is given.
class TcpStore : public gloo::rendezvous::Store {
public:
  /// Connects to `at` (trying again while nothing listens there yet, up to `timeout`) and
  /// says hello as `rank` of `world` in run `runId`. Null, with `error`, on failure.
  static std::unique_ptr<TcpStore> connect(const Endpoint &at, const std::string &runId,
                                           int world, int rank,
                                           std::chrono::milliseconds timeout, std::string &error);
  ~TcpStore() override;

  void set(const std::string &key, const std::vector<char> &data) override;
  /// Waits for the key up to the store's timeout.
  std::vector<char> get(const std::string &key) override;
  void wait(const std::vector<std::string> &keys) override;
  void wait(const std::vector<std::string> &keys,
            const std::chrono::milliseconds &timeout) override;

  /// Sets `key` where it is not set yet; else false, with what it holds in `held`.
  bool claim(const std::string &key, const std::string &value, std::string &held);
  /// The value if it is there now.
  std::optional<std::string> tryGet(const std::string &key);

  /// Bounds every call from now on by `limit`.
  void limitCalls(std::chrono::milliseconds limit);

  const Endpoint &endpoint() const { return where; }

private:
  TcpStore(int fd, Endpoint at, std::chrono::milliseconds timeout)
      : fd(fd), where(std::move(at)), timeout(timeout) {}
  /// One request and its answer: the status byte, the answer's text in `answer`.
  int call(uint8_t op, const std::string &key, const std::string &value, std::string &answer);

  int fd;
  Endpoint where;
  std::chrono::milliseconds timeout;
};

/// The address of this machine that reaches `peer` (the source address the kernel would
/// pick for it), "" where there is no route.
std::string localAddressFor(const std::string &peer);

} // namespace tpcrt

#endif // TPCRT_COMM_TCP_STORE_H
