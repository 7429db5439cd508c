// The Jinja parser (see parser.h).
#include "engine/jinja/parser.h"

#include <cstdlib>
#include <initializer_list>

#include "engine/jinja/error.h"
#include "engine/jinja/lexer.h"

namespace kvserve::jinja {
namespace {

using T = Token::Type;

// Nesting bound: a template nested deeper than this is refused, not a stack overflow.
constexpr int kMaxDepth = 100;

class Parser {
 public:
  explicit Parser(std::vector<Token> tokens) : t_(std::move(tokens)) {}

  Body Template() {
    Body body = Statements({});
    if (!At(T::kEnd)) Fail("unexpected '" + Peek().text + "'");
    return body;
  }

 private:
  // ---------------------------------------------------------------- tokens
  const Token& Peek(size_t ahead = 0) const { return t_[std::min(i_ + ahead, t_.size() - 1)]; }
  bool At(T type) const { return Peek().type == type; }
  bool AtOp(std::string_view op) const { return At(T::kOperator) && Peek().text == op; }
  bool AtName(std::string_view name) const { return At(T::kName) && Peek().text == name; }
  const Token& Next() { return t_[i_ < t_.size() - 1 ? i_++ : i_]; }
  bool SkipOp(std::string_view op) {
    if (!AtOp(op)) return false;
    ++i_;
    return true;
  }
  bool SkipName(std::string_view name) {
    if (!AtName(name)) return false;
    ++i_;
    return true;
  }
  [[noreturn]] void Fail(const std::string& what) const {
    throw TemplateError("line " + std::to_string(Peek().line) + ": " + what);
  }
  void ExpectOp(std::string_view op) {
    if (!SkipOp(op)) Fail("expected '" + std::string(op) + "', got '" + Peek().text + "'");
  }
  std::string ExpectName() {
    if (!At(T::kName)) Fail("expected a name, got '" + Peek().text + "'");
    return Next().text;
  }
  void ExpectBlockEnd() {
    if (!At(T::kBlockEnd)) Fail("expected the end of the tag, got '" + Peek().text + "'");
    ++i_;
  }
  ExprPtr Make(Expr::Kind kind) {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->line = Peek().line;
    return e;
  }
  struct DepthGuard {
    explicit DepthGuard(Parser* p) : p_(p) {
      if (++p_->depth_ > kMaxDepth) p_->Fail("the template is nested too deeply");
    }
    ~DepthGuard() { --p_->depth_; }
    Parser* p_;
  };

  // ---------------------------------------------------------------- statements
  // Statements up to one of the `ends` tags (left unconsumed, at its name) or the end.
  Body Statements(std::initializer_list<std::string_view> ends) {
    DepthGuard guard(this);
    Body body;
    while (!At(T::kEnd)) {
      if (At(T::kText)) {
        auto n = std::make_unique<Node>();
        n->kind = Node::Kind::kText;
        n->line = Peek().line;
        n->text = Next().text;
        body.push_back(std::move(n));
      } else if (At(T::kVariableBegin)) {
        ++i_;
        auto n = std::make_unique<Node>();
        n->kind = Node::Kind::kOutput;
        n->line = Peek().line;
        n->expr = Tuple(true);
        if (!At(T::kVariableEnd)) Fail("expected '}}', got '" + Peek().text + "'");
        ++i_;
        body.push_back(std::move(n));
      } else if (At(T::kBlockBegin)) {
        const Token& tag = Peek(1);
        if (tag.type == T::kName) {
          for (std::string_view end : ends) {
            if (tag.text == end) {
              ++i_;  // leave the name to the caller
              return body;
            }
          }
        }
        ++i_;
        if (NodePtr n = Statement()) body.push_back(std::move(n));
      } else {
        Fail("unexpected '" + Peek().text + "'");
      }
    }
    if (ends.size() > 0) Fail("missing {% " + std::string(*ends.begin()) + " %}");
    return body;
  }

