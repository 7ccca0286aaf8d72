// Jinja template -> tree (io/jinja_ast.hpp): over the segments and tokens of io/jinja_lex.hpp, a recursive
// descent parser with jinja2's precedence builds the tree
// (parser.py: or < and < not < compare < + - < ~ < * / // % < unary, then postfix, filters and tests).
#include <algorithm>
#include <array>
#include <cctype>
#include <set>

#include <fmt/format.h>

#include "io/jinja_ast.hpp"
#include "io/jinja_lex.hpp"
#include "latentllm/error.hpp"

namespace latentllm::io::jinja {
namespace {

// Recursive descent over one tag's tokens.
class ExprParser {
 public:
  ExprParser(std::vector<Token> tokens, std::string where, int line)
      : t_(std::move(tokens)), where_(std::move(where)), line_(line) {}

  const Token& peek(std::size_t k = 0) const { return t_[std::min(i_ + k, t_.size() - 1)]; }
  bool at_op(std::string_view op) const { return peek().kind == Token::Kind::Op && peek().text == op; }
  bool at_name(std::string_view n) const { return peek().kind == Token::Kind::Name && peek().text == n; }
  bool at_end() const { return peek().kind == Token::Kind::End; }
  Token next() { return t_[std::min(i_++, t_.size() - 1)]; }
  [[noreturn]] void fail(std::string_view expected) const {
    const Token& t = peek();
    throw FormatError(fmt::format("{}: line {}: {} (expected {}, got {})", where_, line_, "syntax", expected,
                                  t.kind == Token::Kind::End ? std::string("the end of the tag")
                                                             : fmt::format("'{}'", t.text)));
  }
  void expect_op(std::string_view op) {
    if (!at_op(op)) fail(fmt::format("'{}'", op));
    ++i_;
  }
  std::string expect_name() {
    if (peek().kind != Token::Kind::Name) fail("a name");
    return next().text;
  }
  void expect_end() {
    if (!at_end()) fail("the end of the tag");
  }

  // Nesting of expressions, bounded so that an untrusted template cannot exhaust the stack (recursive
  // descent here, recursive evaluation later).
  struct Nesting {
    explicit Nesting(ExprParser& p) : p_(p) {
      if (++p_.depth_ > kMaxNesting) p_.fail(fmt::format("at most {} nested expressions", kMaxNesting));
    }
    ~Nesting() { --p_.depth_; }
    ExprParser& p_;
  };
  static constexpr int kMaxNesting = 200, kMaxNodes = 2000;
  int depth_ = 0, nodes_ = 0;

  ExprPtr make(Expr::Kind k, std::string name = {}) {
    // Left-associative chains (a + b + ..., filters) deepen the tree without nesting: bounded by size.
    if (++nodes_ > kMaxNodes) fail(fmt::format("at most {} terms in one tag", kMaxNodes));
    auto e = std::make_unique<Expr>();
    e->kind = k;
    e->line = line_;
    e->name = std::move(name);
    return e;
  }

  // A full expression: a conditional expression (`a if c else b`) or a bare tuple `a, b`.
  ExprPtr expression(bool allow_tuple = false) {
    const Nesting guard(*this);
    ExprPtr first = conditional();
    if (!allow_tuple || !at_op(",")) return first;
    ExprPtr t = make(Expr::Kind::Tuple);
    t->args.push_back(std::move(first));
    while (at_op(",")) {
      ++i_;
      if (at_end()) break;
      t->args.push_back(conditional());
    }
    return t;
  }

  ExprPtr conditional() {
    ExprPtr e = or_expr();
    while (at_name("if")) {
      ++i_;
      ExprPtr c = make(Expr::Kind::Conditional);
      c->args.push_back(or_expr());
      c->args.push_back(std::move(e));
      if (at_name("else")) {
        ++i_;
        c->args.push_back(or_expr());
      } else {
        c->args.push_back(nullptr);
      }
      e = std::move(c);
    }
    return e;
  }

  ExprPtr binary(ExprPtr l, std::string op, ExprPtr r) {
    ExprPtr b = make(Expr::Kind::Binary, std::move(op));
    b->args.push_back(std::move(l));
    b->args.push_back(std::move(r));
    return b;
  }

