// The CUDA backend's device: weights, arena, KV caches, cuBLASLt and the communicator.
// Collectives: NCCL on the device's stream (so a captured decode step holds them), polled by a
// watchdog that aborts the communicator when a peer stops answering; device copies for a rank
// alone (tp 1, the per-rank view); under TPC_CUDA_COMM=gloo, the group's host communicator
// on fp32 host copies.
#include "tpcrt/cuda/device.h"

#include "state.h"

#include "communicators.h"

#include "tpcrt/slices.h"
#include "tpcrt/random_weight.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
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

namespace {
/// Destroys the captured decode graphs; a later decode step captures again (their eager runs
/// are kept). NCCL keeps a communicator alive while a graph that captured its collectives
/// exists (finalize, destroy and abort all wait for those graphs to die), so this comes
/// before any of them; and a graph holds the addresses its capture saw, so this comes before
/// any buffer it may use is freed (releaseForRegrowth).
void releaseGraphs(Device::State &state) {
  for (auto &[key, graph] : state.graphs)
    if (graph.exec) {
      cudaGraphExecDestroy(graph.exec);
      graph.exec = nullptr;
    }
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

Device::Device(const ModelSpec &spec, DeviceForwardFn forward, DeviceForwardFn sequenceParallel,
               int64_t maxHeads, int64_t maxHeadDim,
               std::vector<std::vector<int>> weightGroups)
    : state(std::make_unique<State>()), spec(spec), forwardFn(forward),
      sequenceParallelFn(sequenceParallel), maxHeads(maxHeads), maxHeadDim(maxHeadDim),
      weightGroups(std::move(weightGroups)) {}

void Device::fail(const std::string &message) const {
  std::fprintf(stderr, "error: %s\n", message.c_str());
  if (info.comm)
    info.comm->recordExit(message);
  std::exit(1);
}

void Device::attach(const RankInfo &joined) {
  info = joined;
  rank = info.rank;
  tp = info.tp;
  if (info.stages > 1) {
    if (size_t(info.stage) >= stageForwards.size() || !stageForwards[size_t(info.stage)])
      throw std::runtime_error("internal error: the program has no forward for pipeline stage " +
                               std::to_string(info.stage));
    forwardFn = stageForwards[size_t(info.stage)];
  }
  state->timeoutSeconds = info.timeoutSeconds;
  cudaError_t e = cudaGetDeviceCount(&visibleDevices);
  if (e != cudaSuccess || visibleDevices == 0)
    throw std::runtime_error("no CUDA device is visible to this rank (" +
                             std::string(e == cudaSuccess ? "0 devices"
                                                          : cudaGetErrorString(e)) +
                             "); --target cuda binaries need one");
  check(cudaSetDevice(info.localRank % visibleDevices), "cudaSetDevice");
  check(cudaStreamCreate(&state->stream), "cudaStreamCreate");
  if (cublasStatus_t s = cublasLtCreate(&state->lt); s != CUBLAS_STATUS_SUCCESS)
    throw DeviceError("cuBLASLt", "cublasLtCreate", cublasLtGetStatusString(s));
  state->workspaceBytes = 32 << 20;
  check(cudaMalloc(&state->workspace, state->workspaceBytes), "cudaMalloc (cuBLASLt workspace)");
  int64_t tokens = info.maxTokens;
  state->longestSequence = std::max<int64_t>(1, tokens);
  check(cudaMalloc(&state->ids, tokens * sizeof(int64_t)), "cudaMalloc (ids)");
  check(cudaMalloc(&state->positions, tokens * sizeof(int64_t)), "cudaMalloc (positions)");
}

void Device::allocateWeights(const std::vector<WeightDesc> &descs) {
  // Parameters of a group share one allocation, one after the other (the emitted code runs
  // linears of one input as one GEMM over them); the others get their own.
  std::vector<int64_t> elements;
  for (const WeightDesc &desc : descs)
    elements.push_back(desc.elements());
  weights.assign(descs.size(), nullptr);
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
  weightElements = std::move(elements);
}

void Device::writeWeight(size_t i, int64_t offset, const float *values, int64_t count) {
  // The loader's fp32 staging to bf16, a tensor (or a piece of one) at a time.
  std::vector<act> converted(static_cast<size_t>(count));
  for (size_t j = 0; j < converted.size(); ++j)
    converted[j] = __float2bfloat16(values[j]);
  check(cudaMemcpy(weights.at(i) + offset, converted.data(), converted.size() * sizeof(act),
                   cudaMemcpyHostToDevice),
        "cudaMemcpy (weights)");
}

bool Device::generateWeight(size_t i, uint64_t seed, const ParamDesc &param,
                            const SliceSpec &slice) {
  generate(seed, param, slice, weights.at(i), weightElements.at(i));
  return true;
}

uint64_t Device::allocateCaches(const std::vector<KVCacheDesc> &layers, int64_t blockSize) {
  // Each layer in its KV group's pool, whose blocks every layer of the group holds alike.
  std::vector<GroupOnDevice> &groups = state->groups;
  groups.clear();
  for (const KVCacheDesc &layer : layers) {
    if (layer.group < 0)
      throw std::runtime_error("internal error: a KV cache of group " +
                               std::to_string(layer.group));
    if (size_t(layer.group) >= groups.size())
      groups.resize(size_t(layer.group) + 1);
    GroupOnDevice &group = groups[size_t(layer.group)];
    if (group.blocks >= 0 && (group.blocks != layer.blocks || !(group.reach == layer.reach)))
      throw std::runtime_error("internal error: the layers of KV group " +
                               std::to_string(layer.group) + " are given different pools");
    group = {layer.blocks, layer.reach};
  }
  cacheBlockSize = blockSize;
  uint64_t bytes = 0;
  for (const KVCacheDesc &layer : layers) {
    int64_t width = layer.keyWidth;
    if (layer.valueWidth != width) // the compiler refuses such attention for this target
      fail("a KV cache whose values are not as wide as its keys (MLA) is CPU-only");
    KVCache cache;
    cache.rows = layer.blocks * blockSize;
    cache.width = width;
    cache.group = layer.group;
    check(cudaMalloc(&cache.keys, std::max<int64_t>(1, cache.rows * width) * sizeof(act)),
          "cudaMalloc (KV cache)");
    check(cudaMalloc(&cache.values, std::max<int64_t>(1, cache.rows * width) * sizeof(act)),
          "cudaMalloc (KV cache)");
    caches.push_back(cache);
    bytes += uint64_t(2 * cache.rows * width) * sizeof(act);
  }
  prepareAttention(*state, maxHeads, maxHeadDim);
  return bytes;
}

uint64_t Device::allocateArena(int64_t perToken, int64_t tokens) {
  check(cudaMalloc(&arena, std::max<int64_t>(1, perToken * tokens) * sizeof(act)),
        "cudaMalloc (activations)");
  return uint64_t(perToken * tokens) * sizeof(act);
}

void Device::start() {
  // The collective layer on the device. A rank alone (the per-rank view, or tp 1) moves
  // nothing: its collectives are device copies (never the host path at tp 1, whose
  // synchronous copies a graph cannot hold).
  const char *mode = std::getenv("TPC_CUDA_COMM");
  const char *view = std::getenv("TPC_SINGLE_RANK_VIEW");
  bool alone = (view && std::string(view) == "1") || tp == 1;
  bool viaHost = !alone && mode && std::string(mode) == "gloo";
  state->memory = std::make_unique<DeviceMemory>(*state);
  if (alone) {
    state->communicator = std::make_unique<LocalCommunicator>(rank, tp, *state->memory,
                                                              /*variableSizes=*/false);
  } else if (viaHost) {
    // Its host communicator (the group's, Gloo) records the trace.
    state->communicator =
        std::make_unique<HostStagedCommunicator>(info.comm->communicator(), state->stream);
  } else {
    // NCCL needs a GPU per rank. A process may see every GPU of the machine (each local
    // rank takes its own) or only its own (SLURM, Kubernetes: one visible GPU per process),
    // so what is checked is the GPU itself: each rank's device UUID, sent to every rank.
    int device = 0;
    check(cudaGetDevice(&device), "cudaGetDevice");
    cudaDeviceProp properties{};
    check(cudaGetDeviceProperties(&properties, device), "cudaGetDeviceProperties");
    // Every rank learns every UUID, so that all of them refuse alike (one that went on to
    // NCCL's init would wait there for the ones that refused).
    constexpr size_t kUuid = sizeof properties.uuid.bytes;
    std::vector<std::string> uuids(size_t(tp), std::string(kUuid, '\0'));
    for (int r = 0; r < tp; ++r) {
      if (r == rank)
        std::memcpy(&uuids[size_t(r)][0], properties.uuid.bytes, kUuid);
      info.comm->broadcast(&uuids[size_t(r)][0], kUuid, r);
    }
    for (int a = 0; a < tp; ++a)
      for (int b = a + 1; b < tp; ++b)
        if (uuids[size_t(a)] == uuids[size_t(b)])
          throw std::runtime_error(
              "NCCL needs a GPU per rank: ranks " + std::to_string(a) + " and " +
              std::to_string(b) + " run on the same GPU; give each rank its own "
              "(CUDA_VISIBLE_DEVICES), or set TPC_CUDA_COMM=gloo to let ranks share one");
    Device::State *s = state.get();
    auto nccl = std::make_unique<NcclCommunicator>(*info.comm, state->stream,
                                                   info.timeoutSeconds,
                                                   [s] { releaseGraphs(*s); });
    state->nccl = nccl.get();
    state->communicator = std::move(nccl);
  }
  if (!viaHost)
    state->communicator->traceInto(info.trace);
  state->collectives =
      std::make_unique<Collectives>(*state->communicator, *state->memory, info.variableGathers);
  if (info.stages > 1) {
    // The host's communicator records its own trace; NCCL's is recorded here.
    if (viaHost) {
      state->pipeline = std::make_unique<HostStagedCommunicator>(info.world->communicator(),
                                                                 state->stream);
    } else {
      Device::State *s = state.get();
      state->pipeline = std::make_unique<NcclCommunicator>(*info.world, state->stream,
                                                           info.timeoutSeconds,
                                                           [s] { releaseGraphs(*s); });
      state->pipeline->traceInto(info.trace);
    }
  }
  // A graph replays device work only: collectives staged through the host cannot be in one;
  // a stage's forward waits on the stage before it, which a graph's launch would not.
  const char *graphs = std::getenv("TPC_CUDA_GRAPHS");
  state->graphsAllowed =
      !viaHost && info.stages == 1 && !(graphs && std::string(graphs) == "0");
  // TPC_CUDA_GEMM=tpc: every GEMM through tpc's own kernel (kernels.cu's gemmKernel, what
  // runs where cuBLASLt has no algorithm), so the GPU check compares it with the CPU.
  if (const char *gemm = std::getenv("TPC_CUDA_GEMM"); gemm && *gemm) {
    std::string asked = gemm;
    if (asked != "tpc" && asked != "cublaslt")
      throw std::runtime_error("TPC_CUDA_GEMM must be cublaslt or tpc, not '" + asked + "'");
    state->ownGemm = asked == "tpc";
  }
}

const float *Device::forward(const Step &batch, bool sequenceParallel) {
  describeStep(batch, cacheBlockSize, state->groups, state->stepHost);
  step = &batch;
  return run(batch.ids, batch.positions, batch.tokens,
             sequenceParallel ? sequenceParallelFn : forwardFn);
}

const int64_t *Device::argmax() const {
  return state->argmaxReady ? state->hostArgmax : nullptr;
}

void releaseForRegrowth(Device::State &state, const char *what) {
  if (state.capturing) // the eager run before a capture sizes everything a capture needs
    throw std::runtime_error(std::string(what) + " grew during a CUDA graph capture");
  waitForStream(state, "before regrowing a buffer");
  releaseGraphs(state);
}

Device::~Device() {
  // Nothing here may throw: errors at the end are reported and the rank still exits. The
  // group this Device joined is gone by now (runModel has returned): only state and members
  // are used.
  releaseGraphs(*state);
  // NCCL finalizes together with the peers (its destructor never throws).
  state->collectives.reset();
  state->pipeline.reset();
  state->nccl = nullptr;
  state->communicator.reset();
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
  cudaFree(state->stepSequences.data);
  cudaFree(state->stepTables.data);
  cudaFree(state->stepRows.data);
  cudaFree(state->stepDecodes.data);
  cudaFree(state->workspace);
  for (auto &[key, frequencies] : state->invFreqs)
    cudaFree(frequencies);
  cudaFreeHost(state->hostLogits);
  cudaFree(state->received);
  cudaFree(state->argmaxIds);
  cudaFreeHost(state->hostArgmax);
  if (state->lt)
    cublasLtDestroy(state->lt);
  if (state->stream)
    cudaStreamDestroy(state->stream);
}

cudaStream_t Device::stream() const { return state->stream; }

void Device::launched(const char *what) const { cuda::launched(what); }

void Device::perturbAttention() {
  attentionScaleFault = 1.0 + kPerturbation;
  releaseGraphs(*state);
}

bool Device::injectFault() {
  faultKernel<<<1, 1, 0, state->stream>>>(nullptr);
  launched("the injected fault (TPC_FAULT=device)");
  return true;
}

void waitForStream(Device::State &state, const char *what) {
  // Only a communicator's peers can leave a wait hanging forever: a rank alone has no
  // deadline (a long forward at tp 1 is not a lost peer).
  if (state.nccl)
    state.nccl->watch(what, /*stream=*/true);
  else
    check(cudaStreamSynchronize(state.stream),
          ("cudaStreamSynchronize (" + std::string(what) + ")").c_str());
}

void Device::wait(const char *what) {
  // The point the host waits for the device in every forward: collectives themselves are
  // only enqueued, so a decode step's kernels and NCCL calls stay back to back.
  waitForStream(*state, what);
}

Collectives &Device::collectives() { return *state->collectives; }

void Device::growHostLogits(size_t count) {
  if (count <= state->hostLogitsCount)
    return;
  cudaFreeHost(state->hostLogits);
  state->hostLogits = nullptr;
  state->hostLogitsCount = 0;
  check(cudaMallocHost(&state->hostLogits, count * sizeof(act)), "cudaMallocHost (logits)");
  state->hostLogitsCount = count;
}

const float *Device::receiveLogits(int64_t rows, int64_t cols, int64_t stage,
                                   const char *module) {
  size_t count = size_t(rows * cols);
  if (count > state->receivedCount) {
    cudaFree(state->received);
    state->received = nullptr;
    state->receivedCount = 0;
    check(cudaMalloc(&state->received, std::max<size_t>(1, count) * sizeof(act)),
          "cudaMalloc (received logits)");
    state->receivedCount = count;
  }
  growHostLogits(count);
  Communicator &world = pipeline();
  world.label(module, rows);
  world.recv(state->received, count, int(stage * tp + rank));
  check(cudaMemcpyAsync(state->hostLogits, state->received, count * sizeof(act),
                        cudaMemcpyDeviceToHost, state->stream),
        "cudaMemcpyAsync (received logits)");
  wait("receiving the logits");
  state->logits.resize(count);
  for (size_t i = 0; i < count; ++i)
    state->logits[i] = __bfloat162float(state->hostLogits[i]);
  return state->logits.data();
}

Communicator &Device::pipeline() {
  if (!state->pipeline)
    throw std::logic_error("internal error: a transfer between pipeline stages in a program "
                           "of one stage");
  return *state->pipeline;
}

namespace {
/// `values` into `array` on the stream, growing it first where it is too small (while the
/// stream is idle; a graph that held the old address is released).
template <typename T>
void upload(Device::State &state, Device::State::Array<T> &array, const std::vector<T> &values,
            const char *what) {
  if (values.size() > array.capacity) {
    size_t capacity = std::max<size_t>(values.size(), 2 * array.capacity);
    releaseForRegrowth(state, what);
    cudaFree(array.data);
    array.data = nullptr;
    array.capacity = 0;
    check(cudaMalloc(&array.data, std::max<size_t>(1, capacity) * sizeof(T)),
          (std::string("cudaMalloc (") + what + ")").c_str());
    array.capacity = capacity;
  }
  if (!values.empty())
    check(cudaMemcpyAsync(array.data, values.data(), values.size() * sizeof(T),
                          cudaMemcpyHostToDevice, state.stream),
          (std::string("cudaMemcpyAsync (") + what + ")").c_str());
}
} // namespace

const float *Device::run(const int64_t *ids, const int64_t *positions, int64_t tokens,
                         DeviceForwardFn fn) {
  // The step as the attention kernels read it (forward() described it): each sequence's rows,
  // cached count and block table, on the device at addresses a captured decode graph keeps.
  const StepOnHost &described = state->stepHost;
  upload(*state, state->stepSequences, described.sequences, "the step's sequences");
  upload(*state, state->stepTables, described.tables, "the step's block tables");
  upload(*state, state->stepRows, described.rowSequence, "the step's rows");
  upload(*state, state->stepDecodes, described.decodeList, "the step's one-row sequences");
  state->stepView = StepView{state->stepSequences.data, state->stepTables.data,
                             state->stepRows.data, state->stepDecodes.data,
                             int(cacheBlockSize)};
  // The logits come back through pinned memory (a copy to pageable memory would wait for the
  // forward inside cudaMemcpyAsync, out of the watchdog's reach); grown here, while the stream
  // is idle.
  // (tp.last_token's rows: the step's sampledRows(), more than one where a prompt is scored)
  int64_t rows = !spec.lastTokenOnly ? tokens
                 : step                ? std::max<int64_t>(1, step->sampledRows())
                                       : 1;
  size_t count = size_t(rows * spec.vocab);
  growHostLogits(count);
  bool argmax = step && step->argmax;
  if (argmax && size_t(rows) > state->argmaxCount) {
    cudaFree(state->argmaxIds);
    cudaFreeHost(state->hostArgmax);
    state->argmaxIds = state->hostArgmax = nullptr;
    state->argmaxCount = 0;
    check(cudaMalloc(&state->argmaxIds, size_t(rows) * sizeof(int64_t)), "cudaMalloc (argmax)");
    check(cudaMallocHost(&state->hostArgmax, size_t(rows) * sizeof(int64_t)),
          "cudaMallocHost (argmax)");
    state->argmaxCount = size_t(rows);
  }
  state->argmaxReady = false;
  // A step whose rows are picked, some by a draw: each row's Draw, its sequence's on the row
  // its token is sampled from (the last of its rows), greedy on the others.
  bool drawn = false;
  if (argmax) {
    state->rowDraws.assign(size_t(rows), Draw{});
    int64_t row = 0;
    for (const StepSequence &s : step->sequences) {
      int64_t last = spec.lastTokenOnly ? row + s.logits - 1 : s.first + s.count - 1;
      row += s.logits;
      if (s.logits > 0 && !s.draw.greedy() && last < rows) {
        state->rowDraws[size_t(last)] = s.draw;
        drawn = true;
      }
    }
    if (drawn)
      upload(*state, state->stepDraws, state->rowDraws, "the step's draws");
  }
  check(cudaMemcpyAsync(state->ids, ids, tokens * sizeof(int64_t), cudaMemcpyHostToDevice,
                        state->stream),
        "cudaMemcpyAsync (ids)");
  check(cudaMemcpyAsync(state->positions, positions, tokens * sizeof(int64_t),
                        cudaMemcpyHostToDevice, state->stream),
        "cudaMemcpyAsync (positions)");
  const act *logits = nullptr;
  // A decode step (each sequence one row, sampled; one token of any kind alone) runs the same
  // launches for any lengths and blocks of its sequences, which the kernels read from the
  // step's description on the device: one graph for each count of sequences.
  bool decode = tokens == 1;
  if (step && tokens > 1)
    decode = int64_t(step->sequences.size()) == tokens &&
             std::all_of(step->sequences.begin(), step->sequences.end(),
                         [](const StepSequence &s) { return s.logits == 1; });
  State::Graph *graph =
      decode && state->graphsAllowed ? &state->graphs[{fn, tokens}] : nullptr;
  if (graph && !graph->exec && !graph->failed && graph->eagerRuns > 0) {
    size_t traced = info.trace->size();
    // The capture: "" when it made a graph, else why not (the forward's own exception kept
    // in `thrown`).
    std::exception_ptr thrown;
    auto capture = [&]() -> std::string {
      cudaError_t e = cudaStreamBeginCapture(state->stream, cudaStreamCaptureModeThreadLocal);
      if (e != cudaSuccess)
        return std::string("cudaStreamBeginCapture: ") + cudaGetErrorString(e);
      state->capturing = graph;
      std::string why;
      try {
        graph->logits = fn(*this, state->ids, state->positions, tokens);
      } catch (const std::exception &error) {
        thrown = std::current_exception();
        why = error.what();
      }
      state->capturing = nullptr;
      cudaGraph_t captured = nullptr;
      e = cudaStreamEndCapture(state->stream, &captured);
      if (why.empty() && e != cudaSuccess)
        why = std::string("cudaStreamEndCapture: ") + cudaGetErrorString(e);
      if (why.empty() && (e = cudaGraphInstantiate(&graph->exec, captured, 0)) != cudaSuccess) {
        why = std::string("cudaGraphInstantiate: ") + cudaGetErrorString(e);
        graph->exec = nullptr;
      }
      if (captured)
        cudaGraphDestroy(captured);
      if (!why.empty())
        cudaGetLastError(); // a failed capture's error is not the next call's
      return why;
    };
    std::string why = capture();
    if (why.empty()) {
      // The communicator recorded the captured collectives, which have not run yet: the
      // graph keeps them, and each launch (the one below too) records them again.
      graph->records.assign(info.trace->begin() + std::ptrdiff_t(traced), info.trace->end());
      info.trace->resize(traced);
    } else {
      info.trace->resize(traced); // the failed capture's collectives never ran
      // NCCL calls enqueued into a capture that failed leave the communicator in a state no
      // eager step can trust: stop, saying how to run without graphs. A rank without NCCL
      // (alone, or one rank's view) runs its decode steps eagerly instead.
      if (state->nccl) {
        if (thrown)
          std::rethrow_exception(thrown);
        throw DeviceError("CUDA", "capturing the decode step in a CUDA graph",
                          why + "; at tp " + std::to_string(tp) +
                              " its NCCL calls are lost with it: run with TPC_CUDA_GRAPHS=0");
      }
      graph->failed = true;
      std::fprintf(stderr,
                   "warning: rank %d: capturing the decode step in a CUDA graph failed (%s); "
                   "its decode steps run eagerly\n",
                   rank, why.c_str());
    }
  }
  if (graph && graph->exec) {
    check(cudaGraphLaunch(graph->exec, state->stream), "cudaGraphLaunch (the decode step)");
    for (const TraceEntry &entry : graph->records)
      info.trace->push_back(entry);
    logits = graph->logits;
  } else {
    logits = fn(*this, state->ids, state->positions, tokens);
    if (graph)
      ++graph->eagerRuns;
  }
  if (argmax) {
    // Each row's token on the device, only the ids back (after a graph's launch, outside any
    // capture): the argmax where every row is greedy, else each row's draw.
    if (drawn)
      pickRows(*state, logits, rows, spec.vocab, state->stepDraws.data, state->argmaxIds);
    else
      rowArgmax(*state, logits, rows, spec.vocab, state->argmaxIds);
    check(cudaMemcpyAsync(state->hostArgmax, state->argmaxIds, size_t(rows) * sizeof(int64_t),
                          cudaMemcpyDeviceToHost, state->stream),
          "cudaMemcpyAsync (argmax)");
    wait("the forward");
    state->argmaxReady = true;
    return nullptr;
  }
  if (!logits) { // a pipeline stage that hands its result on rather than returning logits
    wait("the forward");
    return nullptr;
  }
  check(cudaMemcpyAsync(state->hostLogits, logits, count * sizeof(act), cudaMemcpyDeviceToHost,
                        state->stream),
        "cudaMemcpyAsync (logits)");
  wait("the forward");
  state->logits.resize(count);
  for (size_t i = 0; i < count; ++i)
    state->logits[i] = __bfloat162float(state->hostLogits[i]);
  return state->logits.data();
}

void DeviceMemory::copy2D(void *dst, int64_t dstPitch, const void *src, int64_t srcPitch,
                          int64_t count, int64_t rows) {
  if (count == 0 || rows == 0)
    return;
  check(cudaMemcpy2DAsync(dst, dstPitch * sizeof(act), src, srcPitch * sizeof(act),
                          count * sizeof(act), rows, cudaMemcpyDeviceToDevice, state.stream),
        "cudaMemcpy2DAsync (a reshard)");
}

void DeviceMemory::zero(void *dst, int64_t count) {
  if (count > 0)
    check(cudaMemsetAsync(dst, 0, size_t(count) * sizeof(act), state.stream),
          "cudaMemsetAsync (a reshard)");
}

void *DeviceMemory::scratch(size_t count) {
  if (count > state.scratchCount) {
    // A decode graph captured with the old buffer would write to freed memory.
    releaseForRegrowth(state, "collective scratch");
    cudaFree(state.scratch);
    state.scratch = nullptr;
    state.scratchCount = 0;
    check(cudaMalloc(&state.scratch, count * sizeof(act)), "cudaMalloc (collective scratch)");
    state.scratchCount = count;
  }
  return state.scratch;
}

} // namespace tpcrt::cuda
