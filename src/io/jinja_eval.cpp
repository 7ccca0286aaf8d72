// Renders a parsed Jinja template (io/jinja_ast.hpp) with Python's value semantics where chat templates
// depend on them: truthiness, == across int/float/bool, str() of values, negative indices and slices,
// str methods, and jinja2's scoping (a for loop's body is a scope of its own: `set` inside it does not
// leak out, which is why templates use namespace()).
#include <algorithm>
#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "io/jinja_ast.hpp"
#include "io/jinja_values.hpp"
#include "latentllm/error.hpp"

namespace latentllm::io::jinja {
namespace {

enum class Flow { Normal, Break, Continue };

// Bounds of what a template may build (it is untrusted input): values of a range or characters of a
// repeated string, and the rendered text.
constexpr std::int64_t kMaxValues = std::int64_t{1} << 20;
constexpr std::int64_t kMaxOutput = std::int64_t{64} << 20;

class Renderer {
 public:
  explicit Renderer(const std::string& origin) : origin_(origin) {}

  void run(const Body& body, const Value& context, std::string& out) {
    frames_.push_back(context.is_object() ? context : Value::object());
    exec(body, out);
  }

 private:
  [[noreturn]] void fail(int line, const std::string& what) const {
    throw FormatError(fmt::format("{}: line {}: {}", origin_, line, what));
  }
  static std::string type_name(const Value& v) {
    if (v.is_discarded()) return "undefined";
    if (v.is_null()) return "none";
    if (v.is_boolean()) return "bool";
    if (v.is_number_integer()) return "int";
    if (v.is_number()) return "float";
    if (v.is_string()) return "str";
    if (v.is_array()) return "list";
    return "dict";
  }

  Value* lookup(const std::string& name) {
    for (auto f = frames_.rbegin(); f != frames_.rend(); ++f) {
      const auto it = f->find(name);
      if (it != f->end()) return &*it;
    }
    return nullptr;
  }

  Flow exec(const Body& body, std::string& out) {
    for (const auto& n : body) {
      const Flow f = exec(*n, out);
      // A template is untrusted input (it comes with the checkpoint): a prompt is never this long.
      if (static_cast<std::int64_t>(out.size()) > kMaxOutput) {
        fail(n->line, fmt::format("rendered prompt (expected at most {} bytes)", kMaxOutput));
      }
      if (f != Flow::Normal) return f;
    }
    return Flow::Normal;
  }

  Flow exec(const Node& n, std::string& out) {
    switch (n.kind) {
      case Node::Kind::Text: out += n.text; return Flow::Normal;
      case Node::Kind::Output: out += to_python_str(eval(*n.expr)); return Flow::Normal;
      case Node::Kind::Block: return exec(n.body, out);
      case Node::Kind::Break: return Flow::Break;
      case Node::Kind::Continue: return Flow::Continue;
      case Node::Kind::If:
        for (const auto& [cond, body] : n.branches)
          if (truthy(eval(*cond))) return exec(body, out);
        return exec(n.else_body, out);
      case Node::Kind::Set: {
        Value v = eval(*n.expr);
        if (n.targets.size() == 1) {
          frames_.back()[n.targets[0]] = std::move(v);
          return Flow::Normal;
        }
        Value* ns = lookup(n.targets[0]);
        if (!ns || !ns->is_object()) {
          fail(n.line, fmt::format("set {}.{} (expected {} to be a namespace, got {})", n.targets[0], n.targets[1],
                                   n.targets[0], ns ? type_name(*ns) : "undefined"));
        }
        (*ns)[n.targets[1]] = std::move(v);
        return Flow::Normal;
      }
      case Node::Kind::For: return exec_for(n, out);
    }
    return Flow::Normal;
  }

