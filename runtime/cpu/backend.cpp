// The CPU backend: the rank's Context (tpcrt/cpu/context.h) holds its weights (fp32, which the
// loader writes straight into, or matrices in bf16 or f16, which it narrows to), its KV caches and arena; the CPU program's forwards run on it,
// the matrix products on one OpenBLAS thread per rank. Also the CPU program's setForwards and
// runModel (tpcrt/program.h).
#include "tpcrt/backend.h"
#include "tpcrt/cpu/blas.h"
#include "tpcrt/program.h"

#include <cblas.h>

#include <algorithm>
#include <cstddef>
#include <cstdio>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <limits>
#include <stdexcept>

namespace tpcrt {

void Context::fail(const std::string &message) const {
  std::fprintf(stderr, "error: %s\n", message.c_str());
  if (comm)
    comm->recordExit(message);
  std::exit(1);
}

void Context::attach(Comm &group, bool variableGathers) {
  comm = &group;
  placement = std::make_unique<Collectives>(group.communicator(), memory, variableGathers);
}

/// The argmax of a row with a logit that is not finite (Backend::argmax).
constexpr int32_t kNotFinite = -2;

void Context::argmaxColumns(const float *in, int64_t rows, const std::vector<int64_t> &blocks,
                            const char *module) {
  // Each row's best of this rank as a (logit, id) pair of fp32 slots, the id's int32 bits in
  // the second (the communicator moves bytes; nothing adds them). A rank with no real column
  // of a row sends id -1, and one with a logit that is not finite (NaN or infinite) id -2,
  // which makes the row's argmax -2 whatever the others hold: the engine fails that request,
  // as it does where it reads the whole row (every tp decides alike).
  int64_t local = localWidth(blocks, tp);
  // Never empty (a forward's logits have a row at least, but a null data() must not reach the
  // communicator's copies even so).
  std::vector<float> mine(size_t(rows * 2) + 1), gathered(size_t(tp * rows * 2) + 1);
  auto pack = [](float value, int32_t id, float *pair) {
    pair[0] = value;
    std::memcpy(pair + 1, &id, sizeof id);
  };
  for (int64_t row = 0; row < rows; ++row) {
    const float *x = in + row * local;
    float best = 0;
    int32_t bestId = -1;
    bool finite = true;
    forEachPiece(blocks, tp, rank, [&](int64_t at, int64_t from, int64_t count, int64_t) {
      for (int64_t i = 0; i < count; ++i) {
        finite &= std::isfinite(x[at + i]);
        if (bestId < 0 || best < x[at + i]) { // pieces in column order: the first of equals
          best = x[at + i];
          bestId = int32_t(from + i);
        }
      }
    });
    if (!finite) {
      best = 0;
      bestId = kNotFinite;
    }
    pack(best, bestId, &mine[size_t(row * 2)]);
  }
  Communicator &communicator = comm->communicator();
  communicator.label(module, rows);
  communicator.allGather(mine.data(), size_t(rows * 2), gathered.data());
  argmax.assign(size_t(rows), -1);
  for (int64_t row = 0; row < rows; ++row) {
    float best = 0;
    int64_t &bestId = argmax[size_t(row)];
    for (int r = 0; r < tp; ++r) {
      const float *pair = &gathered[size_t((int64_t(r) * rows + row) * 2)];
      int32_t id;
      std::memcpy(&id, pair + 1, sizeof id);
      if (id == kNotFinite) {
        bestId = kNotFinite;
        break;
      }
      if (id >= 0 && (bestId < 0 || best < pair[0] || (pair[0] == best && id < bestId))) {
        best = pair[0];
        bestId = id;
      }
    }
    if (bestId == -1)
      fail("internal error: no rank holds a logit of row " + std::to_string(row));
  }
  argmaxReady = true;
}

void Context::argmaxRows(const float *in, int64_t rows, int64_t cols) {
  argmax.assign(size_t(rows), kNotFinite);
  for (int64_t row = 0; row < rows; ++row) {
    const float *x = in + row * cols;
    int64_t best = 0;
    bool finite = true;
    for (int64_t i = 0; i < cols; ++i) {
      finite &= std::isfinite(x[i]);
      if (x[i] > x[best]) // the first of equals
        best = i;
    }
    if (finite)
      argmax[size_t(row)] = best;
  }
  argmaxReady = true;
}

const float *Context::poisonedLogits(const float *in, int64_t rows,
                                     const std::vector<int64_t> &blocks) {
  poisonNextLogits = false;
  int64_t local = localWidth(blocks, tp), first = -1;
  forEachPiece(blocks, tp, rank, [&](int64_t at, int64_t, int64_t count, int64_t) {
    if (first < 0 && count > 0)
      first = at;
  });
  if (first < 0)
    throw std::runtime_error("TPC_FAULT: rank " + std::to_string(rank) +
                             " holds no logit to make NaN");
  poisoned.assign(in, in + rows * local);
  for (int64_t row = 0; row < rows; ++row)
    poisoned[size_t(row * local + first)] = std::numeric_limits<float>::quiet_NaN();
  return poisoned.data();
}

namespace cpu {
namespace {

class CpuBackend final : public Backend {
public:
  /// The program's forwards: every token count, and token counts tp divides (or null);
  /// whether its gather of the logits finds the argmax on the ranks (ModelSpec).
  CpuBackend(ForwardFn forwardFn, ForwardFn sequenceParallelFn, bool argmaxOnRanks,
             std::vector<ForwardFn> stageFns)
      : forwardFn(forwardFn), sequenceParallelFn(sequenceParallelFn),
        argmaxOnRanks(argmaxOnRanks), stageFns(std::move(stageFns)) {}

