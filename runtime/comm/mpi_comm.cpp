// A tp group started by mpirun (connectMpi, group.h): MPI starts it, with the ranks and the world
// mpirun gave, and either moves the collectives itself (MPI_Allreduce, ...) or only starts
// the shared-memory transport where every rank is on this machine, as the measurements in
// bench/results/comm-transport.txt favour. A part of the group (split) is MPI_Comm_split's,
// connected the same way.
//
// Debian's Open MPI 4.1 has no timeout on a collective: a rank that dies leaves its peers
// waiting in MPI, and mpirun, which sees the process end, ends the job and names the rank.
// So a rank that fails exits without MPI_Finalize (which would wait for every peer), and
// only a clean exit (retire) finalizes.
#include "group.h"

// MPI's C bindings only: its C++ ones would need libmpi_cxx.
#define OMPI_SKIP_MPICXX 1
#include <mpi.h>

#include <climits>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <unistd.h>
#include <vector>

namespace tpcrt {

namespace {

/// Set by retire: the process is leaving cleanly, and MPI finalizes as it exits.
bool finalizeAtExit = false;

void finalizeMpi() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalizeAtExit && !finalized)
    MPI_Finalize();
}

void check(int status, const char *call) {
  if (status == MPI_SUCCESS)
    return;
  char text[MPI_MAX_ERROR_STRING] = {};
  int length = 0;
  MPI_Error_string(status, text, &length);
  throw std::runtime_error(std::string(call) + " failed: " + text);
}

/// MPI counts are ints.
int mpiCount(size_t count) {
  if (count > size_t(INT_MAX))
    throw std::length_error("a collective of " + std::to_string(count) +
                            " elements is more than MPI's int count holds");
  return int(count);
}

/// MPI_Init, once per process (tpc-comm-latency connects a group per transport).
bool initMpi(std::string &error) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (initialized)
    return true;
  // Open MPI polls while it waits. Yielding the core in between keeps a waiting rank from
  // starving a peer's compute where ranks outnumber cores; the user's own setting wins.
  ::setenv("OMPI_MCA_mpi_yield_when_idle", "1", /*overwrite=*/0);
  int provided = 0;
  if (MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS) {
    error = "MPI_Init failed";
    return false;
  }
  std::atexit(finalizeMpi);
  return true;
}

/// MPI's collectives on fp32 host buffers.
class MpiCommunicator : public Communicator {
public:
  MpiCommunicator(MPI_Comm comm, int rank, int world)
      : Communicator(rank, world, sizeof(float)), comm(comm) {}
  bool gathersVariableSizes() const override { return true; }
  std::string pathOf(const std::string &) const override { return "mpi"; }

protected:
  /// Of two ranks, MPI's own sum (a + b is b + a); of more, every rank's part gathered and
  /// summed in rank order, as shared memory and the hosts' mesh sum: MPI associates a sum of
  /// three its own way, and the logits would differ from the same model's on one host in
  /// their last bits (2.7e-5 for SmolLM2 at tp 3, bench/results/multi-host.txt).
  void runAllReduce(void *data, size_t count) override {
    if (world == 2) {
      check(MPI_Allreduce(MPI_IN_PLACE, data, mpiCount(count), MPI_FLOAT, MPI_SUM, comm),
            "MPI_Allreduce");
      return;
    }
    parts.resize(count * size_t(world));
    int n = mpiCount(count);
    check(MPI_Allgather(data, n, MPI_FLOAT, parts.data(), n, MPI_FLOAT, comm), "MPI_Allgather");
    sumInRankOrder(parts.data(), count, static_cast<float *>(data));
  }
  void runAllGather(const void *in, size_t count, void *out) override {
    int n = mpiCount(count);
    check(MPI_Allgather(in, n, MPI_FLOAT, out, n, MPI_FLOAT, comm), "MPI_Allgather");
  }
  void runReduceScatter(const void *in, size_t count, void *out) override {
    if (world == 2) {
      check(MPI_Reduce_scatter_block(in, out, mpiCount(count), MPI_FLOAT, MPI_SUM, comm),
            "MPI_Reduce_scatter_block");
      return;
    }
    // Every rank's part for this rank, summed in rank order (as runAllReduce).
    parts.resize(count * size_t(world));
    int n = mpiCount(count);
    check(MPI_Alltoall(in, n, MPI_FLOAT, parts.data(), n, MPI_FLOAT, comm), "MPI_Alltoall");
    sumInRankOrder(parts.data(), count, static_cast<float *>(out));
  }
  void runAllToAll(const void *in, size_t count, void *out) override {
    int n = mpiCount(count);
    check(MPI_Alltoall(in, n, MPI_FLOAT, out, n, MPI_FLOAT, comm), "MPI_Alltoall");
  }
  void runAllGatherV(const void *in, const std::vector<size_t> &counts, void *out) override {
    std::vector<int> n(counts.size()), at(counts.size());
    size_t offset = 0;
    for (size_t r = 0; r < counts.size(); ++r) {
      n[r] = mpiCount(counts[r]);
      at[r] = mpiCount(offset);
      offset += counts[r];
    }
    check(MPI_Allgatherv(in, n[size_t(rank)], MPI_FLOAT, out, n.data(), at.data(), MPI_FLOAT,
                         comm),
          "MPI_Allgatherv");
  }
  void runSend(const void *data, size_t count, int peer) override {
    check(MPI_Send(data, mpiCount(count * sizeof(float)), MPI_BYTE, peer, 0, comm), "MPI_Send");
  }
  void runRecv(void *data, size_t count, int peer) override {
    check(MPI_Recv(data, mpiCount(count * sizeof(float)), MPI_BYTE, peer, 0, comm,
                   MPI_STATUS_IGNORE),
          "MPI_Recv");
  }

private:
  /// The sum of `world` parts of `count` elements, part 0 first.
  void sumInRankOrder(const float *all, size_t count, float *out) const {
    std::memcpy(out, all, count * sizeof(float));
    for (int r = 1; r < world; ++r)
      for (size_t i = 0; i < count; ++i)
        out[i] += all[size_t(r) * count + i];
  }

