// EngineCore, output side: sampling, detokenizing, stop conditions, choices (n > 1) and the
// end of sequences and requests. Engine thread only.
#include <algorithm>

#include "common/log.h"
#include "engine/engine_core.h"

namespace kvserve {
namespace {
double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }
}  // namespace

void EngineCore::ProcessOutputs(const SchedulerOutput& out) {
  int logits_row = 0;
  for (const ScheduledWork& w : out.work) {
    Sequence* s = w.seq;
    const int prompt_part = std::max(0, std::min(s->num_computed + w.num_new_tokens, s->prompt_len) - s->num_computed);
    stats_.prompt_tokens_total += prompt_part;
    s->num_computed += w.num_new_tokens;
    if (!s->window.sliding()) {
      cache_->CommitComputed(s->id, s->tokens, s->num_computed, s->request->params.cache_salt);
    }
    // Rows [logits_row, logits_row + num_logits) hold the logits of the chunk's last positions.
    std::span<float> rows(&logits_[static_cast<size_t>(logits_row) * vocab_size_],
                          static_cast<size_t>(w.num_logits) * vocab_size_);
    logits_row += w.num_logits;
    if (s->finished()) continue;  // e.g. aborted while its step ran
    const int first_position = s->num_computed - w.num_logits;
    const bool ends_known_tokens = s->num_computed == static_cast<int>(s->tokens.size());
    for (int k = 0; k + (ends_known_tokens ? 1 : 0) < w.num_logits; ++k) {
      ScorePromptToken(s, first_position + k, rows.subspan(static_cast<size_t>(k) * vocab_size_, vocab_size_));
    }
    if (!ends_known_tokens) continue;  // prefill continues
    CHECK_GE(w.num_logits, 1) << "sequence " << s->id << " reached its last token without logits";
    Request* r = s->request;
    if (s->wants_prompt_logprobs) {
      CHECK(!s->prompt_logprobs_pending()) << "prompt logprobs incomplete at the end of the prompt";
      StreamDelta delta;
      delta.index = s->choice;
      delta.prompt_logprobs = std::move(s->prompt_logprobs);
      s->wants_prompt_logprobs = false;
      r->stream->Push(std::move(delta));
    }
    if (r->params.sampling.max_tokens == 0) {
      FinishWithoutTokens(r);
      continue;
    }
    std::span<float> row = rows.last(vocab_size_);
    if (r->params.n > 1 && s->choice == 0 && !s->forked_children) ForkChoices(s, row);
    SampleAndEmit(s, row);
    if (config_.recompute_every_token && !s->finished()) {
      cache_->Free(s->id);
      s->holds_cache = false;
      s->num_computed = 0;
    }
  }
}

void EngineCore::ScorePromptToken(Sequence* seq, int pos, std::span<const float> logits) {
  CHECK(seq->prompt_logprobs_pending() && pos == static_cast<int>(seq->prompt_logprobs.size()) - 1)
      << "logits row for position " << pos << " of sequence " << seq->id << " that scores nothing";
  const int32_t id = seq->tokens[static_cast<size_t>(pos) + 1];
  SampledToken scored = ScoreToken(logits, id, seq->request->params.sampling.prompt_logprobs);
  seq->prompt_logprobs.push_back({id, scored.logprob, std::move(scored.top_logprobs)});
}

void EngineCore::FinishWithoutTokens(Request* r) {
  for (auto& s : r->seqs) {
    s->forked_children = true;  // no fork will happen
    StreamDelta delta;
    delta.index = s->choice;
    delta.finish_reason = FinishReason::kLength;
    r->stream->Push(std::move(delta));
    FinishSequence(s.get(), FinishReason::kLength);
  }
}

void EngineCore::SampleAndEmit(Sequence* seq, std::span<float> logits) {
  Request* r = seq->request;
  Profiler::Scope sample_scope(config_.profiler, ProfileOp::kSample);
  const SampledToken sampled = seq->sampler->Sample(logits, scratch_);
  sample_scope.Stop();
  Profiler::Scope detok_scope(config_.profiler, ProfileOp::kDetokenize);
  const int32_t id = sampled.id;
  seq->tokens.push_back(id);
  seq->sampler->Accept(id);
  ++seq->num_generated;
  ++r->usage.completion_tokens;
  ++stats_.generation_tokens_total;

  const Clock::time_point now = Clock::now();
  if (!r->first_token) {
    r->first_token = now;
    r->usage.time_to_first_token_s = Seconds(now - r->submitted);
    stats_.time_to_first_token.Observe(r->usage.time_to_first_token_s);
  } else if (seq->num_generated > 1) {
    stats_.inter_token_latency.Observe(Seconds(now - seq->last_token_time));
  }
  seq->last_token_time = now;

  StreamDelta delta;
  delta.index = seq->choice;
  delta.token_ids.push_back(id);
  if (r->params.sampling.logprobs >= 0) {
    delta.logprobs.push_back({id, sampled.logprob, sampled.top_logprobs});
  }
  std::optional<FinishReason> finish;
  const bool stop_token = seq->sampler->IsStopToken(id);
  if (stop_token) finish = FinishReason::kStop;
  if (seq->detokenizer && !stop_token) {
    const std::string piece = seq->detokenizer->Push(id);
    // Stop strings apply once min_tokens have been generated.
    if (seq->num_generated > r->params.sampling.min_tokens) {
      StopMatcherOutput m = seq->stop->Feed(piece);
      delta.text = std::move(m.text);
      if (m.stop_index) {
        finish = FinishReason::kStop;
        seq->matched_stop = seq->stop->stop_strings()[*m.stop_index];
      }
    } else {
      delta.text = piece;
    }
  }
  if (!finish && seq->num_generated >= r->params.sampling.max_tokens) finish = FinishReason::kLength;
  if (!finish && !seq->window.sliding() && static_cast<int>(seq->tokens.size()) >= max_model_len_) {
    finish = FinishReason::kLength;
  }
  if (finish && seq->detokenizer && seq->matched_stop.empty()) {
    // Release held-back bytes and text that could have started a stop string.
    StopMatcherOutput m = seq->stop->Feed(seq->detokenizer->Flush());
    delta.text += m.text;
    if (m.stop_index) {
      seq->matched_stop = seq->stop->stop_strings()[*m.stop_index];
    } else {
      delta.text += seq->stop->Finish();
    }
  }
  if (finish) {
    delta.finish_reason = finish;
    delta.matched_stop = seq->matched_stop;
  }
  detok_scope.Stop();
  Profiler::Scope publish_scope(config_.profiler, ProfileOp::kPublish);
  r->stream->Push(std::move(delta));
  publish_scope.Stop();
  if (finish) FinishSequence(seq, *finish);
}

