// libtpcrt's CUDA backend (--target cuda): bf16 weights and activations with fp32
// accumulation, GEMMs through cuBLASLt, collectives through NCCL (or Gloo on host buffers).
// The driver, loader, rendezvous and trace are the CPU target's (model.h): the emitted
// program's prepare() builds a Device from the loaded Context, and its forward runs the
// same op calls as the CPU program, on device pointers.
#ifndef TPCRT_CUDA_DEVICE_H
#define TPCRT_CUDA_DEVICE_H

#include "tpcrt/model.h"

#include <cuda_bf16.h>

#include <cstdint>
#include <memory>
#include <vector>

namespace tpcrt::cuda {

using act = __nv_bfloat16;

/// One layer's keys and values on the device, [capacity, width] each.
struct KVCache {
  act *keys = nullptr, *values = nullptr;
  int64_t capacity = 0, width = 0, length = 0;
};

class Device;
using DeviceForwardFn = const act *(*)(Device &, const int64_t *ids, const int64_t *positions,
                                       int64_t tokens);

class Device {
public:
  /// Picks the GPU (LOCAL_RANK modulo the visible devices), uploads `host`'s loaded fp32
  /// weights as bf16, sizes the arena and KV caches for host.maxTokens tokens, and connects
  /// the communicator: NCCL, its unique id sent through host's Gloo store, unless
  /// TPC_CUDA_COMM=gloo (host collectives, so several ranks may share one GPU). Errors stop
  /// the rank with a message naming the CUDA, cuBLASLt or NCCL call.
  Device(Context &host, const ModelSpec &spec);
  ~Device();

  /// One forward: ids and positions to the device, `fn`, the logits back as fp32.
  const float *run(const int64_t *ids, const int64_t *positions, int64_t tokens,
                   DeviceForwardFn fn);

  const act *weight(size_t i) const { return weights[i]; }
  [[noreturn]] void fail(const std::string &message) const { host.fail(message); }

  int rank = 0, tp = 1;
  act *arena = nullptr;
  std::vector<KVCache> caches;

  // The CPU Context's collectives and reshards, on device buffers.
  void allReduce(const act *in, int64_t rows, int64_t cols, act *out, const char *module);
  void allGatherColumns(const act *in, int64_t rows, const std::vector<int64_t> &blocks,
                        act *out, const char *module);
  void allGatherRows(const act *in, int64_t rows, int64_t cols, act *out, const char *module);
  void reduceScatterColumns(const act *in, int64_t rows, const std::vector<int64_t> &blocks,
                            act *out, const char *module);
  void reduceScatterRows(const act *in, int64_t rows, int64_t cols, act *out,
                         const char *module);
  void allToAll(const act *in, int64_t tokens, const std::vector<int64_t> &blocks,
                bool rowsToColumns, act *out, const char *module);
  void takeColumns(const act *in, int64_t rows, const std::vector<int64_t> &blocks, act *out);
  void takeRows(const act *in, int64_t rows, int64_t cols, act *out);
  void partialFromReplicate(const act *in, int64_t n, act *out);
  void partialFromColumns(const act *in, int64_t rows, const std::vector<int64_t> &blocks,
                          act *out);
  void partialFromRows(const act *in, int64_t tokens, int64_t cols, act *out);

  struct State; // CUDA handles, NCCL, scratch: device.cu's business
  std::unique_ptr<State> state;

private:
  /// Runs a CPU collective on host copies of device buffers (the Gloo path).
  template <typename Fn>
  void onHost(const act *in, size_t inCount, act *out, size_t outCount, Fn fn);

  Context &host;
  const ModelSpec &spec;
  std::vector<act *> weights;
};

// Kernels, on the device's stream. Arguments as in tpcrt/kernels.h, on device pointers;
// ids and positions are device arrays (ids were checked against the vocabulary on the host).
bool embedding(const int64_t *ids, int64_t tokens, const act *table, int64_t rowOffset,
               int64_t rows, int64_t vocab, int64_t width, act *out);
void rmsNorm(const act *x, int64_t rows, int64_t cols, const act *weight, double epsilon,
             double weightOffset, act *out);
void linear(const act *x, int64_t rows, int64_t in, const act *w, int64_t out, const act *bias,
            act *y);
void rotary(const act *x, int64_t rows, int64_t cols, int64_t headDim, double theta,
            const double *invFreq, const int64_t *positions, act *out);
void attention(const act *q, const act *k, const act *v, int64_t rows, int64_t heads,
               int64_t kvHeads, int64_t headDim, double scale, int64_t slidingWindow,
               double softcap, KVCache &cache, act *out);
void silu(const act *x, int64_t n, act *out);
void gelu(const act *x, int64_t n, bool tanhApproximation, act *out);
void scale(const act *x, int64_t n, double factor, act *out);
void softcap(const act *x, int64_t n, double cap, act *out);
void add(const act *a, const act *b, int64_t n, act *out);
void mul(const act *a, const act *b, int64_t n, act *out);
void sliceColumns(const act *x, int64_t rows, int64_t cols, int64_t offset, int64_t size,
                  act *out);
/// rows x cols elements from src (row stride srcStride) to dst (row stride dstStride).
void copyRows(act *dst, int64_t dstStride, const act *src, int64_t srcStride, int64_t rows,
              int64_t cols);

} // namespace tpcrt::cuda

#endif // TPCRT_CUDA_DEVICE_H