  MPI_Comm comm;
  std::vector<float> parts;
};

/// Who a rank is, gathered from every rank when the group connects: a peer that vanishes
/// can be named, and checked for where it ran on this host. The host is MPI's node (the
/// lowest rank of MPI_COMM_TYPE_SHARED's split), not the hostname, which hosts may share.
struct Peer {
  long pid;
  int node;
  int rank; // in the whole job (MPI_COMM_WORLD), which names it in messages
};

class MpiComm;

/// The group of `comm`'s ranks (`options` says this rank's place in it), its transport chosen
/// as connectMpi says; `parent`, where it is part of one, answers for its lost peers.
std::unique_ptr<Comm> connectOn(MPI_Comm comm, const CommOptions &options,
                                const std::string &transport, const MpiComm *parent,
                                std::string &error);

/// A group mpirun started, or a part of one (split): `parent`, which outlives it, then
/// answers for the peers.
class MpiComm : public ConnectedGroup {
public:
  MpiComm(const CommOptions &options, MPI_Comm comm, std::vector<Peer> peers,
          std::string transport, const MpiComm *parent)
      : ConnectedGroup(options), comm(comm), mpi(comm, options.rank, options.world),
        peers(std::move(peers)), transport(std::move(transport)), parent(parent) {}
  // The communicator is not freed: MPI_Comm_free may wait on peers where a rank leaves on an
  // error, and MPI_Finalize frees it at a clean exit.

  void broadcast(void *data, size_t bytes, int root) override {
    check(MPI_Bcast(data, mpiCount(bytes), MPI_BYTE, root, comm), "MPI_Bcast");
  }
  void barrier() override { check(MPI_Barrier(comm), "MPI_Barrier"); }
  void retire() override { finalizeAtExit = true; }

  std::unique_ptr<Comm> split(int color, int key, std::string &error) override {
    MPI_Comm part;
    if (MPI_Comm_split(comm, color, key, &part) != MPI_SUCCESS) {
      error = "MPI_Comm_split failed";
      return nullptr;
    }
    CommOptions partOptions = options;
    MPI_Comm_rank(part, &partOptions.rank);
    MPI_Comm_size(part, &partOptions.world);
    if (partOptions.world == 1) { // a rank alone moves nothing; nothing waits on it to free
      MPI_Comm_free(&part);
      return groupOfOne(partOptions);
    }
    return connectOn(part, partOptions, transport, this, error);
  }

  void recordExit(const std::string &reason) const override {
    ConnectedGroup::recordExit(reason);
    if (parent)
      parent->recordExit(reason);
  }

