// The CUDA backend's device: weights, arena, KV caches, cuBLASLt and the communicator.
// Collectives: NCCL on the device's stream (so a captured decode step holds them), polled by a
// watchdog that aborts the communicator when a peer stops answering; device copies for a rank
// alone (tp 1, the per-rank view); under TPC_CUDA_COMM=gloo, the CPU Context's own
// implementation on fp32 host copies.
#include "tpcrt/cuda/device.h"

#include "state.h"

#include "../weights/slices.h"
#include "tpcrt/random_weight.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

namespace tpcrt::cuda {

namespace {
/// CUDA's reason for `e`. A kernel's fault (a bad address, a trap) is sticky and surfaces at
/// whichever call comes next, which is then not the culprit: say so, and how to find it.
std::string cudaReason(cudaError_t e) {
  std::string reason = cudaGetErrorString(e);
  switch (e) {
  case cudaErrorIllegalAddress:
  case cudaErrorLaunchFailure:
  case cudaErrorIllegalInstruction:
  case cudaErrorMisalignedAddress:
  case cudaErrorInvalidPc:
  case cudaErrorHardwareStackError:
  case cudaErrorAssert:
    return reason + " (a kernel's fault, reported by the next call; CUDA_LAUNCH_BLOCKING=1 "
                    "reports it at the kernel's launch)";
  default:
    return reason;
  }
}

/// A write through a null pointer: TPC_FAULT=device's illegal memory access.
__global__ void faultKernel(int *nowhere) { *nowhere = 1; }

/// Generated weights, on the device: element e of the local tensor lies in run r (offsets
/// sorted), at HF index first[r] + (e - offset[r]) when under count[r], else it is padding.
__global__ void generateKernel(RandomWeightKey key, const int64_t *offset, const int64_t *first,
                               const int64_t *count, int64_t runs, int64_t elements, act *out) {
  int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (e >= elements)
    return;
  int64_t lo = 0, hi = runs - 1;
  while (lo < hi) { // the last run starting at or before e
    int64_t mid = (lo + hi + 1) / 2;
    if (offset[mid] <= e)
      lo = mid;
    else
      hi = mid - 1;
  }
  int64_t within = e - offset[lo];
  out[e] = __float2bfloat16(within < count[lo] ? randomWeightAt(key, uint64_t(first[lo] + within))
                                               : 0.0f);
}

/// This rank's slice of parameter `param`, generated from `seed` straight into `out`.
void generate(uint64_t seed, const ParamDesc &param, const SliceSpec &slice, act *out,
              int64_t elements) {
  std::vector<int64_t> offset, first, count;
  int64_t at = 0;
  forEachRun(param.hfShape, slice, [&](uint64_t from, int64_t n, int64_t padded) {
    offset.push_back(at);
    first.push_back(int64_t(from));
    count.push_back(n);
    at += padded;
  });
  if (elements == 0 || offset.empty())
    return;
  int64_t *table = nullptr, runs = int64_t(offset.size());
  check(cudaMalloc(&table, 3 * runs * sizeof(int64_t)), "cudaMalloc (weight runs)");
  std::vector<int64_t> all(offset);
  all.insert(all.end(), first.begin(), first.end());
  all.insert(all.end(), count.begin(), count.end());
  check(cudaMemcpy(table, all.data(), all.size() * sizeof(int64_t), cudaMemcpyHostToDevice),
        "cudaMemcpy (weight runs)");
  generateKernel<<<unsigned((elements + 255) / 256), 256>>>(randomWeightKey(seed, param.name),
                                                            table, table + runs,
                                                            table + 2 * runs, runs, elements,
                                                            out);
  check(cudaGetLastError(), "generating weights");
  check(cudaDeviceSynchronize(), "generating weights");
  cudaFree(table);
}
} // namespace

void check(cudaError_t e, const char *what) {
  if (e != cudaSuccess)
    throw DeviceError("CUDA", what, cudaReason(e));
}

void launched(const char *what) {
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess)
    throw DeviceError("CUDA", std::string("cudaGetLastError after launching ") + what,
                      cudaReason(e));
}

