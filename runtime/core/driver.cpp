// The main of every emitted binary, runModel, and the steps it reads as a list of: the request
// (request.cpp), joining the tp group, this rank's weights, the generation (generate.cpp),
// the files it writes (--dump-logits, --trace), and leaving together.
#include "driver.h"

#include <cblas.h>
#include <nlohmann/json.hpp>

#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <stdexcept>

namespace tpcrt {

namespace {

/// Joins the tp group of `request`'s rank, or says why not: empty, with the exit status in
/// `status` (0 for TPC_FAULT=nostart's rank).
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
  if (group.world != spec.tp) {
    std::fprintf(stderr,
                 "error: %s was compiled for tp %lld, but %s is %d; compile it again "
                 "with --tp %d or launch %lld ranks\n",
                 spec.name, (long long)spec.tp, request.worldFrom, group.world, group.world,
                 (long long)spec.tp);
    status = 1;
    return std::nullopt;
  }
  // One BLAS thread per rank unless asked otherwise: ranks share the machine's cores.
  if (!std::getenv("OPENBLAS_NUM_THREADS"))
    openblas_set_num_threads(1);

  if (request.fault.rank == group.rank && request.fault.kind == Fault::NoStart) {
    std::fprintf(stderr, "TPC_FAULT: rank %d exits before the rendezvous\n", group.rank);
    status = 0;
    return std::nullopt;
  }
  // A write to a peer that died raises SIGPIPE, which would end this rank without a word;
  // ignored, the write fails and Gloo reports it as a failed collective.
  std::signal(SIGPIPE, SIG_IGN);
  const Args &args = request.args;
  CommOptions options{group.rank, group.world, rendezvousDirFromEnv(), args.host,
                      args.timeoutSeconds};
  std::string error;
  group.comm = group.view ? Comm::noop(group.world) : Comm::connect(options, error);
  if (!group.comm) {
    std::fprintf(stderr, "error: rank %d: %s\n", group.rank, error.c_str());
    status = 1;
    return std::nullopt;
  }
  return group;
}

/// The product of `factors` as an element count; throws std::length_error when it overflows
/// (a --max-seq-len of 2^62, say), which the caller reports like a failed allocation.
size_t elementCount(std::initializer_list<int64_t> factors) {
  uint64_t n = 1;
  for (int64_t f : factors)
    if (f < 0 || __builtin_mul_overflow(n, uint64_t(f), &n) || n > uint64_t(PTRDIFF_MAX) / 4)
      throw std::length_error("too many elements");
  return size_t(n);
}

/// What the Context's pointers lead into, held for the run.
struct Storage {
  uint64_t weightBytes = 0; // as loaded (or generated), for --trace
  std::vector<std::vector<float>> caches;
  std::vector<float> arena;
};

/// Fills `cx` with this rank's weights (its slices of the checkpoint, or generated from
/// --random-weights), its KV caches and its activation arena, held in `memory`, then hands
/// them to the backend (spec.prepare). On failure says why in `error`.
bool loadWeights(const ModelSpec &spec, const Args &args, Context &cx, Storage &memory,
                 std::string &error) {
  std::unique_ptr<Checkpoint> checkpoint;
  if (!args.weights.empty() && !(checkpoint = Checkpoint::open(args.weights, error)))
    return false;
  // What is being allocated, for the error when memory runs out.
  std::string allocating;
  try {
    std::vector<size_t> counts;
    for (const ParamDesc &param : spec.params) {
      if (!param.slice.ranks.empty() && param.slice.ranks.size() != 2 * size_t(cx.tp)) {
        error = std::string("parameter ") + param.name + " is split for " +
                std::to_string(param.slice.ranks.size() / 2) + " ranks, not " +
                std::to_string(cx.tp);
        return false;
      }
      SliceSpec slice = param.slice.forRank(cx.rank, cx.tp);
      size_t elements = 1;
      for (int64_t d : slice.localShape(param.hfShape))
        elements = elementCount({int64_t(elements), d});
      cx.slices.push_back(slice);
      // A device that generates its random weights where they will live needs no host copy.
      bool onDevice = !checkpoint && spec.prepare;
      counts.push_back(onDevice ? 0 : elements);
      if (!checkpoint) // generated: what the rank holds (a checkpoint counts what it read)
        memory.weightBytes += uint64_t(slice.heldElements(param.hfShape)) * 4;
    }
    if (!checkpoint && spec.prepare)
      cx.randomSeed = args.randomSeed;
    size_t total = 0;
    for (size_t count : counts)
      total += count;
    allocating = "the weights (" + std::to_string(total * 4) + " bytes)";
    cx.weights.allocate(counts);
    for (size_t i = 0; i < spec.params.size(); ++i) {
      const ParamDesc &param = spec.params[i];
      if (!counts[i])
        continue;
      if (checkpoint) {
        uint64_t bytes = 0;
        if (!checkpoint->read(param.name, param.hfShape, cx.slices[i], cx.weights.data(i), bytes,
                              error, param.sources))
          return false;
        memory.weightBytes += bytes;
      } else {
        generateSlice(*args.randomSeed, param.name, param.hfShape, cx.slices[i],
                      cx.weights.data(i));
      }
    }
    allocating = "the KV cache for --max-seq-len " + std::to_string(args.maxSeqLen);
    for (size_t i = 0; !spec.prepare && i < spec.kvWidths.size(); ++i) {
      int64_t width = spec.kvWidths[i], valueWidth = spec.kvValueWidths[i];
      memory.caches.emplace_back(elementCount({width + valueWidth, args.maxSeqLen}));
      float *base = memory.caches.back().data();
      cx.caches.push_back({base, base + width * args.maxSeqLen, args.maxSeqLen, width, 0});
    }
    allocating = "the activations for --max-seq-len " + std::to_string(args.maxSeqLen);
    if (!spec.prepare)
      memory.arena.resize(elementCount({spec.floatsPerToken, args.maxSeqLen}));
  } catch (const std::bad_alloc &) {
    error = "out of memory allocating " + allocating;
    return false;
  } catch (const std::length_error &) {
    error = "cannot allocate " + allocating + ": its size overflows";
    return false;
  }
  cx.arena = memory.arena.data();
  if (!spec.prepare)
    cx.arenaBytes = uint64_t(memory.arena.size()) * sizeof(float);
  if (spec.prepare) {
    try {
      spec.prepare(cx, spec);
    } catch (const std::exception &e) {
      error = e.what();
      return false;
    }
  }
  return true;
}

/// --dump-logits: the logits as raw float32, one row of the vocabulary per counted forward.
bool writeLogits(const std::string &file, const std::vector<float> &logits) {
  std::ofstream out(file, std::ios::binary);
  out.write(reinterpret_cast<const char *>(logits.data()),
            std::streamsize(logits.size() * sizeof(float)));
  if (!out) {
    std::fprintf(stderr, "error: cannot write %s\n", file.c_str());
    return false;
  }
  return true;
}

/// Where rank `rank` writes its trace: FILE with %r replaced by the rank, or FILE.rankR
/// when several ranks share it.
std::string tracePath(const std::string &file, int rank, int world) {
  std::string path = file;
  if (size_t at = path.find("%r"); at != std::string::npos)
    return path.replace(at, 2, std::to_string(rank));
  return world > 1 ? path + ".rank" + std::to_string(rank) : path;
}

/// --trace: this rank's collectives as executed, the weight bytes it loaded and the bytes
/// of its activation arena, as JSON that tests compare with what `tpc analyze` predicts.
bool writeTrace(const ModelSpec &spec, const std::string &file, const Group &group,
                uint64_t weightBytes, const Context &cx) {
  nlohmann::ordered_json j;
  j["model"] = spec.name;
  j["rank"] = group.rank;
  j["world"] = group.world;
  j["weight_bytes_loaded"] = weightBytes;
  j["arena_bytes"] = cx.arenaBytes;
  j["collectives"] = nlohmann::ordered_json::array();
  for (const TraceEntry &e : cx.trace)
    j["collectives"].push_back(
        {{"kind", e.kind}, {"module", e.module}, {"tokens", e.tokens}, {"bytes", e.bytes}});
  std::ofstream out(tracePath(file, group.rank, group.world));
  out << j.dump(1) << "\n";
  if (!out) {
    std::fprintf(stderr, "error: cannot write the trace %s\n", file.c_str());
    return false;
  }
  return true;
}

/// Leaves together: no rank closes its connections while a peer is still using them.
/// Returns `exitCode`, or 1 when a peer is gone by then.
int leave(const Group &group, int exitCode) {
  try {
    group.comm->barrier();
  } catch (const std::exception &e) {
    std::string lost = group.comm->lostPeers();
    return group.stop((lost.empty() ? "a peer stopped" : lost) + " before the end: " + e.what());
  }
  group.comm->retire();
  return exitCode;
}

} // namespace

