// A tp group through Gloo: a full mesh of TCP pairs set up through a FileStore in the
// rendezvous directory, and Gloo's collectives behind tpcrt::Communicator (the same-host
// transport where it can).
#include "group.h"

#include <gloo/allgather.h>
#include <gloo/allgatherv.h>
#include <gloo/allreduce.h>
#include <gloo/broadcast.h>
#include <gloo/alltoall.h>
#include <gloo/barrier.h>
#include <gloo/reduce_scatter.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/transport/tcp/device.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <fcntl.h>
#include <fstream>
#include <sys/stat.h>
#include <unistd.h>
#include <vector>

namespace tpcrt {

namespace {

/// Gloo's collectives on fp32 host buffers: its allreduce, allgather and alltoall, and the
/// halving-doubling reduce-scatter of its older algorithm classes.
class GlooCommunicator : public Communicator {
public:
  GlooCommunicator(std::shared_ptr<gloo::Context> context)
      : Communicator(context->rank, context->size, sizeof(float)), context(std::move(context)) {}

protected:
  void runAllReduce(void *data, size_t count) override {
    gloo::AllreduceOptions opts(context);
    opts.setOutput(static_cast<float *>(data), count);
    opts.setReduceFunction(
        static_cast<void (*)(void *, const void *, const void *, size_t)>(&gloo::sum<float>));
    gloo::allreduce(opts);
  }

  void runAllGather(const void *in, size_t count, void *out) override {
    gloo::AllgatherOptions opts(context);
    opts.setInput(const_cast<float *>(static_cast<const float *>(in)), count);
    opts.setOutput(static_cast<float *>(out), count * world);
    gloo::allgather(opts);
  }

  bool gathersVariableSizes() const override { return true; }
  void runAllGatherV(const void *in, const std::vector<size_t> &counts, void *out) override {
    gloo::AllgathervOptions opts(context);
    opts.setInput(const_cast<float *>(static_cast<const float *>(in)), counts[size_t(rank)]);
    opts.setOutput(static_cast<float *>(out), counts);
    gloo::allgatherv(opts);
  }

  void runReduceScatter(const void *in, size_t count, void *out) override {
    ReduceScatter &rs = reduceScatterOf(count);
    std::memcpy(rs.data.data(), in, rs.data.size() * sizeof(float));
    rs.algorithm->run();
    std::memcpy(out, rs.data.data(), count * sizeof(float)); // this rank's sum comes first
  }

  void runAllToAll(const void *in, size_t count, void *out) override {
    gloo::AlltoallOptions opts(context);
    opts.setInput(const_cast<float *>(static_cast<const float *>(in)), count * world);
    opts.setOutput(static_cast<float *>(out), count * world);
    gloo::alltoall(opts);
  }

private:
  /// Gloo's reduce-scatter is an algorithm object bound to one buffer when it is made (its
  /// peers' buffers are registered then): one per part size, reused, the latest few kept.
  struct ReduceScatter {
    size_t count = 0;
    std::vector<float> data;
    std::unique_ptr<gloo::ReduceScatterHalvingDoubling<float>> algorithm;
  };
  static constexpr size_t kKeptReduceScatters = 4;

  ReduceScatter &reduceScatterOf(size_t count) {
    for (ReduceScatter &rs : reduceScatters)
      if (rs.count == count)
        return rs;
    // Every rank makes them in the same order (the same program, the same shapes), which
    // is what pairs their slots.
    if (reduceScatters.size() == kKeptReduceScatters)
      reduceScatters.erase(reduceScatters.begin());
    ReduceScatter &rs = reduceScatters.emplace_back();
    rs.count = count;
    rs.data.resize(count * world);
    rs.algorithm = std::make_unique<gloo::ReduceScatterHalvingDoubling<float>>(
        context, std::vector<float *>{rs.data.data()}, int(rs.data.size()),
        std::vector<int>(size_t(world), int(count)));
    return rs;
  }

  std::shared_ptr<gloo::Context> context;
  std::vector<ReduceScatter> reduceScatters;
};

/// A group connected through Gloo.
class GlooComm : public ConnectedGroup {
public:
  GlooComm(const CommOptions &options, std::shared_ptr<gloo::Context> context)
      : ConnectedGroup(options), context(context), gloo(context) {}

  void broadcast(void *data, size_t bytes, int root) override {
    gloo::BroadcastOptions opts(context);
    opts.setOutput(static_cast<uint8_t *>(data), bytes);
    opts.setRoot(root);
    gloo::broadcast(opts);
  }

