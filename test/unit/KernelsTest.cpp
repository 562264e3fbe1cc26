// Weight element types and the CPU kernels that read them: every bf16 and f16 widens exactly
// and fp32 narrows to the nearest (against the hardware's F16C conversions where the CPU has
// them, and always against an oracle computed in double); linear over fp32, bf16, f16 and
// ggml's quantized weights against a double reference over the widened weights, through the
// AVX2 kernels and without them; embedding of 16-bit and quantized tables; which OpenBLAS core
// the CPU backend asks for; Llama 4's sigmoid router, experts fed the weighted input and
// weightless norm against references written out here.
#include "tpcrt/cpu/blas.h"
#include "tpcrt/cpu/choice.h"
#include "tpcrt/cpu/kernels.h"
#include "tpcrt/dtype.h"

#include "GgmlBlocks.h"

#include <gtest/gtest.h>

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <iterator>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

using namespace tpcrt;
using namespace tpcrt::cpu;

namespace {

float fromBits(uint32_t bits) {
  float value;
  std::memcpy(&value, &bits, sizeof value);
  return value;
}
uint32_t toBits(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  return bits;
}

/// The value of a finite 16-bit float with `mantissaBits` and an exponent of `exponentBits`
/// (bias 2^(e-1) - 1), by its definition, in double: (-1)^s 2^(e - bias) (1 + m / 2^M), or
/// 2^(1 - bias) m / 2^M for e = 0. Infinity for the all-ones exponent (NaNs are not asked).
double definedValue(uint16_t bits, int exponentBits, int mantissaBits) {
  int bias = (1 << (exponentBits - 1)) - 1;
  int exponent = (bits >> mantissaBits) & ((1 << exponentBits) - 1);
  double mantissa = bits & ((1 << mantissaBits) - 1);
  double sign = bits & 0x8000 ? -1 : 1;
  if (exponent == (1 << exponentBits) - 1)
    return sign * INFINITY;
  if (exponent == 0)
    return sign * std::ldexp(mantissa, 1 - bias - mantissaBits);
  return sign * std::ldexp(1 + std::ldexp(mantissa, -mantissaBits), exponent - bias);
}
double bf16Value(uint16_t bits) { return definedValue(bits, 8, 7); }
double f16Value(uint16_t bits) { return definedValue(bits, 5, 10); }

/// The 16-bit pattern nearest `x` (ties to the even pattern; overflow to infinity), by a
/// search over the positive patterns' defined values: the patterns are ordered as their values,
/// and x is compared with the midpoints between neighbours, which double holds exactly. For
/// overflow the pattern after the largest finite one counts as 2^(emax + 1), so that x from
/// the midpoint between them up rounds to infinity (that pattern, which is even).
uint16_t nearestOracle(float x, uint16_t infinity, double (*value)(uint16_t)) {
  uint16_t sign = std::signbit(x) ? 0x8000 : 0;
  double magnitude = std::fabs(double(x));
  auto at = [&](uint16_t bits) {
    return bits == infinity ? 2 * value(uint16_t(infinity - 1)) - value(uint16_t(infinity - 2))
                            : value(bits);
  };
  if (magnitude >= at(infinity))
    return uint16_t(sign | infinity);
  uint16_t low = 0, high = infinity; // value(low) <= magnitude < at(high)
  while (high - low > 1) {
    uint16_t middle = uint16_t((low + high) / 2);
    (at(middle) <= magnitude ? low : high) = middle;
  }
  double midpoint = (at(low) + at(high)) / 2;
  uint16_t nearest = magnitude < midpoint   ? low
                     : magnitude > midpoint ? high
                     : (low & 1)            ? high
                                            : low;
  return uint16_t(sign | nearest);
}

#if defined(__x86_64__)
bool hasF16c() { return __builtin_cpu_supports("f16c"); }
__attribute__((target("f16c"))) float hardwareF16ToFloat(uint16_t bits) {
  return _cvtsh_ss(bits);
}
__attribute__((target("f16c"))) uint16_t hardwareFloatToF16(float value) {
  return uint16_t(_cvtss_sh(value, _MM_FROUND_TO_NEAREST_INT));
}
#else
bool hasF16c() { return false; }
float hardwareF16ToFloat(uint16_t) { return 0; }
uint16_t hardwareFloatToF16(float) { return 0; }
#endif

/// Float bit patterns for the narrowing tests: a third uniform over all 2^32, a third with
/// exponents around f16's range, a third at or next to a 16-bit tie (the dropped bits exactly
/// half, or one off).
std::vector<float> testFloats(size_t count, int mantissaBits) {
  std::mt19937 gen(12345);
  std::vector<float> values;
  values.reserve(count);
  int dropped = 23 - mantissaBits;
  for (size_t i = 0; i < count; ++i) {
    uint32_t bits = uint32_t(gen());
    switch (i % 3) {
    case 0:
      break;
    case 1: // exponents 2^-30 .. 2^17
      bits = (bits & 0x807fffffu) | (uint32_t(97 + gen() % 48) << 23);
      break;
    case 2: { // a tie, or one ulp either side of one
      uint32_t half = 1u << (dropped - 1);
      bits = (bits & ~((1u << dropped) - 1)) | half;
      bits += uint32_t(int(gen() % 3) - 1);
      break;
    }
    }
    values.push_back(fromBits(bits));
  }
  // Edges: zeros, the extremes of each format, their neighbours and halfway points.
  for (uint32_t bits : {0x00000000u, 0x80000000u, 0x7f800000u, 0xff800000u, 0x7f7fffffu,
                        0x00000001u, 0x00800000u, 0x477fe000u, 0x477fefffu, 0x477ff000u,
                        0x477fffffu, 0x47800000u, 0x33000000u, 0x33000001u, 0x32ffffffu,
                        0x387fc000u, 0x387fe000u, 0x38800000u, 0x7f7f8000u, 0x7f7f7fffu})
    values.push_back(fromBits(bits));
  return values;
}

bool isNan16(uint16_t bits, uint16_t infinity) {
  return (bits & infinity) == infinity && (bits & ~infinity & 0x7fff) != 0;
}

} // namespace

TEST(DType, EveryBf16WidensToItsValue) {
  std::vector<uint16_t> all(65536);
  for (uint32_t bits = 0; bits < 65536; ++bits)
    all[bits] = uint16_t(bits);
  std::vector<float> widened(65536);
  widen(all.data(), DType::BF16, widened.data(), all.size());
  for (uint32_t bits = 0; bits < 65536; ++bits) {
    float value = bf16ToFloat(uint16_t(bits));
    ASSERT_EQ(toBits(value), bits << 16) << bits; // the top half of the fp32
    ASSERT_EQ(toBits(widened[bits]), bits << 16) << bits;
    if (!std::isnan(value)) {
      ASSERT_EQ(double(value), bf16Value(uint16_t(bits))) << bits;
    }
  }
}

TEST(DType, EveryF16WidensToItsValue) {
  std::vector<uint16_t> all(65536);
  for (uint32_t bits = 0; bits < 65536; ++bits)
    all[bits] = uint16_t(bits);
  std::vector<float> widened(65536);
  widen(all.data(), DType::F16, widened.data(), all.size());
  for (uint32_t bits = 0; bits < 65536; ++bits) {
    float value = f16ToFloat(uint16_t(bits));
    ASSERT_EQ(toBits(widened[bits]), toBits(value)) << bits;
    if (isNan16(uint16_t(bits), 0x7c00)) {
      // A NaN stays one, with its sign and payload (the hardware also sets the quiet bit).
      ASSERT_TRUE(std::isnan(value)) << bits;
      ASSERT_EQ(toBits(value) & 0x803fe000u,
                ((bits & 0x8000u) << 16) | ((bits & 0x1ffu) << 13))
          << bits;
    } else {
      ASSERT_EQ(double(value), f16Value(uint16_t(bits))) << bits;
    }
    if (hasF16c() && !isNan16(uint16_t(bits), 0x7c00)) {
      ASSERT_EQ(toBits(value), toBits(hardwareF16ToFloat(uint16_t(bits)))) << bits;
    }
  }
}