Device::Device(Context &host, const ModelSpec &spec, int64_t maxHeads, int64_t maxHeadDim,
               const std::vector<std::vector<int>> &weightGroups)
    : rank(host.rank), tp(host.tp), state(std::make_unique<State>()), host(host), spec(spec) {
  host.device = this;
  state->timeoutSeconds = host.timeoutSeconds;
  int count = 0;
  cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess || count == 0)
    throw std::runtime_error("no CUDA device is visible to this rank (" +
                             std::string(e == cudaSuccess ? "0 devices"
                                                          : cudaGetErrorString(e)) +
                             "); --target cuda binaries need one");
  check(cudaSetDevice(host.localRank % count), "cudaSetDevice");
  check(cudaStreamCreate(&state->stream), "cudaStreamCreate");
  if (cublasStatus_t s = cublasLtCreate(&state->lt); s != CUBLAS_STATUS_SUCCESS)
    throw DeviceError("cuBLASLt", "cublasLtCreate", cublasLtGetStatusString(s));
  state->workspaceBytes = 32 << 20;
  check(cudaMalloc(&state->workspace, state->workspaceBytes), "cudaMalloc (cuBLASLt workspace)");

  // Weights: parameters of a group share one allocation, one after the other (the emitted
  // code runs linears of one input as one GEMM over them); the others get their own.
  std::vector<int64_t> elements(spec.params.size());
  for (size_t i = 0; i < spec.params.size(); ++i) {
    if (host.randomSeed) {
      elements[i] = 1;
      for (int64_t d : host.slices[i].localShape(spec.params[i].hfShape))
        elements[i] *= d;
    } else {
      elements[i] = int64_t(host.weights[i].size());
    }
  }
  weights.assign(spec.params.size(), nullptr);
  auto allocate = [&](int64_t count) {
    act *d = nullptr;
    check(cudaMalloc(&d, std::max<int64_t>(1, count) * sizeof(act)), "cudaMalloc (weights)");
    allocations.push_back(d);
    return d;
  };
  for (const std::vector<int> &group : weightGroups) {
    int64_t total = 0;
    for (int i : group)
      total += elements.at(size_t(i));
    act *at = allocate(total);
    for (int i : group) {
      weights.at(size_t(i)) = at;
      at += elements[size_t(i)];
    }
  }
  for (size_t i = 0; i < weights.size(); ++i)
    if (!weights[i])
      weights[i] = allocate(elements[i]);
  for (size_t i = 0; i < spec.params.size(); ++i) {
    if (host.randomSeed) { // generated on the device, where they will live
      generate(*host.randomSeed, spec.params[i], host.slices[i], weights[i], elements[i]);
      continue;
    }
    // Loaded: fp32 as the loader read them, to bf16; the host copy goes.
    std::vector<float> &w = host.weights[i];
    std::vector<act> converted(w.size());
    for (size_t j = 0; j < w.size(); ++j)
      converted[j] = __float2bfloat16(w[j]);
    check(cudaMemcpy(weights[i], converted.data(), converted.size() * sizeof(act),
                     cudaMemcpyHostToDevice),
          "cudaMemcpy (weights)");
    std::vector<float>().swap(w);
  }
  int64_t tokens = host.maxTokens;
  check(cudaMalloc(&arena, std::max<int64_t>(1, spec.floatsPerToken * tokens) * sizeof(act)),
        "cudaMalloc (activations)");
  host.arenaBytes = uint64_t(spec.floatsPerToken * tokens) * sizeof(act);
  for (int64_t width : spec.kvWidths) {
    KVCache cache;
    cache.capacity = tokens;
    cache.width = width;
    check(cudaMalloc(&cache.keys, tokens * width * sizeof(act)), "cudaMalloc (KV cache)");
    check(cudaMalloc(&cache.values, tokens * width * sizeof(act)), "cudaMalloc (KV cache)");
    caches.push_back(cache);
  }
  check(cudaMalloc(&state->ids, tokens * sizeof(int64_t)), "cudaMalloc (ids)");
  check(cudaMalloc(&state->positions, tokens * sizeof(int64_t)), "cudaMalloc (positions)");
  check(cudaMalloc(&state->kvStart, sizeof(int64_t)), "cudaMalloc (KV length)");
  prepareAttention(*state, tokens, maxHeads, maxHeadDim);

  const char *mode = std::getenv("TPC_CUDA_COMM");
  const char *view = std::getenv("TPC_SINGLE_RANK_VIEW");
  // A rank alone (the per-rank view, or tp 1) moves nothing: its collectives are the device
  // copies below. Never the host path at tp 1, whose synchronous copies a graph cannot hold.
  state->noop = (view && std::string(view) == "1") || tp == 1;
  state->useNccl = tp > 1 && !state->noop && !(mode && std::string(mode) == "gloo");
  if (state->useNccl && host.localRank >= count)
    throw std::runtime_error("NCCL needs a GPU per rank: local rank " +
                             std::to_string(host.localRank) + " sees " + std::to_string(count) +
                             " GPU(s); TPC_CUDA_COMM=gloo lets ranks share one");
  if (state->useNccl) {
    ncclUniqueId id;
    if (rank == 0 && ncclGetUniqueId(&id) != ncclSuccess)
      throw std::runtime_error("ncclGetUniqueId failed");
    host.comm->broadcast(&id, sizeof(id), 0);
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0; // so the watchdog can abort a communicator stuck on a lost peer
    ncclResult_t r = ncclCommInitRankConfig(&state->nccl, tp, id, rank, &config);
    if (r != ncclSuccess && r != ncclInProgress)
      throw std::runtime_error(std::string("ncclCommInitRankConfig: ") + ncclGetErrorString(r));
    wait("ncclCommInitRankConfig");
  }
  // A graph replays device work only: collectives staged through the host cannot be in one.
  const char *graphs = std::getenv("TPC_CUDA_GRAPHS");
  state->graphsAllowed = (tp == 1 || state->useNccl || state->noop) &&
                         !(graphs && std::string(graphs) == "0");
}

