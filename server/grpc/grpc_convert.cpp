// Proto <-> engine conversions for the gRPC service (see grpc_convert.h).
#include "server/grpc/grpc_convert.h"

#include <algorithm>
#include <fmt/format.h>

namespace kvserve {
namespace {

void FillOptions(const v1::RequestOptions& in, GenerationInput* out) {
  out->model = in.model();
  out->n = in.n() == 0 ? 1 : in.n();
  out->session_id = in.session_id();
  out->cache_salt = in.cache_salt();
  out->priority = in.priority();
  if (in.has_structured()) {
    using Kind = StructuredOutputSpec::Kind;
    const v1::StructuredOutput& so = in.structured();
    StructuredOutputSpec& spec = out->structured;
    switch (so.kind_case()) {
      case v1::StructuredOutput::kJsonSchema: spec.kind = Kind::kJsonSchema, spec.text = so.json_schema(); break;
      case v1::StructuredOutput::kJsonObject: spec.kind = so.json_object() ? Kind::kJsonObject : Kind::kNone; break;
      case v1::StructuredOutput::kRegex: spec.kind = Kind::kRegex, spec.text = so.regex(); break;
      case v1::StructuredOutput::kChoice:
        spec.kind = Kind::kChoice;
        spec.choices.assign(so.choice().choices().begin(), so.choice().choices().end());
        break;
      case v1::StructuredOutput::kGrammar: spec.kind = Kind::kGrammar, spec.text = so.grammar(); break;
      case v1::StructuredOutput::KIND_NOT_SET: break;
    }
    out->structured_param = "options.structured";
  }
}

// Fills `out` from the proto; max_tokens stays unset when the proto leaves it unset.
void FillSampling(const v1::SamplingOptions& in, GenerationInput* input) {
  SamplingParams* out = &input->sampling;
  if (in.has_max_tokens()) input->max_tokens = in.max_tokens();
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

StatusOr<GenerationInput> ToGenerationInput(const v1::GenerateRequest& in) {
  const bool has_text = !in.prompt().empty();
  const bool has_tokens = in.prompt_tokens_size() > 0;
  if (has_text == has_tokens) {
    return InvalidArgumentError(has_text ? "set either prompt or prompt_tokens, not both"
                                         : "prompt or prompt_tokens is required");
  }
  GenerationInput r;
  r.kind = ApiKind::kCompletion;
  PromptInput& prompt = r.prompts.emplace_back();
  prompt.is_tokens = has_tokens;
  prompt.text = in.prompt();
  prompt.tokens.assign(in.prompt_tokens().begin(), in.prompt_tokens().end());
  FillSampling(in.sampling(), &r);
  FillOptions(in.options(), &r);
  return r;
}

std::vector<ChatMessage> ToChatMessages(const google::protobuf::RepeatedPtrField<v1::ChatMessage>& in) {
  std::vector<ChatMessage> messages;
  messages.reserve(static_cast<size_t>(in.size()));
  for (const v1::ChatMessage& m : in) messages.push_back({m.role(), m.content()});
  return messages;
}

GenerationInput ToGenerationInput(const v1::ChatRequest& in) {
  GenerationInput r;
  r.kind = ApiKind::kChat;
  r.messages = ToChatMessages(in.messages());
  FillSampling(in.sampling(), &r);
  FillOptions(in.options(), &r);
  return r;
}

StatusOr<GenerationInput> ToGenerationInput(const v1::CreatePinRequest& in) {
  const int given = !in.prompt().empty() + (in.prompt_tokens_size() > 0) + (in.messages_size() > 0);
  if (given != 1) return InvalidArgumentError("set exactly one of prompt, prompt_tokens and messages");
  if (in.options().n() > 1) return InvalidArgumentError("options.n: a pin has one prompt and no choices");
  if (!in.options().session_id().empty()) {
    return InvalidArgumentError("options.session_id: a pin cannot belong to a chat session");
  }
  GenerationInput r;
  if (in.messages_size() > 0) {
    r.kind = ApiKind::kChat;
    r.messages = ToChatMessages(in.messages());
  } else {
    PromptInput& prompt = r.prompts.emplace_back();
    prompt.is_tokens = in.prompt_tokens_size() > 0;
    prompt.text = in.prompt();
    prompt.tokens.assign(in.prompt_tokens().begin(), in.prompt_tokens().end());
  }
  FillOptions(in.options(), &r);
  return r;
}

void FillPin(const PinnedPrefix& in, v1::Pin* out) {
  out->set_id(in.id);
  out->set_prompt_tokens(in.prompt_tokens);
  out->set_pinned_tokens(in.pinned_tokens);
  out->set_bytes(in.bytes);
  out->set_created(in.created);
}

namespace {

// Appends a delta's output to a v1::Choice or v1::ChoiceDelta (same fields).
template <typename ChoiceMessage>
void MergeInto(const StreamDelta& delta, ChoiceMessage* c) {
  c->mutable_text()->append(delta.text);
  c->mutable_token_ids()->Add(delta.token_ids.begin(), delta.token_ids.end());
  FillLogprobs(delta.logprobs, c->mutable_logprobs());
  if (delta.finish_reason) {
    c->set_finish_reason(ToProto(*delta.finish_reason));
    c->set_matched_stop(delta.matched_stop);
  }
}

}  // namespace

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

void AppendDeltas(std::span<const StreamDelta> deltas, v1::GenerateStreamResponse* out) {
  for (const StreamDelta& delta : deltas) {
    v1::ChoiceDelta* c = nullptr;
    for (v1::ChoiceDelta& existing : *out->mutable_choices()) {
      if (existing.index() == delta.index) c = &existing;
    }
    if (c == nullptr) {
      c = out->add_choices();
      c->set_index(delta.index);
    }
    MergeInto(delta, c);
  }
}

void MergeDelta(const StreamDelta& delta, v1::GenerateResponse* out) {
  while (out->choices_size() <= delta.index) {
    const int index = out->choices_size();
    out->add_choices()->set_index(index);
  }
  MergeInto(delta, out->mutable_choices(delta.index));
}

}  // namespace kvserve