TEST(DType, FloatToBf16IsNearestEven) {
  std::vector<float> values = testFloats(3000000, 7);
  std::vector<uint16_t> narrowed(values.size());
  narrow(values.data(), DType::BF16, narrowed.data(), values.size());
  for (size_t i = 0; i < values.size(); ++i) {
    float x = values[i];
    uint16_t got = floatToBf16(x);
    ASSERT_EQ(narrowed[i], got);
    if (std::isnan(x)) {
      ASSERT_TRUE(isNan16(got, 0x7f80)) << toBits(x);
      ASSERT_EQ(got & 0x8000, (toBits(x) >> 16) & 0x8000);
      continue;
    }
    ASSERT_EQ(got, nearestOracle(x, 0x7f80, bf16Value)) << std::hex << toBits(x);
  }
}

TEST(DType, FloatToF16IsNearestEven) {
  std::vector<float> values = testFloats(3000000, 10);
  std::vector<uint16_t> narrowed(values.size());
  narrow(values.data(), DType::F16, narrowed.data(), values.size());
  bool hardware = hasF16c();
  for (size_t i = 0; i < values.size(); ++i) {
    float x = values[i];
    uint16_t got = floatToF16(x);
    ASSERT_EQ(narrowed[i], got);
    if (hardware) { // NaNs included: quiet, sign and the payload's top bits kept
      ASSERT_EQ(got, hardwareFloatToF16(x)) << std::hex << toBits(x);
    }
    if (std::isnan(x)) {
      ASSERT_TRUE(isNan16(got, 0x7c00)) << toBits(x);
      continue;
    }
    ASSERT_EQ(got, nearestOracle(x, 0x7c00, f16Value)) << std::hex << toBits(x);
  }
}

TEST(DType, NamesRoundTrip) {
  for (DType type : {DType::F32, DType::BF16, DType::F16})
    EXPECT_EQ(parseDType(dtypeName(type)), type);
  EXPECT_EQ(parseDType("BF16"), DType::BF16);
  EXPECT_EQ(parseDType("F8_E4M3"), std::nullopt);
}

namespace {

/// Where a block of `type` keeps its f16 scales (d, and the offset's m or dmin where it has
/// one), from ggml's block structs (GgmlBlocks.h), and a magnitude for them that keeps the
/// elements within about [-1, 1]: one over the largest integer times its other scales.
struct BlockHalves {
  std::vector<size_t> offsets;
  float range;
};
BlockHalves blockHalves(DType type) {
  namespace g = tpc::test::ggml;
  switch (type) {
  case DType::Q8_0:
    return {{offsetof(g::block_q8_0, d)}, 1.0f / 128};
  case DType::Q4_0:
    return {{offsetof(g::block_q4_0, d)}, 1.0f / 8};
  case DType::Q4_1:
    return {{offsetof(g::block_q4_1, d), offsetof(g::block_q4_1, m)}, 1.0f / 15};
  case DType::Q5_0:
    return {{offsetof(g::block_q5_0, d)}, 1.0f / 16};
  case DType::Q5_1:
    return {{offsetof(g::block_q5_1, d), offsetof(g::block_q5_1, m)}, 1.0f / 31};
  case DType::Q4_K: // 6-bit scales and mins
    return {{offsetof(g::block_q4_K, d), offsetof(g::block_q4_K, dmin)}, 1.0f / (15 * 63)};
  case DType::Q5_K:
    return {{offsetof(g::block_q5_K, d), offsetof(g::block_q5_K, dmin)}, 1.0f / (31 * 63)};
  case DType::Q6_K: // int8 scales
    return {{offsetof(g::block_q6_K, d)}, 1.0f / (32 * 128)};
  default:
    ADD_FAILURE() << dtypeName(type) << " has no scales here";
    return {{}, 1};
  }
}

/// Weights of `type` for random values in [-1, 1), and those weights widened. A quantized
/// type's blocks are random bytes but for their f16 scales (blockHalves), which are finite,
/// random and of either sign (MXFP4's E8M0 scale: a small power of two); `count` is whole
/// blocks.
struct Weights {
  std::vector<uint8_t> stored;
  std::vector<float> widened;
  DType type;
  Weights(DType type, size_t count, unsigned seed)
      : stored(dtypeBytesFor(type, int64_t(count))), widened(count), type(type) {
    std::mt19937 gen(seed);
    std::uniform_real_distribution<float> dist(-1, 1);
    if (isQuantized(type)) {
      for (uint8_t &byte : stored)
        byte = uint8_t(gen());
      if (type == DType::MXFP4) { // an E8M0 scale of 2^-5 to 2^-2: elements within 1.5
        for (size_t at = 0; at < stored.size(); at += dtypeBlockBytes(type))
          stored[at] = uint8_t(123 + gen() % 4);
        widen(stored.data(), type, widened.data(), count);
        return;
      }
      BlockHalves halves = blockHalves(type);
      for (size_t at = 0; at < stored.size(); at += dtypeBlockBytes(type))
        for (size_t offset : halves.offsets) {
          uint16_t half = floatToF16(halves.range * dist(gen));
          std::memcpy(&stored[at + offset], &half, sizeof half);
        }
    } else {
      std::vector<float> values(count);
      for (float &v : values)
        v = dist(gen);
      narrow(values.data(), type, stored.data(), count);
    }
    widen(stored.data(), type, widened.data(), count);
  }
  Matrix matrix() const { return Matrix(stored.data(), type); }
};

/// Every block type tpc holds (types.def's held types).
const std::vector<DType> kQuantizedTypes = [] {
  std::vector<DType> types;
  for (size_t i = 0; i < std::size(kDTypeLines); ++i)
    if (isQuantized(DType(i)))
      types.push_back(DType(i));
  return types;
}();

std::vector<float> randomFloats(size_t n, unsigned seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(-1, 1);
  std::vector<float> v(n);
  for (float &x : v)
    x = dist(gen);
  return v;
}

/// linear against sum_c x[r, c] w[o, c] (+ bias[o]) in double, within 1e-5 of the sum of the
/// terms' magnitudes.
void checkLinear(DType type, int64_t rows, int64_t out, int64_t in, bool withBias) {
  SCOPED_TRACE(std::string(dtypeName(type)) + " rows " + std::to_string(rows) + " out " +
               std::to_string(out) + " in " + std::to_string(in) +
               (withBias ? " bias" : "") +
               (detail::avx512KernelsFor(type)   ? " avx512"
                : detail::vectorKernelsFor(type) ? " avx2"
                                                 : " scalar"));
  Weights w(type, size_t(out * in), unsigned(out * 31 + in));
  // x is not a 16-bit value anywhere: a kernel that rounded it would miss by ~1e-3.
  std::vector<float> x = randomFloats(size_t(rows * in), 3), bias = randomFloats(size_t(out), 4);
  std::vector<float> y(size_t(rows * out), NAN);
  linear(Host{}, x.data(), rows, in, w.matrix(), out, withBias ? bias.data() : nullptr, y.data());
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t o = 0; o < out; ++o) {
      double expected = withBias ? bias[size_t(o)] : 0, magnitude = std::fabs(expected);
      for (int64_t c = 0; c < in; ++c) {
        double term = double(x[size_t(r * in + c)]) * w.widened[size_t(o * in + c)];
        expected += term;
        magnitude += std::fabs(term);
      }
      ASSERT_NEAR(y[size_t(r * out + o)], expected, 1e-5 * magnitude + 1e-30)
          << "row " << r << " column " << o;
    }
}

