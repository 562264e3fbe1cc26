// A request in text: the checkpoint's tokenizer and chat template turn --prompt (with --chat
// and --system) into the prompt's ids, and its generation_config.json adds the ids generate
// stops at. The checkpoint is the directory --weights names (or the one its file is in); where
// that is a GGUF file (ggufPathOf), the tokenizer and the chat template are its metadata's.
#include "core.h"

#include "tpcrt/chat_template.h"
#include "tpcrt/file.h"
#include "tpcrt/gguf.h"

#include <nlohmann/json.hpp>

#include <cstdio>
#include <sys/stat.h>

namespace tpcrt {

std::string checkpointDir(const std::string &weights) {
  struct stat st {};
  if (::stat(weights.c_str(), &st) == 0 && S_ISDIR(st.st_mode))
    return weights;
  size_t slash = weights.rfind('/');
  return slash == std::string::npos ? "." : weights.substr(0, slash == 0 ? 1 : slash);
}

std::shared_ptr<Tokenizer> loadTokenizer(const std::string &weights, int64_t vocab,
                                         std::unique_ptr<GgufFile> &gguf, std::string &error) {
  if (weights.empty()) {
    error = "give --weights DIR (not --random-weights), the directory with tokenizer.json";
    return nullptr;
  }
  std::string ggufPath = ggufPathOf(weights, error);
  if (!error.empty())
    return nullptr;
  std::string dir = checkpointDir(weights);
  std::unique_ptr<Tokenizer> loaded;
  if (!ggufPath.empty()) {
    gguf = GgufFile::open(ggufPath, error);
    if (gguf)
      loaded = Tokenizer::fromGguf(*gguf, error);
  } else {
    loaded = Tokenizer::load(dir, error);
  }
  if (!loaded)
    return nullptr;
  // Refused when loaded, not when the id first comes up: an embedding lookup past its rows
  // would read another tensor's memory, and a prompt that happens to avoid the id is luck.
  if (loaded->idEnd() > vocab) {
    error = (gguf ? "GGUF file " + ggufPath + ": tokenizer.ggml.tokens"
                  : dir + "/tokenizer.json") +
            ": id " + std::to_string(loaded->idEnd() - 1) +
            " is outside the model's vocabulary of " + std::to_string(vocab) +
            (gguf ? "" : " (config.json's vocab_size)");
    return nullptr;
  }
  return loaded;
}

bool tokenizePrompt(Args &args, int64_t vocab, std::shared_ptr<Tokenizer> &tokenizer,
                    std::string &error) {
  if (!args.promptFile.empty()) {
    std::string text;
    if (!readFile(args.promptFile, text)) {
      error = "cannot read --prompt-file " + args.promptFile;
      return false;
    }
    args.promptText = text;
  }
  std::unique_ptr<GgufFile> gguf;
  std::shared_ptr<Tokenizer> loaded = loadTokenizer(args.weights, vocab, gguf, error);
  if (!loaded) {
    error = "a text prompt needs the checkpoint's tokenizer: " + error;
    return false;
  }
  std::string dir = checkpointDir(args.weights);
  tokenizer = std::move(loaded);
  std::string text = *args.promptText;
  bool addSpecial = true;
  if (args.chat) {
    std::optional<std::string> source =
        gguf ? loadChatTemplateGguf(*gguf, error) : loadChatTemplate(dir, error);
    if (!source) {
      error = "--chat needs the checkpoint's chat template: " + error;
      return false;
    }
    std::vector<ChatMessage> messages;
    if (!args.system.empty())
      messages.push_back({"system", args.system});
    messages.push_back({"user", text});
    ChatOptions options;
    options.bosToken = tokenizer->bosToken();
    options.eosToken = tokenizer->eosToken();
    std::optional<std::string> rendered =
        renderChatTemplate(*source, messages, options, error);
    if (!rendered) {
      error = "the chat template: " + error;
      return false;
    }
    text = *rendered;
    // apply_chat_template tokenizes what the template wrote, adding no special tokens: a
    // template that writes the BOS gets one BOS, not two.
    addSpecial = false;
  }
  std::optional<std::vector<int64_t>> ids = tokenizer->encode(text, addSpecial, error);
  if (!ids) {
    error = "the prompt: " + error;
    return false;
  }
  args.params.prompt = std::move(*ids);
  if (args.params.prompt.empty()) {
    error = "the prompt is no tokens at all";
    return false;
  }
  return true;
}

bool readGenerationConfig(Args &args, int rank, std::string &error) {
  nlohmann::json config = nlohmann::json::object();
  std::string path, text;
  if (!args.weights.empty()) {
    path = checkpointDir(args.weights) + "/generation_config.json";
    if (readFile(path, text)) { // a checkpoint without one: config.json's ids only
      config = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
      if (!config.is_object()) {
        error = path + " is not a JSON object";
        return false;
      }
    }
  }
  if (auto eos = config.find("eos_token_id"); eos != config.end() && !eos->is_null()) {
    nlohmann::json ids = eos->is_array() ? *eos : nlohmann::json::array({*eos});
    for (const nlohmann::json &id : ids) {
      if (!id.is_number_integer() || id.get<int64_t>() < 0) {
        error = path + ": eos_token_id must be a token id or a list of them, not " + eos->dump();
        return false;
      }
      args.moreEos.push_back(id.get<int64_t>());
    }
  }
  // The sampling fields it sets (null is not set), as the defaults of the flags not given.
  auto field = [&](const char *key, auto flag, auto &into) {
    if (flag) {
      into = *flag;
      return true;
    }
    auto it = config.find(key);
    if (it == config.end() || it->is_null())
      return true;
    if (std::string why = jsonNumber(*it, into); !why.empty()) {
      error = path + ": " + key + " " + why;
      return false;
    }
    return true;
  };
  SamplingParams &p = args.params.sampling;
  bool doSample = false;
  if (auto it = config.find("do_sample"); it != config.end() && it->is_boolean())
    doSample = it->get<bool>();
  // Greedy, as transformers' generate, unless the checkpoint asks for sampling.
  if (!doSample && !args.temperature)
    args.temperature = 0.0;
  if (!field("temperature", args.temperature, p.temperature) ||
      !field("top_k", args.topK, p.topK) || !field("top_p", args.topP, p.topP) ||
      !field("min_p", args.minP, p.minP) ||
      !field("repetition_penalty", args.repetitionPenalty, p.repetitionPenalty))
    return false;
  if (args.presencePenalty)
    p.presencePenalty = *args.presencePenalty;
  if (args.frequencyPenalty)
    p.frequencyPenalty = *args.frequencyPenalty;
  p.seed = args.seed;
  if (std::string why = p.validate(); !why.empty()) {
    error = "sampling: " + why + (config.empty() ? "" : " (the flags, else " + path + ")");
    return false;
  }
  if (rank == 0 && p.greedy()) {
    std::string unused;
    for (auto [flag, given] : {std::pair{"--top-k", bool(args.topK)}, {"--top-p", bool(args.topP)},
                               {"--min-p", bool(args.minP)}, {"--seed", bool(args.seed)}})
      if (given)
        unused += std::string(unused.empty() ? "" : ", ") + flag;
    if (!unused.empty())
      std::fprintf(stderr, "warning: %s change nothing: decoding is greedy (temperature 0); "
                   "give --temperature to sample\n", unused.c_str());
  }
  return true;
}

} // namespace tpcrt
