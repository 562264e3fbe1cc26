// The sampler against vLLM's definitions, restated here independently of sampling.cpp: the
// penalties on hand-made logits, the filtered distribution against a literal transcription
// of vLLM's apply_top_k_top_p (ascending sort, cumulative sum, mask), and the draws against
// that distribution with a chi-square test (fixed seed; a negative control shows the test
// can fail). And the stop strings, held back across pieces.
#include "tpcrt/sampling.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>

using namespace tpcrt;

namespace {

/// vLLM's filters, step by step as its sampler writes them, on double logits.
std::vector<double> referenceDistribution(std::vector<double> logits, const SamplingParams &p) {
  size_t n = logits.size();
  for (double &x : logits)
    x /= p.temperature;
  auto softmax = [](const std::vector<double> &x) {
    double top = *std::max_element(x.begin(), x.end()), sum = 0;
    std::vector<double> out(x.size());
    for (size_t i = 0; i < x.size(); ++i)
      sum += out[i] = std::isinf(x[i]) ? 0 : std::exp(x[i] - top);
    for (double &v : out)
      v /= sum;
    return out;
  };
  if (p.minP > 0) {
    std::vector<double> probs = softmax(logits);
    double top = *std::max_element(probs.begin(), probs.end());
    for (size_t i = 0; i < n; ++i)
      if (probs[i] < p.minP * top)
        logits[i] = -INFINITY;
  }
  std::vector<size_t> idx(n);
  std::iota(idx.begin(), idx.end(), 0);
  std::stable_sort(idx.begin(), idx.end(),
                   [&](size_t a, size_t b) { return logits[a] < logits[b]; });
  if (p.topK > 0 && size_t(p.topK) < n) {
    double kth = logits[idx[n - size_t(p.topK)]];
    for (size_t i = 0; i < n; ++i)
      if (logits[i] < kth)
        logits[i] = -INFINITY;
  }
  if (p.topP < 1) {
    std::vector<double> sorted(n);
    for (size_t j = 0; j < n; ++j)
      sorted[j] = logits[idx[j]];
    std::vector<double> probs = softmax(sorted);
    double cumulative = 0;
    std::vector<bool> drop(n);
    for (size_t j = 0; j < n; ++j) {
      cumulative += probs[j];
      drop[j] = cumulative <= 1 - p.topP + 1e-12;
    }
    drop[n - 1] = false;
    for (size_t j = 0; j < n; ++j)
      if (drop[j])
        logits[idx[j]] = -INFINITY;
  }
  return softmax(logits);
}

std::vector<float> someLogits() {
  return {1.5f, -0.25f, 3.0f, 0.75f, 2.25f, -1.5f, 0.0f, 2.9f, 1.0f, -3.0f, 0.5f, 2.5f};
}

SamplingParams sampling(double temperature, int64_t topK, double topP, double minP) {
  SamplingParams p;
  p.temperature = temperature;
  p.topK = topK;
  p.topP = topP;
  p.minP = minP;
  p.seed = 1234;
  return p;
}

/// The chi-square statistic of `counts` against `expected` probabilities over the tokens
/// these give mass, and its degrees of freedom; a draw outside them fails the test.
double chiSquare(const std::vector<int> &counts, const std::vector<double> &expected, int draws,
                 int &freedom) {
  double statistic = 0;
  freedom = -1;
  for (size_t i = 0; i < counts.size(); ++i) {
    if (expected[i] == 0) {
      EXPECT_EQ(counts[i], 0) << "token " << i << " has no mass but was drawn";
      continue;
    }
    double e = expected[i] * draws;
    statistic += (counts[i] - e) * (counts[i] - e) / e;
    ++freedom;
  }
  return statistic;
}

/// The 0.999 quantile of chi-square with `k` degrees of freedom (Wilson-Hilferty).
double chiSquareQuantile999(int k) {
  double z = 3.0902, a = 2.0 / (9.0 * k);
  return k * std::pow(1 - a + z * std::sqrt(a), 3);
}

} // namespace

