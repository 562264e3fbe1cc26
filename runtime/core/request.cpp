// What an emitted binary is asked to do: its flags, its rank identity (RANK, WORLD_SIZE,
// LOCAL_RANK, or mpirun's OMPI_COMM_WORLD_*) and TPC_FAULT, each checked, and the request checked against the model (the
// context length, the vocabulary) before any peer is waited for.
#include "core.h"

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

/// One flag of the binary: its name, its value's placeholder (none for a switch), what it
/// does, and how its value is read into Args (false, with `error` set, when it is wrong).
/// The table is the parser and --help both, so they cannot disagree.
struct Flag {
  const char *name, *value, *help;
  bool (*set)(Args &args, const char *flag, const char *value, std::string &error);
};

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

const Flag kFlags[] = {
    {"--weights", "PATH", "the checkpoint: a .safetensors file or a directory of them",
     [](Args &a, const char *, const char *v, std::string &) { return a.weights = v, true; }},
    {"--random-weights", "SEED", "seeded random weights instead (tpc init-weights' values)",
     [](Args &a, const char *f, const char *v, std::string &e) {
       return integerInto(f, v, 0, a.randomSeed, e);
     }},
    {"--prompt-ids", "1,2,3", "the prompt as token ids (prints ids back)",
     [](Args &a, const char *f, const char *v, std::string &e) {
       return idsOf(f, v, a.params.prompt, e);
     }},
    {"--prompt", "TEXT", "the prompt as text, through the checkpoint's tokenizer.json",
     [](Args &a, const char *, const char *v, std::string &) { return a.promptText = v, true; }},
    {"--prompt-file", "FILE", "a file holding the prompt text",
     [](Args &a, const char *, const char *v, std::string &) { return a.promptFile = v, true; }},
    {"--chat", nullptr,
     "render the prompt as a user message through the checkpoint's chat template",
     [](Args &a, const char *, const char *, std::string &) { return a.chat = true; }},
    {"--system", "TEXT", "with --chat: a system message first",
     [](Args &a, const char *, const char *v, std::string &) { return a.system = v, true; }},
    {"--max-new-tokens", "N", "the most tokens to generate (default 16)",
     [](Args &a, const char *f, const char *v, std::string &e) {
       return integerOf(f, v, 0, a.params.maxTokens, e);
     }},
    {"--eos-id", "ID", "stop at this id instead of the model's end-of-sequence ids",
     [](Args &a, const char *f, const char *v, std::string &e) {
       return integerInto(f, v, 0, a.eosId, e);
     }},
    {"--ignore-eos", nullptr, "generate --max-new-tokens whatever the model says",
     [](Args &a, const char *, const char *, std::string &) { return a.params.ignoreEos = true; }},
    {"--temperature", "T",
     "sample at this temperature; 0 is greedy (the default, unless generation_config.json "
     "sets do_sample)",
     [](Args &a, const char *f, const char *v, std::string &e) {
       return realOf(f, v, a.temperature, e);
     }},
    {"--top-k", "K", "sample from the K most likely tokens (0 or -1: all)",
     [](Args &a, const char *f, const char *v, std::string &e) {
       return integerInto(f, v, -1, a.topK, e);
     }},
    {"--top-p", "P", "sample from the most likely tokens that make up P of the probability",
     [](Args &a, const char *f, const char *v, std::string &e) {
       return realOf(f, v, a.topP, e);
     }},
    {"--min-p", "P", "drop tokens less likely than P times the most likely one",
     [](Args &a, const char *f, const char *v, std::string &e) {
       return realOf(f, v, a.minP, e);
     }},
    {"--repetition-penalty", "R",
     "divide positive logits (multiply negative ones) of tokens in the prompt or output by R",
     [](Args &a, const char *f, const char *v, std::string &e) {
       return realOf(f, v, a.repetitionPenalty, e);
     }},
    {"--presence-penalty", "X", "subtract X from the logits of tokens in the output",
     [](Args &a, const char *f, const char *v, std::string &e) {
       return realOf(f, v, a.presencePenalty, e);
     }},
    {"--frequency-penalty", "X", "subtract X per occurrence in the output from a token's logit",
     [](Args &a, const char *f, const char *v, std::string &e) {
       return realOf(f, v, a.frequencyPenalty, e);
     }},
    {"--seed", "S", "the sampler's seed: the same seed, the same tokens (default: a random one)",
     [](Args &a, const char *f, const char *v, std::string &e) {
       return integerInto(f, v, 0, a.seed, e);
     }},
    {"--stop", "TEXT",
     "stop when the text contains TEXT, which is not printed (repeatable; text prompts)",
     [](Args &a, const char *, const char *v, std::string &) {
       return a.params.stop.push_back(v), true;
     }},
    {"--stop-token-ids", "1,2", "stop after any of these ids, whatever --ignore-eos says",
     [](Args &a, const char *f, const char *v, std::string &e) {
       return idsOf(f, v, a.params.stopIds, e);
     }},
    {"--max-seq-len", "S",
     "tokens the KV cache holds (default 2048, or the model's max_position_embeddings where "
     "fewer)",
     [](Args &a, const char *f, const char *v, std::string &e) {
       return integerOf(f, v, 1, a.maxSeqLen, e);
     }},
    {"--max-num-seqs", "N",
     "with --requests: run up to N sequences in one step (default 8)",
     [](Args &a, const char *f, const char *v, std::string &e) {
       return integerOf(f, v, 1, a.maxNumSeqs, e);
     }},
    {"--max-batch-tokens", "N",
     "the most tokens one step computes; longer prompts are prefilled in chunks (default "
     "--max-seq-len)",
     [](Args &a, const char *f, const char *v, std::string &e) {
       return integerOf(f, v, 1, a.maxBatchTokens, e);
     }},
    {"--kv-cache-tokens", "N",
     "the KV cache's size in tokens, shared by the sequences; when full, the newest is "
     "preempted and recomputed later (default --max-num-seqs times --max-seq-len)",
     [](Args &a, const char *f, const char *v, std::string &e) {
       return integerOf(f, v, 1, a.kvCacheTokens, e);
     }},
    {"--kv-cache-memory", "BYTES",
     "the KV cache's size in bytes on each rank, instead of --kv-cache-tokens",
     [](Args &a, const char *f, const char *v, std::string &e) {
       return integerOf(f, v, 1, a.kvCacheMemory, e);
     }},
    {"--force-ids", "4,5,6",
     "feed these tokens to the decode steps instead of the model's own (teacher forcing); "
     "the printed tokens stay its own",
     [](Args &a, const char *f, const char *v, std::string &e) {
       return idsOf(f, v, a.params.forced, e);
     }},
    {"--requests", "IN.jsonl",
     "run the requests of IN.jsonl (one JSON object a line: id, prompt or prompt_token_ids, "
     "max_tokens, sampling fields), one after another, instead of one prompt",
     [](Args &a, const char *, const char *v, std::string &) { return a.requestsFile = v, true; }},
    {"--serve", "HOST:PORT",
     "serve the OpenAI HTTP API on HOST:PORT (rank 0; port 0: any free one, printed) instead "
     "of running one prompt",
     [](Args &a, const char *, const char *v, std::string &) { return a.serve = v, true; }},
    {"--served-model-name", "NAME", "with --serve: the model's name in the API (default: "
     "the checkpoint's directory name)",
     [](Args &a, const char *, const char *v, std::string &) {
       return a.servedModelName = v, true;
     }},
    {"--max-queue", "N",
     "with --serve: requests that may wait beyond --max-num-seqs running ones; more are "
     "refused with 503 and Retry-After (default 64)",
     [](Args &a, const char *f, const char *v, std::string &e) {
       return integerOf(f, v, 0, a.maxQueue, e);
     }},
    {"--drain-seconds", "S",
     "with --serve: on SIGTERM, how long requests in flight may finish before they are "
     "aborted (default 30)",
     [](Args &a, const char *f, const char *v, std::string &e) {
       return integerOf(f, v, 0, a.drainSeconds, e);
     }},
    {"--request-metrics", nullptr,
     "with --requests: each line's metrics, the ms from the start to its first token and to "
     "its end",
     [](Args &a, const char *, const char *, std::string &) { return a.requestMetrics = true; }},
    {"--output", "OUT.jsonl", "with --requests: one JSON line per request, as each finishes",
     [](Args &a, const char *, const char *v, std::string &) { return a.outputFile = v, true; }},
    {"--dump-logits", "FILE", "rank 0 writes the last token's logits of every step to FILE",
     [](Args &a, const char *, const char *v, std::string &) { return a.dumpLogits = v, true; }},
    {"--trace", "FILE", "write every collective this rank runs, with its bytes, to FILE",
     [](Args &a, const char *, const char *v, std::string &) { return a.trace = v, true; }},
    {"--host", "ADDRESS", "the address this rank's transport listens on (default 127.0.0.1)",
     [](Args &a, const char *, const char *v, std::string &) { return a.host = v, true; }},
    {"--timeout", "SECONDS",
     "bound the rendezvous and each collective's wait for a peer (default 30)",
     [](Args &a, const char *f, const char *v, std::string &e) {
       return integerInto(f, v, 1, a.timeoutSeconds, e);
     }},
    {"--warmup", nullptr,
     "run a throwaway prefill and two decode steps first, then time 3 prefills (their "
     "median is printed); tokens and logits are the same",
     [](Args &a, const char *, const char *, std::string &) { return a.warmup = true; }},
    {"--verbose", nullptr,
     "rank 0 says how it computes: the matrix kernels and BLAS core the backend chose, and "
     "the types its weights are held in",
     [](Args &a, const char *, const char *, std::string &) { return a.verbose = true; }},
};

