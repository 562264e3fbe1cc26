// Parsing: a recursive-descent parser over each tag's tokens (ExprParser, with Jinja's
// operator precedence), and one over the pieces that matches each block with its end
// (Parser). Both recurse one level per bracket, 'not', sign or block, so each counts its
// depth against maxNesting: the tree they build is what the renderer recurses into.
#include "jinja_parser.h"

#include "jinja_error.h"
#include "jinja_filters.h"

#include <algorithm>
#include <iterator>

namespace tpcrt::jinja {
namespace {

bool known(const char *const *begin, const char *const *end, const std::string &name) {
  return std::any_of(begin, end, [&](const char *n) { return name == n; });
}

class ExprParser {
public:
  ExprParser(const std::vector<Tok> &toks, size_t start, int line, int maxNesting)
      : toks(toks), at(start), line(line), maxNesting(maxNesting) {}

  const std::vector<Tok> &toks;
  size_t at;
  int line;
  int maxNesting;

  const Tok *peek(size_t ahead = 0) const {
    return at + ahead < toks.size() ? &toks[at + ahead] : nullptr;
  }
  int curLine() const { return peek() ? peek()->line : line; }
  bool isOp(const char *op, size_t ahead = 0) const {
    const Tok *t = peek(ahead);
    return t && t->kind == Tok::Op && t->text == op;
  }
  bool isName(const char *name, size_t ahead = 0) const {
    const Tok *t = peek(ahead);
    return t && t->kind == Tok::Name && t->text == name;
  }
  std::string describe() const {
    return peek() ? "'" + peek()->text + "'" : std::string("the end of the tag");
  }
  void expectOp(const char *op) {
    if (!isOp(op))
      fail(curLine(), std::string("expected '") + op + "', found " + describe());
    ++at;
  }
  std::string expectName() {
    if (!peek() || peek()->kind != Tok::Name)
      fail(curLine(), "expected a name, found " + describe());
    return toks[at++].text;
  }
  void expectEnd() {
    if (peek())
      fail(curLine(), "unexpected " + describe() + " in the tag");
  }

  ExprP make(Expr::Kind kind, int l, std::vector<ExprP> args = {}) {
    auto e = std::make_shared<Expr>();
    e->kind = kind;
    e->line = l;
    e->args = std::move(args);
    for (const ExprP &a : e->args)
      if (a)
        grew(*e, *a);
    return e;
  }
  // Left-deep chains (a + b + c ..., x.a.b ..., f|g|h ...) are built by loops, not recursion:
  // their height is checked here, as each operand is added, so that evaluating (and freeing)
  // a tree never recurses deeper than maxNesting.
  void grew(Expr &e, const Expr &child) {
    e.height = std::max(e.height, child.height + 1);
    if (e.height > maxNesting)
      overLimit(e.line, "nesting deeper than " + std::to_string(maxNesting) + " levels",
                "maxNesting");
  }
  void addArg(const ExprP &e, ExprP arg) {
    grew(*e, *arg);
    e->args.push_back(std::move(arg));
  }

  // Brackets, 'not' and unary signs: what the parser recurses into, one level each.
  int depth = 0;

  ExprP expr(bool withCond = true) {
    DepthGuard guard(depth, maxNesting, curLine());
    ExprP a = orExpr();
    while (withCond && isName("if")) {
      int l = curLine();
      ++at;
      ExprP c = orExpr();
      ExprP b;
      if (isName("else")) {
        ++at;
        b = expr();
      }
      a = make(Expr::Cond, l, {a, c, b});
    }
    return a;
  }
  ExprP orExpr() {
    ExprP a = andExpr();
    while (isName("or")) {
      int l = curLine();
      ++at;
      a = make(Expr::Or, l, {a, andExpr()});
    }
    return a;
  }
  ExprP andExpr() {
    ExprP a = notExpr();
    while (isName("and")) {
      int l = curLine();
      ++at;
      a = make(Expr::And, l, {a, notExpr()});
    }
    return a;
  }
  ExprP notExpr() {
    if (isName("not")) {
      DepthGuard guard(depth, maxNesting, curLine());
      int l = curLine();
      ++at;
      return make(Expr::Not, l, {notExpr()});
    }
    return compare();
  }
  ExprP compare() {
    int l = curLine();
    ExprP a = math1();
    ExprP cmp;
    for (;;) {
      std::string op;
      if (peek() && peek()->kind == Tok::Op &&
          known(std::begin(kCmpOps), std::end(kCmpOps), peek()->text)) {
        op = toks[at++].text;
      } else if (isName("in")) {
        ++at;
        op = "in";
      } else if (isName("not") && isName("in", 1)) {
        at += 2;
        op = "not in";
      } else {
        break;
      }
      if (!cmp)
        cmp = make(Expr::Cmp, l, {a});
      cmp->ops.push_back(op);
      addArg(cmp, math1());
    }
    return cmp ? cmp : a;
  }
  static constexpr const char *kCmpOps[] = {"==", "!=", "<", ">", "<=", ">="};

