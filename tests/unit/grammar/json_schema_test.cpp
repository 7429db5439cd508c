// CompileJsonSchema per keyword: JSON texts that are valid instances must be accepted to the end
// (then end-of-text), invalid ones refused, each labelled by hand from the JSON Schema
// specification; unsupported keywords are errors naming the keyword and its pointer.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "engine/grammar/json_schema.h"
#include "engine/grammar/matcher.h"
#include "tests/fuzz/fuzz_util.h"

namespace kvserve {
namespace json_schema_test {


class JsonSchemaTest : public ::testing::Test {
 protected:
  // What a text's tokens are does not matter here (texts are fed as bytes): a byte-level BPE
  // vocabulary built in memory, so these tests need no files.
  static void SetUpTestSuite() {
    tokenizer_ = fuzz::MakeBpeTokenizer("gpt-2").release();
    trie_ = new TokenTrie(*tokenizer_);
  }

  // Whether `text` is a complete sentence of the schema's grammar.
  static bool Accepts(const std::shared_ptr<CompiledGrammar>& g, const std::string& text) {
    GrammarMatcher m(g);
    return m.AcceptBytes(text) && m.CanEnd();
  }
  static std::shared_ptr<CompiledGrammar> Compile(const char* schema) {
    StatusOr<CompiledSchema> c = CompileJsonSchema(schema);
    EXPECT_TRUE(c.ok()) << schema << ": " << c.status().ToString();
    if (!c.ok()) return nullptr;
    return std::make_shared<CompiledGrammar>(std::move(c->grammar), trie_);
  }
  // Each of `valid` accepted, each of `invalid` refused.
  static void Check(const char* schema, std::initializer_list<const char*> valid, std::initializer_list<const char*> invalid) {
    const auto g = Compile(schema);
    ASSERT_NE(g, nullptr);
    for (const char* v : valid) EXPECT_TRUE(Accepts(g, v)) << schema << " should accept " << v;
    for (const char* v : invalid) EXPECT_FALSE(Accepts(g, v)) << schema << " should refuse " << v;
  }

