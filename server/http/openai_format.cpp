// OpenAI response encoding with nlohmann::json (see openai_format.h for the shapes).
#include "server/http/openai_format.h"

#include <cmath>
#include <nlohmann/json.hpp>

#include "server/api/error_mapping.h"
#include "server/http/openai_tools.h"

namespace kvserve {
namespace {

// Members keep the order they were added in, as OpenAI's responses have them.
using json = nlohmann::ordered_json;


std::string Sse(const json& j) { return "data: " + DumpJson(j) + "\n\n"; }

json Head(const ResponseMeta& meta, bool chunk) {
  json j;
  j["id"] = meta.id;
  if (meta.kind == ApiKind::kChat) {
    j["object"] = chunk ? "chat.completion.chunk" : "chat.completion";
  } else {
    j["object"] = "text_completion";
  }
  j["created"] = meta.created;
  j["model"] = meta.model;
  return j;
}

json Usage(const ResponseMeta& meta, const RequestUsage& u, int reasoning_tokens) {
  json j{{"prompt_tokens", u.prompt_tokens},
         {"completion_tokens", u.completion_tokens},
         {"total_tokens", u.prompt_tokens + u.completion_tokens},
         {"prompt_tokens_details", {{"cached_tokens", u.cached_prompt_tokens}}}};
  if (meta.reasoning != ReasoningFormat::kNone) j["completion_tokens_details"] = {{"reasoning_tokens", reasoning_tokens}};
  return j;
}

json Bytes(const std::string& piece) {
  json b = json::array();
  for (unsigned char c : piece) b.push_back(static_cast<int>(c));
  return b;
}

// Completions: {"tokens","token_logprobs","top_logprobs","text_offset"}.
json CompletionLogprobs(std::span<const TokenLogprob> lps, int text_offset, const Tokenizer& tok) {
  json tokens = json::array(), token_logprobs = json::array(), top = json::array(), offsets = json::array();
  for (const TokenLogprob& lp : lps) {
    const std::string piece = tok.TokenToPiece(lp.id, /*render_special=*/true);
    tokens.push_back(piece);
    if (std::isnan(lp.logprob)) {  // the first prompt token (echo): nothing to condition on
      token_logprobs.push_back(nullptr);
      top.push_back(nullptr);
    } else {
      token_logprobs.push_back(lp.logprob);
      json alternatives = json::object();
      for (const auto& [id, logprob] : lp.top) alternatives[tok.TokenToPiece(id, true)] = logprob;
      top.push_back(std::move(alternatives));
    }
    offsets.push_back(text_offset);
    text_offset += static_cast<int>(piece.size());
  }
  return json{{"tokens", std::move(tokens)},
              {"token_logprobs", std::move(token_logprobs)},
              {"top_logprobs", std::move(top)},
              {"text_offset", std::move(offsets)}};
}

// Chat: {"content":[{"token","logprob","bytes","top_logprobs":[...]}]}.
json ChatLogprobs(std::span<const TokenLogprob> lps, const Tokenizer& tok) {
  json content = json::array();
  for (const TokenLogprob& lp : lps) {
    const std::string piece = tok.TokenToPiece(lp.id, true);
    json top = json::array();
    for (const auto& [id, logprob] : lp.top) {
      const std::string alt = tok.TokenToPiece(id, true);
      top.push_back({{"token", alt}, {"logprob", logprob}, {"bytes", Bytes(alt)}});
    }
    content.push_back({{"token", piece}, {"logprob", lp.logprob}, {"bytes", Bytes(piece)}, {"top_logprobs", top}});
  }
  return json{{"content", std::move(content)}};
}

json FinishJson(const std::optional<FinishReason>& f, bool called_tools = false) {
  if (f && *f == FinishReason::kStop && called_tools) return "tool_calls";
  return f ? json(FinishReasonString(*f)) : json(nullptr);
}

HttpReply JsonReply(const json& j, int status = 200) {
  HttpReply r;
  r.status = status;
  r.body = DumpJson(j);
  return r;
}

json ModelJson(const std::string& model_id, int64_t created, int max_model_len) {
  return json{{"id", model_id}, {"object", "model"}, {"created", created}, {"owned_by", "kvserve"},
              {"max_model_len", max_model_len}};
}

json ErrorJson(const ApiError& e) {
  json inner;
  inner["message"] = e.status.message();
  inner["type"] = OpenAiErrorTypeFor(e.status.code());
  inner["param"] = e.param.empty() ? json(nullptr) : json(e.param);
  inner["code"] = e.code.empty() ? json(nullptr) : json(e.code);
  return json{{"error", std::move(inner)}};
}

}  // namespace

std::string DumpJson(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

std::string FinishReasonString(FinishReason reason) { return std::string(FinishReasonName(reason)); }

std::string FormatResponse(const ResponseMeta& meta, std::span<const ChoiceResult> choices,
                           const RequestUsage& usage, const Tokenizer& tok) {
  json j = Head(meta, false);
  json out = json::array();
  for (const ChoiceResult& c : choices) {
    json choice;
    choice["index"] = c.index;
    if (meta.kind == ApiKind::kChat) {
      choice["message"] = {{"role", "assistant"}, {"content", c.text}};
      if (!c.reasoning.empty()) {  // llama.cpp's and DeepSeek's field, and vLLM's
        choice["message"]["reasoning_content"] = c.reasoning;
        choice["message"]["reasoning"] = c.reasoning;
      }
      if (!c.tool_calls.empty()) {
        if (c.text.empty()) choice["message"]["content"] = nullptr;
        choice["message"]["tool_calls"] = ToolCallsJson(c.tool_calls);
      }
      choice["logprobs"] = meta.logprobs ? ChatLogprobs(c.logprobs, tok) : json(nullptr);
    } else {
      choice["text"] = c.text;
      choice["logprobs"] = meta.logprobs ? CompletionLogprobs(c.logprobs, c.text_offset_base, tok) : json(nullptr);
    }
    choice["finish_reason"] = FinishJson(c.finish, !c.tool_calls.empty());
    out.push_back(std::move(choice));
  }
  j["choices"] = std::move(out);
  int reasoning_tokens = 0;
  for (const ChoiceResult& c : choices) reasoning_tokens += c.reasoning_tokens;
  j["usage"] = Usage(meta, usage, reasoning_tokens);
  return DumpJson(j);
}

std::string FormatChunkEvent(const ResponseMeta& meta, const ChunkChoice& c, const Tokenizer& tok) {
  json j = Head(meta, true);
  json choice;
  choice["index"] = c.index;
  if (meta.kind == ApiKind::kChat) {
    json delta = json::object();
    if (c.first) delta["role"] = "assistant";
    if (c.first || !c.text.empty()) delta["content"] = c.text;
    if (!c.reasoning.empty()) {
      delta["reasoning_content"] = c.reasoning;
      delta["reasoning"] = c.reasoning;
    }
    if (!c.tool_calls.empty()) delta["tool_calls"] = ToolCallDeltasJson(c.tool_calls);
    choice["delta"] = std::move(delta);
    choice["logprobs"] = meta.logprobs && !c.logprobs.empty() ? ChatLogprobs(c.logprobs, tok) : json(nullptr);
  } else {
    choice["text"] = c.text;
    choice["logprobs"] = meta.logprobs ? CompletionLogprobs(c.logprobs, c.text_offset, tok) : json(nullptr);
  }
  choice["finish_reason"] = FinishJson(c.finish, c.called_tools);
  j["choices"] = json::array({std::move(choice)});
  if (meta.include_usage) j["usage"] = nullptr;
  return Sse(j);
}

std::string FormatUsageEvent(const ResponseMeta& meta, const RequestUsage& usage, int reasoning_tokens) {
  json j = Head(meta, true);
  j["choices"] = json::array();
  j["usage"] = Usage(meta, usage, reasoning_tokens);
  return Sse(j);
}

std::string FormatErrorEvent(const ApiError& error) { return Sse(ErrorJson(error)); }

std::string FormatErrorBody(const ApiError& error) { return DumpJson(ErrorJson(error)); }

HttpReply ErrorReply(const ApiError& error) {
  HttpReply r = JsonReply(ErrorJson(error), error.HttpStatus());
  if (r.status == 429 || r.status == 503) r.headers.emplace_back("Retry-After", "1");
  return r;
}

HttpReply ModelsReply(const std::string& model_id, int64_t created, int max_model_len) {
  return JsonReply(json{{"object", "list"}, {"data", json::array({ModelJson(model_id, created, max_model_len)})}});
}

HttpReply ModelReply(const std::string& model_id, int64_t created, int max_model_len) {
  return JsonReply(ModelJson(model_id, created, max_model_len));
}

HttpReply TokenizeReply(std::span<const int32_t> tokens, int max_model_len) {
  return JsonReply(json{{"tokens", std::vector<int32_t>(tokens.begin(), tokens.end())},
                        {"count", tokens.size()},
                        {"max_model_len", max_model_len}});
}

HttpReply DetokenizeReply(const std::string& text) { return JsonReply(json{{"prompt", text}}); }

HttpReply StatusReply(int status, const std::string& state) { return JsonReply(json{{"status", state}}, status); }

HttpReply DebugCacheReply(const Status& integrity, const KvCacheStats& stats) {
  json blocks{{"total", stats.total_blocks}, {"used", stats.used_blocks}, {"free", stats.free_blocks},
              {"cached", stats.cached_blocks}, {"pinned", stats.pinned_blocks}};
  return JsonReply(json{{"integrity", integrity.ok() ? "ok" : "failed"},
                        {"message", integrity.message()},
                        {"blocks", std::move(blocks)},
                        {"tokens_stored", stats.tokens_stored}},
                   integrity.ok() ? 200 : 500);
}

}  // namespace kvserve
