// The engine core (runtime/engine/engine.h) on a backend that computes nothing: each
// sampled sequence's logits make its next token its last token plus one, so every request's
// output is known without a model, and the queues and blocks the scheduler keeps can be
// watched step by step: requests arriving while others run, aborts, preemption.
#include "draw.h" // the CUDA device's sampler, run on the host
#include "engine.h"

#include "tpcrt/model.h"

#include <gtest/gtest.h>

#include <climits>
#include <cmath>
#include <numeric>

namespace tpcrt {
namespace {

/// A backend with nothing to hold: the engine's tests' backends say only what they can and
/// what a forward returns.
class HollowBackend : public Backend {
public:
  explicit HollowBackend(BackendCapabilities can) : can(can) {}

  BackendCapabilities capabilities() const override { return can; }
  void attach(const RankInfo &) override {}
  DType weightType(const WeightDesc &) const override { return DType::F32; }
  void allocateWeights(const std::vector<WeightDesc> &) override {}
  float *hostWeight(size_t) override { return nullptr; }
  void writeWeight(size_t, int64_t, const float *, int64_t) override {}
  bool generateWeight(size_t, uint64_t, const ParamDesc &, const SliceSpec &) override {
    return false;
  }
  uint64_t allocateCaches(const std::vector<KVCacheDesc> &, int64_t) override { return 0; }
  uint64_t allocateArena(int64_t, int64_t) override { return 0; }
  bool hasSequenceParallel() const override { return false; }
  bool injectFault() override { return false; }
  void perturbAttention() override {}

protected:
  BackendCapabilities can;
};

class CountingBackend final : public HollowBackend {
public:
  CountingBackend(int64_t vocab, BackendCapabilities can) : HollowBackend(can), vocab(vocab) {}

  /// The counting logits, a row for each token a sequence asks logits of (a NaN in the row of
  /// a token that is `poisoned`); on
  /// a step asking for the argmax (which the engine does only when
  /// `can.argmax`), the counting ids instead and logits that point elsewhere, unless
  /// `withholdArgmax`.
  const float *forward(const Step &step, bool) override {
    sequencesPerStep.push_back(int64_t(step.sequences.size()));
    rowsPerStep.push_back(step.sampledRows());
    argmaxAsked.push_back(step.argmax);
    logits.clear();
    chosen.clear();
    for (const StepSequence &s : step.sequences)
      for (int64_t i = s.count - s.logits; i < s.count; ++i) { // its last s.logits tokens
        int64_t last = step.ids[s.first + i], next = (last + 1) % vocab;
        std::vector<float> row(size_t(vocab), 0.0f);
        row[size_t(step.argmax ? 0 : next)] = 1.0f;
        if (last == poisoned)
          row[size_t(vocab / 2)] = std::nanf("");
        logits.insert(logits.end(), row.begin(), row.end());
        chosen.push_back(last == poisoned ? -2 : next);
      }
    return logits.data();
  }
  const int64_t *argmax() const override {
    return argmaxAsked.back() && !withholdArgmax ? chosen.data() : nullptr;
  }

  std::vector<int64_t> sequencesPerStep, rowsPerStep;
  std::vector<bool> argmaxAsked;
  bool withholdArgmax = false;
  int64_t poisoned = -1;

private:
  int64_t vocab;
  std::vector<float> logits;
  std::vector<int64_t> chosen;
};

/// A backend whose logits are spread (each row a function of the token before), so that a
/// sampled request's tokens depend on its draws: where `can.draws`, a step of rows that are
/// picked comes back as the ids the CUDA device's sampler picks (draw.h, run on the host)
/// by each sequence's Draw; elsewhere as the logits, for the engine's Sampler.
class SpreadBackend final : public HollowBackend {
public:
  SpreadBackend(int64_t vocab, BackendCapabilities can) : HollowBackend(can), vocab(vocab) {}

