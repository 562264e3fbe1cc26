// The sampler and the stop strings of sampling.h. vLLM's definitions (its v1 sampler and
// apply_penalties), restated:
//   repetition: a logit of a token seen in the prompt or the output is divided by the penalty
//               when positive, multiplied by it otherwise;
//   frequency:  logit -= penalty x the token's count in the output;
//   presence:   logit -= penalty when the token is in the output at all;
//   (before them, logit_bias is added, and min_tokens sets the stop ids' logits to -inf
//   until that many tokens are out;)
//   then logits / temperature; min_p drops the tokens whose probability is below min_p x the
//   largest; top_k keeps the tokens whose logit is at least the k-th largest (ties at the
//   boundary kept); top_p drops the least likely tokens while their summed probability,
//   renormalized over what min_p and top_k kept, stays at most 1 - top_p (the most likely
//   token always stays); the draw is from the softmax of what is left.
#include "tpcrt/sampling.h"

#include "tpcrt/utf8.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

namespace tpcrt {

namespace {

std::string number(double v) {
  char text[32];
  std::snprintf(text, sizeof text, "%g", v);
  return text;
}

uint64_t splitmix64(uint64_t &x) {
  uint64_t z = (x += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

uint64_t entropySeed() {
  std::random_device device;
  return (uint64_t(device()) << 32) ^ device();
}

} // namespace

std::string SamplingParams::validate() const {
  if (!std::isfinite(temperature) || temperature < 0)
    return "temperature must be at least 0, got " + number(temperature);
  if (topK < -1)
    return "top_k must be -1 or 0 (every token) or at least 1, got " + std::to_string(topK);
  if (!(topP > 0 && topP <= 1))
    return "top_p must be in (0, 1], got " + number(topP);
  if (!(minP >= 0 && minP <= 1))
    return "min_p must be in [0, 1], got " + number(minP);
  if (!(repetitionPenalty > 0) || !std::isfinite(repetitionPenalty))
    return "repetition_penalty must be greater than 0, got " + number(repetitionPenalty);
  if (!(presencePenalty >= -2 && presencePenalty <= 2))
    return "presence_penalty must be in [-2, 2], got " + number(presencePenalty);
  if (!(frequencyPenalty >= -2 && frequencyPenalty <= 2))
    return "frequency_penalty must be in [-2, 2], got " + number(frequencyPenalty);
  for (const auto &[id, bias] : logitBias) {
    if (id < 0)
      return "logit_bias names token " + std::to_string(id) + ", not a token id";
    if (!(bias >= -100 && bias <= 100))
      return "logit_bias of token " + std::to_string(id) + " must be in [-100, 100], got " +
             number(bias);
  }
  if (minTokens < 0)
    return "min_tokens must be at least 0, got " + std::to_string(minTokens);
  return "";
}

Rng::Rng(uint64_t seed) {
  for (uint64_t &word : s)
    word = splitmix64(seed);
}

uint64_t Rng::next() {
  uint64_t result = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
  s[2] ^= s[0];
  s[3] ^= s[1];
  s[1] ^= s[2];
  s[0] ^= s[3];
  s[2] ^= t;
  s[3] = rotl(s[3], 45);
  return result;
}

double Rng::uniform() { return double(next() >> 11) * 0x1.0p-53; }

Sampler::Sampler(const SamplingParams &params, const std::vector<int64_t> &prompt, int64_t vocab,
                 const std::vector<int64_t> &stopIds)
    : params_(params), vocab_(vocab), rng_(params.seed ? *params.seed : entropySeed()) {
  if (params_.minTokens > 0) {
    for (int64_t id : stopIds)
      if (id >= 0 && id < vocab)
        stopIds_.push_back(id);
    std::sort(stopIds_.begin(), stopIds_.end());
    stopIds_.erase(std::unique(stopIds_.begin(), stopIds_.end()), stopIds_.end());
  }
  if (params_.penalized()) {
    inPrompt_.assign(size_t(vocab), 0);
    outputCount_.assign(size_t(vocab), 0);
    for (int64_t id : prompt)
      if (id >= 0 && id < vocab)
        inPrompt_[size_t(id)] = 1;
  }
}

void Sampler::record(int64_t token) {
  ++produced_;
  if (!params_.penalized() || token < 0 || token >= vocab_)
    return;
  if (outputCount_[size_t(token)]++ == 0)
    outputTokens_.push_back(token);
}

bool Sampler::plain() const {
  return !params_.penalized() && params_.logitBias.empty() &&
         (stopIds_.empty() || produced_ >= params_.minTokens);
}

Draw Sampler::draw() {
  Draw d;
  if (params_.greedy())
    return d;
  d.temperature = params_.temperature;
  d.topK = params_.topK;
  d.topP = params_.topP;
  d.minP = params_.minP;
  d.u = rng_.uniform();
  return d;
}

std::string Draw::check() const {
  if (!(temperature == 0 || (temperature > 0 && std::isfinite(temperature))))
    return "temperature " + number(temperature);
  if (topK < -1)
    return "top_k " + std::to_string(topK);
  if (!(topP > 0 && topP <= 1))
    return "top_p " + number(topP);
  if (!(minP >= 0 && minP <= 1))
    return "min_p " + number(minP);
  if (!(u >= 0 && u < 1))
    return "uniform number " + number(u);
  return "";
}

void Sampler::adjust(const float *logits, std::vector<float> &out) const {
  out.assign(logits, logits + vocab_);
  for (const auto &[id, bias] : params_.logitBias)
    if (id < vocab_)
      out[size_t(id)] += float(bias);
  if (produced_ < params_.minTokens)
    for (int64_t id : stopIds_)
      out[size_t(id)] = -INFINITY;
  if (!params_.penalized())
    return;
  auto repeat = [&](int64_t id) {
    float &x = out[size_t(id)];
    x = x > 0 ? float(x / params_.repetitionPenalty) : float(x * params_.repetitionPenalty);
  };
  if (params_.repetitionPenalty != 1.0) {
    for (int64_t id = 0; id < vocab_; ++id)
      if (inPrompt_[size_t(id)])
        repeat(id);
    for (int64_t id : outputTokens_)
      if (!inPrompt_[size_t(id)])
        repeat(id);
  }
  for (int64_t id : outputTokens_) {
    uint32_t count = outputCount_[size_t(id)];
    out[size_t(id)] -= float(params_.frequencyPenalty * count + params_.presencePenalty);
  }
}

std::vector<double> Sampler::distribution(const std::vector<float> &penalized) const {
  size_t n = penalized.size();
  std::vector<double> p(n);
  double inverse = 1.0 / params_.temperature;
  double top = -INFINITY;
  for (size_t i = 0; i < n; ++i)
    top = std::max(top, double(penalized[i]) * inverse);
  for (size_t i = 0; i < n; ++i)
    p[i] = std::exp(double(penalized[i]) * inverse - top);
  // min_p, against the largest probability of the whole softmax: unnormalized, that is 1.
  if (params_.minP > 0)
    for (double &q : p)
      if (q < params_.minP)
        q = 0;
  // top_k: the k-th largest logit, ties kept.
  if (params_.topK > 0 && size_t(params_.topK) < n) {
    std::vector<float> values(penalized);
    std::nth_element(values.begin(), values.begin() + (params_.topK - 1), values.end(),
                     std::greater<float>());
    float kth = values[size_t(params_.topK - 1)];
    for (size_t i = 0; i < n; ++i)
      if (penalized[i] < kth)
        p[i] = 0;
  }
  if (params_.topP < 1) {
    // The kept mass, then the tokens from the most likely down (ties by id): a token stays
    // while the mass of the tokens above it is below top_p of the kept mass, which is the
    // rule "drop from the least likely while their sum is at most 1 - top_p" seen from the top.
    double kept = 0;
    std::vector<size_t> order;
    for (size_t i = 0; i < n; ++i)
      if (p[i] > 0) {
        kept += p[i];
        order.push_back(i);
      }
    auto above = [&](size_t a, size_t b) { return p[a] > p[b] || (p[a] == p[b] && a < b); };
    // Sorted in growing prefixes: top_p usually keeps a few tokens of a large vocabulary.
    size_t sorted = 0, keep = order.size();
    double mass = 0;
    for (size_t chunk = 64; sorted < order.size(); chunk *= 2) {
      size_t end = std::min(order.size(), sorted + chunk);
      std::partial_sort(order.begin() + ptrdiff_t(sorted), order.begin() + ptrdiff_t(end),
                        order.end(), above);
      for (; sorted < end; ++sorted) {
        if (sorted > 0 && mass >= params_.topP * kept) {
          keep = sorted;
          break;
        }
        mass += p[order[sorted]];
      }
      if (keep != order.size())
        break;
    }
    for (size_t j = keep; j < order.size(); ++j)
      p[order[j]] = 0;
  }
  double total = std::accumulate(p.begin(), p.end(), 0.0);
  for (double &q : p)
    q /= total;
  return p;
}

int64_t Sampler::sample(const float *logits) {
  int64_t chosen;
  if (argmaxOfRaw()) {
    chosen = std::max_element(logits, logits + vocab_) - logits;
  } else {
    adjust(logits, scratch_);
    if (params_.greedy()) {
      chosen = std::max_element(scratch_.begin(), scratch_.end()) - scratch_.begin();
    } else {
      std::vector<double> p = distribution(scratch_);
      double u = rng_.uniform(), sum = 0;
      chosen = -1;
      for (size_t i = 0; i < p.size(); ++i) {
        if (p[i] == 0)
          continue;
        chosen = int64_t(i); // the last token with mass, should rounding leave u past the sum
        sum += p[i];
        if (u < sum)
          break;
      }
    }
  }
  record(chosen);
  return chosen;
}

TokenLogprobs logprobsOf(const float *logits, int64_t vocab, int64_t token, int count) {
  double top = -INFINITY, sum = 0;
  for (int64_t i = 0; i < vocab; ++i)
    top = std::max(top, double(logits[i]));
  for (int64_t i = 0; i < vocab; ++i)
    sum += std::exp(double(logits[i]) - top);
  double logZ = top + std::log(sum);
  TokenLogprobs out{token, double(logits[token]) - logZ, {}};
  out.rank = std::count_if(logits, logits + vocab, [&](float x) { return x >= logits[token]; });
  size_t n = std::min(size_t(std::max(count, 0)), size_t(vocab));
  if (n == 0)
    return out;
  std::vector<int64_t> ids(static_cast<size_t>(vocab));
  std::iota(ids.begin(), ids.end(), 0);
  std::partial_sort(ids.begin(), ids.begin() + ptrdiff_t(n), ids.end(), [&](int64_t a, int64_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  });
  for (size_t i = 0; i < n; ++i)
    out.top.emplace_back(ids[i], double(logits[ids[i]]) - logZ);
  return out;
}

std::string checkStopStrings(const std::vector<std::string> &stops) {
  if (stops.size() > kMaxStopStrings)
    return std::to_string(stops.size()) + " stop strings, more than the limit of " +
           std::to_string(kMaxStopStrings);
  for (size_t i = 0; i < stops.size(); ++i) {
    const std::string &stop = stops[i];
    std::string which = "stop string " + std::to_string(i + 1);
    if (stop.empty())
      return which + " is empty";
    if (stop.size() > kMaxStopStringBytes)
      return which + " has " + std::to_string(stop.size()) + " bytes, more than the limit of " +
             std::to_string(kMaxStopStringBytes);
    if (size_t at = firstInvalidUtf8(stop); at != std::string::npos)
      return which + " is not valid UTF-8 (byte " + std::to_string(at) + ")";
  }
  return "";
}

StopStrings::StopStrings(std::vector<std::string> stops) : stops_(std::move(stops)) {
  for (const std::string &s : stops_)
    longest_ = std::max(longest_, s.size());
}

std::string StopStrings::push(const std::string &piece, bool armed) {
  if (stopped_)
    return "";
  held_ += piece;
  if (!armed) { // all of it shown; its end kept, where a later stop string may begin
    shown_ += held_;
    if (shown_.size() + 1 > longest_)
      shown_.erase(0, shown_.size() + 1 - std::max<size_t>(longest_, 1));
    std::string out;
    out.swap(held_);
    return out;
  }
  // The earliest stop string that ends in the text held (earlier text was released: it held
  // none, or was shown before the stop strings counted).
  std::string text = shown_ + held_;
  size_t at = std::string::npos;
  for (const std::string &stop : stops_)
    for (size_t found = text.find(stop); found != std::string::npos && found < at;
         found = text.find(stop, found + 1))
      if (found + stop.size() > shown_.size()) {
        at = found;
        matched_ = stop;
        break;
      }
  if (at != std::string::npos) {
    stopped_ = true;
    std::string out = at > shown_.size() ? text.substr(shown_.size(), at - shown_.size()) : "";
    held_.clear();
    shown_.clear();
    return out;
  }
  // Keep the longest end of the text that begins some stop string: it may reach back into
  // the text shown unarmed, which stays then, for a later piece to finish the stop string.
  size_t keep = 0;
  for (const std::string &stop : stops_)
    for (size_t k = std::min(stop.size() - 1, text.size()); k > keep; --k)
      if (text.compare(text.size() - k, k, stop, 0, k) == 0) {
        keep = k;
        break;
      }
  if (keep >= held_.size()) { // all of it may begin a stop string
    shown_ = text.substr(text.size() - keep, keep - held_.size());
    return "";
  }
  shown_.clear();
  std::string out = held_.substr(0, held_.size() - keep);
  held_.erase(0, held_.size() - keep);
  return out;
}

std::string StopStrings::finish() {
  std::string out;
  out.swap(held_);
  return stopped_ ? "" : out;
}

} // namespace tpcrt