namespace {
/// Destroys the captured decode graphs; a later decode step captures again (their eager runs
/// are kept). NCCL keeps a communicator alive while a graph that captured its collectives
/// exists (finalize, destroy and abort all wait for those graphs to die), so this comes
/// before any of them; and a graph holds the addresses its capture saw, so this comes before
/// any buffer it may use is freed (releaseForRegrowth).
void releaseGraphs(Device::State &state) {
  for (auto &[fn, graph] : state.graphs)
    if (graph.exec) {
      cudaGraphExecDestroy(graph.exec);
      graph.exec = nullptr;
    }
}
} // namespace

void releaseForRegrowth(Device::State &state, const char *what) {
  if (state.capturing) // the eager run before a capture sizes everything a capture needs
    throw std::runtime_error(std::string(what) + " grew during a CUDA graph capture");
  check(cudaStreamSynchronize(state.stream), "cudaStreamSynchronize (before regrowing a buffer)");
  releaseGraphs(state);
}

Device::~Device() {
  // Nothing here may throw: errors at the end are reported and the rank still exits. The
  // Context this Device was built from is gone by now (runModel has returned): only state
  // and members are used.
  releaseGraphs(*state);
  if (state->nccl) {
    ncclResult_t r = ncclCommFinalize(state->nccl);
    try {
      if (r != ncclSuccess && r != ncclInProgress)
        throw std::runtime_error(std::string("ncclCommFinalize: ") + ncclGetErrorString(r));
      wait("ncclCommFinalize");
    } catch (const std::exception &e) {
      std::fprintf(stderr, "warning: rank %d: %s\n", rank, e.what());
      if (state->nccl) { // finalizing failed: nothing more to flush
        ncclCommAbort(state->nccl);
        state->nccl = nullptr;
      }
    }
    if (state->nccl)
      ncclCommDestroy(state->nccl);
  }
  for (act *allocation : allocations)
    cudaFree(allocation);
  for (KVCache &cache : caches) {
    cudaFree(cache.keys);
    cudaFree(cache.values);
  }
  cudaFree(arena);
  cudaFree(state->scratch);
  cudaFree(state->scores);
  cudaFree(state->attentionPartials);
  cudaFree(state->attentionStats);
  cudaFree(state->ids);
  cudaFree(state->positions);
  cudaFree(state->kvStart);
  cudaFree(state->workspace);
  for (auto &[key, frequencies] : state->invFreqs)
    cudaFree(frequencies);
  cudaFreeHost(state->hostLogits);
  if (state->lt)
    cublasLtDestroy(state->lt);
  if (state->stream)
    cudaStreamDestroy(state->stream);
}

