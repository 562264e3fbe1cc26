// libtpcrt: the CPU backend's kernels against naive references, safetensors slices against
// generated values, Gloo collectives between forked ranks, the whole-file read, the driver's
// choice of context length, how it loads weights into a backend, and how a failed forward is
// told and waited for.
#include "tpcrt/backend.h"
#include "tpcrt/comm.h"
#include "tpcrt/cpu/context.h"
#include "tpcrt/cpu/kernels.h"
#include "tpcrt/failure.h"
#include "tpcrt/file.h"
#include "tpcrt/model.h"
#include "tpcrt/weights.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <random>
#include <thread>
#include <arpa/inet.h>
#include <chrono>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

using namespace tpcrt;
using namespace tpcrt::cpu;

namespace {

std::vector<float> randomVector(size_t n, unsigned seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(-1, 1);
  std::vector<float> v(n);
  for (float &x : v)
    x = dist(gen);
  return v;
}

/// Whether `out` (tokens 0 .. total - 1, heads * hd each) is within 1e-5 of attention in
/// double: query head h of token t over the keys of tokens first(t) .. t, GQA over kvHeads;
/// `key(j, c)` and `value(j, c)` are element c of token j's row (kvHeads * hd).
void expectReferenceAttention(const std::vector<float> &out, const std::vector<float> &q,
                              int64_t total, int64_t heads, int64_t kvHeads, int64_t hd,
                              double scale, const std::function<int64_t(int64_t)> &first,
                              const std::function<double(int64_t, int64_t)> &key,
                              const std::function<double(int64_t, int64_t)> &value,
                              const std::string &what) {
  for (int64_t t = 0; t < total; ++t)
    for (int64_t h = 0; h < heads; ++h) {
      int64_t g = h / (heads / kvHeads), from = first(t);
      std::vector<double> s;
      double mx = -1e30, sum = 0;
      for (int64_t j = from; j <= t; ++j) {
        double dot = 0;
        for (int64_t d = 0; d < hd; ++d)
          dot += double(q[size_t((t * heads + h) * hd + d)]) * key(j, g * hd + d);
        s.push_back(dot * scale);
        mx = std::max(mx, s.back());
      }
      for (double &x : s)
        sum += x = std::exp(x - mx);
      for (int64_t d = 0; d < hd; ++d) {
        double want = 0;
        for (int64_t j = from; j <= t; ++j)
          want += s[size_t(j - from)] / sum * value(j, g * hd + d);
        EXPECT_NEAR(out[size_t((t * heads + h) * hd + d)], want, 1e-5)
            << what << " token " << t << " head " << h;
      }
    }
}

std::string tempPath(const std::string &name) {
  return ::testing::TempDir() + "tpcrt-" + std::to_string(getpid()) + "-" + name;
}

/// The lines /proc/self/smaps gives for the mapping that holds `address` (its header line
/// first), or none.
std::vector<std::string> smapsOf(const void *address) {
  std::ifstream smaps("/proc/self/smaps");
  std::vector<std::string> lines;
  bool inside = false;
  for (std::string line; std::getline(smaps, line);) {
    unsigned long long start = 0, end = 0;
    char dash = 0;
    // A mapping's header: "start-end perms ..."; its other lines start with a name and ':'.
    if (line.find(':') > line.find(' ') &&
        std::sscanf(line.c_str(), "%llx%c%llx", &start, &dash, &end) == 3 && dash == '-') {
      if (inside)
        break;
      auto at = reinterpret_cast<uintptr_t>(address);
      inside = at >= start && at < end;
    }
    if (inside)
      lines.push_back(line);
  }
  return lines;
}

} // namespace

// Where the weights and KV caches live (cpu::allocateStreamed): every byte of every weight
// writable, each weight from a cache line; on Linux outside the sanitizer build a mapping of
// their own, from a huge page's boundary, advised into transparent huge pages (the kernel's
// VmFlags "hg" in /proc/self/smaps, the oracle), unmapped when the weights go; a cache zeroed.
TEST(HostWeights, AreMappedOnTheirOwnAndAdvisedIntoHugePages) {
  HostWeights weights;
  const size_t floats = size_t(3) << 20, halves = 1001;
  weights.allocate({floats, halves}, {DType::F32, DType::BF16});
  auto *first = static_cast<unsigned char *>(weights.raw(0));
  auto *second = static_cast<unsigned char *>(weights.raw(1));
  EXPECT_EQ(second - first, std::ptrdiff_t(floats * 4));
  EXPECT_EQ(reinterpret_cast<uintptr_t>(second) % 64, 0u);
  std::memset(first, 0x5a, floats * 4);
  std::memset(second, 0xa5, halves * 2);
  EXPECT_EQ(first[floats * 4 - 1], 0x5a);
  EXPECT_EQ(second[halves * 2 - 1], 0xa5);
  EXPECT_EQ(weights.data(0), reinterpret_cast<float *>(first));
  EXPECT_EQ(weights.data(1), nullptr); // held as bf16
#if defined(__linux__) && !defined(__SANITIZE_ADDRESS__)
  EXPECT_EQ(reinterpret_cast<uintptr_t>(first) % (size_t(2) << 20), 0u);
  std::vector<std::string> mapping = smapsOf(first);
  ASSERT_FALSE(mapping.empty());
  if (access("/sys/kernel/mm/transparent_hugepage/enabled", F_OK) == 0) {
    auto flags = std::find_if(mapping.begin(), mapping.end(), [](const std::string &line) {
      return line.rfind("VmFlags:", 0) == 0;
    });
    ASSERT_NE(flags, mapping.end());
    EXPECT_NE((*flags + " ").find(" hg "), std::string::npos) << *flags;
  }
  weights = HostWeights();
  EXPECT_TRUE(smapsOf(first).empty()) << "the weights' mapping outlived them";
  // A KV cache's buffer: the same, and zeroed as asked.
  StreamedBuffer cache((size_t(3) << 20) + 5, true);
  const std::byte *bytes = cache.data();
  EXPECT_EQ(reinterpret_cast<uintptr_t>(bytes) % (size_t(2) << 20), 0u);
  EXPECT_TRUE(std::all_of(bytes, bytes + cache.size(),
                          [](std::byte b) { return b == std::byte{0}; }));
#else
  GTEST_SKIP() << "the sanitizer build keeps the weights on the heap";
#endif
}

TEST(Kernels, LinearMatchesNaive) {
  int64_t rows = 3, in = 5, out = 4;
  auto x = randomVector(rows * in, 1), w = randomVector(out * in, 2), b = randomVector(out, 3);
  std::vector<float> y(rows * out);
  linear(Host{}, x.data(), rows, in, w.data(), out, b.data(), y.data());
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t o = 0; o < out; ++o) {
      double acc = b[o];
      for (int64_t i = 0; i < in; ++i)
        acc += double(x[r * in + i]) * w[o * in + i];
      EXPECT_NEAR(y[r * out + o], acc, 1e-5);
    }
}

// One row (a decode step) takes the matrix-vector path, with a bias and without, on shapes
// of every remainder.
TEST(Kernels, LinearOfOneRowMatchesNaive) {
  struct Shape {
    int64_t in, out;
  };
  for (Shape shape : {Shape{37, 19}, Shape{768, 16}, Shape{8, 8}, Shape{3, 2}, Shape{1, 9}})
    for (bool biased : {true, false}) {
      auto x = randomVector(shape.in, 4), w = randomVector(shape.out * shape.in, 5);
      auto b = randomVector(shape.out, 6);
      std::vector<float> y(shape.out);
      linear(Host{}, x.data(), 1, shape.in, w.data(), shape.out, biased ? b.data() : nullptr,
             y.data());
      for (int64_t o = 0; o < shape.out; ++o) {
        double acc = biased ? b[o] : 0;
        for (int64_t i = 0; i < shape.in; ++i)
          acc += double(x[i]) * w[o * shape.in + i];
        EXPECT_NEAR(y[o], acc, 1e-5 * std::sqrt(double(shape.in)))
            << shape.out << "x" << shape.in << (biased ? " with bias" : "") << ", row " << o;
      }
    }
}

TEST(Kernels, RmsNormAndOffset) {
  std::vector<float> x = {1, 2, 3, 4}, w = {1, 1, 2, 0}, y(4);
  rmsNorm(Host{}, x.data(), 1, 4, w.data(), 1e-6, 0.0, y.data());
  double rms = std::sqrt((1 + 4 + 9 + 16) / 4.0 + 1e-6);
  EXPECT_NEAR(y[2], 3 / rms * 2, 1e-5);
  EXPECT_NEAR(y[3], 0, 1e-6);
  rmsNorm(Host{}, x.data(), 1, 4, w.data(), 1e-6, 1.0, y.data()); // Gemma: (1 + w)
  EXPECT_NEAR(y[3], 4 / rms, 1e-5);
}

TEST(Kernels, RotaryRotatesHalvesAndKeepsNorms) {
  auto x = randomVector(2 * 8, 4);
  std::vector<float> y(16);
  int64_t positions[] = {0, 5};
  double invFreq[] = {1.0, 0.01}; // theta 10^4 over head_dim 4
  rotary(Host{}, x.data(), 2, 8, 4, invFreq, positions, y.data());
  for (int i = 0; i < 8; ++i)
    EXPECT_FLOAT_EQ(y[i], x[i]); // position 0 is the identity
  for (int h = 0; h < 2; ++h) {
    double before = 0, after = 0;
    for (int d = 0; d < 4; ++d) {
      before += x[8 + h * 4 + d] * x[8 + h * 4 + d];
      after += y[8 + h * 4 + d] * y[8 + h * 4 + d];
    }
    EXPECT_NEAR(before, after, 1e-5);
  }
  // Pair (0, 2) of the first head at position 5 with frequency 1: a rotation by 5 rad.
  EXPECT_NEAR(y[8], x[8] * std::cos(5.0) - x[10] * std::sin(5.0), 1e-5);
}

TEST(Kernels, RotaryRotatesEachPairByItsGivenFrequency) {
  // The frequencies are the compiler's table (a scaled RoPE's as much as theta's): pair i
  // turns by position * invFreq[i], whatever they are.
  auto x = randomVector(8, 14);
  std::vector<float> y(8);
  int64_t positions[] = {3};
  double invFreq[] = {0.7, 0.2, 0.05, 0.003};
  rotary(Host{}, x.data(), 1, 8, 8, invFreq, positions, y.data());
  for (int i = 0; i < 4; ++i) {
    double angle = 3 * invFreq[i];
    EXPECT_NEAR(y[i], x[i] * std::cos(angle) - x[i + 4] * std::sin(angle), 1e-5);
    EXPECT_NEAR(y[i + 4], x[i + 4] * std::cos(angle) + x[i] * std::sin(angle), 1e-5);
  }
}

TEST(Kernels, RouterKeepsTopKRenormalized) {
  // Two experts of four win; their weights are their softmax probabilities over their sum.
  std::vector<float> x = {1.0f, 0.0f};
  std::vector<float> w = {0.5f, 0, 2.0f, 0, -1.0f, 0, 1.0f, 0}; // logits 0.5, 2, -1, 1
  std::vector<float> out(4);
  router(Host{}, x.data(), 1, 2, w.data(), 4, 2, true, out.data());
  double e1 = std::exp(2.0), e3 = std::exp(1.0);
  EXPECT_FLOAT_EQ(out[0], 0.0f);
  EXPECT_FLOAT_EQ(out[2], 0.0f);
  EXPECT_NEAR(out[1], e1 / (e1 + e3), 1e-6);
  EXPECT_NEAR(out[3], e3 / (e1 + e3), 1e-6);
}

