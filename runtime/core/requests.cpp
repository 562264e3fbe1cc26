// --requests IN.jsonl --output OUT.jsonl: many requests at once through the engine (engine.h).
// Rank 0 alone reads the file (untrusted: each line parsed and checked, a bad request refused
// with an error that names it and its field, the others run), tokenizes, and writes each
// request's result as it finishes; the engine's step descriptors carry the tokens to the
// other ranks, which read nothing of their own.
#include "core.h"
#include "../engine/engine.h"

#include "tpcrt/failure.h"
#include "tpcrt/file.h"
#include "tpcrt/gguf.h"
#include "tpcrt/json.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <set>
#include <sys/stat.h>

namespace tpcrt {

namespace {

/// Bounds on what a requests file may make rank 0 hold.
constexpr uint64_t kMaxRequestsFileBytes = uint64_t(256) << 20;
constexpr size_t kMaxRequests = 1 << 20;
constexpr int kMaxRequestJsonDepth = 8;

/// Fields a request may give that change nothing tpc computes.
const std::set<std::string> kHarmless = {"model", "user", "metadata"};

/// The OpenAI/vLLM fields tpc does not implement yet, which would change the result: refused
/// by name rather than ignored.
const std::set<std::string> kNotImplemented = {
    "n", "best_of", "bad_words",
    "allowed_token_ids", "include_stop_str_in_output", "skip_special_tokens",
    "spaces_between_special_tokens", "truncate_prompt_tokens", "guided_json", "guided_regex",
    "guided_choice", "guided_grammar", "response_format", "tools", "tool_choice",
    "use_beam_search", "length_penalty", "messages", "echo", "suffix", "stream"};

} // namespace

std::string readLogprobCount(const std::string &field, const nlohmann::json &value, int &count) {
  int64_t n = -1;
  if (!jsonNumber(value, n).empty() || n < 0 || n > kMaxLogprobs)
    return "field '" + field + "' must be an integer from 0 to " + std::to_string(kMaxLogprobs) +
           ", not " + value.dump();
  count = int(n);
  return "";
}

std::string checkAgainstModel(const RequestParams &params, int64_t vocab) {
  for (const auto &[id, bias] : params.sampling.logitBias)
    if (id >= vocab)
      return "field 'logit_bias': " + std::to_string(id) +
             " is not a token id of the vocabulary of " + std::to_string(vocab);
  for (int64_t id : params.stopIds) // (so that a request holds at most the vocabulary's)
    if (id >= vocab)
      return "field 'stop_token_ids': " + std::to_string(id) +
             " is not a token id of the vocabulary of " + std::to_string(vocab);
  if (params.maxTokens == 0 && params.promptLogprobs < 0 && !params.echo)
    return "field 'max_tokens' 0 generates nothing: it is for scoring a prompt (with "
           "'prompt_logprobs', or 'echo' on /v1/completions)";
  if (params.sampling.minTokens > params.maxTokens)
    return "field 'min_tokens' must be at most max_tokens (" + std::to_string(params.maxTokens) +
           "), got " + std::to_string(params.sampling.minTokens);
  return "";
}

std::optional<std::string> readSamplingField(const std::string &key, const nlohmann::json &value,
                                             RequestParams &params) {
  std::string why;
  if (key == "max_tokens") {
    why = jsonNumber(value, params.maxTokens);
    if (why.empty() && params.maxTokens < 0) // 0: a prompt scored (checkAgainstModel)
      why = "must be at least 0, got " + value.dump();
  } else if (key == "temperature") {
    why = jsonNumber(value, params.sampling.temperature);
  } else if (key == "top_k") {
    why = jsonNumber(value, params.sampling.topK);
  } else if (key == "top_p") {
    why = jsonNumber(value, params.sampling.topP);
  } else if (key == "min_p") {
    why = jsonNumber(value, params.sampling.minP);
  } else if (key == "repetition_penalty") {
    why = jsonNumber(value, params.sampling.repetitionPenalty);
  } else if (key == "presence_penalty") {
    why = jsonNumber(value, params.sampling.presencePenalty);
  } else if (key == "frequency_penalty") {
    why = jsonNumber(value, params.sampling.frequencyPenalty);
  } else if (key == "seed") {
    int64_t seed = 0;
    why = jsonNumber(value, seed);
    if (why.empty() && seed < 0)
      why = "must be at least 0, got " + value.dump();
    params.sampling.seed = uint64_t(seed);
  } else if (key == "min_tokens") {
    why = jsonNumber(value, params.sampling.minTokens);
  } else if (key == "logit_bias") {
    // OpenAI's shape: {"token id": bias}, the ids as decimal strings.
    params.sampling.logitBias.clear();
    if (!value.is_object())
      return "field 'logit_bias' must be an object of token ids to biases, not " + value.dump();
    for (const auto &[id, bias] : value.items()) {
      bool digits = !id.empty() && id.size() <= 18 &&
                    std::all_of(id.begin(), id.end(), [](char c) { return c >= '0' && c <= '9'; });
      double amount = 0;
      if (!digits)
        return "field 'logit_bias': \"" + id + "\" is not a token id";
      if (!jsonNumber(bias, amount).empty())
        return "field 'logit_bias': the bias of token " + id + " must be a number, not " +
               bias.dump();
      params.sampling.logitBias.emplace_back(std::stoll(id), amount);
    }
    // One bias a token: "1" and "01" name one token, whose biases would otherwise add up
    // past the range.
    auto &biases = params.sampling.logitBias;
    std::sort(biases.begin(), biases.end());
    for (size_t i = 1; i < biases.size(); ++i)
      if (biases[i].first == biases[i - 1].first)
        return "field 'logit_bias': token " + std::to_string(biases[i].first) +
               " is given more than once";
  } else if (key == "cache_salt") {
    if (!value.is_string() || value.get<std::string>().empty() ||
        value.get<std::string>().size() > kMaxCacheSaltBytes)
      return "field 'cache_salt' must be a non-empty string of at most " +
             std::to_string(kMaxCacheSaltBytes) + " bytes, not " +
             (value.is_string() ? "a string of " +
                                      std::to_string(value.get<std::string>().size()) + " bytes"
                                : value.dump());
    params.cacheSalt = value.get<std::string>();
  } else if (key == "ignore_eos") {
    if (!value.is_boolean())
      return "field 'ignore_eos' must be true or false, not " + value.dump();
    params.ignoreEos = value.get<bool>();
  } else if (key == "stop") {
    params.stop.clear();
    for (const nlohmann::json &s : value.is_array() ? value : nlohmann::json::array({value})) {
      if (!s.is_string())
        return "field 'stop' must be a string or a list of strings, not " + value.dump();
      params.stop.push_back(s.get<std::string>());
    }
    if (std::string bad = checkStopStrings(params.stop); !bad.empty())
      return "field 'stop': " + bad;
  } else if (key == "stop_token_ids") {
    params.stopIds.clear();
    if (!value.is_array())
      return "field 'stop_token_ids' must be a list of token ids, not " + value.dump();
    for (const nlohmann::json &id : value) {
      int64_t token = -1;
      if (!jsonNumber(id, token).empty() || token < 0)
        return "field 'stop_token_ids': " + id.dump() + " is not a token id";
      params.stopIds.push_back(token);
    }
    // Each once: the engine looks a token up among them every step.
    std::sort(params.stopIds.begin(), params.stopIds.end());
    params.stopIds.erase(std::unique(params.stopIds.begin(), params.stopIds.end()),
                         params.stopIds.end());
  } else {
    return std::nullopt;
  }
  return why.empty() ? "" : "field '" + key + "' " + why;
}

namespace {

/// Reads one request object into `job.params` (which holds the command's values), its context
/// at most `maxSeqLen`; "" or what is wrong, naming the field.
std::string readJob(const nlohmann::json &request, const ModelSpec &spec, int64_t maxSeqLen,
                    const Tokenizer *tokenizer, const std::string &tokenizerError,
                    BatchRequest &job) {
  RequestParams &params = job.params;
  params.prompt.clear();
  bool hasPrompt = false, hasIds = false;
  for (const auto &[key, value] : request.items()) {
    std::string why;
    if (key == "id") {
      continue;
    } else if (key == "prompt") {
      if (!value.is_string())
        return "field 'prompt' must be a string, not " + value.dump();
      hasPrompt = true;
    } else if (key == "prompt_token_ids") {
      if (!value.is_array() || value.empty())
        return "field 'prompt_token_ids' must be a non-empty list of token ids";
      for (const nlohmann::json &id : value) {
        int64_t token = -1;
        if (!jsonNumber(id, token).empty() || token < 0 || token >= spec.vocab)
          return "field 'prompt_token_ids': " + id.dump() +
                 " is not a token id of the vocabulary of " + std::to_string(spec.vocab);
        params.prompt.push_back(token);
      }
      hasIds = true;
    } else if (key == "logprobs") {
      params.logprobs = -1;
      if (std::string bad = value.is_null() ? "" : readLogprobCount(key, value, params.logprobs);
          !bad.empty())
        return bad;
    } else if (key == "prompt_logprobs") {
      params.promptLogprobs = -1;
      if (std::string bad = value.is_null() ? "" : readLogprobCount(key, value, params.promptLogprobs);
          !bad.empty())
        return bad;
    } else if (std::optional<std::string> bad = readSamplingField(key, value, params)) {
      if (!bad->empty())
        return *bad;
    } else if (kNotImplemented.count(key)) {
      return "field '" + key + "' is not implemented by tpc (it would change the result)";
    } else if (!kHarmless.count(key)) {
      return "unknown field '" + key + "'";
    }
    if (!why.empty())
      return "field '" + key + "' " + why;
  }
  if (hasPrompt == hasIds)
    return "give exactly one of the fields 'prompt' and 'prompt_token_ids'";
  if (std::string why = params.sampling.validate(); !why.empty()) // "top_p must be ..."
    return "field '" + why.substr(0, why.find(' ')) + "'" + why.substr(why.find(' '));
  if ((hasPrompt || !params.stop.empty()) && !tokenizer)
    return std::string(hasPrompt ? "field 'prompt'" : "field 'stop'") +
           " needs the checkpoint's tokenizer: " + tokenizerError;
  if (hasPrompt) {
    std::string error;
    std::optional<std::vector<int64_t>> ids =
        tokenizer->encode(request["prompt"].get<std::string>(), /*addSpecial=*/true, error);
    if (!ids)
      return "field 'prompt': " + error;
    if (ids->empty())
      return "field 'prompt' is no tokens at all";
    params.prompt = std::move(*ids);
    job.textPrompt = true;
  }
  int64_t promptTokens = int64_t(params.prompt.size());
  if (!fitsContext(promptTokens, params.maxTokens, maxSeqLen))
    return "the prompt's " + std::to_string(promptTokens) + " tokens and max_tokens " +
           std::to_string(params.maxTokens) + " need " +
           std::to_string(tokensNeeded(promptTokens, params.maxTokens)) +
           " tokens of context, more than --max-model-len " + std::to_string(maxSeqLen);
  return checkAgainstModel(params, spec.vocab);
}

/// Every request of the file, each checked; false with `error` when the file itself cannot be
/// read (missing, too large, too many lines).
bool readJobs(const Args &command, const ModelSpec &spec, const Tokenizer *tokenizer,
              const std::string &tokenizerError, std::vector<BatchRequest> &jobs,
              std::string &error) {
  const std::string &path = command.requestsFile;
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) {
    error = "--requests " + path + " is not a file that can be read";
    return false;
  }
  if (uint64_t(st.st_size) > kMaxRequestsFileBytes) {
    error = "--requests " + path + " has " + std::to_string(st.st_size) +
            " bytes, more than the limit of " + std::to_string(kMaxRequestsFileBytes);
    return false;
  }
  std::string text;
  if (!readFile(path, text)) {
    error = "cannot read --requests " + path;
    return false;
  }
  if (!readRequestsText(text, command, spec, tokenizer, tokenizerError, jobs)) {
    error = "--requests " + path + " holds more than " + std::to_string(kMaxRequests) +
            " requests";
    return false;
  }
  return true;
}

/// Tokens' log-probabilities as --output gives them: [{"token_id", "logprob", "top_logprobs":
/// [{"token_id", "logprob"}, ...]}, ...], after a null for a prompt's first token.
nlohmann::ordered_json logprobsJson(const std::vector<TokenLogprobs> &tokens, bool prompt) {
  nlohmann::ordered_json all = nlohmann::ordered_json::array();
  if (prompt)
    all.push_back(nullptr);
  for (const TokenLogprobs &t : tokens) {
    nlohmann::ordered_json top = nlohmann::ordered_json::array();
    for (const auto &[id, logprob] : t.top)
      top.push_back({{"token_id", id}, {"logprob", logprob}});
    all.push_back({{"token_id", t.token}, {"logprob", t.logprob}, {"top_logprobs", top}});
  }
  return all;
}

/// One line of --output. Text is valid UTF-8 as the tokenizer's stream writes it; should a
/// string not be, its bad bytes become U+FFFD rather than stopping the run.
void writeLine(std::ofstream &out, const nlohmann::ordered_json &line) {
  out << line.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace) << "\n"
      << std::flush;
}

} // namespace