  // The items a for loop visits: a list's elements, a mapping's keys, a string's characters.
  std::vector<Value> iterate(const Value& seq, int line) {
    std::vector<Value> items;
    if (seq.is_array()) {
      items.assign(seq.begin(), seq.end());
    } else if (seq.is_object()) {
      for (const auto& [k, v] : seq.items()) items.emplace_back(k);
    } else if (seq.is_string()) {
      const std::string& s = seq.get_ref<const std::string&>();
      for (std::size_t i = 0; i < s.size();) {
        std::size_t j = i + 1;
        while (j < s.size() && (static_cast<unsigned char>(s[j]) & 0xC0) == 0x80) ++j;
        items.emplace_back(s.substr(i, j - i));
        i = j;
      }
    } else if (!seq.is_discarded() && !seq.is_null()) {
      fail(line, fmt::format("for (expected an iterable, got {})", type_name(seq)));
    } else if (seq.is_null()) {
      fail(line, "for (expected an iterable, got none)");
    }
    return items;
  }

  void bind(const Node& n, const Value& item) {
    Value& frame = frames_.back();
    if (n.targets.size() == 1) {
      frame[n.targets[0]] = item;
      return;
    }
    if (!item.is_array() || item.size() != n.targets.size()) {
      fail(n.line, fmt::format("for: unpacking (expected {} values, got {})", n.targets.size(),
                               item.is_array() ? std::to_string(item.size()) : type_name(item)));
    }
    for (std::size_t k = 0; k < n.targets.size(); ++k) frame[n.targets[k]] = item[k];
  }

  Flow exec_for(const Node& n, std::string& out) {
    std::vector<Value> items = iterate(eval(*n.expr), n.line);
    if (n.filter) {  // `for x in seq if cond`: the condition sees x; loop.* counts what passes
      std::vector<Value> kept;
      for (const Value& item : items) {
        frames_.push_back(Value::object());
        bind(n, item);
        const bool keep = truthy(eval(*n.filter));
        frames_.pop_back();
        if (keep) kept.push_back(item);
      }
      items = std::move(kept);
    }
    if (items.empty()) return exec(n.else_body, out);
    const auto len = static_cast<std::int64_t>(items.size());
    for (std::int64_t i = 0; i < len; ++i) {
      frames_.push_back(Value::object());
      bind(n, items[static_cast<std::size_t>(i)]);
      Value loop = Value::object();
      loop["index0"] = i;
      loop["index"] = i + 1;
      loop["revindex0"] = len - 1 - i;
      loop["revindex"] = len - i;
      loop["first"] = i == 0;
      loop["last"] = i == len - 1;
      loop["length"] = len;
      loop["previtem"] = i > 0 ? items[static_cast<std::size_t>(i - 1)] : undefined();
      loop["nextitem"] = i + 1 < len ? items[static_cast<std::size_t>(i + 1)] : undefined();
      frames_.back()["loop"] = std::move(loop);
      const Flow f = exec(n.body, out);
      frames_.pop_back();
      if (f == Flow::Break) break;
    }
    return Flow::Normal;
  }

