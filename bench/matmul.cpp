// linear's rates per weight type (fp32, bf16, f16, and ggml's block types tpc holds) on
// one thread, as the CPU backend runs it.
// A decode step's matrix-vector product is memory-bound: each shape is timed over enough
// copies of W (256 MiB of weights, eight times the L3 of the machine it was written on, held
// as the CPU backend holds them, in huge pages where the system gives them) that every
// product streams W from memory, and the rate is the weight bytes read per second, to
// compare with bench/read_bandwidth.cpp's. A prefill (128 rows) is compute-bound: GFLOP/s on
// one W. The quantized types are timed on shapes larger than the L3 (whole blocks of 256
// columns), next to fp32 and bf16.
// Best of RUNS. Built with the project (build/bin/tpc-matmul-bench, runtime/CMakeLists.txt).
//
//   tpc-matmul-bench [RUNS]          decode and prefill rates
//   tpc-matmul-bench panels [RUNS]   prefill rates of bf16 and f16 per panel size
//   tpc-matmul-bench scalar [RUNS]   decode and prefill without the AVX2 kernels
//   tpc-matmul-bench quantized [RUNS]  decode and prefill of the quantized types alone
//   tpc-matmul-bench quantized-avx2 [RUNS]  the same without the AVX-512 quantized kernels
//   tpc-matmul-bench batched [RUNS]  decode of 8 rows of x against 1 (a batch's step)
//   tpc-matmul-bench walks [RUNS]    the float kernels' walks of W, each pinned, 1 and 8 rows
//   tpc-matmul-bench int8 [RUNS]     the K types' decode and prefill, exact and with
//                                    --int8-activations (x rounded to int8), in one run
//   tpc-matmul-bench limbs [RUNS]    the K types' exact decode, fp32 kernels against x in
//                                    16-bit limbs (cpu/limbs.h), alternated in one run
#include "tpcrt/cpu/context.h"
#include "tpcrt/cpu/kernels.h"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <random>
#include <string>
#include <vector>

using namespace tpcrt;
using namespace tpcrt::cpu;