TEST(Kernels, RouterLimitedToTheBestGroupAndScaled) {
  // DeepSeek's group_limited_greedy: groups {0, 1} and {2, 3}; the best score (expert 1's)
  // picks group 0, so its two experts win although expert 3 outscores expert 0; not
  // renormalized, times 1.5.
  std::vector<float> x = {1.0f, 0.0f};
  std::vector<float> w = {0.5f, 0, 2.0f, 0, -1.0f, 0, 1.0f, 0}; // logits 0.5, 2, -1, 1
  std::vector<float> out(4);
  router(Host{}, x.data(), 1, 2, w.data(), 4, 2, false, out.data(), nullptr, false, 1.5, 2, 1);
  double total = std::exp(0.5) + std::exp(2.0) + std::exp(-1.0) + std::exp(1.0);
  EXPECT_NEAR(out[0], 1.5 * std::exp(0.5) / total, 1e-6);
  EXPECT_NEAR(out[1], 1.5 * std::exp(2.0) / total, 1e-6);
  EXPECT_FLOAT_EQ(out[2], 0.0f);
  EXPECT_FLOAT_EQ(out[3], 0.0f);
}

TEST(Kernels, InterleavedRotaryOfTheLastDimsOfEachHead) {
  // DeepSeek's query heads: 2 nope dims kept, then 4 rope dims rotated as complex pairs.
  std::vector<float> x = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}, out(12);
  int64_t positions[] = {2};
  double invFreq[] = {1.0, 0.01}; // theta 10^4 over the 4 rope dims
  rotary(Host{}, x.data(), 1, 12, 6, invFreq, positions, out.data(), 1.0, true, 2);
  for (int64_t h = 0; h < 2; ++h) {
    const float *in = x.data() + 6 * h, *o = out.data() + 6 * h;
    EXPECT_EQ(o[0], in[0]);
    EXPECT_EQ(o[1], in[1]);
    for (int64_t i = 0; i < 2; ++i) {
      double angle = 2 * std::pow(10000.0, -2.0 * i / 4), a = in[2 + 2 * i], b = in[3 + 2 * i];
      EXPECT_NEAR(o[2 + 2 * i], a * std::cos(angle) - b * std::sin(angle), 1e-5);
      EXPECT_NEAR(o[3 + 2 * i], b * std::cos(angle) + a * std::sin(angle), 1e-5);
    }
  }
}

TEST(Kernels, HeadSliceAndConcatHeads) {
  // Two heads of 3: columns [1, 3) of each; then each head of 2 followed by a shared 1.
  std::vector<float> x = {1, 2, 3, 4, 5, 6}, sliced(4), shared = {9}, joined(6);
  headSlice(Host{}, x.data(), 1, 6, 3, 1, 2, sliced.data());
  EXPECT_EQ(sliced, (std::vector<float>{2, 3, 5, 6}));
  concatHeads(Host{}, sliced.data(), 1, 4, 2, shared.data(), 1, joined.data());
  EXPECT_EQ(joined, (std::vector<float>{2, 3, 9, 5, 6, 9}));
}

TEST(Kernels, ExpertsSumRoutedExpertsOnly) {
  int64_t hidden = 3, inter = 2, count = 2;
  auto x = randomVector(hidden, 15), gateUp = randomVector(count * 2 * inter * hidden, 16),
       down = randomVector(count * hidden * inter, 17);
  std::vector<float> routing = {0.0f, 0.75f}, out(hidden);
  experts(Host{}, x.data(), 1, hidden, routing.data(), count, gateUp.data(), down.data(), inter,
          false, out.data());
  const float *gu = gateUp.data() + 2 * inter * hidden, *dn = down.data() + hidden * inter;
  for (int64_t h = 0; h < hidden; ++h) {
    double sum = 0;
    for (int64_t i = 0; i < inter; ++i) {
      double g = 0, u = 0;
      for (int64_t c = 0; c < hidden; ++c) {
        g += gu[i * hidden + c] * x[c];
        u += gu[(inter + i) * hidden + c] * x[c];
      }
      sum += dn[h * inter + i] * (g / (1 + std::exp(-g))) * u;
    }
    EXPECT_NEAR(out[h], 0.75 * sum, 1e-5);
  }
}

/// A step of one sequence: `count` tokens after `cached`, its blocks 0, 1, ... in order.
struct OneSequence {
  std::vector<int32_t> blocks;
  Step step;
  OneSequence(int64_t cached, int64_t count, int64_t blockCount) : blocks(size_t(blockCount)) {
    std::iota(blocks.begin(), blocks.end(), 0);
    step.tokens = count;
    step.sequences = {StepSequence{0, count, cached, blocks.data(), true}};
  }
};

TEST(Kernels, AttentionSoftcapBoundsScores) {
  // One key: the softmax is 1 whatever the cap, so the output is the value; two keys with a
  // tiny cap make their scores nearly equal, so the output is nearly their mean.
  int64_t hd = 2;
  std::vector<float> q = {10, 0, 10, 0}, k = {1, 0, -1, 0}, v = {1, 2, 3, 4};
  std::vector<float> keys(4), values(4), out(4);
  KVCache cache{keys.data(), values.data(), 1, 2, hd, hd};
  OneSequence two(0, 2, 1);
  attention(Host{}, q.data(), k.data(), v.data(), 2, 1, 1, hd, 1.0, 0, 1e-3, HeadSplit{},
            {cache, two.step}, out.data());
  EXPECT_NEAR(out[0], 1.0, 1e-6);
  EXPECT_NEAR(out[2], 2.0, 2e-3);
  EXPECT_NEAR(out[3], 3.0, 2e-3);
}

TEST(Kernels, AttentionOnUnevenHeadsIsThoseHeadsOfTheWhole) {
  // 9 query heads over 3 KV heads at tp 2: rank 0 holds query heads 0-3 (KV heads 0-1) and a
  // padding head, rank 1 query heads 4-8 (KV heads 1-2). Each rank's heads equal those of
  // the whole attention, and the padding head comes out zero.
  int64_t heads = 9, kvHeads = 3, hd = 2, rows = 3;
  auto q = randomVector(rows * heads * hd, 11), k = randomVector(rows * kvHeads * hd, 12),
       v = randomVector(rows * kvHeads * hd, 13);
  std::vector<float> keys(rows * kvHeads * hd), values(rows * kvHeads * hd);
  KVCache whole{keys.data(), values.data(), 1, rows, kvHeads * hd, kvHeads * hd};
  OneSequence prompt(0, rows, 1);
  std::vector<float> expected(rows * heads * hd);
  attention(Host{}, q.data(), k.data(), v.data(), rows, heads, kvHeads, hd, 0.5, 0, 0.0,
            HeadSplit{}, {whole, prompt.step}, expected.data());
  struct Rank {
    int64_t firstHead, count, firstKv;
  };
  for (Rank r : {Rank{0, 4, 0}, Rank{4, 5, 1}}) {
    int64_t local = 5, localKv = 2; // the largest rank's heads
    std::vector<float> lq(rows * local * hd, 0.0f), lk(rows * localKv * hd),
        lv(rows * localKv * hd);
    for (int64_t t = 0; t < rows; ++t) {
      for (int64_t h = 0; h < r.count; ++h)
        for (int64_t d = 0; d < hd; ++d)
          lq[(t * local + h) * hd + d] = q[(t * heads + r.firstHead + h) * hd + d];
      for (int64_t h = 0; h < localKv; ++h)
        for (int64_t d = 0; d < hd; ++d) {
          lk[(t * localKv + h) * hd + d] = k[(t * kvHeads + r.firstKv + h) * hd + d];
          lv[(t * localKv + h) * hd + d] = v[(t * kvHeads + r.firstKv + h) * hd + d];
        }
    }
    std::vector<float> lkeys(lk.size()), lvalues(lv.size()), out(lq.size(), 7.0f);
    KVCache cache{lkeys.data(), lvalues.data(), 1, rows, localKv * hd, localKv * hd};
    attention(Host{}, lq.data(), lk.data(), lv.data(), rows, local, localKv, hd, 0.5, 0, 0.0,
              HeadSplit{3, r.firstHead, r.count, r.firstKv}, {cache, prompt.step}, out.data());
    for (int64_t t = 0; t < rows; ++t)
      for (int64_t h = 0; h < local; ++h)
        for (int64_t d = 0; d < hd; ++d) {
          float want = h < r.count ? expected[(t * heads + r.firstHead + h) * hd + d] : 0.0f;
          EXPECT_NEAR(out[(t * local + h) * hd + d], want, 1e-6)
              << "rank from head " << r.firstHead << ", token " << t << ", head " << h;
        }
  }
}

TEST(Kernels, AttentionPrefillThenDecodeMatchesNaive) {
  int64_t heads = 4, kvHeads = 2, hd = 3, total = 5;
  auto q = randomVector(total * heads * hd, 5), k = randomVector(total * kvHeads * hd, 6),
       v = randomVector(total * kvHeads * hd, 7);
  std::vector<float> keys(total * kvHeads * hd), values(total * kvHeads * hd);
  KVCache cache{keys.data(), values.data(), total, 1, kvHeads * hd, kvHeads * hd};
  std::vector<float> out(total * heads * hd);
  double scale = 1 / std::sqrt(double(hd));
  OneSequence prefill(0, 4, total), decode(4, 1, total);
  attention(Host{}, q.data(), k.data(), v.data(), 4, heads, kvHeads, hd, scale, 0, 0.0,
            HeadSplit{}, {cache, prefill.step}, out.data());
  attention(Host{}, q.data() + 4 * heads * hd, k.data() + 4 * kvHeads * hd,
            v.data() + 4 * kvHeads * hd, 1, heads, kvHeads, hd, scale, 0, 0.0, HeadSplit{},
            {cache, decode.step}, out.data() + 4 * heads * hd);
  for (int64_t t = 0; t < total; ++t)
    for (int64_t h = 0; h < heads; ++h) {
      int64_t g = h / (heads / kvHeads);
      std::vector<double> s(t + 1);
      double mx = -1e30, sum = 0;
      for (int64_t j = 0; j <= t; ++j) {
        double dot = 0;
        for (int64_t d = 0; d < hd; ++d)
          dot += q[(t * heads + h) * hd + d] * k[(j * kvHeads + g) * hd + d];
        s[j] = dot * scale;
        mx = std::max(mx, s[j]);
      }
      for (double &x : s)
        sum += x = std::exp(x - mx);
      for (int64_t d = 0; d < hd; ++d) {
        double acc = 0;
        for (int64_t j = 0; j <= t; ++j)
          acc += s[j] / sum * v[(j * kvHeads + g) * hd + d];
        EXPECT_NEAR(out[(t * heads + h) * hd + d], acc, 1e-5) << "token " << t << " head " << h;
      }
    }
}