  static Tokenizer* tokenizer_;
  static TokenTrie* trie_;
};
Tokenizer* JsonSchemaTest::tokenizer_ = nullptr;
TokenTrie* JsonSchemaTest::trie_ = nullptr;

TEST_F(JsonSchemaTest, Types) {
  Check(R"({"type": "integer"})", {"0", "-12", "123456789012", " 7"}, {"1.5", "01", "-0", "\"1\"", "", "1e3"});
  Check(R"({"type": "number"})", {"0", "-1.25", "3e10", "2.5E-3", "1.0"}, {".5", "1.", "+1", "NaN", "0x10"});
  Check(R"({"type": "boolean"})", {"true", "false"}, {"True", "1", "null"});
  Check(R"({"type": "null"})", {"null"}, {"nul", "\"null\""});
  Check(R"({"type": ["string", "null"]})", {"\"a\"", "null"}, {"1", "{}"});
  Check(R"({"type": "string"})", {R"("")", R"("a \"q\" \\ \/ \n \u001f é 😀")"}, {R"("a)", "\"tab\there\"", R"("\x")", "'a'"});
  Check(R"({})", {"1", "\"s\"", "[1, {\"a\": [null]}]", "{}", "true"}, {"[1,]", "{\"a\"}", "tru"});
  Check(R"({"type": "string", "nullable": true})", {"null", "\"x\""}, {"1"});
}

TEST_F(JsonSchemaTest, Strings) {
  Check(R"({"type": "string", "minLength": 2, "maxLength": 3})", {R"("ab")", R"("abc")", R"("é😀")", R"("\n\t")"},
        {R"("a")", R"("abcd")", R"("")"});
  Check(R"({"type": "string", "pattern": "^[a-z]+-\\d{2}$"})", {R"("ab-12")"}, {R"("ab-1")", R"("Ab-12")", R"("ab-123")"});
  Check(R"({"type": "string", "pattern": "b+"})", {R"("abbc")", R"("b")"}, {R"("ac")"});  // search semantics
  Check(R"({"type": "string", "pattern": "^a\"b$"})", {R"("a\"b")"}, {R"("a\\b")"});
  Check(R"({"type": "string", "format": "date"})", {R"("2024-02-29")"}, {R"("2024-2-29")", R"("24-02-29")"});
  Check(R"({"type": "string", "format": "uuid"})", {R"("123e4567-e89b-12d3-a456-426614174000")"}, {R"("123e4567")"});
  Check(R"({"type": "string", "format": "email", "maxLength": 8})", {R"("a@b.com")"}, {R"("ab@cd.com")", R"("a.b")"});
  // Long bounds are counted by the lexer, exactly: code points, whatever their bytes or escapes.
  const auto g = Compile(R"({"type": "string", "minLength": 3000, "maxLength": 5000})");
  ASSERT_NE(g, nullptr);
  auto text = [](const std::string& unit, int n) {
    std::string s = "\"";
    for (int i = 0; i < n; ++i) s += unit;
    return s + "\"";
  };
  // (Non-ASCII code points are matched raw, not as \\u escapes: the header's subset.)
  for (const std::string unit : {"a", "\xc3\xa9", "\xf0\x9f\x98\x80", "\\n", "\\u001f", "\\\""}) {
    EXPECT_TRUE(Accepts(g, text(unit, 5000))) << unit;
    EXPECT_TRUE(Accepts(g, text(unit, 3000))) << unit;
    EXPECT_FALSE(Accepts(g, text(unit, 5001))) << unit;
    EXPECT_FALSE(Accepts(g, text(unit, 2999))) << unit;
  }
  EXPECT_TRUE(Accepts(g, "  " + text("a", 4000)));  // leading whitespace is no character
  Check(R"({"type": "string", "minLength": 1})", {R"("a")", R"(" ")"}, {R"("")"});
}

TEST_F(JsonSchemaTest, Numbers) {
  Check(R"({"type": "integer", "minimum": -5, "maximum": 120})", {"-5", "0", "99", "120"}, {"-6", "121", "1000"});
  Check(R"({"type": "integer", "exclusiveMinimum": 0, "exclusiveMaximum": 10})", {"1", "9"}, {"0", "10"});
  Check(R"({"type": "integer", "minimum": 5, "exclusiveMinimum": true})", {"6"}, {"5"});  // draft 4
  Check(R"({"type": "integer", "minimum": 1000})", {"1000", "98765432"}, {"999", "-1000"});
  Check(R"({"type": "integer", "maximum": -10})", {"-10", "-2000"}, {"-9", "0", "5"});
  Check(R"({"type": "integer", "multipleOf": 7, "minimum": 0})", {"0", "14", "700"}, {"15", "-7"});
  Check(R"({"type": "number", "minimum": 0, "maximum": 1})", {"0", "0.5", "1", "1.0", "0.999"}, {"-0.1", "1.01", "2"});
  Check(R"({"type": "number", "exclusiveMinimum": 0})", {"0.001", "3"}, {"0", "0.0", "-1"});
  Check(R"({"type": "number", "minimum": -2.5, "exclusiveMaximum": 3})", {"-2", "2.99", "0"}, {"-3", "3", "3.5"});
  Check(R"({"type": "number", "multipleOf": 0.01})", {"1.25", "3"}, {"1.255"});
  // A number that must be a multiple of an integer is a whole number: exclusive bounds too.
  Check(R"({"type": "number", "multipleOf": 10, "exclusiveMaximum": 100, "exclusiveMinimum": 0})", {"10", "90"},
        {"0", "100", "95"});
}

TEST_F(JsonSchemaTest, EnumAndConst) {
  Check(R"({"enum": ["red", "green", 3, null, {"a": [1, 2]}]})", {R"("red")", "3", "3.0", "null", R"({"a": [1, 2]})"},
        {R"("blue")", "4", R"({"a": [1]})", R"({"a": [1, 2], "b": 1})"});
  Check(R"({"const": "x"})", {R"("x")"}, {R"("y")"});
  Check(R"({"type": "string", "enum": ["a", 1, "bcd"], "maxLength": 2})", {R"("a")"}, {"1", R"("bcd")"});
}

TEST_F(JsonSchemaTest, Objects) {
  const char* person = R"({"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
                          "required": ["name"], "additionalProperties": false})";
  Check(person, {R"({"name": "a"})", R"({"name": "a", "age": 3})", R"( { "name" : "a" , "age":3 } )"},
        {R"({})", R"({"age": 3})", R"({"name": "a", "x": 1})", R"({"name": 1})", R"({"name": "a",})"});
  // additionalProperties default true and as a schema; patternProperties.
  Check(R"({"properties": {"a": {"type": "integer"}}})", {R"({"a": 1, "b": [true]})", R"({"zz": 1})"}, {R"({"a": "s"})"});
  Check(R"({"type": "object", "additionalProperties": {"type": "integer"}})", {R"({"x": 1, "y": 2})"}, {R"({"x": "1"})"});
  Check(R"({"type": "object", "patternProperties": {"^s_": {"type": "string"}}, "additionalProperties": false})",
        {R"({"s_a": "x"})", R"({})"}, {R"({"s_a": 1})", R"({"t": "x"})"});
  Check(R"({"type": "object", "properties": {"s_x": {"maxLength": 1}}, "patternProperties": {"^s_": {"type": "string"}}})",
        {R"({"s_x": "a"})"}, {R"({"s_x": 1})", R"({"s_x": "ab"})"});
  Check(R"({"type": "object", "minProperties": 1})", {R"({"a": 1})"}, {R"({})"});
  Check(R"({"type": "object", "properties": {"a": {}}, "maxProperties": 1, "additionalProperties": false})", {R"({"a": 1})", "{}"},
        {});
}

