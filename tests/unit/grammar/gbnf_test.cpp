// ParseGbnf + EarleyRecognizer. Regular grammars are checked against the regex compiler (two
// independent routes to the same language, string by string); context-free ones (nesting,
// left recursion, empty rules, a small JSON) on sentences and near misses; errors name their
// line and column; rollback restores the recognizer's state.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/reference/earley.h"
#include "engine/grammar/grammar.h"
#include "engine/grammar/regex.h"

namespace kvserve {
namespace gbnf_test {

bool Accepts(const Grammar& g, std::string_view text) {
  EarleyRecognizer r(&g);
  return r.AdvanceAll(text) && r.AcceptsEnd();
}

Grammar MustParse(std::string_view text) {
  StatusOr<Grammar> g = ParseGbnf(text);
  EXPECT_TRUE(g.ok()) << g.status().ToString();
  return g.ok() ? std::move(g).value() : Grammar{};
}

TEST(Gbnf, RegularGrammarsAcceptWhatTheEquivalentRegexMatches) {
  const std::pair<const char*, const char*> kPairs[] = {
      {R"(root ::= [a-z]{2,4} "-" [0-9]+)", R"(^[a-z]{2,4}-[0-9]+$)"},
      {R"(root ::= ("ab" | "cd")* "x"?)", R"(^(ab|cd)*x?$)"},
      {"root ::= [^\"\\\\]* \"\\\"\"", R"(^[^"\\]*"$)"},
      {"root ::= [а-я]+ \" \" [0-9a-fA-F]{1,2}", "^[а-я]+ [0-9a-fA-F]{1,2}$"},
      {"root ::= word (\" \" word){0,2}\nword ::= [A-Z] [a-z]*", "^[A-Z][a-z]*( [A-Z][a-z]*){0,2}$"},
      {"root ::= \"\\x41\\u00e9\\U0001F600\" [\\n\\t]?", "^A\u00e9\U0001F600[\\n\\t]?$"},
  };
  const char* kInputs[] = {
      "ab-1",    "abcde-1", "a-1",      "ab-",    "abcd-123", "ababx",  "cdab", "x",     "abx", "aba",
      "",        "abc\"",   "\"",       "a\"b\"", "привет 1f", "при 123", "да ff", "Hello", "Hello World",
      "Hello World Foo", "Hello World Foo Bar", "hello", "A\u00e9\U0001F600", "A\u00e9\U0001F600\t",
      "A\u00e9\U0001F600  ",
  };
  for (const auto& [gbnf, regex] : kPairs) {
    SCOPED_TRACE(gbnf);
    const Grammar g = MustParse(gbnf);
    StatusOr<ByteDfa> dfa = CompileRegex(regex);
    ASSERT_TRUE(dfa.ok()) << dfa.status().ToString();
    for (const char* input : kInputs) EXPECT_EQ(Accepts(g, input), dfa->Matches(input)) << "\"" << input << "\"";
  }
}

TEST(Gbnf, ContextFreeGrammars) {
  const Grammar parens = MustParse("root ::= \"(\" root \")\" root | \"\"");
  for (const char* s : {"", "()", "(())()", "((()()))"}) EXPECT_TRUE(Accepts(parens, s)) << s;
  for (const char* s : {"(", ")(", "(()", "())"}) EXPECT_FALSE(Accepts(parens, s)) << s;

  // Left recursion, precedence by rules, comments, a body on the line after ::=.
  const Grammar arithmetic = MustParse(R"g(# arithmetic
root ::=
  expr
expr ::= expr ("+" | "-") term | term   # left recursive
term ::= term ("*" | "/") factor | factor
factor ::= [0-9]+ | "(" expr ")"
)g");
  for (const char* s : {"1", "1+2*3", "(1+2)*3", "10/(2-3)*4"}) EXPECT_TRUE(Accepts(arithmetic, s)) << s;
  for (const char* s : {"", "1+", "(1+2", "1++2", "*3"}) EXPECT_FALSE(Accepts(arithmetic, s)) << s;

  const Grammar json = MustParse(R"g(
root   ::= value
value  ::= object | array | string | number | ("true" | "false" | "null")
object ::= "{" ws ( string ws ":" ws value ws ( "," ws string ws ":" ws value ws )* )? "}"
array  ::= "[" ws ( value ws ( "," ws value ws )* )? "]"
string ::= "\"" ( [^"\\\x00-\x1f] | "\\" ( ["\\/bfnrt] | "u" [0-9a-fA-F]{4} ) )* "\""
number ::= "-"? ( "0" | [1-9] [0-9]* ) ( "." [0-9]+ )? ( [eE] [-+]? [0-9]+ )?
ws     ::= [ \t\n]*
)g");
  for (const char* s : {"{}", "[]", R"({"a": [1, 2.5, -3e10], "b": {"c": null}})", R"(["\u00e9\n", true])", "0"}) {
    EXPECT_TRUE(Accepts(json, s)) << s;
  }
  for (const char* s : {"{", R"({"a" 1})", "[1,]", "01", R"("\x")", "[1 2]", "tru"}) EXPECT_FALSE(Accepts(json, s)) << s;
}