  /// Batched steps over a paged cache; the argmax where the program's gather of the logits
  /// is marked for it (ModelSpec::argmaxOnRanks); matrices held in a file's blocks of every
  /// quantized DType (types.def's held types), and quantized to Q8_0 and Q4_0 (dtype.h's
  /// narrow).
  BackendCapabilities capabilities() const override {
    BackendCapabilities can;
    can.argmax = argmaxOnRanks;
    for (size_t i = 0; i < std::size(kDTypeLines); ++i)
      if (isQuantized(DType(i)))
        can.blocksAsStored.push_back(DType(i));
    can.blocksFromFloats = {DType::Q8_0, DType::Q4_0};
    can.kvCacheTypes = {DType::F32, DType::BF16, DType::F16, DType::Q8_0};
    can.pipelined = true;
    can.int8Activations = true;
    return can;
  }

  void attach(const RankInfo &rank) override {
    // One BLAS thread per rank unless asked otherwise: ranks share the machine's cores.
    if (!std::getenv("OPENBLAS_NUM_THREADS"))
      openblas_set_num_threads(1);
    cx.rank = rank.rank;
    cx.tp = rank.tp;
    cx.attach(*rank.comm, rank.variableGathers);
    if (rank.stages > 1) {
      // This rank's stage's forward, and the transfers over every stage's ranks.
      if (size_t(rank.stage) >= stageFns.size() || !stageFns[size_t(rank.stage)])
        throw std::runtime_error("internal error: the program has no forward for pipeline "
                                 "stage " + std::to_string(rank.stage));
      forwardFn = stageFns[size_t(rank.stage)];
      cx.stages = &rank.world->communicator();
    }
  }