  NodePtr Statement() {
    const int line = Peek().line;
    const std::string tag = ExpectName();
    auto n = std::make_unique<Node>();
    n->line = line;
    if (tag == "if") {
      n->kind = Node::Kind::kIf;
      n->conditions.push_back(Tuple(true));
      ExpectBlockEnd();
      while (true) {
        n->bodies.push_back(Statements({"elif", "else", "endif"}));
        const std::string which = ExpectName();
        if (which == "elif") {
          n->conditions.push_back(Tuple(true));
          ExpectBlockEnd();
          continue;
        }
        if (which == "else") {
          ExpectBlockEnd();
          n->else_body = Statements({"endif"});
          ExpectName();
        }
        break;
      }
      ExpectBlockEnd();
    } else if (tag == "for") {
      n->kind = Node::Kind::kFor;
      n->target = AssignTarget(/*allow_attribute=*/false);
      if (!SkipName("in")) Fail("expected 'in' in a for loop");
      n->expr = Tuple(false, /*stop_at_recursive=*/true);
      if (SkipName("if")) n->conditions.push_back(Expression(true));
      n->recursive = SkipName("recursive");
      ExpectBlockEnd();
      n->bodies.push_back(Statements({"else", "endfor"}));
      if (ExpectName() == "else") {
        ExpectBlockEnd();
        n->else_body = Statements({"endfor"});
        ExpectName();
      }
      ExpectBlockEnd();
    } else if (tag == "set") {
      n->target = AssignTarget(/*allow_attribute=*/true);
      if (SkipOp("=")) {
        n->kind = Node::Kind::kSet;
        n->expr = Tuple(true);
        ExpectBlockEnd();
      } else {
        n->kind = Node::Kind::kSetBlock;
        if (AtOp("|")) n->expr = FilterChain(nullptr);
        ExpectBlockEnd();
        n->bodies.push_back(Statements({"endset"}));
        ExpectName();
        ExpectBlockEnd();
      }
    } else if (tag == "macro") {
      n->kind = Node::Kind::kMacro;
      n->name = ExpectName();
      Params(n.get());
      ExpectBlockEnd();
      n->bodies.push_back(Statements({"endmacro"}));
      ExpectName();
      if (At(T::kName)) ++i_;  // {% endmacro name %}
      ExpectBlockEnd();
    } else if (tag == "call") {
      n->kind = Node::Kind::kCallBlock;
      if (AtOp("(")) Params(n.get());
      n->expr = Expression(true);
      if (n->expr->kind != Expr::Kind::kCall) Fail("a call block needs a call");
      ExpectBlockEnd();
      n->bodies.push_back(Statements({"endcall"}));
      ExpectName();
      ExpectBlockEnd();
    } else if (tag == "filter") {
      n->kind = Node::Kind::kFilterBlock;
      n->expr = FilterChain(nullptr, /*first_pipe=*/false);
      ExpectBlockEnd();
      n->bodies.push_back(Statements({"endfilter"}));
      ExpectName();
      ExpectBlockEnd();
    } else if (tag == "with") {
      n->kind = Node::Kind::kWith;
      while (!At(T::kBlockEnd)) {
        if (!n->params.empty()) ExpectOp(",");
        std::string name = ExpectName();
        ExpectOp("=");
        n->params.emplace_back(std::move(name), Expression(true));
      }
      ExpectBlockEnd();
      n->bodies.push_back(Statements({"endwith"}));
      ExpectName();
      ExpectBlockEnd();
    } else if (tag == "generation") {
      // transformers' tag: its body renders unchanged.
      ExpectBlockEnd();
      n->kind = Node::Kind::kIf;
      n->conditions.push_back(Make(Expr::Kind::kLiteral));
      n->conditions.back()->value = Value(true);
      n->bodies.push_back(Statements({"endgeneration"}));
      ExpectName();
      ExpectBlockEnd();
    } else if (tag == "break" || tag == "continue") {
      n->kind = tag == "break" ? Node::Kind::kBreak : Node::Kind::kContinue;
      ExpectBlockEnd();
    } else {
      Fail("the '" + tag + "' tag is not supported");
    }
    return n;
  }