TEST(Kernels, AttentionOverABf16CacheIsAttentionOverItsRoundedKeysAndValues) {
  // --kv-cache-dtype bf16: a prefill of 4 tokens then a decode step, the sequence's blocks (of
  // 2 tokens) out of order in the cache; each output within 1e-5 of attention computed in
  // double over the keys and values rounded to bf16, and the cache's 16-bit words those
  // roundings.
  int64_t heads = 4, kvHeads = 2, hd = 3, total = 5, width = kvHeads * hd, size = 2;
  auto q = randomVector(total * heads * hd, 15), k = randomVector(total * kvHeads * hd, 16),
       v = randomVector(total * kvHeads * hd, 17);
  std::vector<uint16_t> keys(4 * size * width, 0xffff), values(4 * size * width, 0xffff);
  KVCache cache{keys.data(), values.data(), 4, size, width, width, DType::BF16};
  std::vector<int32_t> blocks = {3, 0, 2};
  Step prefill, decode;
  prefill.tokens = 4;
  prefill.sequences = {StepSequence{0, 4, 0, blocks.data(), true}};
  decode.tokens = 1;
  decode.sequences = {StepSequence{0, 1, 4, blocks.data(), true}};
  std::vector<float> out(total * heads * hd);
  double scale = 1 / std::sqrt(double(hd));
  attention(Host{}, q.data(), k.data(), v.data(), 4, heads, kvHeads, hd, scale, 0, 0.0,
            HeadSplit{}, {cache, prefill}, out.data());
  attention(Host{}, q.data() + 4 * heads * hd, k.data() + 4 * kvHeads * hd,
            v.data() + 4 * kvHeads * hd, 1, heads, kvHeads, hd, scale, 0, 0.0, HeadSplit{},
            {cache, decode}, out.data() + 4 * heads * hd);
  auto rounded = [](float x) { return double(bf16ToFloat(floatToBf16(x))); };
  for (int64_t t = 0; t < total; ++t) {
    int64_t slot = int64_t(blocks[size_t(t / size)]) * size + t % size;
    for (int64_t c = 0; c < width; ++c) {
      ASSERT_EQ(keys[size_t(slot * width + c)], floatToBf16(k[size_t(t * width + c)]));
      ASSERT_EQ(values[size_t(slot * width + c)], floatToBf16(v[size_t(t * width + c)]));
    }
  }
  expectReferenceAttention(
      out, q, total, heads, kvHeads, hd, scale, [](int64_t) { return 0; },
      [&](int64_t j, int64_t c) { return rounded(k[size_t(j * width + c)]); },
      [&](int64_t j, int64_t c) { return rounded(v[size_t(j * width + c)]); }, "bf16");
}

TEST(Kernels, AttentionOverAnF16OrQ8_0CacheIsAttentionOverWhatTheCacheHolds) {
  // --kv-cache-dtype f16 and q8_0: a prefill of 4 tokens then a decode step, blocks of 2
  // tokens out of order. The cache holds each key and value within its type's rounding (f16:
  // the nearest-even half; q8_0: each block of 32 a scale, max |x| / 127 as a half, times
  // int8s, within half a step); the outputs are within 1e-5 of attention in double over what
  // the cache holds, decoded here (the half's bits by hand, the blocks as llama.cpp lays them
  // out: a 2-byte scale, 32 int8s).
  int64_t heads = 4, kvHeads = 2, hd = 16, total = 5, width = kvHeads * hd, size = 2;
  auto half = [](uint16_t h) { // IEEE binary16, by its fields
    int exponent = (h >> 10) & 31, mantissa = h & 1023;
    double magnitude = exponent == 0 ? std::ldexp(mantissa, -24)
                                     : std::ldexp(1024 + mantissa, exponent - 25);
    return (h & 0x8000) ? -magnitude : magnitude;
  };
  for (DType type : {DType::F16, DType::Q8_0}) {
    auto q = randomVector(total * heads * hd, 35), k = randomVector(total * width, 36),
         v = randomVector(total * width, 37);
    size_t rowBytes = type == DType::F16 ? size_t(width) * 2 : size_t(width / 32) * 34;
    std::vector<std::byte> keys(4 * size * rowBytes), values(keys.size());
    KVCache cache{keys.data(), values.data(), 4, size, width, width, type};
    std::vector<int32_t> blocks = {3, 0, 2};
    Step prefill, decode;
    prefill.tokens = 4;
    prefill.sequences = {StepSequence{0, 4, 0, blocks.data(), true}};
    decode.tokens = 1;
    decode.sequences = {StepSequence{0, 1, 4, blocks.data(), true}};
    std::vector<float> out(size_t(total * heads * hd));
    double scale = 1 / std::sqrt(double(hd));
    attention(Host{}, q.data(), k.data(), v.data(), 4, heads, kvHeads, hd, scale, 0, 0.0,
              HeadSplit{}, {cache, prefill}, out.data());
    attention(Host{}, q.data() + 4 * heads * hd, k.data() + 4 * width, v.data() + 4 * width, 1,
              heads, kvHeads, hd, scale, 0, 0.0, HeadSplit{}, {cache, decode},
              out.data() + 4 * heads * hd);
    // What the cache holds of token t, element c.
    auto held = [&](const std::vector<std::byte> &memory, int64_t t, int64_t c) {
      int64_t slot = int64_t(blocks[size_t(t / size)]) * size + t % size;
      const std::byte *row = memory.data() + size_t(slot) * rowBytes;
      uint16_t bits;
      if (type == DType::F16) {
        std::memcpy(&bits, row + 2 * c, 2);
        return half(bits);
      }
      const std::byte *block = row + (c / 32) * 34;
      std::memcpy(&bits, block, 2);
      return half(bits) * double(int8_t(block[2 + c % 32]));
    };
    for (int64_t t = 0; t < total; ++t)
      for (int64_t c = 0; c < width; ++c)
        for (auto [memory, x] : {std::pair{&keys, k[size_t(t * width + c)]},
                                 std::pair{&values, v[size_t(t * width + c)]}}) {
          double bound = 0; // how far the type may round x
          if (type == DType::F16) {
            bound = std::ldexp(1.0, std::ilogb(x) - 11); // half its step
          } else {
            float most = 0;
            for (int64_t j = c / 32 * 32; j < c / 32 * 32 + 32; ++j)
              most = std::max(most, std::fabs((memory == &keys ? k : v)[size_t(t * width + j)]));
            // Half a step of d = most / 127, and the half's rounding of d (2^-11 of it) times
            // the int8 (at most 127).
            bound = most / 127.0 * (0.5 + 127.0 / 2048);
          }
          ASSERT_LE(std::fabs(held(*memory, t, c) - x), bound + 1e-12)
              << dtypeName(type) << " token " << t << " element " << c;
        }
    expectReferenceAttention(
        out, q, total, heads, kvHeads, hd, scale, [](int64_t) { return 0; },
        [&](int64_t j, int64_t c) { return held(keys, j, c); },
        [&](int64_t j, int64_t c) { return held(values, j, c); }, dtypeName(type));
  }
}

TEST(Kernels, DecodeStepsReadEveryCacheTypeInPlace) {
  // A decode step reads the cache where it lies (attendOne), whatever its type: a 3-token
  // prefill then decodes to 9 tokens, blocks of 2 out of order, a window of 5, a soft-cap of
  // 2 that bites, sinks, values of heads twice the keys' (MLA's shapes), and rank 0's heads of
  // 9 query heads over 3 KV heads at tp 2 (heads 0-3 over KV heads 0-1, then a padding head);
  // with the AVX-512 kernels where the CPU has them, and without. Each decode output is
  // within 1e-5 of attention in double over what the cache holds, decoded here from its bytes
  // (bf16's and the half's bits by hand, q8_0's blocks as llama.cpp lays them out); the
  // padding head is zero.
  const int64_t local = 5, localKv = 2, hd = 16, vhd = 32, width = localKv * hd;
  const int64_t vWidth = localKv * vhd, size = 2, total = 9, window = 5, prompt = 3;
  const double scale = 0.9, cap = 2.0;
  const HeadSplit split{3, 0, 4, 0};
  const std::vector<int32_t> blocks = {4, 1, 3, 0, 2};
  auto half = [](uint16_t h) {
    int exponent = (h >> 10) & 31, mantissa = h & 1023;
    double magnitude = exponent == 0 ? std::ldexp(mantissa, -24)
                                     : std::ldexp(1024 + mantissa, exponent - 25);
    return (h & 0x8000) ? -magnitude : magnitude;
  };
  for (int mode = 0; mode < 8; ++mode) { // with AVX-512 where the CPU has it, then without
    const bool avx2 = mode >= 4;
    const DType type = std::array{DType::F32, DType::BF16, DType::F16, DType::Q8_0}[mode % 4];
    detail::forceAvx2Kernels(avx2);
    auto q = randomVector(total * local * hd, 45), k = randomVector(total * width, 46),
         v = randomVector(total * vWidth, 47), sinks = randomVector(local, 48);
    for (float &x : q)
      x *= 3; // scores of a few units: the cap bites
    size_t rowBytes = dtypeBytesFor(type, width), vRowBytes = dtypeBytesFor(type, vWidth);
    std::vector<std::byte> keys(5 * size * rowBytes), values(5 * size * vRowBytes);
    KVCache cache{keys.data(), values.data(), 5, size, width, vWidth, type};
    std::vector<float> out(size_t(total * local * vhd), NAN);
    for (int64_t at = 0; at < total;) {
      int64_t count = at == 0 ? prompt : 1;
      Step step;
      step.tokens = count;
      step.sequences = {StepSequence{0, count, at, blocks.data(), count}};
      attention(Host{}, q.data() + at * local * hd, k.data() + at * width,
                v.data() + at * vWidth, count, local, localKv, hd, scale, window, cap, split,
                {cache, step}, out.data() + at * local * vhd, sinks.data(), vhd);
      at += count;
    }
    auto held = [&](const std::vector<std::byte> &memory, int64_t t, int64_t c) {
      int64_t slot = int64_t(blocks[size_t(t / size)]) * size + t % size;
      const std::byte *row =
          memory.data() + size_t(slot) * (&memory == &keys ? rowBytes : vRowBytes);
      uint16_t bits;
      float f;
      switch (type) {
      case DType::F32:
        std::memcpy(&f, row + 4 * c, 4);
        return double(f);
      case DType::BF16: {
        std::memcpy(&bits, row + 2 * c, 2);
        uint32_t wide = uint32_t(bits) << 16;
        std::memcpy(&f, &wide, 4);
        return double(f);
      }
      case DType::F16:
        std::memcpy(&bits, row + 2 * c, 2);
        return half(bits);
      default: {
        const std::byte *block = row + (c / 32) * 34;
        std::memcpy(&bits, block, 2);
        return half(bits) * double(int8_t(block[2 + c % 32]));
      }
      }
    };
    for (int64_t t = prompt; t < total; ++t)
      for (int64_t h = 0; h < local; ++h)
        for (int64_t d = 0; d < vhd; ++d) {
          double want = 0;
          if (h < split.heads) {
            int64_t g = h / split.group, from = std::max<int64_t>(0, t - window + 1);
            std::vector<double> s;
            double best = sinks[size_t(h)], sum = 0;
            for (int64_t j = from; j <= t; ++j) {
              double dot = 0;
              for (int64_t e = 0; e < hd; ++e)
                dot += double(q[size_t((t * local + h) * hd + e)]) * held(keys, j, g * hd + e);
              s.push_back(cap * std::tanh(dot * scale / cap));
              best = std::max(best, s.back());
            }
            for (double &x : s)
              sum += x = std::exp(x - best);
            sum += std::exp(sinks[size_t(h)] - best);
            for (int64_t j = from; j <= t; ++j)
              want += s[size_t(j - from)] / sum * held(values, j, g * vhd + d);
          }
          EXPECT_NEAR(out[size_t((t * local + h) * vhd + d)], want, 1e-5)
              << dtypeName(type) << (avx2 ? " without AVX-512" : "") << " token " << t
              << " head " << h;
        }
  }
  detail::forceAvx2Kernels(false);
}

