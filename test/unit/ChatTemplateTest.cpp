// libtpcrt's chat templates: where loadChatTemplate finds one, the Jinja subset's constructs
// and whitespace rules (test/conformance/chat-template.test compares whole templates with
// transformers), and the errors: a construct outside the subset named with its line,
// raise_exception's message, unterminated tags, and hostile nesting refused without a crash.
#include "tpcrt/chat_template.h"

#include <gtest/gtest.h>

#include <fstream>
#include <sys/stat.h>
#include <unistd.h>

using namespace tpcrt;

namespace {

const std::vector<ChatMessage> kChat = {
    {"system", "Be brief."}, {"user", "Hi"}, {"assistant", "Hello!"}, {"user", "2+2?"}};

std::string render(const std::string &source, const std::vector<ChatMessage> &messages = kChat,
                   bool generationPrompt = true) {
  ChatOptions options;
  options.addGenerationPrompt = generationPrompt;
  options.bosToken = "<s>";
  options.eosToken = "</s>";
  std::string error;
  std::optional<std::string> out = renderChatTemplate(source, messages, options, error);
  EXPECT_TRUE(out) << error;
  return out ? *out : "";
}

std::string renderError(const std::string &source) {
  std::string error;
  std::optional<std::string> out = renderChatTemplate(source, kChat, ChatOptions(), error);
  EXPECT_FALSE(out) << "rendered: " << *out;
  return error;
}

std::string tempDir(const std::string &name) {
  std::string dir = ::testing::TempDir() + "tpcrt-chat-" + std::to_string(getpid()) + "-" + name;
  mkdir(dir.c_str(), 0755);
  return dir;
}

void writeFile(const std::string &path, const std::string &text) {
  std::ofstream(path, std::ios::binary) << text;
}

} // namespace

TEST(ChatTemplate, LoadsJinjaFileFirst) {
  std::string dir = tempDir("jinja");
  writeFile(dir + "/chat_template.jinja", "from the file");
  writeFile(dir + "/tokenizer_config.json", R"({"chat_template": "from the config"})");
  std::string error;
  EXPECT_EQ(loadChatTemplate(dir, error).value_or(error), "from the file");
}

TEST(ChatTemplate, LoadsTokenizerConfigStringOrDefaultOfList) {
  std::string dir = tempDir("config");
  std::string error;
  writeFile(dir + "/tokenizer_config.json", R"({"chat_template": "plain"})");
  EXPECT_EQ(loadChatTemplate(dir, error).value_or(error), "plain");
  writeFile(dir + "/tokenizer_config.json",
            R"({"chat_template": [{"name": "tool_use", "template": "tools"},
                                  {"name": "default", "template": "the default"}]})");
  EXPECT_EQ(loadChatTemplate(dir, error).value_or(error), "the default");
}

TEST(ChatTemplate, LoadErrorsNameTheFile) {
  std::string dir = tempDir("none");
  std::string error;
  EXPECT_FALSE(loadChatTemplate(dir, error));
  EXPECT_NE(error.find("no chat template in " + dir), std::string::npos) << error;
  writeFile(dir + "/tokenizer_config.json", R"({"bos_token": "<s>"})");
  EXPECT_FALSE(loadChatTemplate(dir, error));
  EXPECT_EQ(error, dir + "/tokenizer_config.json: no \"chat_template\" (and no "
                         "chat_template.jinja beside it)");
  writeFile(dir + "/tokenizer_config.json", R"({"chat_template": [{"name": "x"}]})");
  EXPECT_FALSE(loadChatTemplate(dir, error));
  EXPECT_NE(error.find("no {\"name\": \"default\"}"), std::string::npos) << error;
  mkdir((dir + "/chat_template.jinja").c_str(), 0755); // there, but not a file
  EXPECT_FALSE(loadChatTemplate(dir, error));
  EXPECT_EQ(error, dir + "/chat_template.jinja: cannot be read");
  rmdir((dir + "/chat_template.jinja").c_str());
  writeFile(dir + "/tokenizer_config.json", "{not json");
  EXPECT_FALSE(loadChatTemplate(dir, error));
  EXPECT_NE(error.find("tokenizer_config.json: not valid JSON"), std::string::npos) << error;
}

