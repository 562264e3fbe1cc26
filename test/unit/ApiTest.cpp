// tpc serve's request reader and response shapes (runtime/serve/api.h) for what scores a
// prompt and what asks for several choices: echo, prompt_logprobs, max_tokens 0, n, and the
// bound on the log-probabilities an answer may hold; against the example's byte-level
// tokenizer (an id is a byte), so each expected value is worked out here by hand.
#include "api.h"

#include "tpcrt/tokenizer.h"

#include <gtest/gtest.h>

namespace tpcrt::serve {
namespace {

struct Reader {
  Reader() {
    spec.name = "api";
    spec.tp = 1;
    spec.vocab = 256;
    defaults.maxSeqLen = 4096;
    defaults.params.sampling.temperature = 0;
    std::string error;
    context.spec = &spec;
    context.defaults = &defaults;
    context.tokenizer = Tokenizer::load(TPC_EXAMPLES_DIR, error);
    context.modelName = "api";
    context.chatTemplate = "{% for m in messages %}{{ m['content'] }}{% endfor %}";
    if (!context.tokenizer)
      ADD_FAILURE() << error;
  }
  /// The request, or its error's message.
  std::string read(const std::string &body, ApiRequest &request, bool chat = false) {
    std::optional<ApiError> bad = readRequest(body, chat, context, request);
    return bad ? bad->param + ": " + bad->message : "";
  }
  ModelSpec spec{};
  Args defaults;
  ApiContext context;
};

TEST(Api, EchoKeepsThePromptsTextAndScoresWithTheMostLikelyEitherAsks) {
  Reader r;
  ApiRequest a;
  ASSERT_EQ(r.read(R"({"prompt": "hi there", "echo": true, "logprobs": 3, "max_tokens": 0,
                       "prompt_logprobs": 1})", a), "");
  EXPECT_TRUE(a.params.echo);
  EXPECT_EQ(a.promptText, "hi there");
  EXPECT_EQ(a.params.prompt, (std::vector<int64_t>{'h', 'i', ' ', 't', 'h', 'e', 'r', 'e'}));
  EXPECT_EQ(a.params.maxTokens, 0);
  EXPECT_EQ(a.promptLogprobs, 1);
  EXPECT_EQ(a.params.promptLogprobs, 3); // echo's 3 most likely, more than prompt_logprobs' 1
  ApiRequest ids;
  ASSERT_EQ(r.read(R"({"prompt": [[111, 107]], "echo": true, "max_tokens": 1})", ids), "");
  EXPECT_EQ(ids.promptText, "ok"); // ids' text
  EXPECT_EQ(ids.params.promptLogprobs, -1); // echo without logprobs scores nothing
}

TEST(Api, MaxTokensZeroOnlyScores) {
  Reader r;
  ApiRequest a;
  EXPECT_EQ(r.read(R"({"prompt": "x", "max_tokens": 0})", a),
            "max_tokens: field 'max_tokens' 0 generates nothing: it is for scoring a prompt "
            "(with 'prompt_logprobs', or 'echo' on /v1/completions)");
  ApiRequest chat;
  EXPECT_EQ(r.read(R"({"messages": [{"role": "user", "content": "x"}], "max_tokens": 0})", chat,
                   true),
            "max_tokens: field 'max_tokens' 0 generates nothing: it is for scoring a prompt "
            "(with 'prompt_logprobs', or 'echo' on /v1/completions)");
  ApiRequest scored;
  EXPECT_EQ(r.read(R"({"prompt": "x", "max_tokens": 0, "prompt_logprobs": 0})", scored), "");
}

TEST(Api, ChoicesAreBoundedAndSoAreTheLogprobsTheyWouldHold) {
  Reader r;
  for (const char *n : {"0", "17", "2.5", "\"4\""}) {
    ApiRequest a;
    EXPECT_NE(r.read(std::string(R"({"prompt": "x", "n": )") + n + "}", a).find("n: field 'n' "
                                                                                 "must be"),
              std::string::npos)
        << n;
  }
  // n x tokens x 21 entries against 2^20 = 1048576: 16 x 3110 x 21 = 1044960 fit; the
  // 20-token prompt echoed, or scored with its top 20, makes 16 x 3130 x 21 = 1051680.
  const std::string base = R"({"prompt": "abcdefghijklmnopqrst", "n": 16, "logprobs": 20,
                               "max_tokens": 3110)";
  ApiRequest fine;
  ASSERT_EQ(r.read(base + "}", fine), "");
  EXPECT_EQ(fine.n, 16);
  const std::string refused =
      "the log-probabilities asked for come to 1051680 entries (n x (max_tokens, unless "
      "streamed, and echoed prompt tokens x (logprobs + 1) + prompt tokens x (prompt_logprobs "
      "+ 1))), more than the limit of 1048576; ask for fewer choices, tokens or most likely "
      "tokens";
  ApiRequest echoed, scored, streamed;
  EXPECT_EQ(r.read(base + R"(, "echo": true})", echoed), "logprobs: " + refused);
  EXPECT_EQ(r.read(base + R"(, "prompt_logprobs": 20})", scored), "logprobs: " + refused);
  // Streamed, the generated tokens' entries go chunk by chunk: not counted.
  EXPECT_EQ(r.read(base + R"(, "echo": true, "stream": true})", streamed), "");
}

TEST(Api, EchoedLogprobsBeginWithTheFirstTokenNullAndCountCharacters) {
  Reader r;
  // The prompt "ab", scored: b's entry; the answer's "c" after it.
  std::vector<TokenLogprobs> scored = {{'b', -1.5, {{'x', -0.5}, {'b', -1.5}}}};
  int64_t offset = 0;
  nlohmann::ordered_json echoed = echoLogprobs(*r.context.tokenizer, {'a', 'b'}, scored, 1,
                                               offset);
  TokenLogprobs c{'c', -0.25, {{'c', -0.25}}};
  appendLogprobs(echoed, logprobsOf(false, *r.context.tokenizer, &c, &c + 1, offset));
  EXPECT_EQ(echoed.dump(), R"({"text_offset":[0,1,2],"token_logprobs":[null,-1.5,-0.25],)"
                           R"("tokens":["a","b","c"],"top_logprobs":[null,{"x":-0.5,"b":-1.5},)"
                           R"({"c":-0.25}]})");
  EXPECT_EQ(offset, 3);
}

TEST(Api, PromptLogprobsAreVllmsDictsTheTokenFirst) {
  Reader r;
  TokenLogprobs b{'b', -2.0, {{'x', -0.5}, {'b', -2.0}, {'y', -3.0}}};
  b.rank = 2;
  nlohmann::ordered_json shown = promptLogprobsOf(*r.context.tokenizer, {b}, 2);
  EXPECT_EQ(shown.dump(),
            R"([null,{"98":{"logprob":-2.0,"rank":2,"decoded_token":"b"},)"
            R"("120":{"logprob":-0.5,"rank":1,"decoded_token":"x"}}])");
}

} // namespace
} // namespace tpcrt::serve
