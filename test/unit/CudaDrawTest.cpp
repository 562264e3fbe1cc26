// The CUDA device's sampler (runtime/cuda/draw.h), run here on a block of threads taken in
// turn, against the host's Sampler: given the same row of logits, parameters and seed, the
// device's radix selections must pick the token the Sampler's sorts pick. The Sampler is the
// oracle: it sorts and accumulates in its own order, so a selection that cuts top_k or top_p
// in another place, or a run of ids summed out of order, picks another token somewhere in
// these thousands of rows. (The kernel that runs pickRow on the GPU runs in the GPU check.)
#include "draw.h"

#include "tpcrt/sampling.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

using namespace tpcrt;
using namespace tpcrt::cuda;

namespace {

int64_t pick(const std::vector<float> &row, const Draw &draw, int threads) {
  static DrawShared shared; // 30 KB: not on the stack
  shared = DrawShared{};
  SerialThreads block{threads};
  pickRow(block, shared, [&](int64_t i) { return row[size_t(i)]; }, int64_t(row.size()), draw);
  return shared.chosen;
}

/// The Sampler's pick of its first token, and the device's with the same seed's first number.
struct Both {
  int64_t sampler, device;
};
Both both(const std::vector<float> &row, SamplingParams params, uint64_t seed, int threads) {
  params.seed = seed;
  Sampler sampler(params, {}, int64_t(row.size()));
  Both out;
  Draw draw = Sampler(params, {}, int64_t(row.size())).draw();
  out.sampler = sampler.sample(row.data());
  out.device = pick(row, draw, threads);
  return out;
}

/// bf16's rounding of x (the CUDA logits' type): many equal logits, as a real row has.
float bf16(float x) {
  uint32_t bits;
  std::memcpy(&bits, &x, sizeof bits);
  bits = (bits + 0x7fff + (bits >> 16 & 1)) & 0xffff0000u;
  std::memcpy(&x, &bits, sizeof x);
  return x;
}

std::string describe(const SamplingParams &p, size_t vocab, int threads, uint64_t seed) {
  return "vocab " + std::to_string(vocab) + ", " + std::to_string(threads) +
         " threads, temperature " + std::to_string(p.temperature) + ", top_k " +
         std::to_string(p.topK) + ", top_p " + std::to_string(p.topP) + ", min_p " +
         std::to_string(p.minP) + ", seed " + std::to_string(seed);
}

} // namespace

TEST(CudaDraw, PicksTheSamplersTokenOverManyRowsAndParameters) {
  std::mt19937_64 random(20261207);
  std::normal_distribution<float> normal;
  const std::vector<size_t> vocabs = {1, 2, 17, 300, 4099};
  const std::vector<double> temperatures = {0.05, 0.7, 1.0, 2.5};
  const std::vector<double> topPs = {1.0, 0.95, 0.6, 0.2, 1e-9};
  const std::vector<double> minPs = {0.0, 0.02, 0.3, 1.0};
  const std::vector<int> blocks = {1, 3, 64, kDrawThreads};
  int compared = 0, sampledApart = 0;
  for (int trial = 0; trial < 1500; ++trial) {
    size_t vocab = vocabs[size_t(trial) % vocabs.size()];
    // Logits of a real row's spread (bf16, so ties), or a few spikes over a plateau.
    float scale = 1.0f + float(trial % 7) * 1.5f;
    std::vector<float> row(vocab);
    for (float &x : row)
      x = bf16(normal(random) * scale);
    if (trial % 5 == 0)
      for (size_t i = 0; i < vocab; ++i)
        row[i] = i % 37 == 3 ? 4.0f + float(i % 3) : 0.25f;
    SamplingParams p;
    p.temperature = temperatures[size_t(random() % temperatures.size())];
    const std::vector<int64_t> topKs = {0, -1, 1, 5, 40, int64_t(vocab) - 1, int64_t(vocab) + 3};
    p.topK = topKs[size_t(random() % topKs.size())];
    p.topP = topPs[size_t(random() % topPs.size())];
    p.minP = minPs[size_t(random() % minPs.size())];
    int threads = blocks[size_t(random() % blocks.size())];
    uint64_t seed = random();
    Both got = both(row, p, seed, threads);
    EXPECT_EQ(got.device, got.sampler) << describe(p, vocab, threads, seed);
    ++compared;
    // The draw mattered: another seed's pick differs somewhere (not every row is an argmax).
    sampledApart += both(row, p, seed + 1, threads).sampler != got.sampler;
  }
  EXPECT_EQ(compared, 1500);
  EXPECT_GT(sampledApart, 100);
}

