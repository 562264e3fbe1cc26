// The main of every emitted binary: the request (request.cpp), the rendezvous, the weights
// (this rank's slices, or generated from a seed), the generation (generate.cpp), then the
// files it writes (--dump-logits, --trace) and a barrier, so that the ranks leave together.
#include "driver.h"

#include <cblas.h>
#include <nlohmann/json.hpp>

#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <optional>

namespace tpcrt {

namespace {

/// Where rank `rank` writes its trace: FILE with %r replaced by the rank, or FILE.rankR
/// when several ranks share it.
std::string tracePath(const std::string &file, int rank, int world) {
  std::string path = file;
  if (size_t at = path.find("%r"); at != std::string::npos)
    return path.replace(at, 2, std::to_string(rank));
  return world > 1 ? path + ".rank" + std::to_string(rank) : path;
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

} // namespace

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
  int rank = request->rank, world = request->world;
  const Fault &fault = request->fault;
  std::string error;

  // The per-rank view: rank 0 of the compiled tp group, alone, with a communicator that moves
  // nothing, to time one rank's compute (the GPU benchmark models the collectives apart).
  const char *viewEnv = std::getenv("TPC_SINGLE_RANK_VIEW");
  bool view = viewEnv && std::string(viewEnv) == "1";
  if (view) {
    if (world != 1) {
      std::fprintf(stderr, "error: TPC_SINGLE_RANK_VIEW=1 runs one rank alone; WORLD_SIZE is %d\n",
                   world);
      return 1;
    }
    world = int(spec.tp);
    std::printf("per-rank view: rank 0 of tp %d alone, with a no-op communicator (compute "
                "only; the collectives run nowhere, their kinds and bytes go to --trace)\n",
                world);
  }
  if (world != spec.tp) {
    std::fprintf(stderr,
                 "error: %s was compiled for tp %lld, but WORLD_SIZE is %d; compile it again "
                 "with --tp %d or launch %lld ranks\n",
                 spec.name, (long long)spec.tp, world, world, (long long)spec.tp);
    return 1;
  }
  // One BLAS thread per rank unless asked otherwise: ranks share the machine's cores.
  if (!std::getenv("OPENBLAS_NUM_THREADS"))
    openblas_set_num_threads(1);

  if (fault.rank == rank && fault.kind == Fault::NoStart) {
    std::fprintf(stderr, "TPC_FAULT: rank %d exits before the rendezvous\n", rank);
    return 0;
  }
  // A write to a peer that died raises SIGPIPE, which would end this rank without a word;
  // ignored, the write fails and Gloo reports it as a failed collective.
  std::signal(SIGPIPE, SIG_IGN);
  CommOptions options{rank, world, rendezvousDirFromEnv(), args.host, args.timeoutSeconds};
  std::unique_ptr<Comm> comm = view ? Comm::noop(world) : Comm::connect(options, error);
  if (!comm) {
    std::fprintf(stderr, "error: rank %d: %s\n", rank, error.c_str());
    return 1;
  }
  // From here on the peers are connected: a rank that stops says why where they can read it.
  auto stop = [&](const std::string &message) {
    std::fprintf(stderr, "error: rank %d: %s\n", rank, message.c_str());
    comm->recordExit(message);
    return 1;
  };

