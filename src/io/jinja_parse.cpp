// Jinja template -> tree (io/jinja_ast.hpp): the source is cut into text, {{ }} and {% %} segments with
// jinja2's whitespace rules (trim_blocks, lstrip_blocks, `-` and `+` modifiers, the one trailing newline
// dropped), each tag is tokenized, and a recursive descent parser with jinja2's precedence builds the tree
// (parser.py: or < and < not < compare < + - < ~ < * / // % < unary, then postfix, filters and tests).
#include <algorithm>
#include <array>
#include <cctype>
#include <set>

#include <fmt/format.h>

#include "io/jinja_ast.hpp"
#include "latentllm/error.hpp"

namespace latentllm::io::jinja {
namespace {

struct Segment {
  enum class Kind { Text, Output, Statement } kind;
  std::string content;
  int line = 0;
};

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

int line_at(std::string_view s, std::size_t pos) {
  int n = 1;
  for (std::size_t i = 0; i < pos && i < s.size(); ++i) n += s[i] == '\n';
  return n;
}

// The end of the tag opened at `from` (the index of its closing delimiter), skipping quoted strings;
// npos when unclosed.
std::size_t tag_end(std::string_view s, std::size_t from, std::string_view close) {
  if (close == "#}") return s.find(close, from);
  char quote = 0;
  for (std::size_t i = from; i + 1 < s.size(); ++i) {
    const char c = s[i];
    if (quote) {
      if (c == '\\') ++i;
      else if (c == quote) quote = 0;
    } else if (c == '\'' || c == '"') {
      quote = c;
    } else if (s.compare(i, 2, close) == 0) {
      return i;
    }
  }
  return std::string_view::npos;
}

std::vector<Segment> segment(std::string_view src, const std::string& origin) {
  if (src.ends_with("\r\n")) src.remove_suffix(2);  // jinja2's keep_trailing_newline = False
  else if (src.ends_with("\n")) src.remove_suffix(1);
  std::vector<Segment> out;
  std::size_t pos = 0;
  while (pos <= src.size()) {
    std::size_t start = std::string_view::npos;
    for (const char* open : {"{{", "{%", "{#"}) start = std::min(start, src.find(open, pos));
    std::string text(src.substr(pos, start == std::string_view::npos ? std::string_view::npos : start - pos));
    if (start == std::string_view::npos) {
      if (!text.empty()) out.push_back({Segment::Kind::Text, text, line_at(src, pos)});
      break;
    }
    const char kind = src[start + 1];
    const char mod = start + 2 < src.size() ? src[start + 2] : 0;
    if (mod == '-') {
      while (!text.empty() && is_space(text.back())) text.pop_back();
    } else if (kind != '{' && mod != '+') {  // lstrip_blocks: a block or comment tag alone on its line start
      const std::size_t nl = text.rfind('\n');
      const std::size_t l = nl == std::string::npos ? 0 : nl + 1;
      const bool line_start = nl != std::string::npos || pos == 0 || src[pos - 1] == '\n';
      if (line_start && text.find_first_not_of(" \t", l) == std::string::npos) text.resize(l);
    }
    if (!text.empty()) out.push_back({Segment::Kind::Text, text, line_at(src, pos)});
    const std::string_view close = kind == '{' ? "}}" : kind == '%' ? "%}" : "#}";
    const std::size_t body = start + 2 + (mod == '-' || mod == '+' ? 1 : 0);
    const std::size_t end = tag_end(src, body, close);
    const int line = line_at(src, start);
    if (end == std::string_view::npos) {
      throw FormatError(fmt::format("{}: line {}: unclosed tag (expected {}, got the end of the template)", origin,
                                    line, close));
    }
    const bool strip_after = end > body && src[end - 1] == '-';
    const bool keep_newline = end > body && src[end - 1] == '+';
    const std::size_t content_end = strip_after || keep_newline ? end - 1 : end;
    const std::string content(src.substr(body, content_end - body));
    if (kind == '{') out.push_back({Segment::Kind::Output, content, line});
    if (kind == '%') out.push_back({Segment::Kind::Statement, content, line});
    pos = end + 2;
    if (strip_after) {
      while (pos < src.size() && is_space(src[pos])) ++pos;
    } else if (kind != '{' && !keep_newline) {  // trim_blocks: the newline after a block or comment tag
      if (src.compare(pos, 2, "\r\n") == 0) pos += 2;
      else if (pos < src.size() && src[pos] == '\n') ++pos;
    }
  }
  return out;
}

struct Token {
  enum class Kind { Name, String, Int, Float, Op, End } kind;
  std::string text;  // Name, Op: as written; String: unescaped
  Value value;       // Int, Float
};

// Python's string escapes as jinja2 applies them (unicode-escape): unknown escapes keep the backslash.
std::size_t unescape(std::string_view s, std::size_t i, char quote, std::string& out, const std::string& where) {
  for (; i < s.size(); ++i) {
    const char c = s[i];
    if (c == quote) return i + 1;
    if (c != '\\' || i + 1 >= s.size()) {
      out += c;
      continue;
    }
    const char e = s[++i];
    switch (e) {
      case 'n': out += '\n'; break;
      case 't': out += '\t'; break;
      case 'r': out += '\r'; break;
      case '0': out += '\0'; break;
      case '\\': out += '\\'; break;
      case '\'': out += '\''; break;
      case '"': out += '"'; break;
      case '\n': break;
      case 'x':
      case 'u':
      case 'U': {
        const std::size_t n = e == 'x' ? 2 : e == 'u' ? 4 : 8;
        if (i + n >= s.size() || !std::all_of(s.begin() + static_cast<std::ptrdiff_t>(i + 1),
                                              s.begin() + static_cast<std::ptrdiff_t>(i + 1 + n),
                                              [](char h) { return std::isxdigit(static_cast<unsigned char>(h)) != 0; }))
          throw FormatError(fmt::format("{}: syntax (expected {} hex digits after \\{}, got \"{}\")", where, n, e,
                                        s.substr(i + 1, std::min(n, s.size() - i - 1))));
        const auto cp = static_cast<std::uint32_t>(std::stoul(std::string(s.substr(i + 1, n)), nullptr, 16));
        i += n;
        if (cp < 0x80) {
          out += static_cast<char>(cp);
        } else if (cp < 0x800) {
          out += static_cast<char>(0xC0 | (cp >> 6));
          out += static_cast<char>(0x80 | (cp & 0x3F));
        } else if (cp < 0x10000) {
          out += static_cast<char>(0xE0 | (cp >> 12));
          out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
          out += static_cast<char>(0x80 | (cp & 0x3F));
        } else {
          out += static_cast<char>(0xF0 | (cp >> 18));
          out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
          out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
          out += static_cast<char>(0x80 | (cp & 0x3F));
        }
        break;
      }
      default: out += '\\'; out += e;
    }
  }
  throw FormatError(fmt::format("{}: syntax (expected a closing {} of the string, got the end of the tag)", where,
                                quote));
}

std::vector<Token> tokenize(std::string_view s, const std::string& where) {
  static const std::vector<std::string> kOps = {"//", "**", "==", "!=", "<=", ">=", "(", ")", "[", "]", "{", "}",
                                                ",",  ".",  ":",  "|",  "=",  "+",  "-", "*", "/", "%", "~", "<", ">"};
  std::vector<Token> out;
  std::size_t i = 0;
  while (i < s.size()) {
    const char c = s[i];
    if (is_space(c)) {
      ++i;
    } else if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      std::size_t j = i;
      while (j < s.size() && (std::isalnum(static_cast<unsigned char>(s[j])) || s[j] == '_')) ++j;
      out.push_back({Token::Kind::Name, std::string(s.substr(i, j - i)), {}});
      i = j;
    } else if (std::isdigit(static_cast<unsigned char>(c))) {
      std::size_t j = i;
      while (j < s.size() && (std::isdigit(static_cast<unsigned char>(s[j])) || s[j] == '_')) ++j;
      bool is_float = false;
      if (j + 1 < s.size() && s[j] == '.' && std::isdigit(static_cast<unsigned char>(s[j + 1]))) {
        is_float = true;
        for (++j; j < s.size() && std::isdigit(static_cast<unsigned char>(s[j])); ++j) {
        }
      }
      std::string digits;
      for (char d : s.substr(i, j - i))
        if (d != '_') digits += d;
      if (is_float) out.push_back({Token::Kind::Float, digits, Value(std::stod(digits))});
      else out.push_back({Token::Kind::Int, digits, Value(static_cast<std::int64_t>(std::stoll(digits)))});
      i = j;
    } else if (c == '\'' || c == '"') {
      Token t{Token::Kind::String, "", {}};
      i = unescape(s, i + 1, c, t.text, where);
      out.push_back(std::move(t));
    } else {
      const auto op = std::find_if(kOps.begin(), kOps.end(), [&](const std::string& o) { return s.substr(i).starts_with(o); });
      if (op == kOps.end()) {
        throw FormatError(fmt::format("{}: syntax (expected an expression, got '{}')", where, c));
      }
      out.push_back({Token::Kind::Op, *op, {}});
      i += op->size();
    }
  }
  out.push_back({Token::Kind::End, "", {}});
  return out;
}

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

  ExprPtr make(Expr::Kind k, std::string name = {}) {
    auto e = std::make_unique<Expr>();
    e->kind = k;
    e->line = line_;
    e->name = std::move(name);
    return e;
  }

  // A full expression: a conditional expression (`a if c else b`) or a bare tuple `a, b`.
  ExprPtr expression(bool allow_tuple = false) {
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
};

}  // namespace

Body parse_template(std::string_view source, const std::string& origin) {
  return Parser(segment(source, origin), origin).parse_all();
}

}  // namespace latentllm::io::jinja