  ExprP binary(ExprP a, const std::string &op, ExprP b, int l) {
    ExprP e = make(Expr::Bin, l, {a, b});
    e->name = op;
    return e;
  }
  ExprP math1() {
    ExprP a = concat();
    while (isOp("+") || isOp("-")) {
      int l = curLine();
      std::string op = toks[at++].text;
      a = binary(a, op, concat(), l);
    }
    return a;
  }
  ExprP concat() {
    ExprP a = math2();
    while (isOp("~")) {
      int l = curLine();
      ++at;
      a = binary(a, "~", math2(), l);
    }
    return a;
  }
  ExprP math2() {
    ExprP a = pow();
    while (isOp("*") || isOp("/") || isOp("//") || isOp("%")) {
      int l = curLine();
      std::string op = toks[at++].text;
      a = binary(a, op, pow(), l);
    }
    return a;
  }
  ExprP pow() {
    ExprP a = unary();
    while (isOp("**")) {
      int l = curLine();
      ++at;
      a = binary(a, "**", unary(), l);
    }
    return a;
  }
  ExprP unary(bool withFilter = true) {
    int l = curLine();
    ExprP e;
    if (isOp("-") || isOp("+")) {
      DepthGuard guard(depth, maxNesting, l);
      bool neg = isOp("-");
      ++at;
      e = make(neg ? Expr::Neg : Expr::Pos, l, {unary(false)});
    } else {
      e = primary();
    }
    e = postfix(e);
    return withFilter ? filters(e) : e;
  }
  ExprP literal(Value v, int l) {
    ExprP e = make(Expr::Lit, l);
    e->lit = std::move(v);
    return e;
  }
  ExprP primary() {
    const Tok *t = peek();
    if (!t)
      fail(line, "expected an expression, found the end of the tag");
    int l = t->line;
    switch (t->kind) {
    case Tok::Name: {
      ++at;
      const std::string &n = t->text;
      if (n == "true" || n == "True")
        return literal(Value::boolean(true), l);
      if (n == "false" || n == "False")
        return literal(Value::boolean(false), l);
      if (n == "none" || n == "None")
        return literal(Value::none(), l);
      ExprP e = make(Expr::Name, l);
      e->name = n;
      return e;
    }
    case Tok::Str: {
      std::string s;
      while (peek() && peek()->kind == Tok::Str)
        s += toks[at++].text;
      return literal(Value::str(s), l);
    }
    case Tok::Int:
      ++at;
      return literal(Value::integer(t->i), l);
    case Tok::Float:
      ++at;
      return literal(Value::number(t->f), l);
    case Tok::Op:
      break;
    }
    if (isOp("(")) {
      ++at;
      if (isOp(")")) {
        ++at;
        ExprP empty = make(Expr::ListE, l);
        empty->tuple = true;
        return empty;
      }
      ExprP e = expr();
      if (isOp(",")) {
        ExprP tuple = make(Expr::ListE, l, {e});
        tuple->tuple = true;
        while (isOp(",")) {
          ++at;
          if (isOp(")"))
            break;
          addArg(tuple, expr());
        }
        e = tuple;
      }
      expectOp(")");
      return e;
    }
    if (isOp("[")) {
      ++at;
      ExprP e = make(Expr::ListE, l);
      while (!isOp("]")) {
        addArg(e, expr());
        if (!isOp(","))
          break;
        ++at;
      }
      expectOp("]");
      return e;
    }
    if (isOp("{")) {
      ++at;
      ExprP e = make(Expr::DictE, l);
      while (!isOp("}")) {
        addArg(e, expr());
        expectOp(":");
        addArg(e, expr());
        if (!isOp(","))
          break;
        ++at;
      }
      expectOp("}");
      return e;
    }
    fail(l, "unexpected '" + t->text + "' in an expression");
  }
  void callArgs(const ExprP &e) {
    expectOp("(");
    while (!isOp(")")) {
      if (peek() && peek()->kind == Tok::Name && isOp("=", 1)) {
        std::string key = toks[at].text;
        at += 2;
        ExprP value = expr();
        grew(*e, *value);
        e->kwargs.emplace_back(key, std::move(value));
      } else {
        addArg(e, expr());
      }
      if (!isOp(","))
        break;
      ++at;
    }
    expectOp(")");
  }
  ExprP postfix(ExprP e) {
    for (;;) {
      int l = curLine();
      if (isOp(".")) {
        ++at;
        const Tok *t = peek();
        if (!t || (t->kind != Tok::Name && t->kind != Tok::Int))
          fail(l, "expected an attribute name after '.', found " + describe());
        ++at;
        if (t->kind == Tok::Int) {
          e = make(Expr::Item, l, {e, literal(Value::integer(t->i), l)});
        } else {
          e = make(Expr::Attr, l, {e});
          e->name = t->text;
        }
      } else if (isOp("[")) {
        ++at;
        ExprP start, stop, step;
        if (!isOp(":"))
          start = expr();
        if (isOp(":")) {
          ++at;
          if (!isOp("]") && !isOp(":"))
            stop = expr();
          if (isOp(":")) {
            ++at;
            if (!isOp("]"))
              step = expr();
          }
          expectOp("]");
          e = make(Expr::Slice, l, {e, start, stop, step});
        } else {
          expectOp("]");
          e = make(Expr::Item, l, {e, start});
        }
      } else if (isOp("(")) {
        e = make(Expr::Call, l, {e});
        callArgs(e);
      } else {
        return e;
      }
    }
  }
  ExprP filters(ExprP e) {
    for (;;) {
      int l = curLine();
      if (isOp("|")) {
        ++at;
        std::string name = expectName();
        if (!findFilter(name))
          fail(l, "filter '" + name + "' is outside the supported Jinja subset");
        e = make(Expr::Filter, l, {e});
        e->name = name;
        if (isOp("("))
          callArgs(e);
      } else if (isName("is")) {
        ++at;
        bool negated = false;
        if (isName("not")) {
          ++at;
          negated = true;
        }
        std::string name = expectName();
        if (!findTest(name))
          fail(l, "test '" + name + "' is outside the supported Jinja subset");
        e = make(Expr::Test, l, {e});
        e->name = name;
        e->negated = negated;
        if (isOp("(")) {
          callArgs(e);
        } else if (const Tok *t = peek()) {
          static const char *const kStop[] = {"and", "or", "else", "if", "is", "in", "not"};
          bool starts = t->kind != Tok::Op ? !(t->kind == Tok::Name &&
                                               known(std::begin(kStop), std::end(kStop), t->text))
                                           : (t->text == "[" || t->text == "{" || t->text == "-");
          if (starts) {
            addArg(e, postfix(primary()));
          }
        }
      } else {
        return e;
      }
    }
  }
};

class Parser {
public:
  Parser(std::vector<Piece> pieces, int maxNesting)
      : pieces(std::move(pieces)), maxNesting(maxNesting) {}

