// RequestBuilder: the one place where a generation request from any front end (the OpenAI
// HTTP API, gRPC) becomes engine requests. Each front end decodes its wire format into a
// GenerationInput and calls Submit; everything a request means beyond its wire format is
// decided here, in this order, so the two front ends cannot drift apart:
//
//   readiness       loading or draining: UNAVAILABLE
//   model           "" means the served model (as vLLM and llama.cpp accept); another id:
//                   NOT_FOUND (code model_not_found)
//   session         the body's session_id merged with the X-Session-Id header / x-session-id
//                   metadata (both set and different: INVALID_ARGUMENT); one prompt only
//   tokens          completions: text (BOS added as the vocabulary asks) or token ids
//                   checked against the vocabulary; chat: the model's template, where only
//                   the template's markup becomes control tokens (content is text), with the
//                   tools in the family's format unless tool_choice is none
//   constraint      the client's structured output, or the tool calls' (ToolCallSpec; not
//                   both), at most kMaxStructuredBytes
//   max_tokens      as given; else completions: default_max_tokens, chat: the rest of the
//                   context (at least 1)
//   echo            completions: the prompt text is prepended to each choice; with logprobs
//                   the prompt tokens' logprobs are computed too (sampling.prompt_logprobs)
//   tenant          the caller's tenant (its API key's identity) owns its chat sessions (one
//                   namespace per tenant, in the engine) and is prefixed, length-delimited,
//                   to the prefix-cache salt: no client-chosen salt reaches another tenant's
//                   cache domain
//   submit          Engine::Submit per prompt; a refusal aborts the ones already accepted
//   accounting      every refused request counts once in ServerContext::requests_rejected
//
// Errors are ApiErrors (the Status, mapped to HTTP and gRPC codes by error_mapping, plus the
// OpenAI `param` and `code`). Thread-safe: front ends call it from any thread.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "engine/tokenizer/chat_template.h"
#include "server/api/reasoning.h"
#include "server/api/tool_calls.h"
#include "server/api/error_mapping.h"
#include "server/api/server_context.h"

namespace kvserve {

enum class ApiKind { kCompletion, kChat };

// One prompt of a completions request: text, or token ids given by the client.
struct PromptInput {
  bool is_tokens = false;
  std::string text;
  std::vector<int32_t> tokens;
};

// A generation request as a front end decoded it.
struct GenerationInput {
  ApiKind kind = ApiKind::kCompletion;
  std::string model;                  // "" = the served model
  std::vector<PromptInput> prompts;   // completions: one engine request per prompt
  std::vector<ChatMessage> messages;  // chat
  ChatExtras chat_extras;             // chat: chat_template_kwargs, continue_final_message
  bool add_generation_prompt = true;  // chat: the template's assistant header ends the prompt
  SamplingParams sampling;            // max_tokens is decided by the builder
  std::optional<int> max_tokens;      // as the client gave it
  int n = 1;
  bool echo = false;                  // completions: prepend the prompt to the text
  std::string session_id;             // server-side chat session (extension)
  bool session_if_free = false;       // see GenerationRequest::session_if_free
  std::string cache_salt;             // prefix-cache isolation within the tenant (extension)
  int priority = 0;                   // lower runs first (extension)
  ToolRequest tools;                  // chat: the tools the model may call
  StructuredOutputSpec structured;    // the output's constraint (response_format and kin)
  std::string structured_param = "response_format";  // the field it came in, for errors
};

// A structured output's text (schema, regex, grammar, choices together) is refused past this
// size (INVALID_ARGUMENT naming the field it came in).
inline constexpr size_t kMaxStructuredBytes = 256 * 1024;

// Who sent it, as the front end authenticated it.
struct Caller {
  std::string tenant;          // ApiKeyAuth's identity; "" with authentication off
  std::string session_header;  // X-Session-Id / x-session-id, or ""
};

// The accepted engine requests of one GenerationInput (one per prompt, in order).
struct SubmittedRequests {
  std::vector<std::shared_ptr<RequestStream>> streams;
  std::vector<std::string> echo;   // per prompt: text prepended to each choice ("" without echo)
  std::vector<int> prompt_lengths; // per prompt, in tokens
  // Chat: how the replies carry reasoning (server/api/reasoning.h), and whether the prompt
  // already opened a <think> tag.
  ReasoningFormat reasoning = ReasoningFormat::kNone;
  bool reasoning_open = false;
};

// A chat prompt as the model sees it.
struct RenderedPrompt {
  std::string text;
  std::vector<int32_t> tokens;
};

class RequestBuilder {
 public:
  // REQUIRES: ctx outlives the builder; ctx->engine is set before the first call.
  explicit RequestBuilder(ServerContext* ctx);

  // Builds and submits. On failure fills *error, counts the request as rejected and returns
  // false (nothing stays submitted).
  [[nodiscard]] bool Submit(const GenerationInput& input, const Caller& caller, SubmittedRequests* out,
                            ApiError* error);

  // The engine request that pins `input`'s prompt (Engine::PinPrefix): one prompt (text or
  // ids), or chat messages rendered without the generation prompt (so that a later
  // conversation starting with them begins with the same tokens); salt and tenant as Submit.
  [[nodiscard]] bool BuildPin(const GenerationInput& input, const Caller& caller, GenerationRequest* out,
                              ApiError* error);

  // The chat template's rendering and tokens (tokenize endpoints). INVALID_ARGUMENT for
  // messages the template refuses.
  [[nodiscard]] StatusOr<RenderedPrompt> RenderChat(const std::vector<ChatMessage>& messages,
                                                    bool add_generation_prompt, std::span<const ChatTool> tools = {},
                                                    const ChatExtras& extras = {});

  // OK when `model` is "" or the served model's id, else NOT_FOUND.
  [[nodiscard]] Status CheckModel(const std::string& model) const;

  // The context length requests are held to (EngineConfig::max_model_len or the model's).
  int max_model_len() const;
  const ChatTemplate& chat_template();

  // The prefix-cache salt of `tenant`'s requests with client salt `salt`.
  static std::string TenantCacheSalt(const std::string& tenant, const std::string& salt);

 private:
  // Everything up to Engine::Submit.
  [[nodiscard]] bool Build(const GenerationInput& input, const Caller& caller,
                           std::vector<GenerationRequest>* requests, SubmittedRequests* out, ApiError* error);
  // One engine request per prompt (token ids only; the rest is filled by Build).
  [[nodiscard]] bool Tokenize(const GenerationInput& input, std::vector<std::vector<int32_t>>* prompts,
                              SubmittedRequests* out, ApiError* error);

  ServerContext* const ctx_;
  std::once_flag template_once_;
  std::optional<ChatTemplate> template_;
};

}  // namespace kvserve
