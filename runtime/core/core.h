// The core: the parts runModel (runtime/driver/driver.cpp) and the server (runtime/serve/) are
// made of, shared by the files that hold them: the request (request.cpp, text.cpp,
// requests.cpp), the group (group.cpp) and the generation (generate.cpp). Private to
// libtpcrt; emitted code sees only tpcrt/model.h.
#ifndef TPCRT_CORE_CORE_H
#define TPCRT_CORE_CORE_H

#include "../engine/engine.h"
#include "tpcrt/backend.h"
#include "tpcrt/model.h"
#include "tpcrt/sampling.h"
#include "tpcrt/tokenizer.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

namespace tpcrt {

class GgufFile;

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
  /// The one prompt's request (--prompt-ids, --max-new-tokens, --ignore-eos, --stop,
  /// --stop-token-ids, --force-ids; `sampling` once readGenerationConfig has run), and the
  /// defaults of every --requests line and API request.
  RequestParams params;
  std::optional<int64_t> eosId; // overrides the model's end-of-sequence ids
  bool warmup = false, verbose = false;
  int64_t maxSeqLen = 0; // 0: not given, see chooseMaxSeqLen
  int timeoutSeconds = 30;
  /// The sampling flags given (--temperature, --top-k, ...); unset ones take
  /// generation_config.json's values, else vLLM's defaults, except temperature, whose
  /// default is 0 (greedy, as transformers' generate) unless generation_config.json sets
  /// do_sample. `params.sampling` holds the result once readGenerationConfig has run.
  std::optional<double> temperature, topP, minP, repetitionPenalty, presencePenalty,
      frequencyPenalty;
  std::optional<int64_t> topK;
  std::optional<uint64_t> seed;
  /// --requests IN.jsonl and --output OUT.jsonl: many requests, one after another, instead of
  /// one prompt (requests.cpp).
  std::string requestsFile, outputFile;
  /// The engine's limits (engine.h): sequences and tokens in one step, and the KV cache's
  /// size in tokens. 0: not given; readRequest sets the defaults (engineDefaults).
  int64_t maxNumSeqs = 0, maxBatchTokens = 0, kvCacheTokens = 0;
  /// --kv-cache-memory BYTES: the KV cache's size in bytes on each rank instead, made tokens
  /// once the backend says how wide its elements are (sizeKvCache); 0: not given.
  int64_t kvCacheMemory = 0;
  /// --kv-cache-dtype: the KV cache's element type (F32 or BF16); none: the backend's own.
  std::optional<DType> kvCacheType;
  /// --int8-activations: the backend's matrix products round x to int8 where it can
  /// (Backend::setInt8Activations).
  bool int8Activations = false;
  /// Automatic prefix caching (scheduler.h), on unless --no-prefix-caching.
  bool prefixCaching = true;
  /// --serve HOST:PORT: an OpenAI-compatible HTTP server on rank 0 (serve/server.cpp), the
  /// requests its clients send run through the engine; --served-model-name is the model's
  /// name there, --max-queue how many requests may wait beyond --max-num-seqs running ones,
  /// --drain-seconds how long SIGTERM lets requests in flight finish.
  std::string serve, servedModelName;
  int64_t maxQueue = 64, drainSeconds = 30;
  /// --api-key (and TPC_API_KEY's): the keys a client must give as a Bearer token on /v1/*
  /// and /metrics (but for --metrics-public); none: the server is open.
  std::vector<std::string> apiKeys;
  bool metricsPublic = false;
  /// The connection layer's limits (serve/http.h): connections open at once, and the seconds
  /// a request's head, its body, an idle connection and each write of an answer may take.
  int64_t maxConnections = 4096, headerTimeout = 10, bodyTimeout = 30, keepAliveTimeout = 5,
          writeTimeout = 30;
  /// --request-metrics: each --requests line says when its first token came and when it
  /// finished (tpc bench reads them).
  bool requestMetrics = false;
};