bool readRequestsText(const std::string &text, const Args &command, const ModelSpec &spec,
                      const Tokenizer *tokenizer, const std::string &tokenizerError,
                      std::vector<BatchRequest> &jobs) {
  std::map<std::string, size_t> seen; // id -> line
  size_t start = 0, line = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos)
      end = text.size();
    std::string row = text.substr(start, end - start);
    start = end + 1;
    ++line;
    if (row.find_first_not_of(" \t\r") == std::string::npos)
      continue; // blank lines separate nothing
    if (jobs.size() == kMaxRequests)
      return false;
    BatchRequest &job = jobs.emplace_back();
    job.line = line;
    job.params = command.params;
    nlohmann::json request;
    try {
      request = parseUntrustedJson(row, kMaxRequestJsonDepth);
    } catch (const std::exception &e) {
      job.error = std::string("not JSON: ") + e.what();
      continue;
    }
    if (!request.is_object()) {
      job.error = "not a JSON object";
      continue;
    }
    auto id = request.find("id");
    if (id == request.end() || !(id->is_string() || id->is_number_integer())) {
      job.error = "field 'id' must be given, a string or an integer";
      continue;
    }
    job.id = *id;
    if (auto [at, fresh] = seen.emplace(id->dump(), line); !fresh) {
      job.error = "field 'id': " + id->dump() + " is the id of the request on line " +
                  std::to_string(at->second) + " too";
      continue;
    }
    job.error = readJob(request, spec, command.maxSeqLen, tokenizer, tokenizerError, job);
  }
  return true;
}