struct ScalarKernels {
  explicit ScalarKernels(bool scalar) { detail::forceScalarKernels(scalar); }
  ~ScalarKernels() { detail::forceScalarKernels(false); }
};

/// The kernels a test runs: the best the CPU has, AVX2 at most, or scalar.
enum class Kernels { Best, Avx2, Scalar };
struct ForcedKernels {
  explicit ForcedKernels(Kernels kernels) {
    detail::forceAvx2Kernels(kernels == Kernels::Avx2);
    detail::forceScalarKernels(kernels == Kernels::Scalar);
  }
  ~ForcedKernels() {
    detail::forceAvx2Kernels(false);
    detail::forceScalarKernels(false);
  }
};

} // namespace

TEST(Linear, ForcingScalarKernelsTurnsTheVectorOnesOff) {
  ScalarKernels scalar(true);
  for (size_t i = 0; i < std::size(kDTypeLines); ++i)
    EXPECT_FALSE(detail::vectorKernelsFor(DType(i)));
}

TEST(Linear, EveryHeldBlockTypeIsOneTheTestsCover) {
  // The K-quant mixes llama.cpp writes (Q4_K_M, Q5_K_M: Q4_K or Q5_K with Q6_K, and Q5_0 or
  // Q5_1 where rows are not 256-blocks), the legacy types and MXFP4 (GPT-OSS's experts) are
  // all held as stored.
  std::vector<std::string> names;
  for (DType type : kQuantizedTypes)
    names.push_back(dtypeName(type));
  EXPECT_EQ(names, (std::vector<std::string>{"q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "q4_k",
                                              "q5_k", "q6_k", "mxfp4"}));
}

TEST(Linear, EveryTypeAndShapeMatchesDouble) {
  struct Shape {
    int64_t rows, out, in;
  };
  // Tails in both directions (out % 8, in % 16 and in % 8), a decode step's shapes, and
  // prefills over several panels.
  const Shape shapes[] = {{1, 13, 37}, {1, 8, 16}, {1, 21, 40}, {1, 7, 5},    {1, 576, 1536},
                          {1, 1536, 576}, {3, 13, 37}, {8, 64, 24}, {7, 576, 1536}};
  for (Kernels kernels : {Kernels::Best, Kernels::Avx2, Kernels::Scalar}) {
    ForcedKernels forced(kernels);
    for (DType type : {DType::F32, DType::BF16, DType::F16})
      for (const Shape &shape : shapes)
        for (bool bias : {false, true})
          checkLinear(type, shape.rows, shape.out, shape.in, bias);
  }
}

TEST(Linear, ABatchsRowsAreEachRowAloneBitForBit) {
  // Two to eight rows of x (a batch's decode step) through a float W: each row of the result
  // is exactly the one-row product's, whatever the batch holds; nine rows (a prefill) may
  // differ. Shapes with tails of W's eight- and two-row groups and of the sixteen-column
  // steps; AVX-512 (where the CPU has it) and AVX2.
  struct Shape {
    int64_t out, in;
  };
  for (Kernels kernels : {Kernels::Best, Kernels::Avx2})
    for (DType type : {DType::F32, DType::BF16, DType::F16})
      for (Shape shape : {Shape{13, 37}, Shape{64, 48}, Shape{21, 576}})
        for (int64_t rows = 2; rows <= 8; ++rows) {
          ForcedKernels forced(kernels);
          SCOPED_TRACE(std::string(dtypeName(type)) + " rows " + std::to_string(rows) + " out " +
                       std::to_string(shape.out) + " in " + std::to_string(shape.in) +
                       (kernels == Kernels::Avx2 ? " AVX2" : " best"));
          Weights w(type, size_t(shape.out * shape.in), unsigned(shape.out + rows));
          std::vector<float> x = randomFloats(size_t(rows * shape.in), 5),
                             bias = randomFloats(size_t(shape.out), 6);
          std::vector<float> batched(size_t(rows * shape.out)), alone(size_t(shape.out));
          linear(Host{}, x.data(), rows, shape.in, w.matrix(), shape.out, bias.data(),
                 batched.data());
          for (int64_t r = 0; r < rows; ++r) {
            linear(Host{}, x.data() + r * shape.in, 1, shape.in, w.matrix(), shape.out,
                   bias.data(), alone.data());
            for (int64_t o = 0; o < shape.out; ++o)
              ASSERT_EQ(batched[size_t(r * shape.out + o)], alone[size_t(o)])
                  << "row " << r << ", output " << o;
          }
        }
}

TEST(Linear, EveryWalkOfWGivesTheSameBits) {
  // The float types' AVX-512 kernels walk W in several ways (rows of W at once, the next
  // rows prefetched or not), one chosen by timing on the running CPU: each gives every
  // output the same bits, so the choice never changes an answer. Shapes with tails of the
  // one- to four-row groups and of the sixteen-column steps; one to eight rows of x.
  if (!detail::avx512KernelsFor(DType::F32))
    GTEST_SKIP() << "no AVX-512 on this CPU: one walk only";
  struct Shape {
    int64_t out, in;
  };
  struct Unforced {
    ~Unforced() { detail::forceFloatWalk(-1); }
  } unforced;
  ASSERT_GE(detail::floatWalks(), 8);
  for (DType type : {DType::F32, DType::BF16, DType::F16})
    for (Shape shape : {Shape{13, 37}, Shape{64, 48}, Shape{21, 576}, Shape{7, 5}, Shape{6, 16},
                        Shape{11, 40}})
      for (int64_t rows = 1; rows <= 8; ++rows) {
        SCOPED_TRACE(std::string(dtypeName(type)) + " rows " + std::to_string(rows) + " out " +
                     std::to_string(shape.out) + " in " + std::to_string(shape.in));
        Weights w(type, size_t(shape.out * shape.in), unsigned(shape.out * 7 + rows));
        std::vector<float> x = randomFloats(size_t(rows * shape.in), 8),
                           bias = randomFloats(size_t(shape.out), 9);
        std::vector<float> first(size_t(rows * shape.out), NAN);
        detail::forceFloatWalk(0);
        linear(Host{}, x.data(), rows, shape.in, w.matrix(), shape.out, bias.data(),
               first.data());
        for (int walk = 1; walk < detail::floatWalks(); ++walk) {
          std::vector<float> y(size_t(rows * shape.out), NAN);
          detail::forceFloatWalk(walk);
          linear(Host{}, x.data(), rows, shape.in, w.matrix(), shape.out, bias.data(), y.data());
          ASSERT_EQ(0, std::memcmp(first.data(), y.data(), y.size() * sizeof(float)))
              << "walk " << walk;
        }
      }
}

TEST(KernelChoice, TimesEachVariantInTurnThenKeepsTheFastest) {
  KernelChoice choice(3, 8);
  EXPECT_FALSE(choice.decided());
  for (int call = 0; call < 24; ++call) {
    int v = choice.next();
    EXPECT_EQ(v, call % 3);
    // Variant 2 reads 1 GB in 0.8 s, the others in 1 s; one of variant 2's calls was
    // interrupted (10 s), which the slowest eighth of its eight calls, left out, does not
    // count.
    double seconds = v == 2 ? (call == 2 ? 10.0 : 0.8) : 1.0;
    choice.record(v, seconds, 1e9);
  }
  ASSERT_TRUE(choice.decided());
  EXPECT_EQ(choice.chosen(), 2);
  EXPECT_EQ(choice.next(), 2);
  EXPECT_NEAR(choice.rate(0), 1e9, 1);
  EXPECT_NEAR(choice.rate(2), 1e9 / 0.8, 1e3);
  choice.record(0, 1e-9, 1e9); // after the choice, nothing moves it
  EXPECT_EQ(choice.chosen(), 2);
}