TEST(Kernels, ASlidingWindowReadsOnlyTheBlocksItsGroupKeeps) {
  // A KV window group's cache (tpcrt/kv_groups.h): window 3, blocks of 2 tokens, a prefill of
  // 4 tokens then decodes to 9. After each step the blocks before the first the next query
  // reads are given back: their slots filled with NaN, then taken again for later tokens, and
  // their entries (which the scheduler makes -1) name a slot of NaNs no token is ever in, so
  // that a kernel reading them would answer NaN. Each output is within 1e-5 of sliding-window
  // attention computed in double over every token; the group's table is found
  // Step::tableStride after group 0's, which holds nonsense here.
  int64_t heads = 2, kvHeads = 1, hd = 4, total = 9, width = kvHeads * hd, size = 2, window = 3;
  auto q = randomVector(total * heads * hd, 25), k = randomVector(total * kvHeads * hd, 26),
       v = randomVector(total * kvHeads * hd, 27);
  int64_t slots = 4; // the window spans at most 3 blocks; the 4th is all NaN
  std::vector<float> keys(size_t(slots * size * width)), values(keys.size());
  std::fill(keys.begin() + 3 * size * width, keys.end(), NAN);
  std::fill(values.begin() + 3 * size * width, values.end(), NAN);
  const int32_t spoiled = 3;
  KVCache cache{keys.data(), values.data(), slots, size, width, width, DType::F32, /*group=*/1};
  int64_t stride = 5; // ceil(9 / 2)
  std::vector<int32_t> tables(size_t(2 * stride), 77); // group 0's: never read
  int32_t *table = tables.data() + stride;
  std::vector<int32_t> freeSlots = {2, 1, 0};
  std::vector<float> out(size_t(total * heads * hd));
  double scale = 1 / std::sqrt(double(hd));
  for (int64_t at = 0; at < total;) {
    int64_t count = at == 0 ? 4 : 1;
    for (int64_t p = at; p < at + count; ++p)
      if (p % size == 0) { // its block's first token: a block taken
        table[p / size] = freeSlots.back();
        freeSlots.pop_back();
      }
    Step step;
    step.tokens = count;
    step.tableStride = stride;
    step.sequences = {StepSequence{0, count, at, tables.data(), count}};
    attention(Host{}, q.data() + at * heads * hd, k.data() + at * width, v.data() + at * width,
              count, heads, kvHeads, hd, scale, window, 0.0, HeadSplit{}, {cache, step},
              out.data() + at * heads * hd);
    at += count;
    for (int64_t b = 0; b < (std::max<int64_t>(0, at - window + 1)) / size; ++b)
      if (table[b] != spoiled) { // no later query reads it: given back, spoiled
        std::fill_n(keys.begin() + table[b] * size * width, size * width, NAN);
        std::fill_n(values.begin() + table[b] * size * width, size * width, NAN);
        freeSlots.push_back(table[b]);
        table[b] = spoiled;
      }
  }
  expectReferenceAttention(
      out, q, total, heads, kvHeads, hd, scale,
      [&](int64_t t) { return std::max<int64_t>(0, t - window + 1); },
      [&](int64_t j, int64_t c) { return double(k[size_t(j * width + c)]); },
      [&](int64_t j, int64_t c) { return double(v[size_t(j * width + c)]); }, "window");
}

TEST(Kernels, AttentionOfARaggedStepIsEachSequenceAlone) {
  // Three sequences in one step, their blocks (of 2 tokens) scattered through the cache and
  // out of order: one decoding after 5 cached tokens, one prefilling a 4-token chunk after 3,
  // one starting with 3 tokens. Each sequence's output is bit for bit the output of its
  // tokens alone, prefilled whole on a cache of its own (the same kernel: the same
  // arithmetic).
  int64_t heads = 4, kvHeads = 2, hd = 3, width = kvHeads * hd, size = 2;
  struct Sequence {
    int64_t cached, count;
    std::vector<int32_t> blocks;
  };
  std::vector<Sequence> sequences = {{5, 1, {7, 2, 9}}, {3, 4, {4, 0, 5, 11}}, {0, 3, {10, 1}}};
  std::vector<float> keys(12 * size * width), values(12 * size * width);
  KVCache cache{keys.data(), values.data(), 12, size, width, width};
  int64_t tokens = 0;
  for (const Sequence &s : sequences)
    tokens += s.count;
  // Every sequence's tokens, its cached ones first, from its own seed.
  auto all = [&](size_t s, int64_t perToken, unsigned salt) {
    return randomVector((sequences[s].cached + sequences[s].count) * perToken,
                        unsigned(100 * s) + salt);
  };
  Step step;
  step.tokens = tokens;
  std::vector<float> q(tokens * heads * hd), k(tokens * width), v(tokens * width);
  int64_t first = 0;
  for (size_t s = 0; s < sequences.size(); ++s) {
    Sequence &seq = sequences[s];
    auto sq = all(s, heads * hd, 1), sk = all(s, width, 2), sv = all(s, width, 3);
    // Its cached tokens already in its blocks, as earlier steps left them.
    for (int64_t p = 0; p < seq.cached; ++p) {
      int64_t slot = seq.blocks[size_t(p / size)] * size + p % size;
      std::copy_n(sk.begin() + p * width, width, keys.begin() + slot * width);
      std::copy_n(sv.begin() + p * width, width, values.begin() + slot * width);
    }
    std::copy_n(sq.begin() + seq.cached * heads * hd, seq.count * heads * hd,
                q.begin() + first * heads * hd);
    std::copy_n(sk.begin() + seq.cached * width, seq.count * width, k.begin() + first * width);
    std::copy_n(sv.begin() + seq.cached * width, seq.count * width, v.begin() + first * width);
    step.sequences.push_back({first, seq.count, seq.cached, seq.blocks.data(), true});
    first += seq.count;
  }
  std::vector<float> out(tokens * heads * hd, NAN);
  attention(Host{}, q.data(), k.data(), v.data(), tokens, heads, kvHeads, hd, 0.5, 0, 0.0,
            HeadSplit{}, {cache, step}, out.data());
  first = 0;
  for (size_t s = 0; s < sequences.size(); ++s) {
    const Sequence &seq = sequences[s];
    int64_t total = seq.cached + seq.count;
    auto sq = all(s, heads * hd, 1), sk = all(s, width, 2), sv = all(s, width, 3);
    // Alone: its cached tokens on a contiguous cache, then the same new rows.
    std::vector<float> ownKeys(total * width), ownValues(total * width);
    std::copy_n(sk.begin(), seq.cached * width, ownKeys.begin());
    std::copy_n(sv.begin(), seq.cached * width, ownValues.begin());
    KVCache own{ownKeys.data(), ownValues.data(), 1, total, width, width};
    OneSequence alone(seq.cached, seq.count, 1);
    std::vector<float> expected(seq.count * heads * hd);
    attention(Host{}, sq.data() + seq.cached * heads * hd, sk.data() + seq.cached * width,
              sv.data() + seq.cached * width, seq.count, heads, kvHeads, hd, 0.5, 0, 0.0,
              HeadSplit{}, {own, alone.step}, expected.data());
    for (int64_t i = 0; i < seq.count * heads * hd; ++i)
      ASSERT_EQ(out[size_t(first * heads * hd + i)], expected[size_t(i)])
          << "sequence " << s << ", element " << i;
    // Its new keys and values went to their slots.
    for (int64_t p = seq.cached; p < total; ++p) {
      int64_t slot = seq.blocks[size_t(p / size)] * size + p % size;
      for (int64_t c = 0; c < width; ++c) {
        EXPECT_EQ(keys[size_t(slot * width + c)], sk[size_t(p * width + c)]);
        EXPECT_EQ(values[size_t(slot * width + c)], sv[size_t(p * width + c)]);
      }
    }
    first += seq.count;
  }
}

TEST(Kernels, EmbeddingZeroesOtherRanksRows) {
  std::vector<float> table = {1, 1, 2, 2}; // rows 2 and 3 of a vocab of 4, width 2
  int64_t ids[] = {0, 3, 2};
  std::vector<float> out(6, -1);
  ASSERT_TRUE(embedding(Host{}, ids, 3, table.data(), 2, 2, 4, 2, out.data()));
  EXPECT_EQ(out, (std::vector<float>{0, 0, 2, 2, 1, 1}));
  int64_t bad[] = {4};
  EXPECT_FALSE(embedding(Host{}, bad, 1, table.data(), 2, 2, 4, 2, out.data()));
}

TEST(Kernels, Activations) {
  std::vector<float> x = {-1, 0, 2}, y(3);
  silu(Host{}, x.data(), 3, y.data());
  EXPECT_NEAR(y[2], 2 / (1 + std::exp(-2.0)), 1e-6);
  gelu(Host{}, x.data(), 3, false, y.data());
  EXPECT_NEAR(y[0], -0.15865525, 1e-6);
  gelu(Host{}, x.data(), 3, true, y.data());
  EXPECT_NEAR(y[0], -0.15880801, 1e-6);
}

// silu and softmax take e^x from a polynomial, not libm: it must hold to a few ulp over the
// whole range a float can bring, and saturate rather than overflow beyond it.
TEST(Kernels, SiluHoldsToLibmAcrossTheRange) {
  std::vector<float> x;
  for (float v = -120; v <= 120; v += 0.0173f)
    x.push_back(v);
  x.insert(x.end(), {-1e30f, -88.5f, -87.5f, 1e-30f, 0.0f, 87.5f, 88.5f, 1e30f});
  std::vector<float> y(x.size());
  silu(Host{}, x.data(), int64_t(x.size()), y.data());
  for (size_t i = 0; i < x.size(); ++i) {
    double want = double(x[i]) / (1 + std::exp(-double(x[i])));
    ASSERT_TRUE(std::isfinite(y[i])) << "silu(" << x[i] << ")";
    // Relative to the value; below -87, where silu is under 1e-35, absolute.
    EXPECT_NEAR(y[i], want, 4e-7 * std::abs(want) + 1e-30) << "silu(" << x[i] << ")";
  }
}

class Weights : public ::testing::Test {
protected:
  void SetUp() override {
    path = tempPath("w.safetensors");
    std::string error;
    ASSERT_TRUE(writeRandomCheckpoint(path, 7, {{"a.weight", {6, 4}}, {"a.norm.weight", {4}}},
                                      false, error))
        << error;
  }
  void TearDown() override { std::remove(path.c_str()); }
  std::string path;
};

TEST_F(Weights, SlicesMatchTheGenerator) {
  std::string error;
  auto ckpt = Checkpoint::open(path, error);
  ASSERT_TRUE(ckpt) << error;
  std::vector<int64_t> shape = {6, 4};
  std::vector<SliceSpec> specs = {
      {}, // whole
      {0, {0}, {6}, 4, 3},           // rows: the last of 4 pieces of 2 (holds 0 rows, padded)
      {1, {0}, {4}, 3, 1},           // columns: piece 1 of 3, columns 2 and 3
      {0, {0, 2}, {2, 4}, 2, 1},     // strided blocks [2 | 4]: piece 1 of each
      {0, {0}, {6}, 2, 0},           // virtual heads: 2 real pieces, this rank the first
  };
  for (const SliceSpec &spec : specs) {
    std::vector<int64_t> local = spec.localShape(shape);
    std::vector<float> got(local[0] * local[1], -9), want(got.size(), -9);
    uint64_t bytes = 0;
    ASSERT_TRUE(ckpt->read("a.weight", shape, spec, got.data(), bytes, error)) << error;
    generateSlice(7, "a.weight", shape, spec, want.data());
    EXPECT_EQ(got, want) << "dim " << spec.dim << " piece " << spec.piece;
  }
  // The whole tensor, element by element.
  std::vector<float> all(24);
  uint64_t bytes = 0;
  ASSERT_TRUE(ckpt->read("a.weight", shape, {}, all.data(), bytes, error));
  EXPECT_EQ(bytes, 24u * 4);
  for (int i = 0; i < 24; ++i)
    EXPECT_EQ(all[i], randomWeight(7, "a.weight", i));
  EXPECT_NEAR(randomWeight(7, "a.norm.weight", 0), 1.0, 0.1); // norms start near 1
}