cudaStream_t Device::stream() const { return state->stream; }

void Device::launched(const char *what) const { cuda::launched(what); }

void Device::resetCaches() {
  for (KVCache &cache : caches)
    cache.length = 0; // run() sends the device its copy (State::kvStart) with each forward
}

void Device::injectFault() {
  faultKernel<<<1, 1, 0, state->stream>>>(nullptr);
  launched("the injected fault (TPC_FAULT=device)");
}

void Device::wait(const char *what, bool stream) {
  // The watchdog: poll the communicator's asynchronous error and the stream; a peer that
  // stops answering leaves both pending, so after the timeout the communicator is aborted.
  // It runs once per forward, at the one point the host waits for the device: collectives
  // themselves are only enqueued, so a decode step's kernels and NCCL calls stay back to back.
  // Only a communicator's peers can leave it waiting forever: a rank alone has no deadline
  // (a long forward at tp 1 is not a lost peer).
  PeerDeadline deadline(state->nccl != nullptr, state->timeoutSeconds);
  for (;;) {
    ncclResult_t async = ncclSuccess;
    if (state->nccl)
      ncclCommGetAsyncError(state->nccl, &async);
    if (async != ncclSuccess && async != ncclInProgress) {
      releaseGraphs(*state); // else the abort waits for them forever
      ncclCommAbort(state->nccl);
      state->nccl = nullptr;
      throw std::runtime_error(std::string(what) + ": " + ncclGetErrorString(async));
    }
    cudaError_t e = stream ? cudaStreamQuery(state->stream) : cudaSuccess;
    if (async == ncclSuccess && e == cudaSuccess)
      return;
    if (e != cudaSuccess && e != cudaErrorNotReady)
      throw DeviceError("CUDA", std::string("cudaStreamQuery (") + what + ")", cudaReason(e));
    if (deadline.passed()) {
      releaseGraphs(*state); // an in-flight one is freed once the abort lets it finish
      ncclCommAbort(state->nccl);
      state->nccl = nullptr;
      throw std::runtime_error(deadline.message(what));
    }
    std::this_thread::yield();
  }
}

void Device::record(const char *kind, const char *module, int64_t rows, uint64_t bytes) {
  host.record(kind, module, rows, bytes);
  if (state->capturing)
    state->capturing->records.push_back(host.trace.back());
}