  const float *forward(const Step &step, bool) override {
    picked.push_back(step.argmax);
    logits.clear();
    ids.clear();
    for (const StepSequence &s : step.sequences)
      for (int64_t i = s.count - s.logits; i < s.count; ++i) {
        int64_t last = step.ids[s.first + i];
        std::vector<float> row(static_cast<size_t>(vocab));
        for (int64_t t = 0; t < vocab; ++t)
          row[size_t(t)] = 2.0f * std::sin(float(last * 7 + t * 13) * 0.37f);
        if (step.argmax) {
          cuda::SerialThreads threads{8};
          Draw draw = i == s.count - 1 ? s.draw : Draw{};
          drawn += !draw.greedy();
          cuda::pickRow(threads, *shared, [&](int64_t t) { return row[size_t(t)]; }, vocab,
                        draw);
          ids.push_back(shared->chosen);
        }
        logits.insert(logits.end(), row.begin(), row.end());
      }
    return logits.data();
  }
  const int64_t *argmax() const override { return picked.back() ? ids.data() : nullptr; }

  std::vector<bool> picked; // each step's Step::argmax
  int64_t drawn = 0;        // rows picked by a draw that samples

private:
  int64_t vocab;
  std::vector<float> logits;
  std::vector<int64_t> ids;
  std::unique_ptr<cuda::DrawShared> shared = std::make_unique<cuda::DrawShared>();
};

struct Fixture {
  explicit Fixture(EngineLimits limits, BackendCapabilities can = {})
      : spec(*newSpec("counting", 1, kVocab, 1, /*lastTokenOnly=*/true)),
        backend(kVocab, can), engine(spec, backend, rank, limits) {}
  static constexpr int64_t kVocab = 1000;
  ModelSpec &spec;
  CountingBackend backend;
  RankInfo rank;
  Engine engine;
};

EngineRequest counting(int64_t from, int64_t promptLength, int64_t tokens) {
  EngineRequest r;
  r.prompt.resize(size_t(promptLength));
  std::iota(r.prompt.begin(), r.prompt.end(), from);
  r.maxTokens = tokens;
  r.sampling.temperature = 0; // greedy
  return r;
}

std::vector<int64_t> following(int64_t last, int64_t count) {
  std::vector<int64_t> ids(static_cast<size_t>(count));
  std::iota(ids.begin(), ids.end(), last + 1);
  return ids;
}

TEST(Engine, ARequestArrivingWhileOthersRunJoinsTheNextStep) {
  Fixture f({/*maxNumSeqs=*/4, /*maxBatchTokens=*/64, /*blocks=*/16, /*blockSize=*/4,
             /*maxSeqLen=*/32});
  size_t a = f.engine.submit(counting(10, 5, 6));
  f.engine.step(); // a's prefill and first token
  f.engine.step();
  EXPECT_EQ(f.engine.runningCount(), 1);
  size_t b = f.engine.submit(counting(500, 3, 4));
  EXPECT_EQ(f.engine.waitingCount(), 1);
  f.engine.step(); // a's decode beside b's prefill
  EXPECT_EQ(f.backend.sequencesPerStep.back(), 2);
  while (f.engine.busy())
    f.engine.step();
  EXPECT_EQ(f.engine.request(a).output, following(14, 6));
  EXPECT_EQ(f.engine.request(b).output, following(502, 4));
  EXPECT_STREQ(f.engine.request(b).finishReason, "length");
  EXPECT_EQ(f.engine.freeBlocks(), f.engine.totalBlocks());
  f.engine.forget(a);
  EXPECT_THROW(f.engine.request(a), std::logic_error);
}

TEST(Engine, AnAbortedRequestFreesItsBlocksAtOnce) {
  Fixture f({2, 64, 16, 4, 32});
  size_t a = f.engine.submit(counting(10, 9, 20)); // 3 blocks, growing
  size_t b = f.engine.submit(counting(100, 2, 20));
  size_t c = f.engine.submit(counting(200, 2, 3)); // waits: two sequences at most
  f.engine.step();
  f.engine.step();
  EXPECT_EQ(f.engine.runningCount(), 2);
  EXPECT_EQ(f.engine.waitingCount(), 1);
  EXPECT_LT(f.engine.freeBlocks(), f.engine.totalBlocks());
  f.engine.abort(a);
  EXPECT_STREQ(f.engine.request(a).finishReason, "abort");
  EXPECT_EQ(f.engine.request(a).output.size(), 2u); // what it had made before
  EXPECT_EQ(f.engine.runningCount(), 1);
  f.engine.abort(c); // still waiting
  EXPECT_EQ(f.engine.waitingCount(), 0);
  f.engine.abort(b);
  EXPECT_FALSE(f.engine.busy());
  EXPECT_EQ(f.engine.freeBlocks(), f.engine.totalBlocks());
  f.engine.abort(b); // a second abort changes nothing
  EXPECT_STREQ(f.engine.request(b).finishReason, "abort");
  // The engine runs on: a new request gets the freed blocks.
  size_t d = f.engine.submit(counting(300, 4, 2));
  while (f.engine.busy())
    f.engine.step();
  EXPECT_EQ(f.engine.request(d).output, following(303, 2));
}

TEST(Engine, PreemptedRequestsStillGiveTheirTokens) {
  // Four blocks of four tokens: two sequences of up to 12 tokens cannot both stay.
  Fixture f({4, 64, 4, 4, 16});
  std::vector<size_t> handles;
  for (int64_t i = 0; i < 3; ++i)
    handles.push_back(f.engine.submit(counting(100 * (i + 1), 4, 8)));
  while (f.engine.busy())
    f.engine.step();
  EXPECT_GT(f.engine.preemptions(), 0);
  for (int64_t i = 0; i < 3; ++i)
    EXPECT_EQ(f.engine.request(handles[size_t(i)]).output, following(100 * (i + 1) + 3, 8));
  EXPECT_EQ(f.engine.freeBlocks(), f.engine.totalBlocks());
}

TEST(Engine, OnlyABackendThatFindsTheArgmaxIsAskedForIt) {
  for (bool finds : {false, true}) {
    BackendCapabilities can;
    can.argmax = finds;
    Fixture f({2, 64, 16, 4, 32}, can);
    size_t greedy = f.engine.submit(counting(10, 3, 4));
    while (f.engine.busy())
      f.engine.step();
    // Greedy steps ask where the backend finds it, and its ids are the tokens (its logits
    // point at token 0); elsewhere the logits are sampled.
    EXPECT_EQ(f.backend.argmaxAsked, std::vector<bool>(4, finds));
    EXPECT_EQ(f.engine.request(greedy).output, following(12, 4));
  }
}

TEST(Engine, ASampledOrPenalizedRequestGetsLogitsEvenWhereTheArgmaxIsFound) {
  BackendCapabilities can;
  can.argmax = true;
  Fixture f({2, 64, 16, 4, 32}, can);
  EngineRequest penalized = counting(10, 3, 2);
  penalized.sampling.repetitionPenalty = 1.5;
  f.engine.submit(penalized);
  while (f.engine.busy())
    f.engine.step();
  EXPECT_EQ(f.backend.argmaxAsked, std::vector<bool>(2, false));
}

TEST(Engine, ABackendThatSaysItFindsTheArgmaxAndGivesNoneIsAnError) {
  BackendCapabilities can;
  can.argmax = true;
  Fixture f({2, 64, 16, 4, 32}, can);
  f.backend.withholdArgmax = true;
  f.engine.submit(counting(10, 3, 2));
  EXPECT_THROW(f.engine.step(), std::logic_error);
}

TEST(Engine, MoreThanTheContextIsRefusedAtSubmitWithoutOverflow) {
  Fixture f({2, 64, 16, 4, 32});
  size_t huge = f.engine.submit(counting(10, 3, INT64_MAX)); // 3 + (2^63 - 1) wraps if added
  size_t over = f.engine.submit(counting(10, 3, 30));        // one past --max-model-len 32
  size_t fits = f.engine.submit(counting(10, 3, 29));
  for (size_t refused : {huge, over}) {
    EXPECT_STREQ(f.engine.request(refused).finishReason, "error");
    EXPECT_NE(f.engine.request(refused).error.find("need more than --max-model-len 32"),
              std::string::npos)
        << f.engine.request(refused).error;
  }
  EXPECT_EQ(f.engine.waitingCount(), 1);
  while (f.engine.busy())
    f.engine.step();
  EXPECT_EQ(f.engine.request(fits).output, following(12, 29));
  EXPECT_EQ(f.engine.freeBlocks(), f.engine.totalBlocks());
}

TEST(Engine, LogitsThatAreNotFiniteFailTheirRequestAloneOnEitherPath) {
  for (bool argmax : {false, true}) {
    BackendCapabilities can;
    can.argmax = argmax;
    Fixture f({2, 64, 16, 4, 32}, can);
    f.backend.poisoned = 102; // b's second generated token comes from a NaN row
    size_t a = f.engine.submit(counting(10, 3, 6));
    size_t b = f.engine.submit(counting(100, 2, 6));
    std::vector<size_t> finished;
    EngineHooks hooks;
    hooks.onFinish = [&](size_t handle) { finished.push_back(handle); };
    while (f.engine.busy())
      f.engine.step(hooks);
    EXPECT_STREQ(f.engine.request(b).finishReason, "error");
    EXPECT_EQ(f.engine.request(b).error,
              "the model's logits are not finite (NaN or infinite) for its token 2");
    EXPECT_EQ(f.engine.request(b).output, following(101, 1));
    EXPECT_STREQ(f.engine.request(a).finishReason, "length");
    EXPECT_EQ(f.engine.request(a).output, following(12, 6));
    EXPECT_EQ(finished, (std::vector<size_t>{b, a}));
    EXPECT_EQ(f.engine.freeBlocks(), f.engine.totalBlocks());
  }
}

// Prompt scoring: the counting row of token t peaks at t + 1, so prompt token p + 1 scores
// high exactly where it follows its predecessor; the oracle reads that off the prompt alone.
// A row taken one place off (the wrong token's) flips which positions score high.
double expectedLogprob(const std::vector<int64_t> &prompt, size_t p) {
  double peak = 1.0 - std::log(std::exp(1.0) + double(Fixture::kVocab - 1));
  double flat = 0.0 - std::log(std::exp(1.0) + double(Fixture::kVocab - 1));
  return prompt[p + 1] == prompt[p] + 1 ? peak : flat;
}

void expectScored(const EngineRequest &r, const std::vector<int64_t> &prompt) {
  ASSERT_EQ(r.promptTokenLogprobs.size(), prompt.size() - 1);
  for (size_t p = 0; p + 1 < prompt.size(); ++p) {
    const TokenLogprobs &t = r.promptTokenLogprobs[p];
    EXPECT_EQ(t.token, prompt[p + 1]) << "prompt token " << p + 1;
    EXPECT_NEAR(t.logprob, expectedLogprob(prompt, p), 1e-5) << "prompt token " << p + 1;
    ASSERT_EQ(t.top.size(), 2u);
    EXPECT_EQ(t.top[0].first, prompt[p] + 1); // the peak, then the lowest id of the rest
  }
}

EngineRequest scoring(std::vector<int64_t> prompt, int64_t tokens) {
  EngineRequest r;
  r.prompt = std::move(prompt);
  r.maxTokens = tokens;
  r.sampling.temperature = 0;
  r.promptLogprobs = 2;
  return r;
}

TEST(Engine, APromptIsScoredRowByRowAcrossChunksAndBesideOthers) {
  // A budget of 5 tokens a step: the 13-token prompt is scored in chunks, beside a decode.
  std::vector<int64_t> prompt = {10, 11, 12, 40, 41, 7, 8, 9, 10, 3, 500, 501, 502};
  Fixture f({4, 5, 32, 4, 32});
  size_t other = f.engine.submit(counting(300, 2, 8));
  f.engine.step();
  size_t a = f.engine.submit(scoring(prompt, 3));
  while (f.engine.busy())
    f.engine.step();
  expectScored(f.engine.request(a), prompt);
  EXPECT_EQ(f.engine.request(a).output, following(502, 3));
  EXPECT_EQ(f.engine.request(other).output, following(301, 8));
  EXPECT_TRUE(f.engine.request(other).promptTokenLogprobs.empty());
}

TEST(Engine, AScoredPromptIsChunkedToTheRowsAStepMayReturn) {
  std::vector<int64_t> prompt = {10, 11, 12, 40, 41, 7, 8, 9, 10, 3, 500, 501, 502, 6};
  EngineLimits limits{4, 64, 32, 4, 32};
  limits.scoredRows = 3;
  Fixture f(limits);
  size_t a = f.engine.submit(scoring(prompt, 2));
  while (f.engine.busy())
    f.engine.step();
  expectScored(f.engine.request(a), prompt);
  EXPECT_EQ(f.engine.request(a).output, following(6, 2));
  // 13 rows scored three a step (the last step's third is the sampled one), then a decode.
  EXPECT_EQ(f.backend.rowsPerStep, (std::vector<int64_t>{3, 3, 3, 3, 2, 1}));
}

TEST(Engine, MaxTokensZeroScoresThePromptAndGeneratesNothing) {
  std::vector<int64_t> prompt = {5, 6, 90, 91, 92, 93};
  Fixture f({2, 64, 16, 4, 32});
  size_t a = f.engine.submit(scoring(prompt, 0));
  EngineRequest plain = counting(10, 3, 0); // nothing asked: finished at once, as before
  size_t b = f.engine.submit(plain);
  EXPECT_STREQ(f.engine.request(b).finishReason, "length");
  while (f.engine.busy())
    f.engine.step();
  expectScored(f.engine.request(a), prompt);
  EXPECT_TRUE(f.engine.request(a).output.empty());
  EXPECT_STREQ(f.engine.request(a).finishReason, "length");
  EXPECT_EQ(f.engine.freeBlocks(), f.engine.totalBlocks());
}

TEST(Engine, AScoredPromptTakesNoCacheHit) {
  EngineLimits limits{4, 64, 16, 4, 32};
  limits.prefixCaching = true;
  Fixture f(limits);
  std::vector<int64_t> prompt = {20, 21, 22, 23, 24, 25, 26, 27, 60, 61};
  EngineRequest first = counting(0, 1, 1);
  first.prompt = prompt;
  f.engine.submit(first); // caches the prompt's two full blocks
  while (f.engine.busy())
    f.engine.step();
  size_t scored = f.engine.submit(scoring(prompt, 2));
  while (f.engine.busy())
    f.engine.step();
  size_t hit = f.engine.submit(first);
  while (f.engine.busy())
    f.engine.step();
  EXPECT_EQ(f.engine.request(scored).cachedTokens, 0);
  expectScored(f.engine.request(scored), prompt);
  EXPECT_EQ(f.engine.request(hit).cachedTokens, 8);
}

TEST(Engine, APromptPreemptedWhileScoredIsScoredOnce) {
  // Five blocks of four tokens and three tokens a step: the scored prompt is prefilled in
  // chunks while the older request grows, until the newest, the one scored, gives its blocks
  // back halfway through its prompt.
  std::vector<int64_t> prompt = {1, 2, 3, 9, 10, 11, 70, 71, 5, 6, 7, 8};
  Fixture f({4, 3, 5, 4, 16});
  size_t a = f.engine.submit(counting(100, 4, 12));
  size_t scored = f.engine.submit(scoring(prompt, 4));
  while (f.engine.busy())
    f.engine.step();
  EXPECT_GT(f.engine.request(scored).preempted, 0);
  expectScored(f.engine.request(scored), prompt);
  EXPECT_EQ(f.engine.request(scored).output, following(8, 4));
  EXPECT_EQ(f.engine.request(a).output, following(103, 12));
}

TEST(Engine, AScoredRowThatIsNotFiniteFailsItsRequestAlone) {
  Fixture f({2, 64, 16, 4, 32});
  f.backend.poisoned = 41;
  size_t a = f.engine.submit(scoring({10, 40, 41, 42}, 2));
  size_t b = f.engine.submit(counting(100, 3, 2));
  while (f.engine.busy())
    f.engine.step();
  EXPECT_STREQ(f.engine.request(a).finishReason, "error");
  EXPECT_EQ(f.engine.request(a).error,
            "the model's logits are not finite (NaN or infinite) for its prompt's token 4");
  EXPECT_EQ(f.engine.request(b).output, following(102, 2));
  EXPECT_EQ(f.engine.freeBlocks(), f.engine.totalBlocks());
}

TEST(Engine, ChoicesSubmittedAfterTheirLeaderFindItsPromptCached) {
  EngineLimits limits{8, 64, 32, 4, 32};
  limits.prefixCaching = true;
  Fixture f(limits);
  // Four at once compute the same prompt side by side: nothing is cached yet.
  std::vector<size_t> apart;
  for (int i = 0; i < 4; ++i)
    apart.push_back(f.engine.submit(counting(10, 10, 3)));
  // A leader and three after it: they wait for its prompt, then hold its two full blocks.
  size_t leader = f.engine.submit(counting(50, 10, 3));
  std::vector<size_t> after;
  for (int i = 0; i < 3; ++i)
    after.push_back(f.engine.submitAfter(counting(50, 10, 3), leader));
  EXPECT_EQ(f.engine.waitingCount(), 5); // the four apart and the leader
  while (f.engine.busy())
    f.engine.step();
  for (size_t h : apart) {
    EXPECT_EQ(f.engine.request(h).cachedTokens, 0);
    EXPECT_EQ(f.engine.request(h).output, following(19, 3));
  }
  EXPECT_EQ(f.engine.request(leader).cachedTokens, 0);
  for (size_t h : after) {
    EXPECT_EQ(f.engine.request(h).cachedTokens, 8);
    EXPECT_EQ(f.engine.request(h).output, following(59, 3));
  }
  EXPECT_EQ(f.engine.freeBlocks(), f.engine.totalBlocks());
}

TEST(Engine, ChoicesRunWhenTheirLeaderEndsFirstAndStayAbortedWhenAborted) {
  EngineLimits limits{8, 64, 32, 4, 32};
  limits.prefixCaching = true;
  Fixture f(limits);
  size_t leader = f.engine.submit(counting(50, 10, 3));
  size_t kept = f.engine.submitAfter(counting(50, 10, 3), leader);
  size_t dropped = f.engine.submitAfter(counting(50, 10, 3), leader);
  f.engine.abort(dropped); // while it waits for the leader
  f.engine.abort(leader);  // before its prompt is computed: the one left runs anyway
  while (f.engine.busy())
    f.engine.step();
  EXPECT_STREQ(f.engine.request(dropped).finishReason, "abort");
  EXPECT_TRUE(f.engine.request(dropped).output.empty());
  EXPECT_EQ(f.engine.request(kept).output, following(59, 3));
  // After a leader that has ended, at once.
  size_t late = f.engine.submitAfter(counting(50, 10, 2), leader);
  EXPECT_EQ(f.engine.waitingCount(), 1);
  while (f.engine.busy())
    f.engine.step();
  EXPECT_EQ(f.engine.request(late).output, following(59, 2));
  EXPECT_EQ(f.engine.freeBlocks(), f.engine.totalBlocks());
}

/// Allows the tokens of a cycle in turn (a, b, a, b, ...), and records what it was told; none
/// after `stopAfter` tokens.
struct Cycle final : TokenConstraint {
  std::vector<int64_t> tokens, accepted;
  size_t stopAfter = SIZE_MAX;
  bool next(std::vector<uint32_t> &allowed) override {
    if (accepted.size() >= stopAfter)
      return false;
    int64_t t = tokens[accepted.size() % tokens.size()];
    allowed[size_t(t / 32)] |= uint32_t(1) << (t % 32);
    return true;
  }
  bool accept(int64_t token) override {
    accepted.push_back(token);
    return token == tokens[(accepted.size() - 1) % tokens.size()];
  }
};

TEST(Engine, AConstraintChoosesAmongItsTokensAndEndsARequestItCannotContinue) {
  BackendCapabilities can;
  can.argmax = true; // a constrained step gathers the logits all the same
  Fixture f({4, 64, 16, 4, 32}, can);
  auto cycle = std::make_shared<Cycle>();
  cycle->tokens = {700, 3};
  EngineRequest a = counting(10, 3, 5);
  a.constraint = cycle;
  size_t ha = f.engine.submit(a);
  auto stuck = std::make_shared<Cycle>();
  stuck->tokens = {9};
  stuck->stopAfter = 2;
  EngineRequest b = counting(20, 3, 5);
  b.constraint = stuck;
  size_t hb = f.engine.submit(b);
  size_t free = f.engine.submit(counting(40, 3, 5)); // beside them, as it would alone
  while (f.engine.busy())
    f.engine.step();
  EXPECT_EQ(f.engine.request(ha).output, (std::vector<int64_t>{700, 3, 700, 3, 700}));
  EXPECT_EQ(cycle->accepted, f.engine.request(ha).output);
  EXPECT_EQ(f.engine.request(hb).output, (std::vector<int64_t>{9, 9}));
  EXPECT_STREQ(f.engine.request(hb).finishReason, "error");
  EXPECT_EQ(f.engine.request(hb).error, "its grammar allows no token after token 2");
  EXPECT_EQ(f.engine.request(free).output, following(42, 5));
  for (bool asked : f.backend.argmaxAsked)
    EXPECT_FALSE(asked); // a constrained row is never found on the ranks
}

TEST(Engine, ABackendThatDrawsPicksTheTokensTheSamplerWouldWithTheSameSeeds) {
  // Seeded sampled requests (top_k, top_p, min_p), a greedy one and a penalized one, on
  // a backend that picks by the Draw rank 0 sends and on one that returns the logits: the
  // same tokens, so the engine draws each request's numbers in the Sampler's order and
  // records what the backend picked.
  auto requests = [] {
    std::vector<EngineRequest> out;
    for (int i = 0; i < 4; ++i) {
      EngineRequest r = counting(10 + 40 * i, 3 + i, 12);
      r.sampling.temperature = 0.6 + 0.3 * i;
      r.sampling.topK = i == 1 ? 50 : 0;
      r.sampling.topP = i == 2 ? 0.8 : 1.0;
      r.sampling.minP = i == 3 ? 0.05 : 0.0;
      r.sampling.seed = 1000 + uint64_t(i);
      out.push_back(r);
    }
    out.push_back(counting(300, 2, 12)); // greedy
    return out;
  };
  constexpr int64_t kVocab = 500;
  ModelSpec &spec = *newSpec("spread", 1, kVocab, 1, /*lastTokenOnly=*/true);
  std::vector<std::vector<int64_t>> outputs[2];
  for (bool draws : {false, true}) {
    BackendCapabilities can;
    can.argmax = true;
    can.draws = draws;
    SpreadBackend backend(kVocab, can);
    RankInfo rank;
    Engine engine(spec, backend, rank, {4, 64, 64, 4, 64});
    std::vector<size_t> handles;
    for (const EngineRequest &r : requests())
      handles.push_back(engine.submit(r));
    while (engine.busy())
      engine.step();
    for (size_t h : handles)
      outputs[draws].push_back(engine.request(h).output);
    // Without draws only the greedy request's steps alone are picked; with them every step.
    if (draws) {
      EXPECT_EQ(backend.picked, std::vector<bool>(backend.picked.size(), true));
      EXPECT_EQ(backend.drawn, 4 * 12);
    } else {
      EXPECT_EQ(backend.drawn, 0);
    }
  }
  EXPECT_EQ(outputs[1], outputs[0]);
  // The draws mattered: the sampled requests did not all follow the argmax.
  EXPECT_NE(outputs[0][0], outputs[0][4]);

  // A penalized request beside them: its steps come back as logits, the others' tokens
  // are still the Sampler's.
  BackendCapabilities can;
  can.argmax = can.draws = true;
  SpreadBackend backend(kVocab, can);
  RankInfo rank;
  Engine engine(spec, backend, rank, {4, 64, 64, 4, 64});
  std::vector<EngineRequest> mixed = requests();
  EngineRequest penalized = counting(200, 2, 3);
  penalized.sampling.repetitionPenalty = 1.3;
  std::vector<size_t> handles;
  for (const EngineRequest &r : mixed)
    handles.push_back(engine.submit(r));
  engine.submit(penalized);
  while (engine.busy())
    engine.step();
  for (size_t i = 0; i < handles.size(); ++i)
    EXPECT_EQ(engine.request(handles[i]).output, outputs[0][i]) << "request " << i;
  EXPECT_EQ(std::count(backend.picked.begin(), backend.picked.end(), false), 3);
}

} // namespace
} // namespace tpcrt

