// GenerationJob: engine deltas -> OpenAI responses / SSE events (see http_generation.h).
#include "server/http/http_generation.h"

#include <algorithm>

#include "server/http/responses_api.h"

namespace kvserve {
namespace {

bool IsNormalFinish(const std::optional<FinishReason>& f) {
  return f && (*f == FinishReason::kStop || *f == FinishReason::kLength);
}

// Output a client can see: tokens, text or a normal end (not an error/abort marker).
bool HasContent(const StreamDelta& d) {
  return !d.token_ids.empty() || !d.text.empty() || IsNormalFinish(d.finish_reason);
}

}  // namespace

GenerationJob::GenerationJob(Engine* engine, const Tokenizer* tokenizer, ResponseMeta meta, bool stream, int n,
                             std::vector<std::shared_ptr<RequestStream>> streams, std::vector<std::string> echo,
                             std::vector<int> prompt_lengths)
    : engine_(engine),
      tok_(tokenizer),
      meta_(std::move(meta)),
      stream_(stream),
      n_(n),
      streams_(std::move(streams)),
      done_(streams_.size(), false),
      echo_(std::move(echo)),
      prompt_lengths_(std::move(prompt_lengths)),
      tokens_seen_(streams_.size(), 0),
      prompt_logprobs_(streams_.size()),
      choices_(streams_.size() * static_cast<size_t>(n)) {
  echo_.resize(streams_.size());
  prompt_lengths_.resize(streams_.size());
  if (meta_.tools && meta_.kind == ApiKind::kChat && !meta_.responses) {
    for (Choice& c : choices_) c.tools = std::make_unique<ToolCallParser>(*meta_.tools, meta_.tool_definitions);
  }
  if (meta_.reasoning != ReasoningFormat::kNone && meta_.kind == ApiKind::kChat && !meta_.responses) {
    const ToolSyntax* calls = meta_.tools ? &*meta_.tools : nullptr;
    for (Choice& c : choices_) c.reasoning = MakeReasoningParser(meta_.reasoning, meta_.reasoning_open, calls);
  }
}

GenerationJob::~GenerationJob() {
  for (auto& s : streams_) s->SetListener(nullptr);
}

void GenerationJob::SetListener(const std::function<void()>& notify) {
  for (auto& s : streams_) s->SetListener(notify);
}

void GenerationJob::Abort() {
  for (size_t i = 0; i < streams_.size(); ++i) {
    if (!done_[i]) engine_->Abort(streams_[i]->id());
  }
}

bool GenerationJob::Collect() {
  std::vector<StreamDelta> deltas;
  bool all_done = true;
  bool failed = false;
  for (size_t i = 0; i < streams_.size(); ++i) {
    if (done_[i]) continue;
    // done() before draining: everything pushed before Finish is then in this drain.
    const bool was_done = streams_[i]->done();
    deltas.clear();
    streams_[i]->TryDrain(&deltas);
    for (StreamDelta& d : deltas) {
      tokens_seen_[i] += static_cast<int>(d.token_ids.size());
      if (!d.prompt_logprobs.empty()) {
        prompt_logprobs_[i] = std::move(d.prompt_logprobs);  // before the prompt's first output
        if (d.token_ids.empty() && d.text.empty() && !d.finish_reason) continue;
      }
      const int index = static_cast<int>(i) * n_ + d.index;
      pending_.emplace_back(index, std::move(d));
    }
    if (was_done) {
      done_[i] = true;
      failed = failed || !streams_[i]->status().ok();
    } else {
      all_done = false;
    }
  }
  for (size_t i = 0; i < streams_.size(); ++i) {
    if (done_[i] && !streams_[i]->status().ok() && std::find(failed_order_.begin(), failed_order_.end(), i) ==
                                                       failed_order_.end()) {
      failed_order_.push_back(i);
    }
  }
  // One prompt of a batch failed: the response fails, so stop the others.
  if (failed && !all_done) Abort();
  return all_done;
}

std::optional<ApiError> GenerationJob::Failure() const {
  if (failed_order_.empty()) return std::nullopt;
  const Status& st = streams_[failed_order_.front()]->status();
  ApiError e{st, "", "", 0};
  return e;
}

RequestUsage GenerationJob::usage() const {
  RequestUsage total;
  bool first = true;
  for (size_t i = 0; i < streams_.size(); ++i) {
    RequestUsage u = streams_[i]->usage();
    if (!done_[i]) {
      u.prompt_tokens = prompt_lengths_[i];
      u.completion_tokens = tokens_seen_[i];
    }
    total.prompt_tokens += u.prompt_tokens;
    total.completion_tokens += u.completion_tokens;
    total.cached_prompt_tokens += u.cached_prompt_tokens;
    total.preemptions += u.preemptions;
    total.duration_s = std::max(total.duration_s, u.duration_s);
    if (u.time_to_first_token_s > 0 && (first || u.time_to_first_token_s < total.time_to_first_token_s)) {
      total.time_to_first_token_s = u.time_to_first_token_s;
      first = false;
    }
  }
  return total;
}

void GenerationJob::EmitStreamed(const StreamDelta& d, int index, std::string* out) {
  Choice& c = choices_[static_cast<size_t>(index)];
  const bool normal_finish = IsNormalFinish(d.finish_reason);
  std::string text = d.text;
  std::vector<TokenLogprob> logprobs;
  if (!c.started && (HasContent(d) || meta_.kind == ApiKind::kChat)) {
    text = echo_[static_cast<size_t>(index / n_)] + text;
    logprobs = prompt_logprobs_[static_cast<size_t>(index / n_)];
  }
  logprobs.insert(logprobs.end(), d.logprobs.begin(), d.logprobs.end());
  if (!HasContent(d) && text.empty()) return;  // an error/abort marker: the end says why
  if (meta_.responses) {
    c.started = true;
    if (d.finish_reason) c.finish = d.finish_reason;
    if (!text.empty()) *out += meta_.responses->DeltaEvent(text);
    return;
  }

  ChunkChoice chunk;
  chunk.index = index;
  if (meta_.kind == ApiKind::kChat) {
    if (!c.started) {
      chunk.first = true;
      *out += FormatChunkEvent(meta_, chunk, *tok_);
      chunk.first = false;
    }
    c.started = true;
    if (c.reasoning) {  // the reasoning apart; the rest is the content
      ReasoningParser::Delta r = c.reasoning->Feed(text);
      if (!r.reasoning.empty() && r.content.empty()) c.reasoning_tokens += static_cast<int>(d.token_ids.size());
      if (normal_finish) {
        ReasoningParser::Delta end = c.reasoning->Finish();
        r.reasoning += end.reasoning;
        r.content += end.content;
      }
      text = std::move(r.content);
      if (!r.reasoning.empty()) {
        ChunkChoice thought;
        thought.index = index;
        thought.reasoning = std::move(r.reasoning);
        *out += FormatChunkEvent(meta_, thought, *tok_);
      }
    }
    ToolCallParser::Delta parsed;
    if (c.tools) {  // content and call fragments instead of the text
      parsed = c.tools->Feed(text);
      if (normal_finish) {
        ToolCallParser::Delta end = c.tools->Finish();
        parsed.content += end.content;
        parsed.calls.insert(parsed.calls.end(), end.calls.begin(), end.calls.end());
      }
      text = std::move(parsed.content);
    }
    if (!text.empty() || (meta_.logprobs && !logprobs.empty())) {
      chunk.text = std::move(text);
      chunk.logprobs = logprobs;
      *out += FormatChunkEvent(meta_, chunk, *tok_);
    }
    if (!parsed.calls.empty()) {
      ChunkChoice calls;
      calls.index = index;
      calls.tool_calls = parsed.calls;
      *out += FormatChunkEvent(meta_, calls, *tok_);
    }
    if (normal_finish) {
      ChunkChoice end;
      end.index = index;
      end.finish = d.finish_reason;
      end.called_tools = c.tools && !c.tools->calls().empty();
      *out += FormatChunkEvent(meta_, end, *tok_);
    }
    return;
  }
  c.started = true;
  if (text.empty() && !normal_finish && !(meta_.logprobs && !logprobs.empty())) return;
  chunk.text_offset = c.text_offset;
  c.text_offset += static_cast<int>(text.size());
  chunk.text = std::move(text);
  chunk.logprobs = logprobs;
  if (normal_finish) chunk.finish = d.finish_reason;
  *out += FormatChunkEvent(meta_, chunk, *tok_);
}

HttpReply GenerationJob::FinalReply() {
  for (auto& [index, d] : pending_) {
    Choice& c = choices_[static_cast<size_t>(index)];
    c.text += d.text;
    if (c.reasoning) {  // fed delta by delta, so the tokens of the reasoning are counted
      const ReasoningParser::Delta r = c.reasoning->Feed(d.text);
      if (!r.reasoning.empty() && r.content.empty()) c.reasoning_tokens += static_cast<int>(d.token_ids.size());
    }
    c.logprobs.insert(c.logprobs.end(), d.logprobs.begin(), d.logprobs.end());
    if (d.finish_reason) c.finish = d.finish_reason;
  }
  pending_.clear();
  std::vector<ChoiceResult> results;
  results.reserve(choices_.size());
  for (size_t i = 0; i < choices_.size(); ++i) {
    Choice& c = choices_[i];
    const std::string& echo = echo_[i / static_cast<size_t>(n_)];
    const std::vector<TokenLogprob>& prompt_logprobs = prompt_logprobs_[i / static_cast<size_t>(n_)];
    ChoiceResult r;
    r.index = static_cast<int>(i);
    r.text = echo + c.text;
    // With prompt logprobs the offsets run over the prompt tokens too, from 0.
    r.text_offset_base = prompt_logprobs.empty() ? static_cast<int>(echo.size()) : 0;
    r.logprobs = prompt_logprobs;
    r.logprobs.insert(r.logprobs.end(), c.logprobs.begin(), c.logprobs.end());
    r.finish = c.finish;
    if (c.reasoning) {
      (void)c.reasoning->Finish();
      r.reasoning = c.reasoning->reasoning();
      r.text = c.reasoning->content();
      r.reasoning_tokens = c.reasoning_tokens;
    }
    if (c.tools) {
      (void)c.tools->Feed(r.text);
      (void)c.tools->Finish();
      r.text = c.tools->content();
      r.tool_calls = c.tools->calls();
    }
    results.push_back(std::move(r));
  }
  HttpReply reply;
  reply.body = meta_.responses ? meta_.responses->FinalBody(results[0].text, usage(), results[0].finish)
                               : FormatResponse(meta_, results, usage(), *tok_);
  return reply;
}

GenerationJob::Output GenerationJob::Poll() {
  Output out;
  if (finished_) return out;
  const bool all_done = Collect();

  if (!stream_) {
    if (!all_done) return out;
    finished_ = out.finished = true;
    if (std::optional<ApiError> failure = Failure()) {
      http_status_ = failure->HttpStatus();
      out.reply = ErrorReply(*failure);
    } else {
      out.reply = FinalReply();
    }
    return out;
  }

  if (!started_) {
    const bool content = std::any_of(pending_.begin(), pending_.end(),
                                     [](const auto& p) { return HasContent(p.second); });
    if (!content && !all_done) return out;
    if (!content) {
      if (std::optional<ApiError> failure = Failure()) {
        finished_ = out.finished = true;
        http_status_ = failure->HttpStatus();
        out.reply = ErrorReply(*failure);
        return out;
      }
    }
    started_ = out.start = true;
    if (meta_.responses) out.body += meta_.responses->StartEvents();
  }
  for (const auto& [index, d] : pending_) EmitStreamed(d, index, &out.body);
  pending_.clear();
  if (all_done && meta_.responses) {
    // The Responses API's stream ends with its last event, not [DONE].
    if (std::optional<ApiError> failure = Failure()) {
      out.body += meta_.responses->ErrorEvent(*failure);
      http_status_ = failure->HttpStatus();
    } else {
      out.body += meta_.responses->EndEvents(usage(), choices_[0].finish);
    }
    finished_ = out.finished = true;
  } else if (all_done) {
    if (std::optional<ApiError> failure = Failure()) {
      out.body += FormatErrorEvent(*failure);
      http_status_ = failure->HttpStatus();
    } else if (meta_.include_usage) {
      int reasoning_tokens = 0;
      for (const Choice& c : choices_) reasoning_tokens += c.reasoning_tokens;
      out.body += FormatUsageEvent(meta_, usage(), reasoning_tokens);
    }
    out.body += kDoneEvent;
    finished_ = out.finished = true;
  }
  return out;
}

}  // namespace kvserve
