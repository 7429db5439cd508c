// StructuredOutputSpec and GrammarCache (see structured_output.h).
#include "engine/grammar/structured_output.h"

#include <utility>

#include "engine/grammar/grammar.h"
#include "engine/grammar/json_schema.h"

namespace kvserve {
namespace {

using Kind = StructuredOutputSpec::Kind;

// The cache key: everything that changes the grammar, each field length-prefixed.
std::string KeyOf(const StructuredOutputSpec& spec) {
  std::string key = std::to_string(static_cast<int>(spec.kind)) + '|' + (spec.lenient ? "1" : "0") + '|' +
                    std::to_string(spec.max_whitespace) + '|';
  auto add = [&key](const std::string& s) {
    key += std::to_string(s.size());
    key += ':';
    key += s;
  };
  add(spec.text);
  for (const std::string& c : spec.choices) add(c);
  return key;
}

StatusOr<LexGrammar> BuildGrammar(const StructuredOutputSpec& spec, std::chrono::milliseconds time_limit,
                                  std::vector<std::string>* ignored) {
  switch (spec.kind) {
    case Kind::kJsonSchema:
    case Kind::kJsonObject: {
      JsonSchemaOptions options;
      options.max_whitespace = spec.max_whitespace;
      options.lenient = spec.lenient;
      options.time_limit = time_limit;
      StatusOr<CompiledSchema> schema =
          CompileJsonSchema(spec.kind == Kind::kJsonObject ? std::string_view(R"({"type":"object"})") : spec.text, options);
      if (!schema.ok()) return schema.status();
      *ignored = std::move(schema->ignored);
      return std::move(schema->grammar);
    }
    case Kind::kRegex:
      return RegexGrammar(spec.text);
    case Kind::kChoice:
      if (spec.choices.empty()) return InvalidArgumentError("a choice needs at least one string");
      return ChoiceGrammar(spec.choices);
    case Kind::kGrammar: {
      StatusOr<Grammar> g = ParseGbnf(spec.text);
      if (!g.ok()) return g.status();
      return ByteGrammar(*g);
    }
    case Kind::kNone:
      break;
  }
  return InvalidArgumentError("no structured output was asked for");
}

}  // namespace

const char* StructuredOutputSpec::kind_name() const {
  switch (kind) {
    case Kind::kNone: return "none";
    case Kind::kJsonSchema: return "json_schema";
    case Kind::kJsonObject: return "json_object";
    case Kind::kRegex: return "regex";
    case Kind::kChoice: return "choice";
    case Kind::kGrammar: return "grammar";
  }
  return "unknown";
}

GrammarCache::GrammarCache(const Tokenizer* tokenizer, size_t capacity, std::chrono::milliseconds time_limit)
    : tokenizer_(tokenizer),
      time_limit_(time_limit),
      shared_masks_(std::make_shared<SharedMaskCache>()),
      compiled_(capacity) {}

const TokenTrie* GrammarCache::Trie() {
  std::call_once(trie_once_, [this] { trie_ = std::make_unique<TokenTrie>(*tokenizer_); });
  return trie_.get();
}

StatusOr<GrammarCache::Compiled> GrammarCache::Get(const StructuredOutputSpec& spec) {
  const std::string key = KeyOf(spec);
  if (std::shared_ptr<const Entry> hit = compiled_.Find(key)) {
    return Compiled{hit->grammar, hit->ignored, /*cache_hit=*/true, 0};
  }
  // Compiled outside any lock: a slow schema holds its own caller only (two callers missing on
  // one key both compile; the cache keeps the first).
  const auto start = std::chrono::steady_clock::now();
  std::vector<std::string> ignored;
  StatusOr<LexGrammar> grammar = BuildGrammar(spec, time_limit_, &ignored);
  if (!grammar.ok()) {
    // An unsatisfiable schema is the caller's mistake too.
    if (grammar.status().code() == StatusCode::kFailedPrecondition) {
      return InvalidArgumentError(grammar.status().message());
    }
    return grammar.status();
  }
  auto compiled = std::make_shared<CompiledGrammar>(std::move(grammar).value(), Trie(), shared_masks_);
  {
    GrammarMatcher warm(compiled);  // the start state's mask, cached for the first token
    TokenMask mask;
    warm.FillMask(&mask);
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (seconds * 1000 > static_cast<double>(time_limit_.count())) {
    return DeadlineExceededError("compiling the " + std::string(spec.kind_name()) + " took longer than " +
                                 std::to_string(time_limit_.count()) + " ms");
  }
  compiled_.Insert(key, std::make_shared<const Entry>(Entry{compiled, ignored}));
  return Compiled{std::move(compiled), std::move(ignored), /*cache_hit=*/false, seconds};
}

}  // namespace kvserve