  std::vector<Node> parse() {
    std::string endKw;
    std::vector<Node> nodes = body({}, endKw, 0, "");
    return nodes;
  }

private:
  std::vector<Piece> pieces;
  int maxNesting;
  size_t at = 0;
  int loopDepth = 0;
  int blockDepth = 0;

  // Parses until one of `ends` (left in endKw, its tag's parser positioned after the keyword).
  std::vector<Node> body(const std::vector<std::string> &ends, std::string &endKw, int openLine,
                         const std::string &opener) {
    std::vector<Node> nodes;
    while (at < pieces.size()) {
      Piece &p = pieces[at++];
      if (p.kind == Piece::Text) {
        Node n{Node::Text, p.line};
        n.text = p.text;
        nodes.push_back(std::move(n));
        continue;
      }
      ExprParser ep(p.toks, 0, p.line, maxNesting);
      if (p.kind == Piece::Output) {
        Node n{Node::Output, p.line};
        n.expr = ep.expr();
        ep.expectEnd();
        nodes.push_back(std::move(n));
        continue;
      }
      if (p.toks[0].kind != Tok::Name)
        fail(p.line, "expected a statement name after '{%', found '" + p.toks[0].text + "'");
      std::string kw = p.toks[0].text;
      ep.at = 1;
      if (std::find(ends.begin(), ends.end(), kw) != ends.end()) {
        endKw = kw;
        current = std::make_unique<ExprParser>(p.toks, 1, p.line, maxNesting);
        return nodes;
      }
      if (kw == "if") {
        nodes.push_back(parseIf(ep, p.line));
      } else if (kw == "for") {
        nodes.push_back(parseFor(ep, p.line));
      } else if (kw == "set") {
        Node n{Node::Set, p.line};
        n.targets.push_back(ep.expectName());
        if (ep.isOp(".")) {
          ++ep.at;
          n.attr = ep.expectName();
        }
        if (ep.isOp(","))
          fail(p.line, "'set' with several targets is outside the supported Jinja subset");
        if (!ep.isOp("="))
          fail(p.line, "block 'set' (without '=') is outside the supported Jinja subset");
        ++ep.at;
        n.expr = ep.expr();
        ep.expectEnd();
        nodes.push_back(std::move(n));
      } else if (kw == "break" || kw == "continue") {
        if (loopDepth == 0)
          fail(p.line, "'" + kw + "' outside a 'for' loop");
        ep.expectEnd();
        nodes.push_back(Node{kw == "break" ? Node::Break : Node::Continue, p.line});
      } else if (kw == "generation") { // transformers' assistant-mask marker: no output
        DepthGuard guard(blockDepth, maxNesting, p.line);
        ep.expectEnd();
        std::string end;
        std::vector<Node> inner = body({"endgeneration"}, end, p.line, "generation");
        current->expectEnd();
        for (Node &n : inner)
          nodes.push_back(std::move(n));
      } else if (kw == "endfor" || kw == "endif" || kw == "else" || kw == "elif" ||
                 kw == "endset" || kw == "endmacro" || kw == "endgeneration") {
        fail(p.line, "unexpected '" + kw + "'" +
                         (opener.empty() ? std::string()
                                         : " inside '" + opener + "' opened at line " +
                                               std::to_string(openLine)));
      } else if (kw == "macro" || kw == "call" || kw == "filter" || kw == "raw" || kw == "with" ||
                 kw == "include" || kw == "import" || kw == "from" || kw == "extends" ||
                 kw == "block" || kw == "do" || kw == "autoescape") {
        fail(p.line, "the '" + kw + "' statement is outside the supported Jinja subset");
      } else {
        fail(p.line, "unknown statement '" + kw + "'");
      }
    }
    if (!ends.empty())
      fail(openLine, "'" + opener + "' is never closed (expected '" + ends.back() + "')");
    return nodes;
  }

