// What an emitted binary is asked to do: its flags, its rank identity (RANK, WORLD_SIZE,
// LOCAL_RANK, or mpirun's OMPI_COMM_WORLD_*) and TPC_FAULT, each checked, and the request checked against the model (the
// context length, the vocabulary) before any peer is waited for.
#include "core.h"

#include "tpcrt/flags.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <sstream>

namespace tpcrt {

namespace {

bool parseInt(const char *text, int64_t &value) {
  char *end = nullptr;
  errno = 0;
  long long v = std::strtoll(text, &end, 10);
  if (errno || !end || *end || end == text)
    return false;
  value = v;
  return true;
}

bool integerOf(const char *flag, const char *value, int64_t min, int64_t &into,
               std::string &error) {
  int64_t number = 0;
  if (!parseInt(value, number) || number < min) {
    error = std::string(flag) + " needs an integer of at least " + std::to_string(min) +
            ", got '" + value + "'";
    return false;
  }
  into = number;
  return true;
}

constexpr int64_t kDay = 86400;

/// integerOf with an upper bound too (a deadline of a day, a million connections: what would
/// overflow a clock or a table past them is refused where it is given).
bool integerWithin(const char *flag, const char *value, int64_t min, int64_t max, int64_t &into,
                   std::string &error) {
  int64_t number = 0;
  if (!parseInt(value, number) || number < min || number > max) {
    error = std::string(flag) + " needs an integer from " + std::to_string(min) + " to " +
            std::to_string(max) + ", got '" + value + "'";
    return false;
  }
  into = number;
  return true;
}

/// integerOf into a field of another type (an int, an optional id or seed).
template <typename T>
bool integerInto(const char *flag, const char *value, int64_t min, T &into, std::string &error) {
  int64_t number = 0;
  if (!integerOf(flag, value, min, number, error))
    return false;
  into = T(number);
  return true;
}

bool realOf(const char *flag, const char *value, std::optional<double> &into,
            std::string &error) {
  char *end = nullptr;
  errno = 0;
  double number = std::strtod(value, &end);
  if (errno || !end || *end || end == value || !std::isfinite(number)) {
    error = std::string(flag) + " needs a number, got '" + value + "'";
    return false;
  }
  into = number;
  return true;
}

bool idsOf(const char *flag, const char *value, std::vector<int64_t> &into,
           std::string &error) {
  std::stringstream in(value);
  std::string item;
  while (std::getline(in, item, ',')) {
    int64_t id;
    if (!parseInt(item.c_str(), id) || id < 0) {
      error = std::string(flag) + ": '" + item + "' is not a token id";
      return false;
    }
    into.push_back(id);
  }
  return true;
}

/// API keys, comma-separated: each 1 to 256 printable ASCII characters, no space or comma (a
/// Bearer token's characters).
bool apiKeysOf(const char *from, const char *value, std::vector<std::string> &into,
               std::string &error) {
  std::stringstream in(value);
  std::string key;
  size_t before = into.size();
  while (std::getline(in, key, ',')) {
    bool printable = std::all_of(key.begin(), key.end(), [](char c) { return c > ' ' && c < 127; });
    if (key.empty() || key.size() > 256 || !printable) {
      error = std::string(from) + ": an API key is 1 to 256 printable ASCII characters "
              "without spaces or commas (key " + std::to_string(into.size() - before + 1) +
              " is not)"; // the key itself is a secret: never printed
      return false;
    }
    into.push_back(key);
  }
  if (into.size() == before) {
    error = std::string(from) + " gives no key";
    return false;
  }
  return true;
}

/// Reads `value` of flag `id` into `args`; false, with `error` set, when it is wrong.
bool setFlag(Args &a, FlagId id, const char *f, const char *v, std::string &e) {
  switch (id) {
  case FlagId::Weights:
    return a.weights = v, true;
  case FlagId::RandomWeights:
    return integerInto(f, v, 0, a.randomSeed, e);
  case FlagId::PromptIds:
    return idsOf(f, v, a.params.prompt, e);
  case FlagId::Prompt:
    return a.promptText = v, true;
  case FlagId::PromptFile:
    return a.promptFile = v, true;
  case FlagId::Chat:
    return a.chat = true;
  case FlagId::System:
    return a.system = v, true;
  case FlagId::Requests:
    return a.requestsFile = v, true;
  case FlagId::Output:
    return a.outputFile = v, true;
  case FlagId::RequestMetrics:
    return a.requestMetrics = true;
  case FlagId::MaxNewTokens:
    return integerOf(f, v, 0, a.params.maxTokens, e);
  case FlagId::EosId:
    return integerInto(f, v, 0, a.eosId, e);
  case FlagId::IgnoreEos:
    return a.params.ignoreEos = true;
  case FlagId::Stop:
    return a.params.stop.push_back(v), true;
  case FlagId::StopTokenIds:
    return idsOf(f, v, a.params.stopIds, e);
  case FlagId::Temperature:
    return realOf(f, v, a.temperature, e);
  case FlagId::TopK:
    return integerInto(f, v, -1, a.topK, e);
  case FlagId::TopP:
    return realOf(f, v, a.topP, e);
  case FlagId::MinP:
    return realOf(f, v, a.minP, e);
  case FlagId::RepetitionPenalty:
    return realOf(f, v, a.repetitionPenalty, e);
  case FlagId::PresencePenalty:
    return realOf(f, v, a.presencePenalty, e);
  case FlagId::FrequencyPenalty:
    return realOf(f, v, a.frequencyPenalty, e);
  case FlagId::Seed:
    return integerInto(f, v, 0, a.seed, e);
  case FlagId::MaxModelLen:
    return integerOf(f, v, 1, a.maxSeqLen, e);
  case FlagId::MaxNumSeqs:
    return integerOf(f, v, 1, a.maxNumSeqs, e);
  case FlagId::MaxBatchTokens:
    return integerOf(f, v, 1, a.maxBatchTokens, e);
  case FlagId::KvCacheTokens:
    return integerOf(f, v, 1, a.kvCacheTokens, e);
  case FlagId::KvCacheMemory:
    return integerOf(f, v, 1, a.kvCacheMemory, e);
  case FlagId::KvCacheDtype:
    if (std::string(v) != "f32" && std::string(v) != "bf16" && std::string(v) != "f16" &&
        std::string(v) != "q8_0") {
      e = std::string(f) + " " + v + " is not a KV cache type: f32, bf16, f16 or q8_0";
      return false;
    }
    return a.kvCacheType = parseDType(v), true;
  case FlagId::Serve:
    return a.serve = v, true;
  case FlagId::ServedModelName:
    return a.servedModelName = v, true;
  case FlagId::MaxQueue:
    return integerOf(f, v, 0, a.maxQueue, e);
  case FlagId::DrainSeconds:
    return integerOf(f, v, 0, a.drainSeconds, e);
  case FlagId::ApiKey:
    return apiKeysOf(f, v, a.apiKeys, e);
  case FlagId::MetricsPublic:
    return a.metricsPublic = true;
  case FlagId::Int8Activations:
    return a.int8Activations = true;
  case FlagId::NoPrefixCaching:
    return !(a.prefixCaching = false);
  case FlagId::MaxConnections:
    return integerWithin(f, v, 1, int64_t(1) << 20, a.maxConnections, e);
  case FlagId::HeaderTimeout:
    return integerWithin(f, v, 1, kDay, a.headerTimeout, e);
  case FlagId::BodyTimeout:
    return integerWithin(f, v, 1, kDay, a.bodyTimeout, e);
  case FlagId::KeepAliveTimeout:
    return integerWithin(f, v, 1, kDay, a.keepAliveTimeout, e);
  case FlagId::WriteTimeout:
    return integerWithin(f, v, 1, kDay, a.writeTimeout, e);
  case FlagId::ForceIds:
    return idsOf(f, v, a.params.forced, e);
  case FlagId::DumpLogits:
    return a.dumpLogits = v, true;
  case FlagId::Trace:
    return a.trace = v, true;
  case FlagId::Host:
    return a.host = v, true;
  case FlagId::Timeout:
    return integerInto(f, v, 1, a.timeoutSeconds, e);
  case FlagId::Warmup:
    return a.warmup = true;
  case FlagId::Verbose:
    return a.verbose = true;
  }
  e = std::string("no setter for ") + f; // unreachable while the switch covers the table
  return false;
}

/// Flags that were renamed, so that an old command line says what to write instead.
const std::pair<const char *, const char *> kRenamedFlags[] = {
    {"--max-seq-len", "--max-model-len"},
};

const char *kUsageNotes =
    "Give one of --weights and --random-weights, and one of --prompt-ids, --prompt,\n"
    "--prompt-file, --requests (with --output) and --serve (with which --served-model-name,\n"
    "--max-queue and --drain-seconds go). Text prompts print the generated text as\n"
    "it comes. Generation stops at the model's end-of-sequence ids (config.json's\n"
    "eos_token_id, and generation_config.json's beside --weights) unless --eos-id or\n"
    "--ignore-eos says otherwise, and at --stop strings and --stop-token-ids. Decoding is\n"
    "greedy unless --temperature, or generation_config.json's do_sample, asks for sampling;\n"
    "rank 0 chooses every token and sends it to the other ranks.\n"
    "Rank identity comes from RANK and WORLD_SIZE (set by tpc launch or torchrun); the ranks\n"
    "meet at rank 0's store on MASTER_ADDR (MASTER_PORT, the next port under torchrun's agent,\n"
    "a local socket under its agent on one node, or TPC_STORE_PORT), on one machine or\n"
    "several, else in TPC_RENDEZVOUS_DIR (or one derived from TORCHELASTIC_RUN_ID);\n"
    "GROUP_RANK names the node. Under mpirun they\n"
    "come from OMPI_COMM_WORLD_RANK and OMPI_COMM_WORLD_SIZE, and the ranks meet through MPI\n"
    "(TPC_TRANSPORT=auto|shm|mpi; mpirun ends the job when a rank dies). --timeout bounds\n"
    "both the rendezvous and each collective's wait for a peer; a rank alone has no peer to\n"
    "wait for, and no deadline.\n"
    "TPC_FAULT injects a fault, for tests of failure handling: kill:rank=R:step=S makes rank R\n"
    "SIGKILL itself as step S starts (0 is the prefill, S >= 1 the S-th decode step; --warmup's\n"
    "forwards are not steps); stop:rank=R:step=S makes it SIGSTOP itself there (a stalled\n"
    "host); device:rank=R:step=S makes rank R's device fault there (the CUDA target);\n"
    "nan:rank=R:step=S makes rank R's share of step S's logits NaN before they are gathered\n"
    "(the CPU target at tp > 1); nostart:rank=R makes rank R exit (status 0) before the\n"
    "rendezvous; slow:rank=0:seconds=S makes rank 0 take S seconds longer over what it reads\n"
    "alone before the first step (tokenizer, chat template, --requests), as from a slow disk;\n"
    "perturb:rank=R makes rank R's attention run with its softmax scale 1/32 too large from\n"
    "the first step on (a subtly wrong kernel: the GPU check's negative control).\n";

/// The usage, from the flag table.
void printUsage(std::FILE *to, const char *program) {
  std::fprintf(to, "usage: %s [options]\n", program);
  for (const FlagInfo &flag : kFlagTable) {
    std::string left = std::string(flag.name) + (flag.value ? std::string(" ") + flag.value : "");
    // The help wrapped at 90 columns, under itself.
    std::string line;
    std::stringstream words(flag.described());
    for (std::string word; words >> word;) {
      if (!line.empty() && line.size() + 1 + word.size() > 63) {
        std::fprintf(to, "  %-24s %s\n", left.c_str(), line.c_str());
        left.clear();
        line.clear();
      }
      line += (line.empty() ? "" : " ") + word;
    }
    std::fprintf(to, "  %-24s %s\n", left.c_str(), line.c_str());
  }
  std::fprintf(to, "  %-24s %s\n", "-h, --help", "print this and exit");
  std::fputs(kUsageNotes, to);
}

std::optional<Args> parseArgs(int argc, char **argv, std::string &error) {
  Args args;
  for (int i = 1; i < argc; ++i) {
    std::string name = argv[i];
    if (name == "--help" || name == "-h") {
      printUsage(stdout, argv[0]);
      std::exit(0);
    }
    const FlagInfo *flag = std::find_if(std::begin(kFlagTable), std::end(kFlagTable),
                                        [&](const FlagInfo &f) { return name == f.name; });
    if (flag == std::end(kFlagTable)) {
      error = "unknown option " + name;
      for (auto [old, now] : kRenamedFlags)
        if (name == old)
          error = name + " is now " + now;
      return std::nullopt;
    }
    const char *value = nullptr;
    if (flag->value) {
      if (i + 1 >= argc) {
        error = name + " needs a value";
        return std::nullopt;
      }
      value = argv[++i];
    }
    if (!setFlag(args, flag->id, flag->name, value, error))
      return std::nullopt;
  }
  if (args.weights.empty() == !args.randomSeed) {
    error = "give exactly one of --weights PATH and --random-weights SEED";
    return std::nullopt;
  }
  bool requests = !args.requestsFile.empty(), serving = !args.serve.empty();
  if (int(!args.params.prompt.empty()) + int(bool(args.promptText)) + int(!args.promptFile.empty()) +
          int(requests) + int(serving) !=
      1) {
    error = "give exactly one of --prompt-ids, --prompt, --prompt-file, --requests and --serve";
    return std::nullopt;
  }
  if (requests != !args.outputFile.empty()) {
    error = requests ? "--requests needs --output OUT.jsonl, where each request's result goes"
                     : "--output is where --requests' results go; give --requests too";
    return std::nullopt;
  }
  if (requests || serving)
    for (auto [flag, given] :
         {std::pair{"--chat", args.chat}, {"--force-ids", !args.params.forced.empty()},
          {"--dump-logits", !args.dumpLogits.empty()}, {"--warmup", args.warmup}})
      if (given) {
        error = std::string(flag) + " is for one prompt, not " +
                (requests ? "--requests" : "--serve");
        return std::nullopt;
      }
  if ((!args.apiKeys.empty() || args.metricsPublic) && !serving) {
    error = "--api-key and --metrics-public are --serve's";
    return std::nullopt;
  }
  // The environment's keys count where there is a server to guard (an exported TPC_API_KEY
  // does not stop a run of one prompt).
  if (const char *keys = std::getenv("TPC_API_KEY"); serving && keys && *keys &&
      !apiKeysOf("TPC_API_KEY", keys, args.apiKeys, error))
    return std::nullopt;
  if (args.metricsPublic && args.apiKeys.empty()) {
    error = "--metrics-public opens /metrics where --api-key closes it: give a key too";
    return std::nullopt;
  }
  if (args.chat && !args.promptText && args.promptFile.empty()) {
    error = "--chat renders a text prompt through the chat template: give --prompt or "
            "--prompt-file, not --prompt-ids";
    return std::nullopt;
  }
  if (!args.system.empty() && !args.chat) {
    error = "--system is the system message of a --chat conversation";
    return std::nullopt;
  }
  if (args.kvCacheMemory && args.kvCacheTokens) {
    error = "give at most one of --kv-cache-tokens and --kv-cache-memory";
    return std::nullopt;
  }
  if (args.eosId && args.params.ignoreEos) {
    error = "give at most one of --eos-id and --ignore-eos";
    return std::nullopt;
  }
  if (!args.params.stop.empty() && !args.promptText && args.promptFile.empty() && !requests &&
      !serving) {
    error = "--stop matches the generated text: give a text prompt (--prompt or "
            "--prompt-file), or stop on ids with --stop-token-ids";
    return std::nullopt;
  }
  if (std::string why = checkStopStrings(args.params.stop); !why.empty()) {
    error = "--stop: " + why;
    return std::nullopt;
  }
  if (!args.params.forced.empty() && int64_t(args.params.forced.size()) + 1 < args.params.maxTokens) {
    error = "--force-ids gives " + std::to_string(args.params.forced.size()) +
            " tokens; " + std::to_string(args.params.maxTokens) + " new tokens need " +
            std::to_string(args.params.maxTokens - 1);
    return std::nullopt;
  }
  return args;
}

int envInt(const char *name, int fallback, bool &ok) {
  const char *text = std::getenv(name);
  if (!text || !*text)
    return fallback;
  int64_t v;
  if (!parseInt(text, v) || v < 0) {
    ok = false;
    return fallback;
  }
  return int(v);
}

std::optional<Fault> parseFault(const char *text, std::string &error) {
  Fault fault;
  if (!text || !*text)
    return fault;
  std::stringstream in(text);
  std::string item;
  std::getline(in, item, ':');
  if (item == "kill")
    fault.kind = Fault::Kill;
  else if (item == "stop")
    fault.kind = Fault::Stop;
  else if (item == "device")
    fault.kind = Fault::Device;
  else if (item == "nan")
    fault.kind = Fault::Nan;
  else if (item == "nostart")
    fault.kind = Fault::NoStart;
  else if (item == "slow")
    fault.kind = Fault::Slow;
  else if (item == "perturb")
    fault.kind = Fault::Perturb;
  else {
    error = "TPC_FAULT: unknown fault '" + item +
            "'; give kill:rank=R:step=S, stop:rank=R:step=S, device:rank=R:step=S, "
            "nan:rank=R:step=S, nostart:rank=R, slow:rank=0:seconds=S or perturb:rank=R";
    return std::nullopt;
  }
  bool stepped = fault.kind != Fault::NoStart && fault.kind != Fault::Slow &&
                 fault.kind != Fault::Perturb;
  bool slow = fault.kind == Fault::Slow;
  while (std::getline(in, item, ':')) {
    size_t eq = item.find('=');
    std::string key = item.substr(0, eq);
    int64_t value = -1;
    if (eq == std::string::npos || !parseInt(item.c_str() + eq + 1, value) || value < 0 ||
        value > (int64_t(1) << 30) ||
        (key != "rank" && !(key == "step" && stepped) && !(key == "seconds" && slow))) {
      error = std::string("TPC_FAULT: cannot read '") + item + "' in '" + text + "'";
      return std::nullopt;
    }
    if (key == "rank")
      fault.rank = int(value);
    else if (key == "seconds")
      fault.seconds = value;
    else
      fault.step = value;
  }
  if (slow) { // what rank 0 alone reads
    if (fault.rank != 0 || fault.seconds < 0 || fault.seconds > 3600) {
      error = std::string("TPC_FAULT: '") + text + "' needs rank=0 and seconds=S (at most 3600)";
      return std::nullopt;
    }
    return fault;
  }
  if (fault.rank < 0 || (stepped && fault.step < 0)) {
    error = std::string("TPC_FAULT: '") + text + "' needs rank=R" + (stepped ? " and step=S" : "");
    return std::nullopt;
  }
  if (fault.kind == Fault::Perturb)
    fault.step = 0; // from the first step on
  return fault;
}

/// Whether the KV cache and the vocabulary hold what `args` asks for; says why not.
bool fits(const ModelSpec &spec, const Args &args) {
  // --warmup's two decode steps fill the cache up to the prompt + 2.
  int64_t cached = args.warmup && args.params.maxTokens > 0 ? std::max<int64_t>(args.params.maxTokens, 2)
                                                        : args.params.maxTokens;
  int64_t prompt = int64_t(args.params.prompt.size());
  if (!fitsContext(prompt, cached, args.maxSeqLen)) {
    std::fprintf(stderr,
                 "error: the request needs %llu tokens (%zu prompt + %lld new%s), more than "
                 "--max-model-len %lld\n",
                 (unsigned long long)tokensNeeded(prompt, cached), args.params.prompt.size(),
                 (long long)args.params.maxTokens,
                 cached > args.params.maxTokens ? ", and --warmup decodes 2" : "",
                 (long long)args.maxSeqLen);
    return false;
  }
  for (const auto &[ids, what] : {std::pair{&args.params.prompt, "prompt"}, {&args.params.forced, "forced"}})
    for (int64_t id : *ids)
      if (id >= spec.vocab) {
        std::fprintf(stderr, "error: %s id %lld is outside the vocabulary of %lld\n", what,
                     (long long)id, (long long)spec.vocab);
        return false;
      }
  return true;
}

} // namespace

std::string engineDefaults(Args &args) {
  constexpr int64_t kMaxSequences = 1024; // a step descriptor's size grows with it
  if (args.maxNumSeqs > kMaxSequences)
    return "--max-num-seqs " + std::to_string(args.maxNumSeqs) + " is more than " +
           std::to_string(kMaxSequences);
  int64_t mostTokens = args.maxSeqLen > INT64_MAX / kMaxSequences ? INT64_MAX
                                                                   : args.maxSeqLen * kMaxSequences;
  if (args.maxBatchTokens > mostTokens)
    return "--max-batch-tokens " + std::to_string(args.maxBatchTokens) +
           " is more than --max-num-seqs' limit times --max-model-len";
  if (!args.maxNumSeqs)
    args.maxNumSeqs = args.requestsFile.empty() && args.serve.empty() ? 1 : 8;
  if (!args.maxBatchTokens)
    args.maxBatchTokens = args.maxSeqLen;
  if (!args.kvCacheTokens) // the product saturates: a size that large fails to allocate
    args.kvCacheTokens = args.maxSeqLen > INT64_MAX / args.maxNumSeqs
                             ? INT64_MAX
                             : args.maxNumSeqs * args.maxSeqLen;
  if (args.kvCacheTokens < args.maxSeqLen)
    return "--kv-cache-tokens " + std::to_string(args.kvCacheTokens) +
           " holds less than one sequence of --max-model-len " + std::to_string(args.maxSeqLen);
  return "";
}

EngineLimits engineLimits(const ModelSpec &spec, const Args &args) {
  EngineLimits limits{args.maxNumSeqs, args.maxBatchTokens, kvBlocks(spec, args),
                      spec.kvBlockSize,  args.maxSeqLen,      args.prefixCaching};
  std::vector<KvReach> reaches = spec.kvReaches;
  reaches.resize(spec.kvWidths.size());
  limits.groups = kvGroups(reaches, args.maxSeqLen, true);
  if (limits.groups.windowed()) {
    std::vector<double> bytes; // a token's elements: one element type for every layer
    for (size_t i = 0; i < spec.kvWidths.size(); ++i)
      bytes.push_back(double(spec.kvWidths[i] + spec.kvValueWidths[i]));
    std::vector<int64_t> pools =
        kvPoolBlocks(limits.groups, bytes, spec.kvStages, args.kvCacheTokens, spec.kvBlockSize,
                     args.maxSeqLen, args.maxNumSeqs);
    limits.blocks = pools[0];
    limits.windowBlocks.assign(pools.begin() + 1, pools.end());
  }
  return limits;
}

std::string sizeKvCache(const ModelSpec &spec, DType type, Args &args) {
  if (!args.kvCacheMemory)
    return "";
  // The stage that holds the most a token: every rank holds as many blocks, since rank 0's
  // scheduler hands out the same block tables to every stage.
  std::vector<uint64_t> perStage(size_t(std::max<int64_t>(spec.stages, 1)), 0);
  for (size_t i = 0; i < spec.kvWidths.size(); ++i)
    perStage[i < spec.kvStages.size() ? size_t(spec.kvStages[i]) : 0] +=
        dtypeBytesFor(type, spec.kvWidths[i]) + dtypeBytesFor(type, spec.kvValueWidths[i]);
  uint64_t perToken = *std::max_element(perStage.begin(), perStage.end());
  if (perToken == 0) // no attention layer: nothing to hold
    return "";
  int64_t tokens = int64_t(uint64_t(args.kvCacheMemory) / perToken);
  if (tokens < args.maxSeqLen)
    return "--kv-cache-memory " + std::to_string(args.kvCacheMemory) + " holds " +
           std::to_string(tokens) + " tokens at " + std::to_string(perToken) +
           " bytes a token on this rank, less than one sequence of --max-model-len " +
           std::to_string(args.maxSeqLen);
  args.kvCacheTokens = tokens;
  return "";
}

std::optional<Request> readRequest(const ModelSpec &spec, int argc, char **argv, int &status) {
  // Usage mistakes exit with 2, a request the model or the launch cannot serve with 1; the
  // order of the checks is the order in which a run with several mistakes reports them.
  std::string error;
  std::optional<Args> parsed = parseArgs(argc, argv, error);
  if (!parsed) {
    std::fprintf(stderr, "error: %s\n", error.c_str());
    printUsage(stderr, argv[0]);
    status = 2;
    return std::nullopt;
  }
  Request request;
  Args &args = request.args = std::move(*parsed);
  std::optional<int64_t> maxSeqLen = chooseMaxSeqLen(
      args.maxSeqLen ? std::optional<int64_t>(args.maxSeqLen) : std::nullopt,
      spec.maxPositions, error);
  if (!maxSeqLen) {
    std::fprintf(stderr, "error: %s\n", error.c_str());
    status = 1;
    return std::nullopt;
  }
  args.maxSeqLen = *maxSeqLen;
  if (std::string why = engineDefaults(args); !why.empty()) {
    std::fprintf(stderr, "error: %s\n", why.c_str());
    status = 2;
    return std::nullopt;
  }
  // Under mpirun the rank and world are mpirun's (tpc launch and torchrun set RANK).
  bool mpirun = startedByMpirun(), envOk = true;
  const char *rankVar = mpirun ? "OMPI_COMM_WORLD_RANK" : "RANK";
  const char *worldVar = mpirun ? "OMPI_COMM_WORLD_SIZE" : "WORLD_SIZE";
  request.rank = envInt(rankVar, 0, envOk);
  request.world = envInt(worldVar, 1, envOk);
  request.worldFrom = mpirun ? "mpirun's world size (OMPI_COMM_WORLD_SIZE)" : "WORLD_SIZE";
  if (!envOk || request.rank >= request.world) {
    std::fprintf(stderr, "error: %s and %s must be integers with %s < %s\n", rankVar, worldVar,
                 rankVar, worldVar);
    status = 1;
    return std::nullopt;
  }
  bool localOk = true; // a LOCAL_RANK that is no number is the rank, as if not set
  request.localRank = envInt(mpirun ? "OMPI_COMM_WORLD_LOCAL_RANK" : "LOCAL_RANK", request.rank,
                             localOk);
  std::optional<Fault> fault = parseFault(std::getenv("TPC_FAULT"), error);
  if (!fault) {
    std::fprintf(stderr, "error: %s\n", error.c_str());
    status = 2;
    return std::nullopt;
  }
  request.fault = *fault;
  if ((args.promptText || !args.promptFile.empty()) &&
      !tokenizePrompt(args, spec.vocab, request.tokenizer, error)) {
    std::fprintf(stderr, "error: %s\n", error.c_str());
    status = 1;
    return std::nullopt;
  }
  if (!readGenerationConfig(args, request.rank, error)) {
    std::fprintf(stderr, "error: %s\n", error.c_str());
    status = 1;
    return std::nullopt;
  }
  if (!fits(spec, args)) {
    status = 1;
    return std::nullopt;
  }
  return request;
}

} // namespace tpcrt
