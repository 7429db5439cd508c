// BPE pre-tokenizer table and the PCRE2-based splitter. See bpe_pretokenizer.h.
//
// The expressions are data taken from llama.cpp's llm_tokenizer_bpe (per pre-tokenizer type);
// non-ASCII characters are written as \x{...} escapes so that no editor or tool can normalize
// them (several of deepseek-llm's letters are NFC singletons such as U+2126 OHM SIGN).
#include "engine/tokenizer/bpe_pretokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <array>
#include <span>

namespace kvserve {
namespace {

// ---- Expressions ------------------------------------------------------------------------------

constexpr const char* kGpt2 =
    R"re('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S))re";

constexpr const char* kLlama3 =
    R"re((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)re";

constexpr const char* kQwen2 =
    R"re((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)re";

constexpr const char* kDeepseekLlmLetters =
    R"re(\s?[A-Za-z\x{b5}\x{c0}-\x{d6}\x{d8}-\x{f6}\x{f8}-\x{1ba}\x{1bc}-\x{1bf}\x{1c4}-\x{293})re"
    R"re(\x{295}-\x{2af}\x{370}-\x{373}\x{376}\x{377}\x{37b}-\x{37d}\x{37f}\x{386}\x{388}-\x{38a})re"
    R"re(\x{38c}\x{38e}-\x{3a1}\x{3a3}-\x{3f5}\x{3f7}-\x{481}\x{48a}-\x{52f}\x{531}-\x{556})re"
    R"re(\x{10a0}-\x{10c5}\x{13a0}-\x{13f5}\x{13f8}-\x{13fd}\x{1c90}-\x{1cba}\x{1cbd}-\x{1cbf})re"
    R"re(\x{1d00}-\x{1d2b}\x{1d6b}-\x{1d77}\x{1d79}-\x{1d9a}\x{1e00}-\x{1f15}\x{1f18}-\x{1f1d})re"
    R"re(\x{1f20}-\x{1f45}\x{1f48}-\x{1f4d}\x{1f50}-\x{1f57}\x{1f59}\x{1f5b}\x{1f5d})re"
    R"re(\x{1f5f}-\x{1f7d}\x{1f80}-\x{1fb4}\x{1fb6}-\x{1fbc}\x{1fbe}\x{1fc2}-\x{1fc4})re"
    R"re(\x{1fc6}-\x{1fcc}\x{1fd0}-\x{1fd3}\x{1fd6}-\x{1fdb}\x{1fe0}-\x{1fec}\x{1ff2}-\x{1ff4})re"
    R"re(\x{1ff6}-\x{1ffc}\x{2102}\x{2107}\x{210a}-\x{2113}\x{2115}\x{2119}-\x{211d}\x{2124})re"
    R"re(\x{2126}\x{2128}\x{212a}-\x{212d}\x{212f}-\x{2134}\x{2139}\x{213c}-\x{213f})re"
    R"re(\x{2145}-\x{2149}\x{214e}\x{2183}\x{2184}\x{2c00}-\x{2c7b}\x{2c7e}-\x{2ce4})re"
    R"re(\x{2ceb}-\x{2cee}\x{2cf2}\x{2cf3}\x{a640}-\x{a66d}\x{a680}-\x{a69b}\x{a722}-\x{a76f})re"
    R"re(\x{a771}-\x{a787}\x{a78b}-\x{a78e}\x{ab70}-\x{abbf}\x{fb00}-\x{fb06}\x{fb13}-\x{fb17})re"
    R"re(\x{ff21}-\x{ff3a}\x{ff41}-\x{ff5a}\x{10400}-\x{1044f}\x{104b0}-\x{104d3})re"
    R"re(\x{104d8}-\x{104fb}\x{10c80}-\x{10cb2}\x{10cc0}-\x{10cf2}\x{118a0}-\x{118df})re"
    R"re(\x{1e900}-\x{1e943}]+)re";

constexpr const char* kCjkHangul = R"re([\x{4e00}-\x{9fa5}\x{800}-\x{4e00}\x{ac00}-\x{d7ff}]+)re";

constexpr const char* kBloom =
    R"re( ?[^(\s|.,!?\x{2026}\x{3002}\x{ff0c}\x{3001}\x{964}\x{6d4}\x{60c})]+)re";

constexpr const char* kTekken =
    R"re([^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))*((?=[\p{L}])([^A-Z]))+|[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))+((?=[\p{L}])([^A-Z]))*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)re";

constexpr std::array kExprDefault = {R"re([\p{P}\$\+<=>\^~\|]+)re", kGpt2, R"re(\p{N}+)re",
                                     R"re([0-9][0-9][0-9])re"};
constexpr std::array kExprGpt2 = {kGpt2};
constexpr std::array kExprLlama3 = {kLlama3};
constexpr std::array kExprQwen2 = {kQwen2};
constexpr std::array kExprDeepseekLlm = {
    R"re([\r\n])re", kDeepseekLlmLetters,
    R"re(\s?[!-/:-~\x{ff01}-\x{ff0f}\x{ff1a}-\x{ff5e}\x{2018}-\x{201f}\x{3000}-\x{3002}]+)re",
    R"re(\s+$)re", kCjkHangul, R"re(\p{N}+)re"};
constexpr std::array kExprDeepseekCoder = {R"re([\r\n])re", R"re(\s?\p{L}+)re",
                                           R"re(\s?\p{P}+)re", kCjkHangul, R"re(\p{N})re"};
constexpr std::array kExprDeepseekV3 = {
    R"re(\p{N}{1,3})re", R"re([\x{4e00}-\x{9fa5}\x{3040}-\x{309f}\x{30a0}-\x{30ff}]+)re",
    R"re([!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)re"};
constexpr std::array kExprFalcon = {R"re([\p{P}\$\+<=>\^~\|`]+)re", kGpt2,
                                    R"re([0-9][0-9][0-9])re"};
constexpr std::array kExprStarcoder = {R"re(\p{N})re", kGpt2};
constexpr std::array kExprBloom = {kBloom};
constexpr std::array kExprViking = {kBloom, R"re(\p{N})re"};
constexpr std::array kExprTekken = {kTekken};
constexpr std::array kExprChameleon = {
    R"re(<sentinel:[0-9]+>)re", R"re((IMGIMG)((A|B|C|D|E|F|G|H|I){1,4})Z)re",
    R"re(([\t\n]|    |  ))re", R"re(\p{N})re", R"re([\p{P}!-/:-@\[-`{-~])re", kGpt2};

struct PreTokenizerEntry {
  std::string_view name;
  std::span<const char* const> exprs;
  BpePreTokenizerTraits traits;
};

// Names as written by llama.cpp's converter (tokenizer.ggml.pre); "" is an absent key, which
// llama.cpp treats as "default" (with a warning that quality may suffer).
const PreTokenizerEntry kEntries[] = {
    {"", kExprDefault, {}},
    {"default", kExprDefault, {}},
    {"llama3", kExprLlama3, {.ignore_merges = true, .add_bos = true}},
    {"llama-v3", kExprLlama3, {.ignore_merges = true, .add_bos = true}},
    {"llama-bpe", kExprLlama3, {.ignore_merges = true, .add_bos = true}},
    {"falcon3", kExprLlama3, {.ignore_merges = true, .add_bos = true}},
    {"dbrx", kExprLlama3, {}},
    {"smaug-bpe", kExprLlama3, {}},
    {"chatglm-bpe", kExprLlama3, {}},
    {"deepseek-llm", kExprDeepseekLlm, {}},
    {"deepseek-coder", kExprDeepseekCoder, {}},
    {"deepseek-v3", kExprDeepseekV3, {}},
    {"falcon", kExprFalcon, {}},
    {"gpt-2", kExprGpt2, {}},
    {"phi-2", kExprGpt2, {}},
    {"mpt", kExprGpt2, {}},
    {"olmo", kExprGpt2, {}},
    {"jais", kExprGpt2, {}},
    {"roberta-bpe", kExprGpt2, {}},
    {"gigachat", kExprGpt2, {}},
    {"jina-es", kExprGpt2, {}},
    {"jina-de", kExprGpt2, {}},
    {"jina-v1-en", kExprGpt2, {}},
    {"jina-v2-es", kExprGpt2, {}},
    {"jina-v2-de", kExprGpt2, {}},
    {"jina-v2-code", kExprGpt2, {}},
    {"starcoder", kExprStarcoder, {}},
    {"refact", kExprStarcoder, {}},
    {"command-r", kExprStarcoder, {}},
    {"smollm", kExprStarcoder, {}},
    {"codeshell", kExprStarcoder, {}},
    {"exaone", kExprStarcoder, {}},
    {"minerva-7b", kExprStarcoder, {}},
    {"qwen2", kExprQwen2, {}},
    {"stablelm2", kExprQwen2, {}},
    {"megrez", kExprQwen2, {}},
    {"poro-chat", kExprBloom, {}},
    {"bloom", kExprBloom, {}},
    {"gpt3-finnish", kExprBloom, {}},
    {"viking", kExprViking, {}},
    {"tekken", kExprTekken, {.ignore_merges = true, .add_bos = true}},
    {"chameleon", kExprChameleon, {.ignore_merges = false, .add_bos = true}},
};

const PreTokenizerEntry* FindEntry(std::string_view pre) {
  for (const PreTokenizerEntry& e : kEntries) {
    if (e.name == pre) return &e;
  }
  return nullptr;
}

std::string Pcre2Message(int code) {
  PCRE2_UCHAR buf[256];
  int n = pcre2_get_error_message(code, buf, sizeof(buf));
  return n < 0 ? "error " + std::to_string(code) : std::string(reinterpret_cast<char*>(buf), n);
}

}  // namespace

struct BpePreTokenizer::Regex {
  pcre2_code* code = nullptr;
  ~Regex() { pcre2_code_free(code); }
};

const BpePreTokenizerTraits* FindBpePreTokenizer(std::string_view pre) {
  const PreTokenizerEntry* e = FindEntry(pre);
  return e ? &e->traits : nullptr;
}

BpePreTokenizer::~BpePreTokenizer() = default;

StatusOr<std::unique_ptr<BpePreTokenizer>> BpePreTokenizer::Create(std::string_view pre) {
  const PreTokenizerEntry* entry = FindEntry(pre);
  if (entry == nullptr) {
    return InvalidArgumentError("tokenizer.ggml.pre: unsupported BPE pre-tokenizer '" +
                                std::string(pre) + "'");
  }
  std::unique_ptr<BpePreTokenizer> result(new BpePreTokenizer());
  result->traits_ = entry->traits;
  for (const char* expr : entry->exprs) {
    int error = 0;
    PCRE2_SIZE error_offset = 0;
    auto regex = std::make_unique<Regex>();
    regex->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(expr), PCRE2_ZERO_TERMINATED,
                                PCRE2_UTF | PCRE2_UCP | PCRE2_DOLLAR_ENDONLY |
                                    PCRE2_MATCH_INVALID_UTF,
                                &error, &error_offset, nullptr);
    if (regex->code == nullptr) {
      return InvalidArgumentError("tokenizer.ggml.pre '" + std::string(pre) +
                                  "': cannot compile expression at offset " +
                                  std::to_string(error_offset) + ": " + Pcre2Message(error));
    }
    // JIT is an optimization only: where it is unavailable pcre2_match interprets.
    (void)pcre2_jit_compile(regex->code, PCRE2_JIT_COMPLETE);
    result->regexes_.push_back(std::move(regex));
  }
  return result;
}