TEST(KernelChoice, TheDefaultStandsWithinTheMargin) {
  // 2% faster is within the noise of a shared machine: the default (variant 0) stays.
  KernelChoice choice(2, 8);
  for (int call = 0; call < 16; ++call)
    choice.record(call % 2, call % 2 ? 0.98 : 1.0, 1e9);
  ASSERT_TRUE(choice.decided());
  EXPECT_EQ(choice.chosen(), 0);
  // Bytes count, not calls: variant 1's calls read twice as much in 1.5x the time.
  KernelChoice bytes(2, 2);
  for (int call = 0; call < 4; ++call)
    bytes.record(call % 2, call % 2 ? 1.5 : 1.0, call % 2 ? 2e9 : 1e9);
  EXPECT_EQ(bytes.chosen(), 1);
}

TEST(KernelChoice, IgnoresCallsThatSayNothing) {
  KernelChoice choice(2, 1);
  choice.record(5, 1.0, 1e9);  // no such variant
  choice.record(-1, 1.0, 1e9);
  choice.record(0, 0.0, 1e9);  // a clock that did not move
  choice.record(0, NAN, 1e9);
  choice.record(1, 1.0, 0.0);  // nothing read
  EXPECT_FALSE(choice.decided());
  EXPECT_EQ(choice.next(), 0);
  EXPECT_EQ(choice.rate(0), 0.0);
  choice.record(0, 1.0, 1e9);
  choice.record(1, 2.0, 1e9);
  EXPECT_EQ(choice.chosen(), 0);
  EXPECT_TRUE(KernelChoice(1, 5).decided()); // one variant: nothing to time
  EXPECT_THROW(KernelChoice(0, 1), std::invalid_argument);
  EXPECT_THROW(KernelChoice(2, 0), std::invalid_argument);
}

TEST(Linear, QuantizedTypesMatchTheirWidenedWeights) {
  // Rows of one to three blocks and longer ones; out with tails of the eight- and two-row
  // groups (and under eight); one row (the gemv kernels), two to eight (a batch's decode
  // step: each block decoded once for every row) and nine (dequantized panels and sgemm).
  struct Shape {
    int64_t rows, out, blocks;
  };
  const Shape shapes[] = {{1, 1, 1},   {1, 13, 1},  {1, 21, 2}, {1, 8, 3},   {1, 67, 17},
                          {1, 37, 48},  {3, 13, 1},  {9, 21, 3}, {4, 67, 17}, {2, 8, 48},
                          {5, 37, 3},   {8, 13, 2}};
  // AVX-512 (where the CPU has it), AVX2 and scalar.
  for (Kernels kernels : {Kernels::Best, Kernels::Avx2, Kernels::Scalar}) {
    ForcedKernels forced(kernels);
    for (DType type : kQuantizedTypes)
      for (const Shape &shape : shapes) {
        int64_t in = shape.blocks * dtypeBlockElements(type);
        checkLinear(type, shape.rows, shape.out, in, shape.rows % 2 == 1);
      }
  }
}

TEST(Linear, PanelsOfEightRowsAndTheirTail) {
  detail::setPanelBytes(1); // eight rows a panel, whatever `in` is
  for (bool scalar : {false, true}) {
    ScalarKernels forced(scalar);
    for (DType type : {DType::BF16, DType::F16}) {
      checkLinear(type, 5, 13, 37, true);
      checkLinear(type, 2, 40, 100, false);
    }
    for (DType type : kQuantizedTypes)
      checkLinear(type, 3, 21, 2 * dtypeBlockElements(type), true);
  }
  detail::setPanelBytes(size_t(1) << 20);
}

TEST(Linear, VectorKernelsRunWhereTheCpuHasThem) {
  // On an x86-64 CPU with AVX2, FMA and F16C the tests above ran the AVX2 kernels too.
#if defined(__x86_64__)
  bool has = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  EXPECT_EQ(detail::vectorKernelsFor(DType::BF16), has);
  EXPECT_EQ(detail::vectorKernelsFor(DType::F16), has && __builtin_cpu_supports("f16c"));
  for (DType type : kQuantizedTypes) // their f16 scales convert with F16C
    EXPECT_EQ(detail::vectorKernelsFor(type), has && __builtin_cpu_supports("f16c"));
  // The one-row linear of the block types but Q4_1, and the linears of up to eight rows of the
  // float types, use AVX-512 F and BW where the CPU has them, and forcing AVX2 turns it off.
  bool wide = has && __builtin_cpu_supports("f16c") && __builtin_cpu_supports("avx512f") &&
              __builtin_cpu_supports("avx512bw");
  for (DType type : kQuantizedTypes)
    EXPECT_EQ(detail::avx512KernelsFor(type), wide && type != DType::Q4_1);
  for (DType type : {DType::F32, DType::BF16, DType::F16})
    EXPECT_EQ(detail::avx512KernelsFor(type), wide);
  ForcedKernels avx2(Kernels::Avx2);
  for (size_t i = 0; i < std::size(kDTypeLines); ++i)
    EXPECT_FALSE(detail::avx512KernelsFor(DType(i)));
#endif
}

namespace {

/// --int8-activations for a test's scope.
struct Int8Activations {
  Int8Activations() { setInt8Activations(true); }
  ~Int8Activations() { setInt8Activations(false); }
};

/// The int8 path's promise, from the outside: each output is the exact product (in double,
/// over the widened weights) of x with each element moved by at most half a step of its block
/// (of W's block size: 256 elements for the K types, 32 for the others), the step being max
/// |x| / 127 over the block; so it lies within the sum of |w| times half the step of the exact
/// one (plus fp32's rounding of the sums). Returns the largest distance from the exact
/// product, which a path that did not round x would not reach.
double checkInt8Linear(DType type, int64_t rows, int64_t out, int64_t blocks,
                       const std::vector<float> &x, bool withBias) {
  const int64_t size = dtypeBlockElements(type), in = blocks * size;
  SCOPED_TRACE(std::string(dtypeName(type)) + " rows " + std::to_string(rows) + " out " +
               std::to_string(out) + " blocks " + std::to_string(blocks));
  Weights w(type, size_t(out * in), unsigned(out * 7 + blocks));
  std::vector<float> bias = randomFloats(size_t(out), 9), y(size_t(rows * out), NAN);
  linear(Host{}, x.data(), rows, in, w.matrix(), out, withBias ? bias.data() : nullptr, y.data());
  double farthest = 0;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t o = 0; o < out; ++o) {
      double expected = withBias ? bias[size_t(o)] : 0, magnitude = std::fabs(expected), moved = 0;
      for (int64_t b = 0; b < blocks; ++b) {
        double largest = 0;
        for (int64_t c = b * size; c < (b + 1) * size; ++c)
          largest = std::max(largest, std::fabs(double(x[size_t(r * in + c)])));
        for (int64_t c = b * size; c < (b + 1) * size; ++c) {
          double weight = w.widened[size_t(o * in + c)], term = x[size_t(r * in + c)] * weight;
          expected += term;
          magnitude += std::fabs(term);
          moved += std::fabs(weight) * largest / 127 / 2;
        }
      }
      double got = y[size_t(r * out + o)];
      EXPECT_NEAR(got, expected, moved + 1e-5 * (magnitude + moved))
          << "row " << r << " column " << o;
      farthest = std::max(farthest, std::fabs(got - expected));
    }
  return farthest;
}

} // namespace

