// CompileRegex against the C++ standard library's ECMAScript regex (std::regex_search for
// JSON Schema's unanchored `pattern`, std::regex_match anchored) on ASCII patterns and strings,
// where both work on the same characters; then what std::regex cannot check (code points in
// UTF-8, prefixes that can still match) and the constructs refused by name.
#include <gtest/gtest.h>

#include <regex>
#include <string>
#include <vector>

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

TEST(Regex, ChoiceAcceptsExactlyItsStrings) {
  const std::vector<std::string> choices = {"red", "green", "gr", ""};
  const ByteDfa dfa = ChoiceDfa(choices);
  for (const std::string& c : choices) EXPECT_TRUE(dfa.Matches(c)) << c;
  EXPECT_FALSE(dfa.Matches("gre"));
  EXPECT_FALSE(dfa.Matches("redd"));
  EXPECT_GE(dfa.Walk(dfa.start, "gre"), 0);
  EXPECT_EQ(ChoiceDfa({}).start, ByteDfa::kDead);
}

}  // namespace regex_test
}  // namespace kvserve