const float *Device::run(const int64_t *ids, const int64_t *positions, int64_t tokens,
                         DeviceForwardFn fn) {
  // Every layer's cache holds the same tokens; the kernels read how many from the device.
  int64_t start = caches.empty() ? 0 : caches.front().length;
  if (!caches.empty() && start + tokens > caches.front().capacity)
    throw std::runtime_error("the KV cache holds " + std::to_string(caches.front().capacity) +
                             " tokens and this forward would need " +
                             std::to_string(start + tokens) + "; raise --max-seq-len");
  // The logits come back through pinned memory (a copy to pageable memory would wait for the
  // forward inside cudaMemcpyAsync, out of the watchdog's reach); grown here, while the stream
  // is idle.
  int64_t rows = spec.lastTokenOnly ? 1 : tokens;
  size_t count = size_t(rows * spec.vocab);
  if (count > state->hostLogitsCount) {
    cudaFreeHost(state->hostLogits);
    state->hostLogits = nullptr;
    state->hostLogitsCount = 0;
    check(cudaMallocHost(&state->hostLogits, count * sizeof(act)), "cudaMallocHost (logits)");
    state->hostLogitsCount = count;
  }
  check(cudaMemcpyAsync(state->ids, ids, tokens * sizeof(int64_t), cudaMemcpyHostToDevice,
                        state->stream),
        "cudaMemcpyAsync (ids)");
  check(cudaMemcpyAsync(state->positions, positions, tokens * sizeof(int64_t),
                        cudaMemcpyHostToDevice, state->stream),
        "cudaMemcpyAsync (positions)");
  check(cudaMemcpyAsync(state->kvStart, &start, sizeof(start), cudaMemcpyHostToDevice,
                        state->stream),
        "cudaMemcpyAsync (KV length)");
  const act *logits = nullptr;
  State::Graph *graph = tokens == 1 && state->graphsAllowed ? &state->graphs[fn] : nullptr;
  if (graph && !graph->exec && graph->eagerRuns > 0) {
    cudaGraph_t captured = nullptr;
    check(cudaStreamBeginCapture(state->stream, cudaStreamCaptureModeThreadLocal),
          "cudaStreamBeginCapture (the decode step)");
    state->capturing = graph;
    try {
      graph->logits = fn(*this, state->ids, state->positions, tokens);
    } catch (...) {
      state->capturing = nullptr;
      cudaStreamEndCapture(state->stream, &captured);
      throw;
    }
    state->capturing = nullptr;
    check(cudaStreamEndCapture(state->stream, &captured), "cudaStreamEndCapture (the decode step)");
    check(cudaGraphInstantiate(&graph->exec, captured, 0), "cudaGraphInstantiate (the decode step)");
    cudaGraphDestroy(captured);
    // The capture recorded its collectives once; the launch below records them again.
    host.trace.resize(host.trace.size() - graph->records.size());
  }
  if (graph && graph->exec) {
    check(cudaGraphLaunch(graph->exec, state->stream), "cudaGraphLaunch (the decode step)");
    for (const TraceEntry &entry : graph->records)
      host.trace.push_back(entry);
    logits = graph->logits;
  } else {
    logits = fn(*this, state->ids, state->positions, tokens);
    if (graph)
      ++graph->eagerRuns;
  }
  check(cudaMemcpyAsync(state->hostLogits, logits, count * sizeof(act), cudaMemcpyDeviceToHost,
                        state->stream),
        "cudaMemcpyAsync (logits)");
  wait("the forward");
  for (KVCache &cache : caches)
    cache.length += tokens;
  state->logits.resize(count);
  for (size_t i = 0; i < count; ++i)
    state->logits[i] = __bfloat162float(state->hostLogits[i]);
  return state->logits.data();
}

