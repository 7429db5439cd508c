// CompileRegex against the C++ standard library's ECMAScript regex (std::regex_search for
// JSON Schema's unanchored `pattern`, std::regex_match anchored) on ASCII patterns and strings,
// where both work on the same characters; then what std::regex cannot check (code points in
// UTF-8, prefixes that can still match) and the constructs refused by name.
#include <gtest/gtest.h>

#include <regex>
#include <string>
#include <vector>

#include "engine/grammar/lex_grammar.h"
#include "engine/grammar/regex.h"

namespace kvserve {
namespace regex_test {

const char* kPatterns[] = {
    "abc",          "^abc$",           "a|b|cd",        "^(ab|cd)*$",       "^a+b?c*$",
    "^[a-z]{2,4}$", "^\\d{3}-\\d{4}$", "^[^0-9]+$",     "x{2}",             "^(a|ab)(c|bcd)$",
    "\\w+@\\w+\\.com", "^\\s*$",       "^[A-Z][a-z]*( [A-Z][a-z]*)*$",      "^.{0,3}$",
    "^(?:foo|bar)baz$", "^[-+]?[0-9]*\\.?[0-9]+$", "^#[0-9a-fA-F]{6}$",    "a.c",
    "^\\(\\d+\\)$", "^[\\w.-]+$",      "^a{1,}$",       "^$",               "^(a?){3}$",
    "^[a\\-z]$",    "b{0}c",           "^(x|y|)z$",     "^\\x41\\u0042$",   "^[\\d\\s]+$",
    "^[^\\w]$",     "^(a+)+$",         "^ab{2,}c$",     "^[.]$",
};

const char* kInputs[] = {
    "",       "a",       "abc",      "xabcx",   "ab",     "cd",       "abcd",     "abab",     "ababcd",
    "aaab",   "ac",      "abbbc",    "ab",      "abcde",  "123-4567", "12-34567", "hello",    "h3llo",
    "xx",     "x",       "xxx",      "abcd",    "abd",    "me@site.com", "me@site.org", "   ",  "\t\n",
    " a ",    "Hello World", "hello World", "Hello", "abc", "abcd", "foobaz", "barbaz", "bazbaz",
    "+1.5",   "-.5",     "1.",       "#a0B1c2", "#a0B1c", "a c",      "(123)",    "(12a)",    "a.b-c_d",
    "aaaa",   "z",       "xz",       "yz",      "AB",     "1 2 3",    "!",        "a-",       "-",
    "aa",     "a{,2}",   "abbc",     ".",       "bc",     "c",        "aaaaaaaaaaaa!",
};

TEST(Regex, AgreesWithStdRegexOnAsciiPatternsAndStrings) {
  for (const char* pattern : kPatterns) {
    SCOPED_TRACE(pattern);
    StatusOr<ByteDfa> search = CompileRegex(pattern);
    StatusOr<ByteDfa> whole = CompileRegex(pattern, {.anchored = true});
    ASSERT_TRUE(search.ok()) << search.status().ToString();
    ASSERT_TRUE(whole.ok()) << whole.status().ToString();
    const std::regex reference(pattern, std::regex::ECMAScript);
    for (const char* input : kInputs) {
      EXPECT_EQ(search->Matches(input), std::regex_search(input, reference)) << "search in \"" << input << "\"";
      EXPECT_EQ(whole->Matches(input), std::regex_match(input, reference)) << "whole of \"" << input << "\"";
    }
  }
}

TEST(Regex, CodePointsAreUtf8Sequences) {
  StatusOr<ByteDfa> cyrillic = CompileRegex("^[а-я]+$");
  ASSERT_TRUE(cyrillic.ok());
  EXPECT_TRUE(cyrillic->Matches("привет"));
  EXPECT_FALSE(cyrillic->Matches("hello"));
  EXPECT_FALSE(cyrillic->Matches("\xD0"));  // half a character
  StatusOr<ByteDfa> one = CompileRegex("^.$");
  ASSERT_TRUE(one.ok());
  for (const char* c : {"a", "é", "€", "😀"}) EXPECT_TRUE(one->Matches(c)) << c;
  EXPECT_FALSE(one->Matches("ab"));
  EXPECT_FALSE(one->Matches("\n"));
  EXPECT_FALSE(one->Matches("\xFF"));  // never valid UTF-8
  StatusOr<ByteDfa> not_digit = CompileRegex("^\\D$");
  ASSERT_TRUE(not_digit.ok());
  EXPECT_TRUE(not_digit->Matches("日"));
  EXPECT_FALSE(not_digit->Matches("7"));
  StatusOr<ByteDfa> escapes = CompileRegex("^\\u{1F600}\\uD83D\\uDE00$");
  ASSERT_TRUE(escapes.ok());
  EXPECT_TRUE(escapes->Matches("😀😀"));
}

TEST(Regex, APrefixIsLiveWhileAMatchCanStillFollow) {
  StatusOr<ByteDfa> dfa = CompileRegex("^\\d{3}-\\d{4}$");
  ASSERT_TRUE(dfa.ok());
  EXPECT_GE(dfa->Walk(dfa->start, "123-"), 0);
  EXPECT_FALSE(dfa->Accepts(dfa->Walk(dfa->start, "123-")));
  EXPECT_EQ(dfa->Walk(dfa->start, "12a"), ByteDfa::kDead);
  EXPECT_EQ(dfa->Walk(dfa->start, "123-45678"), ByteDfa::kDead);
}

TEST(Regex, UnsupportedConstructsAreErrorsThatNameThem) {
  const std::pair<const char*, const char*> kCases[] = {
      {"(a)\\1", "backreference"}, {"a(?=b)", "lookaround"}, {"a(?!b)", "lookaround"}, {"\\bword", "\\b"},
      {"a^b", "^ and $"},          {"(ab", "unterminated group"}, {"ab)", "unbalanced"}, {"[ab", "unterminated"},
      {"*a", "nothing to repeat"}, {"a{3,1}", "m < n"},       {"a{1001}", "over 1000"}, {"[z-a]", "out of order"},
      {"\\p{L}", "\\p"},
  };
  for (const auto& [pattern, what] : kCases) {
    StatusOr<ByteDfa> dfa = CompileRegex(pattern);
    ASSERT_FALSE(dfa.ok()) << pattern;
    EXPECT_EQ(dfa.status().code(), StatusCode::kInvalidArgument) << pattern;
    EXPECT_NE(dfa.status().message().find(what), std::string::npos) << pattern << ": " << dfa.status().message();
  }
}

TEST(Regex, AnAutomatonPastTheStateLimitIsRefused) {
  // (a|b)*a(a|b){12}: the DFA must remember the last 13 letters, 2^13 states.
  StatusOr<ByteDfa> dfa = CompileRegex("^(a|b)*a(a|b){12}$", {.anchored = false, .max_states = 1000});
  ASSERT_FALSE(dfa.ok());
  EXPECT_EQ(dfa.status().code(), StatusCode::kResourceExhausted);
}

// Issue 54, D1: client patterns that recursed once per character overflowed the stack.
TEST(Regex, DeepNestingIsRefusedNotRecursedInto) {
  const std::string deep = std::string(20000, '(') + "a" + std::string(20000, ')');
  StatusOr<ByteDfa> groups = CompileRegex(deep);
  ASSERT_FALSE(groups.ok());
  EXPECT_EQ(groups.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(groups.status().message().find("nested over 200"), std::string::npos) << groups.status().message();
  const std::string stars = "a" + std::string(100000, '*');
  StatusOr<ByteDfa> stacked = CompileRegex(stars);
  ASSERT_FALSE(stacked.ok());
  EXPECT_EQ(stacked.status().code(), StatusCode::kInvalidArgument);
  // Nesting up to the limit still compiles.
  StatusOr<ByteDfa> ok = CompileRegex("^" + std::string(200, '(') + "a" + std::string(200, ')') + "$");
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_TRUE(ok->Matches("a"));
}

// A quantifier after a quantifier is a syntax error in ECMAScript and Python; the lazy '?' is not.
TEST(Regex, AQuantifierAfterAQuantifierHasNothingToRepeat) {
  for (const char* pattern : {"a**", "a+*", "a{2}{3}", "a?+", "a*??", "(a)+{2}"}) {
    StatusOr<ByteDfa> dfa = CompileRegex(pattern);
    ASSERT_FALSE(dfa.ok()) << pattern;
    EXPECT_EQ(dfa.status().code(), StatusCode::kInvalidArgument) << pattern;
    EXPECT_NE(dfa.status().message().find("nothing to repeat"), std::string::npos) << dfa.status().message();
  }
  for (const char* lazy : {"^a*?b$", "^a+?b$", "^a??b$", "^a{1,2}?b$"}) {
    StatusOr<ByteDfa> dfa = CompileRegex(lazy);
    ASSERT_TRUE(dfa.ok()) << lazy << ": " << dfa.status().ToString();
    EXPECT_EQ(dfa->Matches("ab"), std::regex_match("ab", std::regex(lazy, std::regex::ECMAScript))) << lazy;
  }
}

// The regex fuzzer's out-of-memory (CI, seed 3043786796): quantifiers nested 26 deep doubled the
// NFA per level and the subset construction held millions of states per DFA state. Each of
// these is refused within the compile's bounds (RegexOptions::max_nfa_states,
// max_subset_work) instead of taking gigabytes.
TEST(Regex, AutomataThatMultiplyAreRefusedWithinTheirBounds) {
  std::string nested_plus = "a";
  for (int i = 0; i < 26; ++i) nested_plus = "(" + nested_plus + ")+";
  std::string nested_counts = "a";
  for (int i = 0; i < 3; ++i) nested_counts = "(" + nested_counts + "){1000}";
  for (const std::string& pattern : {nested_plus, nested_counts, std::string("([\\s\\S]{1000}){1000}")}) {
    for (bool anchored : {false, true}) {
      StatusOr<ByteDfa> dfa = CompileRegex(pattern, {.anchored = anchored, .max_states = 2000});
      ASSERT_FALSE(dfa.ok()) << pattern;
      EXPECT_EQ(dfa.status().code(), StatusCode::kResourceExhausted) << pattern << ": " << dfa.status().message();
    }
  }
  // Subset construction: each of 2^16 closures visits many NFA states.
  RegexOptions tight{.anchored = false, .max_states = 100000, .max_nfa_states = 250000, .max_subset_work = 100000};
  StatusOr<ByteDfa> work = CompileRegex("(a|b)*a(a|b){15}", tight);
  ASSERT_FALSE(work.ok());
  EXPECT_NE(work.status().message().find("subset construction"), std::string::npos) << work.status().message();
}

// D14: a pattern is UTF-8 text and its automaton matches only UTF-8: a lone surrogate or a byte
// that is not UTF-8 is refused, where it made the model write invalid UTF-8.
TEST(Regex, SurrogatesAndInvalidBytesAreRefused) {
  for (const std::string pattern : {"\\ud800", "a\\uDC00", "\\u{D800}", "\xff", "\xed\xa0\x80", "\xc0\xaf", "a\xe2\x82"}) {
    StatusOr<ByteDfa> dfa = CompileRegex(pattern);
    ASSERT_FALSE(dfa.ok()) << pattern;
    EXPECT_EQ(dfa.status().code(), StatusCode::kInvalidArgument) << pattern;
  }
  // A surrogate as a class range's end is common in schemas (UTF-16 habits): its code points
  // are simply not there in UTF-8.
  StatusOr<ByteDfa> no_surrogates = CompileRegex("^[^\\uD800-\\uDFFF]+$");
  ASSERT_TRUE(no_surrogates.ok()) << no_surrogates.status().ToString();
  EXPECT_TRUE(no_surrogates->Matches("héllo😀"));
  EXPECT_FALSE(no_surrogates->Matches("\xed\xa0\x80"));
}

TEST(Regex, ChoiceAcceptsExactlyItsStrings) {
  const std::vector<std::string> choices = {"red", "green", "gr", ""};
  const ByteDfa dfa = ChoiceDfa(choices);
  for (const std::string& c : choices) EXPECT_TRUE(dfa.Matches(c)) << c;
  EXPECT_FALSE(dfa.Matches("gre"));
  EXPECT_FALSE(dfa.Matches("redd"));
  EXPECT_GE(dfa.Walk(dfa.start, "gre"), 0);
  EXPECT_EQ(ChoiceDfa({}).start, ByteDfa::kDead);
}

// An automaton stores a column per class of bytes it treats alike (issue 54, item 2: memory
// per state follows the fan-out, not 1 KiB), in one canonical form whatever built it.
TEST(Regex, AutomataStoreAColumnPerByteClass) {
  StatusOr<ByteDfa> number = CompileRegex("[0-9]+(\\.[0-9]+)?", {.anchored = true});
  ASSERT_TRUE(number.ok());
  EXPECT_EQ(number->num_classes, 3);  // digits, the dot, every other byte
  EXPECT_TRUE(number->Matches("12.5"));
  EXPECT_FALSE(number->Matches("12."));
  StatusOr<ByteDfa> text = CompileRegex(".*", {.anchored = true, .json_string = true});
  ASSERT_TRUE(text.ok());
  EXPECT_LE(text->num_classes, 48);  // escapes and hex digits tell letters apart
  EXPECT_LT(text->memory_bytes(), static_cast<size_t>(text->num_states()) * 48 * 4 + 1024);
  for (const ByteDfa& dfa : {*number, *text, ChoiceDfa(std::vector<std::string>{"red", "green", "blue"}),
                             WhitespaceLayout(3), MinimizeDfa(*text)}) {
    // The same transitions as 256-byte rows, and the same form when built from them.
    std::vector<ByteDfa::Row> rows(static_cast<size_t>(dfa.num_states()));
    for (int s = 0; s < dfa.num_states(); ++s) {
      for (int b = 0; b < 256; ++b) rows[static_cast<size_t>(s)][static_cast<size_t>(b)] = dfa.Step(s, static_cast<uint8_t>(b));
    }
    const ByteDfa dense = ByteDfa::FromRows(rows, dfa.accepting, dfa.start);
    EXPECT_EQ(dense.byte_class, dfa.byte_class);
    EXPECT_EQ(dense.num_classes, dfa.num_classes);
    EXPECT_EQ(dense.table, dfa.table);
  }
}

// Empty alternatives are one (issue 54, the json_schema fuzzer): "abc|||...|d" with 2,000 of
// them was refused past the NFA bound, and 300 around a literal took the whole subset
// construction budget (0.5 s in Release, 15 s in the sanitized fuzzer).
TEST(Regex, EmptyAlternativesAreOne) {
  const std::string many = "abc" + std::string(2000, '|') + "d";
  for (bool json : {false, true}) {
    StatusOr<ByteDfa> dfa = CompileRegex(many, {.anchored = true, .json_string = json});
    StatusOr<ByteDfa> one = CompileRegex("abc||d", {.anchored = true, .json_string = json});
    ASSERT_TRUE(dfa.ok()) << dfa.status().ToString();
    ASSERT_TRUE(one.ok());
    for (const char* s : {"abc", "d", "", "ab", "abcd", "x"}) {
      const std::string text = json ? JsonStringLiteral(s) : s;
      EXPECT_EQ(dfa->Matches(text), one->Matches(text)) << s;
    }
    EXPECT_EQ(dfa->num_states(), one->num_states());
  }
  const std::string fuzzed = "V[a-z]:N8nlohmann16json" + std::string(300, '|') + "<" + std::string(300, '|') + "::dil";
  EXPECT_TRUE(CompileRegex(fuzzed, {.json_string = true}).ok());
}

// Leading JSON whitespace is one automaton the lexer runs before each lexeme that has it, not a
// copy in each lexeme (issue 54, item 2), with a lexeme's length count on top.
TEST(Regex, LexemesShareTheirLeadingWhitespace) {
  LexGrammar g;
  g.whitespace = WhitespaceLayout(2);
  const int32_t number = g.AddLexeme("number", *CompileRegex("[0-9]+", {.anchored = true}), 0, -1, true);
  const ByteDfa text = MinimizeDfa(*CompileRegex("[\\s\\S]*", {.anchored = true, .json_string = true}));
  const int32_t word = g.AddLexeme("word", text, /*min_code_points=*/2, /*max_code_points=*/3, true);
  const int32_t bare = g.AddLexeme("bare", *CompileRegex("[0-9]+", {.anchored = true}));
  auto lexes = [&g](int32_t l, std::string_view s) {
    int32_t state = g.LexemeStart(l);
    for (char c : s) state = state < 0 ? state : g.LexemeStep(l, state, static_cast<uint8_t>(c));
    return state >= 0 && g.LexemeAccepts(l, state);
  };
  for (const char* ok : {"7", "  7", "\t 7", "\n  7", "\r\n7", "\n7"}) EXPECT_TRUE(lexes(number, ok)) << ok;
  for (const char* bad : {"   7", "\n\n7", " \n7", "\r7", "\n   7", " ", ""}) EXPECT_FALSE(lexes(number, bad)) << bad;
  for (const char* ok : {"\"ab\"", " \"abc\"", "\n \"\u00e9t\u00e9\""}) EXPECT_TRUE(lexes(word, ok)) << ok;
  for (const char* bad : {" \"a\"", "\"abcd\"", "  \"ab", "   \"ab\""}) EXPECT_FALSE(lexes(word, bad)) << bad;
  EXPECT_TRUE(lexes(bare, "7"));
  EXPECT_FALSE(lexes(bare, " 7"));
  // The grammar holds the whitespace once: its lexemes' automata have no whitespace states.
  EXPECT_EQ(g.LexemeStates(number), g.lexemes[static_cast<size_t>(number)].num_states() + g.whitespace.num_states());
  EXPECT_EQ(g.num_dfa_states(), g.lexemes[0].num_states() + g.lexemes[1].num_states() + g.lexemes[2].num_states());
}

}  // namespace regex_test
}  // namespace kvserve