TEST_F(Weights, ReadsOnlyItsSlice) {
  std::string error;
  auto ckpt = Checkpoint::open(path, error);
  std::vector<float> out(2 * 4);
  uint64_t bytes = 0;
  ASSERT_TRUE(ckpt->read("a.weight", {6, 4}, {0, {0}, {6}, 3, 1}, out.data(), bytes, error));
  EXPECT_EQ(bytes, 2u * 4 * 4);
}

TEST_F(Weights, ErrorsNameTheTensor) {
  std::string error;
  auto ckpt = Checkpoint::open(path, error);
  std::vector<float> out(64);
  uint64_t bytes = 0;
  EXPECT_FALSE(ckpt->read("b.weight", {6, 4}, {}, out.data(), bytes, error));
  EXPECT_EQ(error, "tensor b.weight is missing from the checkpoint");
  EXPECT_FALSE(ckpt->read("a.weight", {4, 6}, {}, out.data(), bytes, error));
  EXPECT_EQ(error, "tensor a.weight has shape [6, 4], the model expects [4, 6]");
  // Truncated: cut the file short of the last tensor's data. Every tensor's extent is
  // checked against the file when it opens, before any is read.
  std::ifstream in(path, std::ios::binary);
  std::string data((std::istreambuf_iterator<char>(in)), {});
  std::string cut = tempPath("cut.safetensors");
  std::ofstream(cut, std::ios::binary) << data.substr(0, data.size() - 8);
  EXPECT_FALSE(Checkpoint::open(cut, error));
  EXPECT_NE(error.find("tensor a.norm.weight is truncated"), std::string::npos) << error;
  std::remove(cut.c_str());
  // Not a safetensors file at all.
  std::ofstream(cut, std::ios::binary) << "abc";
  EXPECT_FALSE(Checkpoint::open(cut, error));
  EXPECT_NE(error.find("truncated safetensors file"), std::string::npos) << error;
  std::remove(cut.c_str());
}

TEST(WeightsStacked, SourcesStackAlongDimZero) {
  // Mixtral's checkpoints hold each expert's matrices apart; the model's parameter stacks
  // them. Read through `sources`, a slice may cross from one piece into the next.
  std::string path = tempPath("stacked.safetensors"), error;
  ASSERT_TRUE(writeRandomCheckpoint(
      path, 5, {{"e.0", {2, 3}}, {"e.1", {2, 3}}, {"e.2", {2, 3}}, {"e.3", {2, 3}}}, false,
      error))
      << error;
  auto ckpt = Checkpoint::open(path, error);
  ASSERT_TRUE(ckpt) << error;
  std::vector<std::string> sources = {"e.0", "e.1", "e.2", "e.3"};
  std::vector<int64_t> shape = {4, 2, 3}; // [experts, rows, cols]
  auto want = [&](int64_t expert, int64_t row, int64_t col) {
    return randomWeight(5, "e." + std::to_string(expert), uint64_t(row * 3 + col));
  };
  // Experts 2 and 3 (a grouped_gemm rank: one run over two pieces).
  std::vector<float> got(2 * 2 * 3);
  uint64_t bytes = 0;
  ASSERT_TRUE(ckpt->read("stacked", shape, {0, {0}, {4}, 2, 1}, got.data(), bytes, error,
                         sources))
      << error;
  for (int64_t e = 0; e < 2; ++e)
    for (int64_t r = 0; r < 2; ++r)
      for (int64_t c = 0; c < 3; ++c)
        EXPECT_EQ(got[(e * 2 + r) * 3 + c], want(2 + e, r, c));
  // Row 1 of every expert (a split of dim 1: one run inside each piece).
  std::vector<float> rows(4 * 3);
  ASSERT_TRUE(ckpt->read("stacked", shape, {1, {0}, {2}, 2, 1}, rows.data(), bytes, error,
                         sources))
      << error;
  for (int64_t e = 0; e < 4; ++e)
    for (int64_t c = 0; c < 3; ++c)
      EXPECT_EQ(rows[e * 3 + c], want(e, 1, c));
  // A missing piece, and pieces that do not stack into the shape, name the tensors.
  EXPECT_FALSE(ckpt->read("stacked", shape, {}, got.data(), bytes, error,
                          {"e.0", "e.1", "e.9", "e.3"}));
  EXPECT_EQ(error, "tensor stacked is missing from the checkpoint, and so is e.9, one of the 4 "
                   "tensors it stacks");
  EXPECT_FALSE(ckpt->read("stacked", {2, 2, 3}, {}, got.data(), bytes, error, sources));
  EXPECT_EQ(error, "tensor e.0 has shape [2, 3], but 4 of them must stack into stacked [2, 2, 3]");
  std::remove(path.c_str());
}

TEST(Weights16, BF16ReadsBackClose) {
  std::string path = tempPath("bf16.safetensors"), error;
  ASSERT_TRUE(writeRandomCheckpoint(path, 3, {{"w", {3, 5}}}, true, error));
  auto ckpt = Checkpoint::open(path, error);
  ASSERT_TRUE(ckpt) << error;
  std::vector<float> out(15);
  uint64_t bytes = 0;
  ASSERT_TRUE(ckpt->read("w", {3, 5}, {}, out.data(), bytes, error)) << error;
  for (int i = 0; i < 15; ++i)
    EXPECT_NEAR(out[i], randomWeight(3, "w", i), 1e-3);
  std::remove(path.c_str());
}

/// Runs `body(rank)` in `world` forked processes; true when every one exits 0. A rank's
/// exception is printed with its rank and fails it there: it never unwinds into the forked
/// copy of the test runner, which would go on to run the tests after this one.
template <typename Body> bool forkRanks(int world, Body body) {
  std::vector<pid_t> pids;
  for (int r = 0; r < world; ++r) {
    pid_t pid = fork();
    if (pid == 0) {
      bool ok = false;
      try {
        ok = body(r);
      } catch (const std::exception &e) {
        std::fprintf(stderr, "rank %d: %s\n", r, e.what());
      }
      _exit(ok ? 0 : 1);
    }
    pids.push_back(pid);
  }
  bool ok = true;
  for (pid_t pid : pids) {
    int status = 0;
    waitpid(pid, &status, 0);
    ok &= WIFEXITED(status) && WEXITSTATUS(status) == 0;
  }
  return ok;
}

/// A rank's result, once every rank has it: a barrier first, as the driver's leave() does, so
/// that no rank closes its connections while a peer may still read from them (Gloo's
/// reduce-scatter returns with its last notifications sent but not waited for; a rank that
/// exited at once could reset the connection under them).
bool together(Comm &group, bool ok) {
  if (ok)
    group.barrier();
  return ok;
}

/// Runs `test` once per transport of ranks on one machine (TPC_TRANSPORT), each in a
/// rendezvous directory of its own.
template <typename Test> void onEachTransport(const char *name, Test test) {
  for (const char *transport : {"gloo", "shm"}) {
    SCOPED_TRACE(std::string("TPC_TRANSPORT=") + transport);
    ::setenv("TPC_TRANSPORT", transport, 1);
    test(tempPath(std::string(name) + "-" + transport));
    ::unsetenv("TPC_TRANSPORT");
  }
}

TEST(Comm, CollectivesAcrossThreeRanks) {
  onEachTransport("rdzv3", [](const std::string &dir) {
    EXPECT_TRUE(forkRanks(3, [&](int rank) {
      std::string error;
      auto group = Comm::connect({rank, 3, dir, "127.0.0.1", 20}, error);
      if (!group)
        return false;
      return together(*group, [&] {
        Communicator &comm = group->communicator();
        std::vector<float> data = {float(rank), 1};
        comm.allReduce(data.data(), 2);
        if (data != std::vector<float>{3, 3})
          return false;
        std::vector<float> gathered(6);
        float mine[] = {float(rank), float(10 * rank)};
        comm.allGather(mine, 2, gathered.data());
        if (gathered != std::vector<float>{0, 0, 1, 10, 2, 20})
          return false;
        float send[] = {float(rank * 10 + 0), float(rank * 10 + 1), float(rank * 10 + 2)};
        std::vector<float> recv(3);
        comm.allToAll(send, 1, recv.data());
        if (recv != std::vector<float>{float(rank), float(10 + rank), float(20 + rank)})
          return false;
        // Parts of two: rank r receives the sum of every rank's r-th part.
        std::vector<float> parts(6), sum(2);
        for (int i = 0; i < 6; ++i)
          parts[size_t(i)] = float(100 * rank + i);
        comm.reduceScatter(parts.data(), 2, sum.data());
        return sum == std::vector<float>{float(300 + 6 * rank), float(303 + 6 * rank)};
      }());
    }));
  });
}

TEST(Comm, SharedMemoryMovesWhatDoesNotFitOneSlot) {
  // Larger than a slot: the collectives go in rounds, and still sum, gather and exchange
  // every element (2.5 slots of floats per rank).
  ::setenv("TPC_TRANSPORT", "shm", 1);
  std::string dir = tempPath("rdzv-shm-large");
  EXPECT_TRUE(forkRanks(2, [&](int rank) {
    std::string error;
    auto group = Comm::connect({rank, 2, dir, "127.0.0.1", 20}, error);
    if (!group)
      return false;
    Communicator &comm = group->communicator();
    size_t n = 5 * (size_t(1) << 20) / 8;
    std::vector<float> data(n), gathered(2 * n), swapped(n);
    for (size_t i = 0; i < n; ++i)
      data[i] = float(i % 1000) + float(rank);
    std::vector<float> mine = data;
    comm.allGather(mine.data(), n, gathered.data());
    comm.allToAll(mine.data(), n / 2, swapped.data());
    comm.allReduce(data.data(), n);
    for (size_t i = 0; i < n; ++i)
      if (data[i] != 2 * float(i % 1000) + 1 || gathered[i] != float(i % 1000) ||
          gathered[n + i] != float(i % 1000) + 1)
        return false;
    // Rank r's r-th half of every rank, in rank order.
    for (size_t i = 0; i < n / 2; ++i)
      for (int from = 0; from < 2; ++from)
        if (swapped[size_t(from) * (n / 2) + i] !=
            float((size_t(rank) * (n / 2) + i) % 1000) + float(from))
          return false;
    return true;
  }));
  ::unsetenv("TPC_TRANSPORT");
}

/// A port nothing listens on now (bound, read and closed).
int freePort() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof addr;
  ::bind(fd, reinterpret_cast<sockaddr *>(&addr), sizeof addr);
  ::getsockname(fd, reinterpret_cast<sockaddr *>(&addr), &length);
  ::close(fd);
  return ntohs(addr.sin_port);
}

/// Ranks that meet at rank 0's TCP store, each on the "host" `hostOf(rank)` says (GROUP_RANK):
/// the hosts are this machine, so shared memory works inside each, and the group's
/// collectives are the hierarchy's.
template <typename HostOf, typename Body>
bool hostRanks(int world, HostOf hostOf, Body body) {
  int port = freePort();
  return forkRanks(world, [&](int rank) {
    ::setenv("GROUP_RANK", std::to_string(hostOf(rank)).c_str(), 1);
    CommOptions options;
    options.rank = rank;
    options.world = world;
    options.timeoutSeconds = 20;
    options.storeHost = "127.0.0.1";
    options.storePort = port;
    std::string error;
    auto group = Comm::connect(options, error);
    if (!group) {
      std::fprintf(stderr, "rank %d: %s\n", rank, error.c_str());
      return false;
    }
    return together(*group, body(rank, *group));
  });
}