const char *kUsageNotes =
    "Give one of --weights and --random-weights, and one of --prompt-ids, --prompt,\n"
    "--prompt-file and --requests (with --output). Text prompts print the generated text as\n"
    "it comes. Generation stops at the model's end-of-sequence ids (config.json's\n"
    "eos_token_id, and generation_config.json's beside --weights) unless --eos-id or\n"
    "--ignore-eos says otherwise, and at --stop strings and --stop-token-ids. Decoding is\n"
    "greedy unless --temperature, or generation_config.json's do_sample, asks for sampling;\n"
    "rank 0 chooses every token and sends it to the other ranks.\n"
    "Rank identity comes from RANK and WORLD_SIZE (set by tpc launch or torchrun); the ranks\n"
    "meet in TPC_RENDEZVOUS_DIR (or one derived from TORCHELASTIC_RUN_ID). Under mpirun they\n"
    "come from OMPI_COMM_WORLD_RANK and OMPI_COMM_WORLD_SIZE, and the ranks meet through MPI\n"
    "(TPC_TRANSPORT=auto|shm|mpi; mpirun ends the job when a rank dies). --timeout bounds\n"
    "both the rendezvous and each collective's wait for a peer; a rank alone has no peer to\n"
    "wait for, and no deadline.\n"
    "TPC_FAULT injects a fault, for tests of failure handling: kill:rank=R:step=S makes rank R\n"
    "SIGKILL itself as step S starts (0 is the prefill, S >= 1 the S-th decode step; --warmup's\n"
    "forwards are not steps); device:rank=R:step=S makes rank R's device fault there (the CUDA\n"
    "target); nostart:rank=R makes rank R exit (status 0) before the rendezvous.\n";

