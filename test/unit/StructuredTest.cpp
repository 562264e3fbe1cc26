// Structured outputs (runtime/serve/structured.h): the schema keywords checked, and grammars
// (a JSON schema, json_object, a regex, choices, an EBNF grammar) compiled over the example's
// byte-level vocabulary (an id is a byte, GPT-2's alphabet spelling it), driven a byte at a
// time as the engine drives them: each byte of an accepted string must be allowed and
// accepted, a refused string must meet a byte that is not allowed, and at the end only the
// stop id may come. Where the build has no grammar engine, only the keyword checks run.
#include "structured.h"

#include <gtest/gtest.h>

namespace tpcrt::serve {
namespace {

constexpr int64_t kStop = 0; // the byte 0 stands for end of sequence here

struct Vocabulary {
  Vocabulary() {
    std::string error;
    tokenizer = Tokenizer::load(TPC_EXAMPLES_DIR, error);
    if (!tokenizer)
      ADD_FAILURE() << error;
  }
  std::unique_ptr<Tokenizer> tokenizer;
};

bool allows(const std::vector<uint32_t> &mask, int64_t token) {
  return mask[size_t(token / 32)] >> (token % 32) & 1;
}

/// Drives `c` through `text`: "" where every byte is allowed and accepted and then the stop
/// id alone may come, else what happened where.
std::string drive(TokenConstraint &c, const std::string &text) {
  std::vector<uint32_t> mask(8);
  for (size_t i = 0; i < text.size(); ++i) {
    int64_t byte = static_cast<unsigned char>(text[i]);
    std::fill(mask.begin(), mask.end(), 0);
    if (!c.next(mask))
      return "nothing allowed at " + std::to_string(i);
    if (!allows(mask, byte))
      return "byte " + std::to_string(i) + " not allowed";
    if (!c.accept(byte))
      return "byte " + std::to_string(i) + " refused";
  }
  std::fill(mask.begin(), mask.end(), 0);
  if (!c.next(mask))
    return "nothing allowed at the end";
  for (int64_t t = 0; t < 256; ++t)
    if (allows(mask, t) != (t == kStop))
      return "at the end, token " + std::to_string(t) + (t == kStop ? " not" : "") + " allowed";
  return c.accept(kStop) ? "" : "the stop id refused";
}

TEST(Structured, SchemaKeywordsOutsideTheListAreRefusedByNameAndPlace) {
  using J = nlohmann::ordered_json;
  EXPECT_EQ(checkSchemaKeywords(J::parse(R"({"type": "object", "title": "T",
      "properties": {"a": {"type": "array", "items": {"type": "string", "maxLength": 3}}},
      "$defs": {"E": {"enum": [1, 2]}}, "required": ["a"], "additionalProperties": false})")),
            "");
  EXPECT_EQ(checkSchemaKeywords(J::parse(R"({"properties": {"a": {"items": {"pattern": "x"}}}})")),
            "keyword 'pattern' is not supported (at #/properties/a/items)");
  EXPECT_EQ(checkSchemaKeywords(J::parse(R"({"anyOf": [{"type": "null"}, {"oneOf": []}]})")),
            "keyword 'oneOf' is not supported (at #/anyOf/1)");
  EXPECT_EQ(checkSchemaKeywords(J::parse(R"({"anyOf": []})")),
            "'anyOf' must be a non-empty list of schemas (at #)");
}

TEST(Structured, GrammarsAllowWhatTheyDescribeAndNothingElse) {
  if (!structuredOutputsBuilt())
    GTEST_SKIP() << "built without xgrammar";
  Vocabulary v;
  Grammars grammars(*v.tokenizer, 256, {kStop});
  auto one = [&](StructuredSpec spec) {
    std::string error;
    std::vector<std::shared_ptr<TokenConstraint>> made = grammars.make(spec, 2, error);
    EXPECT_EQ(error, "");
    EXPECT_EQ(made.size(), 2u);
    return made;
  };
  StructuredSpec schema{StructuredSpec::JsonSchema,
                        R"({"type": "object", "properties": {"n": {"type": "integer",
                            "minimum": 0, "maximum": 99}, "tag": {"enum": ["a", "b"]}},
                            "required": ["n", "tag"], "additionalProperties": false})",
                        {}};
  auto two = one(schema); // each choice its own state
  EXPECT_EQ(drive(*two[0], R"({"n": 42, "tag": "b"})"), "");
  EXPECT_EQ(drive(*two[1], R"({"n": 7, "tag": "a"})"), "");
  EXPECT_EQ(drive(*one(schema)[0], R"({"n": 420, "tag": "b"})"), "byte 8 not allowed");
  EXPECT_EQ(drive(*one(schema)[0], R"({"tag": "b", "n": 1})"), "byte 2 not allowed");
  EXPECT_EQ(drive(*one(schema)[0], R"({"n": 1, "tag": "c"})"), "byte 17 not allowed");
  StructuredSpec object{StructuredSpec::JsonObject, "", {}};
  EXPECT_EQ(drive(*one(object)[0], R"({"x": [1, {"y": null}]})"), "");
  EXPECT_EQ(drive(*one(object)[0], "[1]"), "byte 0 not allowed");
  StructuredSpec regex{StructuredSpec::Regex, "[0-9]{3}-[a-z]{3}", {}};
  EXPECT_EQ(drive(*one(regex)[0], "123-abc"), "");
  EXPECT_EQ(drive(*one(regex)[0], "12a"), "byte 2 not allowed");
  StructuredSpec choice{StructuredSpec::Choice, "", {"yes", "no \"way\""}};
  EXPECT_EQ(drive(*one(choice)[0], "no \"way\""), "");
  EXPECT_EQ(drive(*one(choice)[0], "yep"), "byte 2 not allowed");
  StructuredSpec ebnf{StructuredSpec::Grammar, R"x(root ::= "(" [a-c]* ")")x", {}};
  EXPECT_EQ(drive(*one(ebnf)[0], "(abca)"), "");
  EXPECT_EQ(drive(*one(ebnf)[0], "(abd)"), "byte 3 not allowed");
}

