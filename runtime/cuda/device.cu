// The CUDA backend's device: weights, arena, KV caches, cuBLASLt and the communicator.
// Collectives: NCCL sums bf16 in place on the device (all_reduce, the one a tensor-parallel
// decode step is made of), polled by a watchdog that aborts the communicator when a peer stops
// answering; every other collective and reshard, and all of them under TPC_CUDA_COMM=gloo,
// goes through the CPU Context's own implementation on fp32 host copies.
#include "tpcrt/cuda/device.h"

#include "state.h"

#include "../weights/slices.h"
#include "tpcrt/random_weight.h"

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

namespace tpcrt::cuda {

namespace {
std::string cudaMessage(const char *what, cudaError_t e) {
  return std::string(what) + ": " + cudaGetErrorString(e);
}
} // namespace

Device::State *current = nullptr;

namespace {
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
    throw std::runtime_error(cudaMessage(what, e));
}

Device::Device(Context &host, const ModelSpec &spec)
    : rank(host.rank), tp(host.tp), state(std::make_unique<State>()), host(host), spec(spec) {
  current = state.get();
  int count = 0;
  cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess || count == 0)
    throw std::runtime_error("no CUDA device is visible to this rank (" +
                             std::string(e == cudaSuccess ? "0 devices"
                                                          : cudaGetErrorString(e)) +
                             "); --target cuda binaries need one");
  check(cudaSetDevice(host.localRank % count), "cudaSetDevice");
  check(cudaStreamCreate(&state->stream), "cudaStreamCreate");
  if (cublasLtCreate(&state->lt) != CUBLAS_STATUS_SUCCESS)
    throw std::runtime_error("cublasLtCreate failed");
  state->workspaceBytes = 32 << 20;
  check(cudaMalloc(&state->workspace, state->workspaceBytes), "cudaMalloc (cuBLASLt workspace)");

  // Generated weights (--random-weights) are made here, on the device.
  if (host.randomSeed) {
    for (size_t i = 0; i < spec.params.size(); ++i) {
      std::vector<int64_t> local = host.slices[i].localShape(spec.params[i].hfShape);
      int64_t elements = 1;
      for (int64_t d : local)
        elements *= d;
      act *d = nullptr;
      check(cudaMalloc(&d, std::max<int64_t>(1, elements) * sizeof(act)),
            "cudaMalloc (weights)");
      generate(*host.randomSeed, spec.params[i], host.slices[i], d, elements);
      weights.push_back(d);
    }
  }
  // Loaded weights: fp32 as the loader read them, to bf16 on the device; the host copies go.
  for (std::vector<float> &w : host.weights) {
    if (host.randomSeed)
      break;
    std::vector<act> converted(w.size());
    for (size_t i = 0; i < w.size(); ++i)
      converted[i] = __float2bfloat16(w[i]);
    act *d = nullptr;
    check(cudaMalloc(&d, std::max<size_t>(1, converted.size()) * sizeof(act)),
          "cudaMalloc (weights)");
    check(cudaMemcpy(d, converted.data(), converted.size() * sizeof(act),
                     cudaMemcpyHostToDevice),
          "cudaMemcpy (weights)");
    weights.push_back(d);
    std::vector<float>().swap(w);
  }
  int64_t tokens = host.maxTokens;
  check(cudaMalloc(&arena, std::max<int64_t>(1, spec.floatsPerToken * tokens) * sizeof(act)),
        "cudaMalloc (activations)");
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

  const char *mode = std::getenv("TPC_CUDA_COMM");
  const char *view = std::getenv("TPC_SINGLE_RANK_VIEW");
  state->noop = view && std::string(view) == "1";
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
    state->waitNccl(r, "ncclCommInitRankConfig", host.timeoutSeconds);
  }
}

Device::~Device() {
  if (state && state->nccl)
    ncclCommDestroy(state->nccl);
}

void Device::State::waitNccl(ncclResult_t started, const char *what, int timeoutSeconds) {
  if (started != ncclSuccess && started != ncclInProgress)
    throw std::runtime_error(std::string(what) + ": " + ncclGetErrorString(started));
  // The watchdog: poll the communicator's asynchronous error and the stream; a peer that
  // stops answering leaves both pending, so after the timeout the communicator is aborted.
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeoutSeconds);
  for (;;) {
    ncclResult_t async = ncclSuccess;
    if (nccl)
      ncclCommGetAsyncError(nccl, &async);
    if (async != ncclSuccess && async != ncclInProgress) {
      ncclCommAbort(nccl);
      nccl = nullptr;
      throw std::runtime_error(std::string(what) + ": " + ncclGetErrorString(async));
    }
    cudaError_t e = cudaStreamQuery(stream);
    if (async == ncclSuccess && e == cudaSuccess)
      return;
    if (e != cudaSuccess && e != cudaErrorNotReady)
      throw std::runtime_error(cudaMessage(what, e));
    if (std::chrono::steady_clock::now() > deadline) {
      if (nccl)
        ncclCommAbort(nccl);
      nccl = nullptr;
      throw std::runtime_error(std::string(what) + ": no answer from a peer rank within " +
                               std::to_string(timeoutSeconds) + " s (a rank stopped?)");
    }
    std::this_thread::yield();
  }
}