TEST_F(JsonSchemaTest, Arrays) {
  Check(R"({"type": "array", "items": {"type": "integer"}, "minItems": 1, "maxItems": 3})", {"[1]", "[1, 2, 3]"},
        {"[]", "[1, 2, 3, 4]", "[1, \"a\"]"});
  Check(R"({"type": "array", "prefixItems": [{"type": "string"}, {"type": "integer"}], "items": false})",
        {R"([])", R"(["a"])", R"(["a", 1])"}, {R"(["a", 1, 2])", R"([1])"});
  Check(R"({"type": "array", "items": [{"type": "string"}], "additionalItems": {"type": "boolean"}})",
        {R"(["a", true, false])"}, {R"(["a", 1])"});
  Check(R"({"type": "array", "minItems": 2})", {R"([1, "x"])"}, {"[1]"});
}

TEST_F(JsonSchemaTest, Combinations) {
  Check(R"({"anyOf": [{"type": "integer"}, {"type": "string", "maxLength": 1}]})", {"1", R"("a")"}, {R"("ab")", "1.5"});
  Check(R"({"oneOf": [{"type": "integer"}, {"type": "string"}]})", {"1", R"("a")"}, {"null"});
  Check(R"({"allOf": [{"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]},
                      {"properties": {"b": {"type": "string"}}, "required": ["b"]}]})",
        {R"({"a": 1, "b": "x"})"}, {R"({"a": 1})", R"({"a": "1", "b": "x"})"});
  Check(R"({"allOf": [{"type": "string", "pattern": "^a"}, {"pattern": "b$"}]})", {R"("ab")", R"("axb")"}, {R"("ba")", R"("a")"});
  Check(R"({"type": "object", "properties": {"kind": {"type": "string"}}, "anyOf": [{"required": ["kind"]}, {"required": ["id"]}]})",
        {R"({"kind": "a"})", R"({"id": 3})"}, {R"({})"});
  // Discriminated oneOf: provably disjoint.
  Check(R"({"oneOf": [{"type": "object", "properties": {"t": {"const": "a"}}, "required": ["t"]},
                      {"type": "object", "properties": {"t": {"const": "b"}, "n": {"type": "integer"}}, "required": ["t", "n"]}]})",
        {R"({"t": "a"})", R"({"t": "b", "n": 1})"}, {R"({"t": "c"})", R"({"t": "b"})"});
}