TEST(Comm, HierarchyOverHostsSumsGathersAndExchanges) {
  // 2 hosts of 2 ranks, and hosts of 2 + 1: every collective gives what a flat one would,
  // the same bits on every rank, with sizes past a shared-memory slot; the trace says which
  // path each took.
  auto check = [](int world, auto hostOf) {
    return hostRanks(world, hostOf, [world](int rank, Comm &group) {
      Communicator &comm = group.communicator();
      std::vector<TraceEntry> trace;
      comm.traceInto(&trace);
      size_t n = (size_t(1) << 20) / 4 * 3 + 5; // three slots and a bit
      std::vector<float> data(n);
      for (size_t i = 0; i < n; ++i)
        data[i] = float(i % 97) * 0.5f + float(rank);
      comm.allReduce(data.data(), n);
      float ranks = float(world * (world - 1) / 2);
      for (size_t i = 0; i < n; ++i)
        if (data[i] != float(world) * float(i % 97) * 0.5f + ranks)
          return false;
      // Uneven pieces: rank r gives r + 1 elements of value 10 r + i.
      std::vector<size_t> counts;
      size_t total = 0;
      for (int r = 0; r < world; ++r)
        counts.push_back(size_t(r + 1)), total += size_t(r + 1);
      std::vector<float> mine(size_t(rank + 1)), all(total);
      for (int i = 0; i <= rank; ++i)
        mine[size_t(i)] = float(10 * rank + i);
      comm.allGatherV(mine.data(), counts, all.data());
      size_t at = 0;
      for (int r = 0; r < world; ++r)
        for (int i = 0; i <= r; ++i)
          if (all[at++] != float(10 * r + i))
            return false;
      std::vector<float> parts(2 * static_cast<size_t>(world)), sum(2),
          swapped(static_cast<size_t>(world));
      for (size_t i = 0; i < parts.size(); ++i)
        parts[i] = float(100 * rank) + float(i);
      comm.reduceScatter(parts.data(), 2, sum.data());
      float base = float(100 * world * (world - 1) / 2);
      if (sum != std::vector<float>{base + float(world * 2 * rank),
                                    base + float(world * (2 * rank + 1))})
        return false;
      std::vector<float> send(static_cast<size_t>(world));
      for (int r = 0; r < world; ++r)
        send[size_t(r)] = float(10 * rank + r);
      comm.allToAll(send.data(), 1, swapped.data());
      for (int r = 0; r < world; ++r)
        if (swapped[size_t(r)] != float(10 * r + rank))
          return false;
      return trace.size() == 4 && trace[0].path == "shm+tcp" && trace[1].path == "shm+tcp" &&
             trace[3].kind == "all_to_all" && trace[3].path == "tcp";
    });
  };
  EXPECT_TRUE(check(4, [](int rank) { return rank / 2; }));
  EXPECT_TRUE(check(3, [](int rank) { return rank < 2 ? 0 : 1; }));
}

TEST(Comm, OneRankAHostRunsEveryCollectiveOnTheTcpMesh) {
  // 3 hosts of one rank: the mesh is the group, for all-to-all and reduce-scatter too.
  EXPECT_TRUE(hostRanks(3, [](int rank) { return rank; }, [](int rank, Comm &group) {
    Communicator &comm = group.communicator();
    std::vector<TraceEntry> trace;
    comm.traceInto(&trace);
    std::vector<float> send(3), got(3), parts(6), sum(2);
    for (int r = 0; r < 3; ++r)
      send[size_t(r)] = float(10 * rank + r);
    comm.allToAll(send.data(), 1, got.data());
    for (int r = 0; r < 3; ++r)
      if (got[size_t(r)] != float(10 * r + rank))
        return false;
    for (size_t i = 0; i < parts.size(); ++i)
      parts[i] = float(100 * rank) + float(i);
    comm.reduceScatter(parts.data(), 2, sum.data());
    if (sum != std::vector<float>{float(300 + 6 * rank), float(303 + 6 * rank)})
      return false;
    return trace.size() == 2 && trace[0].path == "tcp" && trace[1].path == "tcp";
  }));
}

TEST(Comm, OneRankAHostIsTheTcpMeshAndOneHostIsSharedMemory) {
  auto pathOf = [](int rank, Comm &group) {
    Communicator &comm = group.communicator();
    std::vector<TraceEntry> trace;
    comm.traceInto(&trace);
    float x = float(rank);
    comm.allReduce(&x, 1);
    return x == 1 && trace.size() == 1 ? trace[0].path : std::string("wrong");
  };
  EXPECT_TRUE(hostRanks(2, [](int rank) { return rank; },
                        [&](int rank, Comm &group) { return pathOf(rank, group) == "tcp"; }));
  EXPECT_TRUE(hostRanks(2, [](int) { return 0; },
                        [&](int rank, Comm &group) { return pathOf(rank, group) == "shm"; }));
}

/// Whether rank 0, waiting on rank 1 in `wait` over shared memory, hears at once (within 5 s,
/// not after --timeout) the reason rank 1 left when it stopped.
bool hearsWhyAPeerStopped(const char *name, const std::function<void(Communicator &)> &wait) {
  ::setenv("TPC_TRANSPORT", "shm", 1);
  std::string dir = tempPath(name);
  bool heard = forkRanks(2, [&](int rank) {
    std::string error;
    auto group = Comm::connect({rank, 2, dir, "127.0.0.1", 20}, error);
    if (!group)
      return false;
    if (rank == 1) {
      group->recordExit("out of patience");
      return true;
    }
    auto start = std::chrono::steady_clock::now();
    try {
      wait(group->communicator());
    } catch (const std::exception &e) {
      return std::string(e.what()).find("rank 1 stopped: out of patience") !=
                 std::string::npos &&
             std::chrono::steady_clock::now() - start < std::chrono::seconds(5);
    }
    return false;
  });
  ::unsetenv("TPC_TRANSPORT");
  return heard;
}

TEST(Comm, AStoppingRankLeavesItsReasonInTheSegment) {
  // A peer waiting on a rank that stopped hears why at once, not after --timeout.
  EXPECT_TRUE(hearsWhyAPeerStopped("rdzv-shm-reason", [](Communicator &comm) {
    float x = 1;
    comm.allReduce(&x, 1);
  }));
}

TEST(Comm, UnknownTransportIsRefused) {
  ::setenv("TPC_TRANSPORT", "carrier-pigeon", 1);
  std::string dir = tempPath("rdzv-bad-transport");
  EXPECT_TRUE(forkRanks(2, [&](int rank) {
    std::string error;
    auto group = Comm::connect({rank, 2, dir, "127.0.0.1", 20}, error);
    return !group && error == "TPC_TRANSPORT must be auto, shm, gloo or mpi, not 'carrier-pigeon'";
  }));
  ::unsetenv("TPC_TRANSPORT");
}

/// Message `salt` of `count` elements from rank `from`: whole numbers below 2^24, exact in
/// fp32, different for every sender and message.
std::vector<float> message(int from, int salt, size_t count) {
  std::vector<float> m(count);
  for (size_t i = 0; i < count; ++i)
    m[i] = float((i * 31 + size_t(from) * 1000003 + size_t(salt) * 7919) % (size_t(1) << 24));
  return m;
}

/// Whether rank `from`'s message `salt` of `count` elements arrives whole through `comm`.
bool receives(Communicator &comm, int from, int salt, size_t count) {
  std::vector<float> got(count, -1.0f);
  comm.recv(got.data(), count, from);
  return got == message(from, salt, count);
}

TEST(Comm, SplitAndPointToPointOnEachTransport) {
  // 4 ranks as 2 pipeline stages of 2, numbered stage-major: each stage's group sums on its
  // own, and the whole group carries messages between the stages: 3 floats, more than two
  // shared-memory slots, several back to back, a reply, and one sender's messages to two
  // receivers waiting at once. The trace lists them with their bytes.
  onEachTransport("rdzv-split", [](const std::string &dir) {
    EXPECT_TRUE(forkRanks(4, [&](int rank) {
      std::string error;
      auto world = Comm::connect({rank, 4, dir, "127.0.0.1", 20}, error);
      auto stage = world ? world->split(rank / 2, rank % 2, error) : nullptr;
      if (!stage) {
        std::fprintf(stderr, "rank %d: %s\n", rank, error.c_str());
        return false;
      }
      Communicator &tp = stage->communicator();
      if (stage->rank() != rank % 2 || stage->world() != 2 || tp.rank != rank % 2 ||
          tp.world != 2)
        return false;
      float sum = float(rank);
      tp.allReduce(&sum, 1);
      if (sum != (rank < 2 ? 1.0f : 5.0f))
        return false;
      // Inside a stage too.
      if (tp.rank == 0)
        tp.send(message(0, 9, 3).data(), 3, 1);
      else if (!receives(tp, 0, 9, 3))
        return false;

      Communicator &comm = world->communicator();
      std::vector<TraceEntry> trace;
      comm.traceInto(&trace);
      const size_t small = 3, large = (size_t(2) << 20) / sizeof(float) + 5;
      bool ok = true;
      if (rank < 2) {
        comm.send(message(rank, 0, small).data(), small, rank + 2);
        comm.send(message(rank, 1, large).data(), large, rank + 2);
        for (int salt = 2; salt < 5; ++salt)
          comm.send(message(rank, salt, size_t(salt)).data(), size_t(salt), rank + 2);
      } else {
        ok &= receives(comm, rank - 2, 0, small) && receives(comm, rank - 2, 1, large);
        for (int salt = 2; salt < 5; ++salt)
          ok &= receives(comm, rank - 2, salt, size_t(salt));
      }
      if (rank == 3)
        comm.send(message(3, 5, small).data(), small, 0);
      if (rank == 0) {
        ok &= receives(comm, 3, 5, small);
        for (int salt = 6; salt < 9; ++salt)
          comm.send(message(0, salt, small).data(), small, salt == 7 ? 2 : 3);
      }
      if (rank == 2)
        ok &= receives(comm, 0, 7, small);
      if (rank == 3)
        ok &= receives(comm, 0, 6, small) && receives(comm, 0, 8, small);
      if (!ok)
        return false;

      std::string path = std::string(std::getenv("TPC_TRANSPORT")) == "gloo" ? "tcp" : "shm";
      std::vector<std::pair<std::string, uint64_t>> wire;
      for (const TraceEntry &e : trace) {
        wire.push_back({e.kind, e.bytes});
        ok &= e.path == path;
      }
      using Wire = std::vector<std::pair<std::string, uint64_t>>;
      if (rank == 0)
        ok &= wire == Wire{{"send", 12}, {"send", large * 4}, {"send", 8}, {"send", 12},
                           {"send", 16}, {"recv", 12}, {"send", 12}, {"send", 12},
                           {"send", 12}};
      if (rank == 2)
        ok &= wire == Wire{{"recv", 12}, {"recv", large * 4}, {"recv", 8}, {"recv", 12},
                           {"recv", 16}, {"recv", 12}};
      comm.traceInto(nullptr);

      // Parts ordered by key, not rank: {2, 0} and {3, 1}; a second split of the same group.
      auto reversed = world->split(rank % 2, -rank, error);
      if (!reversed || reversed->rank() != (rank < 2 ? 1 : 0))
        return false;
      std::vector<float> ranks(2);
      float mine = float(rank);
      reversed->communicator().allGather(&mine, 1, ranks.data());
      if (ranks != (rank % 2 == 0 ? std::vector<float>{2, 0} : std::vector<float>{3, 1}))
        return false;
      // A rank alone in its part.
      auto alone = world->split(rank, 0, error);
      if (!alone || alone->world() != 1 || alone->communicator().pathOf("all_reduce") != "local")
        return false;

      // The parts go first; the whole group still works.
      alone.reset();
      reversed.reset();
      stage.reset();
      float all = 1;
      comm.allReduce(&all, 1);
      return together(*world, all == 4);
    }));
  });
}

