// libtpcrt's chat templates: where loadChatTemplate finds one, the Jinja subset's constructs
// and whitespace rules (test/conformance/chat-template.test compares whole templates with
// transformers), and the errors: a construct outside the subset named with its line,
// raise_exception's message, unterminated tags, and hostile templates and inputs (issue 26):
// checked integer arithmetic, slices and ranges at the ends of int64, UTF-8 in and out, and
// each of ChatTemplateLimits ending what would otherwise crash, hang or take gigabytes.
#include "tpcrt/chat_template.h"

#include <gtest/gtest.h>

#include <fstream>
#include <functional>
#include <pthread.h>
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

std::string renderError(const std::string &source, const ChatOptions &options = ChatOptions(),
                        const std::vector<ChatMessage> &messages = kChat) {
  std::string error;
  std::optional<std::string> out = renderChatTemplate(source, messages, options, error);
  EXPECT_FALSE(out) << "rendered: " << out->substr(0, 200);
  return error;
}

// Rendered with `options`, or "error: " and the error.
std::string renderOr(const std::string &source, const ChatOptions &options = ChatOptions(),
                     const std::vector<ChatMessage> &messages = kChat) {
  std::string error;
  std::optional<std::string> out = renderChatTemplate(source, messages, options, error);
  return out ? *out : "error: " + error;
}

// Runs `body` on a thread with a 1 MiB stack, and waits for it.
void onSmallStack(const std::function<void()> &body) {
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setstacksize(&attr, 1 << 20);
  pthread_t thread;
  auto run = [](void *arg) -> void * {
    (*static_cast<const std::function<void()> *>(arg))();
    return nullptr;
  };
  ASSERT_EQ(pthread_create(&thread, &attr, run, const_cast<std::function<void()> *>(&body)), 0);
  pthread_join(thread, nullptr);
  pthread_attr_destroy(&attr);
}

bool validUtf8(const std::string &s) {
  for (size_t i = 0; i < s.size();) {
    unsigned char c = s[i];
    size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (n == 0 || i + n > s.size())
      return false;
    for (size_t k = 1; k < n; ++k)
      if ((s[i + k] & 0xC0) != 0x80)
        return false;
    i += n;
  }
  return true;
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
            "chat template line 1: values nested deeper than 200 levels (limit maxNesting)");
  EXPECT_EQ(renderError("{{ range(1000000)|length }}"),
            "chat template line 1: Range too big. The sandbox blocks ranges larger than MAX_RANGE "
            "(100000).");
  // Every recursive path of the parser: nested 'generation' blocks too.
  std::string generations;
  for (int k = 0; k < 1000; ++k)
    generations += "{% generation %}";
  EXPECT_NE(renderError(generations).find("nesting deeper than 200 levels (limit maxNesting)"),
            std::string::npos);
}

// ---------------------------------------------------------------------------------------
// Issue 26: what a hostile template or message does, with the default limits unless a test
// says otherwise. Python's answers (jinja2 3.1.6 in transformers' sandbox) are the expected
// values where Python has one; where Python's unbounded integers would go past 64 bits, tpc
// refuses, naming the operation and the line.

const char *const kInt64Min = "(-9223372036854775807 - 1)";

TEST(ChatTemplateHostile, Int64MinDividedByMinusOne) {
  std::string m = kInt64Min;
  // Python: -2**63 // -1 == 2**63, past int64; % -1 is 0; / -1 is a float.
  EXPECT_EQ(renderError("\n{{ " + m + " // -1 }}"),
            "chat template line 2: integer overflow in '//' (beyond 64 bits)");
  EXPECT_EQ(render("{{ " + m + " % -1 }} {{ " + m + " / -1 }} {{ 7 // -1 }} {{ -7 % -1 }}"),
            "0 9.223372036854776e+18 -7 0");
  // jinja2's divisibleby is value % num == 0: this one killed the renderer with SIGFPE.
  EXPECT_EQ(render("{{ " + m + " is divisibleby(-1) }} {{ 9 is divisibleby(-3) }}"), "True True");
  EXPECT_EQ(renderError("{{ 1 is divisibleby(0) }}"),
            "chat template line 1: integer division or modulo by zero");
}