int Group::stop(const std::string &message) const {
  std::fprintf(stderr, "error: rank %d: %s\n", rank, message.c_str());
  comm->recordExit(message);
  return 1;
}

std::string describeFailure(const std::exception &e, bool peers, const std::string &lost,
                            const std::string &model, const std::string &phase) {
  if (dynamic_cast<const DeviceError *>(&e) || !peers)
    return std::string(e.what()) + " (while running " + model + ", " + phase + ")";
  return (lost.empty() ? "a peer stopped answering" : lost) + "; a collective of " + phase +
         " failed: " + e.what();
}

int runModel(const ModelSpec &spec, int argc, char **argv) {
  int status = 0;
  std::optional<Request> request = readRequest(spec, argc, argv, status);
  if (!request)
    return status;
  const Args &args = request->args;
  std::optional<Group> group = connectGroup(spec, *request, status);
  if (!group)
    return status;
  // From here on the peers are connected: a rank that stops says why where they can read it.
  Context cx;
  cx.rank = group->rank;
  cx.tp = group->world;
  cx.localRank = group->localRank;
  cx.maxTokens = args.maxSeqLen;
  cx.timeoutSeconds = args.timeoutSeconds;
  cx.attach(*group->comm);
  Storage memory;
  std::string error;
  if (!loadWeights(spec, args, cx, memory, error))
    return group->stop(error);

  Generator generator(spec, cx, request->fault);
  try {
    if (args.warmup && args.maxNewTokens > 0)
      generator.warmUp(args.prompt);
    if (request->tokenizer) { // text out, rank 0's as it comes
      Tokenizer::Stream text = request->tokenizer->stream(/*skipSpecial=*/true);
      auto print = [&](int64_t id) {
        if (group->rank != 0)
          return;
        std::string piece = text.push(id);
        std::fwrite(piece.data(), 1, piece.size(), stdout);
        std::fflush(stdout);
      };
      std::vector<int64_t> tokens = generator.generate(args, print);
      if (group->rank == 0) {
        std::string rest = text.finish();
        std::fwrite(rest.data(), 1, rest.size(), stdout);
        std::fflush(stdout);
        printTextSummary(args, tokens, generator.timings());
      }
    } else {
      std::vector<int64_t> tokens = generator.generate(args);
      if (group->rank == 0)
        printReport(args, tokens, generator.timings());
    }
  } catch (const std::exception &e) {
    return group->stop(describeFailure(e, group->peers(), group->comm->lostPeers(), spec.name,
                                       generator.phase()));
  }

  int exitCode = 0;
  if (!args.dumpLogits.empty() && group->rank == 0 &&
      !writeLogits(args.dumpLogits, generator.logits()))
    exitCode = 1;
  if (!args.trace.empty() && !writeTrace(spec, args.trace, *group, memory.weightBytes, cx))
    exitCode = 1;
  return leave(*group, exitCode);
}

} // namespace tpcrt
