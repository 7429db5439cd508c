// StructuredOutputSpec and GrammarCache (see structured_output.h).
#include "engine/grammar/structured_output.h"

#include <algorithm>
#include <optional>
#include <span>
#include <utility>

#include <fmt/format.h>

#include "common/sha256.h"
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
  if (spec.frame.active()) {
    const StructuredOutputSpec::Frame& f = spec.frame;
    key += "|frame" + std::to_string(f.min_items) + ',' + std::to_string(f.max_items) + '|';
    for (const std::string* s : {&f.prefix, &f.item_prefix, &f.item_suffix, &f.separator, &f.suffix}) add(*s);
    key += "|heads" + std::to_string(f.heads.size()) + '|';
    for (const std::string& h : f.heads) add(h);
  }
  return key;
}

// A frame's text: the literal, or with slots (kIdSlot, kIndexSlot) a pattern.
StatusOr<ByteDfa> SlotDfa(const std::string& text, const GrammarLimits& limits) {
  using Spec = StructuredOutputSpec;
  if (text.find_first_of(std::string{Spec::kIdSlot, Spec::kIndexSlot, Spec::kSpaceSlot}) == std::string::npos) {
    return ChoiceDfa(std::span<const std::string>(&text, 1));
  }
  return CompileRegex(Spec::SlotPattern(text), RegexOptionsWithin(limits, /*anchored=*/true));
}

// `value` (a JSON Schema's grammar) framed as spec.frame says. The value is the root's first
// alternative (without the whitespace JSON allows after a value: the frame's text follows), or
// with heads one of them, each after its head. The frame's texts between values are lexemes:
// first = prefix + item_prefix, between = item_suffix + separator + item_prefix, last =
// item_suffix + suffix.
StatusOr<LexGrammar> FrameGrammar(LexGrammar g, const StructuredOutputSpec::Frame& f, const GrammarLimits& limits) {
  if (f.min_items < 1 || (f.max_items >= 0 && f.max_items < f.min_items)) {
    return InvalidArgumentError("a framed value needs 1 <= min_items <= max_items");
  }
  Status failed;
  auto literal = [&](const std::string& text) {
    std::vector<int32_t> symbols;
    if (!text.empty()) {
      const std::string key = "frame:" + text;
      int32_t id = g.FindLexeme(key);
      if (id < 0) {
        StatusOr<ByteDfa> dfa = SlotDfa(text, limits);
        if (!dfa.ok()) {
          failed = dfa.status();
          return symbols;
        }
        id = g.AddLexeme(key, std::move(dfa).value());
      }
      symbols.push_back(LexGrammar::Lexeme(id));
    }
    return symbols;
  };
  std::vector<int32_t> value = g.rules[static_cast<size_t>(g.root)].front();
  if (!f.heads.empty()) {  // the root's alternatives: one schema's value each
    const std::vector<std::vector<int32_t>> values = g.rules[static_cast<size_t>(g.root)];
    if (values.size() != f.heads.size()) return InvalidArgumentError("a frame needs one schema per head");
    const int32_t item = g.AddRule("frame_item");
    for (size_t i = 0; i < values.size(); ++i) {
      std::vector<int32_t> alt = literal(f.heads[i]);
      alt.insert(alt.end(), values[i].begin(), values[i].end());
      g.AddAlternative(item, std::move(alt));
    }
    value = {item};
  }
  auto concat = [](std::vector<int32_t> a, const std::vector<int32_t>& b) {
    a.insert(a.end(), b.begin(), b.end());
    return a;
  };
  const std::vector<int32_t> first = literal(f.prefix + f.item_prefix);
  const std::vector<int32_t> between = literal(f.item_suffix + f.separator + f.item_prefix);
  const std::vector<int32_t> last = literal(f.item_suffix + f.suffix);
  // rest[i]: what follows the i-th value (1-based); the last one may repeat itself (no limit).
  const int levels = f.max_items < 0 ? f.min_items : f.max_items;
  std::vector<int32_t> rest(static_cast<size_t>(levels) + 1, -1);
  for (int i = 1; i <= levels; ++i) rest[static_cast<size_t>(i)] = g.AddRule("frame_rest#" + std::to_string(i));
  for (int i = 1; i <= levels; ++i) {
    const int32_t r = rest[static_cast<size_t>(i)];
    if (i >= f.min_items) g.AddAlternative(r, last);
    if (f.max_items < 0 || i < f.max_items) {
      const int32_t next = rest[static_cast<size_t>(std::min(i + 1, levels))];
      g.AddAlternative(r, concat(concat(between, value), {next}));
    }
  }
  g.root = g.AddRule("framed");
  g.AddAlternative(g.root, concat(concat(first, value), {rest[1]}));
  RETURN_IF_ERROR(failed);
  RETURN_IF_ERROR(g.RemoveUnproductive());
  return g;
}