TEST(ChatTemplateHostile, IntegerOverflowNamesTheOperation) {
  std::string m = kInt64Min;
  EXPECT_EQ(renderError("{{ -" + m + " }}"),
            "chat template line 1: integer overflow in '-' (beyond 64 bits)");
  EXPECT_EQ(renderError("{{ " + m + "|abs }}"),
            "chat template line 1: integer overflow in '-' (beyond 64 bits)");
  EXPECT_EQ(renderError("{{ 9223372036854775807 * 2 }}"),
            "chat template line 1: integer overflow in '*' (beyond 64 bits)");
  EXPECT_EQ(renderError("{{ " + m + " - 1 }}"),
            "chat template line 1: integer overflow in '-' (beyond 64 bits)");
  EXPECT_EQ(renderError("\n\n{{ 2 ** 63 }}"),
            "chat template line 3: integer overflow in '**' (beyond 64 bits)");
  // What fits is Python's answer: by squaring, with no round past the result.
  EXPECT_EQ(render("{{ 2 ** 62 }} {{ (-2) ** 63 }} {{ 1 ** 9223372036854775807 }} "
                   "{{ (-1) ** 9223372036854775807 }} {{ 0 ** 0 }} {{ 2 ** -2 }}"),
            "4611686018427387904 -9223372036854775808 1 -1 1 0.25");
  EXPECT_EQ(renderError("{{ 0 ** -1 }}"),
            "chat template line 1: 0.0 cannot be raised to a negative power");
  // Floats to int: NaN takes the default (as jinja2's int filter does), inf is refused.
  EXPECT_EQ(render("{{ 'nan'|float|int }} {{ 3.9|int }} {{ '1e3'|int }} {{ 'x'|int(7) }}"),
            "0 3 1000 7");
  EXPECT_EQ(renderError("{{ (1e308 * 10)|int }}"),
            "chat template line 1: filter 'int': inf does not fit in 64 bits");
}

TEST(ChatTemplateHostile, SliceStepNearInt64MaxStaysInBounds) {
  // The index after the first item overflowed and read out of bounds. Python: [1] and [3].
  EXPECT_EQ(render("{{ [1, 2, 3][::9223372036854775807] }} {{ [1, 2, 3][1::9223372036854775807] }}"
                   " {{ [1, 2, 3][::-9223372036854775807] }} {{ [1, 2, 3][::" +
                   std::string(kInt64Min) + "] }}"),
            "[1] [2] [3] [3]");
  EXPECT_EQ(render("{{ 'aé✓'[::9223372036854775807] }}|{{ 'aé✓'[1::-9223372036854775807] }}|"
                   "{{ 'aé✓'[-9223372036854775807:9223372036854775807] }}"),
            "a|é|aé✓");
  EXPECT_EQ(render("{{ [1, 2, 3, 4, 5][-100:100:2] }} {{ [1, 2, 3, 4, 5][100:-100:-2] }}"),
            "[1, 3, 5] [5, 3, 1]");
}

TEST(ChatTemplateHostile, RangeAtTheEndsOfInt64) {
  // k += step overflowed past the last item.
  EXPECT_EQ(render("{{ range(9223372036854775800, 9223372036854775807, 3)|list }}"),
            "[9223372036854775800, 9223372036854775803, 9223372036854775806]");
  EXPECT_EQ(render("{{ range(" + std::string(kInt64Min) + ", -9223372036854775800, 5)|list }}"),
            "[-9223372036854775808, -9223372036854775803]");
  EXPECT_EQ(render("{{ range(5, " + std::string(kInt64Min) +
                   ", -9223372036854775807)|list }} {{ range(0, 10 ** 12, 10 ** 7)|length }}"),
            "[5, -9223372036854775802] 100000");
  EXPECT_NE(renderError("{{ range(" + std::string(kInt64Min) + ", 9223372036854775807)|length }}")
                .find("Range too big"),
            std::string::npos);
}

TEST(ChatTemplateHostile, NamespaceChainIsFreedWithoutRecursion) {
  // Each namespace is set into the next after it was built, so none looks deep, yet the chain
  // is 100000 long: freeing it recursively overflowed the stack (signal 11).
  const std::string chain = "{% set ns = namespace(x=none) %}{% for i in range(100000) %}"
                            "{% set n2 = namespace(i=none) %}{% set n2.i = ns.x %}"
                            "{% set ns.x = n2 %}{% endfor %}";
  ChatOptions roomy;
  roomy.limits.maxRenderSteps = 10'000'000;
  // On a thread with a 1 MiB stack, as a server's worker might have: 100000 levels of
  // destructors need several times that.
  std::string rendered;
  onSmallStack([&] { rendered = renderOr(chain + "done", roomy); });
  EXPECT_EQ(rendered, "done");
  // Printing it recurses, and stops at the nesting limit.
  EXPECT_EQ(renderOr(chain + "{{ ns }}", roomy),
            "error: chat template line 1: nesting deeper than 200 levels (limit maxNesting)");
  // A namespace that holds itself is a cycle, freed when the rendering ends (LeakSanitizer
  // would say otherwise).
  EXPECT_EQ(render("{% set ns = namespace(a=1) %}{% set ns.me = ns %}{% set ns.l = [ns] %}"
                   "{{ ns.me.me.a }}"),
            "1");
}