TEST(Int8Activations, EveryBlockTypeIsTheProductOfXRoundedToItsSteps) {
  // One row (a decode step), up to eight (a batch: the K types' one pass over W, of 1 to 8
  // rows), and more (a prefill: W a panel of sixteen rows at a time, eight rows of x a pass,
  // and tails of 1 to 7); rows of one to several blocks, an odd count of them too (the
  // 32-element types repack two blocks at a time); 2000 rows of W (the K types' one-row
  // kernel takes 256 KiB of W's rows a pass); with and without a bias. Q4_K, Q5_K, Q4_1 and Q5_1 carry
  // minimums, Q6_K its offset of 32, Q8_0 signed integers.
  Int8Activations on;
  for (DType type : kQuantizedTypes) {
    if (!detail::int8KernelsFor(type))
      GTEST_SKIP() << "the CPU has no AVX-512 VNNI";
    struct Shape {
      int64_t rows, out, blocks;
    };
    double farthest = 0;
    for (Shape shape : {Shape{1, 13, 1}, Shape{1, 37, 3}, Shape{3, 21, 2}, Shape{8, 9, 1},
                        Shape{9, 13, 2}, Shape{20, 600, 1}, Shape{2, 17, 5}, Shape{5, 13, 1},
                        Shape{7, 9, 2}, Shape{13, 21, 1}, Shape{15, 17, 2}, Shape{1, 2000, 2}}) {
      std::vector<float> x =
          randomFloats(size_t(shape.rows * shape.blocks * dtypeBlockElements(type)), 11);
      farthest = std::max(farthest, checkInt8Linear(type, shape.rows, shape.out, shape.blocks, x,
                                                    shape.rows % 2 == 1));
    }
    // Random x is not on its steps: rounding it moves the products by far more than fp32's
    // sums would (~1e-6 here).
    EXPECT_GT(farthest, 1e-3) << dtypeName(type) << ": x was not rounded";
  }
}

TEST(Int8Activations, XOnItsStepsGivesTheExactProduct) {
  // Every element a multiple of 2^-7 (a step) with each block reaching 127 steps: int8 holds
  // x exactly, so the products are fp32's within 1e-5 of their terms' magnitudes. Blocks of
  // zeros (a step of 0) too.
  Int8Activations on;
  for (DType type : kQuantizedTypes) {
    if (!detail::int8KernelsFor(type))
      GTEST_SKIP() << "the CPU has no AVX-512 VNNI";
    const int64_t size = dtypeBlockElements(type);
    for (int64_t rows : {3, 10}) {
      const int64_t blocks = 3, in = blocks * size, out = 19;
      std::mt19937 gen(5);
      std::vector<float> x(size_t(rows * in));
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < in; ++c) {
          int steps = c % size == 17 ? (r % 2 ? 127 : -127) : int(gen() % 255) - 127;
          x[size_t(r * in + c)] = r == 1 && c / size == 1 ? 0.0f : float(steps) / 128;
        }
      Weights w(type, size_t(out * in), 3);
      std::vector<float> y(size_t(rows * out));
      linear(Host{}, x.data(), rows, in, w.matrix(), out, nullptr, y.data());
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t o = 0; o < out; ++o) {
          double expected = 0, magnitude = 0;
          for (int64_t c = 0; c < in; ++c) {
            double term = double(x[size_t(r * in + c)]) * w.widened[size_t(o * in + c)];
            expected += term;
            magnitude += std::fabs(term);
          }
          ASSERT_NEAR(y[size_t(r * out + o)], expected, 1e-5 * magnitude + 1e-30)
              << dtypeName(type) << " rows " << rows << ", row " << r << " column " << o;
        }
    }
  }
}

TEST(Int8Activations, EachElementGoesToItsNearestStep) {
  // Elements 0.3 or 0.7 of a step past a multiple of it (the step 2^-7, fixed by one element
  // of 127 steps in each block): the nearest multiple is 0.3 away, the others 0.7 or more, so
  // truncating, or rounding with another step, misses the product of x rounded to nearest,
  // which the test computes from the definition, by far more than fp32's sums. The K types
  // at 1, 5 and 12 rows (both forms, partial passes), the 32-element types at 12 (their
  // panels; fewer rows keep the exact kernels, and give the unrounded product).
  Int8Activations on;
  for (DType type : kQuantizedTypes) {
    if (!detail::int8KernelsFor(type))
      GTEST_SKIP() << "the CPU has no AVX-512 VNNI";
    const int64_t size = dtypeBlockElements(type), blocks = 2, in = blocks * size, out = 23;
    for (int64_t rows : {1, 5, 12}) {
      const bool rounded = size == 256 || rows > 8;
      std::mt19937 gen{unsigned(rows)};
      std::vector<float> x(size_t(rows * in)), nearest(x.size());
      for (size_t c = 0; c < x.size(); ++c) {
        const double step = 0x1p-7;
        if (c % size_t(size) == 5) { // 127 steps, either sign: the block's step is 2^-7
          x[c] = float((gen() % 2 ? 127 : -127) * step);
          nearest[c] = x[c];
          continue;
        }
        int whole = int(gen() % 253) - 126; // -126 .. 126
        double frac = gen() % 2 ? 0.3 : 0.7;
        x[c] = float((whole + frac) * step);
        nearest[c] = float((whole + (frac < 0.5 ? 0 : 1)) * step);
      }
      Weights w(type, size_t(out * in), 21);
      std::vector<float> y(size_t(rows * out));
      linear(Host{}, x.data(), rows, in, w.matrix(), out, nullptr, y.data());
      const std::vector<float> &meant = rounded ? nearest : x;
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t o = 0; o < out; ++o) {
          double expected = 0, magnitude = 0;
          for (int64_t c = 0; c < in; ++c) {
            double term = double(meant[size_t(r * in + c)]) * w.widened[size_t(o * in + c)];
            expected += term;
            magnitude += std::fabs(term);
          }
          ASSERT_NEAR(y[size_t(r * out + o)], expected, 1e-5 * magnitude + 1e-30)
              << dtypeName(type) << " rows " << rows << ", row " << r << " column " << o;
        }
    }
  }
}

TEST(Int8Activations, TinyAndHugeBlocksRoundToTheirOwnSteps) {
  // A block whose largest element is below 3.7e-37 has a step whose inverse is no fp32 (127 /
  // max |x| overflows); one near fp32's largest has a step near 2.7e36. Both still round each
  // element to its own step: the products are x's within the rounding's bound, scaled. (A step
  // below fp32's normal range, 1.5e-36 here, keeps fewer bits, as fp32's own products of such
  // values do: the bound is widened by its spacing, 2^-149.)
  Int8Activations on;
  for (DType type : {DType::Q4_K, DType::Q8_0}) {
    if (!detail::int8KernelsFor(type))
      GTEST_SKIP() << "the CPU has no AVX-512 VNNI";
    const int64_t size = dtypeBlockElements(type), in = 2 * size;
    for (float scale : {1e-37f, 1e-36f, 1e-30f, 1e30f, 1e36f}) {
      SCOPED_TRACE(std::string(dtypeName(type)) + " " + std::to_string(scale));
      const int64_t rows = type == DType::Q8_0 ? 12 : 3; // Q8_0 rounds in panels only
      std::vector<float> x = randomFloats(size_t(rows * in), 12);
      for (float &v : x)
        v *= scale;
      Weights w(type, size_t(7 * in), 13);
      std::vector<float> y(size_t(rows * 7));
      linear(Host{}, x.data(), rows, in, w.matrix(), 7, nullptr, y.data());
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t o = 0; o < 7; ++o) {
          double expected = 0, magnitude = 0, moved = 0;
          for (int64_t b = 0; b < 2; ++b) {
            double largest = 0;
            for (int64_t c = b * size; c < (b + 1) * size; ++c)
              largest = std::max(largest, std::fabs(double(x[size_t(r * in + c)])));
            double step = largest / 127;
            double spacing = step < 0x1p-126 ? 0x1p-149 : 0; // a subnormal step's own rounding
            for (int64_t c = b * size; c < (b + 1) * size; ++c) {
              double weight = w.widened[size_t(o * in + c)];
              expected += double(x[size_t(r * in + c)]) * weight;
              magnitude += std::fabs(double(x[size_t(r * in + c)]) * weight);
              moved += std::fabs(weight) * (step / 2 + 127 * spacing);
            }
          }
          double got = y[size_t(r * 7 + o)];
          ASSERT_TRUE(std::isfinite(got)) << "row " << r << " column " << o;
          ASSERT_NEAR(got, expected, moved + 1e-5 * (magnitude + moved) + 1e-44)
              << "row " << r << " column " << o;
        }
    }
  }
}

