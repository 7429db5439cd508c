// OutputProcessor (output_processor.h): sampling, detokenizing, stop conditions, choices
// (n > 1) and the end of sequences and requests. Engine thread only.
#include "engine/output_processor.h"

#include <algorithm>
#include <limits>

#include "common/log.h"

namespace kvserve {
// Sequence's constructor and destructor live here, where SequenceOutput is complete.
Sequence::Sequence() = default;
Sequence::~Sequence() = default;

OutputProcessor::OutputProcessor(const OutputProcessorConfig& config, Parts parts)
    : config_(config), parts_(std::move(parts)), fork_logits_(static_cast<size_t>(config.vocab_size)) {
  const Tokenizer& tok = *parts_.tokenizer;
  if (tok.eos_id() >= 0) stop_ids_.push_back(tok.eos_id());
  for (int32_t id = 0; id < tok.vocab_size(); ++id) {
    if (id != tok.eos_id() && tok.IsEndOfGeneration(id)) stop_ids_.push_back(id);
  }
}

std::unique_ptr<Sequence> OutputProcessor::NewSequence(Request* r, int choice, SeqId id) const {
  auto seq = std::make_unique<Sequence>();
  seq->id = id;
  seq->request = r;
  seq->choice = choice;
  seq->tokens = r->params.prompt_tokens;
  seq->prompt_len = static_cast<int>(seq->tokens.size());
  seq->output = std::make_unique<SequenceOutput>();
  SequenceOutput& out = *seq->output;
  const uint64_t seed = config_.seed ^ (r->id * 0x9E3779B97F4A7C15ull) ^ (static_cast<uint64_t>(choice) << 32);
  SamplingParams params = r->params.sampling;
  if (params.seed && choice > 0) params.seed = *params.seed + static_cast<uint64_t>(choice);
  out.sampler = std::make_unique<Sampler>(params, config_.vocab_size, seed, stop_ids_);
  out.sampler->AddPromptTokens(seq->tokens);
  if (r->grammar && r->params.structured.triggers.empty()) out.grammar = std::make_unique<GrammarMatcher>(r->grammar);
  out.awaiting_trigger = r->grammar && !r->params.structured.triggers.empty();
  if (r->params.detokenize) {
    std::vector<int32_t> shown;
    for (const std::string& text : r->params.shown_controls) {
      const int32_t id = parts_.tokenizer->FindToken(text);
      if (id >= 0) shown.push_back(id);
    }
    out.detokenizer = std::make_unique<StreamingDetokenizer>(*parts_.tokenizer, std::move(shown));
    out.stop = std::make_unique<StopMatcher>(r->params.sampling.stop);
  }
  if (choice == 0 && r->params.sampling.prompt_logprobs >= 0) {
    seq->wants_prompt_logprobs = true;
    seq->num_prompt_logprobs = 1;
    out.prompt_logprobs.push_back({seq->tokens[0], std::numeric_limits<float>::quiet_NaN(), {}});
  }
  return seq;
}

void OutputProcessor::StartMasks(const SchedulerOutput& out) {
  mask_jobs_.clear();
  for (const ScheduledWork& w : out.work) {
    Sequence* s = w.seq;
    if (s->finished() || !s->output || !s->output->grammar || s->output->mask_ready) continue;
    const bool samples = s->num_computed + w.num_new_tokens == static_cast<int>(s->tokens.size()) &&
                         s->request->params.sampling.max_tokens > 0;
    if (samples) mask_jobs_.push_back(s->output.get());
  }
  if (mask_jobs_.empty()) return;
  if (!mask_worker_) mask_worker_ = std::make_unique<WorkerThread>();
  mask_seconds_.assign(mask_jobs_.size(), 0.0);
  mask_worker_->Post([this] {
    for (size_t i = 0; i < mask_jobs_.size(); ++i) {
      const Clock::time_point start = Clock::now();
      SequenceOutput& o = *mask_jobs_[i];
      o.grammar->FillMask(&o.mask);
      o.mask_ready = true;
      mask_seconds_[i] = Seconds(Clock::now() - start);
    }
  });
}

void OutputProcessor::WaitMasks() {
  if (mask_jobs_.empty()) return;
  mask_worker_->Wait();
  for (double seconds : mask_seconds_) parts_.stats->grammar_mask.Observe(seconds);
  mask_jobs_.clear();
}

void OutputProcessor::Process(const SchedulerOutput& out, std::span<float> logits) {
  const size_t vocab = static_cast<size_t>(config_.vocab_size);
  size_t logits_row = 0;
  for (const ScheduledWork& w : out.work) {
    Sequence* s = w.seq;
    const int prompt_part = std::max(0, std::min(s->num_computed + w.num_new_tokens, s->prompt_len) - s->num_computed);
    parts_.stats->prompt_tokens_total += prompt_part;
    s->num_computed += w.num_new_tokens;
    if (!s->window.sliding()) {
      parts_.cache->CommitComputed(s->id, s->tokens, s->num_computed, s->request->params.cache_salt);
    }
    MaybeCompact(s);
    // Rows [logits_row, logits_row + num_logits) hold the logits of the chunk's last positions.
    std::span<float> rows = logits.subspan(logits_row * vocab, static_cast<size_t>(w.num_logits) * vocab);
    logits_row += static_cast<size_t>(w.num_logits);
    if (s->finished()) continue;  // e.g. aborted while its step ran
    const int first_position = s->num_computed - w.num_logits;
    const bool ends_known_tokens = s->num_computed == static_cast<int>(s->tokens.size());
    for (int k = 0; k + (ends_known_tokens ? 1 : 0) < w.num_logits; ++k) {
      ScorePromptToken(s, first_position + k, rows.subspan(static_cast<size_t>(k) * vocab, vocab));
    }
    if (!ends_known_tokens) continue;  // prefill continues
    CHECK_GE(w.num_logits, 1) << "sequence " << s->id << " reached its last token without logits";
    Request* r = s->request;
    if (s->wants_prompt_logprobs) {
      CHECK(!s->prompt_logprobs_pending()) << "prompt logprobs incomplete at the end of the prompt";
      StreamDelta delta;
      delta.index = s->choice;
      delta.prompt_logprobs = std::move(s->output->prompt_logprobs);
      s->wants_prompt_logprobs = false;
      r->stream->Push(std::move(delta));
    }
    if (r->params.sampling.max_tokens == 0) {
      FinishWithoutTokens(r);
      continue;
    }
    std::span<float> row = rows.last(vocab);
    if (r->params.n > 1 && s->choice == 0 && !s->forked_children) ForkChoices(s, row);
    SampleAndEmit(s, row);
    if (config_.recompute_every_token && !s->finished()) {
      parts_.cache->Free(s->id);
      s->holds_cache = false;
      s->num_computed = 0;
    }
  }
}

void OutputProcessor::ScorePromptToken(Sequence* seq, int pos, std::span<const float> logits) {
  CHECK(seq->prompt_logprobs_pending() && pos == seq->num_prompt_logprobs - 1)
      << "logits row for position " << pos << " of sequence " << seq->id << " that scores nothing";
  const int32_t id = seq->tokens[static_cast<size_t>(pos) + 1];
  SampledToken scored = ScoreToken(logits, id, seq->request->params.sampling.prompt_logprobs);
  seq->output->prompt_logprobs.push_back({id, scored.logprob, std::move(scored.top_logprobs)});
  ++seq->num_prompt_logprobs;
}

void OutputProcessor::FinishWithoutTokens(Request* r) {
  for (auto& s : r->seqs) {
    s->forked_children = true;  // no fork will happen
    StreamDelta delta;
    delta.index = s->choice;
    delta.finish_reason = FinishReason::kLength;
    r->stream->Push(std::move(delta));
    FinishSequence(s.get(), FinishReason::kLength);
  }
}

void OutputProcessor::SampleAndEmit(Sequence* seq, std::span<float> logits) {
  Request* r = seq->request;
  SequenceOutput& out = *seq->output;
  Profiler::Scope sample_scope(config_.profiler, ProfileOp::kSample);
  SampledToken sampled;
  bool structure_ends = false;
  if (!out.grammar) {
    sampled = out.sampler->Sample(logits, scratch_);
  } else if (!SampleStructured(seq, logits, &sampled, &structure_ends)) {
    return;
  }
  sample_scope.Stop();
  Profiler::Scope detok_scope(config_.profiler, ProfileOp::kDetokenize);
  const int32_t id = sampled.id;
  seq->tokens.push_back(id);
  out.sampler->Accept(id);
  ++seq->num_generated;
  ++r->usage.completion_tokens;
  EngineStats& stats = *parts_.stats;
  ++stats.generation_tokens_total;

  const Clock::time_point now = Clock::now();
  if (!r->first_token) {
    r->first_token = now;
    r->usage.time_to_first_token_s = Seconds(now - r->submitted);
    stats.time_to_first_token.Observe(r->usage.time_to_first_token_s);
  } else if (seq->num_generated > 1) {
    stats.inter_token_latency.Observe(Seconds(now - out.last_token_time));
  }
  out.last_token_time = now;

  StreamDelta delta;
  delta.index = seq->choice;
  delta.token_ids.push_back(id);
  if (r->params.sampling.logprobs >= 0) {
    delta.logprobs.push_back({id, sampled.logprob, sampled.top_logprobs});
  }
  std::optional<FinishReason> finish;
  const bool stop_token = structure_ends || out.sampler->IsStopToken(id);
  if (stop_token) finish = FinishReason::kStop;
  const std::string rendered_trigger = out.awaiting_trigger && !stop_token ? WatchTrigger(seq, id) : "";
  if (out.detokenizer && !stop_token) {
    const std::string piece = out.detokenizer->Push(id) + rendered_trigger;
    // Stop strings apply once min_tokens have been generated.
    if (seq->num_generated > r->params.sampling.min_tokens) {
      StopMatcherOutput m = out.stop->Feed(piece);
      delta.text = std::move(m.text);
      if (m.stop_index) {
        finish = FinishReason::kStop;
        out.matched_stop = out.stop->stop_strings()[*m.stop_index];
      }
    } else {
      delta.text = piece;
    }
  }
  if (!finish && seq->num_generated >= r->params.sampling.max_tokens) finish = FinishReason::kLength;
  if (!finish && !seq->window.sliding() && static_cast<int>(seq->tokens.size()) >= config_.max_model_len) {
    finish = FinishReason::kLength;
  }
  if (finish && out.detokenizer && out.matched_stop.empty()) {
    // Release held-back bytes and text that could have started a stop string.
    StopMatcherOutput m = out.stop->Feed(out.detokenizer->Flush());
    delta.text += m.text;
    if (m.stop_index) {
      out.matched_stop = out.stop->stop_strings()[*m.stop_index];
    } else {
      delta.text += out.stop->Finish();
    }
  }
  if (finish) {
    delta.finish_reason = finish;
    delta.matched_stop = out.matched_stop;
  }
  detok_scope.Stop();
  Profiler::Scope publish_scope(config_.profiler, ProfileOp::kPublish);
  r->stream->Push(std::move(delta));
  publish_scope.Stop();
  if (finish) FinishSequence(seq, *finish);
}

bool OutputProcessor::SampleStructured(Sequence* seq, std::span<float> logits, SampledToken* sampled, bool* ends) {
  SequenceOutput& out = *seq->output;
  if (!out.mask_ready) {  // a choice forked this step, or a step that did not prepare it
    const Clock::time_point start = Clock::now();
    out.grammar->FillMask(&out.mask);
    parts_.stats->grammar_mask.Observe(Seconds(Clock::now() - start));
  }
  out.mask_ready = false;
  if (out.grammar->exhausted()) {
    // An ambiguous grammar whose parse grew past its bound: this request fails, the batch
    // goes on (issue 54, D2).
    LOG_WARN("request {}: the grammar's parse exceeded its work bound for one token", seq->request->id);
    FinishSequence(seq, FinishReason::kError);
    return false;
  }
  const TokenMask& mask = out.mask;
  const int logprobs = seq->request->params.sampling.logprobs;
  const int allowed = mask.Count();
  int ends_allowed = 0;
  for (int32_t id : stop_ids_) ends_allowed += mask.Test(id) ? 1 : 0;
  // One token allowed, or only end-of-text while ignore_eos or min_tokens forbid it (the
  // structure is complete: it wins): no draw.
  if (allowed == 1 || (allowed > 0 && ends_allowed == allowed && !out.sampler->eos_allowed())) {
    const int32_t id = mask.First();
    if (logprobs >= 0) *sampled = ScoreToken(logits, id, logprobs);  // the raw logits still
    sampled->id = id;
    ++parts_.stats->grammar_forced_tokens_total;
  } else {
    *sampled = out.sampler->Sample(logits, scratch_, &mask);
  }
  if (!mask.Test(sampled->id)) {
    // Nothing allowed could be drawn: a vocabulary that cannot spell what must come, or a
    // model whose logits are all -inf there.
    LOG_WARN("request {}: the structured output allows no token the model can give here", seq->request->id);
    FinishSequence(seq, FinishReason::kError);
    return false;
  }
  // Control tokens have no bytes: the only one allowed is end-of-text, where it may end.
  *ends = !out.grammar->AcceptToken(sampled->id);
  return true;
}

std::string OutputProcessor::WatchTrigger(Sequence* seq, int32_t id) {
  SequenceOutput& out = *seq->output;
  const std::vector<std::string>& triggers = seq->request->params.structured.triggers;
  const Tokenizer& tok = *parts_.tokenizer;
  std::string rendered;
  std::string piece = tok.TokenToPiece(id);
  if (piece.empty() && tok.token_type(id) == TokenType::kControl) {
    std::string special = tok.TokenToPiece(id, /*render_special=*/true);
    if (std::find(triggers.begin(), triggers.end(), special) != triggers.end()) piece = rendered = std::move(special);
  }
  out.trigger_tail += piece;
  size_t at = std::string::npos, longest = 0;
  for (const std::string& t : triggers) {
    at = std::min(at, out.trigger_tail.find(t));
    longest = std::max(longest, t.size());
  }
  if (at == std::string::npos) {
    // Only a trigger's first bytes can be left over for the next token.
    if (out.trigger_tail.size() >= longest) out.trigger_tail.erase(0, out.trigger_tail.size() - (longest - 1));
    return rendered;
  }
  auto matcher = std::make_unique<GrammarMatcher>(seq->request->grammar);
  if (matcher->AcceptBytes(std::string_view(out.trigger_tail).substr(at))) {
    out.grammar = std::move(matcher);
  } else {  // the token went on past the trigger where the grammar does not: the text stays free
    LOG_DEBUG("request {}: text after a trigger does not match its grammar", seq->request->id);
  }
  out.awaiting_trigger = false;
  out.trigger_tail.clear();
  return rendered;
}

void OutputProcessor::MaybeCompact(Sequence* seq) {
  if (config_.compact_every_tokens <= 0 || seq->finished()) return;
  seq->compacted_at = std::min(seq->compacted_at, seq->num_computed);  // recomputed after a preemption
  if (seq->num_computed - seq->compacted_at < config_.compact_every_tokens) return;
  seq->compacted_at = seq->num_computed;
  const std::vector<std::pair<BlockId, BlockId>> copies = parts_.cache->Compact(seq->id, config_.compact_keep_tokens);
  if (copies.empty()) return;
  if (Status st = parts_.runner->CopyBlocks(copies); !st.ok()) {
    LOG_ERROR("compaction of sequence {} failed: {}", seq->id, st.ToString());
    FailRequest(seq->request, InternalError("compacting the KV cache failed: " + st.message()));
  }
}

void OutputProcessor::ForkChoices(Sequence* parent, std::span<const float> logits) {
  parent->forked_children = true;
  Request* r = parent->request;
  Scheduler& scheduler = *parts_.scheduler;
  for (size_t c = 1; c < r->seqs.size(); ++c) {
    Sequence* child = r->seqs[c].get();
    child->window = parent->window;
    std::optional<std::vector<std::pair<BlockId, BlockId>>> copies = parts_.cache->Fork(parent->id, child->id);
    if (copies && parts_.runner->CopyBlocks(*copies).ok()) {
      child->holds_cache = true;
      child->tokens = parent->tokens;
      child->num_computed = parent->num_computed;
      child->num_evicted = parent->num_evicted;
      child->scheduled_once = true;
      std::copy(logits.begin(), logits.end(), fork_logits_.begin());
      // The running set never exceeds max_num_seqs (nor a step's logits rows): a choice that
      // does not fit waits, holding its forked cache.
      if (scheduler.has_running_room()) {
        scheduler.AddRunning(child);
      } else {
        scheduler.AddWaiting(child);
      }
      SampleAndEmit(child, fork_logits_);
    } else {
      // No block for the copy: the choice prefills on its own (its full prompt blocks come
      // from the prefix cache).
      if (copies) parts_.cache->Free(child->id);
      scheduler.AddWaiting(child);
    }
  }
}

void OutputProcessor::FinishSequence(Sequence* seq, FinishReason reason) {
  if (seq->finished()) return;
  seq->finish = reason;
  seq->state = SeqState::kFinished;
  parts_.scheduler->Remove(seq);
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

void OutputProcessor::ReleaseSequence(Sequence* seq) {
  const Request* r = seq->request;
  if (seq->session_attached) {
    parts_.sessions->Detach(r->params.tenant, r->params.session_id, seq);
    seq->session_attached = false;
  } else if (seq->holds_cache) {
    parts_.cache->Free(seq->id);
  }
  seq->holds_cache = false;
}

void OutputProcessor::MaybeFinishRequest(Request* r) {
  if (r->done || !r->all_finished()) return;
  r->done = true;
  r->usage.duration_s = Seconds(Clock::now() - r->submitted);
  RequestOutcome outcome = RequestOutcome::kOk;
  if (!r->error.ok()) {
    outcome = r->error.code() == StatusCode::kCancelled ? RequestOutcome::kAborted : RequestOutcome::kError;
  }
  ++parts_.stats->requests_total[static_cast<int>(outcome)];
  parts_.stats->request_duration.Observe(r->usage.duration_s);
  if (parts_.on_request_end) parts_.on_request_end(r);  // before the client can see the end
  r->stream->Finish(r->error, r->usage);
  LOG_DEBUG("request {} done: prompt {} (cached {}), generated {}, ttft {:.3f}s, {:.3f}s, {}", r->id,
            r->usage.prompt_tokens, r->usage.cached_prompt_tokens, r->usage.completion_tokens,
            r->usage.time_to_first_token_s, r->usage.duration_s, r->error.ok() ? "ok" : r->error.ToString());
  finished_.push_back(r->id);
}

void OutputProcessor::FailRequest(Request* r, Status why) {
  if (r->done) return;
  r->error = std::move(why);
  for (auto& s : r->seqs) FinishSequence(s.get(), FinishReason::kError);
  MaybeFinishRequest(r);
}

std::vector<uint64_t> OutputProcessor::TakeFinished() {
  std::vector<uint64_t> ids;
  ids.swap(finished_);
  return ids;
}

}  // namespace kvserve