TEST(ChatTemplateHostile, NestedRangeLoopsEndAtTheStepLimit) {
  // 10^10 iterations hung `tpc run --chat`.
  EXPECT_EQ(renderError("{% for i in range(100000) %}\n{% for j in range(100000) %}"
                        "{% endfor %}{% endfor %}"),
            "chat template line 2: more than 1000000 render steps (limit maxRenderSteps)");
  // Filters' items count: a sum over a list in a loop was 10^10 additions.
  EXPECT_EQ(renderError("{% set l = range(100000)|list %}{% for i in range(100000) %}{{ l|sum }}"
                        "{% endfor %}"),
            "chat template line 1: more than 1000000 render steps (limit maxRenderSteps)");
}

TEST(ChatTemplateHostile, GrowthStopsAtTheSizeLimits) {
  auto error = [](const std::string &source) { return renderError(source); };
  const std::string strings = "(limit maxStringBytes)", items = "(limit maxItems)";
  // Doubling a string or a list in a namespace: 2^64 bytes or items.
  EXPECT_NE(error("{% set ns = namespace(s='x') %}{% for i in range(64) %}"
                  "{% set ns.s = ns.s + ns.s %}{% endfor %}")
                .find("a string of more than 16777216 bytes " + strings),
            std::string::npos);
  // (A list's items are steps as they are copied: the doubling runs out of those first.)
  EXPECT_NE(error("{% set ns = namespace(l=[1]) %}{% for i in range(64) %}"
                  "{% set ns.l = ns.l + ns.l %}{% endfor %}")
                .find("(limit maxRenderSteps)"),
            std::string::npos);
  ChatOptions manySteps;
  manySteps.limits.maxRenderSteps = 100'000'000;
  EXPECT_NE(renderError("{% set ns = namespace(l=[1]) %}{% for i in range(64) %}"
                        "{% set ns.l = ns.l + ns.l %}{% endfor %}",
                        manySteps)
                .find("a list of more than 1000000 items " + items),
            std::string::npos);
  // tojson's indent: a string of spaces per level.
  EXPECT_NE(error("{{ [[[[1]]]]|tojson(indent=100000000) }}").find(strings), std::string::npos);
  EXPECT_NE(error("{{ {'a': 1}|tojson(indent=1000000000000000) }}").find(strings),
            std::string::npos);
  // replace('') inserts around every character: three times the text each round.
  EXPECT_NE(error("{% set ns = namespace(s='x' * 1000) %}{% for i in range(30) %}"
                  "{% set ns.s = ns.s.replace('', 'yy') %}{% endfor %}")
                .find(strings),
            std::string::npos);
  // Iterating a large string made a value per character.
  EXPECT_NE(error("{% for c in 'x' * 10000000 %}{% endfor %}")
                .find("a list of characters of more than 1000000 items " + items),
            std::string::npos);
  // Repetition and join, refused before anything is built.
  EXPECT_NE(error("{{ 'x' * 100000000 }}").find(strings), std::string::npos);
  EXPECT_NE(error("{{ [1] * 100000000 }}").find(items), std::string::npos);
  EXPECT_NE(error("{{ 'x' * 9223372036854775807 }}").find(strings), std::string::npos);
  EXPECT_NE(error("{{ (['x' * 1000000] * 1000)|join }}").find(strings), std::string::npos);
  EXPECT_NE(error("{{ ['x' * 1000000] * 1000 }}").find(strings), std::string::npos);
  // Empty units repeat to nothing, however many times.
  EXPECT_EQ(render("[{{ '' * 9223372036854775807 }}{{ 'x' * -5 }}]{{ [] * 1000000000 }}"), "[][]");
}