void EngineCore::ForkChoices(Sequence* parent, std::span<const float> logits) {
  parent->forked_children = true;
  Request* r = parent->request;
  for (size_t c = 1; c < r->seqs.size(); ++c) {
    Sequence* child = r->seqs[c].get();
    child->window = parent->window;
    std::optional<std::vector<std::pair<BlockId, BlockId>>> copies = cache_->Fork(parent->id, child->id);
    if (copies && backend_->CopyBlocks(*copies).ok()) {
      child->holds_cache = true;
      child->tokens = parent->tokens;
      child->num_computed = parent->num_computed;
      child->num_evicted = parent->num_evicted;
      child->scheduled_once = true;
      std::copy(logits.begin(), logits.end(), fork_logits_.begin());
      // The running set never exceeds max_num_seqs (nor a step's logits rows): a choice that
      // does not fit waits, holding its forked cache.
      if (scheduler_->has_running_room()) {
        scheduler_->AddRunning(child);
      } else {
        scheduler_->AddWaiting(child);
      }
      SampleAndEmit(child, fork_logits_);
    } else {
      // No block for the copy: the choice prefills on its own (its full prompt blocks come
      // from the prefix cache).
      if (copies) cache_->Free(child->id);
      scheduler_->AddWaiting(child);
    }
  }
}

void EngineCore::FinishSequence(Sequence* seq, FinishReason reason) {
  if (seq->finished()) return;
  seq->finish = reason;
  seq->state = SeqState::kFinished;
  scheduler_->Remove(seq);
  ReleaseSequence(seq);
  Request* r = seq->request;
  // A request's other choices that never started (n > 1, before the fork) end with it.
  if (seq->choice == 0 && !seq->forked_children) {
    for (size_t c = 1; c < r->seqs.size(); ++c) {
      Sequence* child = r->seqs[c].get();
      if (!child->finished()) {
        child->forked_children = true;
        FinishSequence(child, reason == FinishReason::kError ? reason : FinishReason::kAbort);
      }
    }
  }
  if (reason == FinishReason::kAbort || reason == FinishReason::kError) {
    StreamDelta delta;
    delta.index = seq->choice;
    delta.finish_reason = reason;
    r->stream->Push(std::move(delta));
  }
  MaybeFinishRequest(r);
}

void EngineCore::ReleaseSequence(Sequence* seq) {
  const Request* r = seq->request;
  if (seq->session_attached) {
    sessions_->Detach(r->params.tenant, r->params.session_id, seq);
    seq->session_attached = false;
  } else if (seq->holds_cache) {
    cache_->Free(seq->id);
  }
  seq->holds_cache = false;
}

void EngineCore::MaybeFinishRequest(Request* r) {
  if (r->done || !r->all_finished()) return;
  r->done = true;
  r->usage.duration_s = Seconds(Clock::now() - r->submitted);
  RequestOutcome outcome = RequestOutcome::kOk;
  if (!r->error.ok()) {
    outcome = r->error.code() == StatusCode::kCancelled ? RequestOutcome::kAborted : RequestOutcome::kError;
  }
  ++stats_.requests_total[static_cast<int>(outcome)];
  stats_.request_duration.Observe(r->usage.duration_s);
  LeaveQueue(r);  // before the client can see the end
  r->stream->Finish(r->error, r->usage);
  LOG_DEBUG("request {} done: prompt {} (cached {}), generated {}, ttft {:.3f}s, {:.3f}s, {}", r->id,
            r->usage.prompt_tokens, r->usage.cached_prompt_tokens, r->usage.completion_tokens,
            r->usage.time_to_first_token_s, r->usage.duration_s, r->error.ok() ? "ok" : r->error.ToString());
  --num_in_flight_;
  finished_requests_.push_back(r->id);
}

void EngineCore::FailRequest(Request* r, Status why) {
  if (r->done) return;
  r->error = std::move(why);
  for (auto& s : r->seqs) FinishSequence(s.get(), FinishReason::kError);
  MaybeFinishRequest(r);
}

}  // namespace kvserve
