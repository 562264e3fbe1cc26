// A checkpoint's chat template, rendered as transformers' apply_chat_template does (for
// `tpc run --chat`): the subset of Jinja that real chat templates use, in plain C++17, since
// no C++ Jinja engine is packaged in Debian. Anything outside the subset is an error that
// names the construct and its line, never a silent difference.
#ifndef TPCRT_CHAT_TEMPLATE_H
#define TPCRT_CHAT_TEMPLATE_H

#include <optional>
#include <string>
#include <vector>

namespace tpcrt {

struct ChatMessage {
  std::string role, content;
};

/// The checkpoint's chat template: DIR/chat_template.jinja, else tokenizer_config.json's
/// "chat_template" (a string, or a list of {name, template}: take "default"). Null with `error`
/// naming the file when there is none or it cannot be read.
std::optional<std::string> loadChatTemplate(const std::string &dir, std::string &error);

struct ChatOptions {
  bool addGenerationPrompt = true;
  std::string bosToken, eosToken;
};

/// Renders as transformers' apply_chat_template(messages, tokenize=False, add_generation_prompt)
/// does: Jinja with trim_blocks and lstrip_blocks. Null with `error` naming the construct (and
/// its line) for anything outside the subset, and for raise_exception's message.
std::optional<std::string> renderChatTemplate(const std::string &source,
                                              const std::vector<ChatMessage> &messages,
                                              const ChatOptions &options, std::string &error);

} // namespace tpcrt

#endif // TPCRT_CHAT_TEMPLATE_H