TEST(ChatTemplateHostile, QuadraticFiltersAreLinear) {
  // unique compared each item with every kept one: 5 * 10^9 comparisons here.
  EXPECT_EQ(render("{{ range(100000)|unique|list|length }} "
                   "{{ range(100000)|map('string')|unique|list|length }}"),
            "100000 100000");
  // jinja2's unique: strings compared ignoring case unless case_sensitive, tuples by value.
  EXPECT_EQ(render("{{ [1, 1.0, true, 'A', 'a', (1, 2), (1, 2)]|unique|list }} "
                   "{{ ['a', 'A']|unique(true)|list }}"),
            "[1, 'A', (1, 2)] ['a', 'A']");
  EXPECT_EQ(renderError("{{ [[1], [1]]|unique|list }}"),
            "chat template line 1: unhashable type: 'list'");
  // A text search is linear (glibc's two-way memmem), where std::string::find is not.
  EXPECT_EQ(render("{% set s = 'a' * 4000000 %}{{ (s ~ 'b') in (s ~ s) }}"), "False");
}

TEST(ChatTemplateHostile, EachLimitIsNamedWhenExceeded) {
  ChatOptions o;
  o.limits.maxRenderSteps = 10;
  EXPECT_EQ(renderError("{% for i in range(20) %}{% endfor %}", o),
            "chat template line 1: more than 10 render steps (limit maxRenderSteps)");
  o = ChatOptions();
  o.limits.maxOutputBytes = 5;
  EXPECT_EQ(renderError("abc\n{{ 'def' }}", o),
            "chat template line 2: output of more than 5 bytes (limit maxOutputBytes)");
  o = ChatOptions();
  o.limits.maxStringBytes = 3;
  EXPECT_EQ(renderError("{{ 'ab' ~ 'cd' }}", o),
            "chat template line 1: a string of more than 3 bytes (limit maxStringBytes)");
  o = ChatOptions();
  o.limits.maxItems = 2;
  EXPECT_EQ(renderError("{{ [1, 2, 3] }}", o),
            "chat template line 1: a list of more than 2 items (limit maxItems)");
  EXPECT_EQ(renderError("{% set ns = namespace(a=1, b=2) %}{% set ns.c = 3 %}", o),
            "chat template line 1: a namespace of more than 2 items (limit maxItems)");
  o = ChatOptions();
  o.limits.maxTextWork = 100;
  EXPECT_EQ(renderError("{{ 'x' * 60 }}{{ 'y' * 60 }}", o),
            "chat template line 1: more than 100 bytes of text built or scanned (limit "
            "maxTextWork)");
  o = ChatOptions();
  o.limits.maxNesting = 3;
  EXPECT_EQ(renderError("{{ [[[[1]]]] }}", o),
            "chat template line 1: nesting deeper than 3 levels (limit maxNesting)");
  const std::string three = "{% set a = [1] %}{% set b = [a] %}{% set c = [b] %}";
  EXPECT_EQ(renderError(three + "{% set ns = namespace(x=c) %}", o),
            "chat template line 1: values nested deeper than 3 levels (limit maxNesting)");
  // Checked when a namespace changes, not only when it is built.
  EXPECT_EQ(renderError(three + "{% set ns = namespace(x=1) %}\n{% set ns.x = c %}", o),
            "chat template line 2: values nested deeper than 3 levels (limit maxNesting)");
  o.limits.maxNesting = 501;
  EXPECT_EQ(renderError("x", o), "ChatTemplateLimits::maxNesting is 501: it must be from 1 to 500");
  o = ChatOptions();
  o.limits.maxTemplateBytes = 4;
  EXPECT_EQ(renderError("hello", o),
            "the chat template is 5 bytes, more than 4 (limit maxTemplateBytes)");
}

TEST(ChatTemplateHostile, LongConversationRendersWithTheDefaults) {
  // A ChatML template with what real ones do per message (a loop with conditions, trim,
  // split and a namespace): 1000 messages of a few hundred bytes are well inside every limit.
  std::vector<ChatMessage> conversation = {{"system", "Be brief."}};
  std::string expected = "<|im_start|>system\nBe brief.<|im_end|>\n";
  for (int k = 0; k < 1000; ++k) {
    std::string content = "Message " + std::to_string(k) + ": ";
    for (int r = 0; r < 20; ++r)
      content += "lorem ipsum é ✓ ";
    conversation.push_back({k % 2 ? "assistant" : "user", content});
    expected += std::string("<|im_start|>") + (k % 2 ? "assistant" : "user") + "\n" +
                content.substr(0, content.size() - 1) + "<|im_end|>\n";
  }
  expected += "<|im_start|>assistant\n";
  const char *chatml =
      "{% set ns = namespace(last=-1) %}{% for m in messages %}"
      "{% if m.role == 'user' %}{% set ns.last = loop.index0 %}{% endif %}{% endfor %}"
      "{% for m in messages %}{% set content = m.content|trim %}"
      "{% if '</think>' in content %}{% set content = content.split('</think>')[-1] %}{% endif %}"
      "{{ '<|im_start|>' + m.role + '\\n' + content + '<|im_end|>\\n' }}{% endfor %}"
      "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";
  EXPECT_EQ(render(chatml, conversation), expected);
}

