// The parsed form of a Jinja template (io/jinja.hpp): expressions and statements as small trees that
// jinja_eval.cpp walks. Internal to src/io.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "io/jinja.hpp"

namespace latentllm::io::jinja {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  enum class Kind {
    Literal,    // value
    Name,       // name
    List,       // args
    Tuple,      // args
    Dict,       // args: key, value, key, value, ...
    Attr,       // args[0].name
    Index,      // args[0][args[1]]
    Slice,      // args[0][args[1]:args[2]:args[3]] (null children = omitted)
    Call,       // args[0](args[1..]) with kwargs
    Filter,     // args[0] | name(args[1..], kwargs)
    Test,       // args[0] is [not] name(args[1..]); negate
    Unary,      // op args[0]: "not", "-", "+"
    Binary,     // args[0] op args[1]
    Conditional,  // args[1] if args[0] else args[2] (args[2] null: undefined)
  };
  Kind kind;
  int line = 0;
  std::string name;  // Name, Attr, Filter, Test: the name; Unary, Binary: the operator
  Value value;       // Literal
  std::vector<ExprPtr> args;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;  // Call, Filter
  bool negate = false;  // Test: "is not"
};

struct Node;
using Body = std::vector<std::unique_ptr<Node>>;

struct Node {
  enum class Kind {
    Text,      // text
    Output,    // {{ expr }}
    If,        // branches: (condition, body) ...; else_body
    For,       // targets in expr [if filter]: body; else_body
    Set,       // target(.attr) = expr
    Break,
    Continue,
    Block,     // body rendered as is ({% generation %})
  };
  Kind kind;
  int line = 0;
  std::string text;
  ExprPtr expr;    // Output, For (the sequence), Set (the value)
  ExprPtr filter;  // For: the optional `if` condition
  std::vector<std::string> targets;  // For: loop variables; Set: the name [, the attribute]
  std::vector<std::pair<ExprPtr, Body>> branches;  // If
  Body body;       // For, Block
  Body else_body;  // If, For
};

struct Template::Impl {
  std::string origin;
  Body body;
};

// Parses `source` into a body (jinja_parse.cpp); FormatError "<origin>: line N: <what>".
Body parse_template(std::string_view source, const std::string& origin);

}  // namespace latentllm::io::jinja