  ExprPtr or_expr() {
    ExprPtr e = and_expr();
    while (at_name("or")) {
      ++i_;
      e = binary(std::move(e), "or", and_expr());
    }
    return e;
  }
  ExprPtr and_expr() {
    ExprPtr e = not_expr();
    while (at_name("and")) {
      ++i_;
      e = binary(std::move(e), "and", not_expr());
    }
    return e;
  }
  ExprPtr not_expr() {
    const Nesting guard(*this);
    if (at_name("not")) {
      ++i_;
      ExprPtr u = make(Expr::Kind::Unary, "not");
      u->args.push_back(not_expr());
      return u;
    }
    return compare();
  }
  ExprPtr compare() {
    ExprPtr e = math1();
    for (;;) {
      if (peek().kind == Token::Kind::Op &&
          (at_op("==") || at_op("!=") || at_op("<") || at_op(">") || at_op("<=") || at_op(">="))) {
        const std::string op = next().text;
        e = binary(std::move(e), op, math1());
      } else if (at_name("in")) {
        ++i_;
        e = binary(std::move(e), "in", math1());
      } else if (at_name("not") && peek(1).kind == Token::Kind::Name && peek(1).text == "in") {
        i_ += 2;
        e = binary(std::move(e), "not in", math1());
      } else {
        return e;
      }
    }
  }
  ExprPtr math1() {
    ExprPtr e = concat();
    while (at_op("+") || at_op("-")) {
      const std::string op = next().text;
      e = binary(std::move(e), op, concat());
    }
    return e;
  }
  ExprPtr concat() {
    ExprPtr e = math2();
    while (at_op("~")) {
      ++i_;
      e = binary(std::move(e), "~", math2());
    }
    return e;
  }
  ExprPtr math2() {
    ExprPtr e = unary();
    while (at_op("*") || at_op("/") || at_op("//") || at_op("%")) {
      const std::string op = next().text;
      e = binary(std::move(e), op, unary());
    }
    return e;
  }
  ExprPtr unary(bool with_filter = true) {
    const Nesting guard(*this);
    ExprPtr e;
    if (at_op("-") || at_op("+")) {
      const std::string op = next().text;
      e = make(Expr::Kind::Unary, op);
      e->args.push_back(unary(false));
    } else {
      e = postfix(primary());
    }
    return with_filter ? filters(std::move(e)) : std::move(e);
  }

  ExprPtr primary() {
    const Token t = next();
    if (t.kind == Token::Kind::String) {
      std::string s = t.text;
      while (peek().kind == Token::Kind::String) s += next().text;  // adjacent literals concatenate
      ExprPtr e = make(Expr::Kind::Literal);
      e->value = s;
      return e;
    }
    if (t.kind == Token::Kind::Int || t.kind == Token::Kind::Float) {
      ExprPtr e = make(Expr::Kind::Literal);
      e->value = t.value;
      return e;
    }
    if (t.kind == Token::Kind::Name) {
      ExprPtr e = make(Expr::Kind::Literal);
      if (t.text == "true" || t.text == "True") e->value = true;
      else if (t.text == "false" || t.text == "False") e->value = false;
      else if (t.text == "none" || t.text == "None") e->value = nullptr;
      else e = make(Expr::Kind::Name, t.text);
      return e;
    }
    if (t.kind == Token::Kind::Op && t.text == "(") {
      if (at_op(")")) {
        ++i_;
        return make(Expr::Kind::Tuple);
      }
      ExprPtr e = expression(true);
      expect_op(")");
      return e;
    }
    if (t.kind == Token::Kind::Op && t.text == "[") {
      ExprPtr e = make(Expr::Kind::List);
      while (!at_op("]")) {
        e->args.push_back(expression());
        if (!at_op(",")) break;
        ++i_;
      }
      expect_op("]");
      return e;
    }
    if (t.kind == Token::Kind::Op && t.text == "{") {
      ExprPtr e = make(Expr::Kind::Dict);
      while (!at_op("}")) {
        e->args.push_back(expression());
        expect_op(":");
        e->args.push_back(expression());
        if (!at_op(",")) break;
        ++i_;
      }
      expect_op("}");
      return e;
    }
    --i_;
    fail("an expression");
  }