TEST(Comm, AReceiveFromAStoppedRankSaysWhy) {
  // A message waits the way a collective does: a sender that stopped is named at once.
  EXPECT_TRUE(hearsWhyAPeerStopped("rdzv-shm-recv-reason", [](Communicator &comm) {
    float x = 0;
    comm.recv(&x, 1, 1);
  }));
}

TEST(Comm, SplitAcrossHostsChoosesEachPartsTransport) {
  // 2 hosts of 2 ranks: a part with a rank on each host is the hosts' TCP mesh, a part on one
  // host shared memory; messages cross the hosts in the whole group (over Gloo's mesh) and in
  // a part (over the TCP mesh), larger than a slot.
  EXPECT_TRUE(hostRanks(4, [](int rank) { return rank / 2; }, [](int rank, Comm &group) {
    std::string error;
    auto across = group.split(rank % 2, rank, error);
    auto within = group.split(rank / 2, rank, error);
    if (!across || !within)
      return false;
    std::vector<TraceEntry> trace;
    across->communicator().traceInto(&trace);
    within->communicator().traceInto(&trace);
    group.communicator().traceInto(&trace);
    float a = float(rank), w = float(rank);
    across->communicator().allReduce(&a, 1);
    within->communicator().allReduce(&w, 1);
    if (a != (rank % 2 == 0 ? 2.0f : 4.0f) || w != (rank < 2 ? 1.0f : 5.0f))
      return false;
    const size_t large = (size_t(1) << 20) / sizeof(float) + 7;
    bool ok = true;
    if (rank == 0)
      group.communicator().send(message(0, 0, large).data(), large, 3);
    if (rank == 3)
      ok &= receives(group.communicator(), 0, 0, large);
    if (rank == 1)
      across->communicator().send(message(0, 1, large).data(), large, 1);
    if (rank == 3)
      ok &= receives(across->communicator(), 0, 1, large);
    std::vector<std::string> paths;
    for (const TraceEntry &e : trace)
      paths.push_back(e.kind + " " + e.path);
    std::vector<std::string> want = {"all_reduce tcp", "all_reduce shm"};
    if (rank == 0)
      want.push_back("send tcp");
    if (rank == 1)
      want.push_back("send tcp");
    if (rank == 3)
      want.insert(want.end(), {"recv tcp", "recv tcp"});
    return ok && paths == want;
  }));
}

/// The [rows, cols] matrix whose element (i, j) is i * 100 + j + 1, times `factor`.
std::vector<float> numbered(int64_t rows, int64_t cols, float factor = 1) {
  std::vector<float> m(size_t(rows * cols));
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j)
      m[size_t(i * cols + j)] = factor * float(i * 100 + j + 1);
  return m;
}

TEST(Collectives, RefusesVariableGathersItsCommunicatorCannotDo) {
  // The program's gather mode is the compiler's decision (#tp.target); a communicator that
  // pads (NCCL's) cannot run a program compiled for unpadded gathers, and says so at start.
  HostMemory memory;
  LocalCommunicator padded(0, 1, memory, /*variableSizes=*/false);
  try {
    Collectives cx(padded, memory, /*variableGathers=*/true);
    FAIL() << "a padding communicator took a program of variable gathers";
  } catch (const std::runtime_error &e) {
    EXPECT_NE(std::string(e.what()).find("gather mode is variable"), std::string::npos)
        << e.what();
  }
  EXPECT_NO_THROW(Collectives(padded, memory, /*variableGathers=*/false));
}

/// Runs `body(rank, group, trace)` on 3 ranks over each transport, the group's collectives
/// traced into `trace`; every rank's body must return true.
template <typename Body> void onThreeTracedRanks(const char *name, Body body) {
  onEachTransport(name, [&](const std::string &dir) {
    EXPECT_TRUE(forkRanks(3, [&](int rank) {
      std::string error;
      auto group = Comm::connect({rank, 3, dir, "127.0.0.1", 20}, error);
      if (!group)
        return false;
      std::vector<TraceEntry> trace;
      group->communicator().traceInto(&trace);
      return together(*group, body(rank, *group, trace));
    }));
  });
}

TEST(Collectives, UnevenStridedBlocksAcrossThreeRanks) {
  // A feature dim of two strided blocks, 5 and 4 wide, over 3 ranks: pieces of 2 (the last
  // rank's piece of the first block holds 1 real column, padding after it) and 2 (the last
  // one's piece of the second block is padding only). 3 tokens, one per rank when split.
  onThreeTracedRanks("rdzv-collectives", [](int rank, Comm &group, std::vector<TraceEntry> &trace) {
    HostMemory memory;
    // The CPU target's gather mode: every CPU transport gathers pieces of their own size.
    Collectives cx(group.communicator(), memory, /*variableGathers=*/true);
    const std::vector<int64_t> blocks = {5, 4};
    const int64_t rows = 3, global = 9, local = 4;
    std::vector<float> whole = numbered(rows, global), mine(size_t(rows * local));
    cx.takeColumns(whole.data(), rows, blocks, mine.data());

    std::vector<float> gathered(size_t(rows * global));
    cx.allGatherColumns(mine.data(), rows, blocks, gathered.data(), "gather");
    if (gathered != whole)
      return false;
    // One block of 4: pieces of 2, 2 and none (rank 2 holds padding only).
    std::vector<float> four = numbered(rows, 4), twoOfFour(size_t(rows * 2)), back(four.size());
    cx.takeColumns(four.data(), rows, {4}, twoOfFour.data());
    cx.allGatherColumns(twoOfFour.data(), rows, {4}, back.data(), "gather four");
    if (back != four)
      return false;

    // Partial sums (rank r holds (r + 1) * whole): reduce-scattered, this rank's columns of
    // 6 * whole; by rows, its token of it.
    std::vector<float> partial = numbered(rows, global, float(rank + 1));
    std::vector<float> expected(size_t(rows * local)), got(size_t(rows * local));
    std::vector<float> six = numbered(rows, global, 6);
    cx.takeColumns(six.data(), rows, blocks, expected.data());
    cx.reduceScatterColumns(partial.data(), rows, blocks, got.data(), "scatter columns");
    if (got != expected)
      return false;
    std::vector<float> row(static_cast<size_t>(global));
    cx.reduceScatterRows(partial.data(), rows, global, row.data(), "scatter rows");
    if (!std::equal(row.begin(), row.end(), six.begin() + rank * global))
      return false;

    // Tokens to features and back.
    std::vector<float> byColumns(size_t(rows * local)), byRows(static_cast<size_t>(global));
    cx.allToAll(whole.data() + rank * global, rows, blocks, true, byColumns.data(), "to columns");
    if (byColumns != mine)
      return false;
    cx.allToAll(mine.data(), rows, blocks, false, byRows.data(), "to rows");
    if (!std::equal(byRows.begin(), byRows.end(), whole.begin() + rank * global))
      return false;

    // What went on the wire: each call once, its bytes the larger buffer of one rank, with
    // the padding (4 local columns, 12 with every rank's), but for the gathers: Gloo's
    // allgatherv moves the real columns only (9, and 4).
    group.barrier();
    std::vector<std::pair<std::string, uint64_t>> wire;
    for (const TraceEntry &e : trace)
      wire.push_back({e.kind + " " + e.module, e.bytes});
    return wire == std::vector<std::pair<std::string, uint64_t>>{
                       {"all_gather gather", 3 * 9 * 4},
                       {"all_gather gather four", 3 * 4 * 4},
                       {"reduce_scatter scatter columns", 3 * 12 * 4},
                       {"reduce_scatter scatter rows", 3 * 9 * 4},
                       {"all_to_all to columns", 12 * 4},
                       {"all_to_all to rows", 12 * 4}};
  });
}

TEST(Collectives, GreedyArgmaxOnTheRanksIsTheGatheredRowsArgmax) {
  // A greedy step's argmax found on the ranks (Context::argmaxColumns) against the argmax of
  // the gathered rows, as the sampler takes it: the first of equal logits. A vocabulary of 8
  // over 3 ranks (pieces of 3, 3 and 2 real columns) and one of 4 (2, 2 and none: rank 2
  // holds padding only); rows with the largest on the last rank, equal across ranks, equal
  // within a rank, all equal, all negative.
  onThreeTracedRanks("rdzv-argmax", [](int rank, Comm &group, std::vector<TraceEntry> &trace) {
    Context cx;
    cx.rank = rank;
    cx.tp = 3;
    cx.attach(group, /*variableGathers=*/true);
    bool ok = true;
    auto check = [&](const std::vector<float> &whole, int64_t vocab) {
      int64_t rows = int64_t(whole.size()) / vocab, local = pieceSize(vocab, 3);
      std::vector<float> mine(size_t(rows * local));
      cx.collectives().takeColumns(whole.data(), rows, {vocab}, mine.data());
      cx.argmaxReady = false;
      cx.argmaxColumns(mine.data(), rows, {vocab}, "lm_head");
      ok &= cx.argmaxReady && cx.argmax.size() == size_t(rows);
      for (int64_t r = 0; ok && r < rows; ++r) {
        const float *row = whole.data() + r * vocab;
        ok &= cx.argmax[size_t(r)] == std::max_element(row, row + vocab) - row;
      }
    };
    check({0, 1, 2, 3, 4, 5, 6, 9,         // the last rank's
           1, 7, 0, 2, 7, 3, 7, 1,         // equal on ranks 0, 1 and 2: the first
           0, 0, 1, 5, 2, 5, 0, 0,         // equal within rank 1
           2, 2, 2, 2, 2, 2, 2, 2,         // all equal: id 0
           -9, -3, -4, -8, -2.5f, -7, -6, -2.75f},
          8);
    check({1, 3, 3, 0, -1, -5, -1, -2}, 4);
    // On the wire: a (logit, id) pair a row from each rank, 4 bytes an element.
    group.barrier();
    ok &= trace.size() == 2 && trace[0].kind == "all_gather" && trace[0].module == "lm_head" &&
          trace[0].bytes == 3 * 5 * 2 * 4 && trace[1].bytes == 3 * 2 * 2 * 4;
    return ok;
  });
}

TEST(Collectives, ARowWithALogitNotFiniteOnAnyRankHasNoArgmax) {
  // A vocabulary of 8 over 3 ranks (columns 0-2, 3-5 and 6-7): a NaN placed on each rank in
  // turn, in the first column of its slice (where it once hid the rank's real maximum) and in
  // its last, and an infinity, each make the row's argmax -2, whatever the others hold; a
  // clean row beside them keeps its argmax. The oracle is the rows as written.
  onThreeTracedRanks("rdzv-argmax-nan", [](int rank, Comm &group, std::vector<TraceEntry> &) {
    Context cx;
    cx.rank = rank;
    cx.tp = 3;
    cx.attach(group, /*variableGathers=*/true);
    const float nan = std::nanf(""), inf = INFINITY;
    std::vector<std::vector<float>> rows;
    for (int64_t column : {0, 2, 3, 5, 6, 7})
      for (float bad : {nan, inf, -inf}) {
        std::vector<float> row = {0, 1, 2, 9, 4, 5, 6, 7};
        row[size_t(column)] = bad;
        rows.push_back(row);
      }
    rows.push_back({0, 1, 2, 9, 4, 5, 6, 7}); // clean: 3
    std::vector<float> whole;
    for (const std::vector<float> &row : rows)
      whole.insert(whole.end(), row.begin(), row.end());
    int64_t count = int64_t(rows.size()), local = pieceSize(8, 3);
    std::vector<float> mine(size_t(count * local));
    cx.collectives().takeColumns(whole.data(), count, {8}, mine.data());
    cx.argmaxColumns(mine.data(), count, {8}, "lm_head");
    bool ok = cx.argmaxReady && cx.argmax.size() == rows.size();
    for (size_t r = 0; ok && r + 1 < rows.size(); ++r)
      ok &= cx.argmax[r] == -2;
    return ok && cx.argmax.back() == 3;
  });
}