TEST(Gbnf, AllowsAndRollback) {
  const Grammar g = MustParse("root ::= \"ab\" [0-9] | \"ax\"");
  EarleyRecognizer r(&g);
  EXPECT_TRUE(r.Allows('a'));
  EXPECT_FALSE(r.Allows('b'));
  ASSERT_TRUE(r.AdvanceAll("ab"));
  EXPECT_FALSE(r.AcceptsEnd());
  EXPECT_FALSE(r.Advance('x'));  // refused: nothing changed
  EXPECT_EQ(r.num_bytes(), 2);
  r.Rollback(1);
  EXPECT_TRUE(r.Allows('x'));
  ASSERT_TRUE(r.Advance('x'));
  EXPECT_TRUE(r.AcceptsEnd());
  EXPECT_FALSE(r.AdvanceAll("yz"));
  EXPECT_EQ(r.num_bytes(), 2);
}

TEST(Gbnf, ErrorsNameTheirLineAndColumn) {
  const std::pair<const char*, const char*> kCases[] = {
      {"root ::= foo", "line 1, column 10: rule 'foo' is used but not defined"},
      {"start ::= \"a\"", "no 'root' rule"},
      {"root ::= \"a", "unterminated literal"},
      {"root ::= \"\\q\"", "unknown escape \\q"},
      {"root ::= \"a\"\nroot ::= \"b\"", "line 2, column 1: rule 'root' is defined twice"},
      {"root ::= \"a\"{3,1}", "n < m"},
      {"root ::= [a-", "unterminated character class"},
      {"root ::= (\"a\"", "expected ')'"},
      {"root = \"a\"", "expected ::="},
      {"root ::= \"a\" ) \"b\"", "expected the end of the rule"},
      {"root ::= \"a\"{1001}", "over 1000"},
  };
  for (const auto& [text, what] : kCases) {
    StatusOr<Grammar> g = ParseGbnf(text);
    ASSERT_FALSE(g.ok()) << text;
    EXPECT_EQ(g.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(g.status().message().find(what), std::string::npos) << text << ": " << g.status().message();
  }
  // Issue 54, D1 and D14: nesting is bounded (the parser recurses by group), and a literal is
  // UTF-8 text.
  const std::pair<std::string, const char*> kLimits[] = {
      {"root ::= " + std::string(20000, '(') + "\"a\"" + std::string(20000, ')'), "nested over 200"},
      {"root ::= \"\\ud800\"", "surrogate"},
      {"root ::= \"\xff\"", "not UTF-8"},
      {"root ::= [\xed\xa0\x80]", "not UTF-8"},
  };
  for (const auto& [text, what] : kLimits) {
    StatusOr<Grammar> g = ParseGbnf(text);
    ASSERT_FALSE(g.ok()) << text.substr(0, 40);
    EXPECT_EQ(g.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(g.status().message().find(what), std::string::npos) << g.status().message();
  }
  EXPECT_TRUE(ParseGbnf("root ::= " + std::string(200, '(') + "\"a\"" + std::string(200, ')')).ok());
  EXPECT_TRUE(ParseGbnf("root ::= [^\\uD800-\\uDFFF]").ok());
  // Counts are expanded; what they may cost is bounded (a client's grammar).
  StatusOr<Grammar> huge = ParseGbnf("root ::= \"" + std::string(1100, 'a') + "\"{1000}");
  ASSERT_FALSE(huge.ok());
  EXPECT_NE(huge.status().message().find("expands to over"), std::string::npos) << huge.status().message();
}

}  // namespace gbnf_test
}  // namespace kvserve
