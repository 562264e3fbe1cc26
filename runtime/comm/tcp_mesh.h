// Private to the runtime's comm/: the collectives (and the messages between two members)
// between hosts over plain TCP sockets, a connection between every pair of members, each
// call moved by the calling thread itself (nonblocking sockets under one poll). Gloo's TCP
// pairs hand every message to a device thread and back, about 150 us a message on these CPUs
// and milliseconds when the ranks outnumber the cores; a decode step makes some sixty
// collectives, so between hosts that hand-off, not the link, set the pace (docs/multi-host.md,
// bench/results/multi-host.txt). Plain C++17, Linux.
//
// An all-reduce sends every member's buffer to every other and each sums them in member order:
// one message time, not a ring's 2(n-1), the same bits on every member, and for two hosts the
// ring's bytes. A member that closes its connection fails the call at once; one that stops
// answering, after the timeout; both name it.
#ifndef TPCRT_COMM_TCP_MESH_H
#define TPCRT_COMM_TCP_MESH_H

#include "tpcrt/collectives.h"

#include <gloo/rendezvous/store.h>

#include <memory>
#include <string>
#include <vector>

namespace tpcrt {

class TcpMeshCommunicator : public Communicator {
public:
  /// Connects member `index` of `count` (listening on `address`) to the others through
  /// `store` under `tag`. `names[i]` is how messages name member i ("rank 2"). Null, with
  /// `error`, where the mesh cannot be made within `timeoutSeconds`.
  static std::unique_ptr<TcpMeshCommunicator>
  connect(gloo::rendezvous::Store &store, const std::string &tag, int index, int count,
          const std::string &address, int timeoutSeconds, std::vector<std::string> names,
          std::string &error);
  ~TcpMeshCommunicator() override;

  bool gathersVariableSizes() const override { return true; }
  std::string pathOf(const std::string &) const override { return "tcp"; }

protected:
  void runAllReduce(void *data, size_t count) override;
  void runAllGather(const void *in, size_t count, void *out) override;
  void runAllGatherV(const void *in, const std::vector<size_t> &counts, void *out) override;
  void runReduceScatter(const void *in, size_t count, void *out) override;
  void runAllToAll(const void *in, size_t count, void *out) override;
  void runSend(const void *data, size_t count, int peer) override;
  void runRecv(void *data, size_t count, int peer) override;

private:
  TcpMeshCommunicator(int index, int count, std::vector<int> sockets, int timeoutSeconds,
                      std::vector<std::string> names);
  /// Sends `sendBytes[p]` bytes from `send[p]` to each peer p and receives `recvBytes[p]`
  /// into `recv[p]` from each, all at once.
  void move(const std::vector<const char *> &send, const std::vector<size_t> &sendBytes,
            const std::vector<char *> &recv, const std::vector<size_t> &recvBytes);

  std::vector<int> sockets; // by member; -1 for this one
  int timeoutSeconds;
  std::vector<std::string> names;
  std::vector<float> staging;
};

} // namespace tpcrt

#endif // TPCRT_COMM_TCP_MESH_H
