// What an emitted binary is asked to do: its flags, its rank identity (RANK, WORLD_SIZE,
// LOCAL_RANK, or mpirun's OMPI_COMM_WORLD_*) and TPC_FAULT, each checked, and the request checked against the model (the
// context length, the vocabulary) before any peer is waited for.
#include "driver.h"

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <sstream>

namespace tpcrt {

namespace {

const char *kUsage =
    "usage: %s (--weights PATH | --random-weights SEED)\n"
    "       (--prompt-ids 1,2,3 | --prompt TEXT | --prompt-file FILE) [--chat [--system TEXT]]\n"
    "       [--max-new-tokens N] [--eos-id ID | --ignore-eos] [--max-seq-len S]\n"
    "       [--force-ids 4,5,6] [--dump-logits FILE] [--trace FILE] [--host ADDRESS]\n"
    "       [--timeout SECONDS] [--warmup]\n"
    "--prompt and --prompt-file take text, tokenized with the checkpoint's own tokenizer.json\n"
    "(beside --weights), and print the generated text as it comes; --chat renders the prompt\n"
    "as a user message (after --system's, if given) through the checkpoint's chat template.\n"
    "--max-seq-len defaults to 2048, or to the model's max_position_embeddings where fewer.\n"
    "Generation stops at the model's end-of-sequence ids (config.json's eos_token_id, and\n"
    "generation_config.json's beside --weights) unless\n"
    "--eos-id or --ignore-eos says otherwise. --force-ids feeds these tokens to the decode\n"
    "steps instead of the model's own (teacher forcing); the printed tokens stay its own.\n"
    "Rank identity comes from RANK and WORLD_SIZE (set by tpc launch or torchrun); the ranks\n"
    "meet in TPC_RENDEZVOUS_DIR (or one derived from TORCHELASTIC_RUN_ID). Under mpirun they\n"
    "come from OMPI_COMM_WORLD_RANK and OMPI_COMM_WORLD_SIZE, and the ranks meet through MPI\n"
    "(TPC_TRANSPORT=auto|shm|mpi; mpirun ends the job when a rank dies). --timeout bounds\n"
    "both the rendezvous and each collective's wait for a peer (default 30 s); a rank alone\n"
    "has no peer to wait for, and no deadline.\n"
    "--warmup runs a throwaway prefill of the prompt and two decode steps first (lazy loading,\n"
    "GEMM plans, the decode graph's capture), empties the KV cache, and times 3 prefills:\n"
    "it prints their median and the median decode step. Tokens and logits are the same.\n"
    "TPC_FAULT injects a fault, for tests of failure handling: kill:rank=R:step=S makes rank R\n"
    "SIGKILL itself as step S starts (0 is the prefill, S >= 1 the S-th decode step; --warmup's\n"
    "forwards are not steps); device:rank=R:step=S makes rank R's device fault there (the CUDA\n"
    "target); nostart:rank=R makes rank R exit (status 0) before the rendezvous.\n";

bool parseInt(const char *text, int64_t &value) {
  char *end = nullptr;
  errno = 0;
  long long v = std::strtoll(text, &end, 10);
  if (errno || !end || *end || end == text)
    return false;
  value = v;
  return true;
}

std::optional<Args> parseArgs(int argc, char **argv, std::string &error) {
  Args args;
  for (int i = 1; i < argc; ++i) {
    std::string flag = argv[i];
    if (flag == "--help" || flag == "-h") {
      std::printf(kUsage, argv[0]);
      std::exit(0);
    }
    if (flag == "--ignore-eos") {
      args.ignoreEos = true;
      continue;
    }
    if (flag == "--warmup") {
      args.warmup = true;
      continue;
    }
    if (flag == "--chat") {
      args.chat = true;
      continue;
    }
    if (i + 1 >= argc) {
      error = flag + " needs a value";
      return std::nullopt;
    }
    const char *value = argv[++i];
    int64_t number = 0;
    auto integer = [&](int64_t &into, int64_t min) {
      if (!parseInt(value, number) || number < min) {
        error = flag + " needs an integer of at least " + std::to_string(min) + ", got '" +
                value + "'";
        return false;
      }
      into = number;
      return true;
    };
    if (flag == "--weights") {
      args.weights = value;
    } else if (flag == "--prompt") {
      args.promptText = value;
    } else if (flag == "--prompt-file") {
      args.promptFile = value;
    } else if (flag == "--system") {
      args.system = value;
    } else if (flag == "--random-weights") {
      int64_t seed;
      if (!integer(seed, 0))
        return std::nullopt;
      args.randomSeed = uint64_t(seed);
    } else if (flag == "--prompt-ids" || flag == "--force-ids") {
      std::stringstream in(value);
      std::string item;
      while (std::getline(in, item, ',')) {
        int64_t id;
        if (!parseInt(item.c_str(), id) || id < 0) {
          error = flag + ": '" + item + "' is not a token id";
          return std::nullopt;
        }
        (flag == "--prompt-ids" ? args.prompt : args.forced).push_back(id);
      }
    } else if (flag == "--max-new-tokens") {
      if (!integer(args.maxNewTokens, 0))
        return std::nullopt;
    } else if (flag == "--eos-id") {
      int64_t id;
      if (!integer(id, 0))
        return std::nullopt;
      args.eosId = id;
    } else if (flag == "--max-seq-len") {
      if (!integer(args.maxSeqLen, 1))
        return std::nullopt;
    } else if (flag == "--dump-logits") {
      args.dumpLogits = value;
    } else if (flag == "--trace") {
      args.trace = value;
    } else if (flag == "--host") {
      args.host = value;
    } else if (flag == "--timeout") {
      int64_t t;
      if (!integer(t, 1))
        return std::nullopt;
      args.timeoutSeconds = int(t);
    } else {
      error = "unknown option " + flag;
      return std::nullopt;
    }
  }
  if (args.weights.empty() == !args.randomSeed) {
    error = "give exactly one of --weights PATH and --random-weights SEED";
    return std::nullopt;
  }
  if (int(!args.prompt.empty()) + int(bool(args.promptText)) + int(!args.promptFile.empty()) !=
      1) {
    error = "give exactly one of --prompt-ids, --prompt and --prompt-file";
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
  if (args.eosId && args.ignoreEos) {
    error = "give at most one of --eos-id and --ignore-eos";
    return std::nullopt;
  }
  if (!args.forced.empty() && int64_t(args.forced.size()) + 1 < args.maxNewTokens) {
    error = "--force-ids gives " + std::to_string(args.forced.size()) +
            " tokens; " + std::to_string(args.maxNewTokens) + " new tokens need " +
            std::to_string(args.maxNewTokens - 1);
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
  int64_t cached = args.warmup && args.maxNewTokens > 0 ? std::max<int64_t>(args.maxNewTokens, 2)
                                                        : args.maxNewTokens;
  int64_t total = int64_t(args.prompt.size()) + cached;
  if (total > args.maxSeqLen) {
    std::fprintf(stderr,
                 "error: the request needs %lld tokens (%zu prompt + %lld new%s), more than "
                 "--max-seq-len %lld\n",
                 (long long)total, args.prompt.size(), (long long)args.maxNewTokens,
                 cached > args.maxNewTokens ? ", and --warmup decodes 2" : "",
                 (long long)args.maxSeqLen);
    return false;
  }
  for (const auto &[ids, what] : {std::pair{&args.prompt, "prompt"}, {&args.forced, "forced"}})
    for (int64_t id : *ids)
      if (id >= spec.vocab) {
        std::fprintf(stderr, "error: %s id %lld is outside the vocabulary of %lld\n", what,
                     (long long)id, (long long)spec.vocab);
        return false;
      }
  return true;
}

} // namespace

std::optional<int64_t> chooseMaxSeqLen(std::optional<int64_t> requested, int64_t maxPositions,
                                       std::string &error) {
  if (!requested)
    return defaultMaxSeqLen(maxPositions);
  // Positions past the ones the model was trained on give rotary angles it never saw.
  if (maxPositions > 0 && *requested > maxPositions) {
    error = "--max-seq-len " + std::to_string(*requested) + " is more than the model's " +
            std::to_string(maxPositions) + " positions (config.json's max_position_embeddings)";
    return std::nullopt;
  }
  return requested;
}

std::optional<Request> readRequest(const ModelSpec &spec, int argc, char **argv, int &status) {
  // Usage mistakes exit with 2, a request the model or the launch cannot serve with 1; the
  // order of the checks is the order in which a run with several mistakes reports them.
  std::string error;
  std::optional<Args> parsed = parseArgs(argc, argv, error);
  if (!parsed) {
    std::fprintf(stderr, "error: %s\n", error.c_str());
    std::fprintf(stderr, kUsage, argv[0]);
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
      !tokenizePrompt(args, request.tokenizer, error)) {
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