// An integer the schema leaves unbounded on a side stops at I-JSON's interoperable range
// there, 2^53 - 1 (RFC 7493, 2.2): sixteen digits, not digits until max_tokens. A bound the
// schema gives is kept, even past that range; a number is left alone.
TEST(Structured, UnboundedIntegersStopAtTheIntegersADoubleHolds) {
  if (!structuredOutputsBuilt())
    GTEST_SKIP() << "built without xgrammar";
  Vocabulary v;
  Grammars grammars(*v.tokenizer, 256, {kStop});
  auto driven = [&](const std::string &schema, const std::string &text) {
    std::string error;
    auto made = grammars.make(StructuredSpec{StructuredSpec::JsonSchema, schema, {}}, 1, error);
    if (made.empty())
      return "not compiled: " + error;
    return drive(*made[0], text);
  };
  const std::string integer = R"({"type": "integer"})";
  EXPECT_EQ(driven(integer, "9007199254740991"), "");
  EXPECT_EQ(driven(integer, "-9007199254740991"), "");
  EXPECT_EQ(driven(integer, "0"), "");
  EXPECT_EQ(driven(integer, "9007199254740992"), "byte 15 not allowed");
  EXPECT_EQ(driven(integer, "-9007199254740992"), "byte 16 not allowed");
  EXPECT_EQ(driven(integer, "12345678901234567"), "byte 16 not allowed");
  const std::string atLeast = R"({"type": "integer", "minimum": 1})";
  EXPECT_EQ(driven(atLeast, "1000000000000000"), "");
  EXPECT_EQ(driven(atLeast, "10000000000000000"), "byte 16 not allowed");
  EXPECT_EQ(driven(atLeast, "0"), "byte 0 not allowed");
  // the schema's own bound, past the range, is kept; the other side is bounded
  const std::string wide = R"({"type": "integer", "maximum": 1000000000000000000})";
  EXPECT_EQ(driven(wide, "1000000000000000000"), "");
  EXPECT_EQ(driven(wide, "-10000000000000000"), "byte 17 not allowed");
  // nested: a property, an item, a definition reached through anyOf
  EXPECT_EQ(driven(R"({"type": "object", "properties": {"n": {"type": "array", "items":
                       {"type": "integer"}}}, "required": ["n"], "additionalProperties": false})",
                   R"({"n": [1, 22222222222222222]})"),
            "byte 26 not allowed");
  const std::string defined = R"({"$defs": {"N": {"type": "integer"}},
                                  "anyOf": [{"$ref": "#/$defs/N"}, {"type": "null"}]})";
  EXPECT_EQ(driven(defined, "null"), "");
  EXPECT_EQ(driven(defined, "11111111111111111"), "byte 16 not allowed");
  // left alone: a number
  EXPECT_EQ(driven(R"({"type": "object", "properties": {"x": {"type": "number"}},
                       "required": ["x"], "additionalProperties": false})",
                   R"({"x": 123456789012345678901234})"),
            "");
}