/// The engine's limits not given, once --max-model-len is chosen: --max-num-seqs 8 with
/// --requests (1 for one prompt), --max-batch-tokens --max-model-len, --kv-cache-tokens room for
/// --max-num-seqs sequences of --max-model-len. "" or what is wrong (the cache too small for
/// one sequence of --max-model-len).
std::string engineDefaults(Args &args);
/// --kv-cache-memory as --kv-cache-tokens: as many tokens as its bytes hold on this rank, in
/// the backend's element width. "" or what is wrong (less than one sequence of --max-model-len).
std::string sizeKvCache(const ModelSpec &spec, DType type, Args &args);
/// The KV cache's blocks: --kv-cache-tokens in blocks of the program's size.
inline int64_t kvBlocks(const ModelSpec &spec, const Args &args) {
  return args.kvCacheTokens / spec.kvBlockSize + (args.kvCacheTokens % spec.kvBlockSize != 0);
}
/// The engine's limits as the flags give them. Where some attention layers read a window or chunks shorter
/// than --max-model-len, --kv-cache-tokens' bytes are shared among the KV groups' pools
/// (tpcrt/kv_groups.h: kvPoolBlocks).
EngineLimits engineLimits(const ModelSpec &spec, const Args &args);

/// TPC_FAULT: a fault one rank injects into itself, so that tests can kill a rank at a known
/// point of a run, make its logits NaN, or keep it from joining, deterministically.
struct Fault {
  enum Kind { None, Kill, Stop, Device, Nan, NoStart, Slow, Perturb } kind = None;
  int rank = -1;
  int64_t step = -1;
  int64_t seconds = -1; // slow's
};

/// TPC_FAULT's kill, device, nan or perturb fault (perturb's step is 0), where `fault` names
/// this rank and `step` (0: the first step of a run) is about to start.
void strikeFault(const Fault &fault, int rank, Backend &backend, int64_t step);

/// TPC_FAULT's slow fault: rank 0 takes `seconds` longer over what it reads alone before the
/// engine's first step (the tokenizer, the chat template, a requests file), as from a slow disk.
void slowFault(const Fault &fault);

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
  std::unique_ptr<Comm> comm; // every rank
  /// Where the program has pipeline stages: this rank's stage, and its stage's tp group
  /// (split from comm; declared after it, so that it goes first).
  int stage = 0, stages = 1;
  std::unique_ptr<Comm> stageComm;

  /// The ranks that share this rank's layers: its stage's, or every rank.
  Comm &tpGroup() const { return stageComm ? *stageComm : *comm; }

  /// Whether a failed collective is a peer's doing; a rank alone, or viewed alone, has none.
  bool peers() const { return world > 1 && !view; }
  /// Stops this rank with `message`, printed and left where the peers can read it; returns
  /// the exit status.
  int stop(const std::string &message) const;
};

/// Joins the tp group of `request`'s rank (group.cpp), or says why not: empty, with the exit
/// status in `status` (0 for TPC_FAULT=nostart's rank).
std::optional<Group> connectGroup(const ModelSpec &spec, const Request &request, int &status);

/// What the forwards of a generation took, for rank 0's report.
struct Timings {
  double warmupMs = 0;           // --warmup's first forwards, not counted
  std::vector<double> prefillMs; // --warmup's timed prefills, then the generation's own
  std::vector<double> stepMs;    // the decode steps
};

/// One prompt's generation on one rank: the request through the engine (a prefill, then
/// decode steps on the KV cache, each token chosen by rank 0, its sampler and stop rules, and
/// the step sent to the other ranks, which follow). It counts the steps that TPC_FAULT
/// names, keeps the logits --dump-logits writes (rank 0), and knows the phase under way,
/// which a failure reports.
class Generator {
public:
  Generator(const ModelSpec &spec, Backend &backend, const RankInfo &rank, const Fault &fault)
      : spec(spec), backend(backend), rank(rank), fault(fault) {}