TEST(ChatTemplate, ChatMLWithGenerationPrompt) {
  const char *chatml = "{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\\n' + m.content + "
                       "'<|im_end|>\\n' }}{% endfor %}{% if add_generation_prompt %}"
                       "{{ '<|im_start|>assistant\\n' }}{% endif %}";
  std::vector<ChatMessage> one = {{"user", "Hi"}};
  EXPECT_EQ(render(chatml, one), "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_EQ(render(chatml, one, false), "<|im_start|>user\nHi<|im_end|>\n");
}

TEST(ChatTemplate, TrimBlocksLstripBlocksAndDashes) {
  // trim_blocks: the newline after a block tag goes; lstrip_blocks: the indent before one.
  EXPECT_EQ(render("{% if true %}\n  a\n  {% endif %}\nb"), "  a\nb");
  // An expression tag keeps both; '-' strips all whitespace on its side.
  EXPECT_EQ(render("  {{ 'x' }}\ny"), "  x\ny");
  EXPECT_EQ(render("a  \n  {{- 'x' -}}  \n  b"), "axb");
  // '+' keeps the indent (lstrip off) and the newline (trim off).
  EXPECT_EQ(render("  {%+ if true +%}\nz{% endif %}"), "  \nz");
  // Comments are blocks too; one trailing newline of the template is dropped, as Jinja does.
  EXPECT_EQ(render("  {# note #}\nq\n"), "q");
}

TEST(ChatTemplate, LoopsVariablesAndControls) {
  EXPECT_EQ(render("{% for m in messages %}{{ loop.index }}{{ loop.index0 }}{{ loop.length }}"
                   "{{ 'F' if loop.first }}{{ 'L' if loop.last }};{% endfor %}"),
            "104F;214;324;434L;");
  EXPECT_EQ(render("{% for m in messages if m.role == 'user' %}{{ m.content }}"
                   "{{ loop.length }}{% endfor %}"),
            "Hi22+2?2");
  EXPECT_EQ(render("{% for x in [] %}x{% else %}empty{% endfor %}"), "empty");
  EXPECT_EQ(render("{% for i in range(10) %}{% if i is odd %}{% continue %}{% endif %}"
                   "{% if i > 6 %}{% break %}{% endif %}{{ i }}{% endfor %}"),
            "0246");
  // set inside a loop stays in it; a namespace carries a value out.
  EXPECT_EQ(render("{% set n = 0 %}{% set ns = namespace(n=0) %}{% for m in messages %}"
                   "{% set n = n + 1 %}{% set ns.n = ns.n + 1 %}{% endfor %}{{ n }} {{ ns.n }}"),
            "0 4");
  EXPECT_EQ(render("{% for k, v in {'a': 1, 'b': 2}.items() %}{{ k }}{{ v }}{% endfor %}"), "a1b2");
}

TEST(ChatTemplate, ExpressionsFiltersAndMethods) {
  EXPECT_EQ(render("{{ messages[1:]|length }} {{ (messages[::-1]|first).content }} "
                   "{{ messages[-1]['content'] }}"),
            "3 2+2? 2+2?");
  EXPECT_EQ(render("{{ 7 // 2 }} {{ -7 % 3 }} {{ 1 / 4 }} {{ 'a' ~ 1 ~ none }} {{ [1] + [2] }}"),
            "3 2 0.25 a1None [1, 2]");
  EXPECT_EQ(render("{{ 'b' in 'abc' and 2 not in [1] }} {{ 0 or 'x' }} {{ 1 < 2 <= 2 }}"),
            "True x True");
  EXPECT_EQ(render("{{ '  x '|trim }}|{{ 'A'|lower }}{{ 'b'|upper }}|{{ ['a', 'b']|join('-') }}|"
                   "{{ {'k': [1, none, true, 'é']}|tojson }}|{{ 3|string + 'x' }}"),
            "x|aB|a-b|{\"k\": [1, null, true, \"é\"]}|3x");
  EXPECT_EQ(render("{{ ' a b '.strip() }}|{{ 'xa'.lstrip('x') }}|{{ 'a,b'.split(',') }}|"
                   "{{ 'abc'.startswith('ab') }}{{ 'abc'.endswith('x') }}|"
                   "{{ 'aXa'.replace('a', 'b') }}|{{ 'Ab'.upper() }}{{ 'Ab'.lower() }}"),
            "a b|a|['a', 'b']|TrueFalse|bXb|ABab");
  EXPECT_EQ(render("{{ bos_token }}{{ eos_token }}{{ tools is none }}"), "<s></s>True");
  // Python's whitespace, not only ASCII's: a no-break space and an ideographic space.
  EXPECT_EQ(render("{{ '\u00a0x\u3000'|trim }}|{{ 'a\u00a0b'.split() }}"), "x|['a', 'b']");
}

TEST(ChatTemplate, UndefinedIsEmptyFalsyAndNotDefined) {
  EXPECT_EQ(render("[{{ nope }}]{{ nope is defined }}{{ nope is not defined }}"
                   "{{ 'y' if nope else 'n' }}{{ nope|default('d') }}{{ messages[0].nope is "
                   "defined }}{{ messages[99] is defined }}"),
            "[]FalseTruend"
            "FalseFalse");
}

TEST(ChatTemplate, UnsupportedConstructIsNamedWithItsLine) {
  EXPECT_EQ(renderError("a\nb\n{% macro f() %}x{% endmacro %}"),
            "chat template line 3: the 'macro' statement is outside the supported Jinja subset");
  EXPECT_EQ(renderError("\n{{ messages | wordwrap }}"),
            "chat template line 2: filter 'wordwrap' is outside the supported Jinja subset");
  EXPECT_EQ(renderError("{% if x is prime %}{% endif %}"),
            "chat template line 1: test 'prime' is outside the supported Jinja subset");
  EXPECT_EQ(renderError("\n\n\n{{ 'a'.zfill(3) }}"),
            "chat template line 4: method 'zfill' of a str value is outside the supported Jinja "
            "subset");
  EXPECT_EQ(renderError("{{ lipsum() }}"),
            "chat template line 1: 'lipsum' is undefined (not a function of the supported Jinja "
            "subset)");
  // Python's integers are unbounded; tpc's are 64 bits, and says so rather than wrap.
  EXPECT_EQ(renderError("{{ 9223372036854775807 + 1 }}"),
            "chat template line 1: integer overflow in '+' (beyond 64 bits)");
  EXPECT_EQ(renderError("{{ '%s' % 1 }}"),
            "chat template line 1: string formatting with '%' is outside the supported Jinja "
            "subset");
  // Jinja's default Undefined: printing is empty, using it further is an error.
  EXPECT_EQ(renderError("\n{{ nope.attr }}"), "chat template line 2: 'nope' is undefined");
  EXPECT_EQ(renderError("{{ 1 + nope }}"), "chat template line 1: 'nope' is undefined");
}

TEST(ChatTemplate, RaiseExceptionGivesItsMessage) {
  EXPECT_EQ(renderError("{% if messages[0].role == 'system' %}"
                        "{{ raise_exception('System role not supported') }}{% endif %}"),
            "System role not supported");
}

TEST(ChatTemplate, UnterminatedTags) {
  EXPECT_EQ(renderError("ok\n{{ messages"), "chat template line 2: unterminated '{{' (no '}}')");
  EXPECT_EQ(renderError("{% for m in messages %}\n"),
            "chat template line 1: 'for' is never closed (expected 'endfor')");
  EXPECT_EQ(renderError("x\n{% if true %}{% endfor %}"),
            "chat template line 2: unexpected 'endfor' inside 'if' opened at line 2");
  EXPECT_EQ(renderError("{# never closed"), "chat template line 1: unterminated comment '{#' "
                                            "(no '#}')");
  EXPECT_EQ(renderError("{{ 'abc }}"), "chat template line 1: unterminated string literal");
  EXPECT_EQ(renderError("{{ }}"), "chat template line 1: empty expression '{{ }}'");
  EXPECT_EQ(renderError("{{ (1 }}"), "chat template line 1: unexpected '}', expected ')'");
  EXPECT_EQ(renderError("{{ [1\n"),
            "chat template line 1: unterminated '{{' (a bracket opened in it is never closed)");
}

TEST(ChatTemplate, HostileNestingIsRefusedNotRecursed) {
  std::string deep = "{{ " + std::string(100000, '(') + "1" + std::string(100000, ')') + " }}";
  EXPECT_NE(renderError(deep).find("nesting deeper than 200 levels"), std::string::npos);
  std::string ifs;
  for (int k = 0; k < 1000; ++k)
    ifs += "{% if true %}";
  EXPECT_NE(renderError(ifs).find("nesting deeper than 200 levels"), std::string::npos);
  std::string chain = "{{ 1";
  for (int k = 0; k < 100000; ++k)
    chain += " + 1";
  EXPECT_NE(renderError(chain + " }}").find("nesting deeper than 200 levels"), std::string::npos);
  std::string filters = "{{ messages";
  for (int k = 0; k < 100000; ++k)
    filters += "|first";
  EXPECT_NE(renderError(filters + " }}").find("nesting deeper than 200 levels"), std::string::npos);
  EXPECT_EQ(renderError("{% set ns = namespace(x=[]) %}{% for i in range(100000) %}"
                        "{% set ns.x = [ns.x] %}{% endfor %}{{ ns.x }}"),
            "chat template: values nested deeper than 200 levels");
  EXPECT_NE(renderError("{{ ('x' * 100000) * 100000 }}").find("too large"), std::string::npos);
  EXPECT_NE(renderError("{{ range(1000000)|length }}").find("range too big"), std::string::npos);
}