  Node parseIf(ExprParser &ep, int line) {
    DepthGuard guard(blockDepth, maxNesting, line);
    Node n{Node::If, line};
    ExprP cond = ep.expr();
    ep.expectEnd();
    for (;;) {
      std::string end;
      std::vector<Node> b = body({"elif", "else", "endif"}, end, line, "if");
      n.branches.emplace_back(cond, std::move(b));
      if (end == "elif") {
        cond = current->expr();
        current->expectEnd();
        continue;
      }
      current->expectEnd();
      if (end == "else") {
        n.elseBody = body({"endif"}, end, line, "if");
        current->expectEnd();
      }
      return n;
    }
  }

  Node parseFor(ExprParser &ep, int line) {
    DepthGuard guard(blockDepth, maxNesting, line);
    Node n{Node::For, line};
    n.targets.push_back(ep.expectName());
    while (ep.isOp(",")) {
      ++ep.at;
      n.targets.push_back(ep.expectName());
    }
    if (!ep.isName("in"))
      fail(line, "expected 'in' in 'for', found " + ep.describe());
    ++ep.at;
    n.expr = ep.expr(false);
    if (ep.isName("if")) {
      ++ep.at;
      n.cond = ep.expr(false);
    }
    if (ep.isName("recursive"))
      fail(line, "recursive 'for' is outside the supported Jinja subset");
    ep.expectEnd();
    ++loopDepth;
    std::string end;
    n.body = body({"else", "endfor"}, end, line, "for");
    --loopDepth;
    current->expectEnd();
    if (end == "else") {
      n.elseBody = body({"endfor"}, end, line, "for");
      current->expectEnd();
    }
    return n;
  }

  std::unique_ptr<ExprParser> current; // the closing tag's rest, for elif's condition
};

} // namespace

std::vector<Node> parse(std::vector<Piece> pieces, int maxNesting) {
  return Parser(std::move(pieces), maxNesting).parse();
}

} // namespace tpcrt::jinja