  Value eval(const Expr& e) {
    switch (e.kind) {
      case Expr::Kind::Literal: return e.value;
      case Expr::Kind::Name: {
        const Value* v = lookup(e.name);
        return v ? *v : undefined();
      }
      case Expr::Kind::List:
      case Expr::Kind::Tuple: {
        Value a = Value::array();
        for (const auto& x : e.args) a.push_back(eval(*x));
        return a;
      }
      case Expr::Kind::Dict: {
        Value d = Value::object();
        for (std::size_t i = 0; i + 1 < e.args.size(); i += 2) {
          const Value k = eval(*e.args[i]);
          if (!k.is_string()) fail(e.line, fmt::format("dict key (expected a string, got {})", type_name(k)));
          d[k.get<std::string>()] = eval(*e.args[i + 1]);
        }
        return d;
      }
      case Expr::Kind::Attr: return attribute(eval(*e.args[0]), e.name, e.line);
      case Expr::Kind::Index: return item(eval(*e.args[0]), eval(*e.args[1]), e.line);
      case Expr::Kind::Slice: return slice(e);
      case Expr::Kind::Call: return call(e);
      case Expr::Kind::Filter: return filter(e);
      case Expr::Kind::Test: return test(e) != e.negate;
      case Expr::Kind::Unary: {
        const Value v = eval(*e.args[0]);
        if (e.name == "not") return !truthy(v);
        if (!is_numeric(v)) fail(e.line, fmt::format("unary {} (expected a number, got {})", e.name, type_name(v)));
        if (e.name == "+") return v;
        if (is_int(v)) return -as_int(v);
        return -as_double(v);
      }
      case Expr::Kind::Binary: return binary(e);
      case Expr::Kind::Conditional:
        if (truthy(eval(*e.args[0]))) return eval(*e.args[1]);
        return e.args[2] ? eval(*e.args[2]) : undefined();
    }
    return undefined();
  }

  Value attribute(const Value& obj, const std::string& name, int line) {
    if (obj.is_discarded()) fail(line, fmt::format("attribute {} of an undefined value", name));
    if (obj.is_object()) {
      const auto it = obj.find(name);
      return it == obj.end() ? undefined() : *it;
    }
    if (obj.is_array() && !name.empty() && std::isdigit(static_cast<unsigned char>(name[0]))) {
      try {
        return item(obj, Value(std::stoll(name)), line);
      } catch (const std::out_of_range&) {
        return undefined();  // beyond any list
      }
    }
    return undefined();
  }

  Value item(const Value& obj, const Value& key, int line) {
    if (obj.is_discarded()) fail(line, "subscript (expected a list, str or dict, got undefined)");
    if (obj.is_object()) {
      if (!key.is_string()) return undefined();
      const auto it = obj.find(key.get<std::string>());
      return it == obj.end() ? undefined() : *it;
    }
    if ((obj.is_array() || obj.is_string()) && is_int(key)) {
      const auto n = static_cast<std::int64_t>(obj.is_array() ? obj.size() : obj.get_ref<const std::string&>().size());
      std::int64_t i = as_int(key);
      if (i < 0) i += n;
      if (i < 0 || i >= n) return undefined();
      if (obj.is_array()) return obj[static_cast<std::size_t>(i)];
      return std::string(1, obj.get_ref<const std::string&>()[static_cast<std::size_t>(i)]);
    }
    if (obj.is_string() || obj.is_array()) return undefined();
    fail(line, fmt::format("subscript (expected a list, str or dict, got {})", type_name(obj)));
  }

  Value slice(const Expr& e) {
    const Value obj = eval(*e.args[0]);
    const auto bound = [&](const ExprPtr& x) -> std::optional<std::int64_t> {
      if (!x) return std::nullopt;
      const Value v = eval(*x);
      if (v.is_null()) return std::nullopt;
      if (!is_int(v)) fail(e.line, fmt::format("slice index (expected an integer, got {})", type_name(v)));
      return as_int(v);
    };
    const std::optional<std::int64_t> lo = bound(e.args[1]), hi = bound(e.args[2]), st = bound(e.args[3]);
    const std::int64_t step = st.value_or(1);
    if (step == 0) fail(e.line, "slice step (expected a non-zero integer, got 0)");
    if (!obj.is_array() && !obj.is_string())
      fail(e.line, fmt::format("slice (expected a list or str, got {})", type_name(obj)));
    const auto n = static_cast<std::int64_t>(obj.is_array() ? obj.size() : obj.get_ref<const std::string&>().size());
    // Python's slice.indices.
    const auto clamp = [&](std::optional<std::int64_t> v, std::int64_t dflt) {
      if (!v) return dflt;
      std::int64_t x = *v < 0 ? *v + n : *v;
      if (step > 0) return std::clamp<std::int64_t>(x, 0, n);
      return std::clamp<std::int64_t>(x, -1, n - 1);
    };
    const std::int64_t a = clamp(lo, step > 0 ? 0 : n - 1), b = clamp(hi, step > 0 ? n : -1);
    Value out = obj.is_array() ? Value::array() : Value("");
    for (std::int64_t i = a; step > 0 ? i < b : i > b; i += step) {
      if (obj.is_array()) out.push_back(obj[static_cast<std::size_t>(i)]);
      else out.get_ref<std::string&>() += obj.get_ref<const std::string&>()[static_cast<std::size_t>(i)];
    }
    return out;
  }

