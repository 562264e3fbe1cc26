// The CUDA target's communicators, behind tpcrt::Communicator like Gloo's: NCCL on bf16
// device buffers, and the host group's Gloo reached through host copies. Private to
// runtime/cuda.
#ifndef TPCRT_CUDA_COMMUNICATORS_H
#define TPCRT_CUDA_COMMUNICATORS_H

#include "tpcrt/comm.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <functional>

namespace tpcrt::cuda {

/// NCCL's collectives, enqueued on the device's stream (so a captured decode step holds
/// them) on a non-blocking communicator that a watchdog aborts when a peer stops answering.
class NcclCommunicator : public Communicator {
public:
  /// Joins the ranks of `group` (the unique id travels through its broadcast). Before an
  /// abort it calls `releaseGraphs`: NCCL waits for the graphs that hold its collectives to
  /// be destroyed before it lets a communicator go.
  NcclCommunicator(Comm &group, cudaStream_t stream, int timeoutSeconds,
                   std::function<void()> releaseGraphs);
  std::string pathOf(const std::string &) const override { return "nccl"; }
  /// Finalizes the communicator (every rank does, together), watched; on failure aborts it
  /// and warns. Never throws.
  ~NcclCommunicator() override;

  /// The watchdog: waits for the stream (when `stream`) and for NCCL to finish what it does
  /// in the background; a peer that stops answering leaves either pending, so after
  /// --timeout, or on NCCL's asynchronous error, the communicator is aborted and this
  /// throws. The host calls it once per forward, at the one point it waits for the device.
  void watch(const char *what, bool stream);

protected:
  void runAllReduce(void *data, size_t count) override;
  void runAllReduceSums(float *data, size_t count) override;
  void runAllGather(const void *in, size_t count, void *out) override;
  void runReduceScatter(const void *in, size_t count, void *out) override;
  void runAllToAll(const void *in, size_t count, void *out) override;
  void runSend(const void *data, size_t count, int peer) override;
  void runRecv(void *data, size_t count, int peer) override;

private:
  /// Checks a call just made, waiting (watched) while a non-blocking one is still being
  /// enqueued (ncclInProgress, e.g. while it first connects to its peers).
  void enqueued(int result, const char *what);
  void abort();

  ncclComm_t comm = nullptr;
  cudaStream_t stream;
  int timeoutSeconds;
  std::function<void()> releaseGraphs;
};

/// The host group's fp32 communicator (Gloo) on bf16 device buffers, through host copies:
/// TPC_CUDA_COMM=gloo, so that several ranks can share one GPU. It waits for the stream at
/// each call, so no graph can hold it. The host communicator records the trace, with the
/// bytes it moved.
class HostStagedCommunicator : public Communicator {
public:
  HostStagedCommunicator(Communicator &host, cudaStream_t stream);
  std::string pathOf(const std::string &kind) const override { return host.pathOf(kind); }

protected:
  void runAllReduce(void *data, size_t count) override;
  void runAllReduceSums(float *data, size_t count) override;
  void runAllGather(const void *in, size_t count, void *out) override;
  void runReduceScatter(const void *in, size_t count, void *out) override;
  void runAllToAll(const void *in, size_t count, void *out) override;
  void runSend(const void *data, size_t count, int peer) override;
  void runRecv(void *data, size_t count, int peer) override;

private:
  /// `inCount` elements of `in` (bf16 activations, or the fp32 of a norm's sums) to the host
  /// as fp32, fn(host input, host output), then `outCount` back to `out` on the device.
  template <typename Element, typename Fn>
  void staged(const void *in, size_t inCount, void *out, size_t outCount, Fn fn);

  Communicator &host;
  cudaStream_t stream;
};

} // namespace tpcrt::cuda

#endif // TPCRT_CUDA_COMMUNICATORS_H