const float *Device::run(const int64_t *ids, const int64_t *positions, int64_t tokens,
                         DeviceForwardFn fn) {
  check(cudaMemcpyAsync(state->ids, ids, tokens * sizeof(int64_t), cudaMemcpyHostToDevice,
                        state->stream),
        "cudaMemcpyAsync (ids)");
  check(cudaMemcpyAsync(state->positions, positions, tokens * sizeof(int64_t),
                        cudaMemcpyHostToDevice, state->stream),
        "cudaMemcpyAsync (positions)");
  const act *logits = fn(*this, state->ids, state->positions, tokens);
  int64_t rows = spec.lastTokenOnly ? 1 : tokens;
  std::vector<act> staged(size_t(rows * spec.vocab));
  check(cudaMemcpyAsync(staged.data(), logits, staged.size() * sizeof(act),
                        cudaMemcpyDeviceToHost, state->stream),
        "cudaMemcpyAsync (logits)");
  check(cudaStreamSynchronize(state->stream), "the forward");
  state->logits.resize(staged.size());
  for (size_t i = 0; i < staged.size(); ++i)
    state->logits[i] = __bfloat162float(staged[i]);
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


void Device::allReduce(const act *in, int64_t rows, int64_t cols, act *out,
                       const char *module) {
  size_t n = size_t(rows * cols);
  if (state->noop) { // the per-rank view: nothing travels
    if (out != in)
      check(cudaMemcpyAsync(out, in, n * sizeof(act), cudaMemcpyDeviceToDevice, state->stream),
            "cudaMemcpyAsync");
    host.record("all_reduce", module, rows, uint64_t(n) * 4);
    return;
  }
  if (!state->useNccl) {
    onHost(in, n, out, n,
           [&](const float *a, float *b) { host.allReduce(a, rows, cols, b, module); });
    return;
  }
  ncclResult_t r =
      ncclAllReduce(in, out, n, ncclBfloat16, ncclSum, state->nccl, state->stream);
  state->waitNccl(r, "ncclAllReduce", host.timeoutSeconds);
  host.record("all_reduce", module, rows, uint64_t(n) * 4);
}

void Device::allGatherColumns(const act *in, int64_t rows, const std::vector<int64_t> &blocks,
                              act *out, const char *module) {
  onHost(in, size_t(rows * localWidth(blocks, tp)), out, size_t(rows * globalWidth(blocks)),
         [&](const float *a, float *b) { host.allGatherColumns(a, rows, blocks, b, module); });
}

void Device::allGatherRows(const act *in, int64_t rows, int64_t cols, act *out,
                           const char *module) {
  onHost(in, size_t(rows * cols), out, size_t(rows * tp * cols),
         [&](const float *a, float *b) { host.allGatherRows(a, rows, cols, b, module); });
}

void Device::reduceScatterColumns(const act *in, int64_t rows,
                                  const std::vector<int64_t> &blocks, act *out,
                                  const char *module) {
  onHost(in, size_t(rows * globalWidth(blocks)), out, size_t(rows * localWidth(blocks, tp)),
         [&](const float *a, float *b) {
           host.reduceScatterColumns(a, rows, blocks, b, module);
         });
}

void Device::reduceScatterRows(const act *in, int64_t rows, int64_t cols, act *out,
                               const char *module) {
  onHost(in, size_t(rows * cols), out, size_t(rows / tp * cols),
         [&](const float *a, float *b) { host.reduceScatterRows(a, rows, cols, b, module); });
}

void Device::allToAll(const act *in, int64_t tokens, const std::vector<int64_t> &blocks,
                      bool rowsToColumns, act *out, const char *module) {
  size_t split = size_t(tokens / tp * globalWidth(blocks)), joined = size_t(tokens * localWidth(blocks, tp));
  onHost(in, rowsToColumns ? split : joined, out, rowsToColumns ? joined : split,
         [&](const float *a, float *b) {
           host.allToAll(a, tokens, blocks, rowsToColumns, b, module);
         });
}

void Device::takeColumns(const act *in, int64_t rows, const std::vector<int64_t> &blocks,
                         act *out) {
  onHost(in, size_t(rows * globalWidth(blocks)), out, size_t(rows * localWidth(blocks, tp)),
         [&](const float *a, float *b) { host.takeColumns(a, rows, blocks, b); });
}

void Device::takeRows(const act *in, int64_t rows, int64_t cols, act *out) {
  onHost(in, size_t(rows * cols), out, size_t(rows / tp * cols),
         [&](const float *a, float *b) { host.takeRows(a, rows, cols, b); });
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
  onHost(in, size_t(rows * localWidth(blocks, tp)), out, size_t(rows * globalWidth(blocks)),
         [&](const float *a, float *b) { host.partialFromColumns(a, rows, blocks, b); });
}

void Device::partialFromRows(const act *in, int64_t tokens, int64_t cols, act *out) {
  onHost(in, size_t(tokens / tp * cols), out, size_t(tokens * cols),
         [&](const float *a, float *b) { host.partialFromRows(a, tokens, cols, b); });
}

} // namespace tpcrt::cuda
