// OpenAI request decoding with nlohmann::json: type checks per field, then plain values.
#include "server/http/openai_codec.h"

#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <nlohmann/json.hpp>

#include "common/json_nesting.h"
#include "server/http/openai_tools.h"

namespace kvserve {
namespace {

using json = nlohmann::ordered_json;  // as the other http/ files (one unity TU)

// Reads optional fields of one JSON object with type checks; the first error wins.
class FieldReader {
 public:
  FieldReader(const json& object, ApiError* error) : object_(object), error_(error) {}

  bool ok() const { return ok_; }

  // The field, or nullptr when absent or null.
  const json* Get(const char* name) const {
    auto it = object_.find(name);
    if (it == object_.end() || it->is_null()) return nullptr;
    return &*it;
  }

  bool Fail(const std::string& param, const std::string& message) {
    if (ok_) *error_ = InvalidField(param, message);
    ok_ = false;
    return false;
  }

  void String(const char* name, std::string* out) {
    if (const json* v = Get(name)) {
      if (!v->is_string()) {
        Fail(name, fmt::format("'{}' must be a string", name));
        return;
      }
      *out = v->get<std::string>();
    }
  }

  void Bool(const char* name, bool* out) {
    if (const json* v = Get(name)) {
      if (!v->is_boolean()) {
        Fail(name, fmt::format("'{}' must be a boolean", name));
        return;
      }
      *out = v->get<bool>();
    }
  }

  void Float(const char* name, float* out) {
    if (const json* v = Get(name)) {
      if (!v->is_number()) {
        Fail(name, fmt::format("'{}' must be a number", name));
        return;
      }
      *out = v->get<float>();
    }
  }

  // Integers in [lo, hi]; floats with an integral value (e.g. 16.0) are not integers.
  template <typename T>
  bool Int(const char* name, T* out, int64_t lo = std::numeric_limits<int32_t>::min(),
           int64_t hi = std::numeric_limits<int32_t>::max()) {
    const json* v = Get(name);
    if (v == nullptr) return false;
    if (!v->is_number_integer()) return Fail(name, fmt::format("'{}' must be an integer", name));
    if (v->is_number_unsigned() && v->get<uint64_t>() > static_cast<uint64_t>(hi)) {
      return Fail(name, fmt::format("'{}' must be at most {}", name, hi));
    }
    const int64_t x = v->is_number_unsigned() ? static_cast<int64_t>(v->get<uint64_t>()) : v->get<int64_t>();
    if (x < lo || x > hi) return Fail(name, fmt::format("'{}' must be in [{}, {}]", name, lo, hi));
    *out = static_cast<T>(x);
    return true;
  }