  std::vector<Value> args_of(const Expr& e, std::size_t from) {
    std::vector<Value> a;
    for (std::size_t i = from; i < e.args.size(); ++i) a.push_back(eval(*e.args[i]));
    return a;
  }
  Value kwarg(const Expr& e, const std::string& name, Value dflt) {
    for (const auto& [k, v] : e.kwargs)
      if (k == name) return eval(*v);
    return dflt;
  }
  // The i-th positional argument, else the keyword `name`, else dflt.
  Value arg(const Expr& e, const std::vector<Value>& a, std::size_t i, const std::string& name, Value dflt) {
    return i < a.size() ? a[i] : kwarg(e, name, std::move(dflt));
  }
  std::string str_arg(const Expr& e, const std::vector<Value>& a, std::size_t i, const std::string& what) {
    if (i >= a.size() || !a[i].is_string())
      fail(e.line, fmt::format("{} (expected a string argument, got {})", what, i < a.size() ? type_name(a[i]) : "none"));
    return a[i].get<std::string>();
  }

  Value call(const Expr& e) {
    const Expr& callee = *e.args[0];
    if (callee.kind == Expr::Kind::Attr) {
      const Value obj = eval(*callee.args[0]);
      if (obj.is_string()) return str_method(e, obj.get<std::string>(), callee.name);
      if (obj.is_object() && (callee.name == "items" || callee.name == "keys" || callee.name == "values" ||
                              callee.name == "get"))
        return dict_method(e, obj, callee.name);
      fail(e.line, fmt::format("method {} of {} is not supported", callee.name, type_name(obj)));
    }
    if (callee.kind != Expr::Kind::Name) fail(e.line, "call (expected a function name or a method, got another expression)");
    const std::vector<Value> a = args_of(e, 1);
    const std::string& f = callee.name;
    if (f == "raise_exception") {
      throw ConfigError(fmt::format("{}: {}", origin_, a.empty() ? std::string() : to_python_str(a[0])));
    }
    if (f == "namespace" || f == "dict") {
      Value d = Value::object();
      if (!a.empty() && a[0].is_object()) d = a[0];
      for (const auto& [k, v] : e.kwargs) d[k] = eval(*v);
      return d;
    }
    if (f == "range") {
      std::int64_t lo = 0, hi = 0, st = 1;
      if (a.size() == 1 && is_int(a[0])) hi = as_int(a[0]);
      else if (a.size() >= 2 && is_int(a[0]) && is_int(a[1])) lo = as_int(a[0]), hi = as_int(a[1]);
      else fail(e.line, fmt::format("range (expected 1 to 3 integers, got {} arguments)", a.size()));
      if (a.size() == 3 && is_int(a[2])) st = as_int(a[2]);
      if (st == 0) fail(e.line, "range step (expected a non-zero integer, got 0)");
      Value r = Value::array();
      for (std::int64_t i = lo; st > 0 ? i < hi : i > hi; i += st) {
        if (static_cast<std::int64_t>(r.size()) >= kMaxValues) {
          fail(e.line, fmt::format("range (expected at most {} values)", kMaxValues));
        }
        r.push_back(i);
      }
      return r;
    }
    fail(e.line, fmt::format("function {} is not supported (expected raise_exception, namespace, dict or range)", f));
  }

