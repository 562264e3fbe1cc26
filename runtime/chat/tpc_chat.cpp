// tpc-chat: renders a chat template as tpcrt does, for the conformance test against
// transformers' apply_chat_template (test/conformance/chat-template.test).
//   tpc-chat TEMPLATE_FILE MESSAGES_JSON [--no-generation-prompt] [--bos X] [--eos Y]
// MESSAGES_JSON is a file holding [{"role": ..., "content": ...}, ...]. The rendering goes to
// stdout as it is (no newline added); an error to stderr, exit 1.
#include "tpcrt/chat_template.h"
#include "tpcrt/file.h"

#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>

static int usage() {
  std::fprintf(stderr, "usage: tpc-chat TEMPLATE_FILE MESSAGES_JSON [--no-generation-prompt] "
                       "[--bos X] [--eos Y]\n");
  return 2;
}

int main(int argc, char **argv) {
  std::vector<const char *> positional;
  tpcrt::ChatOptions options;
  for (int k = 1; k < argc; ++k) {
    if (!std::strcmp(argv[k], "--no-generation-prompt"))
      options.addGenerationPrompt = false;
    else if (!std::strcmp(argv[k], "--bos") && k + 1 < argc)
      options.bosToken = argv[++k];
    else if (!std::strcmp(argv[k], "--eos") && k + 1 < argc)
      options.eosToken = argv[++k];
    else if (argv[k][0] == '-' && argv[k][1] != '\0')
      return usage();
    else
      positional.push_back(argv[k]);
  }
  if (positional.size() != 2)
    return usage();
  std::string source, messagesText;
  if (!tpcrt::readFile(positional[0], source)) {
    std::fprintf(stderr, "tpc-chat: error: cannot read %s\n", positional[0]);
    return 1;
  }
  if (!tpcrt::readFile(positional[1], messagesText)) {
    std::fprintf(stderr, "tpc-chat: error: cannot read %s\n", positional[1]);
    return 1;
  }
  std::vector<tpcrt::ChatMessage> messages;
  try {
    for (const auto &m : nlohmann::json::parse(messagesText))
      messages.push_back({m.at("role").get<std::string>(), m.at("content").get<std::string>()});
  } catch (const nlohmann::json::exception &e) {
    std::fprintf(stderr, "tpc-chat: error: %s: %s\n", positional[1], e.what());
    return 1;
  }
  std::string error;
  std::optional<std::string> text = tpcrt::renderChatTemplate(source, messages, options, error);
  if (!text) {
    std::fprintf(stderr, "tpc-chat: error: %s\n", error.c_str());
    return 1;
  }
  std::fwrite(text->data(), 1, text->size(), stdout);
  return 0;
}
