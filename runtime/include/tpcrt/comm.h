// The ranks of one tp group on the CPU side: rendezvous through a directory (one machine) or
// rank 0's TCP store (MASTER_ADDR, any number of machines), and the Gloo communicator (TCP
// between hosts, shared memory within one, hierarchical across several), or, in a job started
// by mpirun, MPI's. A rank that stops answering makes the others fail after the timeout
// instead of hanging (under mpirun, mpirun ends the job). Plain C++17.
#ifndef TPCRT_COMM_H
#define TPCRT_COMM_H

#include "tpcrt/collectives.h"

#include <cstddef>
#include <memory>
#include <string>

namespace tpcrt {

struct CommOptions {
  int rank = 0, world = 1;
  std::string rendezvousDir; // shared by the ranks (one machine, or a shared filesystem)
  // The address this rank's transport binds to; on loopback with a store elsewhere, the
  // address this machine reaches the store from.
  std::string host = "127.0.0.1";
  int timeoutSeconds = 30;
  // With no directory: rank 0's TCP store (storeFromEnv), for run `runId`.
  std::string storeHost;
  int storePort = 0;
  // Where every rank is on this machine (torchrun on one node): the store's abstract Unix
  // socket, which takes the place of its port, so that no port has to be free.
  std::string storeSocket;
  std::string runId = "none";
};

/// This rank's place in its tp group: the rendezvous, what the peers left there, and the
/// communicator for fp32 host buffers (Gloo over TCP; local copies for a rank alone).
class Comm {
public:
  /// Connects the group (nothing to connect for one rank): through MPI where mpirun started
  /// the job (startedByMpirun), else through the rendezvous directory. A rendezvous directory
  /// that an earlier job used is refused, not joined. On failure returns null and says why.
  static std::unique_ptr<Comm> connect(const CommOptions &options, std::string &error);
  /// A group of `world` with only this rank in it, for the per-rank view
  /// (TPC_SINGLE_RANK_VIEW=1): one rank run alone to time its compute. Its collectives move
  /// nothing (LocalCommunicator): the numbers are not the model's.
  static std::unique_ptr<Comm> noop(int world);
  virtual ~Comm() = default;

  int rank() const { return options.rank; }
  int world() const { return options.world; }

  /// The collectives on fp32 host buffers.
  virtual Communicator &communicator() = 0;
  /// Copies `bytes` from rank `root` to every rank (the NCCL unique id travels this way).
  virtual void broadcast(void *data, size_t bytes, int root) = 0;
  /// Returns once every rank has called it.
  virtual void barrier() = 0;
  /// The ranks of this group with the same `color`, ordered by `key` (ties by rank), as a
  /// group of their own; collective over the whole group, like MPI_Comm_split. Null, with
  /// `error`, on failure. The part asks this group about its lost peers, so this group must
  /// outlive it.
  virtual std::unique_ptr<Comm> split(int color, int key, std::string &error) = 0;
  /// At a clean exit: marks the rendezvous directory as used up (rank 0); under mpirun,
  /// lets MPI finalize as the process exits (a rank that exits without it makes mpirun end
  /// the job).
  virtual void retire();
  /// Leaves where the peers look (the rendezvous, the shared-memory segment) why this rank
  /// is stopping, so that peers which see it vanish can say so rather than guess.
  virtual void recordExit(const std::string &reason) const;
  /// After a collective failed: which peers are gone and why, from the reasons they left and,
  /// for peers on this machine, whether their process still exists ("lost rank 1 (process
  /// 4242 is gone)"). With two ranks the peer is the other one even when nothing else is
  /// known. "" when nothing can be said.
  virtual std::string lostPeers() const;

protected:
  explicit Comm(const CommOptions &options) : options(options) {}
  CommOptions options;
};

/// Where the ranks meet: TPC_RENDEZVOUS_DIR, else a directory derived from torchrun's
/// TORCHELASTIC_RUN_ID under TPC_RENDEZVOUS_ROOT (default /tmp), with the launching agent's
/// pid added for torchrun's default id "none"; "" when neither is set.
std::string rendezvousDirFromEnv();

/// Rank 0's store from torchrun's environment into `options`: MASTER_ADDR and MASTER_PORT,
/// except that under torchrun's agent store (TORCHELASTIC_USE_AGENT_STORE) that port is the
/// agent's and tpc's is the next one; TPC_STORE_PORT overrides either. The run id is
/// TORCHELASTIC_RUN_ID, else TPC_RUN_ID, else "none". Where torchrun's agent holds
/// MASTER_PORT and every rank is on this machine (LOCAL_WORLD_SIZE is WORLD_SIZE), the store
/// is an abstract Unix socket named from the run id and that port instead, unless
/// TPC_STORE_PORT is set: the next port may be anyone's. False, with `error`, for a port that
/// is no port; true with no store where MASTER_ADDR is not set.
bool storeFromEnv(CommOptions &options, std::string &error);

/// Whether mpirun started this process (OMPI_COMM_WORLD_SIZE and OMPI_COMM_WORLD_RANK are set):
/// its rank and world come from there, and the group connects through MPI.
bool startedByMpirun();

} // namespace tpcrt

#endif // TPCRT_COMM_H