TEST(Int8Activations, ANonFiniteElementSpoilsItsRowOnly) {
  // An infinity or NaN in x cannot be rounded to a step: its row's results are NaN (which the
  // engine reports), never a finite number that hides it; the other rows are unharmed. Three
  // rows (the K types' one pass; Q5_0's exact kernels) and twelve (panels).
  Int8Activations on;
  for (DType type : {DType::Q4_K, DType::Q5_0}) {
    if (!detail::int8KernelsFor(type))
      GTEST_SKIP() << "the CPU has no AVX-512 VNNI";
    for (int64_t rows : {3, 12}) {
      const int64_t in = 512, out = 5;
      for (float bad : {INFINITY, -INFINITY, NAN}) {
        std::vector<float> x = randomFloats(size_t(rows * in), 2);
        x[size_t(in + 300)] = bad;
        Weights w(type, size_t(out * in), 4);
        std::vector<float> y(size_t(rows * out));
        linear(Host{}, x.data(), rows, in, w.matrix(), out, nullptr, y.data());
        for (int64_t r = 0; r < rows; ++r)
          for (int64_t o = 0; o < out; ++o)
            EXPECT_EQ(!std::isfinite(y[size_t(r * out + o)]), r == 1)
                << dtypeName(type) << " " << bad << " rows " << rows << ", row " << r;
      }
    }
  }
}

TEST(Int8Activations, FloatTypesKeepTheExactKernels) {
  // The switch changes only the block types, and only on a CPU with AVX-512 VNNI: f32, bf16
  // and f16 products are bit for bit what they are with the switch off.
  const int64_t rows = 3, out = 11, in = 512;
  std::vector<float> x = randomFloats(size_t(rows * in), 8);
  for (DType type : {DType::F32, DType::BF16, DType::F16}) {
    Weights w(type, size_t(out * in), 6);
    std::vector<float> exact(size_t(rows * out)), switched(size_t(rows * out));
    linear(Host{}, x.data(), rows, in, w.matrix(), out, nullptr, exact.data());
    {
      Int8Activations on;
      EXPECT_FALSE(detail::int8KernelsFor(type)) << dtypeName(type);
      linear(Host{}, x.data(), rows, in, w.matrix(), out, nullptr, switched.data());
    }
    for (size_t k = 0; k < exact.size(); ++k)
      ASSERT_EQ(toBits(exact[k]), toBits(switched[k])) << dtypeName(type) << " element " << k;
  }
#if defined(__x86_64__)
  Int8Activations on;
  bool vnni = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
              __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni");
  for (DType type : kQuantizedTypes)
    EXPECT_EQ(detail::int8KernelsFor(type), vnni) << dtypeName(type);
#endif
}

/// Each looked-up row of `out` is the table's widened row, bit for bit, or zeros where the
/// id is another rank's (outside [rowOffset, rowOffset + rows)).
static void expectRows(const Weights &table, const int64_t *ids, int64_t tokens,
                       int64_t rowOffset, int64_t rows, int64_t width,
                       const std::vector<float> &out, const std::string &label) {
  for (int64_t t = 0; t < tokens; ++t) {
    int64_t local = ids[t] - rowOffset;
    for (int64_t c = 0; c < width; ++c) {
      float expected =
          local >= 0 && local < rows ? table.widened[size_t(local * width + c)] : 0.0f;
      ASSERT_EQ(toBits(out[size_t(t * width + c)]), toBits(expected))
          << label << " token " << t << " column " << c;
    }
  }
}

TEST(Embedding, SixteenBitTablesWidenTheirRows) {
  // The rank holds vocabulary rows [3, 7) of 10; other rows are zero, ids outside [0, 10) fail.
  const int64_t width = 37, rowOffset = 3, rows = 4, vocab = 10;
  for (DType type : {DType::F32, DType::BF16, DType::F16}) {
    Weights table(type, size_t(rows * width), 9);
    const int64_t ids[] = {3, 6, 0, 9, 5, 2, 7};
    const int64_t tokens = 7;
    std::vector<float> out(size_t(tokens * width), NAN);
    ASSERT_TRUE(embedding(Host{}, ids, tokens, table.matrix(), rowOffset, rows, vocab, width,
                          out.data()));
    expectRows(table, ids, tokens, rowOffset, rows, width, out, dtypeName(type));
    const int64_t bad[] = {4, 10};
    EXPECT_FALSE(embedding(Host{}, bad, 2, table.matrix(), rowOffset, rows, vocab, width,
                           out.data()));
    const int64_t negative[] = {-1};
    EXPECT_FALSE(embedding(Host{}, negative, 1, table.matrix(), rowOffset, rows, vocab, width,
                           out.data()));
  }
}

namespace {

/// The K types' one-row products with x in 16-bit limbs (cpu/limbs.h) for a test's scope,
/// or without them.
struct ForcedLimbs {
  explicit ForcedLimbs(int limbs) { detail::forceLimbs(limbs); }
  ~ForcedLimbs() { detail::forceLimbs(-1); }
};
constexpr DType kKTypes[] = {DType::Q4_K, DType::Q5_K, DType::Q6_K};

/// x' of the limbs' promise, from its definition: each block of 256 scaled by the power of
/// two that brings its largest |x| into [2^28, 2^29), rounded to the nearest integer (ties to
/// even), scaled back.
std::vector<float> onTheLimbsGrid(const std::vector<float> &x) {
  std::vector<float> out(x.size());
  for (size_t block = 0; block < x.size(); block += 256) {
    float most = 0;
    for (size_t i = block; i < block + 256; ++i)
      most = std::max(most, std::fabs(x[i]));
    int e = most > 0 ? 28 - std::ilogb(most) : 0;
    for (size_t i = block; i < block + 256; ++i)
      out[i] = float(std::ldexp(std::nearbyint(std::ldexp(double(x[i]), e)), -e));
  }
  return out;
}

/// y against the double product of `meant` (one row) and W's widened rows, within `relative`
/// of the terms' magnitudes.
void expectProduct(const std::vector<float> &y, const std::vector<float> &meant,
                   const Weights &w, int64_t out, int64_t in, const float *bias,
                   double relative) {
  for (int64_t o = 0; o < out; ++o) {
    double expected = bias ? bias[o] : 0, magnitude = std::fabs(expected);
    for (int64_t c = 0; c < in; ++c) {
      double term = double(meant[size_t(c)]) * w.widened[size_t(o * in + c)];
      expected += term;
      magnitude += std::fabs(term);
    }
    ASSERT_NEAR(y[size_t(o)], expected, relative * magnitude + 1e-30) << "column " << o;
  }
}

} // namespace