  /// What the program says (tp-weight-storage's choice): fp32, or a matrix kept in bf16 or
  /// f16.
  DType weightType(const WeightDesc &desc) const override { return desc.dtype; }
  void allocateWeights(const std::vector<WeightDesc> &weights) override {
    std::vector<size_t> counts;
    std::vector<DType> types;
    for (const WeightDesc &weight : weights) {
      counts.push_back(size_t(weight.elements()));
      types.push_back(weight.dtype);
    }
    cx.weights.allocate(counts, types);
  }
  /// fp32 weights are read straight into place; the others are staged and narrowed.
  float *hostWeight(size_t i) override { return cx.weights.data(i); }
  /// Block-quantized weights are read as the file stores them.
  void *hostBlocks(size_t i) override {
    return isQuantized(cx.weights.type(i)) ? cx.weights.raw(i) : nullptr;
  }
  void writeWeight(size_t i, int64_t offset, const float *values, int64_t count) override {
    DType type = cx.weights.type(i); // one the driver asked capabilities() it can be given
    narrow(values, type, static_cast<std::byte *>(cx.weights.raw(i)) + dtypeBytesFor(type, offset),
           size_t(count));
  }
  bool generateWeight(size_t, uint64_t, const ParamDesc &, const SliceSpec &) override {
    return false; // the loader generates them into hostWeight, as it reads a checkpoint
  }

  DType kvCacheType() const override { return kvType; }
  void setKvCacheType(DType type) override { kvType = type; }
  void setInt8Activations(bool on) override { cpu::setInt8Activations(on); }
  uint64_t allocateCaches(const std::vector<KVCacheDesc> &layers, int64_t blockSize) override {
    uint64_t bytes = 0;
    for (const KVCacheDesc &layer : layers) {
      int64_t capacity = layer.blocks * blockSize;
      size_t keys = dtypeBytesFor(kvType, layer.keyWidth * capacity);
      // Zeroed, as a cache always was; in huge pages, as the weights (a long context's
      // decode step reads the cache as it reads them).
      cacheMemory.emplace_back(keys + dtypeBytesFor(kvType, layer.valueWidth * capacity), true);
      std::byte *base = cacheMemory.back().data();
      cx.caches.push_back({base, base + keys,
                           layer.blocks, blockSize, layer.keyWidth, layer.valueWidth, kvType,
                           layer.group});
      bytes += uint64_t(cacheMemory.back().size());
    }
    return bytes;
  }
  uint64_t allocateArena(int64_t perToken, int64_t tokens) override {
    // On cache lines, as the weights: a row of x the kernels load 64 bytes at a time must not
    // straddle two. A heap vector's rows did or did not, as malloc's history placed them: on
    // the Zen 4 core, one build's SmolLM2 f32 decode step took 22-25 ms where the build before
    // took 16-19 (the same kernel, walk pinned); on lines, 19-20.
    arena = cpu::StreamedBuffer(size_t(perToken * tokens) * sizeof(float), /*zeroed=*/true);
    cx.arena = reinterpret_cast<float *>(arena.data());
    return uint64_t(arena.size());
  }

