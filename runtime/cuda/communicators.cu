// NCCL and host-staged Gloo behind tpcrt::Communicator (communicators.h).
#include "communicators.h"

#include "state.h"

#include <algorithm>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

namespace tpcrt::cuda {

NcclCommunicator::NcclCommunicator(Comm &group, cudaStream_t stream, int timeoutSeconds,
                                   std::function<void()> releaseGraphs)
    : Communicator(group.rank(), group.world(), sizeof(act)), stream(stream),
      timeoutSeconds(timeoutSeconds), releaseGraphs(std::move(releaseGraphs)) {
  ncclUniqueId id;
  if (rank == 0 && ncclGetUniqueId(&id) != ncclSuccess)
    throw std::runtime_error("ncclGetUniqueId failed");
  group.broadcast(&id, sizeof(id), 0);
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0; // so the watchdog can abort a communicator stuck on a lost peer
  ncclResult_t r = ncclCommInitRankConfig(&comm, world, id, rank, &config);
  if (r != ncclSuccess && r != ncclInProgress)
    throw std::runtime_error(std::string("ncclCommInitRankConfig: ") + ncclGetErrorString(r));
  watch("ncclCommInitRankConfig", /*stream=*/true);
}

NcclCommunicator::~NcclCommunicator() {
  if (!comm)
    return;
  ncclResult_t r = ncclCommFinalize(comm);
  try {
    if (r != ncclSuccess && r != ncclInProgress)
      throw std::runtime_error(std::string("ncclCommFinalize: ") + ncclGetErrorString(r));
    watch("ncclCommFinalize", /*stream=*/true);
  } catch (const std::exception &e) {
    std::fprintf(stderr, "warning: rank %d: %s\n", rank, e.what());
    if (comm) // finalizing failed: nothing more to flush
      abort();
  }
  if (comm)
    ncclCommDestroy(comm);
}

void NcclCommunicator::abort() {
  releaseGraphs(); // an in-flight one is freed once the abort lets it finish
  ncclCommAbort(comm);
  comm = nullptr;
}

void NcclCommunicator::watch(const char *what, bool waitForStream) {
  PeerDeadline deadline(/*peers=*/true, timeoutSeconds);
  for (;;) {
    if (!comm)
      throw std::runtime_error(std::string(what) + ": the NCCL communicator was aborted");
    ncclResult_t async = ncclSuccess;
    ncclCommGetAsyncError(comm, &async);
    if (async != ncclSuccess && async != ncclInProgress) {
      abort();
      throw std::runtime_error(std::string(what) + ": " + ncclGetErrorString(async));
    }
    cudaError_t e = waitForStream ? cudaStreamQuery(stream) : cudaSuccess;
    if (async == ncclSuccess && e == cudaSuccess)
      return;
    if (e != cudaSuccess && e != cudaErrorNotReady)
      check(e, ("cudaStreamQuery (" + std::string(what) + ")").c_str());
    if (deadline.passed()) {
      abort();
      throw std::runtime_error(deadline.message(what));
    }
    std::this_thread::yield();
  }
}

void NcclCommunicator::enqueued(int result, const char *what) {
  auto started = ncclResult_t(result);
  if (started != ncclSuccess && started != ncclInProgress)
    throw std::runtime_error(std::string(what) + ": " + ncclGetErrorString(started));
  // Nothing else may use a non-blocking communicator until the call is enqueued. This waits
  // for the enqueue, not for the stream.
  if (started == ncclInProgress)
    watch(what, /*stream=*/false);
}

void NcclCommunicator::runAllReduce(void *data, size_t count) {
  enqueued(ncclAllReduce(data, data, count, ncclBfloat16, ncclSum, comm, stream),
           "ncclAllReduce");
}

void NcclCommunicator::runAllReduceSums(float *data, size_t count) {
  enqueued(ncclAllReduce(data, data, count, ncclFloat, ncclSum, comm, stream),
           "ncclAllReduce (fp32)");
}

void NcclCommunicator::runAllGather(const void *in, size_t count, void *out) {
  enqueued(ncclAllGather(in, out, count, ncclBfloat16, comm, stream), "ncclAllGather");
}

void NcclCommunicator::runReduceScatter(const void *in, size_t count, void *out) {
  enqueued(ncclReduceScatter(in, out, count, ncclBfloat16, ncclSum, comm, stream),
           "ncclReduceScatter");
}

void NcclCommunicator::runAllToAll(const void *in, size_t count, void *out) {
  // One send and one receive per peer, grouped: NCCL's own all-to-all, which also runs on
  // the NCCL releases older than 2.28's ncclAlltoAll.
  auto *from = static_cast<const act *>(in);
  auto *to = static_cast<act *>(out);
  enqueued(ncclGroupStart(), "ncclGroupStart");
  for (int peer = 0; peer < world; ++peer) {
    enqueued(ncclSend(from + peer * count, count, ncclBfloat16, peer, comm, stream), "ncclSend");
    enqueued(ncclRecv(to + peer * count, count, ncclBfloat16, peer, comm, stream), "ncclRecv");
  }
  enqueued(ncclGroupEnd(), "ncclGroupEnd (all-to-all)");
}

void NcclCommunicator::runSend(const void *data, size_t count, int peer) {
  enqueued(ncclSend(data, count, ncclBfloat16, peer, comm, stream), "ncclSend");
}

void NcclCommunicator::runRecv(void *data, size_t count, int peer) {
  enqueued(ncclRecv(data, count, ncclBfloat16, peer, comm, stream), "ncclRecv");
}

HostStagedCommunicator::HostStagedCommunicator(Communicator &host, cudaStream_t stream)
    : Communicator(host.rank, host.world, sizeof(act)), host(host), stream(stream) {}

namespace {
float toFloat(act x) { return __bfloat162float(x); }
float toFloat(float x) { return x; }
template <typename Element> Element fromFloat(float x);
template <> act fromFloat<act>(float x) { return __float2bfloat16(x); }
template <> float fromFloat<float>(float x) { return x; }
} // namespace

template <typename Element, typename Fn>
void HostStagedCommunicator::staged(const void *in, size_t inCount, void *out, size_t outCount,
                                    Fn fn) {
  std::vector<Element> copies(std::max(inCount, outCount));
  // A message received has nothing to take to the host, one sent nothing to bring back.
  if (inCount > 0) {
    check(cudaMemcpyAsync(copies.data(), in, inCount * sizeof(Element),
                          cudaMemcpyDeviceToHost, stream),
          "cudaMemcpyAsync (to the host)");
    check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  }
  std::vector<float> a(inCount), b(outCount);
  for (size_t i = 0; i < inCount; ++i)
    a[i] = toFloat(copies[i]);
  host.label(labelModule, labelTokens);
  fn(a.data(), b.data());
  if (outCount == 0)
    return;
  for (size_t i = 0; i < outCount; ++i)
    copies[i] = fromFloat<Element>(b[i]);
  check(cudaMemcpyAsync(out, copies.data(), outCount * sizeof(Element), cudaMemcpyHostToDevice,
                        stream),
        "cudaMemcpyAsync (to the device)");
  check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
}

void HostStagedCommunicator::runAllReduce(void *data, size_t count) {
  staged<act>(data, count, data, count, [&](float *a, float *b) {
    host.allReduce(a, count);
    std::copy(a, a + count, b);
  });
}

void HostStagedCommunicator::runAllReduceSums(float *data, size_t count) {
  staged<float>(data, count, data, count, [&](float *a, float *b) {
    host.allReduceSums(a, count);
    std::copy(a, a + count, b);
  });
}

void HostStagedCommunicator::runAllGather(const void *in, size_t count, void *out) {
  staged<act>(in, count, out, count * world,
              [&](const float *a, float *b) { host.allGather(a, count, b); });
}

void HostStagedCommunicator::runReduceScatter(const void *in, size_t count, void *out) {
  staged<act>(in, count * world, out, count,
              [&](const float *a, float *b) { host.reduceScatter(a, count, b); });
}

void HostStagedCommunicator::runAllToAll(const void *in, size_t count, void *out) {
  staged<act>(in, count * world, out, count * world,
              [&](const float *a, float *b) { host.allToAll(a, count, b); });
}

void HostStagedCommunicator::runSend(const void *data, size_t count, int peer) {
  staged<act>(data, count, nullptr, 0,
              [&](const float *a, float *) { host.send(a, count, peer); });
}

void HostStagedCommunicator::runRecv(void *data, size_t count, int peer) {
  staged<act>(nullptr, 0, data, count,
              [&](const float *, float *b) { host.recv(b, count, peer); });
}

} // namespace tpcrt::cuda