// `not` where it has a positive form: not/not, not/type, not/required of one key, not/enum of strings.
TEST_F(JsonSchemaTest, NotWhereItCanBeSaidPositively) {
  Check(R"({"not": {"type": "string"}})", {"1", "null", "{}", "[]", "true", "2.5"}, {R"("a")"});
  Check(R"({"type": ["string", "integer"], "not": {"type": "integer"}})", {R"("a")"}, {"1", "1.5"});
  Check(R"({"enum": ["a", 1, null], "not": {"type": ["string", "null"]}})", {"1"}, {R"("a")", "null"});
  Check(R"({"type": "object", "not": {"required": ["a"]}})", {"{}", R"({"b": 1})"}, {R"({"a": 1})", R"({"b": 1, "a": 2})"});
  Check(R"({"not": {"required": ["a"]}})", {"{}", R"({"b": null})"}, {"1", R"("x")", "null", R"({"a": 1})"});
  Check(R"({"not": {"not": {"type": "boolean"}}})", {"true", "false"}, {"1", "null"});
  Check(R"({"allOf": [{"type": "object"}, {"not": {"required": ["x"]}}]})", {R"({"y": 1})"}, {R"({"x": 1})", "1"});
  Check(R"({"type": "string", "not": {"enum": ["a", "b\"c", "é"]}})", {R"("")", R"("ab")", R"("b")", R"("e")"},
        {R"("a")", R"("b\"c")", R"("é")"});
  Check(R"({"not": {"const": "x"}, "maxLength": 2})", {R"("y")", R"("xx")", "1", "null"}, {R"("x")", R"("xyz")"});
  Check(R"({"enum": ["a", "b", 3], "not": {"enum": ["b"]}})", {R"("a")", "3"}, {R"("b")"});
  // A merge that would let one side's patternProperties admit keys the other side's
  // additionalProperties forbids is refused, not widened (found by the whole MaskBench).
  EXPECT_FALSE(CompileJsonSchema(R"({"allOf": [{"enum": [{"foo": 1}]}, {"not": {"not": {"patternProperties": {"f.*o": {"type": "integer"}}}}}]})").ok());
  EXPECT_FALSE(CompileJsonSchema(R"({"enum": [{"foo": 1}], "patternProperties": {"f.*o": {"type": "integer"}}})").ok());
  // No positive form: fractional numbers only, a `not` with more than one keyword, numbers
  // excluded, a string with two JSON spellings.
  EXPECT_FALSE(CompileJsonSchema(R"({"type": "number", "not": {"type": "integer"}})").ok());
  EXPECT_FALSE(CompileJsonSchema(R"({"not": {"type": "string", "maxLength": 3}})").ok());
  EXPECT_FALSE(CompileJsonSchema(R"({"not": {"enum": [1]}})").ok());
  EXPECT_FALSE(CompileJsonSchema(R"({"not": {"enum": ["a/b"]}})").ok());
}

TEST_F(JsonSchemaTest, References) {
  Check(R"({"$defs": {"pos": {"type": "integer", "minimum": 1}}, "type": "array", "items": {"$ref": "#/$defs/pos"}})",
        {"[1, 2]"}, {"[0]"});
  // Recursive: a tree of nodes.
  Check(R"({"definitions": {"node": {"type": "object", "properties": {"v": {"type": "integer"},
           "kids": {"type": "array", "items": {"$ref": "#/definitions/node"}}}, "required": ["v"],
           "additionalProperties": false}}, "$ref": "#/definitions/node"})",
        {R"({"v": 1})", R"({"v": 1, "kids": [{"v": 2, "kids": [{"v": 3}]}]})"}, {R"({"v": 1, "kids": [{}]})"});
  Check(R"({"type": "object", "properties": {"self": {"$ref": "#"}, "n": {"type": "null"}}, "additionalProperties": false})",
        {R"({"self": {"self": {"n": null}}})"}, {R"({"self": 1})"});
  Check(R"({"$defs": {"a": {"$anchor": "thing", "type": "boolean"}}, "$ref": "#thing"})", {"true"}, {"1"});
}