TEST(SamplingTest, ValidateNamesTheField) {
  EXPECT_EQ(SamplingParams().validate(), "");
  auto bad = [](auto set) {
    SamplingParams p;
    set(p);
    return p.validate();
  };
  EXPECT_NE(bad([](SamplingParams &p) { p.temperature = -0.5; }).find("temperature"),
            std::string::npos);
  EXPECT_NE(bad([](SamplingParams &p) { p.topP = 0; }).find("top_p must be in (0, 1]"),
            std::string::npos);
  EXPECT_NE(bad([](SamplingParams &p) { p.topP = 1.5; }).find("top_p"), std::string::npos);
  EXPECT_NE(bad([](SamplingParams &p) { p.topK = -2; }).find("top_k"), std::string::npos);
  EXPECT_NE(bad([](SamplingParams &p) { p.minP = 1.1; }).find("min_p"), std::string::npos);
  EXPECT_NE(bad([](SamplingParams &p) { p.repetitionPenalty = 0; }).find("repetition_penalty"),
            std::string::npos);
  EXPECT_NE(bad([](SamplingParams &p) { p.presencePenalty = 3; }).find("presence_penalty"),
            std::string::npos);
  EXPECT_NE(bad([](SamplingParams &p) { p.frequencyPenalty = -2.5; }).find("frequency_penalty"),
            std::string::npos);
  EXPECT_NE(bad([](SamplingParams &p) { p.temperature = NAN; }).find("temperature"),
            std::string::npos);
}

TEST(SamplingTest, PenaltiesAsVllmDefinesThem) {
  // vLLM: repetition over the prompt's and the output's tokens (positive logits divided,
  // others multiplied), then frequency x count and presence over the output's.
  std::vector<float> logits = {2.0f, -1.0f, 0.5f, 3.0f, -2.0f, 1.25f};
  SamplingParams p;
  p.temperature = 0;
  p.repetitionPenalty = 2.0;
  p.frequencyPenalty = 0.5;
  p.presencePenalty = 0.25;
  Sampler sampler(p, /*prompt=*/{0, 1, 1}, int64_t(logits.size()));
  for (int64_t t : {3, 3, 4})
    sampler.record(t);
  std::vector<float> out;
  sampler.adjust(logits.data(), out);
  std::vector<float> want = {2.0f / 2,                    // prompt
                             -1.0f * 2,                   // prompt, negative
                             0.5f,                        // unseen
                             3.0f / 2 - 0.5f * 2 - 0.25f, // output twice
                             -2.0f * 2 - 0.5f - 0.25f,    // output once, negative
                             1.25f};                      // unseen
  ASSERT_EQ(out.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i)
    EXPECT_FLOAT_EQ(out[i], want[i]) << "token " << i;
  // Greedy with penalties: the argmax of the penalized logits (token 5 now, not 3).
  EXPECT_EQ(sampler.sample(logits.data()), 5);
}