TEST(CudaDraw, CutsTopPInsideATieByIdAsTheSamplerDoes) {
  // 100 equal logits: top_p 0.5 keeps the 50 lowest ids (mass before each below half), so
  // the pick is among them, and which one is u's: every seed the same as the Sampler's.
  std::vector<float> row(100, 1.5f);
  SamplingParams p;
  p.topP = 0.5;
  int highest = 0;
  for (uint64_t seed = 0; seed < 400; ++seed) {
    Both got = both(row, p, seed, int(seed % 2 ? 7 : 64));
    EXPECT_EQ(got.device, got.sampler) << "seed " << seed;
    highest = std::max<int>(highest, int(got.device));
  }
  EXPECT_GE(highest, 45);
  EXPECT_LT(highest, 50);
  // A tie at the cut below distinct tokens above it: two likely tokens, then 60 equal ones.
  std::vector<float> mixed(62, 0.0f);
  mixed[10] = mixed[40] = 3.0f;
  p.topP = 0.9;
  for (uint64_t seed = 0; seed < 400; ++seed) {
    Both got = both(mixed, p, seed, 5);
    EXPECT_EQ(got.device, got.sampler) << "seed " << seed;
  }
}

TEST(CudaDraw, GreedyIsTheArgmaxAndANonFiniteRowIsNamed) {
  std::vector<float> row = {1.0f, 7.0f, -2.0f, 7.0f, 3.0f};
  EXPECT_EQ(pick(row, Draw{}, 1), 1); // the lowest id of the largest
  EXPECT_EQ(pick(row, Draw{}, 4), 1);
  Draw sampled{1.0, 0, 0.9, 0.0, 0.5};
  row[4] = NAN;
  EXPECT_EQ(pick(row, Draw{}, 3), kDrawNotFinite);
  EXPECT_EQ(pick(row, sampled, 3), kDrawNotFinite);
  row[4] = INFINITY;
  EXPECT_EQ(pick(row, sampled, 256), kDrawNotFinite);
}

TEST(CudaDraw, TheSamplersDrawIsItsGeneratorsNextNumber) {
  SamplingParams p;
  p.temperature = 0.8;
  p.topK = 20;
  p.topP = 0.9;
  p.minP = 0.05;
  p.seed = 42;
  Sampler sampler(p, {}, 10);
  Rng rng(42);
  for (int i = 0; i < 3; ++i) {
    Draw d = sampler.draw();
    EXPECT_EQ(d.u, rng.uniform());
    EXPECT_EQ(d.temperature, 0.8);
    EXPECT_EQ(d.topK, 20);
    EXPECT_EQ(d.topP, 0.9);
    EXPECT_EQ(d.minP, 0.05);
    EXPECT_EQ(d.check(), "");
  }
  p.temperature = 0; // greedy: no number drawn
  Sampler greedy(p, {}, 10);
  EXPECT_TRUE(greedy.draw().greedy());
  EXPECT_EQ(greedy.draw().u, 0.0);
  // A penalty changes the row first: not plain, the backend may not pick for it.
  p.repetitionPenalty = 1.2;
  EXPECT_FALSE(Sampler(p, {1}, 10).plain());
  EXPECT_NE((Draw{-1.0, 0, 1, 0, 0}).check(), "");
  EXPECT_NE((Draw{1.0, 0, 1, 0, 1.0}).check(), "");
  EXPECT_NE((Draw{1.0, -2, 1, 0, 0.5}).check(), "");
  EXPECT_NE((Draw{1.0, 0, 0, 0, 0.5}).check(), "");
  EXPECT_NE((Draw{1.0, 0, 1, NAN, 0.5}).check(), "");
}
