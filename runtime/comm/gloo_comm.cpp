// A tp group through Gloo: a full mesh of TCP pairs set up through a FileStore, and Gloo's
// collectives behind tpcrt::Communicator (the same-host transport where it can); and
// Comm::connect, which sends a job mpirun started to MPI (mpi_comm.cpp) instead.
#include "tpcrt/comm.h"

#include "mpi_comm.h"
#include "shm_comm.h"

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
#include <cstdio>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <fstream>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <vector>

namespace tpcrt {

namespace {

/// A rank with no peer: the tp group of one, or the per-rank view.
class LocalComm : public Comm {
public:
  explicit LocalComm(const CommOptions &options)
      : Comm(options), local(options.rank, options.world, memory, /*variableSizes=*/true) {}
  Communicator &communicator() override { return local; }
  void broadcast(void *, size_t, int) override {}
  void barrier() override {}

private:
  HostMemory memory;
  LocalCommunicator local;
};

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

/// A group connected through Gloo; its collectives go through shared memory instead where
/// every rank is on this machine (`same`).
class GlooComm : public Comm {
public:
  GlooComm(const CommOptions &options, std::shared_ptr<gloo::Context> context)
      : Comm(options), context(context), gloo(context) {}

  Communicator &communicator() override {
    return same ? static_cast<Communicator &>(*same) : gloo;
  }
  void useSameHost(std::unique_ptr<ShmCommunicator> shm) { same = std::move(shm); }

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

private:
  std::shared_ptr<gloo::Context> context;
  GlooCommunicator gloo;
  std::unique_ptr<ShmCommunicator> same;
};

// What a rank leaves in the rendezvous directory: its claim ("host pid", written when it
// joins) and, when it stops on an error, the reason.
std::string claimPath(const std::string &dir, int rank) {
  return dir + "/tpc.rank" + std::to_string(rank);
}
std::string exitPath(const std::string &dir, int rank) {
  return dir + "/tpc.exit" + std::to_string(rank);
}

std::string joinList(const std::vector<std::string> &items, const char *separator) {
  std::string out;
  for (const std::string &item : items)
    out += (out.empty() ? "" : separator) + item;
  return out;
}

} // namespace

namespace {

/// One look at the rendezvous directory for `rank`'s peers: those whose process on this
/// machine is gone, and those that left a reason for stopping.
void lookForPeers(const CommOptions &options, std::vector<std::string> &lost,
                  std::vector<std::string> &stopped) {
  const std::string &dir = options.rendezvousDir;
  std::string host = hostName();
  for (int r = 0; r < options.world; ++r) {
    if (r == options.rank)
      continue;
    std::string reason;
    if (std::ifstream in(exitPath(dir, r)); in && std::getline(in, reason)) {
      stopped.push_back("rank " + std::to_string(r) + " stopped: " + reason);
      continue;
    }
    std::ifstream claim(claimPath(dir, r));
    std::string peerHost;
    long pid = 0;
    if (claim >> peerHost >> pid && peerHost == host && processEnded(pid))
      lost.push_back("rank " + std::to_string(r) + " (process " + std::to_string(pid) +
                     " is gone)");
  }
}

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

/// TPC_TRANSPORT, or "auto"; "" for a value that is none of auto, shm, gloo and mpi.
std::string transportFromEnv() {
  const char *asked = std::getenv("TPC_TRANSPORT");
  std::string transport = asked && *asked ? asked : "auto";
  return transport == "auto" || transport == "shm" || transport == "gloo" || transport == "mpi"
             ? transport
             : "";
}

/// The collectives through shared memory where every rank is on this machine (TPC_TRANSPORT
/// auto, the default, or shm); Gloo's TCP otherwise (TPC_TRANSPORT=gloo). Rank 0 makes the
/// segment and tells the others its name; it is unlinked once all have mapped it, so nothing
/// outlives the job. False, with `error`, where shm was asked for and cannot be had.
bool chooseTransport(GlooComm &comm, const CommOptions &options, std::string &error) {
  std::string transport = transportFromEnv();
  if (transport == "gloo")
    return true;
  if (!allOnThisHost(options)) {
    if (transport == "shm")
      error = "TPC_TRANSPORT=shm needs every rank on one machine, and the ranks of " +
              options.rendezvousDir + " are not";
    return transport == "auto";
  }
  CommOptions peers = options;
  auto gone = [peers] {
    std::vector<std::string> lost, stopped;
    lookForPeers(peers, lost, stopped);
    return joinList(lost.empty() ? stopped : lost, ", ");
  };
  // Rank 0 makes and sizes the segment before the others learn its name ("" where it could
  // not).
  char name[64] = {};
  std::string why;
  std::unique_ptr<ShmCommunicator> shm;
  if (options.rank == 0) {
    std::snprintf(name, sizeof name, "/tpc-%ld-%lx", long(::getpid()),
                  (unsigned long)std::chrono::steady_clock::now().time_since_epoch().count());
    shm = ShmCommunicator::open(name, 0, options.world, options.timeoutSeconds, gone, why);
    if (!shm)
      name[0] = '\0';
  }
  comm.broadcast(name, sizeof name, 0);
  if (options.rank != 0 && name[0])
    shm = ShmCommunicator::open(name, options.rank, options.world, options.timeoutSeconds,
                                gone, why);
  else if (options.rank != 0)
    why = "rank 0 could not make the shared-memory segment";
  // Whether every rank has it: the group uses it only if all do.
  float failed = shm ? 0.0f : 1.0f;
  comm.communicator().allReduce(&failed, 1);
  if (options.rank == 0 && name[0])
    ::shm_unlink(name);
  if (failed > 0) {
    if (transport == "shm")
      error = shm ? "another rank could not map the shared-memory segment" : why;
    return transport == "auto";
  }
  comm.useSameHost(std::move(shm));
  return true;
}

} // namespace

std::string hostName() {
  char name[256] = {};
  ::gethostname(name, sizeof name - 1);
  return name;
}

bool processEnded(long pid) {
  if (pid <= 0)
    return false;
  if (::kill(pid_t(pid), 0) != 0 && errno == ESRCH)
    return true;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string text;
  std::getline(stat, text);
  size_t paren = text.rfind(')');
  return paren != std::string::npos && paren + 2 < text.size() &&
         (text[paren + 2] == 'Z' || text[paren + 2] == 'X');
}

std::string rendezvousDirFromEnv() {
  if (const char *dir = std::getenv("TPC_RENDEZVOUS_DIR"); dir && *dir)
    return dir;
  if (const char *run = std::getenv("TORCHELASTIC_RUN_ID"); run && *run) {
    const char *root = std::getenv("TPC_RENDEZVOUS_ROOT");
    std::string dir = std::string(root && *root ? root : "/tmp") + "/tpc-rendezvous-" + run;
    // torchrun's default run id is "none" for every job; its ranks share the agent process
    // as their parent, which tells one job from the next on this machine.
    if (std::string(run) == "none")
      dir += "-" + std::to_string(getppid());
    return dir;
  }
  return "";
}

std::unique_ptr<Comm> Comm::noop(int world) {
  CommOptions options;
  options.world = world;
  return std::make_unique<LocalComm>(options);
}

std::unique_ptr<Comm> Comm::connect(const CommOptions &options, std::string &error) {
  // The transport is checked before joining, so that no peer waits on this rank.
  std::string transport = transportFromEnv();
  bool mpirun = startedByMpirun();
  if (transport.empty()) {
    error = std::string("TPC_TRANSPORT must be auto, shm, gloo or mpi, not '") +
            std::getenv("TPC_TRANSPORT") + "'";
    return nullptr;
  }
  if (transport == "mpi" && !mpirun) {
    error = "TPC_TRANSPORT=mpi needs a job started by mpirun (OMPI_COMM_WORLD_SIZE is not "
            "set); tpc launch and torchrun jobs use auto, shm or gloo";
    return nullptr;
  }
  if (transport == "gloo" && mpirun) {
    error = "TPC_TRANSPORT=gloo needs a rendezvous directory (tpc launch, torchrun); under "
            "mpirun the ranks meet through MPI: use auto, shm or mpi";
    return nullptr;
  }
  if (options.world == 1)
    return std::make_unique<LocalComm>(options);
  if (mpirun)
    return connectMpi(options, transport, error);
  if (options.rendezvousDir.empty()) {
    error = "no rendezvous directory: set TPC_RENDEZVOUS_DIR (tpc launch does) or run under "
            "torchrun (TORCHELASTIC_RUN_ID)";
    return nullptr;
  }
  const std::string &dir = options.rendezvousDir;
  ::mkdir(dir.c_str(), 0700);
  if (::access((dir + "/tpc.retired").c_str(), F_OK) == 0) {
    error = "rendezvous directory " + dir + " is stale: an earlier job finished there; use a "
            "fresh directory";
    return nullptr;
  }
  // Each rank claims its place once; a claim already there is an earlier job's.
  std::string claim = dir + "/tpc.rank" + std::to_string(options.rank);
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
    if (!chooseTransport(*comm, options, error))
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

void Comm::retire() {
  if (options.world > 1 && options.rank == 0) {
    int fd = ::open((options.rendezvousDir + "/tpc.retired").c_str(), O_CREAT | O_WRONLY, 0600);
    if (fd >= 0)
      ::close(fd);
  }
}

void Comm::recordExit(const std::string &reason) const {
  if (options.world < 2 || options.rendezvousDir.empty())
    return;
  std::ofstream(exitPath(options.rendezvousDir, options.rank)) << reason << "\n";
}

std::string Comm::lostPeers() const {
  if (options.world < 2 || options.rendezvousDir.empty())
    return "";
  std::vector<std::string> lost, stopped;
  // A killed peer's sockets close a moment before its process is reaped: look for a second.
  for (int attempt = 0; attempt < 20 && lost.empty() && stopped.empty(); ++attempt) {
    if (attempt)
      ::usleep(50000);
    lookForPeers(options, lost, stopped);
  }
  if (!lost.empty())
    return "lost " + joinList(lost, ", ");
  if (!stopped.empty())
    return joinList(stopped, "; ");
  if (options.world == 2)
    return "lost rank " + std::to_string(1 - options.rank) + " (it stopped answering)";
  return "";
}

} // namespace tpcrt