  Target AssignTarget(bool allow_attribute) {
    Target target;
    const bool paren = SkipOp("(");
    target.names.push_back(ExpectName());
    if (allow_attribute && SkipOp(".")) {
      target.attribute = ExpectName();
      return target;
    }
    while (SkipOp(",")) {
      if (!At(T::kName)) break;
      target.names.push_back(ExpectName());
    }
    if (paren) ExpectOp(")");
    for (const std::string& name : target.names) {
      if (name == "true" || name == "false" || name == "none" || name == "True" || name == "False" || name == "None") {
        Fail("cannot assign to '" + name + "'");
      }
    }
    return target;
  }

  void Params(Node* n) {
    ExpectOp("(");
    while (!SkipOp(")")) {
      if (!n->params.empty()) ExpectOp(",");
      if (SkipOp(")")) break;
      std::string name = ExpectName();
      ExprPtr def;
      if (SkipOp("=")) def = Expression(true);
      n->params.emplace_back(std::move(name), std::move(def));
    }
  }

  // ---------------------------------------------------------------- expressions
  // An expression, or a tuple of them without parentheses (`a, b`).
  ExprPtr Tuple(bool with_condition, bool stop_at_recursive = false) {
    ExprPtr first = Expression(with_condition);
    if (!AtOp(",")) return first;
    ExprPtr tuple = Make(Expr::Kind::kTuple);
    tuple->args.push_back(std::move(first));
    while (SkipOp(",")) {
      if (At(T::kBlockEnd) || At(T::kVariableEnd) || (stop_at_recursive && (AtName("recursive") || AtName("if")))) break;
      tuple->args.push_back(Expression(with_condition));
    }
    return tuple;
  }

  ExprPtr Expression(bool with_condition) {
    DepthGuard guard(this);
    ExprPtr e = Or();
    while (with_condition && SkipName("if")) {
      ExprPtr c = Make(Expr::Kind::kCondition);
      ExprPtr test = Or();
      ExprPtr otherwise = SkipName("else") ? Expression(true) : nullptr;
      c->args.push_back(std::move(e));
      c->args.push_back(std::move(test));
      c->args.push_back(std::move(otherwise));
      e = std::move(c);
    }
    return e;
  }

  ExprPtr Binary(ExprPtr left, std::string op, ExprPtr right) {
    ExprPtr e = Make(Expr::Kind::kBinary);
    e->name = std::move(op);
    e->args.push_back(std::move(left));
    e->args.push_back(std::move(right));
    return e;
  }

  ExprPtr Or() {
    ExprPtr e = And();
    while (SkipName("or")) e = Binary(std::move(e), "or", And());
    return e;
  }
  ExprPtr And() {
    ExprPtr e = Not();
    while (SkipName("and")) e = Binary(std::move(e), "and", Not());
    return e;
  }
  ExprPtr Not() {
    if (AtName("not")) {
      ++i_;
      DepthGuard guard(this);
      ExprPtr e = Make(Expr::Kind::kNot);
      e->args.push_back(Not());
      return e;
    }
    return Compare();
  }
  ExprPtr Compare() {
    ExprPtr first = Math1();
    ExprPtr e;
    while (true) {
      std::string op;
      if (At(T::kOperator) && (Peek().text == "==" || Peek().text == "!=" || Peek().text == "<" ||
                               Peek().text == ">" || Peek().text == "<=" || Peek().text == ">=")) {
        op = Next().text;
      } else if (AtName("in")) {
        ++i_;
        op = "in";
      } else if (AtName("not") && Peek(1).type == T::kName && Peek(1).text == "in") {
        i_ += 2;
        op = "notin";
      } else {
        break;
      }
      if (!e) {
        e = Make(Expr::Kind::kCompare);
        e->args.push_back(std::move(first));
      }
      e->ops.push_back(op);
      e->args.push_back(Math1());
    }
    return e ? std::move(e) : std::move(first);
  }
  ExprPtr Math1() {
    ExprPtr e = Concat();
    while (AtOp("+") || AtOp("-")) {
      std::string op = Next().text;
      e = Binary(std::move(e), op, Concat());
    }
    return e;
  }
  ExprPtr Concat() {
    ExprPtr e = Math2();
    while (SkipOp("~")) e = Binary(std::move(e), "~", Math2());
    return e;
  }
  ExprPtr Math2() {
    ExprPtr e = Pow();
    while (AtOp("*") || AtOp("/") || AtOp("//") || AtOp("%")) {
      std::string op = Next().text;
      e = Binary(std::move(e), op, Pow());
    }
    return e;
  }
  ExprPtr Pow() {
    ExprPtr e = Unary(true);
    while (SkipOp("**")) e = Binary(std::move(e), "**", Unary(true));
    return e;
  }
  ExprPtr Unary(bool with_filter) {
    DepthGuard guard(this);
    ExprPtr e;
    if (AtOp("-") || AtOp("+")) {
      e = Make(Next().text == "-" ? Expr::Kind::kNeg : Expr::Kind::kPos);
      e->args.push_back(Unary(false));
    } else {
      e = Primary();
    }
    e = Postfix(std::move(e));
    if (with_filter) e = FilterExpr(std::move(e));
    return e;
  }