StatusOr<LexGrammar> BuildGrammar(const StructuredOutputSpec& spec, const GrammarLimits& limits,
                                  std::vector<std::string>* ignored) {
  switch (spec.kind) {
    case Kind::kJsonSchema:
    case Kind::kJsonObject: {
      JsonSchemaOptions options;
      options.max_whitespace = spec.max_whitespace;
      options.lenient = spec.lenient;
      options.limits = limits;
      options.alternatives = !spec.frame.heads.empty();
      StatusOr<CompiledSchema> schema =
          CompileJsonSchema(spec.kind == Kind::kJsonObject ? std::string_view(R"({"type":"object"})") : spec.text, options);
      if (!schema.ok()) return schema.status();
      *ignored = std::move(schema->ignored);
      if (spec.frame.active()) return FrameGrammar(std::move(schema->grammar), spec.frame, limits);
      return std::move(schema->grammar);
    }
    case Kind::kRegex:
      return RegexGrammar(spec.text, limits);
    case Kind::kChoice:
      if (spec.choices.empty()) return InvalidArgumentError("a choice needs at least one string");
      RETURN_IF_ERROR(CheckChoices(spec.choices, "the choice", limits));
      return ChoiceGrammar(spec.choices);
    case Kind::kGrammar: {
      StatusOr<Grammar> g = ParseGbnf(spec.text);
      if (!g.ok()) return g.status();
      LexGrammar lex = ByteGrammar(*g);
      RETURN_IF_ERROR(lex.RemoveUnproductive("grammar"));  // root ::= root "a" derives nothing
      return lex;
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

GrammarCache::GrammarCache(const Tokenizer* tokenizer, GrammarLimits limits)
    : tokenizer_(tokenizer),
      limits_(limits),
      shared_masks_(std::make_shared<SharedMaskCache>(limits.shared_mask_bytes)),
      compiled_(limits.cache_entries, limits.cache_bytes),
      failed_(1024) {
  for (int i = 0; i < std::max(1, limits_.compile_threads); ++i) threads_.emplace_back([this] { CompileLoop(); });
}

GrammarCache::~GrammarCache() {
  std::deque<std::unique_ptr<Job>> refused;
  {
    std::lock_guard lock(mu_);
    stop_ = true;
    refused.swap(queue_);
  }
  work_cv_.notify_all();
  for (auto& job : refused) job->done.set_value(UnavailableError("the server is shutting down"));
  for (std::thread& t : threads_) t.join();
}

const TokenTrie* GrammarCache::Trie() {
  std::call_once(trie_once_, [this] { trie_ = std::make_unique<TokenTrie>(*tokenizer_); });
  return trie_.get();
}

StatusOr<GrammarCache::Compiled> GrammarCache::Get(const StructuredOutputSpec& spec) {
  const std::string key = KeyOf(spec);
  const std::string digest = Sha256(key);
  auto known = [&]() -> std::optional<StatusOr<Compiled>> {
    if (std::shared_ptr<const Entry> hit = compiled_.Find(key)) {
      return Compiled{hit->grammar, hit->ignored, /*cache_hit=*/true, 0};
    }
    if (std::shared_ptr<const Status> failed = failed_.Find(digest)) return StatusOr<Compiled>(*failed);
    return std::nullopt;
  };
  if (auto done = known()) return *std::move(done);
  std::shared_future<StatusOr<Compiled>> result;
  bool joined = false;  // another request's compile of the same spec
  {
    std::lock_guard lock(mu_);
    if (stop_) return UnavailableError("the server is shutting down");
    if (const auto it = in_flight_.find(key); it != in_flight_.end()) {
      result = it->second;
      joined = true;
    } else if (auto done = known()) {  // a compile ended since the first look (its result is kept
      return *std::move(done);        // before it leaves in_flight_)
    } else {
      // Jobs an idle thread is about to take do not wait.
      if (static_cast<int>(queue_.size()) >= idle_ + limits_.max_waiting_compiles) {
        return ResourceExhaustedError(fmt::format("{} structured outputs are waiting to compile; retry later",
                                                  queue_.size()));
      }
      auto job = std::make_unique<Job>(Job{spec, key, {}});
      result = job->done.get_future().share();
      in_flight_.emplace(key, result);
      queue_.push_back(std::move(job));
    }
  }
  work_cv_.notify_one();
  if (result.wait_for(limits_.compile_timeout) != std::future_status::ready) {
    // Still queued: the server is busy (retry later); running: the spec is slow to compile.
    std::lock_guard lock(mu_);
    if (std::any_of(queue_.begin(), queue_.end(), [&](const auto& job) { return job->key == key; })) {
      return ResourceExhaustedError(fmt::format("the {} waited {} ms for a compile thread; retry later",
                                                spec.kind_name(), limits_.compile_timeout.count()));
    }
    return DeadlineExceededError(fmt::format("compiling the {} took longer than {} ms", spec.kind_name(),
                                             limits_.compile_timeout.count()));
  }
  StatusOr<Compiled> out = result.get();
  if (joined && out.ok()) out->cache_hit = true, out->compile_seconds = 0;
  return out;
}

int GrammarCache::num_compiling() const {
  std::lock_guard lock(mu_);
  return static_cast<int>(in_flight_.size());
}

void GrammarCache::CompileLoop() {
  for (;;) {
    std::unique_ptr<Job> job;
    {
      std::unique_lock lock(mu_);
      ++idle_;
      work_cv_.wait(lock, [this] { return stop_ || !queue_.empty(); });
      --idle_;
      if (stop_) return;
      job = std::move(queue_.front());
      queue_.pop_front();
    }
    ++num_compiles_;
    StatusOr<Compiled> compiled = Compile(job->spec, job->key);
    if (!compiled.ok()) failed_.Insert(Sha256(job->key), std::make_shared<const Status>(compiled.status()));
    {
      std::lock_guard lock(mu_);
      in_flight_.erase(job->key);  // its result is in compiled_ or failed_ now (Get looks again)
    }
    job->done.set_value(std::move(compiled));
  }
}

StatusOr<GrammarCache::Compiled> GrammarCache::Compile(const StructuredOutputSpec& spec, const std::string& key) {
  const auto start = std::chrono::steady_clock::now();
  std::vector<std::string> ignored;
  StatusOr<LexGrammar> grammar = BuildGrammar(spec, limits_, &ignored);
  if (!grammar.ok()) {
    // An unsatisfiable schema or one past a limit is the caller's to change: a 400, never a
    // 429 that clients would retry.
    if (grammar.status().code() == StatusCode::kFailedPrecondition) {
      return InvalidArgumentError(grammar.status().message());
    }
    if (grammar.status().code() == StatusCode::kResourceExhausted) {
      return InvalidArgumentError("the " + std::string(spec.kind_name()) + " is too complex: " + grammar.status().message());
    }
    return grammar.status();
  }
  auto compiled = std::make_shared<CompiledGrammar>(std::move(grammar).value(), Trie(), shared_masks_,
                                                    limits_.max_parser_work_per_token);
  {
    GrammarMatcher warm(compiled);  // the start state's mask, cached for the first token
    TokenMask mask;
    warm.FillMask(&mask);
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (seconds * 1000 > static_cast<double>(limits_.compile_timeout.count())) {
    return DeadlineExceededError(fmt::format("compiling the {} took longer than {} ms", spec.kind_name(),
                                             limits_.compile_timeout.count()));
  }
  compiled_.Insert(key, std::make_shared<const Entry>(Entry{compiled, ignored}), compiled->ApproxBytes());
  return Compiled{std::move(compiled), std::move(ignored), /*cache_hit=*/false, seconds};
}

}  // namespace kvserve