template <typename Fn>
void Device::onHost(const act *in, size_t inCount, act *out, size_t outCount, Fn fn) {
  std::vector<act> staged(inCount);
  check(cudaMemcpyAsync(staged.data(), in, inCount * sizeof(act), cudaMemcpyDeviceToHost,
                        state->stream),
        "cudaMemcpyAsync (to the host)");
  check(cudaStreamSynchronize(state->stream), "cudaStreamSynchronize");
  std::vector<float> a(inCount), b(outCount);
  for (size_t i = 0; i < inCount; ++i)
    a[i] = __bfloat162float(staged[i]);
  fn(a.data(), b.data());
  staged.resize(outCount);
  for (size_t i = 0; i < outCount; ++i)
    staged[i] = __float2bfloat16(b[i]);
  check(cudaMemcpyAsync(out, staged.data(), outCount * sizeof(act), cudaMemcpyHostToDevice,
                        state->stream),
        "cudaMemcpyAsync (to the device)");
  check(cudaStreamSynchronize(state->stream), "cudaStreamSynchronize");
}


// The collectives. With NCCL (or with no communicator at all, the per-rank view) they are
// stream operations, so the decode step's graph holds them; TPC_CUDA_COMM=gloo runs the CPU
// Context's own implementation on host copies. Placement arithmetic (which rank holds which
// piece of a strided feature dim, padding) is model.h's forEachPiece, as on the CPU.
namespace {
/// rows x count elements between row pitches (in elements), on the stream.
void copy2D(act *dst, int64_t dstPitch, const act *src, int64_t srcPitch, int64_t count,
            int64_t rows, cudaStream_t stream) {
  if (count == 0 || rows == 0)
    return;
  check(cudaMemcpy2DAsync(dst, dstPitch * sizeof(act), src, srcPitch * sizeof(act),
                          count * sizeof(act), rows, cudaMemcpyDeviceToDevice, stream),
        "cudaMemcpy2DAsync (a reshard)");
}
} // namespace

act *Device::scratch(size_t count) {
  if (count > state->scratchCount) {
    // A decode graph captured with the old buffer would write to freed memory.
    releaseForRegrowth(*state, "collective scratch");
    cudaFree(state->scratch);
    check(cudaMalloc(&state->scratch, count * sizeof(act)), "cudaMalloc (collective scratch)");
    state->scratchCount = count;
  }
  return state->scratch;
}

void Device::nccl(int result, const char *what) {
  auto started = ncclResult_t(result);
  if (started != ncclSuccess && started != ncclInProgress)
    throw std::runtime_error(std::string(what) + ": " + ncclGetErrorString(started));
  // A non-blocking communicator may still be enqueuing the call (ncclInProgress, e.g. while
  // it connects to its peers the first time): nothing else may use it until that is done.
  // This waits for the enqueue, not for the stream.
  if (started == ncclInProgress)
    wait(what, /*stream=*/false);
}

void Device::gather(const act *in, size_t count, act *out) {
  if (state->noop) { // every rank's piece is this rank's: the shapes, not the values, matter
    for (int r = 0; r < tp; ++r)
      check(cudaMemcpyAsync(out + r * count, in, count * sizeof(act), cudaMemcpyDeviceToDevice,
                            state->stream),
            "cudaMemcpyAsync");
    return;
  }
  nccl(ncclAllGather(in, out, count, ncclBfloat16, state->nccl, state->stream),
       "ncclAllGather");
}

void Device::allReduce(const act *in, int64_t rows, int64_t cols, act *out,
                       const char *module) {
  size_t n = size_t(rows * cols);
  if (!state->useNccl && !state->noop) {
    onHost(in, n, out, n,
           [&](const float *a, float *b) { host.allReduce(a, rows, cols, b, module); });
    return;
  }
  if (state->noop) { // the per-rank view: nothing travels
    if (out != in)
      check(cudaMemcpyAsync(out, in, n * sizeof(act), cudaMemcpyDeviceToDevice, state->stream),
            "cudaMemcpyAsync");
  } else {
    nccl(ncclAllReduce(in, out, n, ncclBfloat16, ncclSum, state->nccl, state->stream),
         "ncclAllReduce");
  }
  record("all_reduce", module, rows, uint64_t(n) * 4);
}

