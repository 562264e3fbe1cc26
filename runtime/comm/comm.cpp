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

bool startedByMpirun() {
  const char *size = std::getenv("OMPI_COMM_WORLD_SIZE");
  const char *rank = std::getenv("OMPI_COMM_WORLD_RANK");
  return size && *size && rank && *rank;
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
  return connectGloo(options, transport, error);
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
  std::unique_ptr<ShmCommunicator> shm;
  if (rank() == 0) {
    std::snprintf(name, sizeof name, "/%s-%ld-%lx", prefix, long(::getpid()),
                  (unsigned long)std::chrono::steady_clock::now().time_since_epoch().count());
    shm = ShmCommunicator::open(name, 0, world(), options.timeoutSeconds, peerGone, why);
    if (!shm)
      name[0] = '\0';
  }
  broadcast(name, sizeof name, 0);
  if (rank() != 0 && name[0])
    shm = ShmCommunicator::open(name, rank(), world(), options.timeoutSeconds, peerGone, why);
  else if (rank() != 0)
    why = "rank 0 could not make the shared-memory segment";
  // Whether every rank has it: the group uses it only if all do (through its own
  // collectives, the shared memory not being in use yet).
  float failed = shm ? 0.0f : 1.0f;
  own().allReduce(&failed, 1);
  if (rank() == 0 && name[0]) // every rank has mapped it, or given up
    ::shm_unlink(name);
  if (failed > 0) {
    if (transport == "shm")
      error = shm ? "another rank could not map the shared-memory segment" : why;
    return transport == "auto";
  }
  same = std::move(shm);
  return true;
}

} // namespace tpcrt