  /// --warmup: what only a process's first forwards pay, paid before the timed ones.
  void warmUp(const Args &args);
  /// Rank 0: the new tokens (the others: none): the prompt's prefill, then a decode step each
  /// until --max-new-tokens, an end-of-sequence or stop id, or a stop string. `onToken`, when
  /// given, sees each token on rank 0 as it comes, and returns true to stop there (a stop
  /// string met in the text).
  std::vector<int64_t> generate(const Args &args,
                                const std::function<bool(int64_t)> &onToken = {});
  /// Why the generation ended: "stop" (an end-of-sequence or stop id, a stop string) or
  /// "length" (--max-new-tokens), as vLLM's finish_reason.
  const char *finishReason() const { return finished; }
  /// Rank 0, where the request asked for them: each generated token's log-probabilities.
  const std::vector<TokenLogprobs> &logprobs() const { return tokenLogprobs; }

  const std::string &phase() const { return current; }
  /// The last row of logits of every counted forward, one after another.
  const std::vector<float> &logits() const { return dumped; }
  const Timings &timings() const { return times; }

private:
  /// The last token's logits of a forward (of the whole vocabulary, on every rank): --warmup's
  /// forwards, of one sequence, in the KV cache `limits` describes. A window group's pool may
  /// hold fewer blocks than the tokens: the forwards take its blocks as a ring (block b in
  /// slot b % its blocks), in chunks whose blocks read and written fit it.
  const float *forward(const std::vector<int64_t> &ids, int64_t start, const EngineLimits &limits);
  /// One forward of `ids` (a chunk above).
  const float *forwardChunk(const int64_t *ids, int64_t n, int64_t start,
                            const EngineLimits &limits);
  /// TPC_FAULT, where it names this rank and the step under way.
  void strike();