void Device::allGatherColumns(const act *in, int64_t rows, const std::vector<int64_t> &blocks,
                              act *out, const char *module) {
  int64_t local = localWidth(blocks, tp), global = globalWidth(blocks);
  if (!state->useNccl && !state->noop) {
    onHost(in, size_t(rows * local), out, size_t(rows * global),
           [&](const float *a, float *b) { host.allGatherColumns(a, rows, blocks, b, module); });
    return;
  }
  // Rank-major [tp][rows][local] from NCCL, then each rank's pieces to their columns.
  act *pieces = scratch(size_t(tp * rows * local));
  gather(in, size_t(rows * local), pieces);
  for (int r = 0; r < tp; ++r)
    forEachPiece(blocks, tp, r, [&](int64_t at, int64_t to, int64_t count, int64_t) {
      copy2D(out + to, global, pieces + r * rows * local + at, local, count, rows,
             state->stream);
    });
  record("all_gather", module, rows, uint64_t(rows * global) * 4);
}

void Device::allGatherRows(const act *in, int64_t rows, int64_t cols, act *out,
                           const char *module) {
  if (!state->useNccl && !state->noop) {
    onHost(in, size_t(rows * cols), out, size_t(rows * tp * cols),
           [&](const float *a, float *b) { host.allGatherRows(a, rows, cols, b, module); });
    return;
  }
  gather(in, size_t(rows * cols), out); // tokens split evenly: rank-major is row order
  record("all_gather", module, rows * tp, uint64_t(rows * tp * cols) * 4);
}

void Device::reduceScatterColumns(const act *in, int64_t rows,
                                  const std::vector<int64_t> &blocks, act *out,
                                  const char *module) {
  int64_t local = localWidth(blocks, tp), global = globalWidth(blocks);
  if (!state->useNccl && !state->noop) {
    onHost(in, size_t(rows * global), out, size_t(rows * local),
           [&](const float *a, float *b) {
             host.reduceScatterColumns(a, rows, blocks, b, module);
           });
    return;
  }
  // Each rank's pieces, padding zeroed, rank-major; NCCL sums rank r's part onto rank r.
  act *pieces = scratch(size_t(tp * rows * local));
  check(cudaMemsetAsync(pieces, 0, size_t(tp * rows * local) * sizeof(act), state->stream),
        "cudaMemsetAsync");
  for (int r = 0; r < tp; ++r)
    forEachPiece(blocks, tp, r, [&](int64_t at, int64_t from, int64_t count, int64_t) {
      copy2D(pieces + r * rows * local + at, local, in + from, global, count, rows,
             state->stream);
    });
  if (state->noop)
    check(cudaMemcpyAsync(out, pieces + rank * rows * local, size_t(rows * local) * sizeof(act),
                          cudaMemcpyDeviceToDevice, state->stream),
          "cudaMemcpyAsync");
  else
    nccl(ncclReduceScatter(pieces, out, size_t(rows * local), ncclBfloat16, ncclSum,
                           state->nccl, state->stream),
         "ncclReduceScatter");
  record("reduce_scatter", module, rows, uint64_t(rows * global) * 4);
}

void Device::reduceScatterRows(const act *in, int64_t rows, int64_t cols, act *out,
                               const char *module) {
  if (!state->useNccl && !state->noop) {
    onHost(in, size_t(rows * cols), out, size_t(rows / tp * cols),
           [&](const float *a, float *b) { host.reduceScatterRows(a, rows, cols, b, module); });
    return;
  }
  size_t mine = size_t(rows / tp * cols); // token splits happen only where tp divides
  if (state->noop)
    check(cudaMemcpyAsync(out, in + rank * mine, mine * sizeof(act), cudaMemcpyDeviceToDevice,
                          state->stream),
          "cudaMemcpyAsync");
  else
    nccl(ncclReduceScatter(in, out, mine, ncclBfloat16, ncclSum, state->nccl, state->stream),
         "ncclReduceScatter");
  record("reduce_scatter", module, rows, uint64_t(rows * cols) * 4);
}