  ExprPtr Primary() {
    const Token& tok = Peek();
    if (tok.type == T::kName) {
      const std::string& name = tok.text;
      ExprPtr e = Make(Expr::Kind::kLiteral);
      if (name == "true" || name == "True") e->value = Value(true);
      else if (name == "false" || name == "False") e->value = Value(false);
      else if (name == "none" || name == "None") e->value = Value::None();
      else e->kind = Expr::Kind::kName, e->name = name;
      ++i_;
      return e;
    }
    if (tok.type == T::kString) {
      ExprPtr e = Make(Expr::Kind::kLiteral);
      std::string s;
      while (At(T::kString)) s += Next().text;  // adjacent literals join, as in Python
      e->value = Value(std::move(s));
      return e;
    }
    if (tok.type == T::kInteger || tok.type == T::kFloat) {
      ExprPtr e = Make(Expr::Kind::kLiteral);
      if (tok.type == T::kInteger) {
        errno = 0;
        const long long v = std::strtoll(tok.text.c_str(), nullptr, 10);
        if (errno != 0) Fail("an integer literal out of range");
        e->value = Value(static_cast<int64_t>(v));
      } else {
        e->value = Value(std::strtod(tok.text.c_str(), nullptr));
      }
      ++i_;
      return e;
    }
    if (SkipOp("(")) {
      if (SkipOp(")")) return Make(Expr::Kind::kTuple);
      ExprPtr first = Expression(true);
      if (SkipOp(")")) return first;
      ExprPtr tuple = Make(Expr::Kind::kTuple);
      tuple->args.push_back(std::move(first));
      while (SkipOp(",")) {
        if (AtOp(")")) break;
        tuple->args.push_back(Expression(true));
      }
      ExpectOp(")");
      return tuple;
    }
    if (SkipOp("[")) {
      ExprPtr list = Make(Expr::Kind::kList);
      while (!SkipOp("]")) {
        if (!list->args.empty()) ExpectOp(",");
        if (SkipOp("]")) break;
        list->args.push_back(Expression(true));
      }
      return list;
    }
    if (SkipOp("{")) {
      ExprPtr dict = Make(Expr::Kind::kDict);
      while (!SkipOp("}")) {
        if (!dict->args.empty()) ExpectOp(",");
        if (SkipOp("}")) break;
        dict->args.push_back(Expression(true));
        ExpectOp(":");
        dict->args.push_back(Expression(true));
      }
      return dict;
    }
    Fail("unexpected '" + tok.text + "'");
  }

  ExprPtr Postfix(ExprPtr e) {
    while (true) {
      if (AtOp(".")) {
        ++i_;
        if (At(T::kInteger)) {
          ExprPtr item = Make(Expr::Kind::kItem);
          ExprPtr index = Make(Expr::Kind::kLiteral);
          index->value = Value(static_cast<int64_t>(std::strtoll(Next().text.c_str(), nullptr, 10)));
          item->args.push_back(std::move(e));
          item->args.push_back(std::move(index));
          e = std::move(item);
        } else {
          ExprPtr attr = Make(Expr::Kind::kAttr);
          attr->name = ExpectName();
          attr->args.push_back(std::move(e));
          e = std::move(attr);
        }
      } else if (AtOp("[")) {
        ++i_;
        e = Subscript(std::move(e));
      } else if (AtOp("(")) {
        e = Call(std::move(e));
      } else {
        return e;
      }
    }
  }