  Value str_method(const Expr& e, const std::string& s, const std::string& m) {
    const std::vector<Value> a = args_of(e, 1);
    const auto chars = [&]() { return a.empty() || a[0].is_null() ? std::string(kWhitespace) : str_arg(e, a, 0, m); };
    if (m == "strip" || m == "lstrip" || m == "rstrip") {
      const std::string c = chars();
      std::size_t b = 0, n = s.size();
      if (m != "rstrip") b = std::min(s.find_first_not_of(c), s.size());
      if (m != "lstrip") {
        const std::size_t last = s.find_last_not_of(c);
        n = last == std::string::npos ? 0 : last + 1;
      }
      return b < n ? s.substr(b, n - b) : std::string();
    }
    if (m == "startswith" || m == "endswith") {
      std::vector<std::string> probes;
      if (!a.empty() && a[0].is_array()) {
        for (const Value& p : a[0])
          if (p.is_string()) probes.push_back(p.get<std::string>());
      } else {
        probes.push_back(str_arg(e, a, 0, m));
      }
      return std::any_of(probes.begin(), probes.end(),
                         [&](const std::string& p) { return m == "startswith" ? s.starts_with(p) : s.ends_with(p); });
    }
    if (m == "upper" || m == "lower") {
      std::string r = s;
      for (char& c : r) c = static_cast<char>(m == "upper" ? std::toupper(static_cast<unsigned char>(c))
                                                           : std::tolower(static_cast<unsigned char>(c)));
      return r;
    }
    if (m == "capitalize" || m == "title") return apply_case(s, m);
    if (m == "replace") return replace_all(s, str_arg(e, a, 0, m), str_arg(e, a, 1, m));
    if (m == "split") return split(s, a.empty() || a[0].is_null() ? std::nullopt : std::optional(str_arg(e, a, 0, m)));
    if (m == "join") {
      std::string out;
      if (a.empty() || !a[0].is_array()) fail(e.line, fmt::format("join (expected a list argument, got {})", a.empty() ? "none" : type_name(a[0])));
      for (std::size_t i = 0; i < a[0].size(); ++i) out += (i ? s : "") + to_python_str(a[0][i]);
      return out;
    }
    fail(e.line, fmt::format("method {} of str is not supported", m));
  }




  Value dict_method(const Expr& e, const Value& obj, const std::string& m) {
    if (m == "get") {
      const std::vector<Value> a = args_of(e, 1);
      const std::string k = str_arg(e, a, 0, "get");
      const auto it = obj.find(k);
      return it != obj.end() ? *it : a.size() > 1 ? a[1] : Value(nullptr);
    }
    Value out = Value::array();
    for (const auto& [k, v] : obj.items()) {
      if (m == "items") out.push_back(Value::array({k, v}));
      else if (m == "keys") out.push_back(k);
      else out.push_back(v);
    }
    return out;
  }

