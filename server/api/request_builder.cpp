// RequestBuilder: front-end input -> engine requests (see request_builder.h for the order).
#include "server/api/request_builder.h"

#include <fmt/format.h>

#include <algorithm>

#include "engine/grammar/json_schema.h"
#include "server/api/session_header.h"

namespace kvserve {
namespace {

// OpenAI's error codes for the engine's refusals.
std::string CodeFor(StatusCode code) {
  switch (code) {
    case StatusCode::kOutOfRange: return "context_length_exceeded";
    case StatusCode::kResourceExhausted: return "rate_limit_exceeded";
    case StatusCode::kUnavailable: return "service_unavailable";
    default: return "";
  }
}

// The field a request's output constraint came in, for errors.
std::string StructuredParam(const GenerationInput& in) { return in.tools.active() ? "tools" : in.structured_param; }

}  // namespace

RequestBuilder::RequestBuilder(ServerContext* ctx) : ctx_(ctx) {}

int RequestBuilder::max_model_len() const {
  const Engine& engine = *ctx_->engine;
  const int configured = engine.config().max_model_len;
  return configured > 0 ? configured : engine.model().config().context_length;
}

const ChatTemplate& RequestBuilder::chat_template() {
  std::call_once(template_once_, [this] {
    const Tokenizer& tok = ctx_->engine->model().tokenizer();
    const std::string& text = ctx_->options.chat_template.empty() ? tok.vocab().chat_template
                                                                  : ctx_->options.chat_template;
    template_ = ChatTemplate::Detect(text, tok);
  });
  return *template_;
}

Status RequestBuilder::CheckModel(const std::string& model) const {
  if (model.empty() || model == ctx_->model_id) return OkStatus();
  return NotFoundError(fmt::format("the model '{}' does not exist (this server serves '{}')", model, ctx_->model_id));
}

std::string RequestBuilder::TenantCacheSalt(const std::string& tenant, const std::string& salt) {
  if (tenant.empty()) return salt;
  return fmt::format("{}:{}/{}", tenant.size(), tenant, salt);
}

StatusOr<RenderedPrompt> RequestBuilder::RenderChat(const std::vector<ChatMessage>& messages,
                                                    bool add_generation_prompt, std::span<const ChatTool> tools,
                                                    const ChatExtras& extras) {
  const ChatTemplate& tmpl = chat_template();
  ASSIGN_OR_RETURN(RenderedChat rendered, tmpl.RenderChat(messages, add_generation_prompt, tools, extras));
  RenderedPrompt out;
  out.tokens = tmpl.Encode(rendered, ctx_->engine->model().tokenizer());
  out.text = std::move(rendered.text);
  return out;
}

bool RequestBuilder::Tokenize(const GenerationInput& in, std::vector<std::vector<int32_t>>* prompts,
                              SubmittedRequests* out, ApiError* error) {
  std::vector<std::string>* echo = &out->echo;
  const Tokenizer& tok = ctx_->engine->model().tokenizer();
  if (in.kind == ApiKind::kChat) {
    // Shown under tool_choice none too (as vLLM does), so the turns of a tool loop share their
    // prefix; only the constraint and the parsing need a choice other than none.
    std::vector<ChatTool> tools;
    for (const ToolDefinition& t : in.tools.tools) tools.push_back(t.chat);
    StatusOr<RenderedPrompt> rendered = RenderChat(in.messages, in.add_generation_prompt, tools, in.chat_extras);
    if (!rendered.ok()) {
      *error = ApiError{rendered.status(), "messages", "", 0};
      return false;
    }
    prompts->push_back(std::move(rendered->tokens));
    echo->emplace_back();
    const ChatTemplate& tmpl = chat_template();
    out->reasoning = ctx_->options.reasoning_format == "none" ? ReasoningFormat::kNone
                     : tmpl.writes_harmony()                 ? ReasoningFormat::kHarmony
                     : tmpl.writes_think_tags()              ? ReasoningFormat::kThinkTags
                                                             : ReasoningFormat::kNone;
    const std::string_view prompt = StripPythonWhitespace(rendered->text);
    out->reasoning_open = out->reasoning == ReasoningFormat::kThinkTags && prompt.ends_with("<think>");
    return true;
  }
  if (in.prompts.empty()) {
    *error = InvalidField("prompt", "you must provide a prompt");
    return false;
  }
  for (const PromptInput& p : in.prompts) {
    if (p.is_tokens) {
      // Checked here, not only by Engine::Submit: echo decodes the ids first (the tokenizer
      // CHECKs its argument).
      for (int32_t id : p.tokens) {
        if (id < 0 || id >= tok.vocab_size()) {
          *error = InvalidField("prompt", fmt::format("token id {} is outside the vocabulary [0, {})", id,
                                                      tok.vocab_size()));
          return false;
        }
      }
      prompts->push_back(p.tokens);
      echo->push_back(in.echo ? tok.Decode(p.tokens) : "");
    } else {
      prompts->push_back(tok.Encode(p.text, /*add_special=*/true));
      echo->push_back(in.echo ? p.text : "");
    }
  }
  return true;
}

bool RequestBuilder::BuildPin(const GenerationInput& input, const Caller& caller, GenerationRequest* out,
                              ApiError* error) {
  GenerationInput in = input;
  if (in.kind == ApiKind::kChat) {
    if (ctx_->loading || ctx_->engine == nullptr) {
      *error = ApiError{UnavailableError("the model is loading; retry shortly"), "", "service_unavailable", 0};
      return false;
    }
    StatusOr<RenderedPrompt> rendered = RenderChat(in.messages, /*add_generation_prompt=*/false);
    if (!rendered.ok()) {
      *error = ApiError{rendered.status(), "messages", "", 0};
      return false;
    }
    in.kind = ApiKind::kCompletion;
    in.messages.clear();
    in.prompts = {PromptInput{true, "", std::move(rendered->tokens)}};
  }
  if (in.prompts.size() > 1) {
    *error = InvalidField("prompt", "a pin takes one prompt, not a batch");
    return false;
  }
  in.n = 1;
  in.echo = false;
  in.max_tokens = 1;
  std::vector<GenerationRequest> requests;
  SubmittedRequests unused;
  if (!Build(in, caller, &requests, &unused, error)) return false;
  *out = std::move(requests.front());
  return true;
}

bool RequestBuilder::Build(const GenerationInput& in, const Caller& caller, std::vector<GenerationRequest>* requests,
                           SubmittedRequests* out, ApiError* error) {
  if (ctx_->loading || ctx_->engine == nullptr) {
    *error = ApiError{UnavailableError("the model is loading; retry shortly"), "", "service_unavailable", 0};
    return false;
  }
  if (ctx_->draining) {
    *error = ApiError{UnavailableError("the server is shutting down"), "", "service_unavailable", 0};
    return false;
  }
  if (Status model = CheckModel(in.model); !model.ok()) {
    *error = ApiError{std::move(model), "model", "model_not_found", 0};
    return false;
  }
  std::string session_id = in.session_id;
  if (Status merged = MergeSessionHeader(caller.session_header, &session_id); !merged.ok()) {
    *error = InvalidField("session_id", merged.message());
    return false;
  }
  if (!session_id.empty() && in.prompts.size() > 1) {
    *error = InvalidField("session_id", "a chat session takes one prompt, not a batch");
    return false;
  }
  std::vector<std::vector<int32_t>> prompts;
  if (!Tokenize(in, &prompts, out, error)) return false;

  GenerationRequest base;
  base.sampling = in.sampling;
  if (in.echo && in.kind == ApiKind::kCompletion && in.sampling.logprobs >= 0) {
    base.sampling.prompt_logprobs = in.sampling.logprobs;
  }
  base.n = in.n;
  base.session_id = std::move(session_id);
  base.session_if_free = in.session_if_free;
  base.tenant = caller.tenant;
  base.cache_salt = TenantCacheSalt(caller.tenant, in.cache_salt);
  if (in.priority != 0 && !ctx_->options.allow_client_priority) {
    *error = InvalidField("priority", "request priorities are off on this server (the operator enables them with "
                                      "--allow-client-priority)");
    return false;
  }
  base.priority = in.priority;
  base.structured = in.structured;
  if (in.tools.active()) {
    if (in.structured.active()) {
      *error = InvalidField("tools", fmt::format("'tools' and '{}' both constrain the output; send one of them "
                                                 "(or tool_choice \"none\")", in.structured_param));
      return false;
    }
    base.structured = ToolCallSpec(chat_template().tool_syntax(), in.tools);
    // Arguments as markup are held to their parameters' names and simple types; a strict
    // tool's schema must still be one kvserve enforces exactly (as with JSON arguments).
    if (chat_template().tool_syntax().xml_arguments) {
      for (const ToolDefinition& t : in.tools.tools) {
        if (!t.strict) continue;
        const Status st = CompileJsonSchema(t.parameters.empty() ? "{}" : t.parameters).status();
        if (!st.ok()) {
          *error = InvalidField("tools", std::string(st.message()));
          return false;
        }
      }
    }
  }
  // A reply that starts inside the model's reasoning is constrained after it, not in it.
  if (out->reasoning_open) base.structured.StartAfter("</think>");
  // Harmony's replies are read by their markup (control tokens), whatever the reasoning format.
  if (in.kind == ApiKind::kChat && chat_template().writes_harmony()) base.shown_controls = HarmonyParser::Controls();
  size_t structured_bytes = base.structured.text.size();
  for (const std::string& c : base.structured.choices) structured_bytes += c.size();
  if (structured_bytes > kMaxStructuredBytes) {
    const std::string param = StructuredParam(in);
    *error = InvalidField(param, fmt::format("'{}' is larger than {} bytes", param, kMaxStructuredBytes));
    return false;
  }
  const int max_len = max_model_len();
  for (std::vector<int32_t>& tokens : prompts) {
    GenerationRequest& r = requests->emplace_back(base);
    const int prompt_len = static_cast<int>(tokens.size());
    if (in.max_tokens) {
      r.sampling.max_tokens = *in.max_tokens;
    } else if (in.kind == ApiKind::kChat) {
      // OpenAI's chat default: what the context has left. A windowed session's context is
      // its window, however long the history the client re-sends.
      const int window = ctx_->engine->config().chat_window_tokens;
      const int context = !r.session_id.empty() && window > 0 ? std::min(prompt_len, window) : prompt_len;
      r.sampling.max_tokens = std::max(max_len - context, 1);
    } else {
      r.sampling.max_tokens = ctx_->options.default_max_tokens;
    }
    r.prompt_tokens = std::move(tokens);
  }
  return true;
}

bool RequestBuilder::Submit(const GenerationInput& in, const Caller& caller, SubmittedRequests* out,
                            ApiError* error) {
  std::vector<GenerationRequest> requests;
  out->streams.clear();
  out->echo.clear();
  out->prompt_lengths.clear();
  if (!Build(in, caller, &requests, out, error)) {
    ctx_->CountRejected();
    return false;
  }
  Engine& engine = *ctx_->engine;
  for (GenerationRequest& r : requests) {
    const int prompt_len = static_cast<int>(r.prompt_tokens.size());
    StatusOr<std::shared_ptr<RequestStream>> stream = engine.Submit(std::move(r));
    if (!stream.ok()) {
      for (auto& s : out->streams) engine.Abort(s->id());
      out->streams.clear();
      const StatusCode code = stream.status().code();
      const std::string param = code == StatusCode::kOutOfRange ? (in.kind == ApiKind::kChat ? "messages" : "prompt")
                                : (in.structured.active() || in.tools.active()) &&
                                          (code == StatusCode::kInvalidArgument || code == StatusCode::kDeadlineExceeded)
                                    ? StructuredParam(in)
                                    : "";
      *error = ApiError{stream.status(), param, CodeFor(code), 0};
      ctx_->CountRejected();
      return false;
    }
    out->streams.push_back(std::move(stream).value());
    out->prompt_lengths.push_back(prompt_len);
  }
  return true;
}

}  // namespace kvserve