 private:
  const json& object_;
  ApiError* error_;
  bool ok_ = true;
};


bool ParseObject(std::string_view body, json* out, ApiError* error) {
  if (JsonDepth(body, kMaxJsonDepth) > kMaxJsonDepth) {
    *error = InvalidField("", fmt::format("the request body nests JSON deeper than {} levels", kMaxJsonDepth));
    return false;
  }
  *out = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (out->is_discarded()) {
    *error = InvalidField("", "the request body is not valid JSON");
    return false;
  }
  if (!out->is_object()) {
    *error = InvalidField("", "the request body must be a JSON object");
    return false;
  }
  return true;
}

// [int] within int32; `what` names the field in errors.
bool TokenArray(const json& v, const std::string& what, std::vector<int32_t>* out, FieldReader* r) {
  out->clear();
  out->reserve(v.size());
  for (const json& t : v) {
    if (!t.is_number_integer()) return r->Fail(what, fmt::format("'{}' must contain only integers", what));
    const int64_t id = t.is_number_unsigned() ? static_cast<int64_t>(std::min<uint64_t>(t.get<uint64_t>(), INT64_MAX))
                                              : t.get<int64_t>();
    if (id < std::numeric_limits<int32_t>::min() || id > std::numeric_limits<int32_t>::max()) {
      return r->Fail(what, fmt::format("token id {} in '{}' is out of range", id, what));
    }
    out->push_back(static_cast<int32_t>(id));
  }
  return true;
}

bool ParsePrompt(const json& p, std::vector<PromptInput>* prompts, FieldReader* r) {
  constexpr char kType[] = "'prompt' must be a string, an array of token ids, an array of strings or an array of "
                           "arrays of token ids";
  if (p.is_string()) {
    prompts->push_back({false, p.get<std::string>(), {}});
    return true;
  }
  if (!p.is_array()) return r->Fail("prompt", kType);
  if (p.empty()) return r->Fail("prompt", "'prompt' must not be empty");
  if (p.front().is_number_integer()) {
    PromptInput in;
    in.is_tokens = true;
    if (!TokenArray(p, "prompt", &in.tokens, r)) return false;
    prompts->push_back(std::move(in));
    return true;
  }
  if (static_cast<int>(p.size()) > kMaxBatchPrompts) {
    return r->Fail("prompt", fmt::format("at most {} prompts per request", kMaxBatchPrompts));
  }
  for (const json& e : p) {
    if (e.is_string()) {
      prompts->push_back({false, e.get<std::string>(), {}});
    } else if (e.is_array()) {
      PromptInput in;
      in.is_tokens = true;
      if (!TokenArray(e, "prompt", &in.tokens, r)) return false;
      prompts->push_back(std::move(in));
    } else {
      return r->Fail("prompt", kType);
    }
  }
  return true;
}

// Chat messages, or (`input_items`) the Responses API's input items: message items
// ({"type": "message"} or no type) whose content parts are input_text / output_text.
bool ParseMessages(const json& m, std::vector<ChatMessage>* messages, FieldReader* r,
                   const std::string& field = "messages", bool input_items = false) {
  if (!m.is_array()) return r->Fail(field, fmt::format("'{}' must be an array", field));
  if (m.empty()) return r->Fail(field, fmt::format("'{}' must not be empty", field));
  for (size_t i = 0; i < m.size(); ++i) {
    const json& msg = m[i];
    const std::string where = fmt::format("{}[{}]", field, i);
    if (!msg.is_object()) return r->Fail(where, fmt::format("'{}' must be an object", where));
    if (auto item = msg.find("type"); input_items && item != msg.end() && *item != "message") {
      return r->Fail(where + ".type", fmt::format("only 'message' input items are supported (got {})", item->dump()));
    }
    ChatMessage out;
    auto role = msg.find("role");
    if (role == msg.end() || !role->is_string()) {
      return r->Fail(where + ".role", fmt::format("'{}.role' must be a string", where));
    }
    out.role = role->get<std::string>();
    if (out.role == "developer") out.role = "system";
    if (out.role != "system" && out.role != "user" && out.role != "assistant" && (input_items || out.role != "tool")) {
      return r->Fail(where + ".role", fmt::format("'{}.role' must be one of system, user, assistant{} (got '{}')",
                                                  where, input_items ? "" : ", tool", out.role));
    }
    auto content = msg.find("content");
    if (content == msg.end() || content->is_null()) {
      out.content.clear();  // e.g. an assistant turn that only called tools
    } else if (content->is_string()) {
      out.content = content->get<std::string>();
    } else if (content->is_array()) {
      for (size_t k = 0; k < content->size(); ++k) {
        const json& part = (*content)[k];
        const std::string pw = fmt::format("{}.content[{}]", where, k);
        auto type = part.is_object() ? part.find("type") : part.end();
        if (!part.is_object() || type == part.end() || !type->is_string()) {
          return r->Fail(pw, fmt::format("'{}' must be an object with a 'type'", pw));
        }
        const std::string t = type->get<std::string>();
        if (!(t == "text" || (input_items && (t == "input_text" || t == "output_text")))) {
          return r->Fail(pw + ".type", fmt::format("only {} content parts are supported (got '{}')",
                                                   input_items ? "'input_text' and 'output_text'" : "'text'", t));
        }
        auto text = part.find("text");
        if (text == part.end() || !text->is_string()) {
          return r->Fail(pw + ".text", fmt::format("'{}.text' must be a string", pw));
        }
        out.content += text->get<std::string>();
      }
    } else {
      return r->Fail(where + ".content", fmt::format("'{}.content' must be a string or an array of parts", where));
    }
    for (const char* field : {"reasoning_content", "reasoning"}) {  // llama.cpp's and DeepSeek's name; vLLM's
      auto reasoning = msg.find(field);
      if (reasoning == msg.end() || reasoning->is_null()) continue;
      if (!reasoning->is_string() || out.role != "assistant") {
        return r->Fail(where + "." + field, fmt::format("'{}.{}' must be a string on an assistant message", where, field));
      }
      out.reasoning_content = reasoning->get<std::string>();
    }
    if (ApiError e; !input_items && !ParseMessageToolFields(msg, where, &out, &e)) {
      return r->Fail(e.param, e.status.message());
    }
    messages->push_back(std::move(out));
  }
  NameToolResults(messages);
  return true;
}

// chat_template_kwargs, add_generation_prompt and continue_final_message (vLLM's extensions).
void ParseTemplateFields(FieldReader* r, GenerationInput* q) {
  if (const json* kwargs = r->Get("chat_template_kwargs"); kwargs != nullptr && !kwargs->is_null()) {
    if (!kwargs->is_object()) {
      r->Fail("chat_template_kwargs", "'chat_template_kwargs' must be an object");
      return;
    }
    q->chat_extras.variables_json = kwargs->dump();
  }
  r->Bool("add_generation_prompt", &q->add_generation_prompt);
  r->Bool("continue_final_message", &q->chat_extras.continue_final_message);
  if (q->chat_extras.continue_final_message && q->add_generation_prompt) {
    // vLLM's default add_generation_prompt is true; a client continuing a message means false.
    if (r->Get("add_generation_prompt") != nullptr) {
      r->Fail("continue_final_message", "'continue_final_message' and 'add_generation_prompt' cannot both be true");
      return;
    }
    q->add_generation_prompt = false;
  }
}

bool ParseStop(const json& s, std::vector<std::string>* stop, FieldReader* r) {
  if (s.is_string()) {
    stop->push_back(s.get<std::string>());
    return true;
  }
  if (!s.is_array()) return r->Fail("stop", "'stop' must be a string or an array of strings");
  for (const json& e : s) {
    if (!e.is_string()) return r->Fail("stop", "'stop' must be a string or an array of strings");
    stop->push_back(e.get<std::string>());
  }
  return true;
}

// Parameters kvserve does not implement: refused with 400 naming them, never ignored.
void RefuseUnsupported(FieldReader* r) {
  if (const json* v = r->Get("best_of"); v != nullptr && !(v->is_number_integer() && v->get<int64_t>() <= 1)) {
    r->Fail("best_of", "'best_of' > 1 is not supported (use n, or sample several times)");
  }
  if (const json* v = r->Get("suffix"); v != nullptr && !(v->is_string() && v->get<std::string>().empty())) {
    r->Fail("suffix", "'suffix' (insertion) is not supported");
  }
  if (const json* v = r->Get("functions"); v != nullptr && !(v->is_array() && v->empty())) {
    r->Fail("functions", "'functions' (deprecated) is not supported: send 'tools'");
  }
  if (r->Get("function_call") != nullptr) r->Fail("function_call", "'function_call' (deprecated) is not supported: send 'tool_choice'");
}

// Tools where the API has none here (completions, and the Responses API for now).
void RefuseTools(FieldReader* r, const char* where) {
  if (const json* v = r->Get("tools"); v != nullptr && !(v->is_array() && v->empty())) {
    r->Fail("tools", fmt::format("'tools' are not supported {} (they work with /v1/chat/completions)", where));
  }
  if (const json* v = r->Get("tool_choice"); v != nullptr && *v != "none" && *v != "auto") {
    r->Fail("tool_choice", fmt::format("'tool_choice' is not supported {}", where));
  }
}

// Structured outputs, as the clients of three servers send them: OpenAI's response_format
// (text, json_object, json_schema), vLLM's structured_outputs object and its older guided_*
// fields, llama.cpp's json_schema and grammar. At most one of them (its size is checked by the
// RequestBuilder, for both front ends); the engine compiles it
// (an unsupported keyword is a 400 from Submit, naming it and its JSON pointer).
bool ParseStructured(FieldReader* r, StructuredOutputSpec* out, std::string* param_out) {
  using Kind = StructuredOutputSpec::Kind;
  std::string first;
  auto set = [&](const std::string& param, Kind kind, std::string text, std::vector<std::string> choices = {}) {
    if (!first.empty()) {
      return r->Fail(param, fmt::format("'{}' and '{}' both constrain the output; send one of them", first, param));
    }
    first = param;
    *param_out = param.substr(0, param.find('.')) == "response_format" ? "response_format" : param;
    out->kind = kind;
    out->text = std::move(text);
    out->choices = std::move(choices);
    return true;
  };
  // A schema as an object (or a boolean), or as its text (vLLM accepts both).
  auto schema = [&](const std::string& param, const json& v) {
    if (v.is_string()) return set(param, Kind::kJsonSchema, v.get<std::string>());
    if (!v.is_object() && !v.is_boolean()) return r->Fail(param, fmt::format("'{}' must be a JSON Schema", param));
    return set(param, Kind::kJsonSchema, v.dump());
  };
  auto text = [&](const std::string& param, const json& v, Kind kind) {
    if (!v.is_string()) return r->Fail(param, fmt::format("'{}' must be a string", param));
    return set(param, kind, v.get<std::string>());
  };
  auto choice = [&](const std::string& param, const json& v) {
    std::vector<std::string> choices;
    for (const json& c : v.is_array() ? v : json::array()) {
      if (!c.is_string()) break;
      choices.push_back(c.get<std::string>());
    }
    if (!v.is_array() || v.empty() || choices.size() != v.size()) {
      return r->Fail(param, fmt::format("'{}' must be a non-empty array of strings", param));
    }
    return set(param, Kind::kChoice, "", std::move(choices));
  };
  if (const json* v = r->Get("response_format")) {
    const json* type = v->is_object() && v->contains("type") ? &(*v)["type"] : nullptr;
    if (type == nullptr || !type->is_string()) return r->Fail("response_format", "'response_format' must be an object with a 'type'");
    if (*type == "json_object") {
      set("response_format", Kind::kJsonObject, "");
    } else if (*type == "json_schema") {
      const auto js = v->find("json_schema");
      if (js == v->end() || !js->is_object() || !js->contains("schema")) {
        return r->Fail("response_format.json_schema", "'response_format.json_schema' must be an object with a 'schema'");
      }
      schema("response_format.json_schema.schema", (*js)["schema"]);
    } else if (*type != "text") {
      return r->Fail("response_format.type", "'response_format.type' must be text, json_object or json_schema");
    }
  }
  if (const json* v = r->Get("structured_outputs")) {
    if (!v->is_object()) return r->Fail("structured_outputs", "'structured_outputs' must be an object");
    for (const auto& [key, value] : v->items()) {
      if (value.is_null()) continue;
      const std::string param = "structured_outputs." + key;
      if (key == "json") {
        schema(param, value);
      } else if (key == "regex") {
        text(param, value, Kind::kRegex);
      } else if (key == "choice") {
        choice(param, value);
      } else if (key == "grammar") {
        text(param, value, Kind::kGrammar);
      } else if (key == "json_object") {
        if (value == true) set(param, Kind::kJsonObject, "");
      } else {
        return r->Fail(param, fmt::format("'{}' is not supported (json, regex, choice, grammar, json_object)", param));
      }
    }
  }
  if (const json* v = r->Get("guided_json")) schema("guided_json", *v);
  if (const json* v = r->Get("guided_regex")) text("guided_regex", *v, Kind::kRegex);
  if (const json* v = r->Get("guided_choice")) choice("guided_choice", *v);
  if (const json* v = r->Get("guided_grammar")) text("guided_grammar", *v, Kind::kGrammar);
  if (const json* v = r->Get("json_schema")) schema("json_schema", *v);  // llama.cpp
  if (const json* v = r->Get("grammar")) text("grammar", *v, Kind::kGrammar);
  return r->ok();
}

bool ParseLogitBias(const json& b, std::vector<std::pair<int32_t, float>>* bias, FieldReader* r) {
  if (!b.is_object()) return r->Fail("logit_bias", "'logit_bias' must be an object of token id -> bias");
  for (auto it = b.begin(); it != b.end(); ++it) {
    const std::string& key = it.key();
    int64_t id = -1;
    bool digits = !key.empty() && key.size() <= 10;
    for (char c : key) digits = digits && c >= '0' && c <= '9';
    if (digits) id = std::stoll(key);
    if (!digits || id > std::numeric_limits<int32_t>::max()) {
      return r->Fail("logit_bias", fmt::format("'logit_bias' keys must be token ids (got '{}')", key));
    }
    if (!it.value().is_number()) return r->Fail("logit_bias", "'logit_bias' values must be numbers");
    bias->emplace_back(static_cast<int32_t>(id), it.value().get<float>());
  }
  return true;
}

}  // namespace

bool ParseOpenAiRequest(std::string_view body, ApiKind kind, OpenAiRequest* out, ApiError* error) {
  json j;
  if (!ParseObject(body, &j, error)) return false;
  FieldReader r(j, error);
  OpenAiRequest& q = *out;
  q.kind = kind;
  SamplingParams& s = q.sampling;

  r.String("model", &q.model);  // absent: the served model
  RefuseUnsupported(&r);
  ParseStructured(&r, &q.structured, &q.structured_param);
  if (kind == ApiKind::kCompletion) {
    RefuseTools(&r, "by /v1/completions");
    const json* p = r.Get("prompt");
    if (p == nullptr) {
      r.Fail("prompt", "you must provide a prompt");
    } else {
      ParsePrompt(*p, &q.prompts, &r);
    }
    r.Bool("echo", &q.echo);
    int logprobs = 0;
    if (r.Int("logprobs", &logprobs, 0, SamplingParams::kMaxLogprobs)) {
      q.logprobs = true;
      s.logprobs = logprobs;
    }
  } else {
    const json* m = r.Get("messages");
    if (m == nullptr) {
      r.Fail("messages", "you must provide messages");
    } else {
      ParseMessages(*m, &q.messages, &r);
    }
    if (ApiError e; r.ok() && !ParseToolFields(j, &q.tools, &e)) r.Fail(e.param, e.status.message());
    ParseTemplateFields(&r, &q);
    r.Bool("logprobs", &q.logprobs);
    int top = 0;
    const bool has_top = r.Int("top_logprobs", &top, 0, SamplingParams::kMaxLogprobs);
    if (has_top && !q.logprobs && r.ok()) r.Fail("top_logprobs", "'top_logprobs' requires 'logprobs': true");
    if (q.logprobs) s.logprobs = top;
  }

  int max_tokens = 0;
  if (r.Int("max_tokens", &max_tokens, 0)) q.max_tokens = max_tokens;
  if (kind == ApiKind::kChat && r.Int("max_completion_tokens", &max_tokens, 0)) q.max_tokens = max_tokens;
  r.Float("temperature", &s.temperature);
  r.Float("top_p", &s.top_p);
  r.Int("top_k", &s.top_k, -1);
  r.Float("min_p", &s.min_p);
  r.Float("presence_penalty", &s.presence_penalty);
  r.Float("frequency_penalty", &s.frequency_penalty);
  r.Float("repetition_penalty", &s.repetition_penalty);
  r.Int("min_tokens", &s.min_tokens, 0);
  r.Int("n", &q.n, 1, kMaxChoices);
  int64_t seed = 0;
  if (r.Int("seed", &seed, std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max())) {
    s.seed = static_cast<uint64_t>(seed);
  }
  if (const json* stop = r.Get("stop")) ParseStop(*stop, &s.stop, &r);
  if (const json* ids = r.Get("stop_token_ids")) {
    if (!ids->is_array()) {
      r.Fail("stop_token_ids", "'stop_token_ids' must be an array of token ids");
    } else {
      TokenArray(*ids, "stop_token_ids", &s.stop_token_ids, &r);
    }
  }
  if (const json* bias = r.Get("logit_bias")) ParseLogitBias(*bias, &s.logit_bias, &r);
  r.Bool("ignore_eos", &s.ignore_eos);
  r.Bool("stream", &q.stream);
  if (const json* so = r.Get("stream_options")) {
    if (!so->is_object()) {
      r.Fail("stream_options", "'stream_options' must be an object");
    } else {
      auto iu = so->find("include_usage");
      if (iu != so->end() && !iu->is_null()) {
        if (!iu->is_boolean()) {
          r.Fail("stream_options.include_usage", "'stream_options.include_usage' must be a boolean");
        } else {
          q.include_usage = iu->get<bool>();
        }
      }
    }
  }
  r.String("user", &q.user);
  r.String("session_id", &q.session_id);
  r.String("cache_salt", &q.cache_salt);
  r.Int("priority", &q.priority);
  return r.ok();
}

bool ParseResponsesRequest(std::string_view body, ResponsesRequest* out, ApiError* error) {
  json j;
  if (!ParseObject(body, &j, error)) return false;
  FieldReader r(j, error);
  OpenAiRequest& q = out->generation;
  q.kind = ApiKind::kChat;
  r.String("model", &q.model);
  RefuseUnsupported(&r);
  RefuseTools(&r, "by the Responses API yet");
  const json* input = r.Get("input");
  if (input == nullptr) {
    r.Fail("input", "you must provide 'input'");
  } else if (input->is_string()) {
    q.messages.push_back({"user", input->get<std::string>()});
  } else {
    ParseMessages(*input, &q.messages, &r, "input", /*input_items=*/true);
  }
  if (const json* text = r.Get("text")) {
    // The Responses API's structured outputs: {"type": "json_schema", "name", "schema",
    // "strict"} (flat, unlike chat's response_format) or {"type": "json_object"}.
    const json* format = text->is_object() && text->contains("format") ? &(*text)["format"] : nullptr;
    const std::string type = format != nullptr && format->is_object() ? format->value("type", "") : "";
    if (!text->is_object() || (format != nullptr && !format->is_null() && type != "text" && type != "json_object" &&
                               !(type == "json_schema" && format->contains("schema")))) {
      r.Fail("text.format", "'text.format' must be {\"type\": \"text\"}, {\"type\": \"json_object\"} or "
                            "{\"type\": \"json_schema\", \"schema\": ...}");
    } else if (type == "json_object" || type == "json_schema") {
      q.structured.kind = type == "json_schema" ? StructuredOutputSpec::Kind::kJsonSchema
                                               : StructuredOutputSpec::Kind::kJsonObject;
      q.structured.text = type == "json_schema" ? (*format)["schema"].dump() : "";
      q.structured_param = "text.format";
    }
  }
  std::string instructions;
  if (r.Get("instructions") != nullptr) {
    r.String("instructions", &instructions);
    out->instructions = instructions;
  }
  r.String("previous_response_id", &out->previous_response_id);
  r.Bool("store", &out->store);
  int max_tokens = 0;
  if (r.Int("max_output_tokens", &max_tokens, 1)) q.max_tokens = max_tokens;
  r.Float("temperature", &q.sampling.temperature);
  r.Float("top_p", &q.sampling.top_p);
  r.Bool("stream", &q.stream);
  r.String("user", &q.user);
  if (const json* metadata = r.Get("metadata"); metadata != nullptr && !metadata->is_object()) {
    r.Fail("metadata", "'metadata' must be an object");
  }
  return r.ok();
}

bool ParseTokenizeRequest(std::string_view body, TokenizeRequest* out, ApiError* error) {
  json j;
  if (!ParseObject(body, &j, error)) return false;
  FieldReader r(j, error);
  r.String("model", &out->model);
  if (const json* m = r.Get("messages")) {
    ParseMessages(*m, &out->messages, &r);
    GenerationInput chat;
    ParseTemplateFields(&r, &chat);
    out->add_generation_prompt = chat.add_generation_prompt;
    out->chat_extras = std::move(chat.chat_extras);
    return r.ok();
  }
  const char* field = r.Get("prompt") != nullptr ? "prompt" : "text";
  const json* text = r.Get(field);
  if (text == nullptr) {
    *error = InvalidField("prompt", "you must provide 'prompt' (or 'text')");
    return false;
  }
  r.String(field, &out->text);
  r.Bool("add_special_tokens", &out->add_special_tokens);
  return r.ok();
}

bool ParseDetokenizeRequest(std::string_view body, std::vector<int32_t>* tokens, ApiError* error) {
  json j;
  if (!ParseObject(body, &j, error)) return false;
  FieldReader r(j, error);
  const json* t = r.Get("tokens");
  if (t == nullptr || !t->is_array()) {
    *error = InvalidField("tokens", "'tokens' must be an array of token ids");
    return false;
  }
  TokenArray(*t, "tokens", tokens, &r);
  return r.ok();
}

}  // namespace kvserve