  Context cx;
  cx.rank = rank;
  cx.tp = world;
  cx.maxTokens = args.maxSeqLen;
  cx.timeoutSeconds = args.timeoutSeconds;
  cx.localRank = request->localRank;
  cx.comm = comm.get();
  uint64_t weightBytes = 0;
  std::unique_ptr<Checkpoint> checkpoint;
  if (!args.weights.empty() && !(checkpoint = Checkpoint::open(args.weights, error)))
    return stop(error);
  // What is being allocated, for the error when memory runs out.
  std::string allocating;
  std::vector<std::vector<float>> cacheStorage;
  std::vector<float> arena;
  try {
    for (const ParamDesc &param : spec.params) {
      SliceSpec slice = param.slice;
      if (slice.dim >= 0)
        slice.piece = rank * slice.chunks / world;
      std::vector<int64_t> local = slice.localShape(param.hfShape);
      allocating = std::string("parameter ") + param.name;
      size_t elements = 1;
      for (int64_t d : local)
        elements = elementCount({int64_t(elements), d});
      cx.slices.push_back(slice);
      if (!checkpoint && spec.prepare) { // the device generates them where they will live
        cx.randomSeed = args.randomSeed;
        cx.weights.emplace_back();
        weightBytes += uint64_t(elements) * 4;
        continue;
      }
      std::vector<float> &w = cx.weights.emplace_back(elements);
      if (checkpoint) {
        uint64_t bytes = 0;
        if (!checkpoint->read(param.name, param.hfShape, slice, w.data(), bytes, error,
                              param.sources))
          return stop(error);
        weightBytes += bytes;
      } else {
        generateSlice(*args.randomSeed, param.name, param.hfShape, slice, w.data());
        weightBytes += uint64_t(elements) * 4;
      }
    }
    allocating = "the KV cache for --max-seq-len " + std::to_string(args.maxSeqLen);
    for (int64_t width : spec.prepare ? std::vector<int64_t>{} : spec.kvWidths) {
      cacheStorage.emplace_back(elementCount({2, width, args.maxSeqLen}));
      float *base = cacheStorage.back().data();
      cx.caches.push_back({base, base + width * args.maxSeqLen, args.maxSeqLen, width, 0});
    }
    allocating = "the activations for --max-seq-len " + std::to_string(args.maxSeqLen);
    if (!spec.prepare)
      arena.resize(elementCount({spec.floatsPerToken, args.maxSeqLen}));
  } catch (const std::bad_alloc &) {
    return stop("out of memory allocating " + allocating);
  } catch (const std::length_error &) {
    return stop("cannot allocate " + allocating + ": its size overflows");
  }
  cx.arena = arena.data();
  if (spec.prepare) {
    try {
      spec.prepare(cx, spec);
    } catch (const std::exception &e) {
      return stop(e.what());
    }
  }

  Generator generator(spec, cx, fault);
  try {
    if (args.warmup && args.maxNewTokens > 0)
      generator.warmUp(args.prompt);
    std::vector<int64_t> tokens = generator.generate(args);
    if (rank == 0)
      printReport(args, tokens, generator.timings());
  } catch (const std::exception &e) {
    return stop(describeFailure(e, world > 1 && !view, comm->lostPeers(), spec.name,
                                generator.phase()));
  }

  int exitCode = 0;
  if (!args.dumpLogits.empty() && rank == 0) {
    std::ofstream out(args.dumpLogits, std::ios::binary);
    out.write(reinterpret_cast<const char *>(generator.logits().data()),
              std::streamsize(generator.logits().size() * sizeof(float)));
    if (!out) {
      std::fprintf(stderr, "error: cannot write %s\n", args.dumpLogits.c_str());
      exitCode = 1;
    }
  }
  if (!args.trace.empty()) {
    nlohmann::ordered_json j;
    j["model"] = spec.name;
    j["rank"] = rank;
    j["world"] = world;
    j["weight_bytes_loaded"] = weightBytes;
    j["collectives"] = nlohmann::ordered_json::array();
    for (const TraceEntry &e : cx.trace)
      j["collectives"].push_back(
          {{"kind", e.kind}, {"module", e.module}, {"tokens", e.tokens}, {"bytes", e.bytes}});
    std::ofstream out(tracePath(args.trace, rank, world));
    out << j.dump(1) << "\n";
    if (!out) {
      std::fprintf(stderr, "error: cannot write the trace %s\n", args.trace.c_str());
      exitCode = 1;
    }
  }
  // Leave together: no rank closes its connections while a peer is still using them.
  try {
    comm->barrier();
  } catch (const std::exception &e) {
    std::string lost = comm->lostPeers();
    return stop((lost.empty() ? "a peer stopped" : lost) + " before the end: " + e.what());
  }
  comm->retire();
  return exitCode;
}

} // namespace tpcrt