/// The usage, from the flag table.
void printUsage(std::FILE *to, const char *program) {
  std::fprintf(to, "usage: %s [options]\n", program);
  for (const Flag &flag : kFlags) {
    std::string left = std::string(flag.name) + (flag.value ? std::string(" ") + flag.value : "");
    // The help wrapped at 90 columns, under itself.
    std::string help = flag.help, line;
    std::stringstream words(help);
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
    const Flag *flag = std::find_if(std::begin(kFlags), std::end(kFlags),
                                    [&](const Flag &f) { return name == f.name; });
    if (flag == std::end(kFlags)) {
      error = "unknown option " + name;
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
    if (!flag->set(args, flag->name, value, error))
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
  else if (item == "device")
    fault.kind = Fault::Device;
  else if (item == "nostart")
    fault.kind = Fault::NoStart;
  else {
    error = "TPC_FAULT: unknown fault '" + item +
            "'; give kill:rank=R:step=S, device:rank=R:step=S or nostart:rank=R";
    return std::nullopt;
  }
  bool stepped = fault.kind != Fault::NoStart;
  while (std::getline(in, item, ':')) {
    size_t eq = item.find('=');
    std::string key = item.substr(0, eq);
    int64_t value = -1;
    if (eq == std::string::npos || !parseInt(item.c_str() + eq + 1, value) || value < 0 ||
        value > (int64_t(1) << 30) ||
        (key != "rank" && !(key == "step" && stepped))) {
      error = std::string("TPC_FAULT: cannot read '") + item + "' in '" + text + "'";
      return std::nullopt;
    }
    if (key == "rank")
      fault.rank = int(value);
    else
      fault.step = value;
  }
  if (fault.rank < 0 || (stepped && fault.step < 0)) {
    error = std::string("TPC_FAULT: '") + text + "' needs rank=R" + (stepped ? " and step=S" : "");
    return std::nullopt;
  }
  return fault;
}

/// Whether the KV cache and the vocabulary hold what `args` asks for; says why not.
bool fits(const ModelSpec &spec, const Args &args) {
  // --warmup's two decode steps fill the cache up to the prompt + 2.
  int64_t cached = args.warmup && args.params.maxTokens > 0 ? std::max<int64_t>(args.params.maxTokens, 2)
                                                        : args.params.maxTokens;
  int64_t total = int64_t(args.params.prompt.size()) + cached;
  if (total > args.maxSeqLen) {
    std::fprintf(stderr,
                 "error: the request needs %lld tokens (%zu prompt + %lld new%s), more than "
                 "--max-seq-len %lld\n",
                 (long long)total, args.params.prompt.size(), (long long)args.params.maxTokens,
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
           " is more than --max-num-seqs' limit times --max-seq-len";
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
           " holds less than one sequence of --max-seq-len " + std::to_string(args.maxSeqLen);
  return "";
}

std::string sizeKvCache(const ModelSpec &spec, uint64_t elementBytes, Args &args) {
  if (!args.kvCacheMemory)
    return "";
  uint64_t perToken = 0;
  for (size_t i = 0; i < spec.kvWidths.size(); ++i)
    perToken += uint64_t(spec.kvWidths[i] + spec.kvValueWidths[i]) * elementBytes;
  if (perToken == 0) // no attention layer: nothing to hold
    return "";
  int64_t tokens = int64_t(uint64_t(args.kvCacheMemory) / perToken);
  if (tokens < args.maxSeqLen)
    return "--kv-cache-memory " + std::to_string(args.kvCacheMemory) + " holds " +
           std::to_string(tokens) + " tokens at " + std::to_string(perToken) +
           " bytes a token on this rank, less than one sequence of --max-seq-len " +
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