TEST(Limbs, XWithinItsBlocksRangeIsTakenExactly) {
  // Every element within 2^5 of its block's largest |x| (and full fp32 mantissas, which no
  // 16-bit value holds): both limbs hold it exactly, so the products are exact but for fp32's
  // rounding of each block's sums, far inside 2^-20 of the terms' magnitudes. Dropping the
  // low limb would miss by about 2^-15 of an element; a wrong scale or group, by far more.
  // Shapes with tails of the four rows at once; with and without a bias.
  for (DType type : kKTypes) {
    ForcedLimbs on(1);
    if (!detail::limbsKernelsFor(type))
      GTEST_SKIP() << "the CPU has no AVX-512 VNNI";
    for (int64_t out : {1, 3, 4, 13, 67})
      for (int64_t blocks : {1, 2, 17}) {
        SCOPED_TRACE(std::string(dtypeName(type)) + " out " + std::to_string(out) +
                     " blocks " + std::to_string(blocks));
        const int64_t in = blocks * 256;
        std::mt19937 gen{unsigned(out * 100 + blocks)};
        std::uniform_real_distribution<float> size(1.5f, 30.0f);
        std::vector<float> x(static_cast<size_t>(in));
        for (size_t c = 0; c < x.size(); ++c)
          x[c] = (gen() % 2 ? -1.0f : 1.0f) * size(gen) * (c / 256 % 2 ? 1e-3f : 1.0f);
        Weights w(type, size_t(out * in), unsigned(out + blocks));
        std::vector<float> bias = randomFloats(size_t(out), 4), y(size_t(out), NAN);
        const float *b = out % 2 ? bias.data() : nullptr;
        linear(Host{}, x.data(), 1, in, w.matrix(), out, b, y.data());
        expectProduct(y, x, w, out, in, b, 0x1p-20);
      }
  }
}

TEST(Limbs, SmallElementsGoToTheirBlocksGrid) {
  // A block whose largest |x| is 2^10 and whose other elements are about 1e-3 (full
  // mantissas): they move to the nearest multiple of 2^-18 (2^-29 of 2^11's range), which
  // the test computes from the definition. The product is x''s within fp32's rounding, and
  // within the promise's bound (sum of |w| times 2^-29 of the block's largest) of x's.
  for (DType type : kKTypes) {
    ForcedLimbs on(1);
    if (!detail::limbsKernelsFor(type))
      GTEST_SKIP() << "the CPU has no AVX-512 VNNI";
    const int64_t blocks = 3, in = blocks * 256, out = 9;
    std::mt19937 gen(17);
    std::uniform_real_distribution<float> small(-1e-3f, 1e-3f);
    std::vector<float> x(static_cast<size_t>(in));
    for (size_t c = 0; c < x.size(); ++c)
      x[c] = c % 256 == 40 ? (c / 256 % 2 ? -1024.0f : 1024.0f) : small(gen);
    std::vector<float> grid = onTheLimbsGrid(x);
    size_t moved = 0;
    for (size_t c = 0; c < x.size(); ++c)
      moved += grid[c] != x[c];
    ASSERT_GT(moved, x.size() / 2) << "the test's elements should need rounding";
    Weights w(type, size_t(out * in), 8);
    std::vector<float> y(size_t(out), NAN);
    linear(Host{}, x.data(), 1, in, w.matrix(), out, nullptr, y.data());
    SCOPED_TRACE(dtypeName(type));
    expectProduct(y, grid, w, out, in, nullptr, 0x1p-20);
    for (int64_t o = 0; o < out; ++o) {
      double exact = 0, sizes = 0, bound = 0;
      for (int64_t c = 0; c < in; ++c) {
        double weight = w.widened[size_t(o * in + c)];
        exact += double(x[size_t(c)]) * weight;
        sizes += std::fabs(double(x[size_t(c)]) * weight);
        bound += std::fabs(weight) * 0x1p-29 * 1024;
      }
      EXPECT_NEAR(y[size_t(o)], exact, bound + 0x1p-20 * sizes) << "column " << o;
    }
  }
}

TEST(Limbs, BlocksThatCannotSplitKeepTheFp32Kernels) {
  // A block holding an infinity or a NaN, or whose largest |x| is below 2^-64 or above 2^64:
  // the whole product is the fp32 kernels', bit for bit. A block of zeros splits.
  for (DType type : kKTypes) {
    ForcedLimbs on(1);
    if (!detail::limbsKernelsFor(type))
      GTEST_SKIP() << "the CPU has no AVX-512 VNNI";
    const int64_t blocks = 2, in = blocks * 256, out = 7;
    Weights w(type, size_t(out * in), 12);
    for (float odd : {INFINITY, NAN, 1e-30f, 1e30f, 0.0f}) {
      SCOPED_TRACE(std::string(dtypeName(type)) + " odd " + std::to_string(odd));
      std::vector<float> x = randomFloats(size_t(in), 6);
      if (odd == 0.0f || std::fabs(odd) < 1)
        std::fill(x.begin() + 256, x.end(), odd); // the whole second block
      else
        x[300] = odd;
      std::vector<float> limbs(size_t(out), -1), fp32(size_t(out), -2);
      linear(Host{}, x.data(), 1, in, w.matrix(), out, nullptr, limbs.data());
      {
        ForcedLimbs off(0);
        linear(Host{}, x.data(), 1, in, w.matrix(), out, nullptr, fp32.data());
      }
      if (odd == 0.0f) {
        expectProduct(limbs, x, w, out, in, nullptr, 1e-5);
        continue;
      }
      ASSERT_EQ(0, std::memcmp(limbs.data(), fp32.data(), limbs.size() * sizeof(float)));
    }
  }
}

TEST(Limbs, TheRulePicksThemWhereTheyWereMeasuredFaster) {
  EXPECT_TRUE(detail::limbsPreferredOn("AuthenticAMD", 25));  // Zen 4 (and Zen 3: no VNNI)
  EXPECT_FALSE(detail::limbsPreferredOn("AuthenticAMD", 26)); // Zen 5: not measured
  EXPECT_FALSE(detail::limbsPreferredOn("GenuineIntel", 6));  // Sapphire, Emerald Rapids
  // Forced on they run only where the CPU has them, and not while a test asks for AVX2 or
  // scalar kernels; never for other types.
  ForcedLimbs on(1);
#if defined(__x86_64__)
  bool vnni = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
              __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni") &&
              __builtin_cpu_supports("f16c") && __builtin_cpu_supports("avx2") &&
              __builtin_cpu_supports("fma");
  for (DType type : kKTypes)
    EXPECT_EQ(detail::limbsKernelsFor(type), vnni) << dtypeName(type);
#endif
  for (DType type : {DType::F32, DType::BF16, DType::Q8_0, DType::Q4_0, DType::MXFP4})
    EXPECT_FALSE(detail::limbsKernelsFor(type)) << dtypeName(type);
  ForcedKernels avx2(Kernels::Avx2);
  for (DType type : kKTypes)
    EXPECT_FALSE(detail::limbsKernelsFor(type)) << dtypeName(type);
}

TEST(Embedding, QuantizedTablesDequantizeTheirRowsAsWidenDoes) {
  // Bit for bit widen()'s values, through the AVX2 dequantizer and without it; rows of two
  // blocks, the rank holding vocabulary rows [2, 5) of 6.
  const int64_t rowOffset = 2, rows = 3, vocab = 6;
  const int64_t ids[] = {4, 0, 2, 3, 5, 4};
  const int64_t tokens = 6;
  for (bool scalar : {false, true}) {
    ScalarKernels forced(scalar);
    for (DType type : kQuantizedTypes) {
      const int64_t width = 2 * dtypeBlockElements(type);
      Weights table(type, size_t(rows * width), 11);
      std::vector<float> out(size_t(tokens * width), NAN);
      ASSERT_TRUE(embedding(Host{}, ids, tokens, table.matrix(), rowOffset, rows, vocab, width,
                            out.data()));
      expectRows(table, ids, tokens, rowOffset, rows, width, out,
                 std::string(dtypeName(type)) + (scalar ? " scalar" : ""));
    }
  }
}