TEST(ChatTemplateHostile, InvalidUtf8InputsAreNamed) {
  std::vector<ChatMessage> messages = {{"user", "fine"}, {"assistant", "ab\xff"}};
  EXPECT_EQ(renderError("{{ messages }}", ChatOptions(), messages),
            "messages[1].content: not valid UTF-8 (the byte at offset 2, 0xff, begins no "
            "character)");
  messages = {{"us\xc3", "fine"}};
  EXPECT_EQ(renderError("x", ChatOptions(), messages),
            "messages[0].role: not valid UTF-8 (the byte at offset 2, 0xc3, begins no "
            "character)");
  // A surrogate's encoding and an overlong one are not UTF-8 either, as Python decodes it.
  messages = {{"user", "\xed\xa0\x80"}};
  EXPECT_NE(renderError("x", ChatOptions(), messages).find("offset 0, 0xed"), std::string::npos);
  ChatOptions o;
  o.eosToken = "\xc0\xaf";
  EXPECT_EQ(renderError("x", o),
            "eos_token: not valid UTF-8 (the byte at offset 0, 0xc0, begins no character)");
  EXPECT_EQ(renderError("ok\nthen \x80"),
            "chat template line 2: not valid UTF-8 (the byte at offset 8, 0x80, begins no "
            "character)");
}

TEST(ChatTemplateHostile, StringEscapesMakeUtf8OrAnError) {
  // Python's unicode-escape, as jinja2 decodes literals.
  EXPECT_EQ(render("{{ '\\u00e9\\x41\\101\\012|\\a\\v|\\U0001F600|\\q' }}"), "éAA\n|\a\v|😀|\\q");
  // A backslash before a non-ASCII character escapes jinja2's own escape of it.
  EXPECT_EQ(render("{{ '\\é' }}"), "\\xe9");
  EXPECT_EQ(renderError("\n{{ 'a\\ud800' }}"),
            "chat template line 2: the escape \\ud800 in a string literal is a lone surrogate, "
            "which has no UTF-8 form");
  EXPECT_EQ(renderError("{{ '\\udfff\\ud83d' }}"),
            "chat template line 1: the escape \\udfff in a string literal is a lone surrogate, "
            "which has no UTF-8 form");
  EXPECT_EQ(renderError("{{ '\\U00110000' }}"),
            "chat template line 1: illegal Unicode character \\U00110000 in a string literal");
  // Malformed: Python's words, never a bare "stoul".
  EXPECT_EQ(renderError("{{ '\\uzzzz' }}"),
            "chat template line 1: truncated \\uXXXX escape in a string literal");
  EXPECT_EQ(renderError("{{ '\\x4' }}"),
            "chat template line 1: truncated \\xXX escape in a string literal");
  EXPECT_EQ(renderError("{{ '\\u12"),
            "chat template line 1: truncated \\uXXXX escape in a string literal");
}

TEST(ChatTemplateHostile, StringOperationsKeepWholeCharacters) {
  // Python slices, indexes, reverses and strips by code point.
  std::string out = render("{{ 'héllo wörld'[-3:] }}|{{ 'héllo wörld'[::-3] }}|"
                           "{{ 'héllo wörld'[2:8:2] }}|{{ 'héllo'[-4] }}|{{ 'é✓x'|reverse }}|"
                           "{{ 'éaé'.strip('é') }}|{{ 'é✓'|first }}{{ 'é✓'|last }}|"
                           "{{ 'a\\u3000b c'.split() }}|{{ 'héllo'.replace('', '-', 3) }}|"
                           "{{ 'héllo'.find('l') }}|{{ '✓é'|tojson }}");
  EXPECT_EQ(out, "rld|döoé|low|é|x✓é|a|é✓|['a', 'b', 'c']|-h-é-llo|2|\"✓é\"");
  EXPECT_TRUE(validUtf8(out));
  // Indexing text that is not ASCII walks from a mark every 64 characters, not from the start.
  EXPECT_EQ(render("{% set s = 'é✓' * 1000 %}{{ s[1999] }}{{ s[-2000] }}{{ s[1000] }}{{ s[63] }}"
                   "{{ s[64] }}{{ s[-1] }}{{ s[2000] is defined }}"),
            "✓éé✓é✓False");
}
