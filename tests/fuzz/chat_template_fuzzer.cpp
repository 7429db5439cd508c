// Fuzz target: chat-template rendering.
//
// Input: byte 0 picks the template (kind, bits 0-2 and 6; add_generation_prompt, bit 3; bit 4:
// use the rest of the input up to the first "\n\n" as GGUF template text for Detect); the
// rest is a conversation: messages separated by '\x1e', each one role byte (low 2 bits:
// system, user, assistant, or an invalid role) followed by the content.
//
// Checks: Render never crashes; it fails only with INVALID_ARGUMENT (or RESOURCE_EXHAUSTED: a
// Jinja template past its bounds); a rendered prompt encodes to ids inside the vocabulary with
// both a SentencePiece and a BPE tokenizer. Template text given to Detect renders with the Jinja
// engine (engine/jinja), so this target fuzzes it too.
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <string>
#include <string_view>
#include <vector>

#include "engine/tokenizer/chat_template.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace kvserve;
  using namespace kvserve::fuzz;
  static const std::unique_ptr<Tokenizer> spm = MakeSpmTokenizer();
  static const std::unique_ptr<Tokenizer> bpe = MakeBpeTokenizer("gpt-2");
  if (size == 0 || size > 8192) return 0;
  const uint8_t control = data[0];
  std::string_view rest(reinterpret_cast<const char*>(data + 1), size - 1);

  static constexpr ChatTemplate::Kind kKinds[] = {
      ChatTemplate::Kind::kPlain,   ChatTemplate::Kind::kChatml,     ChatTemplate::Kind::kLlama2,
      ChatTemplate::Kind::kMistral, ChatTemplate::Kind::kMistralV01, ChatTemplate::Kind::kLlama3,
      ChatTemplate::Kind::kLlama31, ChatTemplate::Kind::kZephyr,     ChatTemplate::Kind::kGemma,
      ChatTemplate::Kind::kPhi3};
  const bool add_generation_prompt = (control & 0x08) != 0;
  std::vector<ChatTemplate> templates;
  if ((control & 0x10) != 0) {
    const size_t end = rest.find("\n\n");
    const std::string_view text = rest.substr(0, end);
    rest = end == std::string_view::npos ? std::string_view() : rest.substr(end + 2);
    templates.push_back(ChatTemplate::Detect(text, *spm));
    templates.push_back(ChatTemplate::Detect(text, *bpe));
  } else {
    // Kind from bits 0-2 and 6 (bits 3-5 choose the options above and below).
    const ChatTemplate::Kind kind = kKinds[((control & 0x07) | ((control >> 3) & 0x08)) % std::size(kKinds)];
    templates.push_back(ChatTemplate::Make(kind, "<s>", "</s>", (control & 0x20) ? "You are helpful." : ""));
    templates.push_back(ChatTemplate::Make(kind, "<|begin_of_text|>", "<|eot_id|>", "", "01 Jan 2025"));
  }

  static constexpr const char* kRoles[] = {"system", "user", "assistant", "tool"};
  std::vector<ChatMessage> messages;
  while (!rest.empty()) {
    const size_t end = rest.find('\x1e');
    std::string_view m = rest.substr(0, end);
    rest = end == std::string_view::npos ? std::string_view() : rest.substr(end + 1);
    if (m.empty()) continue;
    messages.push_back({kRoles[static_cast<uint8_t>(m[0]) & 3], std::string(m.substr(1))});
  }

  for (const ChatTemplate& tmpl : templates) {
    StatusOr<RenderedChat> rendered = tmpl.RenderChat(messages, add_generation_prompt);
    if (!rendered.ok()) {
      FUZZ_CHECK(rendered.status().code() == StatusCode::kInvalidArgument ||
                 rendered.status().code() == StatusCode::kResourceExhausted);
      continue;
    }
    // Content ranges: non-empty, sorted, disjoint, inside the text.
    size_t previous_end = 0;
    for (const TextRange& r : rendered->content) {
      FUZZ_CHECK(r.begin < r.end && r.end <= rendered->text.size() && r.begin >= previous_end);
      previous_end = r.end;
    }
    for (const Tokenizer* tok : {spm.get(), bpe.get()}) {
      for (int32_t id : tmpl.Encode(*rendered, *tok)) FUZZ_CHECK(id >= 0 && id < tok->vocab_size());
    }
  }
  return 0;
}