  // Applies test `name` (with args) to v, for `is` and select/reject.
  bool apply_test(const std::string& name, const Value& v, const std::vector<Value>& a, int line) {
    const auto other = [&]() -> const Value& {
      if (a.empty()) fail(line, fmt::format("test {} (expected an argument)", name));
      return a[0];
    };
    if (name == "defined") return !is_undefined(v);
    if (name == "undefined") return is_undefined(v);
    if (name == "none") return v.is_null();
    if (name == "string") return v.is_string();
    if (name == "number") return is_numeric(v);
    if (name == "integer") return v.is_number_integer();
    if (name == "float") return v.is_number_float();
    if (name == "boolean") return v.is_boolean();
    if (name == "true") return v.is_boolean() && v.get<bool>();
    if (name == "false") return v.is_boolean() && !v.get<bool>();
    if (name == "mapping") return v.is_object();
    if (name == "iterable") return v.is_array() || v.is_object() || v.is_string();
    if (name == "sequence") return v.is_array() || v.is_object() || v.is_string();
    if (name == "equalto" || name == "eq" || name == "==" || name == "sameas") return py_eq(v, other());
    if (name == "ne" || name == "!=") return !py_eq(v, other());
    if (name == "odd" || name == "even" || name == "divisibleby") {
      if (!is_int(v)) fail(line, fmt::format("test {} (expected an integer, got {})", name, type_name(v)));
      const std::int64_t d = name == "divisibleby" ? as_int(other()) : 2;
      if (d == 0) fail(line, "test divisibleby (expected a non-zero divisor, got 0)");
      const bool div = as_int(v) % d == 0;
      return name == "odd" ? !div : div;
    }
    if (name == "in") return contains(other(), v, line);
    if (name == "lt" || name == "<") return less(v, other(), line);
    if (name == "gt" || name == ">") return less(other(), v, line);
    if (name == "le" || name == "<=") return !less(other(), v, line);
    if (name == "ge" || name == ">=") return !less(v, other(), line);
    fail(line, fmt::format("test {} is not supported", name));
  }

  bool test(const Expr& e) { return apply_test(e.name, eval(*e.args[0]), args_of(e, 1), e.line); }

  bool less(const Value& a, const Value& b, int line) {
    if (is_numeric(a) && is_numeric(b)) {
      if (is_int(a) && is_int(b)) return as_int(a) < as_int(b);
      return as_double(a) < as_double(b);
    }
    if (a.is_string() && b.is_string()) return a.get<std::string>() < b.get<std::string>();
    fail(line, fmt::format("comparison (expected two numbers or two strings, got {} and {})", type_name(a),
                           type_name(b)));
  }

  bool contains(const Value& container, const Value& x, int line) {
    if (container.is_string()) {
      if (!x.is_string()) fail(line, fmt::format("'in <str>' (expected a string on the left, got {})", type_name(x)));
      return container.get_ref<const std::string&>().find(x.get<std::string>()) != std::string::npos;
    }
    if (container.is_array()) return std::any_of(container.begin(), container.end(), [&](const Value& y) { return py_eq(x, y); });
    if (container.is_object()) return x.is_string() && container.contains(x.get<std::string>());
    if (container.is_discarded()) return false;
    fail(line, fmt::format("'in' (expected a str, list or dict on the right, got {})", type_name(container)));
  }

  Value arith(const std::string& op, const Value& a, const Value& b, int line) {
    if (is_numeric(a) && is_numeric(b)) {
      const bool ints = is_int(a) && is_int(b);
      if (op == "/") {
        if (as_double(b) == 0) fail(line, "operator / (expected a non-zero divisor, got 0)");
        return as_double(a) / as_double(b);
      }
      if (ints) {
        const std::int64_t x = as_int(a), y = as_int(b);
        if (op == "+") return x + y;
        if (op == "-") return x - y;
        if (op == "*") return x * y;
        if (y == 0) fail(line, fmt::format("operator {} (expected a non-zero divisor, got 0)", op));
        std::int64_t q = x / y, r = x % y;
        if (r != 0 && ((r < 0) != (y < 0))) --q, r += y;  // Python's floor division and modulo
        return op == "//" ? q : r;
      }
      const double x = as_double(a), y = as_double(b);
      if (op == "+") return x + y;
      if (op == "-") return x - y;
      if (op == "*") return x * y;
      if (y == 0) fail(line, fmt::format("operator {} (expected a non-zero divisor, got 0)", op));
      return op == "//" ? std::floor(x / y) : x - y * std::floor(x / y);
    }
    if (op == "+" && a.is_string() && b.is_string()) return a.get<std::string>() + b.get<std::string>();
    if (op == "+" && a.is_array() && b.is_array()) {
      Value r = a;
      for (const Value& x : b) r.push_back(x);
      return r;
    }
    if (op == "*" && a.is_string() && is_int(b)) {
      const std::string& s = a.get_ref<const std::string&>();
      const std::int64_t n = std::max<std::int64_t>(as_int(b), 0);
      if (!s.empty() && n > kMaxValues / static_cast<std::int64_t>(s.size())) {
        fail(line, fmt::format("string repetition (expected at most {} characters, got {} x {})", kMaxValues, n,
                               s.size()));
      }
      std::string r;
      for (std::int64_t i = 0; i < n; ++i) r += s;
      return r;
    }
    fail(line, fmt::format("operator {} (expected numbers{}, got {} and {})", op, op == "+" ? ", strings or lists" : "",
                           type_name(a), type_name(b)));
  }

