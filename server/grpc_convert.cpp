// Proto <-> engine conversions for the gRPC service (see grpc_convert.h).
#include "server/grpc_convert.h"

#include <algorithm>
#include <fmt/format.h>

namespace kvserve {
namespace {

void FillOptions(const v1::RequestOptions& in, const GrpcRequestEnv& env, GenerationRequest* out) {
  out->n = in.n() == 0 ? 1 : in.n();
  out->session_id = in.session_id();
  out->cache_salt = in.cache_salt();
  out->priority = in.priority();
  out->tenant = env.tenant;
}

void FillLogprobs(const std::vector<TokenLogprob>& in,
                  google::protobuf::RepeatedPtrField<v1::TokenLogprob>* out) {
  for (const TokenLogprob& lp : in) {
    v1::TokenLogprob* p = out->Add();
    p->set_token_id(lp.id);
    p->set_logprob(lp.logprob);
    for (const auto& [id, logprob] : lp.top) {
      v1::TopLogprob* t = p->add_top();
      t->set_token_id(id);
      t->set_logprob(logprob);
    }
  }
}

}  // namespace

int MaxModelLen(const Engine& engine) {
  const int configured = engine.config().max_model_len;
  return configured > 0 ? configured : engine.model().config().context_length;
}

Status CheckModel(const std::string& requested, const std::string& model_id) {
  if (requested.empty() || requested == model_id) return OkStatus();
  return NotFoundError(fmt::format("model '{}' not found; this server serves '{}'", requested, model_id));
}

void FillSampling(const v1::SamplingOptions& in, int default_max_tokens, SamplingParams* out) {
  if (in.has_max_tokens()) {
    out->max_tokens = in.max_tokens();
  } else if (default_max_tokens >= 0) {
    out->max_tokens = default_max_tokens;
  }
  out->temperature = in.has_temperature() ? in.temperature() : 1.0f;
  out->top_p = in.has_top_p() ? in.top_p() : 1.0f;
  out->top_k = in.has_top_k() ? in.top_k() : 0;
  out->min_p = in.has_min_p() ? in.min_p() : 0.0f;
  if (in.has_seed()) out->seed = in.seed();
  out->stop.assign(in.stop().begin(), in.stop().end());
  out->stop_token_ids.assign(in.stop_token_ids().begin(), in.stop_token_ids().end());
  out->presence_penalty = in.has_presence_penalty() ? in.presence_penalty() : 0.0f;
  out->frequency_penalty = in.has_frequency_penalty() ? in.frequency_penalty() : 0.0f;
  out->repetition_penalty = in.has_repetition_penalty() ? in.repetition_penalty() : 1.0f;
  out->logit_bias.clear();
  for (const auto& [id, bias] : in.logit_bias()) out->logit_bias.emplace_back(id, bias);
  std::sort(out->logit_bias.begin(), out->logit_bias.end());  // map order is unspecified
  out->min_tokens = in.min_tokens();
  out->ignore_eos = in.ignore_eos();
  out->logprobs = in.has_logprobs() ? in.logprobs() : -1;
}

StatusOr<GenerationRequest> BuildGenerateRequest(const v1::GenerateRequest& in, const GrpcRequestEnv& env) {
  RETURN_IF_ERROR(CheckModel(in.options().model(), env.model_id));
  const bool has_text = !in.prompt().empty();
  const bool has_tokens = in.prompt_tokens_size() > 0;
  if (has_text == has_tokens) {
    return InvalidArgumentError(has_text ? "set either prompt or prompt_tokens, not both"
                                         : "prompt or prompt_tokens is required");
  }
  GenerationRequest r;
  if (has_text) {
    r.prompt_tokens = env.engine->model().tokenizer().Encode(in.prompt(), /*add_special=*/true);
  } else {
    r.prompt_tokens.assign(in.prompt_tokens().begin(), in.prompt_tokens().end());
  }
  FillSampling(in.sampling(), env.default_max_tokens, &r.sampling);
  FillOptions(in.options(), env, &r);
  return r;
}

StatusOr<GenerationRequest> BuildChatRequest(const v1::ChatRequest& in, const GrpcRequestEnv& env) {
  RETURN_IF_ERROR(CheckModel(in.options().model(), env.model_id));
  std::vector<ChatMessage> messages;
  messages.reserve(static_cast<size_t>(in.messages_size()));
  for (const v1::ChatMessage& m : in.messages()) messages.push_back({m.role(), m.content()});
  StatusOr<std::string> rendered = env.chat_template->Render(messages, /*add_generation_prompt=*/true);
  if (!rendered.ok()) return rendered.status();
  GenerationRequest r;
  r.prompt_tokens = env.chat_template->Encode(*rendered, env.engine->model().tokenizer());
  FillSampling(in.sampling(), /*default_max_tokens=*/-1, &r.sampling);
  if (!in.sampling().has_max_tokens()) {
    // OpenAI's chat default: as many tokens as the context has room for.
    const int room = MaxModelLen(*env.engine) - static_cast<int>(r.prompt_tokens.size());
    r.sampling.max_tokens = std::max(room, 1);
  }
  FillOptions(in.options(), env, &r);
  return r;
}

v1::FinishReason ToProto(FinishReason reason) {
  switch (reason) {
    case FinishReason::kStop: return v1::FINISH_REASON_STOP;
    case FinishReason::kLength: return v1::FINISH_REASON_LENGTH;
    case FinishReason::kAbort: return v1::FINISH_REASON_ABORT;
    case FinishReason::kError: return v1::FINISH_REASON_ERROR;
  }
  return v1::FINISH_REASON_UNSPECIFIED;
}

void FillUsage(const RequestUsage& in, v1::Usage* out) {
  out->set_prompt_tokens(in.prompt_tokens);
  out->set_completion_tokens(in.completion_tokens);
  out->set_cached_prompt_tokens(in.cached_prompt_tokens);
  out->set_time_to_first_token_seconds(in.time_to_first_token_s);
  out->set_duration_seconds(in.duration_s);
  out->set_preemptions(in.preemptions);
}

void AppendDelta(const StreamDelta& delta, v1::GenerateStreamResponse* out) {
  v1::ChoiceDelta* c = out->add_choices();
  c->set_index(delta.index);
  c->set_text(delta.text);
  c->mutable_token_ids()->Add(delta.token_ids.begin(), delta.token_ids.end());
  FillLogprobs(delta.logprobs, c->mutable_logprobs());
  if (delta.finish_reason) {
    c->set_finish_reason(ToProto(*delta.finish_reason));
    c->set_matched_stop(delta.matched_stop);
  }
}

void MergeDelta(const StreamDelta& delta, v1::GenerateResponse* out) {
  while (out->choices_size() <= delta.index) {
    const int index = out->choices_size();
    out->add_choices()->set_index(index);
  }
  v1::Choice* c = out->mutable_choices(delta.index);
  c->mutable_text()->append(delta.text);
  c->mutable_token_ids()->Add(delta.token_ids.begin(), delta.token_ids.end());
  FillLogprobs(delta.logprobs, c->mutable_logprobs());
  if (delta.finish_reason) {
    c->set_finish_reason(ToProto(*delta.finish_reason));
    c->set_matched_stop(delta.matched_stop);
  }
}

}  // namespace kvserve
