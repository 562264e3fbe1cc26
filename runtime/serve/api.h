// The OpenAI API as tpc serve speaks it (vLLM's request and response shapes): reading a
// request body into what the engine runs, or into an error with the status and the field at
// fault; and the JSON of responses, stream chunks and errors. No HTTP and no threads here: the
// server (server.cpp) moves the bytes.
#ifndef TPCRT_SERVE_API_H
#define TPCRT_SERVE_API_H

#include "../core/core.h"
#include "structured.h"
#include "tool_calls.h"

#include <nlohmann/json.hpp>

#include <memory>
#include <optional>
#include <string>

namespace tpcrt::serve {

/// An error as the client sees it: the HTTP status and {"error": {message, type, param,
/// code}}.
struct ApiError {
  int status = 400;
  std::string message;
  std::string param; // the request's field at fault, where there is one
  std::string code;  // a machine-readable reason ("context_length_exceeded"), or none
};
/// The error body of `error`.
std::string errorBody(const ApiError &error);

/// What requests are read against: the model, the command's defaults (sampling from
/// generation_config.json, --max-model-len), the tokenizer and the chat template.
struct ApiContext {
  const ModelSpec *spec = nullptr;
  const Args *defaults = nullptr;
  std::shared_ptr<Tokenizer> tokenizer;
  std::optional<std::string> chatTemplate; // none: chat requests are refused with the reason
  std::string chatTemplateError;
  std::string modelName;
};

/// One completion request, read and checked.
struct ApiRequest {
  bool chat = false;
  bool stream = false;
  bool includeUsage = false; // stream_options.include_usage
  RequestParams params;      // the prompt's ids, max_tokens, sampling, stop strings and ids
  /// prompt_logprobs (vLLM's): this many most likely tokens at each prompt token; -1: none.
  int promptLogprobs = -1;
  /// A completion's echo: the prompt's text as given (its ids' text where given as ids).
  std::string promptText;
  /// n: choices of the one prompt (1 to kMaxChoices), each its own engine request; with a
  /// seed, choice i samples with seed + i (vLLM's rule).
  int64_t n = 1;
  /// response_format or structured_outputs: what the output must be (a grammar); also a
  /// required or named tool_choice's (field "tool_choice").
  StructuredSpec structured;
  /// tools and tool_choice (chat): how the answer's text is read back into tool calls. None:
  /// it is all content (no tools, tool_choice "none", or "auto" with a template that teaches
  /// no tool format). JsonList and Named: the grammar above makes the answer the call.
  std::optional<ToolFormat> toolFormat;
  std::string namedTool; // tool_choice naming a function: its name
  /// parallel_tool_calls: false keeps the answer to one call (the first; under required the
  /// grammar allows only one).
  bool parallelToolCalls = true;
};
/// The most choices a request may ask for (n).
constexpr int64_t kMaxChoices = 16;
/// The most log-probability entries (a token's, or one of its most likely) a response may
/// hold, over its choices, generated tokens and prompt: about 0.3 GB of JSON at the limit.
constexpr int64_t kMaxLogprobEntries = int64_t(1) << 20;

/// Reads the body of POST /v1/completions (`chat` false) or /v1/chat/completions into
/// `request`; an error when it is not a request this server runs. Bounded: the body's JSON
/// depth, the chat template's limits, the context.
std::optional<ApiError> readRequest(const std::string &body, bool chat, const ApiContext &context,
                                    ApiRequest &request);

/// GET /v1/models.
nlohmann::ordered_json modelList(const ApiContext &context, int64_t created);

/// POST /tokenize, vLLM's shape: {"prompt": text, "add_special_tokens": true} or
/// {"messages": [...], "add_generation_prompt": true, "add_special_tokens": false}, each
/// tokenized as a completion or a chat completion tokenizes its prompt, into `ids`; an error
/// naming the field otherwise. The answer: tokenizeResponse.
/// `tokenStrings`: whether it asked for the tokens' strings too (return_token_strs).
std::optional<ApiError> readTokenize(const std::string &body, const ApiContext &context,
                                     std::vector<int64_t> &ids, bool &tokenStrings);
/// {"count", "max_model_len", "tokens", "token_strs"}: the token strings (the tokenizer's
/// convert_ids_to_tokens) where asked for, else null.
nlohmann::ordered_json tokenizeResponse(const std::vector<int64_t> &ids,
                                        const ApiContext &context, bool tokenStrings = false);
/// POST /detokenize, vLLM's shape: {"tokens": [ids]}, each an id of the vocabulary, into the
/// text they decode to (special tokens kept, as transformers' decode); answered as
/// {"prompt": text}.
std::optional<ApiError> readDetokenize(const std::string &body, const ApiContext &context,
                                       std::string &text);

/// The parts every response and chunk share.
struct ResponseHead {
  std::string id; // "cmpl-..." or "chatcmpl-..."
  int64_t created = 0;
  std::string model;
  bool chat = false;
};
struct Usage {
  int64_t prompt = 0, completion = 0;
  int64_t cached = 0; // of the prompt's tokens, those found in the prefix cache
};
/// Generated tokens' log-probabilities, [begin, end), as a choice carries them in vLLM's shapes
/// (each clamped at -9999, as vLLM does, since JSON has no -inf). Chat: {"content": [{"token",
/// "logprob", "bytes", "top_logprobs": [{"token", "logprob", "bytes"}]}]}, the most likely
/// tokens most likely first. Completions: {"text_offset", "token_logprobs", "tokens",
/// "top_logprobs": [{text: logprob}]}, each dict the most likely tokens and the chosen one.
/// A token's text is tokenizer.decode([id]) with special tokens kept, its bytes that text's
/// UTF-8 (vLLM's); text offsets count the characters of the tokens' texts from `textOffset`,
/// which is advanced past these tokens.
nlohmann::ordered_json logprobsOf(bool chat, const Tokenizer &tokenizer,
                                  const TokenLogprobs *begin, const TokenLogprobs *end,
                                  int64_t &textOffset);
/// A completion's echoed prompt in its logprobs (echo with logprobs: logprobsOf's shape): the
/// first token with a null logprob and null top_logprobs, as OpenAI gives it, then each
/// prompt token as the model scored it (EngineRequest::promptTokenLogprobs) with its `top`
/// most likely tokens; text offsets from `textOffset`, which is advanced past them.
nlohmann::ordered_json echoLogprobs(const Tokenizer &tokenizer, const std::vector<int64_t> &prompt,
                                    const std::vector<TokenLogprobs> &scored, int top,
                                    int64_t &textOffset);
/// A completion's logprobs `more` after those in `into` (null: none yet), list by list.
void appendLogprobs(nlohmann::ordered_json &into, const nlohmann::ordered_json &more);
/// prompt_logprobs in vLLM's shape: [null, {"id": {"logprob", "rank", "decoded_token"}, ...},
/// ...], each prompt token's entry first, then its `top` most likely tokens (ranks 1, 2, ...)
/// that are not it; logprobs clamped at -9999.
nlohmann::ordered_json promptLogprobsOf(const Tokenizer &tokenizer,
                                        const std::vector<TokenLogprobs> &scored, int top);
/// One choice of a whole response: its text, why it finished, and its logprobs (logprobsOf's,
/// or null).
struct ChoiceResult {
  std::string text; // a chat choice's content (null in the message where empty and it calls)
  const char *finishReason = nullptr;
  nlohmann::ordered_json logprobs;
  std::vector<ToolCall> toolCalls; // a chat choice's, read back from its text
};
/// The id of call `call` of choice `choice` of response `responseId`: nine letters and digits,
/// as Mistral's templates require of the ids that come back to them (any other takes them too),
/// drawn from a hash of the three, so that a stream and its calls agree.
std::string toolCallId(const std::string &responseId, int64_t choice, int64_t call);
/// A whole (non-streamed) response of `choices` (index 0, 1, ...); `promptLogprobs`
/// promptLogprobsOf's (each choice of a completion carries it, a chat completion itself), or
/// null.
nlohmann::ordered_json response(const ResponseHead &head, const std::vector<ChoiceResult> &choices,
                                const Usage &usage,
                                const nlohmann::ordered_json &promptLogprobs = nullptr);
/// A stream chunk of choice `index`: `text` (the chat's first chunk: the role and empty
/// content), with `finishReason` on the last one (null before), and the log-probabilities of
/// the tokens whose text it is first to carry (logprobsOf's, or null).
nlohmann::ordered_json chunk(const ResponseHead &head, const std::string &text,
                             const char *finishReason, bool role = false,
                             const nlohmann::ordered_json &logprobs = nullptr, int64_t index = 0);
/// A stream chunk of choice `index` with tool-call deltas: {"tool_calls": [{"index", "id",
/// "type": "function", "function": {"name", "arguments"}}]} on a call's first delta (its name
/// known), {"index", "function": {"arguments"}} on the next pieces, as vLLM streams them.
nlohmann::ordered_json toolChunk(const ResponseHead &head, const std::vector<ToolCallDelta> &calls,
                                 const nlohmann::ordered_json &logprobs = nullptr,
                                 int64_t index = 0);
/// stream_options.include_usage's chunk: no choices, the usage.
nlohmann::ordered_json usageChunk(const ResponseHead &head, const Usage &usage);
/// A JSON value as the bytes a response carries: text that is not valid UTF-8 has its bad
/// bytes replaced (U+FFFD), never an exception.
std::string dump(const nlohmann::ordered_json &value);

} // namespace tpcrt::serve

#endif // TPCRT_SERVE_API_H