  const ModelSpec &spec;
  Backend &backend;
  const RankInfo &rank;
  Fault fault;
  int64_t step = 0;       // 0: the prefill; n: the n-th decode step
  std::string current = "the prefill";
  std::vector<float> dumped;
  std::vector<int32_t> tables; // the sequence's block tables, a group's after another
  Timings times;
  const char *finished = "length";
  std::vector<TokenLogprobs> tokenLogprobs;
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
/// Generated tokens as text that may be shown: the tokenizer's stream (special tokens left
/// out unless `skipSpecial` is false), with stop strings held back and never released.
class GeneratedText {
public:
  /// `incremental`: see Tokenizer::Stream (a server's text, shown as it comes). The stop
  /// strings count from token `minTokens` + 1 on (min_tokens, as vLLM's: StopStrings).
  /// `skipSpecial` false keeps special tokens' text (a tool call's marker may be one).
  GeneratedText(const Tokenizer &tokenizer, std::vector<std::string> stops,
                bool incremental = false, int64_t minTokens = 0, bool skipSpecial = true)
      : stream(tokenizer.stream(skipSpecial, incremental)), stops(std::move(stops)),
        minTokens(minTokens) {}
  /// What may be shown once `id` is generated.
  std::string push(int64_t id) { return stops.push(stream.push(id), ++tokens > minTokens); }
  /// At the end: what was held back, unless a stop string ended the text.
  std::string finish() {
    return stops.stopped() ? "" : stops.push(stream.finish(), tokens > minTokens) + stops.finish();
  }
  bool stopped() const { return stops.stopped(); }
  const std::string &matched() const { return stops.matched(); }

private:
  Tokenizer::Stream stream;
  StopStrings stops;
  int64_t minTokens, tokens = 0;
};

/// The checkpoint directory of --weights: itself, or the directory its file is in.
std::string checkpointDir(const std::string &weights);

/// The checkpoint's tokenizer: tokenizer.json beside `weights`, or a GGUF file's metadata (then
/// the file stays open in `gguf`, for its chat template); refused when it can give an id past
/// the model's `vocab` embedding rows. Null with `error` when there is none or it is refused.
std::shared_ptr<Tokenizer> loadTokenizer(const std::string &weights, int64_t vocab,
                                         std::unique_ptr<GgufFile> &gguf, std::string &error);

/// A JSON number into `into` (an integer type takes only JSON integers that fit it); "" or
/// what is wrong: "must be a number, not \"x\"".
template <typename T> std::string jsonNumber(const nlohmann::json &value, T &into) {
  if constexpr (std::is_integral_v<T>) {
    if (!value.is_number_integer() ||
        (value.is_number_unsigned() && value.get<uint64_t>() > uint64_t(INT64_MAX)))
      return "must be an integer, not " + value.dump();
    into = T(value.get<int64_t>());
  } else {
    if (!value.is_number())
      return "must be a number, not " + value.dump();
    into = value.get<T>();
  }
  return "";
}

/// One request of a --requests file, checked: what to run, or why it cannot run.
struct BatchRequest {
  nlohmann::json id;    // as given: a string or an integer (null where there is none)
  size_t line = 0;      // 1-based
  RequestParams params; // the command's, with this request's prompt, length, sampling, stops
  bool textPrompt = false;
  std::string error; // non-empty: refused with this, naming the field
};

/// The requests of a --requests file's `text`, one JSON object a line (blank lines skipped),
/// each checked against `spec` (its vocabulary) and `command.maxSeqLen`, appended to `jobs`;
/// fields not given are `command`'s. `tokenizer` may be null (`tokenizerError` says why): then
/// text prompts and stop strings are refused. False when there are more than 2^20 requests.
bool readRequestsText(const std::string &text, const Args &command, const ModelSpec &spec,
                      const Tokenizer *tokenizer, const std::string &tokenizerError,
                      std::vector<BatchRequest> &jobs);

/// A field of a request object (a --requests line, an API request) that sets the length, the
/// sampling or the stop rules, read into `args`: "" when read, what is wrong (naming the
/// field) when it is wrong, nothing when `key` is none of them.
std::optional<std::string> readSamplingField(const std::string &key, const nlohmann::json &value,
                                             RequestParams &params);

/// What of a request read field by field only the model can judge: logit_bias's ids in its
/// vocabulary of `vocab`, and min_tokens at most max_tokens (both final). "" or what is
/// wrong, naming the field.
std::string checkAgainstModel(const RequestParams &params, int64_t vocab);

/// A count of most likely tokens to show with each token's log-probability (--requests'
/// `logprobs`, the API's `logprobs` and `top_logprobs`): an integer from 0 to kMaxLogprobs,
/// into `count`; "" when read, what is wrong (naming `field`) otherwise.
std::string readLogprobCount(const std::string &field, const nlohmann::json &value, int &count);

/// Request `params` as the engine runs it: its stop ids are its own and the model's
/// end-of-sequence ids (unless ignored: `command`'s --eos-id or the model's and
/// generation_config.json's).
EngineRequest engineRequest(const ModelSpec &spec, const Args &command,
                            const RequestParams &params);

/// --requests: runs every request of the file on the group's ranks through the engine, as
/// many at once as --max-num-seqs allows, rank 0 reading, checking and deciding, and writing
/// one JSON line per request to --output as each finishes. TPC_FAULT's `fault` strikes as
/// the engine's step it names starts. Returns the exit status (0 even when some requests
/// were refused or failed: their lines say why).
int runRequests(const ModelSpec &spec, const Args &args, Backend &backend, const RankInfo &rank,
                const Group &group, const Fault &fault);

/// generation_config.json beside --weights, where there is one: its eos_token_id (one or a
/// list) into `args.moreEos`, and its sampling fields as the defaults of the flags not given,
/// into `args.sampling` (checked: an error names the field). Without a checkpoint, the
/// flags and the defaults alone.
bool readGenerationConfig(Args &args, int rank, std::string &error);

} // namespace tpcrt

#endif // TPCRT_CORE_CORE_H