  // Arguments of a call: positional then keyword (name=value).
  void call_args(Expr& call) {
    expect_op("(");
    while (!at_op(")")) {
      if (peek().kind == Token::Kind::Name && peek(1).kind == Token::Kind::Op && peek(1).text == "=") {
        std::string key = next().text;
        ++i_;
        call.kwargs.emplace_back(std::move(key), expression());
      } else {
        call.args.push_back(expression());
      }
      if (!at_op(",")) break;
      ++i_;
    }
    expect_op(")");
  }

  ExprPtr subscript(ExprPtr target) {
    expect_op("[");
    std::array<ExprPtr, 3> part;
    int colons = 0;
    for (;;) {
      if (at_op(":")) {
        ++i_;
        if (++colons > 2) fail("at most two ':' in a slice");
        continue;
      }
      if (at_op("]")) break;
      if (part[static_cast<std::size_t>(colons)]) fail("':' or ']'");
      part[static_cast<std::size_t>(colons)] = expression();
    }
    expect_op("]");
    ExprPtr e = make(colons ? Expr::Kind::Slice : Expr::Kind::Index);
    e->args.push_back(std::move(target));
    if (!colons && !part[0]) fail("an index");
    for (int k = 0; k <= (colons ? 2 : 0); ++k) e->args.push_back(std::move(part[static_cast<std::size_t>(k)]));
    return e;
  }

  ExprPtr postfix(ExprPtr e) {
    for (;;) {
      if (at_op(".")) {
        ++i_;
        ExprPtr a = make(Expr::Kind::Attr);
        if (peek().kind == Token::Kind::Int) a->name = next().text;
        else a->name = expect_name();
        a->args.push_back(std::move(e));
        e = std::move(a);
      } else if (at_op("[")) {
        e = subscript(std::move(e));
      } else if (at_op("(")) {
        ExprPtr c = make(Expr::Kind::Call);
        c->args.push_back(std::move(e));
        call_args(*c);
        e = std::move(c);
      } else {
        return e;
      }
    }
  }

  ExprPtr filters(ExprPtr e) {
    for (;;) {
      if (at_op("|")) {
        ++i_;
        ExprPtr f = make(Expr::Kind::Filter, expect_name());
        f->args.push_back(std::move(e));
        if (at_op("(")) call_args(*f);
        e = std::move(f);
      } else if (at_name("is")) {
        ++i_;
        ExprPtr t = make(Expr::Kind::Test);
        if (at_name("not")) {
          ++i_;
          t->negate = true;
        }
        if (peek().kind == Token::Kind::Name) t->name = next().text;
        else if (at_op("==") || at_op("!=") || at_op("<") || at_op(">") || at_op("<=") || at_op(">=")) t->name = next().text;
        else fail("a test name");
        t->args.push_back(std::move(e));
        if (at_op("(")) {
          call_args(*t);
        } else if (!at_end() && peek().kind != Token::Kind::Op && !at_name("and") && !at_name("or") &&
                   !at_name("else") && !at_name("if") && !at_name("is") && !at_name("in") && !at_name("not")) {
          t->args.push_back(postfix(primary()));  // `is divisibleby 3`, `is sameas false`
        }
        e = std::move(t);
      } else {
        return e;
      }
    }
  }

 private:
  std::vector<Token> t_;
  std::size_t i_ = 0;
  std::string where_;
  int line_;
};

class Parser {
 public:
  Parser(std::vector<Segment> segs, std::string origin) : segs_(std::move(segs)), origin_(std::move(origin)) {}

  Body parse_all() {
    std::string stop;
    Body b = parse_body({}, stop);
    return b;
  }

 private:
  ExprParser tag(const Segment& s) { return ExprParser(tokenize(s.content, where(s)), origin_, s.line); }
  std::string where(const Segment& s) const { return fmt::format("{}: line {}", origin_, s.line); }