TEST(Comm, StaleRendezvousIsRefused) {
  std::string dir = tempPath("rdzv-stale");
  ASSERT_TRUE(forkRanks(2, [&](int rank) {
    std::string error;
    auto group = Comm::connect({rank, 2, dir, "127.0.0.1", 20}, error);
    if (group)
      group->retire();
    return bool(group);
  }));
  std::string error;
  EXPECT_FALSE(Comm::connect({0, 2, dir, "127.0.0.1", 2}, error));
  EXPECT_NE(error.find("is stale"), std::string::npos) << error;
}

TEST(Weights16, IndexAndShardsAndF16) {
  // Two shards and an index, as HF writes large checkpoints; the second shard is F16.
  std::string dir = tempPath("sharded"), error;
  ASSERT_EQ(::mkdir(dir.c_str(), 0700), 0);
  ASSERT_TRUE(writeRandomCheckpoint(dir + "/a.safetensors", 9, {{"x", {2, 3}}}, false, error));
  std::string header = R"({"y":{"dtype":"F16","shape":[3],"data_offsets":[0,6]}})";
  header.append((8 - header.size() % 8) % 8, ' ');
  uint64_t size = header.size();
  uint16_t halves[] = {0x3c00, 0xc000, 0x3555}; // 1, -2, 0.33325195
  std::ofstream shard(dir + "/b.safetensors", std::ios::binary);
  shard.write(reinterpret_cast<const char *>(&size), 8);
  shard << header;
  shard.write(reinterpret_cast<const char *>(halves), 6);
  shard.close();
  std::ofstream(dir + "/model.safetensors.index.json")
      << R"({"metadata": {}, "weight_map": {"x": "a.safetensors", "y": "b.safetensors"}})";
  auto ckpt = Checkpoint::open(dir, error); // the directory finds the index
  ASSERT_TRUE(ckpt) << error;
  std::vector<float> x(6), y(3);
  uint64_t bytes = 0;
  ASSERT_TRUE(ckpt->read("x", {2, 3}, {}, x.data(), bytes, error)) << error;
  EXPECT_EQ(x[5], randomWeight(9, "x", 5));
  ASSERT_TRUE(ckpt->read("y", {3}, {}, y.data(), bytes, error)) << error;
  EXPECT_EQ(y[0], 1.0f);
  EXPECT_EQ(y[1], -2.0f);
  EXPECT_NEAR(y[2], 0.33325195, 1e-7);
  EXPECT_FALSE(Checkpoint::open(dir + "/missing", error));
}

// The runtime's one whole-file read: all of a regular file, an empty one too; nothing from a
// missing file or a directory (which opens, but reads nothing), `out` then left as it was.
TEST(Files, ReadFileReadsWholeRegularFilesOnly) {
  std::string path = tempPath("whole.txt"), text = "before";
  EXPECT_FALSE(readFile(path, text));
  EXPECT_EQ(text, "before");
  std::ofstream(path) << "two\nlines";
  ASSERT_TRUE(readFile(path, text));
  EXPECT_EQ(text, "two\nlines");
  std::ofstream(path, std::ios::trunc).close();
  ASSERT_TRUE(readFile(path, text));
  EXPECT_EQ(text, "");
  text = "kept";
  EXPECT_FALSE(readFile(::testing::TempDir(), text));
  EXPECT_EQ(text, "kept");
  std::remove(path.c_str());
}

// --max-model-len: 2048 by default, fewer where the model was made for fewer; a request
// beyond the model's positions is refused with both numbers; 0 positions means unknown.
TEST(Driver, MaxSeqLenDefaultsToModelPositions) {
  std::string error;
  EXPECT_EQ(chooseMaxSeqLen(std::nullopt, 0, error), 2048);
  EXPECT_EQ(chooseMaxSeqLen(std::nullopt, 256, error), 256);
  EXPECT_EQ(chooseMaxSeqLen(std::nullopt, 131072, error), 2048);
  EXPECT_EQ(chooseMaxSeqLen(100, 256, error), 100);
  EXPECT_EQ(chooseMaxSeqLen(256, 256, error), 256);
  EXPECT_EQ(chooseMaxSeqLen(1 << 20, 0, error), 1 << 20);
  EXPECT_TRUE(error.empty());
}

TEST(Driver, MaxSeqLenBeyondModelPositionsIsRefused) {
  std::string error;
  EXPECT_EQ(chooseMaxSeqLen(4096, 2048, error), std::nullopt);
  EXPECT_EQ(error, "--max-model-len 4096 is more than the model's 2048 positions (config.json's "
                   "max_position_embeddings)");
}

namespace {

/// A backend that holds its weights where the core cannot write (as a device does, in another
/// type), so that the loader must stage each tensor; it records what the core asks of it.
/// Each forward's logits make the next token the last id plus one.
class RecordingBackend final : public Backend {
public:
  explicit RecordingBackend(int64_t vocab) : logits(size_t(vocab)) {}

  void attach(const RankInfo &rank) override { tp = rank.tp; }
  DType weightType(const WeightDesc &) const override { return DType::BF16; }
  void allocateWeights(const std::vector<WeightDesc> &descs) override {
    for (const WeightDesc &desc : descs) {
      weights.emplace_back(size_t(desc.elements()), -100.0f);
      bf16 = bf16 && desc.dtype == DType::BF16;
    }
  }
  float *hostWeight(size_t) override { return nullptr; }
  void writeWeight(size_t i, int64_t offset, const float *values, int64_t count) override {
    writes.push_back(i);
    std::copy(values, values + count, weights[i].begin() + offset);
  }
  bool generateWeight(size_t, uint64_t, const ParamDesc &, const SliceSpec &) override {
    return false;
  }
  uint64_t allocateCaches(const std::vector<KVCacheDesc> &layers, int64_t blockSize) override {
    cacheLayers = layers.size();
    cacheCapacity = layers.empty() ? 0 : layers[0].blocks * blockSize;
    return 0;
  }
  uint64_t allocateArena(int64_t perToken, int64_t tokens) override {
    return uint64_t(perToken * tokens) * 2;
  }
  void start() override { started = true; }
  bool hasSequenceParallel() const override { return false; }
  const float *forward(const Step &step, bool) override {
    forwards.push_back(step.tokens);
    std::fill(logits.begin(), logits.end(), 0.0f);
    logits[size_t(step.ids[step.tokens - 1] + 1) % logits.size()] = 1.0f;
    return logits.data();
  }
  bool injectFault() override { return false; }
  void perturbAttention() override {}

  int tp = 0;
  bool bf16 = true, started = false;
  std::vector<std::vector<float>> weights;
  std::vector<size_t> writes;
  size_t cacheLayers = 0;
  int64_t cacheCapacity = 0;
  std::vector<int64_t> forwards;

private:
  std::vector<float> logits;
};

} // namespace

// The core loads each weight into the backend's own memory once, through its staging buffer,
// sizes the caches and arena as the spec says, starts the backend, and drives the forwards.
TEST(Driver, LoadsWeightsIntoTheBackendTensorByTensor) {
  ModelSpec spec{};
  spec.name = "toy";
  spec.tp = 1;
  spec.vocab = 8;
  spec.floatsPerToken = 16;
  spec.params = {{"a", {2, 3}, {}, {}}, {"b", {4}, {}, {}}};
  spec.kvWidths = {4};
  spec.kvValueWidths = {4};
  spec.lastTokenOnly = true;
  RecordingBackend backend(spec.vocab);
  const char *argv[] = {"toy",           "--random-weights", "5", "--prompt-ids", "3",
                        "--max-new-tokens", "3",             "--max-model-len", "16"};
  ::testing::internal::CaptureStdout();
  int code = runModel(spec, backend, 9, const_cast<char **>(argv));
  std::string out = ::testing::internal::GetCapturedStdout();
  ASSERT_EQ(code, 0);
  EXPECT_EQ(backend.tp, 1);
  EXPECT_TRUE(backend.bf16); // described in the type the backend asked for
  EXPECT_TRUE(backend.started);
  EXPECT_EQ(backend.writes, (std::vector<size_t>{0, 1}));
  for (size_t i = 0; i < spec.params.size(); ++i) {
    std::vector<float> want(backend.weights[i].size());
    generateSlice(5, spec.params[i].name, spec.params[i].hfShape, SliceSpec{}, want.data());
    EXPECT_EQ(backend.weights[i], want) << spec.params[i].name;
  }
  EXPECT_EQ(backend.cacheLayers, 1u);
  EXPECT_EQ(backend.cacheCapacity, 16);
  EXPECT_EQ(backend.forwards, (std::vector<int64_t>{1, 1, 1}));
  EXPECT_NE(out.find("tokens: 4 5 6"), std::string::npos) << out;
}

// A device's fault is the device's at any tp; a peer is blamed only where there are peers.
TEST(Failure, DeviceErrorsAreNeverAPeers) {
  DeviceError cuda("CUDA", "cudaStreamQuery (the forward)", "an illegal memory access");
  EXPECT_EQ(describeFailure(cuda, false, "", "llama", "decode step 3"),
            "CUDA error in cudaStreamQuery (the forward): an illegal memory access "
            "(while running llama, decode step 3)");
  EXPECT_EQ(describeFailure(cuda, true, "lost rank 1", "llama", "the prefill"),
            "CUDA error in cudaStreamQuery (the forward): an illegal memory access "
            "(while running llama, the prefill)");
  std::runtime_error other("the forward: no answer");
  EXPECT_EQ(describeFailure(other, false, "", "llama", "the prefill"),
            "the forward: no answer (while running llama, the prefill)");
  EXPECT_EQ(describeFailure(other, true, "", "llama", "the prefill"),
            "a peer stopped answering; a collective of the prefill failed: the forward: no "
            "answer");
  EXPECT_EQ(describeFailure(other, true, "lost rank 1 (process 7 is gone)", "llama",
                            "decode step 2"),
            "lost rank 1 (process 7 is gone); a collective of decode step 2 failed: the "
            "forward: no answer");  // What the collective says of the peer is said once.
  std::runtime_error repeated("shared-memory collective: rank 1 stopped: no weight 'x'");
  EXPECT_EQ(describeFailure(repeated, true, "rank 1 stopped: no weight 'x'", "llama",
                            "the prefill"),
            "rank 1 stopped: no weight 'x'; a collective of the prefill failed (shared-memory "
            "collective)");
}

// --timeout bounds a wait only where peers could hold it up: a rank alone waits for its own
// device however long it takes (the CUDA backend's watchdog asks this deadline).
TEST(Failure, OnlyPeersHaveADeadline) {
  PeerDeadline alone(false, 0), withPeers(true, 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_FALSE(alone.passed());
  EXPECT_TRUE(withPeers.passed());
  EXPECT_FALSE(PeerDeadline(true, 60).passed());
  EXPECT_EQ(withPeers.message("the forward"),
            "the forward: no answer from a peer rank within 0 s (a rank stopped?)");
}