  Value binary(const Expr& e) {
    const std::string& op = e.name;
    if (op == "and") {
      Value a = eval(*e.args[0]);
      return truthy(a) ? eval(*e.args[1]) : a;
    }
    if (op == "or") {
      Value a = eval(*e.args[0]);
      return truthy(a) ? a : eval(*e.args[1]);
    }
    const Value a = eval(*e.args[0]), b = eval(*e.args[1]);
    if (op == "~") return to_python_str(a) + to_python_str(b);
    if (op == "==") return py_eq(a, b);
    if (op == "!=") return !py_eq(a, b);
    if (op == "<") return less(a, b, e.line);
    if (op == ">") return less(b, a, e.line);
    if (op == "<=") return !less(b, a, e.line);
    if (op == ">=") return !less(a, b, e.line);
    if (op == "in") return contains(b, a, e.line);
    if (op == "not in") return !contains(b, a, e.line);
    return arith(op, a, b, e.line);
  }

  // select/reject/selectattr/rejectattr: the items (or their attribute) passing the test (truthiness when
  // no test is named).
  Value select(const Expr& e, const Value& seq, const std::vector<Value>& a, bool by_attr, bool keep) {
    Value out = Value::array();
    std::size_t k = 0;
    std::string attr;
    if (by_attr) attr = str_arg(e, a, k++, e.name);
    const std::string test_name = k < a.size() ? str_arg(e, a, k, e.name) : "";
    const std::vector<Value> targs(a.begin() + static_cast<std::ptrdiff_t>(std::min(a.size(), k + 1)), a.end());
    for (const Value& x : iterate(seq, e.line)) {
      const Value v = by_attr ? attribute(x, attr, e.line) : x;
      const bool pass = test_name.empty() ? truthy(v) : apply_test(test_name, v, targs, e.line);
      if (pass == keep) out.push_back(x);
    }
    return out;
  }

