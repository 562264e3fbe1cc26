// The Jinja interpreter behind renderChatTemplate (jinja.cpp): internal to libtpcrt.
#ifndef TPCRT_CHAT_JINJA_H
#define TPCRT_CHAT_JINJA_H

#include "tpcrt/chat_template.h"

namespace tpcrt::jinja {

/// Renders `source` with messages, add_generation_prompt, bos_token, eos_token and tools and
/// documents set to none, as transformers' render_jinja_template does.
std::optional<std::string> render(const std::string &source,
                                  const std::vector<ChatMessage> &messages,
                                  const ChatOptions &options, std::string &error);

} // namespace tpcrt::jinja

#endif // TPCRT_CHAT_JINJA_H
