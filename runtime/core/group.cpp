// Joining the tp group (core.h's Group): this rank's place, the per-rank view, the world size
// checked against the compiled tp, and the communicator; and how a rank that stops leaves its
// reason where the peers read it.
#include "core.h"

#include <csignal>
#include <cstdio>
#include <cstdlib>

namespace tpcrt {

std::optional<Group> connectGroup(const ModelSpec &spec, const Request &request, int &status) {
  Group group;
  group.rank = request.rank;
  group.world = request.world;
  group.localRank = request.localRank;
  // The per-rank view: rank 0 of the compiled tp group, alone, with a communicator that moves
  // nothing, to time one rank's compute (the GPU benchmark models the collectives apart).
  const char *viewEnv = std::getenv("TPC_SINGLE_RANK_VIEW");
  group.view = viewEnv && std::string(viewEnv) == "1";
  if (group.view) {
    if (group.world != 1) {
      std::fprintf(stderr, "error: TPC_SINGLE_RANK_VIEW=1 runs one rank alone; WORLD_SIZE is %d\n",
                   group.world);
      status = 1;
      return std::nullopt;
    }
    group.world = int(spec.tp);
    std::printf("per-rank view: rank 0 of tp %d alone, with a no-op communicator (compute "
                "only; the collectives run nowhere, their kinds and bytes go to --trace)\n",
                group.world);
  }
  if (group.view && spec.stages > 1) {
    std::fprintf(stderr, "error: TPC_SINGLE_RANK_VIEW=1 runs one rank alone, and %s has %lld "
                         "pipeline stages, which pass activations between ranks\n",
                 spec.name, (long long)spec.stages);
    status = 1;
    return std::nullopt;
  }
  if (spec.stages > 1 && group.world != spec.tp * spec.stages) {
    std::fprintf(stderr,
                 "error: %s was compiled for pp %lld x tp %lld (%lld ranks), but %s is %d; "
                 "compile it again with --pp and --tp whose product is %d, or launch %lld "
                 "ranks\n",
                 spec.name, (long long)spec.stages, (long long)spec.tp,
                 (long long)(spec.stages * spec.tp), request.worldFrom, group.world, group.world,
                 (long long)(spec.stages * spec.tp));
    status = 1;
    return std::nullopt;
  }
  if (spec.stages == 1 && group.world != spec.tp) {
    std::fprintf(stderr,
                 "error: %s was compiled for tp %lld, but %s is %d; compile it again "
                 "with --tp %d or launch %lld ranks\n",
                 spec.name, (long long)spec.tp, request.worldFrom, group.world, group.world,
                 (long long)spec.tp);
    status = 1;
    return std::nullopt;
  }
  if (request.fault.rank == group.rank && request.fault.kind == Fault::NoStart) {
    std::fprintf(stderr, "TPC_FAULT: rank %d exits before the rendezvous\n", group.rank);
    status = 0;
    return std::nullopt;
  }
  // A write to a peer that died raises SIGPIPE, which would end this rank without a word;
  // ignored, the write fails and Gloo reports it as a failed collective.
  std::signal(SIGPIPE, SIG_IGN);
  const Args &args = request.args;
  CommOptions options;
  options.rank = group.rank;
  options.world = group.world;
  options.rendezvousDir = rendezvousDirFromEnv();
  options.host = args.host;
  options.timeoutSeconds = args.timeoutSeconds;
  std::string error;
  if (!group.view && options.rendezvousDir.empty() && !storeFromEnv(options, error)) {
    std::fprintf(stderr, "error: rank %d: %s\n", group.rank, error.c_str());
    status = 1;
    return std::nullopt;
  }
  group.comm = group.view ? Comm::noop(group.world) : Comm::connect(options, error);
  if (!group.comm) {
    std::fprintf(stderr, "error: rank %d: %s\n", group.rank, error.c_str());
    status = 1;
    return std::nullopt;
  }
  // Stage-major ranks: stage k's tp group is ranks k * tp to k * tp + tp - 1.
  group.stages = int(spec.stages);
  if (group.stages > 1) {
    int tp = int(spec.tp);
    group.stage = group.rank / tp;
    group.stageComm = group.comm->split(group.stage, group.rank % tp, error);
    if (!group.stageComm) {
      std::fprintf(stderr, "error: rank %d: the tp group of pipeline stage %d: %s\n",
                   group.rank, group.stage, error.c_str());
      status = 1;
      return std::nullopt;
    }
  }
  return group;
}

int Group::stop(const std::string &message) const {
  std::fprintf(stderr, "error: rank %d: %s\n", rank, message.c_str());
  comm->recordExit(message);
  return 1;
}

} // namespace tpcrt
