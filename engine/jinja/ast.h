// The syntax tree of a parsed template (parser.cpp builds it, render.cpp walks it).
// Expressions and statements are one struct each, with the fields their kind uses.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "engine/jinja/value.h"

namespace kvserve::jinja {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  enum class Kind {
    kLiteral,   // value
    kName,      // name
    kList,      // args
    kTuple,     // args
    kDict,      // args: key, value, key, value ...
    kAttr,      // args[0].name
    kItem,      // args[0][args[1]]
    kSlice,     // args[0][args[1]:args[2]:args[3]] (null parts omitted)
    kCall,      // args[0](args[1..], kwargs)
    kFilter,    // name(args[0], args[1..], kwargs); args[0] null in a filter block
    kTest,      // args[0] is [not] name(args[1..])
    kNot,       // not args[0]
    kNeg,       // -args[0]
    kPos,       // +args[0]
    kBinary,    // args[0] op args[1]: + - * / // % ** ~ and or
    kCompare,   // args[0] ops[0] args[1] ops[1] args[2] ... (== != < > <= >= in notin)
    kCondition, // args[0] if args[1] else args[2] (args[2] null: undefined)
  };
  Kind kind = Kind::kLiteral;
  int line = 0;
  Value value;
  std::string name;  // kName, kAttr, kFilter, kTest, kBinary's operator
  bool negated = false;  // kTest: `is not`
  std::vector<ExprPtr> args;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
  std::vector<std::string> ops;  // kCompare
};

struct Node;
using NodePtr = std::unique_ptr<Node>;
using Body = std::vector<NodePtr>;

// A name a value is assigned to: `x`, `ns.x`, or a tuple of names (`k, v`).
struct Target {
  std::vector<std::string> names;  // more than one: unpacking
  std::string attribute;           // `ns.attribute` (names has one: the namespace)
};

struct Node {
  enum class Kind {
    kText,        // text
    kOutput,      // {{ expr }}
    kIf,          // if conditions[i]: bodies[i] ... else: else_body
    kFor,         // for target in expr [if condition]: bodies[0] else: else_body
    kSet,         // set target = expr
    kSetBlock,    // set target: bodies[0] rendered (through expr: a filter chain, when given)
    kMacro,       // macro name(params): bodies[0]
    kCallBlock,   // call(params) expr: bodies[0] is `caller`
    kFilterBlock, // filter expr: bodies[0]
    kWith,        // with params (name = value, in order): bodies[0] in a scope of its own
    kBreak,
    kContinue,
  };
  Kind kind = Kind::kText;
  int line = 0;
  std::string text;
  ExprPtr expr;
  Target target;
  std::vector<ExprPtr> conditions;
  std::vector<Body> bodies;
  Body else_body;
  std::string name;
  std::vector<std::pair<std::string, ExprPtr>> params;  // macro/caller parameters (default or null)
  bool recursive = false;                                // for ... recursive
};

}  // namespace kvserve::jinja