  std::string lostPeers() const override {
    if (parent) // names the peers by their rank in the whole job
      return parent->lostPeers();
    std::string lost;
    // A killed peer's process is reaped a moment after it stops answering: look for a second.
    for (int attempt = 0; attempt < 20 && lost.empty(); ++attempt) {
      if (attempt)
        ::usleep(50000);
      lost = gone();
    }
    if (!lost.empty())
      return "lost " + lost;
    if (options.world == 2)
      return "lost rank " + std::to_string(1 - options.rank) + " (it stopped answering)";
    return "";
  }

  /// The peers on this machine whose process has ended ("rank 1 (process 4242 is gone)"),
  /// "" while all may still answer.
  std::string gone() const {
    std::string lost;
    int node = peers[size_t(options.rank)].node;
    for (int r = 0; r < options.world; ++r)
      if (r != options.rank && node == peers[size_t(r)].node &&
          processEnded(peers[size_t(r)].pid))
        lost += (lost.empty() ? "rank " : ", rank ") + std::to_string(peers[size_t(r)].rank) +
                " (process " + std::to_string(peers[size_t(r)].pid) + " is gone)";
    return lost;
  }

  /// Shared memory where every rank is on this machine and TPC_TRANSPORT allows it, MPI's own
  /// collectives otherwise. False, with `error`, where shm was asked for and cannot be had.
  bool chooseTransport(std::string &error) {
    if (transport == "mpi")
      return true;
    // The segment's name travels through MPI; a peer is gone when its process is (this group
    // lives as long as the segment that asks).
    if (!shareMemory(transport, allOnThisHost(), "mpirun placed them on several hosts",
                     "tpc-mpi", [this] { return gone(); }, error))
      return false;
    if (shm) {
      std::vector<int> ranks;
      for (const Peer &peer : peers)
        ranks.push_back(peer.rank);
      shm->nameRanks(std::move(ranks));
    }
    return true;
  }

  bool allOnThisHost() const {
    for (const Peer &peer : peers)
      if (peer.node != peers.front().node)
        return false;
    return true;
  }

protected:
  Communicator &own() override { return mpi; }

private:
  MPI_Comm comm;
  MpiCommunicator mpi;
  std::vector<Peer> peers;
  std::string transport; // TPC_TRANSPORT: the group's parts choose theirs as it did
  const MpiComm *parent;
};

std::unique_ptr<Comm> connectOn(MPI_Comm comm, const CommOptions &options,
                                const std::string &transport, const MpiComm *parent,
                                std::string &error) {
  // Errors come back as codes (a failed call throws and is reported like any failed
  // collective) rather than aborting the job on the spot.
  MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
  try {
    // This rank's node: the lowest rank among those MPI says share its memory.
    MPI_Comm shared;
    check(MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, options.rank, MPI_INFO_NULL, &shared),
          "MPI_Comm_split_type");
    Peer me{long(::getpid()), options.rank, 0};
    MPI_Comm_rank(MPI_COMM_WORLD, &me.rank);
    check(MPI_Allreduce(MPI_IN_PLACE, &me.node, 1, MPI_INT, MPI_MIN, shared), "MPI_Allreduce");
    MPI_Comm_free(&shared);
    std::vector<Peer> peers(static_cast<size_t>(options.world));
    check(MPI_Allgather(&me, sizeof me, MPI_BYTE, peers.data(), sizeof me, MPI_BYTE, comm),
          "MPI_Allgather");
    auto group = std::make_unique<MpiComm>(options, comm, std::move(peers), transport, parent);
    if (!group->chooseTransport(error))
      return nullptr;
    return group;
  } catch (const std::exception &e) {
    error = std::string("could not connect the ranks through MPI: ") + e.what();
    return nullptr;
  }
}

} // namespace

std::unique_ptr<Comm> connectMpi(const CommOptions &options, const std::string &transport,
                                 std::string &error) {
  if (!initMpi(error))
    return nullptr;
  // A communicator of its own.
  MPI_Comm comm;
  if (MPI_Comm_dup(MPI_COMM_WORLD, &comm) != MPI_SUCCESS) {
    error = "MPI_Comm_dup failed";
    return nullptr;
  }
  int rank = 0, world = 0;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &world);
  if (rank != options.rank || world != options.world) {
    error = "mpirun started " + std::to_string(world) + " ranks and this is rank " +
            std::to_string(rank) + ", but the group was asked for rank " +
            std::to_string(options.rank) + " of " + std::to_string(options.world);
    return nullptr;
  }
  return connectOn(comm, options, transport, nullptr, error);
}

} // namespace tpcrt