EngineRequest engineRequest(const ModelSpec &spec, const Args &command,
                            const RequestParams &params) {
  EngineRequest r;
  r.prompt = params.prompt;
  r.maxTokens = params.maxTokens;
  r.sampling = params.sampling;
  r.stopIds = params.stopIds;
  if (!params.ignoreEos) {
    std::vector<int64_t> eos = spec.eosIds;
    eos.insert(eos.end(), command.moreEos.begin(), command.moreEos.end());
    if (command.eosId)
      eos = {*command.eosId};
    r.stopIds.insert(r.stopIds.end(), eos.begin(), eos.end());
  }
  r.logprobs = params.logprobs;
  r.forced = params.forced;
  r.cacheSalt = params.cacheSalt;
  r.promptLogprobs = params.promptLogprobs;
  return r;
}

int runRequests(const ModelSpec &spec, const Args &args, Backend &backend, const RankInfo &rank,
                const Group &group, const Fault &fault) {
  bool lead = group.rank == 0;
  Engine engine(spec, backend, rank, engineLimits(spec, args));
  std::vector<EngineRequest> none;
  EngineHooks hooks;
  hooks.beforeStep = [&](int64_t n) { strikeFault(fault, rank.worldRank(), backend, n); };
  if (!lead) { // the peers run rank 0's steps until it ends
    engine.run(none, hooks);
    return 0;
  }
  std::vector<BatchRequest> jobs;
  std::shared_ptr<Tokenizer> tokenizer;
  std::ofstream out;
  std::string tokenizerError, error;
  std::unique_ptr<GgufFile> gguf;
  // A long requests file takes a while to read and tokenize, beside idle steps: the peers
  // wait under --timeout.
  try {
    engine.idleWhile([&] {
      slowFault(fault);
      tokenizer = loadTokenizer(args.weights, spec.vocab, gguf, tokenizerError);
      if (readJobs(args, spec, tokenizer.get(), tokenizerError, jobs, error))
        out.open(args.outputFile, std::ios::trunc);
    });
  } catch (const std::exception &e) {
    return group.stop(describeFailure(e, group.peers(), group.comm->lostPeers(), spec.name,
                                      "reading the requests"));
  }
  if (error.empty() && !out)
    error = "cannot write --output " + args.outputFile;
  if (!error.empty()) {
    engine.run(none); // tells the peers the run is over
    return group.stop(error);
  }
  auto started = std::chrono::steady_clock::now();
  // Refused requests get their line first; the rest run in the engine, each line written as
  // its request finishes.
  size_t refused = 0;
  std::vector<EngineRequest> requests;
  std::vector<const BatchRequest *> runs; // requests[i]'s job
  for (const BatchRequest &job : jobs) {
    if (!job.error.empty()) {
      nlohmann::ordered_json line = {
          {"id", job.id},
          {"error",
           {{"message", "request on line " + std::to_string(job.line) + ": " + job.error}}}};
      writeLine(out, line);
      ++refused;
      continue;
    }
    requests.push_back(engineRequest(spec, args, job.params));
    runs.push_back(&job);
  }
  // Each request's text as it comes, stop strings held back (a stop string needs a tokenizer:
  // readJob).
  std::vector<std::string> texts(requests.size());
  std::vector<std::optional<GeneratedText>> shown(requests.size());
  if (tokenizer)
    for (size_t i = 0; i < requests.size(); ++i)
      shown[i].emplace(*tokenizer, runs[i]->params.stop, false,
                       runs[i]->params.sampling.minTokens);
  int64_t promptTokens = 0, generatedTokens = 0;
  auto onToken = [&](size_t i, int64_t id) {
    if (!shown[i])
      return false;
    texts[i] += shown[i]->push(id);
    return shown[i]->stopped();
  };
  auto onFinish = [&](size_t i) {
    const EngineRequest &r = requests[i];
    if (shown[i])
      texts[i] += shown[i]->finish();
    int64_t prompt = int64_t(r.prompt.size()), completion = int64_t(r.output.size());
    nlohmann::ordered_json line = {{"id", runs[i]->id}};
    if (tokenizer)
      line["text"] = texts[i];
    line["token_ids"] = r.output;
    if (r.logprobs >= 0)
      line["logprobs"] = logprobsJson(r.outputLogprobs, false);
    if (r.promptLogprobs >= 0) // the first token has none, as vLLM gives it
      line["prompt_logprobs"] = logprobsJson(r.promptTokenLogprobs, true);
    line["finish_reason"] = r.finishReason;
    if (!r.error.empty()) // it failed alone (its logits not finite): the others ran on
      line["error"] = {{"message", r.error}};
    if (shown[i] && shown[i]->stopped())
      line["stop_reason"] = shown[i]->matched();
    line["usage"] = {{"prompt_tokens", prompt},
                     {"completion_tokens", completion},
                     {"total_tokens", prompt + completion},
                     {"prompt_tokens_details", {{"cached_tokens", r.cachedTokens}}}};
    if (args.requestMetrics)
      line["metrics"] = {{"first_token_ms", r.firstTokenMs}, {"finished_ms", r.finishedMs}};
    writeLine(out, line);
    promptTokens += prompt;
    generatedTokens += completion;
  };
  hooks.onToken = onToken;
  hooks.onFinish = onFinish;
  engine.run(requests, hooks);
  double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  std::fprintf(stderr,
               "%zu requests: %zu finished, %zu refused (see %s); %lld prompt tokens, %lld "
               "generated in %.2f s (%.1f generated tokens/s); %lld steps, %lld preemptions, "
               "%lld of %lld prompt tokens looked up found in the prefix cache\n",
               jobs.size(), requests.size(), refused, args.outputFile.c_str(),
               (long long)promptTokens, (long long)generatedTokens, seconds,
               seconds > 0 ? double(generatedTokens) / seconds : 0.0,
               (long long)engine.steps(), (long long)engine.preemptions(),
               (long long)engine.prefixHits(), (long long)engine.prefixQueries());
  if (!out) {
    std::fprintf(stderr, "error: cannot write --output %s\n", args.outputFile.c_str());
    return 1;
  }
  return 0;
}

} // namespace tpcrt
