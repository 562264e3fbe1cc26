// The main of every emitted binary, runModel, and the steps it reads as a list of: the request
// (core/request.cpp), joining the tp group (core/group.cpp), this rank's weights loaded into
// the backend, the generation (core/generate.cpp, or the server: serve/), the files it writes
// (--dump-logits, --trace), and leaving together. Whatever the backend: it owns the buffers,
// this only says what they hold. The top of the runtime's layers: nothing includes it.
#include "../core/core.h"
#include "../serve/server.h"
#include "progress.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <stdexcept>

#include <unistd.h>

namespace tpcrt {

namespace {

/// The product of `factors` as an element count; throws std::length_error when it overflows
/// (a --max-model-len of 2^62, say), which the caller reports like a failed allocation.
size_t elementCount(std::initializer_list<int64_t> factors) {
  uint64_t n = 1;
  for (int64_t f : factors)
    if (f < 0 || __builtin_mul_overflow(n, uint64_t(f), &n) || n > uint64_t(PTRDIFF_MAX) / 4)
      throw std::length_error("too many elements");
  return size_t(n);
}

/// What --trace reports of the memory a run holds.
struct Footprint {
  uint64_t weightBytes = 0; // as loaded (or generated)
  uint64_t arenaBytes = 0;  // the backend's activation arena
  uint64_t kvCacheBytes = 0; // the backend's KV cache, every layer's blocks
  uint64_t heldBytes = 0;   // the weights as the backend holds them, padding included
  std::map<std::string, int> held; // parameters held in each type ("bf16": 211)
};

/// Whether the backend can be given every weight in the type it holds it in: as the file
/// stores it, or made from fp32 values (a checkpoint of another type, or --random-weights).
/// Asked before anything is allocated; says which weight it cannot in `error`.
bool takesEveryWeight(const ModelSpec &spec, const std::vector<WeightDesc> &weights,
                      const Checkpoint *checkpoint, const BackendCapabilities &can,
                      std::string &error) {
  for (const WeightDesc &weight : weights) {
    if (weight.elements() == 0) // another stage's
      continue;
    const ParamDesc &param = spec.params[weight.param];
    const TensorInfo *stored = checkpoint ? checkpoint->find(param.name) : nullptr;
    bool asStored = stored && parseDType(stored->dtype) == weight.dtype;
    if (can.takes(weight.dtype, asStored))
      continue;
    std::string makes;
    for (DType type : can.blocksFromFloats)
      makes += (makes.empty() ? "" : " and ") + std::string(dtypeName(type));
    error = std::string("parameter ") + param.name + ": held as " + dtypeName(weight.dtype) +
            ", blocks that only a file storing them gives (" +
            (stored ? "the checkpoint stores " + stored->dtype : std::string("--random-weights")) +
            "); this backend quantizes fp32 values to " + (makes.empty() ? "no type" : makes) +
            " only";
    return false;
  }
  return true;
}

/// Loads this rank's weights into `backend` (its slices of the checkpoint, or generated from
/// --random-weights), one tensor at a time: straight into the backend's host memory where
/// it has some, else through one staging buffer the size of the largest tensor, never a copy
/// of the whole slice; then has it make its KV caches and activation arena, and start. On
/// failure says why in `error`. Rank 0 shows the load in `shown` mode (progress.h).
bool loadWeights(const ModelSpec &spec, const Args &args, const RankInfo &rank,
                 Backend &backend, Footprint &footprint, ProgressMode shown,
                 std::string &error) {
  std::unique_ptr<Checkpoint> checkpoint;
  if (!args.weights.empty() && !(checkpoint = Checkpoint::open(args.weights, error)))
    return false;
  // What is being allocated, for the error when memory runs out.
  std::string allocating;
  try {
    std::vector<WeightDesc> weights;
    std::vector<SliceSpec> slices;
    uint64_t total = 0;
    for (size_t i = 0; i < spec.params.size(); ++i) {
      const ParamDesc &param = spec.params[i];
      if (!param.slice.ranks.empty() && param.slice.ranks.size() != 2 * size_t(rank.tp)) {
        error = std::string("parameter ") + param.name + " is split for " +
                std::to_string(param.slice.ranks.size() / 2) + " ranks, not " +
                std::to_string(rank.tp);
        return false;
      }
      SliceSpec slice = param.slice.forRank(rank.rank, rank.tp);
      WeightDesc weight{i, slice.localShape(param.hfShape), param.dtype};
      // Another stage's: held there, nothing here.
      if (!spec.holds(i, rank.stage)) {
        weight.shape = {0};
        weights.push_back(std::move(weight));
        slices.push_back(slice);
        continue;
      }
      size_t elements = 1;
      for (int64_t d : weight.shape)
        elements = elementCount({int64_t(elements), d});
      weight.dtype = backend.weightType(weight);
      total += weight.bytes();
      ++footprint.held[dtypeName(weight.dtype)];
      if (!checkpoint) // generated: what the rank holds (a checkpoint counts what it read)
        footprint.weightBytes += dtypeBytesFor(weight.dtype, slice.heldElements(param.hfShape));
      weights.push_back(std::move(weight));
      slices.push_back(slice);
    }
    footprint.heldBytes = total;
    if (!takesEveryWeight(spec, weights, checkpoint.get(), backend.capabilities(), error))
      return false;
    allocating = "the weights (" + std::to_string(total) + " bytes)";
    backend.allocateWeights(weights);
    std::vector<float> staging;
    LoadProgress progress(rank.worldRank() == 0 ? shown : ProgressMode::Never, total);
    for (size_t i = 0; i < spec.params.size(); ++i) {
      const ParamDesc &param = spec.params[i];
      if (!spec.holds(i, rank.stage))
        continue;
      // Counted when the tensor is in, whichever way it comes.
      struct Loaded {
        LoadProgress &progress;
        uint64_t bytes;
        ~Loaded() { progress.advance(bytes); }
      } loaded{progress, weights[i].bytes()};
      if (!checkpoint && backend.generateWeight(i, *args.randomSeed, param, slices[i]))
        continue;
      int64_t elements = weights[i].elements();
      // Held in the blocks the file stores it in: read as they are. (Blocks of another type,
      // --quantize's, are made from fp32 values below.)
      const TensorInfo *stored = checkpoint ? checkpoint->find(param.name) : nullptr;
      if (void *blocks = backend.hostBlocks(i);
          blocks && stored && parseDType(stored->dtype) == weights[i].dtype) {
        uint64_t bytes = 0;
        if (!checkpoint->readBlocks(param.name, param.hfShape, slices[i], weights[i].dtype,
                                    blocks, bytes, error))
          return false;
        footprint.weightBytes += bytes;
        continue;
      }
      float *out = backend.hostWeight(i);
      bool staged = !out;
      if (staged) {
        allocating = "the staging buffer of " + std::string(param.name);
        staging.resize(size_t(elements));
        out = staging.data();
      }
      if (checkpoint) {
        uint64_t bytes = 0;
        if (!checkpoint->read(param.name, param.hfShape, slices[i], out, bytes, error,
                              param.sources))
          return false;
        footprint.weightBytes += bytes;
      } else {
        generateSlice(*args.randomSeed, param.name, param.hfShape, slices[i], out);
      }
      if (staged) {
        try {
          backend.writeWeight(i, 0, out, elements);
        } catch (const std::invalid_argument &e) { // a type it cannot be narrowed to
          error = std::string("parameter ") + param.name + ": " + e.what();
          return false;
        }
      }
    }
    staging = {};
    // As many blocks as the engine will use, each layer its KV group's.
    EngineLimits limits = engineLimits(spec, args);
    allocating = "the KV cache of --kv-cache-tokens " + std::to_string(args.kvCacheTokens);
    std::vector<KVCacheDesc> layers;
    for (size_t i = 0; i < spec.kvWidths.size(); ++i) {
      if (i < spec.kvStages.size() && spec.kvStages[i] != rank.stage)
        continue; // another stage's layer
      int64_t group = limits.groups.layerGroup[i];
      int64_t blocks = group == 0 ? limits.blocks : limits.windowBlocks[size_t(group - 1)];
      elementCount({spec.kvWidths[i] + spec.kvValueWidths[i], blocks, spec.kvBlockSize});
      layers.push_back({spec.kvWidths[i], spec.kvValueWidths[i], blocks, group,
                        limits.groups.reaches[size_t(group)]});
    }
    footprint.kvCacheBytes = backend.allocateCaches(layers, spec.kvBlockSize);
    // A forward's tokens: a prompt whole (one prompt), or a step's (--max-batch-tokens).
    int64_t tokens = std::max(args.maxSeqLen, args.maxBatchTokens);
    allocating = "the activations for " + std::to_string(tokens) + " tokens";
    elementCount({spec.floatsPerToken, tokens});
    footprint.arenaBytes = backend.allocateArena(spec.floatsPerToken, tokens);
    backend.start();
    progress.finish(); // the caches and the arena made too: ready
  } catch (const std::bad_alloc &) {
    error = "out of memory allocating " + allocating;
    return false;
  } catch (const std::length_error &) {
    error = "cannot allocate " + allocating + ": its size overflows";
    return false;
  } catch (const std::exception &e) { // the backend's own (a device's)
    error = e.what();
    return false;
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
/// of its activation arena and KV cache, as JSON that tests compare with what `tpc analyze` predicts.
bool writeTrace(const ModelSpec &spec, const std::string &file, const Group &group,
                const Footprint &footprint, const std::vector<TraceEntry> &trace) {
  nlohmann::ordered_json j;
  j["model"] = spec.name;
  j["rank"] = group.rank;
  j["world"] = group.world;
  if (group.stages > 1) {
    int tp = group.world / group.stages;
    j["stage"] = group.stage;
    j["stages"] = group.stages;
    j["tp_rank"] = group.rank % tp;
    j["tp"] = tp;
  }
  j["weight_bytes_loaded"] = footprint.weightBytes;
  j["weight_bytes_held"] = footprint.heldBytes;
  j["arena_bytes"] = footprint.arenaBytes;
  j["kv_cache_bytes"] = footprint.kvCacheBytes;
  j["collectives"] = nlohmann::ordered_json::array();
  for (const TraceEntry &e : trace)
    j["collectives"].push_back(
        {{"kind", e.kind}, {"module", e.module}, {"tokens", e.tokens}, {"bytes", e.bytes},
         {"path", e.path}});
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

int runModel(const ModelSpec &spec, Backend &backend, int argc, char **argv) {
  int status = 0;
  std::optional<Request> request = readRequest(spec, argc, argv, status);
  if (!request)
    return status;
  const Args &args = request->args;
  const char *progressError = nullptr;
  ProgressMode progress =
      progressMode(std::getenv("TPC_PROGRESS"), isatty(STDERR_FILENO), progressError);
  if (progressError) {
    std::fprintf(stderr, "error: %s\n", progressError);
    return 2;
  }
  // A server answers (503) while the group meets and loads.
  std::unique_ptr<serve::Server> server;
  if (!args.serve.empty() && request->rank == 0) {
    std::string error;
    if (!(server = serve::Server::start(spec, args, error))) {
      std::fprintf(stderr, "error: %s\n", error.c_str());
      return 1;
    }
  }
  std::optional<Group> group = connectGroup(spec, *request, status);
  if (!group)
    return status;
  // From here on the peers are connected: a rank that stops says why where they can read it.
  std::vector<TraceEntry> trace; // the collectives run, as each communicator recorded them
  RankInfo rank;
  rank.stage = group->stage;
  rank.stages = group->stages;
  rank.tp = group->world / group->stages;
  rank.rank = group->rank % rank.tp;
  rank.localRank = group->localRank;
  rank.maxTokens = std::max(args.maxSeqLen, args.maxBatchTokens);
  rank.timeoutSeconds = args.timeoutSeconds;
  rank.comm = &group->tpGroup();
  if (group->stages > 1)
    rank.world = group->comm.get();
  rank.trace = &trace;
  rank.variableGathers = spec.variableGathers;
  // The group's host collectives are recorded whatever the backend (a device may move its
  // own through them, TPC_CUDA_COMM=gloo's).
  group->comm->communicator().traceInto(&trace);
  if (group->stageComm)
    group->stageComm->communicator().traceInto(&trace);
  Footprint footprint;
  std::string error;
  try {
    backend.attach(rank);
  } catch (const std::exception &e) {
    return group->stop(e.what());
  }
  if (std::optional<DType> type = request->args.kvCacheType) {
    std::vector<DType> types = backend.capabilities().kvCacheTypes;
    if (std::find(types.begin(), types.end(), *type) == types.end())
      return group->stop(std::string("--kv-cache-dtype ") + dtypeName(*type) +
                         ": this target keeps its KV cache in its activation type " +
                         "(bf16 on the GPU); the CPU target takes f32, bf16, f16 or q8_0");
    // A block type holds a token's keys (and values) in whole blocks.
    for (size_t i = 0; i < spec.kvWidths.size(); ++i)
      for (int64_t width : {spec.kvWidths[i], spec.kvValueWidths[i]})
        if (width % dtypeBlockElements(*type) != 0)
          return group->stop(std::string("--kv-cache-dtype ") + dtypeName(*type) +
                             " holds a token's keys and values in blocks of " +
                             std::to_string(dtypeBlockElements(*type)) + "; attention layer " +
                             std::to_string(i) + "'s are " + std::to_string(width) +
                             " wide on this rank");
    backend.setKvCacheType(*type);
  }
  if (request->args.int8Activations) {
    if (!backend.capabilities().int8Activations)
      return group->stop("--int8-activations: this target's matrix products have no int8 "
                         "path; the CPU target's do");
    backend.setInt8Activations(true);
  }
  if (std::string why = sizeKvCache(spec, backend.kvCacheType(), request->args); !why.empty())
    return group->stop(why);
  if (!loadWeights(spec, args, rank, backend, footprint, progress, error))
    return group->stop(error);
  if (args.verbose && group->rank == 0) {
    std::string types;
    for (const auto &[type, count] : footprint.held)
      types += (types.empty() ? "" : ", ") + type + " " + std::to_string(count);
    if (std::string how = backend.describe(); !how.empty())
      std::fprintf(stderr, "tpc: %s\n", how.c_str());
    std::fprintf(stderr, "tpc: weights held as %s (parameters per type); %.1f MB on rank 0\n",
                 types.c_str(), double(footprint.heldBytes) / 1e6);
  }

  Generator generator(spec, backend, rank, request->fault);
  try {
    if (args.warmup && args.params.maxTokens > 0)
      generator.warmUp(args);
    if (!args.serve.empty()) {
      int status = server ? server->run(args, backend, rank, *group, request->fault)
                          : serve::follow(spec, args, backend, rank, *group, request->fault);
      if (status != 0)
        return status; // stopped, saying why
    } else if (!args.requestsFile.empty()) {
      if (int status = runRequests(spec, args, backend, rank, *group, request->fault);
          status != 0)
        return status; // rank 0 stopped, saying why
    } else if (request->tokenizer) { // text out, rank 0's as it comes, stop strings withheld
      GeneratedText text(*request->tokenizer, args.params.stop, false,
                         args.params.sampling.minTokens);
      auto print = [](const std::string &piece) {
        std::fwrite(piece.data(), 1, piece.size(), stdout);
        std::fflush(stdout);
      };
      std::vector<int64_t> tokens = generator.generate(args, [&](int64_t id) {
        print(text.push(id));
        return text.stopped();
      });
      if (group->rank == 0) {
        print(text.finish());
        printTextSummary(args, tokens, generator.timings());
      }
    } else {
      std::vector<int64_t> tokens = generator.generate(args);
      if (group->rank == 0)
        printReport(args, tokens, generator.timings());
    }
  } catch (const RequestError &e) {
    // The prompt failed alone (its logits not finite) after every rank ran its steps to the
    // engine's end: rank 0 says why, as at tp 1, and leaves with its peers, which blame none.
    std::fprintf(stderr, "error: rank %d: %s\n", group->rank,
                 describeFailure(e, group->peers(), "", spec.name, generator.phase()).c_str());
    return leave(*group, 1);
  } catch (const std::exception &e) {
    return group->stop(describeFailure(e, group->peers(), group->comm->lostPeers(), spec.name,
                                       generator.phase()));
  }

  if (args.verbose && group->rank == 0)
    if (std::string chose = backend.describeChoices(); !chose.empty())
      std::fprintf(stderr, "tpc: kernels chosen by timing: %s\n", chose.c_str());
  int exitCode = 0;
  if (!args.dumpLogits.empty() && group->rank == 0 &&
      !writeLogits(args.dumpLogits, generator.logits()))
    exitCode = 1;
  if (!args.trace.empty() && !writeTrace(spec, args.trace, *group, footprint, trace))
    exitCode = 1;
  return leave(*group, exitCode);
}

} // namespace tpcrt