  Value filter(const Expr& e) {
    const Value v = eval(*e.args[0]);
    const std::vector<Value> a = args_of(e, 1);
    const std::string& f = e.name;
    const auto need_str = [&]() -> const std::string& {
      if (!v.is_string()) fail(e.line, fmt::format("filter {} (expected a string, got {})", f, type_name(v)));
      return v.get_ref<const std::string&>();
    };
    if (f == "trim") {
      Value chars = arg(e, a, 0, "chars", nullptr);
      const std::string c = chars.is_string() ? chars.get<std::string>() : kWhitespace;
      const std::string& s = need_str();
      const std::size_t b = s.find_first_not_of(c);
      return b == std::string::npos ? std::string() : s.substr(b, s.find_last_not_of(c) - b + 1);
    }
    if (f == "length" || f == "count") {
      if (v.is_string()) return code_points(v.get<std::string>());
      if (v.is_array() || v.is_object()) return static_cast<std::int64_t>(v.size());
      if (v.is_discarded()) return 0;
      fail(e.line, fmt::format("filter {} (expected a str, list or dict, got {})", f, type_name(v)));
    }
    if (f == "tojson") {
      const Value indent = arg(e, a, 0, "indent", nullptr);
      return to_json(v, is_int(indent) ? static_cast<int>(as_int(indent)) : -1);
    }
    if (f == "upper" || f == "lower") return str_method(e, need_str(), f);
    if (f == "capitalize" || f == "title") return apply_case(need_str(), f);
    if (f == "replace") return replace_all(need_str(), str_arg(e, a, 0, f), str_arg(e, a, 1, f));
    if (f == "safe" || f == "e" || f == "escape" ) return v;
    if (f == "string") return to_python_str(v);
    if (f == "first" || f == "last") {
      const std::vector<Value> items = iterate(v, e.line);
      if (items.empty()) return undefined();
      return f == "first" ? items.front() : items.back();
    }
    if (f == "list") {
      Value out = Value::array();
      for (const Value& x : iterate(v, e.line)) out.push_back(x);
      return out;
    }
    if (f == "items") {
      if (!v.is_object()) fail(e.line, fmt::format("filter items (expected a dict, got {})", type_name(v)));
      return dict_method(e, v, "items");
    }
    if (f == "join") {
      const Value sep = arg(e, a, 0, "d", "");
      const Value attr = kwarg(e, "attribute", nullptr);
      std::string out;
      bool first = true;
      for (const Value& x : iterate(v, e.line)) {
        out += (first ? "" : to_python_str(sep)) + to_python_str(attr.is_string() ? attribute(x, attr.get<std::string>(), e.line) : x);
        first = false;
      }
      return out;
    }
    if (f == "default" || f == "d") {
      const bool boolean = truthy(arg(e, a, 1, "boolean", false));
      if (is_undefined(v) || (boolean && !truthy(v))) return arg(e, a, 0, "default_value", "");
      return v;
    }
    if (f == "int") {
      if (is_int(v)) return as_int(v);
      if (v.is_number()) {
        const double d = v.get<double>();
        // Within int64 (a cast of anything else is undefined): Python's int() of inf or nan raises.
        if (std::isfinite(d) && std::abs(d) < 9.2e18) return static_cast<std::int64_t>(d);
        return arg(e, a, 0, "default", 0);
      }
      if (v.is_string()) {
        try {
          return static_cast<std::int64_t>(std::stoll(v.get<std::string>()));
        } catch (const std::exception&) {
        }
      }
      return arg(e, a, 0, "default", 0);
    }
    if (f == "abs") {
      if (is_int(v)) return std::abs(as_int(v));
      if (v.is_number()) return std::fabs(v.get<double>());
      fail(e.line, fmt::format("filter abs (expected a number, got {})", type_name(v)));
    }
    if (f == "map") {
      const Value attr = kwarg(e, "attribute", nullptr);
      Value out = Value::array();
      for (const Value& x : iterate(v, e.line)) {
        if (attr.is_string()) {
          out.push_back(attribute(x, attr.get<std::string>(), e.line));
        } else {
          const std::string name = str_arg(e, a, 0, "map");
          Expr inner{Expr::Kind::Filter, e.line, name, {}, {}, {}, false};
          auto lit = std::make_unique<Expr>();
          lit->kind = Expr::Kind::Literal;
          lit->value = x;
          inner.args.push_back(std::move(lit));
          out.push_back(filter(inner));
        }
      }
      return out;
    }
    if (f == "select" || f == "reject") return select(e, v, a, false, f == "select");
    if (f == "selectattr" || f == "rejectattr") return select(e, v, a, true, f == "selectattr");
    fail(e.line, fmt::format("filter {} is not supported", f));
  }

  const std::string& origin_;
  std::vector<Value> frames_;  // innermost last
};

}  // namespace

Template::Template(std::string_view source, std::string origin) {
  auto impl = std::make_shared<Impl>();
  impl->origin = std::move(origin);
  impl->body = parse_template(source, impl->origin);
  impl_ = std::move(impl);
}

std::string Template::render(const Value& context) const {
  std::string out;
  Renderer(impl_->origin).run(impl_->body, context, out);
  return out;
}

}  // namespace latentllm::io::jinja
