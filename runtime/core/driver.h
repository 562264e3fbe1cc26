// The parts runModel (driver.cpp) is made of, shared by the files that hold them: the
// request (request.cpp, text.cpp), the group, the weights (driver.cpp) and the generation
// (generate.cpp). Private to libtpcrt; emitted code sees only tpcrt/model.h.
#ifndef TPCRT_CORE_DRIVER_H
#define TPCRT_CORE_DRIVER_H

#include "tpcrt/backend.h"
#include "tpcrt/model.h"
#include "tpcrt/tokenizer.h"

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace tpcrt {

/// The command line.
struct Args {
  std::string weights, dumpLogits, trace, host = "127.0.0.1";
  /// A prompt given as text (--prompt, or --prompt-file's contents) instead of ids, with
  /// --chat's rendering through the chat template and its --system message.
  std::optional<std::string> promptText;
  std::string promptFile, system;
  bool chat = false;
  /// End-of-sequence ids beside the model's: generation_config.json's, as generate stops.
  std::vector<int64_t> moreEos;
  std::optional<uint64_t> randomSeed;
  std::vector<int64_t> prompt, forced;
  std::optional<int64_t> eosId; // overrides the model's end-of-sequence ids
  bool ignoreEos = false, warmup = false, verbose = false;
  int64_t maxNewTokens = 16, maxSeqLen = 0; // maxSeqLen 0: not given, see chooseMaxSeqLen
  int timeoutSeconds = 30;
};

/// TPC_FAULT: a fault one rank injects into itself, so that tests can kill a rank at a known
/// point of a run, or keep it from joining, deterministically.
struct Fault {
  enum Kind { None, Kill, Device, NoStart } kind = None;
  int rank = -1;
  int64_t step = -1;
};

/// What this process is asked to do, from its flags and its environment, checked against
/// the model before anything is connected.
struct Request {
  Args args; // maxSeqLen chosen; a text prompt tokenized into args.prompt
  /// The checkpoint's tokenizer, for a text prompt: the output is text too.
  std::shared_ptr<Tokenizer> tokenizer;
  int rank = 0, world = 1;
  int localRank = 0; // LOCAL_RANK, else the rank
  const char *worldFrom = "WORLD_SIZE"; // where `world` came from, for errors
  Fault fault;
};

/// The request, or empty once the reason is printed, with the exit status in `status`.
std::optional<Request> readRequest(const ModelSpec &spec, int argc, char **argv, int &status);

/// This rank's place in the connected tp group.
struct Group {
  int rank = 0, world = 1; // under the per-rank view, world is the compiled tp
  int localRank = 0;
  bool view = false; // TPC_SINGLE_RANK_VIEW=1: alone, with a no-op communicator
  std::unique_ptr<Comm> comm;

  /// Whether a failed collective is a peer's doing; a rank alone, or viewed alone, has none.
  bool peers() const { return world > 1 && !view; }
  /// Stops this rank with `message`, printed and left where the peers can read it; returns
  /// the exit status.
  int stop(const std::string &message) const;
};

/// What the forwards of a generation took, for rank 0's report.
struct Timings {
  double warmupMs = 0;           // --warmup's first forwards, not counted
  std::vector<double> prefillMs; // --warmup's timed prefills, then the generation's own
  std::vector<double> stepMs;    // the decode steps
};

/// One rank's forwards for a request: a prefill, then greedy decode steps on the KV cache.
/// It counts the steps that TPC_FAULT names, keeps the logits --dump-logits writes, and
/// knows the phase under way, which a failure reports.
class Generator {
public:
  Generator(const ModelSpec &spec, Backend &backend, const RankInfo &rank, const Fault &fault)
      : spec(spec), backend(backend), rank(rank), fault(fault) {}

  /// --warmup: what only a process's first forwards pay, paid before the timed ones.
  void warmUp(const std::vector<int64_t> &prompt);
  /// The new tokens: the prompt's prefill, then a decode step each until --max-new-tokens or
  /// an end-of-sequence id; `onToken`, when given, sees each as it comes.
  std::vector<int64_t> generate(const Args &args,
                                const std::function<void(int64_t)> &onToken = {});

  const std::string &phase() const { return current; }
  /// The last row of logits of every counted forward, one after another.
  const std::vector<float> &logits() const { return dumped; }
  const Timings &timings() const { return times; }

private:
  int64_t forward(const std::vector<int64_t> &ids, int64_t start);

  const ModelSpec &spec;
  Backend &backend;
  const RankInfo &rank;
  Fault fault;
  int64_t step = 0;       // 0: the prefill; n: the n-th decode step
  bool warming = false;   // --warmup's forwards: not steps, nothing kept
  std::string current = "the prefill";
  std::vector<float> dumped;
  Timings times;
};

/// Rank 0's lines on stdout: the tokens, then the prefill and decode times.
void printReport(const Args &args, const std::vector<int64_t> &tokens, const Timings &times);
/// After streamed text: one line on stderr, the prefill, the decode per token and tokens/s.
void printTextSummary(const Args &args, const std::vector<int64_t> &tokens,
                      const Timings &times);

/// A text request's prompt as ids (text.cpp): the checkpoint's tokenizer (beside --weights)
/// encodes --prompt or --prompt-file, after --chat's chat template with --system, into
/// `args.prompt`; the tokenizer is kept for the output. A tokenizer that can give an id past
/// the model's `vocab` embedding rows is refused. False with `error` on failure.
bool tokenizePrompt(Args &args, int64_t vocab, std::shared_ptr<Tokenizer> &tokenizer,
                    std::string &error);
/// generation_config.json beside --weights, where there is one: its eos_token_id (one or a
/// list) into `args.moreEos`; a warning on rank 0 when it asks for sampling.
bool readGenerationConfig(Args &args, int rank, std::string &error);

} // namespace tpcrt

#endif // TPCRT_CORE_DRIVER_H