namespace {
CpuFeatures sse() { return {}; }
CpuFeatures avx() {
  CpuFeatures f;
  f.avx = true;
  return f;
}
CpuFeatures avx2() {
  CpuFeatures f = avx();
  f.avx2 = f.fma = true;
  return f;
}
CpuFeatures avx512() {
  CpuFeatures f = avx2();
  f.avx512f = f.avx512bw = f.avx512dq = f.avx512vl = true;
  return f;
}
} // namespace

TEST(Blas, CoreForTheCpuAndTheLibrarysGuess) {
  struct Case {
    CpuFeatures cpu;
    const char *library;
    std::optional<std::string> expected;
  };
  CpuFeatures avx512WithoutVl = avx512();
  avx512WithoutVl.avx512vl = false;
  CpuFeatures avx2WithoutFma = avx2();
  avx2WithoutFma.fma = false;
  const Case cases[] = {
      {avx512(), "Prescott", "SkylakeX"},    // Zen 4 or Sapphire Rapids on 0.3.21
      {avx512(), "Haswell", "SkylakeX"},     // AVX2 kernels on an AVX-512 CPU
      {avx512(), "Zen", "SkylakeX"},         //
      {avx512(), "SkylakeX", std::nullopt},  // already the best
      {avx512(), "Cooperlake", std::nullopt},
      {avx512(), "SapphireRapids", std::nullopt},
      {avx512(), "SKYLAKEX", std::nullopt},  // a single-core build's name
      {avx512WithoutVl, "Prescott", "Haswell"},
      {avx2(), "Zen", std::nullopt},         // this machine (Zen 3)
      {avx2(), "Haswell", std::nullopt},
      {avx2(), "Prescott", "Haswell"},
      {avx2(), "Nehalem", "Haswell"},
      {avx2(), "Sandybridge", "Haswell"},
      {avx2(), "Excavator", "Haswell"},
      {avx2(), "Unknown", "Haswell"},
      {avx2(), "SkylakeX", std::nullopt},    // a user's choice is not ours to lower
      {avx2(), "Neoverse2", std::nullopt},   // a name tpc does not know: the library's stands
      {avx2WithoutFma, "Prescott", "Sandybridge"},
      {avx(), "Prescott", "Sandybridge"},
      {avx(), "Bulldozer", std::nullopt},
      {sse(), "Prescott", std::nullopt},
      {sse(), "Katmai", std::nullopt},
  };
  for (const Case &c : cases)
    EXPECT_EQ(betterBlasCore(c.cpu, c.library), c.expected) << c.library;
}

TEST(Blas, CoreIsas) {
  EXPECT_EQ(blasCoreIsa("Prescott"), BlasIsa::Sse);
  EXPECT_EQ(blasCoreIsa("sandybridge"), BlasIsa::Avx);
  EXPECT_EQ(blasCoreIsa("Zen"), BlasIsa::Avx2);
  EXPECT_EQ(blasCoreIsa("HASWELL"), BlasIsa::Avx2);
  EXPECT_EQ(blasCoreIsa("Cooperlake"), BlasIsa::Avx512);
  EXPECT_EQ(blasCoreIsa("Zen5"), std::nullopt);
}

TEST(Blas, DescriptionNamesTheLibrarysCore) {
  std::string description = blasDescription();
  EXPECT_EQ(description.rfind("OpenBLAS ", 0), 0u) << description;
  EXPECT_NE(description.find(std::string("core ") + openblas_get_corename() + " ("),
            std::string::npos)
      << description;
}

// Llama 4's forms of the MoE kernels and of the norm, against references written out here.
TEST(MoE, SigmoidRouterKeepsTheTopKLogitsThroughASigmoid) {
  const int64_t rows = 3, hidden = 5, experts = 6, topK = 2;
  std::mt19937 gen(7);
  std::normal_distribution<float> normal;
  std::vector<float> x(rows * hidden), w(experts * hidden), out(rows * experts, NAN);
  for (float &v : x)
    v = normal(gen);
  for (float &v : w)
    v = normal(gen);
  router(Host{}, x.data(), rows, hidden, w.data(), experts, topK, /*normalize=*/false,
         out.data(), nullptr, false, 1.0, 0, 0, /*sigmoid=*/true);
  for (int64_t r = 0; r < rows; ++r) {
    std::vector<std::pair<double, int64_t>> logits;
    for (int64_t e = 0; e < experts; ++e) {
      double dot = 0;
      for (int64_t h = 0; h < hidden; ++h)
        dot += double(x[r * hidden + h]) * w[e * hidden + h];
      logits.push_back({dot, e});
    }
    std::sort(logits.rbegin(), logits.rend());
    std::vector<double> expected(experts, 0.0);
    for (int64_t i = 0; i < topK; ++i)
      expected[logits[i].second] = 1.0 / (1.0 + std::exp(-logits[i].first));
    for (int64_t e = 0; e < experts; ++e)
      EXPECT_NEAR(out[r * experts + e], expected[e], 1e-6) << "row " << r << " expert " << e;
  }
}

TEST(MoE, ExpertsInOutWithTheInputScaled) {
  // gate_up [E, hidden, 2 * inter] (gate's columns, then up's), down [E, inter, hidden]; each
  // chosen expert sees routing[t, e] * x and its output is summed unweighted.
  const int64_t rows = 2, hidden = 4, experts = 3, inter = 5;
  std::mt19937 gen(11);
  std::normal_distribution<float> normal;
  std::vector<float> x(rows * hidden), gateUp(experts * hidden * 2 * inter),
      down(experts * inter * hidden), routing = {0.7f, 0.0f, 0.2f, 0.0f, 0.9f, 0.0f},
      out(rows * hidden, NAN);
  for (std::vector<float> *v : {&x, &gateUp, &down})
    for (float &e : *v)
      e = normal(gen);
  ExpertsForm form;
  form.inOut = form.scaleInput = true;
  tpcrt::cpu::experts(Host{}, x.data(), rows, hidden, routing.data(), experts, gateUp.data(),
                      down.data(),
                      inter, /*geluTanh=*/false, form, out.data());
  for (int64_t t = 0; t < rows; ++t) {
    std::vector<double> expected(hidden, 0.0);
    for (int64_t e = 0; e < experts; ++e) {
      double weight = routing[t * experts + e];
      if (weight == 0)
        continue;
      std::vector<double> act(inter);
      for (int64_t i = 0; i < inter; ++i) {
        double gate = 0, up = 0;
        for (int64_t h = 0; h < hidden; ++h) {
          double in = weight * x[t * hidden + h];
          gate += in * gateUp[(e * hidden + h) * 2 * inter + i];
          up += in * gateUp[(e * hidden + h) * 2 * inter + inter + i];
        }
        act[i] = gate / (1.0 + std::exp(-gate)) * up;
      }
      for (int64_t h = 0; h < hidden; ++h)
        for (int64_t i = 0; i < inter; ++i)
          expected[h] += act[i] * down[(e * inter + i) * hidden + h];
    }
    for (int64_t h = 0; h < hidden; ++h)
      EXPECT_NEAR(out[t * hidden + h], expected[h], 1e-5) << "token " << t << " column " << h;
  }
}

TEST(RmsNorm, WithoutAWeightDividesByTheRootMeanSquare) {
  const float x[] = {1.0f, -2.0f, 3.0f, 0.5f, 0.0f, 0.0f, 0.0f, 4.0f};
  float out[8];
  rmsNorm(Host{}, x, 2, 4, nullptr, 1e-5, 0.0, out);
  for (int r = 0; r < 2; ++r) {
    double sum = 0;
    for (int c = 0; c < 4; ++c)
      sum += double(x[r * 4 + c]) * x[r * 4 + c];
    double scale = 1.0 / std::sqrt(sum / 4 + 1e-5);
    for (int c = 0; c < 4; ++c)
      EXPECT_NEAR(out[r * 4 + c], x[r * 4 + c] * scale, 1e-6);
  }
}