  void barrier() override {
    gloo::BarrierOptions opts(context);
    gloo::barrier(opts);
  }

protected:
  Communicator &own() override { return gloo; }

private:
  std::shared_ptr<gloo::Context> context;
  GlooCommunicator gloo;
};

/// Whether every rank claimed its place from this machine.
bool allOnThisHost(const CommOptions &options) {
  std::string host = hostName();
  for (int r = 0; r < options.world; ++r) {
    std::ifstream claim(claimPath(options.rendezvousDir, r));
    std::string peerHost;
    if (!(claim >> peerHost) || peerHost != host)
      return false;
  }
  return true;
}

/// The collectives through shared memory where every rank is on this machine (TPC_TRANSPORT
/// auto, the default, or shm); Gloo's TCP otherwise (TPC_TRANSPORT=gloo). False, with
/// `error`, where shm was asked for and cannot be had.
bool chooseTransport(GlooComm &comm, const CommOptions &options, const std::string &transport,
                     std::string &error) {
  if (transport == "gloo")
    return true;
  CommOptions peers = options;
  auto gone = [peers] {
    std::vector<std::string> lost, stopped;
    lookForPeers(peers, lost, stopped);
    return joinList(lost.empty() ? stopped : lost, ", ");
  };
  return comm.shareMemory(transport, allOnThisHost(options),
                          "the ranks of " + options.rendezvousDir + " are not", "tpc", gone,
                          error);
}

} // namespace

std::unique_ptr<Comm> connectGloo(const CommOptions &options, const std::string &transport,
                                  std::string &error) {
  const std::string &dir = options.rendezvousDir;
  ::mkdir(dir.c_str(), 0700);
  if (::access((dir + "/tpc.retired").c_str(), F_OK) == 0) {
    error = "rendezvous directory " + dir + " is stale: an earlier job finished there; use a "
            "fresh directory";
    return nullptr;
  }
  // Each rank claims its place once; a claim already there is an earlier job's.
  std::string claim = claimPath(dir, options.rank);
  int fd = ::open(claim.c_str(), O_CREAT | O_EXCL | O_WRONLY, 0600);
  if (fd < 0) {
    error = errno == EEXIST ? "rendezvous directory " + dir + " is stale: rank " +
                                  std::to_string(options.rank) +
                                  " of an earlier job joined it; use a fresh directory"
                            : "cannot use rendezvous directory " + dir + ": " +
                                  std::strerror(errno);
    return nullptr;
  }
  // Who joined, and where: a peer that later vanishes can be named, and checked for.
  std::string who = hostName() + " " + std::to_string(long(::getpid())) + "\n";
  bool written = ::write(fd, who.data(), who.size()) == ssize_t(who.size());
  ::close(fd);
  if (!written) {
    error = "cannot write to rendezvous directory " + dir + ": " + std::strerror(errno);
    return nullptr;
  }
  try {
    gloo::transport::tcp::attr attr;
    attr.hostname = options.host;
    auto device = gloo::transport::tcp::CreateDevice(attr);
    gloo::rendezvous::FileStore store(dir);
    auto context = std::make_shared<gloo::rendezvous::Context>(options.rank, options.world);
    context->setTimeout(std::chrono::seconds(options.timeoutSeconds));
    context->connectFullMesh(store, device);
    auto comm = std::make_unique<GlooComm>(options, context);
    // A rank that returned from connecting could otherwise exit (on a bad checkpoint, say)
    // while a peer is still finishing the handshake, and the peer would report a confusing
    // connection error rather than the failure that follows.
    comm->barrier();
    // Every rank decides the same: chooseTransport's own collectives keep them together.
    if (!chooseTransport(*comm, options, transport, error))
      return nullptr;
    return comm;
  } catch (const std::exception &e) {
    // Gloo says which store key it waited for; the claims say which rank that is.
    std::vector<std::string> absent;
    for (int r = 0; r < options.world; ++r)
      if (::access(claimPath(dir, r).c_str(), F_OK) != 0)
        absent.push_back(std::to_string(r));
    if (!absent.empty())
      error = "the rendezvous in " + dir + " timed out after " +
              std::to_string(options.timeoutSeconds) + " s: rank" +
              (absent.size() > 1 ? "s " : " ") + joinList(absent, ", ") +
              " never joined (not started, or given another rendezvous directory)";
    else
      error = std::string("could not connect the ranks: ") + e.what();
    return nullptr;
  }
}

} // namespace tpcrt