namespace {

using Clock = std::chrono::steady_clock;
constexpr size_t kStreamBytes = size_t(256) << 20;

struct Shape {
  int64_t out, in;
};
constexpr Shape kShapes[] = {{576, 576}, {1536, 576}, {576, 1536}, {49152, 576}, {8192, 2048}};
constexpr DType kTypes[] = {DType::F32, DType::BF16, DType::F16};
constexpr Shape kQuantizedShapes[] = {{4096, 4096}, {14336, 4096}, {4096, 14336}};
constexpr DType kQuantizedTypes[] = {DType::F32,  DType::BF16, DType::Q8_0, DType::Q4_0,
                                     DType::Q4_1, DType::Q5_0, DType::Q5_1, DType::Q4_K,
                                     DType::Q5_K, DType::Q6_K, DType::MXFP4};

/// `count` weights of `type`, values uniform in [-1, 1), held as tpc holds its weights
/// (cpu::allocateStreamed: huge pages where the system gives them); of a quantized type,
/// random blocks with finite scales of about 1 / 16.
StreamedBuffer randomWeights(DType type, size_t count, unsigned seed) {
  StreamedBuffer weights(dtypeBytesFor(type, int64_t(count)));
  size_t stored = weights.size();
  std::byte *data = weights.data();
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(-1, 1);
  if (isQuantized(type)) {
    auto *block = reinterpret_cast<uint8_t *>(data);
    for (size_t i = 0; i < stored; ++i)
      block[i] = uint8_t(gen());
    // Where ggml's blocks keep their f16 d (Q6_K's last) and m or dmin.
    uint16_t scale = floatToF16(1.0f / 16);
    bool offset = type == DType::Q4_1 || type == DType::Q5_1 || type == DType::Q4_K ||
                  type == DType::Q5_K;
    for (size_t at = 0; at < stored; at += dtypeBlockBytes(type)) {
      if (type == DType::MXFP4) { // an E8M0 byte: 2^(124 - 128), the others' 1 / 16
        block[at] = 124;
        continue;
      }
      std::memcpy(block + at + (type == DType::Q6_K ? 208 : 0), &scale, sizeof scale);
      if (offset)
        std::memcpy(block + at + 2, &scale, sizeof scale);
    }
    return weights;
  }
  std::vector<float> values(count);
  for (float &v : values)
    v = dist(gen);
  narrow(values.data(), type, data, count);
  return weights;
}

std::vector<float> randomFloats(size_t count, unsigned seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(-1, 1);
  std::vector<float> values(count);
  for (float &v : values)
    v = dist(gen);
  return values;
}

double seconds(Clock::time_point since) {
  return std::chrono::duration<double>(Clock::now() - since).count();
}

/// The best time, seconds, of one decode product by W of `type` and `shape`, over enough
/// copies of W that each streams from memory.
double decodeTime(Shape shape, DType type, int runs, int64_t rows = 1) {
  size_t count = size_t(shape.out * shape.in), bytes = dtypeBytesFor(type, int64_t(count));
  size_t copies = std::max<size_t>(2, kStreamBytes / bytes);
  std::vector<StreamedBuffer> weights;
  for (size_t i = 0; i < copies; ++i)
    weights.push_back(randomWeights(type, count, unsigned(i)));
  std::vector<float> x = randomFloats(size_t(rows * shape.in), 7), y(size_t(rows * shape.out));
  double best = 1e30;
  for (int run = 0; run < runs + 1; ++run) { // the first run warms the pages up
    auto start = Clock::now();
    for (const StreamedBuffer &w : weights)
      linear(Host{}, x.data(), rows, shape.in, Matrix(w.data(), type), shape.out, nullptr,
             y.data());
    if (run > 0)
      best = std::min(best, seconds(start) / double(copies));
  }
  return best;
}

void decode(int runs) {
  std::printf("== decode: one row, ms per product and weight GB/s (best of %d)\n", runs);
  std::printf("%-12s %5s %10s %8s\n", "out x in", "type", "ms", "GB/s");
  for (Shape shape : kShapes) {
    for (DType type : kTypes) {
      double best = decodeTime(shape, type, runs);
      double bytes = double(dtypeBytesFor(type, shape.out * shape.in));
      std::printf("%5lldx%-6lld %5s %10.4f %8.2f\n", (long long)shape.out, (long long)shape.in,
                  dtypeName(type), best * 1e3, bytes / best / 1e9);
    }
  }
}

/// Decode of the quantized types against fp32 and bf16: ms, weight GB/s, and the speed-up
/// over bf16 (the time of a bf16 product over this one's).
void quantizedDecode(int runs) {
  std::printf("== decode, quantized weights: one row, ms per product, weight GB/s, speed-up "
              "over bf16 (best of %d)\n",
              runs);
  std::printf("%-12s %5s %10s %8s %8s\n", "out x in", "type", "ms", "GB/s", "vs bf16");
  for (Shape shape : kQuantizedShapes) {
    double bf16 = 0;
    for (DType type : kQuantizedTypes) {
      double best = decodeTime(shape, type, runs);
      if (type == DType::BF16)
        bf16 = best;
      double bytes = double(dtypeBytesFor(type, shape.out * shape.in));
      std::printf("%5lldx%-6lld %5s %10.4f %8.2f", (long long)shape.out, (long long)shape.in,
                  dtypeName(type), best * 1e3, bytes / best / 1e9);
      if (bf16 > 0)
        std::printf(" %7.2fx", bf16 / best);
      std::printf("\n");
      std::fflush(stdout);
    }
  }
}

/// A batch's decode step against one sequence's: the time of a product of 8 rows of x over
/// that of 1 row, each streaming W from memory (issue 48 asks for at most 1.5x a step), on
/// SmolLM2's and the 1B Llama's shapes; for the block types --int8-activations takes, also
/// with it (x rounded to int8), 1 and 8 rows.
void batchedDecode(int runs) {
  constexpr Shape kBatchShapes[] = {{576, 576}, {1536, 576}, {576, 1536}, {2048, 2048},
                                    {8192, 2048}, {2048, 8192}};
  constexpr DType kBatchTypes[] = {DType::F32,  DType::BF16, DType::Q8_0,
                                   DType::Q4_1, DType::Q4_K, DType::Q6_K};
  std::printf("== decode of 8 rows against 1: ms per product and the ratio, exact and with "
              "--int8-activations (best of %d)\n",
              runs);
  std::printf("%-12s %5s %9s %9s %6s %9s %9s %6s\n", "out x in", "type", "1 row", "8 rows", "x",
              "int8 1", "int8 8", "x");
  for (Shape shape : kBatchShapes)
    for (DType type : kBatchTypes) {
      if (shape.in % dtypeBlockElements(type))
        continue;
      double one = decodeTime(shape, type, runs, 1), eight = decodeTime(shape, type, runs, 8);
      std::printf("%5lldx%-6lld %5s %9.4f %9.4f %5.2fx", (long long)shape.out,
                  (long long)shape.in, dtypeName(type), one * 1e3, eight * 1e3, eight / one);
      if (isQuantized(type)) {
        setInt8Activations(true);
        one = decodeTime(shape, type, runs, 1);
        eight = decodeTime(shape, type, runs, 8);
        setInt8Activations(false);
        std::printf(" %9.4f %9.4f %5.2fx", one * 1e3, eight * 1e3, eight / one);
      }
      std::printf("\n");
      std::fflush(stdout);
    }
}

/// The float kernels' walks of W (docs/weights.md), each pinned in turn: ms per product of 1
/// and of 8 rows of x with W streamed from memory, the walks alternated within each run so
/// that drift on a shared machine touches them alike; best of `runs`. The walk timing would
/// choose is the fastest by 3% over walk 0 (KernelChoice).
void walkRates(int runs) {
  constexpr Shape kWalkShapes[] = {{576, 576},   {1536, 576},  {576, 1536},
                                   {2048, 2048}, {8192, 2048}, {2048, 8192}};
  const int walks = detail::floatWalks();
  std::printf("== the float kernels' walks of W: ms per product, each walk pinned (best of %d)\n",
              runs);
  std::printf("%-12s %5s %4s", "out x in", "type", "x");
  for (int walk = 0; walk < walks; ++walk)
    std::printf(" %8s%d", "walk ", walk);
  std::printf("  best\n");
  for (Shape shape : kWalkShapes)
    for (DType type : {DType::F32, DType::BF16}) {
      size_t count = size_t(shape.out * shape.in), bytes = dtypeBytesFor(type, int64_t(count));
      size_t copies = std::max<size_t>(2, kStreamBytes / bytes);
      std::vector<StreamedBuffer> weights;
      for (size_t i = 0; i < copies; ++i)
        weights.push_back(randomWeights(type, count, unsigned(i)));
      for (int64_t rows : {1, 8}) {
        std::vector<float> x = randomFloats(size_t(rows * shape.in), 7),
                           y(size_t(rows * shape.out));
        std::vector<double> best(size_t(walks), 1e30);
        for (int run = 0; run < runs + 1; ++run) // the first run warms the pages up
          for (int walk = 0; walk < walks; ++walk) {
            detail::forceFloatWalk(walk);
            auto start = Clock::now();
            for (const StreamedBuffer &w : weights)
              linear(Host{}, x.data(), rows, shape.in, Matrix(w.data(), type), shape.out,
                     nullptr, y.data());
            if (run > 0)
              best[size_t(walk)] = std::min(best[size_t(walk)], seconds(start) / double(copies));
          }
        std::printf("%5lldx%-6lld %5s %4lld", (long long)shape.out, (long long)shape.in,
                    dtypeName(type), (long long)rows);
        for (double b : best)
          std::printf(" %9.4f", b * 1e3);
        std::printf("  %d\n", int(std::min_element(best.begin(), best.end()) - best.begin()));
        std::fflush(stdout);
      }
    }
  detail::forceFloatWalk(-1);
}

/// The best prefill rate, GFLOP/s, of 128 rows by W of `type` and `shape`.
double prefillRate(Shape shape, DType type, int runs) {
  constexpr int64_t kRows = 128;
  StreamedBuffer w = randomWeights(type, size_t(shape.out * shape.in), 1);
  std::vector<float> x = randomFloats(size_t(kRows * shape.in), 7),
                     y(size_t(kRows * shape.out));
  double flops = 2.0 * kRows * double(shape.out) * double(shape.in), best = 1e30;
  // Enough repetitions of a product for about 0.2 s at 50 GFLOP/s.
  int repeats = std::max(1, int(1e10 / flops));
  for (int run = 0; run < runs + 1; ++run) {
    auto start = Clock::now();
    for (int i = 0; i < repeats; ++i)
      linear(Host{}, x.data(), kRows, shape.in, Matrix(w.data(), type), shape.out, nullptr,
             y.data());
    if (run > 0)
      best = std::min(best, seconds(start) / repeats);
  }
  return flops / best / 1e9;
}

/// Prefill of the quantized types against fp32 and bf16, GFLOP/s, on the first shape.
void quantizedPrefill(int runs) {
  std::printf("== prefill, quantized weights: 128 rows, GFLOP/s (best of %d)\n%-12s", runs,
              "out x in");
  for (DType type : kQuantizedTypes)
    std::printf(" %8s", dtypeName(type));
  Shape shape = kQuantizedShapes[0];
  std::printf("\n%5lldx%-6lld", (long long)shape.out, (long long)shape.in);
  for (DType type : kQuantizedTypes)
    std::printf(" %8.1f", prefillRate(shape, type, runs));
  std::printf("\n");
}

void prefill(int runs) {
  std::printf("== prefill: 128 rows, GFLOP/s (best of %d)\n", runs);
  std::printf("%-12s %8s %8s %8s\n", "out x in", "f32", "bf16", "f16");
  for (Shape shape : kShapes) {
    std::printf("%5lldx%-6lld", (long long)shape.out, (long long)shape.in);
    for (DType type : kTypes)
      std::printf(" %8.1f", prefillRate(shape, type, runs));
    std::printf("\n");
  }
}

/// The block types' decode (weight GB/s) and prefill (GFLOP/s) with fp32 x and with x rounded
/// to int8 (setInt8Activations), alternated in one run; the K types on every shape, the
/// others on the first.
void int8Rates(int runs) {
  std::printf("== block types, exact (fp32 x) and --int8-activations: decode weight GB/s, "
              "prefill of 128 rows GFLOP/s (best of %d)\n",
              runs);
  std::printf("%-12s %5s %9s %9s %6s %9s %9s %6s\n", "out x in", "type", "dec f32", "dec int8",
              "x", "pre f32", "pre int8", "x");
  for (Shape shape : kQuantizedShapes)
    for (DType type : kQuantizedTypes) {
      const bool firstShape =
          shape.in == kQuantizedShapes[0].in && shape.out == kQuantizedShapes[0].out;
      if (!isQuantized(type) || (!firstShape && dtypeBlockElements(type) != 256))
        continue;
      double bytes = double(dtypeBytesFor(type, shape.out * shape.in)), rate[2][2];
      for (int int8 = 0; int8 < 2; ++int8) {
        setInt8Activations(int8 == 1);
        rate[int8][0] = bytes / decodeTime(shape, type, runs) / 1e9;
        rate[int8][1] = shape.in == kQuantizedShapes[0].in ? prefillRate(shape, type, runs) : 0;
      }
      setInt8Activations(false);
      std::printf("%5lldx%-6lld %5s %9.2f %9.2f %5.2fx", (long long)shape.out,
                  (long long)shape.in, dtypeName(type), rate[0][0], rate[1][0],
                  rate[1][0] / rate[0][0]);
      if (rate[0][1] > 0)
        std::printf(" %9.1f %9.1f %5.2fx", rate[0][1], rate[1][1], rate[1][1] / rate[0][1]);
      std::printf("\n");
      std::fflush(stdout);
    }
}

/// The K types' one-row products by the fp32 kernels and with x in 16-bit limbs, each pinned
/// (detail::forceLimbs), alternated in one run, every shape: weight GB/s.
void limbsRates(int runs) {
  std::printf("== K types, exact decode: fp32 kernels and x in 16-bit limbs, weight GB/s "
              "(best of %d)\n",
              runs);
  std::printf("%-12s %5s %9s %9s %6s\n", "out x in", "type", "fp32", "limbs", "x");
  for (Shape shape : kQuantizedShapes)
    for (DType type : {DType::Q4_K, DType::Q5_K, DType::Q6_K}) {
      double bytes = double(dtypeBytesFor(type, shape.out * shape.in)), rate[2];
      for (int limbs = 0; limbs < 2; ++limbs) {
        detail::forceLimbs(limbs);
        rate[limbs] = bytes / decodeTime(shape, type, runs) / 1e9;
      }
      detail::forceLimbs(-1);
      std::printf("%5lldx%-6lld %5s %9.2f %9.2f %5.2fx\n", (long long)shape.out,
                  (long long)shape.in, dtypeName(type), rate[0], rate[1], rate[1] / rate[0]);
      std::fflush(stdout);
    }
}

void panels(int runs) {
  std::printf("== prefill: 128 rows, GFLOP/s per fp32 panel size (best of %d)\n", runs);
  for (DType type : {DType::BF16, DType::F16}) {
    std::printf("%s\n%-12s", dtypeName(type), "out x in");
    constexpr size_t kKiB[] = {64, 128, 256, 384, 512, 768, 1024, 2048};
    for (size_t kib : kKiB)
      std::printf(" %6zuK", kib);
    std::printf("\n");
    for (Shape shape : kShapes) {
      std::printf("%5lldx%-6lld", (long long)shape.out, (long long)shape.in);
      for (size_t kib : kKiB) {
        detail::setPanelBytes(kib << 10);
        std::printf(" %7.1f", prefillRate(shape, type, runs));
        std::fflush(stdout);
      }
      std::printf("\n");
    }
  }
  detail::setPanelBytes(size_t(1) << 20);
}

} // namespace