TEST_F(JsonSchemaTest, UnsupportedKeywordsNameThemselvesAndTheirPointer) {
  for (auto [schema, what] : {std::pair{R"({"properties": {"a": {"not": {"enum": [1]}}}})", "not at /properties/a"},
                              {R"({"type": "array", "uniqueItems": true})", "uniqueItems at /"},
                              {R"({"if": {"type": "string"}, "then": {"minLength": 1}})", "if at /"},
                              {R"({"type": "string", "format": "uri-template"})", "\"uri-template\" at "},
                              {R"({"oneOf": [{"type": "integer"}, {"type": "number"}]})", "oneOf"},
                              {R"({"$ref": "other.json#/a"})", "only references inside the schema"}}) {
    StatusOr<CompiledSchema> c = CompileJsonSchema(schema);
    ASSERT_FALSE(c.ok()) << schema;
    EXPECT_EQ(c.status().code(), StatusCode::kInvalidArgument) << schema;
    EXPECT_NE(c.status().message().find(what), std::string::npos) << c.status().message();
  }
  JsonSchemaOptions lenient;
  lenient.lenient = true;
  StatusOr<CompiledSchema> c = CompileJsonSchema(R"({"type": "array", "uniqueItems": true, "not": {}})", lenient);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->ignored.size(), 2u);
  EXPECT_FALSE(CompileJsonSchema(R"({"type": "integer", "minimum": 5, "maximum": 1})").ok());
  EXPECT_FALSE(CompileJsonSchema("false").ok());
}

// Issue 54, D14: counts must be non-negative integers (JSON Schema's own rule); -5 was ignored
// and 1e300 converted to an integer (undefined behaviour). A huge maximum bounds nothing.
TEST(JsonSchemaCounts, CountsThatAreNotNonNegativeIntegersAreRefused) {
  for (const char* schema : {R"({"type": "string", "maxLength": -5})", R"({"type": "string", "minLength": 1e300})",
                             R"({"type": "array", "minItems": 2.5})", R"({"type": "object", "maxProperties": "3"})",
                             R"({"allOf": [{"maxLength": 3}, {"maxLength": -1}]})",
                             R"({"type": "array", "items": {"type": "string", "minLength": -1}})"}) {
    StatusOr<CompiledSchema> c = CompileJsonSchema(schema);
    ASSERT_FALSE(c.ok()) << schema;
    EXPECT_EQ(c.status().code(), StatusCode::kInvalidArgument) << schema;
  }
  for (const char* schema : {R"({"type": "string", "maxLength": 1e300})", R"({"type": "array", "maxItems": 1e300})",
                             R"({"type": "string", "minLength": 2.0, "maxLength": 4})"}) {
    StatusOr<CompiledSchema> c = CompileJsonSchema(schema);
    EXPECT_TRUE(c.ok()) << schema << ": " << c.status().ToString();
  }
}

// OpenAPI's int32/int64 formats (Kubernetes schemas): whole numbers in range, as ajv-formats
// checks them (a random model once wrote 12052890722 for an int32).
TEST_F(JsonSchemaTest, OpenApiIntegerFormatsBoundTheValue) {
  for (const char* type : {"integer", "number"}) {
    StatusOr<CompiledSchema> c = CompileJsonSchema(fmt::format(R"({{"type": "{}", "format": "int32"}})", type));
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    const auto g = std::make_shared<CompiledGrammar>(std::move(c->grammar), trie_);
    EXPECT_TRUE(Accepts(g, "2147483647"));
    EXPECT_TRUE(Accepts(g, "-2147483648"));
    EXPECT_FALSE(Accepts(g, "2147483648"));
    EXPECT_FALSE(Accepts(g, "12052890722"));
    EXPECT_FALSE(Accepts(g, "1.5"));
  }
  StatusOr<CompiledSchema> c = CompileJsonSchema(R"({"type": "integer", "format": "int64", "minimum": 5})");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  const auto g = std::make_shared<CompiledGrammar>(std::move(c->grammar), trie_);
  EXPECT_TRUE(Accepts(g, "8999999999999999999"));
  EXPECT_FALSE(Accepts(g, "4"));
}

TEST_F(JsonSchemaTest, BoundedWhitespaceWhenGenerating) {
  JsonSchemaOptions o;
  o.max_whitespace = 2;
  StatusOr<CompiledSchema> c = CompileJsonSchema(R"({"type": "array", "items": {"type": "integer"}})", o);
  ASSERT_TRUE(c.ok());
  const auto g = std::make_shared<CompiledGrammar>(std::move(c->grammar), trie_);
  EXPECT_TRUE(Accepts(g, "[1,  2]"));
  EXPECT_FALSE(Accepts(g, "[1,   2]"));
  // Laid out over lines: one line break and up to 2 of indentation per gap.
  EXPECT_TRUE(Accepts(g, "[\n  1,\n  2\n]"));
  EXPECT_TRUE(Accepts(g, "[\r\n\t1,\r\n2]\n"));
  EXPECT_FALSE(Accepts(g, "[\n\n  1]"));   // a blank line
  EXPECT_FALSE(Accepts(g, "[ \n1]"));      // a space before the break
  EXPECT_FALSE(Accepts(g, "[\n   1]"));    // 3 of indentation
  EXPECT_FALSE(Accepts(g, "[1]\n\n"));    // after the value too
  EXPECT_FALSE(Accepts(g, "[\r1]"));
}

}  // namespace json_schema_test
}  // namespace kvserve
