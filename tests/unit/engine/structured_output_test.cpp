// Structured outputs through the engine: requests with a JSON Schema, a regex, a choice or a
// GBNF grammar, on random-weight models with real vocabularies (byte-level BPE and SPM), run
// through the batch. References: each request alone (a batch of 16 different schemas must give
// each the tokens it gets alone), JSON parsing plus the schema's own checks written out here,
// std::regex for regexes, and the submitted errors' statuses.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <map>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "tests/chat_template_texts.h"
#include "tests/unit/engine/engine_test_util.h"
#include "tests/unit/engine/vocab_model_util.h"

namespace kvserve {
namespace {

using Kind = StructuredOutputSpec::Kind;

const testing::VocabModelSpec kGpt2{"gpt-2", testing::kOpenHermesChatml, {"<|im_start|>", "<|im_end|>"}, "", "<|im_end|>"};
const testing::VocabModelSpec kSpm{"llama-spm", testing::kLlama2Chat, {}, "", ""};

std::shared_ptr<const Model> ModelFor(const testing::VocabModelSpec& spec) {
  static std::map<std::string, std::shared_ptr<const Model>> models;
  auto it = models.find(spec.vocab);
  if (it == models.end()) it = models.emplace(spec.vocab, testing::LoadVocabModel(spec)).first;
  return it->second;
}

GenerationRequest Structured(const Model& model, const std::string& prompt, StructuredOutputSpec spec,
                             int max_tokens = 96) {
  GenerationRequest r;
  r.prompt_tokens = model.tokenizer().Encode(prompt, /*add_special=*/true);
  r.sampling.temperature = 0;
  r.sampling.max_tokens = max_tokens;
  r.structured = std::move(spec);
  return r;
}

StructuredOutputSpec Schema(std::string text) {
  StructuredOutputSpec s;
  s.kind = Kind::kJsonSchema;
  s.text = std::move(text);
  s.max_whitespace = 2;
  return s;
}

// Sixteen schemas whose texts a random model can finish within the token budget (bounded
// strings, small enums, numbers), each with a check of the parsed value.
struct SchemaCase {
  std::string schema;
  std::function<bool(const nlohmann::json&)> valid;
};

std::vector<SchemaCase> SixteenSchemas() {
  using J = nlohmann::json;
  std::vector<SchemaCase> cases = {
      {R"({"type":"boolean"})", [](const J& j) { return j.is_boolean(); }},
      {R"({"type":"integer","minimum":-5,"maximum":20})",
       [](const J& j) { return j.is_number_integer() && j.get<int>() >= -5 && j.get<int>() <= 20; }},
      {R"({"enum":["red","green","blue"]})",
       [](const J& j) { return j == "red" || j == "green" || j == "blue"; }},
      {R"({"type":"string","maxLength":6})",
       [](const J& j) { return j.is_string(); }},  // code points checked below
      {R"({"type":"object","properties":{"ok":{"type":"boolean"}},"required":["ok"],"additionalProperties":false})",
       [](const J& j) { return j.is_object() && j.size() == 1 && j.at("ok").is_boolean(); }},
      {R"({"type":"array","items":{"type":"integer","minimum":0,"maximum":9},"minItems":1,"maxItems":3})",
       [](const J& j) {
         if (!j.is_array() || j.empty() || j.size() > 3) return false;
         for (const J& x : j) {
           if (!x.is_number_integer() || x.get<int>() < 0 || x.get<int>() > 9) return false;
         }
         return true;
       }},
      {R"({"const":{"kind":"point","dims":2}})", [](const J& j) { return j == J{{"kind", "point"}, {"dims", 2}}; }},
      {R"({"type":"null"})", [](const J& j) { return j.is_null(); }},
      {R"({"anyOf":[{"type":"boolean"},{"type":"null"}]})", [](const J& j) { return j.is_boolean() || j.is_null(); }},
      {R"({"type":"object","properties":{"n":{"type":"integer","minimum":1,"maximum":3},"tag":{"enum":["a","b"]}},"required":["n","tag"],"additionalProperties":false})",
       [](const J& j) {
         return j.is_object() && j.size() == 2 && j.at("n").is_number_integer() && j.at("n").get<int>() >= 1 &&
                j.at("n").get<int>() <= 3 && (j.at("tag") == "a" || j.at("tag") == "b");
       }},
      {R"({"type":"string","pattern":"^[a-f]{2,4}$"})",
       [](const J& j) { return j.is_string() && std::regex_match(j.get<std::string>(), std::regex("[a-f]{2,4}")); }},
      {R"({"type":"string","format":"date"})",
       [](const J& j) { return j.is_string() && std::regex_match(j.get<std::string>(), std::regex(R"(\d{4}-\d{2}-\d{2})")); }},
      {R"({"type":"integer","multipleOf":7,"minimum":0,"maximum":100})",
       [](const J& j) { return j.is_number_integer() && j.get<int>() % 7 == 0 && j.get<int>() <= 100; }},
      {R"({"$defs":{"leaf":{"type":"integer","minimum":0,"maximum":5}},"type":"array","items":{"$ref":"#/$defs/leaf"},"maxItems":2})",
       [](const J& j) { return j.is_array() && j.size() <= 2; }},
      {R"({"type":"array","prefixItems":[{"type":"boolean"},{"enum":[1,2]}],"items":false,"minItems":2})",
       [](const J& j) { return j.is_array() && j.size() == 2 && j[0].is_boolean() && (j[1] == 1 || j[1] == 2); }},
      {R"({"type":"object","properties":{"x":{"type":"null"}},"required":["x"],"additionalProperties":false})",
       [](const J& j) { return j.is_object() && j.size() == 1 && j.at("x").is_null(); }},
  };
  return cases;
}

size_t CodePoints(const std::string& s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

class StructuredOutputTest : public ::testing::TestWithParam<testing::VocabModelSpec> {
 protected:
  void SetUp() override {
    model_ = ModelFor(GetParam());
    ASSERT_NE(model_, nullptr);
  }
  std::shared_ptr<const Model> model_;
};

// Sixteen sequences with sixteen schemas in one batch: each gets exactly the tokens it gets
// alone, and each text is a valid instance of its schema.
TEST_P(StructuredOutputTest, SixteenSchemasInOneBatchEqualEachAlone) {
  const std::vector<SchemaCase> cases = SixteenSchemas();
  ASSERT_EQ(cases.size(), 16u);
  auto make = [&](size_t i) {
    return Structured(*model_, "Answer in JSON, please. Case " + std::to_string(i) + ":", Schema(cases[i].schema));
  };
  std::vector<testing::RunResult> alone;
  {
    auto engine = testing::MakeEngine(model_, testing::TestConfig(512));
    for (size_t i = 0; i < cases.size(); ++i) alone.push_back(testing::RunRequest(*engine, make(i)));
  }
  auto engine = testing::MakeEngine(model_, testing::TestConfig(512));
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (size_t i = 0; i < cases.size(); ++i) {
    auto stream = engine->Submit(make(i));
    ASSERT_TRUE(stream.ok()) << cases[i].schema << ": " << stream.status().ToString();
    streams.push_back(*stream);
  }
  for (size_t i = 0; i < cases.size(); ++i) {
    const testing::RunResult batched = testing::Collect(*streams[i]);
    SCOPED_TRACE(cases[i].schema);
    ASSERT_TRUE(batched.status.ok()) << batched.status.ToString();
    EXPECT_EQ(batched.choices[0].tokens, alone[i].choices[0].tokens);
    EXPECT_EQ(batched.choices[0].text, alone[i].choices[0].text);
    ASSERT_EQ(batched.choices[0].finish, FinishReason::kStop) << batched.choices[0].text;
    const nlohmann::json value = nlohmann::json::parse(batched.choices[0].text, nullptr, /*allow_exceptions=*/false);
    ASSERT_FALSE(value.is_discarded()) << batched.choices[0].text;
    EXPECT_TRUE(cases[i].valid(value)) << batched.choices[0].text;
    if (value.is_string() && i == 3) {
      EXPECT_LE(CodePoints(value.get<std::string>()), 6u);
    }
  }
  // Stats are published after the step that ended the streams.
  ASSERT_TRUE(testing::WaitFor([&] { return engine->GetStats().running == 0; }));
  const EngineStats stats = engine->GetStats();
  EXPECT_EQ(stats.grammar_compiles_total, 16);  // one cache per engine
  EXPECT_EQ(stats.grammar_cache_hits_total, 0);
  EXPECT_GE(stats.grammar_mask.count, 16);
}

// Regexes, choices and GBNF grammars: the texts match them (std::regex as the reference).
TEST_P(StructuredOutputTest, RegexChoiceAndGrammar) {
  auto engine = testing::MakeEngine(model_, testing::TestConfig(512));
  StructuredOutputSpec regex;
  regex.kind = Kind::kRegex;
  regex.text = "[0-9]{3}-[a-z]{2,3}( ok)?";
  StructuredOutputSpec choice;
  choice.kind = Kind::kChoice;
  choice.choices = {"positive", "negative", "neutral"};
  StructuredOutputSpec gbnf;
  gbnf.kind = Kind::kGrammar;
  gbnf.text = "root ::= \"(\" pair (\",\" pair)? \")\"\npair ::= [a-c] \"=\" [0-9]\n";
  for (int i = 0; i < 3; ++i) {
    const std::string prompt = "Item " + std::to_string(i) + " is";
    const testing::RunResult r = testing::RunRequest(*engine, Structured(*model_, prompt, regex));
    EXPECT_EQ(r.choices[0].finish, FinishReason::kStop);
    EXPECT_TRUE(std::regex_match(r.choices[0].text, std::regex("[0-9]{3}-[a-z]{2,3}( ok)?"))) << r.choices[0].text;
    const testing::RunResult c = testing::RunRequest(*engine, Structured(*model_, prompt, choice));
    EXPECT_TRUE(c.choices[0].text == "positive" || c.choices[0].text == "negative" || c.choices[0].text == "neutral")
        << c.choices[0].text;
    const testing::RunResult g = testing::RunRequest(*engine, Structured(*model_, prompt, gbnf));
    EXPECT_EQ(g.choices[0].finish, FinishReason::kStop);
    EXPECT_TRUE(std::regex_match(g.choices[0].text, std::regex(R"(\([a-c]=[0-9](,[a-c]=[0-9])?\))"))) << g.choices[0].text;
  }
  ASSERT_TRUE(testing::WaitFor([&] { return engine->GetStats().running == 0; }));
  const EngineStats stats = engine->GetStats();
  EXPECT_EQ(stats.grammar_compiles_total, 3);
  EXPECT_EQ(stats.grammar_cache_hits_total, 6);  // the same three specs again, twice
}

// Bad specs fail Submit with the status a client should see; nothing runs.
TEST_P(StructuredOutputTest, BadSpecsAreRefusedAtSubmit) {
  auto engine = testing::MakeEngine(model_, testing::TestConfig(512));
  auto submit = [&](StructuredOutputSpec spec) { return engine->Submit(Structured(*model_, "x", std::move(spec))).status(); };
  Status unsupported = submit(Schema(R"({"type":"object","properties":{"a":{"not":{"enum":[1]}}}})"));
  EXPECT_EQ(unsupported.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(unsupported.message().find("not"), std::string::npos) << unsupported.ToString();
  EXPECT_NE(unsupported.message().find("/properties/a"), std::string::npos) << unsupported.ToString();
  EXPECT_EQ(submit(Schema("{\"type\": ")).code(), StatusCode::kInvalidArgument);          // malformed JSON
  EXPECT_EQ(submit(Schema(R"({"type":"integer","minimum":5,"maximum":1})")).code(),  // nothing is valid
            StatusCode::kInvalidArgument);
  StructuredOutputSpec regex;
  regex.kind = Kind::kRegex;
  regex.text = "(unclosed";
  EXPECT_EQ(submit(regex).code(), StatusCode::kInvalidArgument);
  StructuredOutputSpec gbnf;
  gbnf.kind = Kind::kGrammar;
  gbnf.text = "root ::= missing";
  EXPECT_EQ(submit(gbnf).code(), StatusCode::kInvalidArgument);
  StructuredOutputSpec lenient = Schema(R"({"type":"object","properties":{"a":{"not":{"enum":[1]}}}})");
  lenient.lenient = true;
  EXPECT_TRUE(submit(lenient).ok());
  ASSERT_TRUE(testing::WaitFor([&] { return engine->GetStats().grammar_compile_errors_total == 5; }));

  EngineConfig slow = testing::TestConfig(512);
  slow.grammar.compile_timeout = std::chrono::milliseconds(0);
  auto slow_engine = testing::MakeEngine(model_, slow);
  // Told to retry while the compile waits for its thread; once it ran past the limit, the
  // remembered DEADLINE_EXCEEDED (a 400).
  Status late = slow_engine->Submit(Structured(*model_, "x", Schema(R"({"type":"boolean"})"))).status();
  for (int i = 0; i < 1000 && late.code() == StatusCode::kResourceExhausted; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    late = slow_engine->Submit(Structured(*model_, "x", Schema(R"({"type":"boolean"})"))).status();
  }
  EXPECT_EQ(late.code(), StatusCode::kDeadlineExceeded) << late.ToString();
  // The engine still serves requests without a structure.
  EXPECT_TRUE(testing::RunRequest(*slow_engine, testing::Greedy(model_->tokenizer().Encode("hi", true), 4)).status.ok());
}

// Issue 54, D2: an ambiguous grammar's parse grows without bound; it held every step of the
// batch for seconds. Now that request ends with an error once its parse passes the bound, and
// a request beside it finishes as it would alone.
TEST_P(StructuredOutputTest, AnAmbiguousGrammarFailsItsRequestAndTheBatchGoesOn) {
  auto engine = testing::MakeEngine(model_, testing::TestConfig(512));
  StructuredOutputSpec ambiguous;
  ambiguous.kind = Kind::kGrammar;
  ambiguous.text = "root ::= s\ns ::= s s s | s s | [a-z ]";
  GenerationRequest hard = Structured(*model_, "Once upon a time", ambiguous, 400);
  auto hard_stream = engine->Submit(std::move(hard));
  ASSERT_TRUE(hard_stream.ok()) << hard_stream.status().ToString();
  const GenerationRequest plain = testing::Greedy(model_->tokenizer().Encode("Item 1 is", true), 8);
  const testing::RunResult alone = testing::RunRequest(*testing::MakeEngine(model_, testing::TestConfig(512)), plain);
  const testing::RunResult beside = testing::RunRequest(*engine, plain);
  EXPECT_EQ(beside.choices[0].tokens, alone.choices[0].tokens);
  EXPECT_EQ(beside.choices[0].finish, FinishReason::kLength);
  const testing::RunResult failed = testing::Collect(**hard_stream);
  ASSERT_EQ(failed.choices.size(), 1u);
  EXPECT_EQ(failed.choices[0].finish, FinishReason::kError);
  EXPECT_LT(failed.choices[0].tokens.size(), 400u);
}

// The structure ends the text even when end-of-text is otherwise forbidden (ignore_eos,
// min_tokens); choices (n = 2) each follow it; logprobs come with constrained tokens; a
// structure with one continuation emits it without sampling (forced tokens).
TEST_P(StructuredOutputTest, EndsChoicesLogprobsAndForcedTokens) {
  auto engine = testing::MakeEngine(model_, testing::TestConfig(512));
  GenerationRequest r = Structured(*model_, "Flag:", Schema(R"({"type":"boolean"})"));
  r.sampling.ignore_eos = true;
  r.sampling.min_tokens = 50;
  r.sampling.temperature = 1.0f;
  r.sampling.seed = 7;
  r.sampling.logprobs = 2;
  r.n = 2;
  const testing::RunResult res = testing::RunRequest(*engine, std::move(r));
  ASSERT_TRUE(res.status.ok()) << res.status.ToString();
  for (const testing::ChoiceResult& c : res.choices) {
    EXPECT_EQ(c.finish, FinishReason::kStop);
    const nlohmann::json v = nlohmann::json::parse(c.text, nullptr, false);
    EXPECT_TRUE(v.is_boolean()) << c.text;
    EXPECT_LT(c.tokens.size(), 12u);
  }
  const int64_t forced_before = engine->GetStats().grammar_forced_tokens_total;
  const testing::RunResult fixed =
      testing::RunRequest(*engine, Structured(*model_, "Point:", Schema(R"({"const":{"kind":"point","dims":[1,2,3]}})")));
  ASSERT_TRUE(fixed.status.ok());
  EXPECT_EQ(nlohmann::json::parse(fixed.choices[0].text), nlohmann::json::parse(R"({"kind":"point","dims":[1,2,3]})"));
  // Stats are published after the step that ended the stream.
  EXPECT_TRUE(testing::WaitFor([&] { return engine->GetStats().grammar_forced_tokens_total > forced_before; }));
}

// A framed value (the shape of tool calls): prefix, 2-3 items each between item texts, suffix.
TEST_P(StructuredOutputTest, FramedValuesRepeatBetweenTheirTexts) {
  auto engine = testing::MakeEngine(model_, testing::TestConfig(512));
  StructuredOutputSpec spec = Schema(R"({"type":"object","properties":{"a":{"type":"integer","minimum":0,"maximum":9}},"required":["a"],"additionalProperties":false})");
  spec.max_whitespace = 0;
  spec.frame = {.prefix = "[", .item_prefix = "<c>", .item_suffix = "</c>", .separator = "\n", .suffix = "]", .heads = {},
                .min_items = 2, .max_items = 3};
  const std::regex shape(R"(\[<c>\{"a":[0-9]\}</c>(\n<c>\{"a":[0-9]\}</c>){1,2}\])");
  for (int i = 0; i < 4; ++i) {
    GenerationRequest r = Structured(*model_, "Calls " + std::to_string(i) + ":", spec);
    r.sampling.temperature = 1.0f;
    r.sampling.seed = static_cast<uint64_t>(i);
    const testing::RunResult res = testing::RunRequest(*engine, std::move(r));
    ASSERT_TRUE(res.status.ok()) << res.status.ToString();
    EXPECT_EQ(res.choices[0].finish, FinishReason::kStop);
    EXPECT_TRUE(std::regex_match(res.choices[0].text, shape)) << res.choices[0].text;
  }
  StructuredOutputSpec bad = spec;
  bad.frame.max_items = 1;  // below min_items
  EXPECT_EQ(engine->Submit(Structured(*model_, "x", bad)).status().code(), StatusCode::kInvalidArgument);
}

// A lazy grammar: the text is the free run's until the trigger appears in it (here a token
// the free run produces); from the trigger on, the grammar holds.
TEST_P(StructuredOutputTest, TriggerStartsTheGrammarWhereItAppears) {
  auto engine = testing::MakeEngine(model_, testing::TestConfig(512));
  const std::string prompt = "Once upon a time there was";
  const testing::RunResult free_run =
      testing::RunRequest(*engine, testing::Greedy(model_->tokenizer().Encode(prompt, true), 24));
  const std::vector<int32_t>& tokens = free_run.choices[0].tokens;
  // The first token past the third whose piece is two or more ASCII letters and is not seen
  // earlier in the text.
  std::string text, trigger;
  size_t k = 0;
  for (; k < tokens.size() && trigger.empty(); ++k) {
    const std::string piece = model_->tokenizer().TokenToPiece(tokens[k]);
    const std::string word = !piece.empty() && piece[0] == ' ' ? piece.substr(1) : piece;  // SPM: " word"
    bool letters = word.size() >= 2;
    for (char c : word) letters = letters && std::isalpha(static_cast<unsigned char>(c));
    if (k >= 3 && letters && (text + piece).find(piece) == text.size()) trigger = piece;
    text += piece;
  }
  ASSERT_FALSE(trigger.empty()) << free_run.choices[0].text;
  StructuredOutputSpec spec;
  spec.kind = Kind::kGrammar;
  spec.text = "root ::= \"" + trigger + "\" [0-9] [0-9] \"!\"\n";
  spec.triggers = {"@never@", trigger};
  GenerationRequest r = testing::Greedy(model_->tokenizer().Encode(prompt, true), 24);
  r.structured = spec;
  const testing::RunResult lazy = testing::RunRequest(*engine, std::move(r));
  ASSERT_TRUE(lazy.status.ok()) << lazy.status.ToString();
  ASSERT_GE(lazy.choices[0].tokens.size(), k + 1);
  EXPECT_EQ(std::vector<int32_t>(lazy.choices[0].tokens.begin(), lazy.choices[0].tokens.begin() + static_cast<long>(k)),
            std::vector<int32_t>(tokens.begin(), tokens.begin() + static_cast<long>(k)));
  EXPECT_EQ(lazy.choices[0].finish, FinishReason::kStop);
  const std::string& out = lazy.choices[0].text;
  const size_t at = out.find(trigger);
  ASSERT_NE(at, std::string::npos) << out;
  EXPECT_TRUE(std::regex_match(out.substr(at), std::regex(trigger + "[0-9]{2}!"))) << out;
  // An empty trigger is refused.
  StructuredOutputSpec empty = spec;
  empty.triggers = {""};
  EXPECT_EQ(engine->Submit(Structured(*model_, "x", empty)).status().code(), StatusCode::kInvalidArgument);
}

// A trigger that is a control token (Mistral's [TOOL_CALLS]): its text joins the output, where
// the front end's parser looks for it, and the grammar starts with it.
TEST(StructuredOutputControlTriggerTest, AControlTokenTriggerIsRenderedAndStartsTheGrammar) {
  const auto model = testing::LoadVocabModel({"gpt-2", "", {"[TOOL_CALLS]"}, "", ""});
  ASSERT_NE(model, nullptr);
  const int32_t opener = model->tokenizer().FindToken("[TOOL_CALLS]");
  ASSERT_GE(opener, 0);
  ASSERT_EQ(model->tokenizer().token_type(opener), TokenType::kControl);
  auto engine = testing::MakeEngine(model, testing::TestConfig(512));
  StructuredOutputSpec spec;
  spec.kind = Kind::kGrammar;
  spec.text = "root ::= \"[TOOL_CALLS] [\" [0-9] \"]\"\n";
  spec.triggers = {"[TOOL_CALLS]"};
  GenerationRequest r = Structured(*model, "Call a tool:", spec, 16);
  r.sampling.logit_bias = {{opener, 100.0f}};  // the model "chooses" the control token first
  const testing::RunResult res = testing::RunRequest(*engine, std::move(r));
  ASSERT_TRUE(res.status.ok()) << res.status.ToString();
  ASSERT_FALSE(res.choices[0].tokens.empty());
  EXPECT_EQ(res.choices[0].tokens[0], opener);
  EXPECT_EQ(res.choices[0].finish, FinishReason::kStop);
  EXPECT_TRUE(std::regex_match(res.choices[0].text, std::regex(R"(\[TOOL_CALLS\] \[[0-9]\])"))) << res.choices[0].text;
}

INSTANTIATE_TEST_SUITE_P(Vocabularies, StructuredOutputTest, ::testing::Values(kGpt2, kSpm),
                         [](const auto& info) { return info.param.vocab == "gpt-2" ? std::string("gpt2") : "spm"; });

}  // namespace
}  // namespace kvserve
