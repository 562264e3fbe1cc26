// Private to the runtime's comm/: what the transports that connect a tp group share. Comm's
// transport-neutral methods and Comm::connect live in comm.cpp; Gloo's rendezvous in
// gloo_comm.cpp, mpirun's in mpi_comm.cpp; neither calls the other. Plain C++17.
#ifndef TPCRT_COMM_GROUP_H
#define TPCRT_COMM_GROUP_H

#include "shm_comm.h"
#include "tpcrt/comm.h"

#include <memory>
#include <string>
#include <vector>

namespace tpcrt {

/// A connected group of several ranks whose collectives move to the same-host transport
/// (ShmCommunicator) where every rank is on this machine and the transport allows it, or to
/// the hierarchical one where the ranks are on several hosts.
class ConnectedGroup : public Comm {
public:
  Communicator &communicator() override { return chosen ? *chosen : own(); }
  /// Into the shared-memory segment, where this rank has one.
  void recordExit(const std::string &reason) const override {
    if (shm)
      shm->recordExit(reason);
  }

  /// TPC_TRANSPORT auto or shm (`transport`): rank 0 makes a shared-memory segment named from
  /// `prefix` and tells the others its name (through broadcast), every rank maps it, and it is
  /// unlinked once all have, so nothing outlives the job. The group uses it only where every
  /// rank could map it. `allHere`: whether every rank is on this machine (else `elsewhere`
  /// says why shm cannot be had). False, with `error`, where shm was asked for and cannot be
  /// had; auto falls back to the group's own collectives.
  bool shareMemory(const std::string &transport, bool allHere, const std::string &elsewhere,
                   const char *prefix, ShmCommunicator::PeerCheck peerGone, std::string &error);

protected:
  using Comm::Comm;
  /// The transport's own collectives (Gloo's, MPI's).
  virtual Communicator &own() = 0;

  /// The collectives where not own(): shared memory, or the hierarchy over hosts.
  std::unique_ptr<Communicator> chosen;
  /// This rank's same-host segment (chosen, or the hierarchy's part inside this host).
  ShmCommunicator *shm = nullptr;
};

/// Connects the ranks through Gloo (`options.world` > 1), met in the rendezvous directory or
/// at rank 0's TCP store. `transport` is TPC_TRANSPORT, already checked to be auto, shm or gloo.
std::unique_ptr<Comm> connectGloo(const CommOptions &options, const std::string &transport,
                                  std::string &error);

/// Connects the ranks mpirun started (`options.world` > 1). `transport` is TPC_TRANSPORT,
/// already checked to be auto, shm or mpi: mpi moves the collectives through MPI's; auto and
/// shm through the shared-memory transport where every rank is on this machine (MPI only
/// starts it, broadcasts and barriers), auto through MPI otherwise. Null, with `error`, on
/// failure.
std::unique_ptr<Comm> connectMpi(const CommOptions &options, const std::string &transport,
                                 std::string &error);

/// A group of this rank alone (`options.world` 1): its collectives are local copies.
std::unique_ptr<Comm> groupOfOne(const CommOptions &options);

/// This machine's name.
std::string hostName();

/// Whether process `pid` of this machine has ended: gone, or a zombie its parent has not
/// reaped yet.
bool processEnded(long pid);

/// `items` joined with `separator` between them.
std::string joinList(const std::vector<std::string> &items, const char *separator);

} // namespace tpcrt

#endif // TPCRT_COMM_GROUP_H
