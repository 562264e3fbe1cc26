// A request in text: the checkpoint's tokenizer and chat template turn --prompt (with --chat
// and --system) into the prompt's ids, and its generation_config.json adds the ids generate
// stops at. The checkpoint is the directory --weights names (or the one its file is in); where
// that is a GGUF file (ggufPathOf), the tokenizer and the chat template are its metadata's.
#include "driver.h"

#include "tpcrt/chat_template.h"
#include "tpcrt/file.h"
#include "tpcrt/gguf.h"

#include <nlohmann/json.hpp>

#include <cstdio>
#include <sys/stat.h>

namespace tpcrt {

namespace {

/// The checkpoint directory of --weights: itself, or the directory its file is in.
std::string checkpointDir(const std::string &weights) {
  struct stat st {};
  if (::stat(weights.c_str(), &st) == 0 && S_ISDIR(st.st_mode))
    return weights;
  size_t slash = weights.rfind('/');
  return slash == std::string::npos ? "." : weights.substr(0, slash == 0 ? 1 : slash);
}

} // namespace

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
  if (args.weights.empty()) {
    error = "a text prompt needs the checkpoint's tokenizer: give --weights DIR (not "
            "--random-weights), the directory with tokenizer.json";
    return false;
  }
  std::string pathError;
  std::string ggufPath = ggufPathOf(args.weights, pathError);
  if (!pathError.empty()) {
    error = "a text prompt needs the checkpoint's tokenizer: " + pathError;
    return false;
  }
  std::string dir = checkpointDir(args.weights);
  std::unique_ptr<GgufFile> gguf;
  std::unique_ptr<Tokenizer> loaded;
  if (!ggufPath.empty()) {
    gguf = GgufFile::open(ggufPath, error);
    if (gguf)
      loaded = Tokenizer::fromGguf(*gguf, error);
  } else {
    loaded = Tokenizer::load(dir, error);
  }
  if (!loaded) {
    error = "a text prompt needs the checkpoint's tokenizer: " + error;
    return false;
  }
  // Refused when loaded, not when the id first comes up: an embedding lookup past its rows
  // would read another tensor's memory, and a prompt that happens to avoid the id is luck.
  if (loaded->idEnd() > vocab) {
    error = (gguf ? "GGUF file " + ggufPath + ": tokenizer.ggml.tokens"
                  : dir + "/tokenizer.json") +
            ": id " + std::to_string(loaded->idEnd() - 1) +
            " is outside the model's vocabulary of " + std::to_string(vocab) +
            (gguf ? "" : " (config.json's vocab_size)");
    return false;
  }
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
  args.prompt = std::move(*ids);
  if (args.prompt.empty()) {
    error = "the prompt is no tokens at all";
    return false;
  }
  return true;
}

bool readGenerationConfig(Args &args, int rank, std::string &error) {
  if (args.weights.empty())
    return true;
  std::string path = checkpointDir(args.weights) + "/generation_config.json", text;
  if (!readFile(path, text))
    return true; // a checkpoint without one: config.json's ids only
  nlohmann::json config = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!config.is_object()) {
    error = path + " is not a JSON object";
    return false;
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
  if (auto sample = config.find("do_sample");
      rank == 0 && sample != config.end() && sample->is_boolean() && sample->get<bool>())
    std::fprintf(stderr, "warning: %s asks for sampling (do_sample: true); tpc decodes "
                 "greedily, as generate(do_sample=False)\n", path.c_str());
  return true;
}

} // namespace tpcrt