int main(int argc, char **argv) {
  std::string mode = argc > 1 && !std::isdigit(argv[1][0]) ? argv[1] : "";
  int runs = argc > (mode.empty() ? 1 : 2) ? std::atoi(argv[mode.empty() ? 1 : 2]) : 5;
  if (mode == "panels") {
    panels(runs);
    return 0;
  }
  if (mode == "batched") {
    batchedDecode(runs);
    return 0;
  }
  if (mode == "walks") {
    walkRates(runs);
    return 0;
  }
  if (mode == "limbs") {
    if (!detail::limbsKernelsFor(DType::Q4_K) && (detail::forceLimbs(1), true) &&
        !detail::limbsKernelsFor(DType::Q4_K)) {
      std::fprintf(stderr, "tpc-matmul-bench: this CPU has no AVX-512 VNNI: no limbs kernels\n");
      return 1;
    }
    limbsRates(runs);
    return 0;
  }
  if (mode == "int8") {
    setInt8Activations(true);
    std::printf("%s\n", matrixKernels().c_str());
    int8Rates(runs);
    return 0;
  }
  if (mode == "scalar")
    detail::forceScalarKernels(true);
  else if (mode == "quantized-avx2")
    detail::forceAvx2Kernels(true);
  else if (!mode.empty() && mode != "quantized") {
    std::fprintf(stderr,
                 "usage: tpc-matmul-bench "
                 "[panels|batched|walks|scalar|quantized|quantized-avx2|int8|limbs] [RUNS]\n");
    return 2;
  }
  std::printf("one-row kernels:");
  for (size_t i = 0; i < std::size(kDTypeLines); ++i)
    std::printf(" %s %s", dtypeName(DType(i)),
                detail::avx512KernelsFor(DType(i))   ? "AVX-512"
                : detail::vectorKernelsFor(DType(i)) ? "AVX2"
                                                     : "scalar");
  std::printf("\n");
  if (mode != "quantized" && mode != "quantized-avx2") {
    decode(runs);
    prefill(runs);
  }
  quantizedDecode(runs);
  quantizedPrefill(runs);
  return 0;
}