TEST(SamplingTest, LogitBiasAndMinTokensComeBeforeThePenalties) {
  // Token 3 leads (3.0); a bias of -2.5 puts it at 0.5, a bias of +1 lifts token 1 to 0.0;
  // then the repetition penalty halves the positive ones seen in the prompt (token 0: 1.0).
  std::vector<float> logits = {2.0f, -1.0f, 0.5f, 3.0f, -2.0f, 1.25f};
  SamplingParams p;
  p.temperature = 0;
  p.logitBias = {{3, -2.5}, {1, 1.0}};
  p.repetitionPenalty = 2.0;
  Sampler biased(p, /*prompt=*/{0}, int64_t(logits.size()));
  EXPECT_FALSE(biased.argmaxOfRaw());
  std::vector<float> out;
  biased.adjust(logits.data(), out);
  std::vector<float> want = {1.0f, 0.0f, 0.5f, 0.5f, -2.0f, 1.25f};
  for (size_t i = 0; i < want.size(); ++i)
    EXPECT_FLOAT_EQ(out[i], want[i]) << "token " << i;
  EXPECT_EQ(biased.sample(logits.data()), 5);
  // +100 makes the least likely token the choice; -100 removes the likely one.
  SamplingParams forced;
  forced.temperature = 0;
  forced.logitBias = {{4, 100}};
  EXPECT_EQ(Sampler(forced, {}, 6).sample(logits.data()), 4);

  // min_tokens: the stop ids (3 and 0 here) cannot come until 2 tokens are out, then can.
  SamplingParams min;
  min.temperature = 0;
  min.minTokens = 2;
  Sampler held(min, {}, int64_t(logits.size()), /*stopIds=*/{3, 0});
  EXPECT_FALSE(held.argmaxOfRaw());
  EXPECT_EQ(held.sample(logits.data()), 5); // 3 and 0 held back: 1.25 leads
  EXPECT_EQ(held.sample(logits.data()), 5);
  EXPECT_TRUE(held.argmaxOfRaw());
  EXPECT_EQ(held.sample(logits.data()), 3);
  // Sampled, not greedy: no draw ever lands on a held-back stop id.
  min.temperature = 1;
  for (uint64_t seed = 0; seed < 200; ++seed) {
    min.seed = seed;
    Sampler drawn(min, {}, int64_t(logits.size()), {3, 0});
    int64_t first = drawn.sample(logits.data()), second = drawn.sample(logits.data());
    EXPECT_TRUE(first != 3 && first != 0 && second != 3 && second != 0) << "seed " << seed;
  }
  // Out of range: named.
  SamplingParams bad;
  bad.logitBias = {{7, 100.5}};
  EXPECT_EQ(bad.validate(), "logit_bias of token 7 must be in [-100, 100], got 100.5");
  bad.logitBias = {{-1, 1}};
  EXPECT_EQ(bad.validate(), "logit_bias names token -1, not a token id");
  bad.logitBias.clear();
  bad.minTokens = -3;
  EXPECT_EQ(bad.validate(), "min_tokens must be at least 0, got -3");
}

TEST(SamplingTest, GreedyIsTheArgmax) {
  std::vector<float> logits = someLogits();
  int64_t best = std::max_element(logits.begin(), logits.end()) - logits.begin();
  SamplingParams greedy = sampling(0, 0, 1, 0);
  Sampler a(greedy, {}, int64_t(logits.size()));
  EXPECT_EQ(a.sample(logits.data()), best);
  // Ties go to the first, as transformers' argmax.
  const float ties[] = {1, 3, 3};
  Sampler tied(greedy, {}, 3);
  EXPECT_EQ(tied.sample(ties), 1);
  // top_k 1 at any temperature is greedy too, whatever the seed.
  for (uint64_t seed = 0; seed < 50; ++seed) {
    SamplingParams k1 = sampling(1.3, 1, 1, 0);
    k1.seed = seed;
    Sampler s(k1, {}, int64_t(logits.size()));
    EXPECT_EQ(s.sample(logits.data()), best);
  }
}

TEST(SamplingTest, TheDistributionIsVllmsFilters) {
  std::vector<float> logits = someLogits();
  std::vector<double> asDouble(logits.begin(), logits.end());
  for (SamplingParams p : {sampling(1, 0, 1, 0), sampling(0.7, 0, 1, 0), sampling(1, 5, 1, 0),
                           sampling(1, 0, 0.8, 0), sampling(1, 0, 1, 0.2),
                           sampling(0.6, 8, 0.9, 0.05), sampling(2.0, 3, 0.5, 0),
                           sampling(1, 0, 0.01, 0), sampling(1, 12, 1, 1.0)}) {
    Sampler sampler(p, {}, int64_t(logits.size()));
    std::vector<double> got = sampler.distribution(logits);
    std::vector<double> want = referenceDistribution(asDouble, p);
    for (size_t i = 0; i < want.size(); ++i)
      EXPECT_NEAR(got[i], want[i], 1e-6)
          << "token " << i << " at temperature " << p.temperature << " top_k " << p.topK
          << " top_p " << p.topP << " min_p " << p.minP;
  }
  // top_k keeps ties at the boundary, as vLLM's mask (logit < k-th largest) does.
  std::vector<float> tied = {1.0f, 2.0f, 2.0f, 0.5f};
  Sampler ties(sampling(1, 2, 1, 0), {}, 4);
  std::vector<double> p = ties.distribution(tied);
  EXPECT_GT(p[1], 0);
  EXPECT_GT(p[2], 0);
  EXPECT_EQ(p[0], 0);
}

