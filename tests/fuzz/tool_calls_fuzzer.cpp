// Fuzz target: reading a reply back (ToolCallParser over each kind of tool syntax, and
// HarmonyParser in front of it), the text a model generates being anything.
//
// Input: byte 0 picks the syntax (low 3 bits) and whether harmony's parser comes first (bit
// 3); byte 1 the size of the pieces the text is fed in (0: whole); the rest is the reply.
//
// Checks: never a crash; fed in pieces or whole, the same content and calls come out; the
// streamed deltas add up to what the parser reports for the complete reply (content, each
// call's id, name and arguments).
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "server/api/reasoning.h"
#include "server/api/tool_calls.h"
#include "tests/fuzz/fuzz_util.h"

namespace {

using namespace kvserve;

ToolSyntax Literal(std::string call_begin, std::string name_end, std::string call_end, std::string separator,
                   std::string begin = "", std::string end = "") {
  ToolSyntax s;
  s.kind = ToolSyntax::Kind::kLiteral;
  s.begin = std::move(begin);
  s.call_begin = std::move(call_begin);
  s.name_end = std::move(name_end);
  s.call_end = std::move(call_end);
  s.separator = std::move(separator);
  s.end = std::move(end);
  return s;
}

std::vector<ToolSyntax> Syntaxes() {
  ToolSyntax markup = Literal("<tool_call>\n<function=", ">\n", "</function>\n</tool_call>", "\n");
  markup.xml_arguments = true;
  markup.param_begin = "<parameter=";
  markup.param_mid = ">\n";
  markup.param_end = "\n</parameter>\n";
  ToolSyntax dsml = markup;
  dsml.param_mid = "\" string=\"true\">";
  dsml.param_mid_json = "\" string=\"false\">";
  return {ToolSyntax::Hermes(),
          ToolSyntax::Llama31(),
          ToolSyntax::Mistral(),
          ToolSyntax::Generic(),
          markup,
          dsml,
          Literal("<|tool_call_begin|>functions.", std::string(":") + ToolSyntax::kIndexSlot + "<|tool_call_argument_begin|>",
                  "<|tool_call_end|>", "", "<|tool_calls_section_begin|>", "<|tool_calls_section_end|>"),
          Literal("[TOOL_CALLS]", std::string("[CALL_ID]") + ToolSyntax::kIdSlot + "[ARGS]", "", "")};
}

struct Outcome {
  std::string content;
  std::vector<ToolCall> calls;
};

Outcome Read(const ToolSyntax& syntax, bool harmony, std::string_view text, size_t step) {
  ToolCallParser calls(syntax);
  HarmonyParser reasoning(&syntax);
  Outcome out;
  auto take = [&](const ToolCallParser::Delta& d) {
    out.content += d.content;
    for (const ToolCallParser::CallFragment& f : d.calls) {
      if (f.index == static_cast<int>(out.calls.size())) {
        FUZZ_CHECK(!f.id.empty() && !f.name.empty());
        out.calls.push_back({f.id, f.name, ""});
      }
      FUZZ_CHECK(f.index + 1 == static_cast<int>(out.calls.size()));
      out.calls.back().arguments += f.arguments;
    }
  };
  auto feed = [&](std::string_view piece, bool last) {
    std::string content(piece);
    if (harmony) {
      const ReasoningParser::Delta r = reasoning.Feed(piece);
      content = r.content;
      if (last) content += reasoning.Finish().content;
    }
    take(calls.Feed(content));
    if (last) take(calls.Finish());
  };
  if (step == 0) step = text.size() + 1;
  for (size_t i = 0; i < text.size(); i += step) feed(text.substr(i, step), i + step >= text.size());
  if (text.empty()) feed("", true);
  // The streamed view is the complete reply's (a call cut short has streamed fragments but
  // is no call: only complete calls are compared).
  FUZZ_CHECK(calls.calls().size() <= out.calls.size());
  for (size_t i = 0; i < calls.calls().size(); ++i) {
    FUZZ_CHECK(calls.calls()[i].name == out.calls[i].name);
    FUZZ_CHECK(calls.calls()[i].arguments == out.calls[i].arguments);
  }
  if (calls.calls().size() == out.calls.size()) FUZZ_CHECK(calls.content() == out.content);
  return {calls.content(), calls.calls()};
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::vector<ToolSyntax> syntaxes = Syntaxes();
  if (size < 2 || size > 4096) return 0;
  const ToolSyntax& syntax = syntaxes[(data[0] & 7) % syntaxes.size()];
  const bool harmony = (data[0] & 8) != 0;
  const size_t step = data[1] % 17;
  const std::string_view text(reinterpret_cast<const char*>(data + 2), size - 2);
  const Outcome whole = Read(syntax, harmony, text, 0);
  const Outcome pieces = Read(syntax, harmony, text, step);
  FUZZ_CHECK(whole.content == pieces.content);
  FUZZ_CHECK(whole.calls.size() == pieces.calls.size());
  for (size_t i = 0; i < whole.calls.size() && i < pieces.calls.size(); ++i) {
    FUZZ_CHECK(whole.calls[i].name == pieces.calls[i].name);
    FUZZ_CHECK(whole.calls[i].arguments == pieces.calls[i].arguments);
  }
  return 0;
}