  ExprPtr Subscript(ExprPtr target) {
    ExprPtr parts[3];
    bool slice = false;
    for (int k = 0; k < 3; ++k) {
      if (!AtOp(":") && !AtOp("]")) parts[k] = Expression(true);
      if (k < 2 && SkipOp(":")) {
        slice = true;
        continue;
      }
      break;
    }
    ExpectOp("]");
    ExprPtr e = Make(slice ? Expr::Kind::kSlice : Expr::Kind::kItem);
    e->args.push_back(std::move(target));
    if (!slice) {
      if (!parts[0]) Fail("an empty subscript");
      e->args.push_back(std::move(parts[0]));
      return e;
    }
    for (auto& p : parts) e->args.push_back(std::move(p));
    return e;
  }

  // Arguments in parentheses into e->args (after what is there) and e->kwargs.
  void Arguments(Expr* e) {
    ExpectOp("(");
    bool first = true;
    while (!SkipOp(")")) {
      if (!first) ExpectOp(",");
      first = false;
      if (SkipOp(")")) break;
      if (AtOp("*") || AtOp("**")) Fail("*args and **kwargs in calls are not supported");
      if (At(T::kName) && Peek(1).type == T::kOperator && Peek(1).text == "=") {
        std::string name = Next().text;
        ++i_;
        e->kwargs.emplace_back(std::move(name), Expression(true));
      } else {
        if (!e->kwargs.empty()) Fail("a positional argument after a keyword argument");
        e->args.push_back(Expression(true));
      }
    }
  }

  ExprPtr Call(ExprPtr callee) {
    ExprPtr e = Make(Expr::Kind::kCall);
    e->args.push_back(std::move(callee));
    Arguments(e.get());
    return e;
  }

  // `| name(args) | name ...` applied to `input` (null: a filter block's body).
  ExprPtr FilterChain(ExprPtr input, bool first_pipe = true) {
    ExprPtr e = std::move(input);
    bool first = true;
    while ((first && !first_pipe) || SkipOp("|")) {
      first = false;
      ExprPtr f = Make(Expr::Kind::kFilter);
      f->name = ExpectName();
      while (SkipOp(".")) f->name.append(".").append(ExpectName());
      f->args.push_back(std::move(e));
      if (AtOp("(")) Arguments(f.get());
      e = std::move(f);
    }
    return e;
  }

  ExprPtr FilterExpr(ExprPtr e) {
    while (true) {
      if (AtOp("|")) {
        e = FilterChain(std::move(e));
      } else if (AtName("is")) {
        ++i_;
        ExprPtr t = Make(Expr::Kind::kTest);
        t->negated = SkipName("not");
        t->name = ExpectName();
        while (SkipOp(".")) t->name.append(".").append(ExpectName());
        t->args.push_back(std::move(e));
        if (AtOp("(")) {
          Arguments(t.get());
        } else if ((At(T::kName) || At(T::kString) || At(T::kInteger) || At(T::kFloat) || AtOp("(") || AtOp("[") ||
                    AtOp("{")) &&
                   !(AtName("else") || AtName("or") || AtName("and") || AtName("if") || AtName("in") ||
                     AtName("not") || AtName("is") || AtName("recursive"))) {
          t->args.push_back(Postfix(Primary()));
        }
        e = std::move(t);
      } else if (AtOp("(")) {
        e = Call(std::move(e));
      } else {
        return e;
      }
    }
  }

  std::vector<Token> t_;
  size_t i_ = 0;
  int depth_ = 0;
};

}  // namespace

Body Parse(std::string_view source) { return Parser(Tokenize(source)).Template(); }

}  // namespace kvserve::jinja