void Device::allToAll(const act *in, int64_t tokens, const std::vector<int64_t> &blocks,
                      bool rowsToColumns, act *out, const char *module) {
  int64_t global = globalWidth(blocks), local = localWidth(blocks, tp), mine = tokens / tp;
  if (!state->useNccl && !state->noop) {
    size_t split = size_t(mine * global), joined = size_t(tokens * local);
    onHost(in, rowsToColumns ? split : joined, out, rowsToColumns ? joined : split,
           [&](const float *a, float *b) {
             host.allToAll(a, tokens, blocks, rowsToColumns, b, module);
           });
    return;
  }
  // As on the CPU: every rank gathers the whole tensor and keeps its part.
  act *whole = scratch(size_t(tokens * global + tp * tokens * local));
  if (rowsToColumns) {
    gather(in, size_t(mine * global), whole);
    takeColumns(whole, tokens, blocks, out);
  } else {
    act *pieces = whole + tokens * global;
    gather(in, size_t(tokens * local), pieces);
    for (int r = 0; r < tp; ++r)
      forEachPiece(blocks, tp, r, [&](int64_t at, int64_t to, int64_t count, int64_t) {
        copy2D(whole + to, global, pieces + r * tokens * local + at, local, count, tokens,
               state->stream);
      });
    takeRows(whole, tokens, global, out);
  }
  record("all_to_all", module, tokens, uint64_t(tokens * global) * 4);
}

void Device::takeColumns(const act *in, int64_t rows, const std::vector<int64_t> &blocks,
                         act *out) {
  int64_t local = localWidth(blocks, tp), global = globalWidth(blocks);
  check(cudaMemsetAsync(out, 0, size_t(rows * local) * sizeof(act), state->stream),
        "cudaMemsetAsync"); // the padding
  forEachPiece(blocks, tp, rank, [&](int64_t at, int64_t from, int64_t count, int64_t) {
    copy2D(out + at, local, in + from, global, count, rows, state->stream);
  });
}

void Device::takeRows(const act *in, int64_t rows, int64_t cols, act *out) {
  int64_t mine = rows / tp; // token splits happen only where tp divides the tokens
  check(cudaMemcpyAsync(out, in + rank * mine * cols, size_t(mine * cols) * sizeof(act),
                        cudaMemcpyDeviceToDevice, state->stream),
        "cudaMemcpyAsync");
}

void Device::partialFromReplicate(const act *in, int64_t n, act *out) {
  if (rank == 0)
    check(cudaMemcpyAsync(out, in, n * sizeof(act), cudaMemcpyDeviceToDevice, state->stream),
          "cudaMemcpyAsync");
  else
    check(cudaMemsetAsync(out, 0, n * sizeof(act), state->stream), "cudaMemsetAsync");
}

void Device::partialFromColumns(const act *in, int64_t rows, const std::vector<int64_t> &blocks,
                                act *out) {
  int64_t local = localWidth(blocks, tp), global = globalWidth(blocks);
  check(cudaMemsetAsync(out, 0, size_t(rows * global) * sizeof(act), state->stream),
        "cudaMemsetAsync");
  forEachPiece(blocks, tp, rank, [&](int64_t at, int64_t to, int64_t count, int64_t) {
    copy2D(out + to, global, in + at, local, count, rows, state->stream);
  });
}

void Device::partialFromRows(const act *in, int64_t tokens, int64_t cols, act *out) {
  int64_t mine = tokens / tp;
  check(cudaMemsetAsync(out, 0, size_t(tokens * cols) * sizeof(act), state->stream),
        "cudaMemsetAsync");
  check(cudaMemcpyAsync(out + rank * mine * cols, in, size_t(mine * cols) * sizeof(act),
                        cudaMemcpyDeviceToDevice, state->stream),
        "cudaMemcpyAsync");
}

} // namespace tpcrt::cuda