  bool hasSequenceParallel() const override { return sequenceParallelFn != nullptr; }
  const float *forward(const Step &step, bool sequenceParallel) override {
    cx.step = &step;
    cx.argmaxReady = false;
    const float *logits = (sequenceParallel ? sequenceParallelFn : forwardFn)(
        cx, step.ids, step.positions, step.tokens);
    if (cx.poisonNextLogits) { // no gather of the logits (allGatherLogits) took the NaN
      cx.poisonNextLogits = false;
      throw std::runtime_error("TPC_FAULT: nan faults need logits split by vocabulary and "
                               "gathered from the ranks; this forward gathered none");
    }
    return logits;
  }
  const int64_t *argmax() const override { return cx.argmaxReady ? cx.argmax.data() : nullptr; }
  const float *receiveLogits(int64_t rows, int64_t cols, int64_t stage,
                             const char *module) override {
    Communicator &world = cx.pipeline();
    received.resize(size_t(rows * cols));
    world.label(module, rows);
    world.recv(received.data(), size_t(rows * cols), int(stage * cx.tp + cx.rank));
    return received.data();
  }
  void holdTransfers() override { cx.pipeline().holdSends(); }
  void releaseTransfers() override { cx.pipeline().releaseSends(); }
  bool injectFault() override { return false; }
  void perturbAttention() override { cx.attentionScaleFault = 1.0 + kPerturbation; }
  /// Where the program gathers the logits split by vocabulary through allGatherLogits (which
  /// tp-greedy-argmax marks on the CPU target: ModelSpec::argmaxOnRanks).
  bool poisonLogits() override {
    if (!argmaxOnRanks)
      return false;
    cx.poisonNextLogits = true;
    return true;
  }
  std::string describe() const override { return "CPU: " + matrixKernels(); }
  std::string describeChoices() const override { return kernelChoices(); }

private:
  ForwardFn forwardFn, sequenceParallelFn;
  bool argmaxOnRanks;
  std::vector<ForwardFn> stageFns; // each pipeline stage's, where there are several
  Context cx;
  std::vector<float> received; // receiveLogits' rows
  std::vector<StreamedBuffer> cacheMemory;
  StreamedBuffer arena;
  DType kvType = DType::F32; // --kv-cache-dtype
};

/// What main() told the runtime of the forwards; one program per binary, so one of these.
struct Forwards {
  ForwardFn forward = nullptr, sequenceParallel = nullptr;
  std::vector<ForwardFn> stages; // where the program has pipeline stages: the first is forward
};

Forwards &forwards() {
  static Forwards f;
  return f;
}

} // namespace
} // namespace cpu

void setForwards(ModelSpec *, ForwardFn forward, ForwardFn sequenceParallel) {
  cpu::forwards().forward = forward;
  cpu::forwards().sequenceParallel = sequenceParallel;
}

void setStageForward(ModelSpec *, int64_t stage, ForwardFn forward) {
  std::vector<ForwardFn> &stages = cpu::forwards().stages;
  if (stages.size() <= size_t(stage))
    stages.resize(size_t(stage) + 1);
  stages[size_t(stage)] = forward;
}

int runModel(ModelSpec *spec, int argc, char **argv) {
  // Before anything else (no thread, no connection yet): OpenBLAS on the kernels this CPU
  // runs best, which may execute the program again (tpcrt/cpu/blas.h).
  cpu::chooseBlasCore(argv);
  // TPC_FLOAT_WALK pins how the float matrix-vector kernels walk W instead of timing them
  // (for benchmarks: every walk gives the same bits).
  if (const char *walk = std::getenv("TPC_FLOAT_WALK"); walk && *walk) {
    char *end = nullptr;
    long n = std::strtol(walk, &end, 10);
    if (*end != '\0' || n < 0 || n >= cpu::detail::floatWalks()) {
      std::fprintf(stderr, "error: TPC_FLOAT_WALK must be a walk from 0 to %d, not '%s'\n",
                   cpu::detail::floatWalks() - 1, walk);
      return 2;
    }
    cpu::detail::forceFloatWalk(int(n));
  }
  // TPC_KQUANT_LIMBS: the K types' one-row products with x in 16-bit limbs (1, where the CPU
  // has them) or in fp32 (0), instead of as the CPU's rule says (cpu/limbs.h).
  if (const char *limbs = std::getenv("TPC_KQUANT_LIMBS"); limbs && *limbs) {
    if (std::strcmp(limbs, "0") != 0 && std::strcmp(limbs, "1") != 0) {
      std::fprintf(stderr, "error: TPC_KQUANT_LIMBS must be 0 or 1, not '%s'\n", limbs);
      return 2;
    }
    cpu::detail::forceLimbs(limbs[0] == '1' ? 1 : 0);
  }
  // The process's one backend. A rank that stops (Context::fail) calls exit from inside a
  // forward; exit's destructors then free these buffers, which nothing reads after.
  std::vector<ForwardFn> stages = cpu::forwards().stages;
  if (spec->stages > 1) {
    stages.resize(size_t(spec->stages));
    stages[0] = cpu::forwards().forward;
  }
  static cpu::CpuBackend backend(cpu::forwards().forward, cpu::forwards().sequenceParallel,
                                 spec->argmaxOnRanks, std::move(stages));
  return runModel(*spec, backend, argc, argv);
}

} // namespace tpcrt