  // Parses nodes until a statement whose keyword is in `stops` (returned in `stop`, its parser in
  // `stop_parser`); at the top level (stops empty) until the end.
  Body parse_body(const std::set<std::string>& stops, std::string& stop, std::unique_ptr<ExprParser>* stop_parser = nullptr,
                  int* stop_line = nullptr) {
    // Nested blocks, bounded as nested expressions are (untrusted input, recursive descent).
    if (++depth_ > 200) {
      throw FormatError(fmt::format("{}: syntax (expected at most 200 nested blocks)", origin_));
    }
    struct Leave {
      int& d;
      ~Leave() { --d; }
    } leave{depth_};
    Body body;
    while (i_ < segs_.size()) {
      const Segment& s = segs_[i_++];
      auto n = std::make_unique<Node>();
      n->line = s.line;
      if (s.kind == Segment::Kind::Text) {
        n->kind = Node::Kind::Text;
        n->text = s.content;
      } else if (s.kind == Segment::Kind::Output) {
        ExprParser p = tag(s);
        n->kind = Node::Kind::Output;
        n->expr = p.expression(true);
        p.expect_end();
      } else {
        auto p = std::make_unique<ExprParser>(tag(s));
        const std::string kw = p->expect_name();
        if (stops.count(kw)) {
          stop = kw;
          if (stop_parser) *stop_parser = std::move(p);
          if (stop_line) *stop_line = s.line;
          return body;
        }
        statement(kw, *p, *n, s);
      }
      body.push_back(std::move(n));
    }
    if (!stops.empty()) {
      std::string names;
      for (const auto& k : stops) names += (names.empty() ? "" : " or ") + k;
      throw FormatError(fmt::format("{}: unclosed block (expected {{% {} %}}, got the end of the template)", origin_,
                                    names));
    }
    return body;
  }

  void statement(const std::string& kw, ExprParser& p, Node& n, const Segment& s) {
    if (kw == "if") {
      n.kind = Node::Kind::If;
      ExprPtr cond = p.expression();
      p.expect_end();
      for (;;) {
        std::string stop;
        std::unique_ptr<ExprParser> next;
        Body b = parse_body({"elif", "else", "endif"}, stop, &next);
        n.branches.emplace_back(std::move(cond), std::move(b));
        if (stop == "elif") {
          cond = next->expression();
          next->expect_end();
          continue;
        }
        next->expect_end();
        if (stop == "else") {
          n.else_body = parse_body({"endif"}, stop, &next);
          next->expect_end();
        }
        return;
      }
    }
    if (kw == "for") {
      n.kind = Node::Kind::For;
      n.targets.push_back(p.expect_name());
      while (p.at_op(",")) {
        p.next();
        n.targets.push_back(p.expect_name());
      }
      if (!p.at_name("in")) p.fail("'in'");
      p.next();
      n.expr = p.or_expr();  // jinja2: the iterable has no conditional expression
      if (p.at_name("if")) {
        p.next();
        n.filter = p.or_expr();
      }
      if (p.at_name("recursive")) p.fail("a loop without 'recursive' (not supported)");
      p.expect_end();
      std::string stop;
      std::unique_ptr<ExprParser> next;
      n.body = parse_body({"else", "endfor"}, stop, &next);
      next->expect_end();
      if (stop == "else") {
        n.else_body = parse_body({"endfor"}, stop, &next);
        next->expect_end();
      }
      return;
    }
    if (kw == "set") {
      n.kind = Node::Kind::Set;
      n.targets.push_back(p.expect_name());
      if (p.at_op(".")) {
        p.next();
        n.targets.push_back(p.expect_name());
      }
      if (!p.at_op("=")) {
        throw FormatError(fmt::format("{}: block assignment {{% set {} %}}...{{% endset %}} is not supported "
                                      "(expected {{% set name = expression %}})", where(s), n.targets[0]));
      }
      p.next();
      n.expr = p.expression(true);
      p.expect_end();
      return;
    }
    if (kw == "break" || kw == "continue") {
      n.kind = kw == "break" ? Node::Kind::Break : Node::Kind::Continue;
      p.expect_end();
      return;
    }
    if (kw == "generation") {  // transformers' AssistantTracker: marks the assistant's tokens, renders as is
      n.kind = Node::Kind::Block;
      p.expect_end();
      std::string stop;
      std::unique_ptr<ExprParser> next;
      n.body = parse_body({"endgeneration"}, stop, &next);
      next->expect_end();
      return;
    }
    throw FormatError(fmt::format("{}: tag {{% {} %}} is not supported (expected if, for, set, break, continue or "
                                  "generation)", where(s), kw));
  }

  std::vector<Segment> segs_;
  std::string origin_;
  std::size_t i_ = 0;
  int depth_ = 0;  // nested blocks
};

}  // namespace

Body parse_template(std::string_view source, const std::string& origin) {
  return Parser(segment(source, origin), origin).parse_all();
}

}  // namespace latentllm::io::jinja