TEST(SamplingTest, DrawsFollowTheDistribution) {
  // 20000 draws with a fixed seed against the filtered softmax: the chi-square statistic is
  // below its 0.999 quantile (a fixed seed: the outcome is the same every run), and against
  // the unfiltered softmax (a wrong expectation) it is far above it.
  std::vector<float> logits = someLogits();
  std::vector<double> asDouble(logits.begin(), logits.end());
  const int draws = 20000;
  for (SamplingParams p : {sampling(0.8, 0, 1, 0), sampling(0.7, 8, 0.9, 0.05),
                           sampling(1.2, 0, 0.95, 0.02), sampling(1, 6, 1, 0)}) {
    Sampler sampler(p, {}, int64_t(logits.size()));
    std::vector<int> counts(logits.size());
    for (int i = 0; i < draws; ++i)
      ++counts[size_t(sampler.sample(logits.data()))];
    std::vector<double> want = referenceDistribution(asDouble, p);
    int freedom = 0;
    double statistic = chiSquare(counts, want, draws, freedom);
    ASSERT_GT(freedom, 0);
    EXPECT_LT(statistic, chiSquareQuantile999(freedom))
        << "temperature " << p.temperature << " top_k " << p.topK << " top_p " << p.topP
        << " min_p " << p.minP;
  }
  // The negative control: draws at temperature 0.8 judged against temperature 1's softmax.
  Sampler sampler(sampling(0.8, 0, 1, 0), {}, int64_t(logits.size()));
  std::vector<int> counts(logits.size());
  for (int i = 0; i < draws; ++i)
    ++counts[size_t(sampler.sample(logits.data()))];
  int freedom = 0;
  double statistic =
      chiSquare(counts, referenceDistribution(asDouble, sampling(1, 0, 1, 0)), draws, freedom);
  EXPECT_GT(statistic, 10 * chiSquareQuantile999(freedom));
}

TEST(SamplingTest, ASeedReproducesItsDraws) {
  std::vector<float> logits = someLogits();
  auto draw = [&](uint64_t seed) {
    SamplingParams p = sampling(1, 0, 1, 0);
    p.seed = seed;
    Sampler s(p, {}, int64_t(logits.size()));
    std::vector<int64_t> out;
    for (int i = 0; i < 64; ++i)
      out.push_back(s.sample(logits.data()));
    return out;
  };
  EXPECT_EQ(draw(7), draw(7));
  EXPECT_NE(draw(7), draw(8));
  // The generator's numbers are its own, the same on every machine: xoshiro256** seeded
  // through splitmix64 gives uniform doubles in [0, 1).
  Rng a(42), b(42);
  for (int i = 0; i < 1000; ++i) {
    double u = a.uniform();
    EXPECT_EQ(u, b.uniform());
    EXPECT_GE(u, 0.0);
    EXPECT_LT(u, 1.0);
  }
}

