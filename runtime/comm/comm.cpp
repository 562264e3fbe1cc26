// Comm's transport-neutral half (tpcrt/comm.h): choosing the transport and connecting
// through it (Gloo's rendezvous, gloo_comm.cpp, or mpirun's, mpi_comm.cpp), the rank alone,
// what ranks leave in the rendezvous directory and read there when a peer is lost, and the
// same-host transport every connected group may switch to.
#include "group.h"

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <fcntl.h>
#include <fstream>
#include <sys/mman.h>
#include <unistd.h>

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
  /// Itself again: a rank alone is its own part, and the per-rank view (several ranks' group
  /// stood for by one) runs one pipeline stage, whose group is the whole.
  std::unique_ptr<Comm> split(int, int, std::string &) override {
    return std::make_unique<LocalComm>(options);
  }

private:
  HostMemory memory;
  LocalCommunicator local;
};

/// TPC_TRANSPORT, or "auto"; "" for a value that is none of auto, shm, gloo and mpi.
std::string transportFromEnv() {
  const char *asked = std::getenv("TPC_TRANSPORT");
  std::string transport = asked && *asked ? asked : "auto";
  return transport == "auto" || transport == "shm" || transport == "gloo" || transport == "mpi"
             ? transport
             : "";
}

} // namespace

std::string joinList(const std::vector<std::string> &items, const char *separator) {
  std::string out;
  for (const std::string &item : items)
    out += (out.empty() ? "" : separator) + item;
  return out;
}

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
  // torchrun gives MASTER_ADDR: its ranks meet at rank 0's store, on one machine or several.
  if (const char *master = std::getenv("MASTER_ADDR"); master && *master)
    return "";
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

bool storeFromEnv(CommOptions &options, std::string &error) {
  const char *master = std::getenv("MASTER_ADDR");
  if (!master || !*master)
    return true;
  auto port = [&](const char *name, int &out) {
    const char *text = std::getenv(name);
    char *end = nullptr;
    long value = text && *text ? std::strtol(text, &end, 10) : -1;
    if (!text || !*text || *end != '\0' || value < 1 || value > 65535) {
      error = std::string(name) + " must be a port, 1 to 65535, not '" + (text ? text : "") +
              "'";
      return false;
    }
    out = int(value);
    return true;
  };
  options.storeHost = master;
  if (const char *run = std::getenv("TORCHELASTIC_RUN_ID"); run && *run)
    options.runId = run;
  else if (const char *own = std::getenv("TPC_RUN_ID"); own && *own)
    options.runId = own;
  if (const char *own = std::getenv("TPC_STORE_PORT"); own && *own)
    return port("TPC_STORE_PORT", options.storePort);
  if (!port("MASTER_PORT", options.storePort))
    return false;
  // torchrun's agent serves its own store on MASTER_PORT; tpc's is the next port, or, with
  // every rank on this machine, a socket that no other program can hold: the agent's port
  // tells this job from any other running here.
  if (const char *agent = std::getenv("TORCHELASTIC_USE_AGENT_STORE");
      agent && std::string(agent) == "True") {
    const char *world = std::getenv("WORLD_SIZE"), *local = std::getenv("LOCAL_WORLD_SIZE");
    if (world && local && *world && std::string(world) == local) {
      // A socket name has room for 107 bytes; a longer run id goes by its hash.
      char hashed[32];
      std::snprintf(hashed, sizeof hashed, "%016zx", std::hash<std::string>{}(options.runId));
      options.storeSocket = "tpc-store-" +
                            (options.runId.size() <= 64 ? options.runId : std::string(hashed)) +
                            "-" + std::to_string(options.storePort);
      return true;
    }
    if (options.storePort == 65535) {
      error = "MASTER_PORT is 65535 under torchrun's agent store, which leaves tpc's store "
              "(the next port) none: set TPC_STORE_PORT";
      return false;
    }
    ++options.storePort;
  }
  return true;
}

bool startedByMpirun() {
  const char *size = std::getenv("OMPI_COMM_WORLD_SIZE");
  const char *rank = std::getenv("OMPI_COMM_WORLD_RANK");
  return size && *size && rank && *rank;
}

std::unique_ptr<Comm> groupOfOne(const CommOptions &options) {
  return std::make_unique<LocalComm>(options);
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
  if (options.rendezvousDir.empty() && options.storeHost.empty()) {
    error = "no rendezvous: set MASTER_ADDR and MASTER_PORT (rank 0's store; tpc launch "
            "--nnodes and torchrun do) or TPC_RENDEZVOUS_DIR (tpc launch on one machine)";
    return nullptr;
  }
  return connectGloo(options, transport, error);
}

void Comm::retire() {}

void Comm::recordExit(const std::string &) const {}

std::string Comm::lostPeers() const {
  if (options.world == 2)
    return "lost rank " + std::to_string(1 - options.rank) + " (it stopped answering)";
  return "";
}

bool ConnectedGroup::shareMemory(const std::string &transport, bool allHere,
                                 const std::string &elsewhere, const char *prefix,
                                 ShmCommunicator::PeerCheck peerGone, std::string &error) {
  if (!allHere) {
    if (transport == "shm")
      error = "TPC_TRANSPORT=shm needs every rank on one machine, and " + elsewhere;
    return transport == "auto";
  }
  // Rank 0 makes and sizes the segment before the others learn its name ("" where it could
  // not).
  char name[64] = {};
  std::string why;
  std::unique_ptr<ShmCommunicator> segment;
  if (rank() == 0) {
    std::snprintf(name, sizeof name, "/%s-%ld-%lx", prefix, long(::getpid()),
                  (unsigned long)std::chrono::steady_clock::now().time_since_epoch().count());
    segment = ShmCommunicator::open(name, 0, world(), options.timeoutSeconds, peerGone, why);
    if (!segment)
      name[0] = '\0';
  }
  broadcast(name, sizeof name, 0);
  if (rank() != 0 && name[0])
    segment = ShmCommunicator::open(name, rank(), world(), options.timeoutSeconds, peerGone, why);
  else if (rank() != 0)
    why = "rank 0 could not make the shared-memory segment";
  // Whether every rank has it: the group uses it only if all do (through its own
  // collectives, the shared memory not being in use yet).
  float failed = segment ? 0.0f : 1.0f;
  own().allReduce(&failed, 1);
  if (rank() == 0 && name[0]) // every rank has mapped it, or given up
    ::shm_unlink(name);
  if (failed > 0) {
    if (transport == "shm")
      error = segment ? "another rank could not map the shared-memory segment" : why;
    return transport == "auto";
  }
  shm = segment.get();
  chosen = std::move(segment);
  return true;
}

} // namespace tpcrt
