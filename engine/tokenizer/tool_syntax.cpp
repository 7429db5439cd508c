// ToolSyntax: the named syntaxes and DeriveToolSyntax (see tool_syntax.h).
#include "engine/tokenizer/tool_syntax.h"

#include <algorithm>

#include "common/json_nesting.h"
#include "engine/tokenizer/chat_template.h"

namespace kvserve {
namespace {

// The probe conversation's strings: unlike anything a template writes itself.
constexpr std::string_view kQuestion = "kvs_probe_question";
constexpr std::string_view kContent = "kvs_probe_content";
constexpr std::string_view kNames[2] = {"kvs_probe_fn_a", "kvs_probe_fn_b"};
constexpr std::string_view kKeys[2] = {"kvs_probe_first", "kvs_probe_second"};
// Each call's arguments: a string and a number (markup may differ for values that are not strings).
constexpr std::string_view kValues[2][2] = {{"kvs_probe_value_a1", "987654321"}, {"kvs_probe_value_b1", "987654322"}};
constexpr std::string_view kIds[2] = {"kvsprob01", "kvsprob02"};  // Mistral's 9 letters and digits

ChatToolCall ProbeCall(int i) {
  const std::string args = "{\"" + std::string(kKeys[0]) + "\": \"" + std::string(kValues[i][0]) + "\", \"" +
                           std::string(kKeys[1]) + "\": " + std::string(kValues[i][1]) + "}";
  return ChatToolCall{std::string(kIds[i]), std::string(kNames[i]), args};
}

size_t CommonPrefix(std::string_view a, std::string_view b) {
  size_t n = 0;
  while (n < a.size() && n < b.size() && a[n] == b[n]) ++n;
  return n;
}

size_t CommonSuffix(std::string_view a, std::string_view b) {
  size_t n = 0;
  while (n < a.size() && n < b.size() && a[a.size() - 1 - n] == b[b.size() - 1 - n]) ++n;
  return n;
}

// Whether `at` lies strictly inside a control token's text or an unclosed "<...>" tag of `s`:
// a literal must not begin or end there. *tag_begin / *tag_end: that text's bounds.
bool InsideMarkup(std::string_view s, size_t at, std::span<const std::string> controls, size_t* tag_begin,
                  size_t* tag_end) {
  for (const std::string& c : controls) {
    if (c.size() < 2) continue;
    const size_t from = at >= c.size() ? at - c.size() + 1 : 0;
    const size_t p = s.find(c, from);
    if (p != std::string_view::npos && p < at && at < p + c.size()) {
      *tag_begin = p;
      *tag_end = p + c.size();
      return true;
    }
  }
  const size_t open = s.rfind('<', at == 0 ? 0 : at - 1);
  if (at == 0 || open == std::string_view::npos || at - open > 48) return false;
  if (s.substr(open, at - open).find('>') != std::string_view::npos) return false;
  const size_t close = s.find('>', at);
  if (close == std::string_view::npos || s.substr(at, close - at).find('<') != std::string_view::npos) return false;
  *tag_begin = open;
  *tag_end = close + 1;
  return true;
}

// Where the assistant's text starts in `render` (after what it shares with the turn that holds
// only text, not inside a tag).
size_t TurnStart(std::string_view render, std::string_view text_turn, std::span<const std::string> controls) {
  size_t at = CommonPrefix(render, text_turn);
  size_t b = 0, e = 0;
  if (InsideMarkup(render, at, controls, &b, &e)) at = b;
  return at;
}

// Replaces the probe ids with kIdSlot.
std::string Slots(std::string s) {
  for (std::string_view id : kIds) {
    for (size_t p = s.find(id); p != std::string::npos; p = s.find(id, p + 1)) {
      s.replace(p, id.size(), 1, ToolSyntax::kIdSlot);
    }
  }
  return s;
}

// `first` (call 0) and `second` (call 1) are the same text but for the call's index: `first`
// with kIndexSlot where they differ as 0 and 1; nullopt if they differ otherwise.
std::optional<std::string> Indexed(std::string_view first, std::string_view second) {
  if (first.size() != second.size()) return std::nullopt;
  std::string out(first);
  for (size_t i = 0; i < out.size(); ++i) {
    if (first[i] == second[i]) continue;
    if (first[i] != '0' || second[i] != '1') return std::nullopt;
    out[i] = ToolSyntax::kIndexSlot;
  }
  return out;
}

// One call's pieces in an assistant turn's text: [name, name end), [args begin, args end).
struct CallSpan {
  size_t name = 0, name_end = 0, args = 0, args_end = 0;
};

// The markup of arguments (ToolSyntax::param_*), found in the first call.
struct ParamMarkup {
  std::string begin, mid, mid_json, end;
};

// Finds call `i` at or after `from`; its arguments as a JSON object, or with `xml` as markup.
std::optional<CallSpan> FindCall(std::string_view t, size_t from, int i, const ParamMarkup* xml) {
  CallSpan c;
  c.name = t.find(kNames[i], from);
  if (c.name == std::string_view::npos) return std::nullopt;
  c.name_end = c.name + kNames[i].size();
  if (xml != nullptr) {
    const size_t key = t.find(kKeys[0], c.name_end);
    const size_t last = t.find(kValues[i][1], c.name_end);
    if (key == std::string_view::npos || last == std::string_view::npos || key < c.name_end + xml->begin.size()) {
      return std::nullopt;
    }
    c.args = key - xml->begin.size();
    c.args_end = last + kValues[i][1].size() + xml->end.size();
    if (c.args_end > t.size() || t.substr(c.args, xml->begin.size()) != xml->begin) return std::nullopt;
    return c;
  }
  const std::string quoted = "\"" + std::string(kKeys[0]) + "\"";
  size_t key = t.find(quoted, c.name_end);
  if (key == std::string_view::npos) return std::nullopt;
  while (key > c.name_end && (t[key - 1] == ' ' || t[key - 1] == '\n')) --key;
  if (key == c.name_end || t[key - 1] != '{') return std::nullopt;
  c.args = key - 1;
  JsonNesting n;
  for (size_t p = c.args; p < t.size(); ++p) {
    if (n.Step(t[p]) == 0) {
      c.args_end = p + 1;
      return c;
    }
  }
  return std::nullopt;
}

// The argument markup of the first call in `t` (its name ends at `name_end`): each argument
// as begin KEY mid VALUE end.
std::optional<ParamMarkup> FindParamMarkup(std::string_view t, size_t name_end) {
  const size_t k1 = t.find(kKeys[0], name_end);
  const size_t v1 = k1 == std::string_view::npos ? k1 : t.find(kValues[0][0], k1);
  const size_t k2 = v1 == std::string_view::npos ? v1 : t.find(kKeys[1], v1);
  const size_t v2 = k2 == std::string_view::npos ? k2 : t.find(kValues[0][1], k2);
  if (v2 == std::string_view::npos) return std::nullopt;
  ParamMarkup m;
  m.mid = std::string(t.substr(k1 + kKeys[0].size(), v1 - k1 - kKeys[0].size()));
  m.mid_json = std::string(t.substr(k2 + kKeys[1].size(), v2 - k2 - kKeys[1].size()));
  if (m.mid_json == m.mid) m.mid_json.clear();
  const std::string_view head = t.substr(name_end, k1 - name_end);      // name_end + begin
  const std::string_view between = t.substr(v1 + kValues[0][0].size(), k2 - v1 - kValues[0][0].size());  // end + begin
  const std::string_view after = t.substr(v2 + kValues[0][1].size());  // end + the call's end
  const size_t n = CommonSuffix(head, between);
  m.begin = std::string(between.substr(between.size() - n));
  m.end = std::string(between.substr(0, between.size() - n));
  if (!after.starts_with(m.end)) return std::nullopt;
  // The split is ambiguous where the begin's first bytes also follow the end: move them over
  // (`</parameter>\n` + `<parameter=`, not `\n</parameter` + `>\n<parameter=`), up to a tag.
  while (!m.begin.empty() && m.begin[0] != '<' && after.size() > m.end.size() && after[m.end.size()] == m.begin[0]) {
    m.end += m.begin[0];
    m.begin.erase(0, 1);
  }
  if (m.begin.empty() || m.mid.empty()) return std::nullopt;
  return m;
}

// A name for logs: the family whose markup a derived syntax has (the syntax is what counts).
std::string FamilyOf(const ToolSyntax& s) {
  static constexpr std::pair<std::string_view, std::string_view> kMarkers[] = {
      {"<｜DSML｜", "deepseek-v3.2"},      {"tool▁call▁begin", "deepseek"},     {"[TOOL_CALLS]", "mistral"},
      {"<|tool_calls_section_begin|>", "kimi-k2"}, {"<|START_ACTION|>", "command-r"}, {"to=functions.", "gpt-oss"},
      {"<arg_key>", "glm"},                   {"<invoke name=", "minimax"},        {"<function=", "functionary"},
      {"<tool_call>", "hermes"},              {"<tool_calls>", "apriel"},          {"<TOOLCALL>", "nemotron"},
      {"<|tool_call:begin|>", "solar"},       {"<|function_call|>", "gigachat"},   {"<|tools_prefix|>", "apertus"},
      {"Action:", "command-r"},               {"\"parameters\"", "llama3.1"}};
  const std::string all = s.begin + s.call_begin + s.name_end + s.param_begin;
  for (const auto& [marker, name] : kMarkers) {
    if (all.find(marker) == std::string::npos) continue;
    if (name == "functionary" && s.xml_arguments) return "qwen3-coder";
    if (name == "hermes" && s.xml_arguments) return "qwen3-coder";
    return std::string(name);
  }
  return "derived";
}

std::string Escaped(std::string_view s) {
  std::string out;
  for (char c : s) {
    if (c == '\n') out += "\\n";
    else if (c == ToolSyntax::kIdSlot) out += "ID";
    else if (c == ToolSyntax::kIndexSlot) out += "INDEX";
    else out += c;
  }
  return out;
}

// A named syntax of JSON calls between literals.
ToolSyntax NamedLiteral(std::string family, std::string call_begin, std::string name_end, std::string call_end,
                        std::string separator) {
  ToolSyntax s;
  s.kind = ToolSyntax::Kind::kLiteral;
  s.family = std::move(family);
  s.call_begin = std::move(call_begin);
  s.name_end = std::move(name_end);
  s.call_end = std::move(call_end);
  s.separator = std::move(separator);
  return s;
}

}  // namespace

ToolSyntax ToolSyntax::Generic() {
  ToolSyntax s;
  s.family = "generic";
  return s;
}

ToolSyntax ToolSyntax::Hermes() {
  return NamedLiteral("hermes", "<tool_call>\n{\"name\": \"", "\", \"arguments\": ", "}\n</tool_call>", "\n");
}

ToolSyntax ToolSyntax::Llama31() {
  ToolSyntax s = NamedLiteral("llama3.1", "{\"name\": \"", "\", \"parameters\": ", "}", "");
  s.parallel = false;
  return s;
}

ToolSyntax ToolSyntax::Mistral() {
  ToolSyntax s = NamedLiteral("mistral", "{\"name\": \"", "\", \"arguments\": ",
                              std::string(", \"id\": \"") + kIdSlot + "\"}", ", ");
  s.begin = "[TOOL_CALLS] [";
  s.end = "]";
  return s;
}

bool ToolSyntax::has_id() const {
  for (const std::string* s : {&call_begin, &name_end, &call_end}) {
    if (s->find(kIdSlot) != std::string::npos) return true;
  }
  return false;
}

std::string ToolSyntax::opener() const {
  const std::string all = begin + call_begin;
  return all.substr(0, all.find_first_of(std::string{kIdSlot, kIndexSlot}));
}

std::string ToolSyntax::Describe() const {
  if (kind == Kind::kGeneric) return family;
  std::string out = family + (derived ? " (derived): " : ": ") + Escaped(begin + call_begin) + "NAME" +
                    Escaped(name_end);
  const std::string mid = param_mid_json.empty() ? Escaped(param_mid) : "{" + Escaped(param_mid) + "|" + Escaped(param_mid_json) + "}";
  out += xml_arguments ? "(" + Escaped(param_begin) + "KEY" + mid + "VALUE" + Escaped(param_end) + ")*"
                       : std::string("ARGUMENTS");
  out += Escaped(call_end);
  if (parallel) out += " [" + Escaped(separator) + " ...]";
  return out + Escaped(end);
}

std::vector<ChatTool> ToolProbeTools() {
  std::vector<ChatTool> tools;
  for (std::string_view name : kNames) {
    std::string params = "{\"type\": \"object\", \"properties\": {";
    for (int k = 0; k < 2; ++k) {
      params += std::string(k ? ", " : "") + "\"" + std::string(kKeys[k]) +
                "\": {\"type\": \"" + (k ? "integer" : "string") + "\", \"description\": \"kvs_probe_parameter\"}";
    }
    params += "}, \"required\": [\"" + std::string(kKeys[0]) + "\", \"" + std::string(kKeys[1]) + "\"]}";
    const std::string json = "{\"type\": \"function\", \"function\": {\"name\": \"" + std::string(name) +
                             "\", \"description\": \"kvs_probe_description\", \"parameters\": " + params + "}}";
    tools.push_back({std::string(name), json, json});
  }
  return tools;
}

std::optional<ToolSyntax> DeriveToolSyntax(const ToolProbeRender& render, std::string_view eos,
                                           std::span<const std::string> controls, bool* refused) {
  const ChatMessage user("user", std::string(kQuestion));
  const std::vector<ChatMessage> one = {user, ChatMessage("assistant", "", {ProbeCall(0)})};
  const std::vector<ChatMessage> two = {user, ChatMessage("assistant", "", {ProbeCall(0), ProbeCall(1)})};
  const std::vector<ChatMessage> text = {user, ChatMessage("assistant", std::string(kContent))};
  StatusOr<std::string> r1 = render(one, false);
  if (refused != nullptr) *refused = !r1.ok();
  if (!r1.ok()) return std::nullopt;
  StatusOr<std::string> base = render(text, false);
  if (!base.ok()) base = render(std::span<const ChatMessage>(text.data(), 1), true);
  if (!base.ok()) return std::nullopt;

  // The turn with one call, from where its text starts to where the turn's end begins (what it
  // shares at the end with the turn of text, not cut inside a tag, and never past the end of
  // sequence).
  std::string t1 = r1->substr(TurnStart(*r1, *base, controls));
  const std::string_view tail_base(*base);
  size_t cut = t1.size() - std::min(CommonSuffix(t1, tail_base), t1.size());
  size_t b = 0, e = 0;
  if (InsideMarkup(t1, cut, controls, &b, &e)) cut = e;
  std::optional<CallSpan> c1 = FindCall(std::string_view(t1).substr(0, cut), 0, 0, nullptr);
  ParamMarkup xml;
  bool is_xml = false;
  if (!c1) {
    const size_t name = t1.find(kNames[0]);
    if (name == std::string::npos) return std::nullopt;
    std::optional<ParamMarkup> m = FindParamMarkup(std::string_view(t1).substr(0, cut), name + kNames[0].size());
    if (!m) return std::nullopt;
    xml = *m;
    is_xml = true;
    c1 = FindCall(std::string_view(t1).substr(0, cut), 0, 0, &xml);
    if (!c1) return std::nullopt;
  }
  // Never past the end of sequence or the end-of-turn markup the turn of text ends with.
  const size_t content_at = base->find(kContent);
  std::string turn_tag = content_at == std::string::npos ? "" : base->substr(content_at + kContent.size());
  if (turn_tag.starts_with("<") && turn_tag.find('>') != std::string::npos) turn_tag.resize(turn_tag.find('>') + 1);
  for (const std::string_view mark : {eos, std::string_view(turn_tag)}) {
    const size_t at = mark.size() < 2 ? std::string::npos : t1.find(mark, c1->args_end);
    if (at != std::string::npos) cut = std::min(cut, at);
  }
  if (cut < c1->args_end) cut = c1->args_end;
  const std::string turn_end = t1.substr(cut);
  t1.resize(cut);

  ToolSyntax s;
  s.kind = ToolSyntax::Kind::kLiteral;
  s.derived = true;
  s.xml_arguments = is_xml;
  if (is_xml) {
    s.param_begin = xml.begin;
    s.param_mid = xml.mid;
    s.param_mid_json = xml.mid_json;
    s.param_end = xml.end;
  }
  s.multiline_arguments = !is_xml && t1.substr(c1->args, c1->args_end - c1->args).find('\n') != std::string::npos;
  const std::string t0 = Slots(t1.substr(0, c1->name));
  const std::string n1 = Slots(t1.substr(c1->name_end, c1->args - c1->name_end));
  const std::string t2 = Slots(t1.substr(c1->args_end));
  s.call_begin = t0;
  s.name_end = n1;
  s.call_end = t2;
  s.parallel = false;

  // Two calls: what lies between them splits into the first's end, a separator and the
  // second's beginning.
  StatusOr<std::string> r2 = render(two, false);
  if (r2.ok()) {
    std::string t2text = r2->substr(TurnStart(*r2, *base, controls));
    std::optional<CallSpan> a, bcall;
    if (t2text.ends_with(turn_end)) {
      t2text.resize(t2text.size() - turn_end.size());
      a = FindCall(t2text, 0, 0, is_xml ? &xml : nullptr);
      if (a) bcall = FindCall(t2text, a->args_end, 1, is_xml ? &xml : nullptr);
    }
    if (a && bcall && Slots(t2text.substr(0, a->name)) == t0 &&
        Slots(t2text.substr(a->name_end, a->args - a->name_end)) == n1 &&
        Slots(t2text.substr(bcall->args_end)) == t2) {
      const std::string u2 = Slots(t2text.substr(a->args_end, bcall->name - a->args_end));
      const std::optional<std::string> n2 =
          Indexed(n1, Slots(t2text.substr(bcall->name_end, bcall->args - bcall->name_end)));
      // The second call's beginning: what `u2` ends with of t0 (an index may read 1 for 0).
      size_t nb = 0;
      std::string call_begin;
      while (nb < t0.size() && nb < u2.size()) {
        const char x = t0[t0.size() - 1 - nb], y = u2[u2.size() - 1 - nb];
        if (x != y && !(x == '0' && y == '1')) break;
        call_begin.insert(call_begin.begin(), x == y ? x : ToolSyntax::kIndexSlot);
        ++nb;
      }
      // Neither piece starts or ends inside a tag.
      size_t tb = 0, te = 0;
      if (InsideMarkup(u2, u2.size() - nb, controls, &tb, &te)) {
        call_begin.erase(0, te - (u2.size() - nb));
        nb = u2.size() - te;
      }
      size_t ne = std::min(CommonPrefix(u2, t2), u2.size() - nb);
      if (InsideMarkup(u2, ne, controls, &tb, &te)) ne = tb;
      if (n2 && nb > 0 && ne + nb <= u2.size()) {
        s.parallel = true;
        s.begin = t0.substr(0, t0.size() - nb);
        s.call_begin = call_begin;
        s.name_end = *n2;
        s.call_end = t2.substr(0, ne);
        s.separator = u2.substr(ne, u2.size() - nb - ne);
        s.end = t2.substr(ne);
      }
    }
  }
  // Whitespace before the calls is the model's to choose (the parser drops it); control tokens
  // after them (an end of message) are the model's end of sequence, not text to write.
  std::string& first = s.begin.empty() ? s.call_begin : s.begin;
  const size_t space = std::min(first.find_first_not_of(" \n"), first.size());
  if (&first == &s.call_begin && s.parallel) s.separator += first.substr(0, space);  // it stays between calls
  first.erase(0, space);
  std::string& last = s.parallel ? s.end : s.call_end;
  for (bool stripped = true; stripped;) {
    stripped = false;
    for (const std::string& c : controls) {
      if (c.size() >= 2 && last.size() > 0 && last.ends_with(c)) {
        last.resize(last.size() - c.size());
        stripped = true;
      }
    }
  }
  if (s.opener().empty()) return std::nullopt;
  s.family = FamilyOf(s);
  return s;
}

}  // namespace kvserve