TEST(Structured, WhatCannotBeCompiledIsAnErrorNotAConstraint) {
  if (!structuredOutputsBuilt())
    GTEST_SKIP() << "built without xgrammar";
  Vocabulary v;
  Grammars grammars(*v.tokenizer, 256, {kStop});
  for (StructuredSpec bad : {StructuredSpec{StructuredSpec::Regex, "([0-9]", {}},
                             StructuredSpec{StructuredSpec::Grammar, "root ::= undefined", {}},
                             StructuredSpec{StructuredSpec::JsonSchema, R"({"$ref": "#/$defs/X"})",
                                            {}}}) {
    std::string error;
    EXPECT_TRUE(grammars.make(bad, 1, error).empty()) << bad.text;
    EXPECT_NE(error, "") << bad.text;
  }
}

TEST(Structured, CompilingIsBoundedInSizeAndTime) {
  if (!structuredOutputsBuilt())
    GTEST_SKIP() << "built without xgrammar";
  Vocabulary v;
  std::string error;
  // Past kMaxGrammarBytes: refused before the compiler sees it.
  Grammars grammars(*v.tokenizer, 256, {kStop});
  StructuredSpec big{StructuredSpec::Regex, std::string(kMaxGrammarBytes + 1, 'a'), {}};
  EXPECT_TRUE(grammars.make(big, 1, error).empty());
  EXPECT_EQ(error, "its grammar is 65537 bytes, more than the 65536 this server compiles");
  // Over the time limit (1 ms here; repeated classes take the compiler far longer): refused,
  // and while that compile finishes alone, the next is refused too, or, once it has ended,
  // compiled.
  Grammars hurried(*v.tokenizer, 256, {kStop}, std::chrono::milliseconds(1));
  StructuredSpec slow{StructuredSpec::Regex, "", {}};
  for (char c = 'a'; c <= 'h'; ++c)
    slow.text += std::string("[^") + c + "]{4000}";
  error.clear();
  EXPECT_TRUE(hurried.make(slow, 1, error).empty());
  EXPECT_EQ(error, "compiling its grammar took more than 0.001 s: simplify it");
  error.clear();
  bool busy = false;
  std::vector<std::shared_ptr<TokenConstraint>> next =
      hurried.make({StructuredSpec::Regex, "a", {}}, 1, error, &busy);
  EXPECT_EQ(error, next.empty() ? "the grammar compiler is still busy with an earlier grammar "
                                  "that took more than 0.001 s; try again later"
                                : "");
  EXPECT_EQ(busy, next.empty()); // (the server answers it with a 503, not a 400)
} // (the compile left running is waited for as `hurried` goes)

} // namespace
} // namespace tpcrt::serve