TEST(SamplingTest, StopStringsAreHeldBackAcrossPieces) {
  StopStrings stops({"o w", "xyz"});
  std::string out = stops.push("Hel");
  out += stops.push("lo");  // "o" may begin "o w": held
  EXPECT_EQ(out, "Hell");
  out += stops.push(" wo"); // "o w" found: what comes before it is released
  EXPECT_TRUE(stops.stopped());
  EXPECT_EQ(stops.matched(), "o w");
  EXPECT_EQ(out, "Hell");
  EXPECT_EQ(stops.push("more"), "");
  EXPECT_EQ(stops.finish(), "");

  // A text that only looked like a stop string is released in full.
  StopStrings partial({"abc"});
  std::string text = partial.push("xa");
  text += partial.push("b");
  EXPECT_EQ(text, "x");
  text += partial.push("d");
  EXPECT_EQ(text, "xabd");
  text += partial.push("ab");
  text += partial.finish();
  EXPECT_EQ(text, "xabdab");
  EXPECT_FALSE(partial.stopped());

  // The earliest of several; a stop string inside one piece; UTF-8 stop strings.
  StopStrings many({"cd", "b"});
  EXPECT_EQ(many.push("abcd"), "a");
  EXPECT_EQ(many.matched(), "b");
  StopStrings utf8({"\xC3\xA9t\xC3\xA9"}); // "été"
  std::string said = utf8.push("un \xC3\xA9");
  said += utf8.push("t");
  said += utf8.push("\xC3\xA9 chaud");
  EXPECT_EQ(said, "un ");
  EXPECT_TRUE(utf8.stopped());

  // No stop strings: everything as it comes.
  StopStrings none({});
  EXPECT_EQ(none.push("abc"), "abc");
}

TEST(SamplingTest, StopStringsCountOnlyAfterMinTokens) {
  // vLLM's own case (tests/detokenizer/test_min_tokens.py): " is Lee, and I'm a student in the
  // college of engineering" a token at a time, stop "e": with min_tokens 5 the "e"s of the
  // first five tokens' text (" is Lee, and I") end nothing; the first after them does.
  std::vector<std::string> pieces = {" is", " Lee", ",", " and", " I", "'m", " a", " student",
                                     " in", " the"};
  for (auto [min, want] : std::vector<std::pair<int, std::string>>{
           {0, " is L"}, {5, " is Lee, and I'm a stud"}}) {
    StopStrings stops({"e"});
    std::string out;
    for (size_t i = 0; i < pieces.size() && !stops.stopped(); ++i)
      out += stops.push(pieces[i], int(i) + 1 > min);
    EXPECT_EQ(out, want) << "min_tokens " << min;
  }
  // A stop string that begins in the text shown unarmed and ends in the next token's counts;
  // the part already shown stays shown, the rest is withheld.
  StopStrings straddle({"abc"});
  std::string out = straddle.push("xxab", false);
  out += straddle.push("cdd", true);
  EXPECT_EQ(out, "xxab");
  EXPECT_TRUE(straddle.stopped());
  // ... also where it ends two pieces after the boundary.
  StopStrings later({"abc"});
  out = later.push("a", false);
  out += later.push("b", true);
  out += later.push("c", true);
  EXPECT_EQ(out, "a");
  EXPECT_TRUE(later.stopped());
  // One that ends within the unarmed text never counts, even found again later.
  StopStrings early({"ab"});
  out = early.push("ab", false);
  out += early.push("x", true);
  out += early.push("yab", true);
  EXPECT_EQ(out, "abxy");
  EXPECT_TRUE(early.stopped());
}

TEST(SamplingTest, StopStringsAreChecked) {
  EXPECT_EQ(checkStopStrings({"a", "\xC3\xA9"}), "");
  EXPECT_NE(checkStopStrings({"a", ""}).find("stop string 2 is empty"), std::string::npos);
  EXPECT_NE(checkStopStrings({"ok", "\xFF"}).find("stop string 2 is not valid UTF-8"),
            std::string::npos);
  EXPECT_NE(checkStopStrings({std::string(kMaxStopStringBytes + 1, 'x')}).find("limit"),
            std::string::npos);
  EXPECT_NE(checkStopStrings(std::vector<std::string>(kMaxStopStrings + 1, "x")).find("limit"),
            std::string::npos);
}