void BpePreTokenizer::Split(std::string_view text, std::vector<Word>* words) const {
  words->clear();
  if (text.empty()) return;
  words->push_back({0, text.size()});
  std::vector<Word> next;
  for (const auto& regex : regexes_) {
    pcre2_match_data* match = pcre2_match_data_create_from_pattern(regex->code, nullptr);
    CHECK(match != nullptr) << "out of memory";
    next.clear();
    next.reserve(words->size() * 2);
    for (const Word& word : *words) {
      const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data() + word.begin);
      const size_t length = word.end - word.begin;
      size_t last = 0;  // end of the previous match, relative to the word
      while (last < length) {
        // PCRE2_NOTEMPTY: none of the expressions can match the empty string anyway; this
        // guarantees progress.
        int rc = pcre2_match(regex->code, subject, length, last, PCRE2_NOTEMPTY, match, nullptr);
        if (rc < 0 && rc != PCRE2_ERROR_NOMATCH) {
          // A JIT stack or match limit on a pathological input: retry with the interpreter
          // (heap-backed); if that fails too, the rest of the piece stays one gap.
          rc = pcre2_match(regex->code, subject, length, last, PCRE2_NOTEMPTY | PCRE2_NO_JIT,
                           match, nullptr);
        }
        if (rc < 0) break;
        const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(match);
        const size_t match_begin = ovector[0];
        const size_t match_end = ovector[1];
        if (match_begin > last) next.push_back({word.begin + last, word.begin + match_begin});
        next.push_back({word.begin + match_begin, word.begin + match_end});
        last = match_end;
      }
      if (last < length) next.push_back({word.begin + last, word.end});
    }
    pcre2_match_data_free(match);
    words->swap(next);
  }
}

}  // namespace kvserve
