// Fuzzes the chat-template engine: the input is a template, optionally followed by a NUL and
// the text of the last user message (seeds: the real templates of the conformance test). It
// renders a conversation of four messages, with and without the generation prompt. A template
// may fail with an error (the subset's limits, raise_exception, a construct outside the
// subset); nothing may crash, hang or run out of memory, and what renders is well-formed
// UTF-8; a message that is not is refused.
#include "Text.h"

#include "tpcrt/chat_template.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  std::string_view input(reinterpret_cast<const char *>(data), size);
  size_t nul = input.find('\0');
  std::string source(input.substr(0, nul));
  std::string last = nul == std::string_view::npos ? "What is 2 + 2? R\xC3\xA9ponds \xF0\x9F\x98\x80"
                                                   : std::string(input.substr(nul + 1));
  std::vector<tpcrt::ChatMessage> messages = {
      {"system", "You are terse."},
      {"user", "Hello, \xED\x95\x9C\xEA\xB5\xAD\xEC\x96\xB4!"},
      {"assistant", "Hi.\n\n  Indented line\t"},
      {"user", last}};
  for (bool prompt : {true, false}) {
    tpcrt::ChatOptions options;
    options.addGenerationPrompt = prompt;
    options.bosToken = "<s>";
    options.eosToken = "</s>";
    // The limits a tenth or so of the defaults: instrumented for coverage and sanitizers the
    // engine runs 10 to 40 times slower than released, and the bar is a second per input.
    // What is checked is that every resource stops at its limit, whatever the limit.
    options.limits.maxRenderSteps = 100000;
    options.limits.maxTextWork = 4 << 20;
    options.limits.maxStringBytes = 1 << 20;
    options.limits.maxOutputBytes = 1 << 20;
    options.limits.maxItems = 100000;
    std::string error;
    std::optional<std::string> out = tpcrt::renderChatTemplate(source, messages, options, error);
    if (!out) {
      if (error.empty())
        tpc::fuzz::finding("render failed without an error");
      continue;
    }
    if (!tpc::fuzz::wellFormedUtf8(last))
      tpc::fuzz::finding("rendered a message of ill-formed UTF-8");
    if (!tpc::fuzz::wellFormedUtf8(*out))
      tpc::fuzz::finding("rendered ill-formed UTF-8");
  }
  return 0;
}
