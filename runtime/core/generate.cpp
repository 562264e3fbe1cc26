// One prompt's generation on one rank: the request through the engine (engine.h), which
// prefills it and decodes a token a step, the chosen token fed back unless --force-ids gives
// it; rank 0 alone decides (samples, applies the stop rules) and sends the other ranks each
// step. With --warmup, throwaway forwards first, so that the times reported are those of a
// warm process. TPC_FAULT's kill, device and nan faults strike here, as the step they name
// starts.
#include "core.h"

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <optional>
#include <stdexcept>
#include <thread>

namespace tpcrt {

namespace {

std::chrono::steady_clock::time_point now() { return std::chrono::steady_clock::now(); }

double millis(std::chrono::steady_clock::duration d) {
  return std::chrono::duration<double, std::milli>(d).count();
}

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  size_t n = values.size();
  return n == 0 ? 0.0 : n % 2 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

} // namespace

void slowFault(const Fault &fault) {
  if (fault.kind != Fault::Slow)
    return;
  std::fprintf(stderr, "TPC_FAULT: rank 0 takes %lld s longer to read\n", (long long)fault.seconds);
  std::fflush(stderr);
  std::this_thread::sleep_for(std::chrono::seconds(fault.seconds));
}

void strikeFault(const Fault &fault, int rank, Backend &backend, int64_t step) {
  if (fault.rank == rank && step == fault.step) {
    if (fault.kind == Fault::Kill) {
      std::fprintf(stderr, "TPC_FAULT: rank %d kills itself at step %lld\n", rank,
                   (long long)step);
      std::fflush(stderr);
      std::raise(SIGKILL);
    }
    if (fault.kind == Fault::Stop) {
      // Stalls until a SIGCONT: a hung host, or (with its link cut meanwhile) a lost one.
      std::fprintf(stderr, "TPC_FAULT: rank %d stops itself at step %lld\n", rank,
                   (long long)step);
      std::fflush(stderr);
      std::raise(SIGSTOP);
    }
    if (fault.kind == Fault::Device) {
      // The fault surfaces when the forward below waits for the device.
      if (!backend.injectFault())
        throw std::runtime_error("TPC_FAULT: device faults need a device (--target cuda)");
      std::fprintf(stderr, "TPC_FAULT: rank %d makes its device fault at step %lld\n",
                   rank, (long long)step);
    }
    if (fault.kind == Fault::Perturb) {
      backend.perturbAttention();
      std::fprintf(stderr, "TPC_FAULT: rank %d's attention runs with its scale off by 1/%d\n",
                   rank, int(1 / Backend::kPerturbation));
    }
    if (fault.kind == Fault::Nan) {
      // The forward below writes the NaN into this rank's share of the logits.
      if (!backend.poisonLogits())
        throw std::runtime_error("TPC_FAULT: nan faults need logits split by vocabulary "
                                 "and gathered from the ranks (the CPU target at tp > 1)");
      std::fprintf(stderr, "TPC_FAULT: rank %d makes its logits NaN at step %lld\n", rank,
                   (long long)step);
    }
  }
}

void Generator::strike() { strikeFault(fault, rank.worldRank(), backend, step); }

const float *Generator::forward(const std::vector<int64_t> &ids, int64_t start,
                                const EngineLimits &limits) {
  const float *logits = nullptr;
  int64_t size = spec.kvBlockSize, n = int64_t(ids.size());
  for (int64_t done = 0; done < n;) {
    // The chunk's blocks, from the first its first row reads to its last token's, fit each
    // window group's pool (one token always does: blocksRead counts that many).
    int64_t from = start + done, count = n - done;
    for (size_t w = 0; w < limits.windows(); ++w)
      while (count > 1 && (from + count - 1) / size -
                                  limits.windowReach(w).firstRead(from) / size + 1 >
                              limits.windowBlocks[w])
        count = std::max<int64_t>(1, count - size);
    logits = forwardChunk(ids.data() + done, count, from, limits);
    done += count;
  }
  return logits;
}

const float *Generator::forwardChunk(const int64_t *ids, int64_t n, int64_t start,
                                     const EngineLimits &limits) {
  std::vector<int64_t> positions(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    positions[size_t(i)] = start + i;
  // One sequence, alone in the cache: group 0's blocks are the first ones, in order; a window
  // group's a ring over its pool.
  int64_t stride = limits.blocksFor(limits.maxSeqLen);
  size_t groups = 1 + limits.windows();
  tables.resize(groups * size_t(stride));
  for (int64_t b = 0; b < stride; ++b) {
    tables[size_t(b)] = int32_t(b);
    for (size_t w = 0; w < limits.windows(); ++w)
      tables[(w + 1) * size_t(stride) + size_t(b)] = int32_t(b % limits.windowBlocks[w]);
  }
  Step one;
  one.ids = ids;
  one.positions = positions.data();
  one.tokens = n;
  one.tableStride = stride;
  one.sequences = {StepSequence{0, n, start, tables.data(), true}};
  // The program's rule (tp.sequence_parallel), as the compiler decided it.
  int64_t multiple = spec.sequenceParallelTokens;
  bool split = backend.hasSequenceParallel() && multiple > 0 && n >= multiple && n % multiple == 0;
  const float *logits = backend.forward(one, split);
  // Pipeline stages: the last stage sends the first its logits, which the forward there does
  // not wait for.
  if (rank.stages > 1) {
    if (rank.stage != 0)
      return nullptr;
    logits = backend.receiveLogits(spec.lastTokenOnly ? 1 : n, spec.vocab, spec.logitsStage,
                                   spec.logitsModule);
  }
  return spec.lastTokenOnly ? logits : logits + (n - 1) * spec.vocab;
}

void Generator::warmUp(const Args &args) {
  const std::vector<int64_t> &prompt = args.params.prompt;
  EngineLimits limits = engineLimits(spec, args);
  // What only a process's first forwards pay (lazy kernel loading, GEMM heuristics, the
  // decode graph's capture, allocations grown on first use), paid here and not timed: a
  // throwaway prefill and two decode steps (fed the prompt's first token: nothing is
  // decided here). Then two timed prefills on an empty cache; the third is the generation's.
  auto t0 = now();
  current = "the warm-up prefill";
  int64_t position = int64_t(prompt.size());
  forward(prompt, 0, limits);
  for (int i = 1; i <= 2; ++i) {
    current = "warm-up decode step " + std::to_string(i);
    forward({prompt[0]}, position++, limits);
  }
  times.warmupMs = millis(now() - t0);
  for (int i = 1; i <= 2; ++i) { // each from position 0: the cache starts anew
    current = "warm prefill " + std::to_string(i) + " of 3";
    t0 = now();
    forward(prompt, 0, limits);
    times.prefillMs.push_back(millis(now() - t0));
  }
  rank.trace->clear(); // the trace lists the generation's collectives, as without --warmup
}

std::vector<int64_t> Generator::generate(const Args &args,
                                         const std::function<bool(int64_t)> &onToken) {
  // One request through the engine, as --requests runs many: rank 0 schedules, samples and
  // decides; every step it sends the peers the step they run.
  bool decides = rank.worldRank() == 0;
  EngineLimits limits = engineLimits(spec, args);
  limits.maxNumSeqs = 1;
  Engine engine(spec, backend, rank, limits);
  std::vector<EngineRequest> one;
  if (decides)
    one.push_back(engineRequest(spec, args, args.params));
  EngineHooks hooks;
  hooks.beforeStep = [&](int64_t n) {
    step = n;
    current = n == 0 ? "the prefill" : "decode step " + std::to_string(n);
    strike();
  };
  if (!args.dumpLogits.empty()) // else a greedy step may leave the logits ungathered
    hooks.onLogits = [&](size_t, const float *row) {
      dumped.insert(dumped.end(), row, row + spec.vocab);
    };
  if (onToken)
    hooks.onToken = [&](size_t, int64_t id) { return onToken(id); };
  current = "the prefill";
  engine.run(one, hooks);
  // The first steps are the prefill (one, or the chunks --max-batch-tokens, or a window
  // group's pool, cuts the prompt into), the others decode steps: one a token after the
  // first, which the prefill's last step samples.
  const std::vector<double> &ms = engine.stepMs();
  size_t decodeSteps = decides && !one[0].output.empty() ? one[0].output.size() - 1 : 0;
  size_t prefillSteps = ms.size() - std::min(ms.size(), decodeSteps);
  double prefill = 0;
  for (size_t i = 0; i < prefillSteps; ++i)
    prefill += ms[i];
  times.prefillMs.push_back(prefill);
  times.stepMs.assign(ms.begin() + ptrdiff_t(prefillSteps), ms.end());
  finished = "length";
  tokenLogprobs.clear();
  if (!decides)
    return {};
  if (one[0].finishReason)
    finished = one[0].finishReason;
  if (!one[0].error.empty()) // the prompt's run failed (its logits not finite)
    throw RequestError(one[0].error);
  tokenLogprobs = one[0].outputLogprobs;
  return one[0].output;
}

void printReport(const Args &args, const std::vector<int64_t> &tokens, const Timings &times) {
  std::printf("tokens:");
  for (int64_t t : tokens)
    std::printf(" %lld", (long long)t);
  std::printf("\n");
  const std::vector<double> &prefillMs = times.prefillMs, &stepMs = times.stepMs;
  double decodeTotal = 0;
  for (double ms : stepMs)
    decodeTotal += ms;
  if (args.warmup && !tokens.empty()) {
    std::printf("warm-up: a prefill of %zu tokens and 2 decode steps, then the KV cache "
                "emptied (%.3f ms, not counted)\n",
                args.params.prompt.size(), times.warmupMs);
    std::printf("prefill: %.3f ms for %zu tokens (median of %zu warm prefills:",
                median(prefillMs), args.params.prompt.size(), prefillMs.size());
    for (double ms : prefillMs)
      std::printf(" %.3f", ms);
    std::printf(")\n");
    if (!stepMs.empty())
      std::printf("decode: %.3f ms per token over %zu tokens (median step; mean %.3f ms)\n",
                  median(stepMs), stepMs.size(), decodeTotal / double(stepMs.size()));
  } else {
    // A cold process: the first prefill and the first decode steps include one-time setup.
    std::printf("prefill: %.3f ms for %zu tokens\n", prefillMs.back(), args.params.prompt.size());
    if (!stepMs.empty())
      std::printf("decode: %.3f ms per token over %zu tokens\n",
                  decodeTotal / double(stepMs.size()), stepMs.size());
  }
  std::fflush(stdout);
}

void printTextSummary(const Args &args, const std::vector<int64_t> &tokens,
                      const Timings &times) {
  double decodeTotal = 0;
  for (double ms : times.stepMs)
    decodeTotal += ms;
  double perToken = times.stepMs.empty() ? 0 : decodeTotal / double(times.stepMs.size());
  std::fprintf(stderr, "\nprefill %.1f ms (%zu tokens); decode %.1f ms per token (%zu tokens, "
                       "%.1f tokens/s)\n",
               args.warmup ? median(times.prefillMs) : times.prefillMs.back(),
               args.params.prompt.size(), perToken, tokens.size(), perToken > 0 ? 1000 / perToken : 0.0);
}

} // namespace tpcrt
