#include "engine/engine_core.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "common/log.h"

namespace kvserve {
namespace {

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count();
}

constexpr double kStallSeconds = 30.0;
constexpr double kMaxFaultCooldownSeconds = 60.0;
constexpr double kThroughputWindowSeconds = 5.0;
constexpr auto kCacheStatsInterval = std::chrono::milliseconds(10);

}  // namespace

StatusOr<std::unique_ptr<Engine>> Engine::Create(const EngineConfig& config, std::shared_ptr<const Model> model,
                                                 std::unique_ptr<Backend> backend) {
  auto engine = std::make_unique<EngineCore>(config, std::move(model), std::move(backend));
  RETURN_IF_ERROR(engine->Init());
  return std::unique_ptr<Engine>(std::move(engine));
}

EngineCore::EngineCore(const EngineConfig& config, std::shared_ptr<const Model> model,
                       std::unique_ptr<Backend> backend)
    : config_(config), model_(std::move(model)), backend_(std::move(backend)),
      vocab_size_(model_->config().vocab_size) {}

EngineCore::~EngineCore() {
  Stop();
  // The host tier's memory goes with cache_: the backend lets go of it first.
  if (backend_ != nullptr && cache_ != nullptr && !cache_->host_tier_memory().empty()) {
    (void)backend_->RegisterHostMemory({});
  }
}

Status EngineCore::Init() {
  const ModelConfig& mc = model_->config();
  if (config_.num_blocks <= 0) return InvalidArgumentError("the KV cache needs at least one block");
  if (config_.recompute_every_token && config_.enable_prefix_caching) {
    return InvalidArgumentError("recompute_every_token needs prefix caching off");
  }
  if (config_.max_num_seqs <= 0 || config_.max_num_batched_tokens <= 0) {
    return InvalidArgumentError("max_num_seqs and max_num_batched_tokens must be positive");
  }
  if (!(config_.aging_horizon_seconds > 0) || !(config_.fault_cooldown_seconds >= 0)) {
    return InvalidArgumentError("aging_horizon_seconds must be positive and fault_cooldown_seconds not negative");
  }
  KvSpecConfig kv = config_.kv;
  kv.num_layers = mc.num_layers;
  kv.num_kv_heads = mc.num_kv_heads;
  kv.head_dim = mc.head_dim;
  ASSIGN_OR_RETURN(KvSpec spec, KvSpec::Create(kv));
  RETURN_IF_ERROR(backend_->InitKvCache(spec, config_.num_blocks));
  KvCacheManagerConfig cc;
  cc.num_blocks = config_.num_blocks;
  cc.enable_prefix_caching = config_.enable_prefix_caching;
  cc.num_host_blocks = config_.num_host_blocks;
  if (config_.num_compact_blocks > 0) {
    ASSIGN_OR_RETURN(cc.compact_spec, CompactSpecFor(spec, config_.compact_dtype));
    RETURN_IF_ERROR(backend_->InitCompactKvCache(*cc.compact_spec, config_.num_compact_blocks));
    cc.num_compact_blocks = config_.num_compact_blocks;
  }
  cache_ = std::make_unique<KvCacheManager>(spec, cc);
  cache_->set_record_prefix_events(config_.prefix_event_sink != nullptr);
  if (!cache_->host_tier_memory().empty()) RETURN_IF_ERROR(backend_->RegisterHostMemory(cache_->host_tier_memory()));

  // A sequence can never hold more than the whole pool.
  context_len_ = max_model_len_ = config_.max_model_len > 0 ? config_.max_model_len : mc.context_length;
  const int pool_tokens = config_.num_blocks * spec.block_size();
  if (max_model_len_ > pool_tokens) {
    LOG_WARN("KV pool holds {} tokens; limiting sequences to that (model context {})", pool_tokens, max_model_len_);
    max_model_len_ = pool_tokens;
  }

  backend_->SetProfiler(config_.profiler);
  runner_ = std::make_unique<ModelRunner>(backend_.get(), cache_.get(), vocab_size_, config_.profiler);
  runner_->set_fail_forward(config_.test_hooks.fail_forward);
  ChatSessionConfig sc;
  sc.max_sessions = config_.max_sessions;
  sc.max_per_tenant = config_.max_sessions_per_tenant;
  sc.ttl_seconds = config_.session_ttl_seconds;
  if (config_.chat_window_tokens > 0) {
    sc.window = WindowPolicy::Sliding(config_.chat_window_tokens, config_.chat_sink_tokens);
  }
  ChatSessionStore::ByteMover mover;
  mover.swap = [this](const KvCacheManager::SwapPlan& plan, bool to_host) {
    return runner_->MoveSwapBlocks(plan, to_host);
  };
  mover.copy = [this](std::span<const std::pair<BlockId, BlockId>> copies) { return runner_->CopyBlocks(copies); };
  mover.read = [this](BlockId id, std::span<uint8_t> out) { return backend_->ReadBlock(id, out); };
  mover.write = [this](BlockId id, std::span<const uint8_t> in) { return backend_->WriteBlock(id, in); };
  if (config_.state) {
    sc.state = config_.state.get();
    sc.state_identity = StateIdentity(*model_, spec);
  }
  sc.max_model_len = max_model_len_;
  sessions_ = std::make_unique<ChatSessionStore>(sc, cache_.get(), &model_->tokenizer(),
                                                 [this] { return next_seq_id_++; }, std::move(mover));
  SchedulerConfig sched;
  sched.max_num_seqs = config_.max_num_seqs;
  sched.max_num_batched_tokens = config_.max_num_batched_tokens;
  sched.preempt_by_swap = config_.preempt_by_swap;
  sched.aging_horizon_seconds = config_.aging_horizon_seconds;
  scheduler_ = std::make_unique<Scheduler>(sched, cache_.get(), [this] { return sessions_->ReclaimOne(); });
  OutputProcessorConfig oc;
  oc.vocab_size = vocab_size_;
  oc.max_model_len = max_model_len_;
  oc.seed = config_.seed;
  oc.recompute_every_token = config_.recompute_every_token;
  oc.profiler = config_.profiler;
  if (config_.num_compact_blocks > 0) {
    oc.compact_every_tokens = std::max(1, config_.compact_every_tokens);
    oc.compact_keep_tokens = std::max(0, config_.compact_keep_tokens);
  }
  OutputProcessor::Parts parts;
  parts.cache = cache_.get();
  parts.runner = runner_.get();
  parts.scheduler = scheduler_.get();
  parts.sessions = sessions_.get();
  parts.tokenizer = &model_->tokenizer();
  parts.stats = &stats_;
  parts.on_request_end = [this](Request* r) { LeaveQueue(r); };
  output_ = std::make_unique<OutputProcessor>(oc, std::move(parts));
  grammars_ = std::make_unique<GrammarCache>(&model_->tokenizer(), config_.grammar);
  logits_.resize(static_cast<size_t>(config_.max_num_seqs) * vocab_size_);
  last_progress_ns_ = NowNs();
  PublishStats(/*full=*/true);
  thread_ = std::thread([this] { Loop(); });
  return OkStatus();
}

// ---------------------------------------------------------------- caller threads

StatusOr<std::shared_ptr<RequestStream>> EngineCore::Submit(GenerationRequest r) {
  if (!Healthy()) return UnavailableError("the engine is not healthy; retry shortly");
  if (r.prompt_tokens.empty()) return InvalidArgumentError("the prompt is empty");
  for (int32_t id : r.prompt_tokens) {
    if (id < 0 || id >= vocab_size_) {
      return InvalidArgumentError(fmt::format("token id {} is outside the vocabulary [0, {})", id, vocab_size_));
    }
  }
  if (r.n < 1 || r.n > kMaxChoices) return InvalidArgumentError(fmt::format("n must be in [1, {}]", kMaxChoices));
  if (r.n > config_.max_num_seqs) {
    return InvalidArgumentError(fmt::format("n = {} is more than this server runs at once (max_num_seqs = {})", r.n,
                                            config_.max_num_seqs));
  }
  if (r.session_id.size() > kMaxSessionIdBytes) {
    return InvalidArgumentError(fmt::format("the session id is longer than {} bytes", kMaxSessionIdBytes));
  }
  RETURN_IF_ERROR(r.sampling.Validate(vocab_size_));
  if (r.sampling.prompt_logprobs >= 0 && !r.session_id.empty()) {
    return InvalidArgumentError("prompt logprobs (echo with logprobs) cannot be combined with a chat session");
  }
  const int64_t prompt = static_cast<int64_t>(r.prompt_tokens.size());
  const bool windowed = !r.session_id.empty() && config_.chat_window_tokens > 0;
  if (!windowed && prompt + r.sampling.max_tokens > max_model_len_) {
    return OutOfRangeError(fmt::format(
        "this model's maximum context length is {} tokens, but {} were requested ({} in the prompt, "
        "{} for the completion)", max_model_len_, prompt + r.sampling.max_tokens, prompt, r.sampling.max_tokens));
  }
  if (windowed) {
    // The window bounds the cache, not the work: the prompt and the completion keep limits
    // from the context length (a pool smaller than it limits plain sequences, not these).
    const int64_t max_prompt = config_.chat_max_prompt_tokens > 0 ? config_.chat_max_prompt_tokens
                                                                  : int64_t{8} * context_len_;
    if (prompt > max_prompt) {
      return OutOfRangeError(fmt::format("a chat session's prompt is limited to {} tokens, but {} were sent",
                                         max_prompt, prompt));
    }
    if (r.sampling.max_tokens > context_len_) {
      return OutOfRangeError(fmt::format("max_tokens is {}, more than this model's context length of {} tokens",
                                         r.sampling.max_tokens, context_len_));
    }
  }
  auto request = std::make_unique<Request>();
  request->submitted = Clock::now();
  if (r.structured.active()) {
    for (const std::string& t : r.structured.triggers) {
      if (t.empty()) return InvalidArgumentError("a structured output's trigger must not be empty");
    }
    {
      // A request that would be refused for want of queue room compiles nothing.
      std::lock_guard<std::mutex> lock(intake_mu_);
      if (intake_closed_ || stop_ || draining_) return UnavailableError("the server is shutting down");
      if (!QueueHasRoomLocked()) return ResourceExhaustedError("too many queued requests; retry later");
    }
    // On the cache's compile threads; this caller waits (GrammarLimits::compile_timeout).
    StatusOr<GrammarCache::Compiled> compiled = grammars_->Get(r.structured);
    if (!compiled.ok()) {
      ++grammar_compile_errors_;
      return compiled.status();
    }
    request->grammar = std::move(compiled->grammar);
    request->grammar_compile_seconds = compiled->compile_seconds;
  }
  request->params = std::move(r);
  if (config_.test_hooks.before_enqueue) config_.test_hooks.before_enqueue(request->params);
  std::shared_ptr<RequestStream> stream;
  {
    // Checked under the lock the loop takes its last intake under: an accepted request is
    // always taken, so its stream always finishes.
    std::lock_guard<std::mutex> lock(intake_mu_);
    if (intake_closed_ || stop_ || draining_) return UnavailableError("the server is shutting down");
    if (!QueueHasRoomLocked()) return ResourceExhaustedError("too many queued requests; retry later");
    ++num_queued_;
    request->queued = true;
    request->id = next_request_id_++;
    request->stream = stream = std::make_shared<RequestStream>(request->id, request->params.n);
    ++num_in_flight_;
    intake_.push_back(std::move(request));
  }
  intake_cv_.notify_one();
  return stream;
}

void EngineCore::Abort(uint64_t request_id) {
  {
    std::lock_guard<std::mutex> lock(intake_mu_);
    intake_aborts_.push_back(request_id);
  }
  intake_cv_.notify_one();
}

EngineStats EngineCore::GetStats() const {
  std::lock_guard<std::mutex> lock(stats_mu_);
  return snapshot_;
}

int EngineCore::Drain(double grace_seconds) {
  draining_ = true;
  const Clock::time_point deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                                        std::chrono::duration<double>(grace_seconds));
  while (num_in_flight_.load() > 0 && Clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  const int remaining = num_in_flight_.load();
  if (remaining > 0) Stop();
  return remaining;
}

void EngineCore::Stop() {
  if (stop_.exchange(true)) {
    if (thread_.joinable()) thread_.join();
    return;
  }
  intake_cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

Status EngineCore::VerifyCacheIntegrity(double timeout_seconds, KvCacheStats* stats) {
  using Result = std::pair<Status, KvCacheStats>;
  StatusOr<Result> r = RunOnEngineThread<Result>(
      [this] { return Result{cache_->VerifyIntegrity(), cache_->stats()}; }, timeout_seconds);
  if (!r.ok()) return r.status();
  if (stats != nullptr) *stats = r->second;
  return r->first;
}

StatusOr<CacheSnapshot> EngineCore::SnapshotCache(double timeout_seconds) {
  return RunOnEngineThread<CacheSnapshot>([this] { return TakeCacheSnapshot(); }, timeout_seconds);
}

bool EngineCore::Healthy() const {
  const int64_t now = NowNs();
  if (now < fault_until_ns_.load()) return false;
  const double idle = static_cast<double>(now - last_progress_ns_.load()) / 1e9;
  return !(num_in_flight_.load() > 0 && idle > kStallSeconds);
}

bool EngineCore::AcceptingRequests() const {
  if (!Healthy()) return false;
  std::lock_guard<std::mutex> lock(intake_mu_);
  return !intake_closed_ && !stop_ && !draining_ && QueueHasRoomLocked();
}

bool EngineCore::QueueHasRoomLocked() const {
  // Requests in flight that are not queued hold scheduler slots; the free ones count as places
  // too, so a burst that arrives before the engine's next step still finds them.
  const int holding_slots = num_in_flight_.load() - num_queued_;
  return num_queued_ < config_.max_queued_requests + std::max(0, config_.max_num_seqs - holding_slots);
}

// ---------------------------------------------------------------- engine thread

void EngineCore::Loop() {
  while (!stop_) {
    TakeIntake();
    const Clock::time_point now = Clock::now();
    if (now - last_expiry_ > std::chrono::seconds(1)) {
      sessions_->Expire(now);
      last_expiry_ = now;
    }
    if (!HasWork()) {
      PublishStats(/*full=*/true);
      std::unique_lock<std::mutex> lock(intake_mu_);
      intake_cv_.wait_for(lock, std::chrono::seconds(1), [&] {
        return stop_ || !intake_.empty() || !intake_aborts_.empty() ||
               !intake_tasks_.empty();
      });
      last_progress_ns_ = NowNs();
      continue;
    }
    const bool ran = Step();
    if (!ran) {
      // Nothing fits: wait for aborts or new requests rather than spin, with current stats.
      PublishStats();
      std::unique_lock<std::mutex> lock(intake_mu_);
      intake_cv_.wait_for(lock, std::chrono::milliseconds(5));
      RetryParked();
    }
  }
  // Shutting down: close the intake (Submit refuses from now on), take what it holds, and
  // end everything in flight.
  {
    std::lock_guard<std::mutex> lock(intake_mu_);
    intake_closed_ = true;
  }
  TakeIntake();
  std::vector<uint64_t> ids;
  for (const auto& [id, r] : requests_) ids.push_back(id);
  for (uint64_t id : ids) AbortRequest(id, UnavailableError("the engine stopped"));
  ReapFinished();
  sessions_->SaveAll();  // with --state-dir: conversations continue after a restart
  PublishStats(/*full=*/true);
}

void EngineCore::LeaveQueue(Request* r) {
  if (!r->queued) return;
  r->queued = false;
  std::lock_guard<std::mutex> lock(intake_mu_);
  --num_queued_;
}

void EngineCore::ReapFinished() {
  for (uint64_t id : output_->TakeFinished()) {
    requests_.erase(id);
    --num_in_flight_;
  }
}

bool EngineCore::TakeIntake() {
  std::vector<std::unique_ptr<Request>> incoming;
  std::vector<uint64_t> aborts;
  std::vector<std::function<void()>> tasks;
  {
    std::lock_guard<std::mutex> lock(intake_mu_);
    incoming.swap(intake_);
    aborts.swap(intake_aborts_);
    tasks.swap(intake_tasks_);
  }
  // Aborts of admitted requests first: a client that stops a session's stream and sends the
  // next turn at once finds the session free. Then those of requests in this intake.
  for (uint64_t id : aborts) AbortRequest(id, CancelledError("request aborted"));
  for (auto& r : incoming) Admit(std::move(r));
  for (uint64_t id : aborts) AbortRequest(id, CancelledError("request aborted"));
  RetryParked();
  ReapFinished();
  for (auto& task : tasks) task();
  return !incoming.empty() || !aborts.empty();
}

CacheSnapshot EngineCore::TakeCacheSnapshot() const {
  CacheSnapshot snap;
  snap.blocks = cache_->BlockMap();
  snap.kv_dtype = cache_->spec().Describe();
  if (const KvSpec* compact = cache_->compact_spec()) {
    snap.compact_dtype = compact->Describe();
    snap.compact_block_bytes = static_cast<int64_t>(compact->block_bytes());
  }
  snap.stats = stats_;
  snap.stats.cache = cache_->stats();
  snap.stats.running = scheduler_->num_running();
  snap.stats.waiting = scheduler_->num_waiting();
  snap.stats.swapped = scheduler_->num_swapped();
  std::unordered_map<SeqId, const Sequence*> running;
  for (const auto& [id, r] : requests_) {
    for (const auto& s : r->seqs) {
      if (!s->finished()) running[s->id] = s.get();
    }
  }
  std::unordered_map<SeqId, const ChatSession*> idle;
  sessions_->ForEachIdleCache([&](const ChatSession& s) { idle[s.cache_seq] = &s; });
  for (const KvBlockMap::Seq& held : snap.blocks.seqs) {
    CacheOwner& o = snap.owners.emplace_back();
    if (auto it = running.find(held.id); it != running.end()) {
      const Sequence& s = *it->second;
      const Request& r = *s.request;
      o.kind = CacheOwner::Kind::kRequest;
      o.request_id = r.id;
      o.choice = s.choice;
      o.session_id = r.params.session_id;
      o.tenant = r.params.tenant;
      o.state = s.state == SeqState::kRunning ? "running" : s.state == SeqState::kSwapped ? "swapped" : "waiting";
      o.evicted_tokens = s.num_evicted;
      o.cached_prompt_tokens = r.usage.cached_prompt_tokens;
    } else if (auto session = idle.find(held.id); session != idle.end()) {
      o.kind = CacheOwner::Kind::kSession;
      o.session_id = session->second->id;
      o.tenant = session->second->tenant;
      o.state = "idle";
      o.evicted_tokens = session->second->num_evicted;
    }
  }
  return snap;
}

void EngineCore::Admit(std::unique_ptr<Request> request) {
  Request* r = request.get();
  r->arrival = next_arrival_++;
  r->usage.prompt_tokens = static_cast<int>(r->params.prompt_tokens.size());
  if (r->grammar) {
    if (r->grammar_compile_seconds > 0) {
      ++stats_.grammar_compiles_total;
      stats_.grammar_compile.Observe(r->grammar_compile_seconds);
    } else {
      ++stats_.grammar_cache_hits_total;
    }
  }
  for (int c = 0; c < r->params.n; ++c) r->seqs.push_back(output_->NewSequence(r, c, next_seq_id_++));
  requests_.emplace(r->id, std::move(request));
  Sequence* first = r->seqs[0].get();
  if (r->params.sampling.max_tokens == 0 && !first->wants_prompt_logprobs) {
    output_->FinishWithoutTokens(r);  // nothing to compute
    return;
  }
  if (!r->params.session_id.empty()) {
    if (!QueueSessionRequest(r, /*may_wait=*/true)) {
      const auto wait = std::chrono::duration<double>(config_.session_busy_wait_seconds);
      parked_.emplace_back(r->id, Clock::now() + std::chrono::duration_cast<Clock::duration>(wait));
    }
    return;
  }
  // Choices after the first wait for its prompt and fork from it.
  scheduler_->AddWaiting(first);
}

void EngineCore::AbortRequest(uint64_t id, Status why) {
  auto it = requests_.find(id);
  if (it == requests_.end() || it->second->done) return;
  Request* r = it->second.get();
  r->aborted = true;
  r->error = std::move(why);
  for (auto& s : r->seqs) {
    if (!s->finished()) output_->FinishSequence(s.get(), FinishReason::kAbort);
  }
}

void EngineCore::FailStep(const std::vector<Request*>& requests, const Status& why) {
  ++stats_.forward_errors_total;
  if (++consecutive_failures_ >= kFaultAfterConsecutiveFailures) {
    const double cooldown = std::min(kMaxFaultCooldownSeconds,
                                     config_.fault_cooldown_seconds *
                                         std::pow(2.0, consecutive_failures_ - kFaultAfterConsecutiveFailures));
    fault_until_ns_ = NowNs() + static_cast<int64_t>(cooldown * 1e9);
    LOG_ERROR("{} failed steps in a row: refusing new requests for {:.1f} s", consecutive_failures_, cooldown);
  }
  LOG_ERROR("step failed for {} requests: {}", requests.size(), why.ToString());
  for (Request* r : requests) output_->FailRequest(r, InternalError("the forward pass failed for this batch"));
  ReapFinished();
  PublishStats();
}

bool EngineCore::Step() {
  const Clock::time_point start = Clock::now();
  const SchedulerOutput out = Schedule();
  output_->StartMasks(out);  // structured outputs' masks, while the forward pass runs
  Status st = runner_->ExecuteStep(out, logits_, &failed_);
  output_->WaitMasks();
  if (!st.ok()) {
    FailStep(failed_, st);
    return true;
  }
  if (out.empty()) return false;
  consecutive_failures_ = 0;
  fault_until_ns_ = 0;
  output_->Process(out, logits_);
  EndStep(start, out);
  return true;
}

SchedulerOutput EngineCore::Schedule() {
  Profiler::Scope scope(config_.profiler, ProfileOp::kSchedule);
  SchedulerOutput out = scheduler_->Schedule();
  scope.Stop();
  // Request accounting (the scheduler counts preemptions).
  for (const ScheduledWork& w : out.work) {
    Sequence* s = w.seq;
    LeaveQueue(s->request);  // before the (long) step
    if (!s->scheduled_once) {
      s->scheduled_once = true;
      // Of the client's prompt, what is not computed now: a session's sequence continues the
      // history as generated, whose tokens may differ in number from the prompt's.
      RequestUsage& u = s->request->usage;
      if (s->choice == 0 && s->num_computed > 0) {
        u.cached_prompt_tokens = std::clamp(u.prompt_tokens - (s->prompt_len - s->num_computed), 0, u.prompt_tokens);
      }
    }
  }
  stats_.preemptions_total = scheduler_->num_preemptions();
  return out;
}

void EngineCore::EndStep(Clock::time_point start, const SchedulerOutput& out) {
  const Clock::time_point end = Clock::now();
  stats_.last_step_seconds = Seconds(end - start);
  stats_.step_duration.Observe(stats_.last_step_seconds);
  stats_.last_batch_tokens = out.num_batched_tokens;
  stats_.last_batch_seqs = static_cast<int>(out.work.size());
  ++stats_.steps;
  last_progress_ns_ = NowNs();
  ReapFinished();
  if (config_.test_hooks.verify_integrity_each_step) {
    Status integrity = cache_->VerifyIntegrity();
    CHECK(integrity.ok()) << integrity.ToString();
  }
  PublishStats();
  if (config_.profiler) {
    config_.profiler->CountStep(std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - start).count());
  }
}

void EngineCore::PublishStats(bool full) {
  Profiler::Scope scope(config_.profiler, ProfileOp::kPublish);
  if (config_.prefix_event_sink) {
    std::vector<PrefixEvent> events = cache_->TakePrefixEvents();
    if (!events.empty()) {
      config_.prefix_event_sink(std::move(events), [this] { return cache_->SnapshotPrefixEvents(); });
    }
  }
  const Clock::time_point now = Clock::now();
  throughput_window_.emplace_back(now, stats_.generation_tokens_total);
  while (throughput_window_.size() > 2 && Seconds(now - throughput_window_.front().first) > kThroughputWindowSeconds) {
    throughput_window_.pop_front();
  }
  const double span = Seconds(now - throughput_window_.front().first);
  stats_.tokens_per_second =
      span > 0 ? static_cast<double>(stats_.generation_tokens_total - throughput_window_.front().second) / span : 0;
  stats_.running = scheduler_->num_running();
  stats_.grammar_compile_errors_total = grammar_compile_errors_.load();
  stats_.grammar_cache_bytes = static_cast<int64_t>(grammars_->cached_bytes());
  stats_.grammar_shared_mask_bytes = static_cast<int64_t>(grammars_->shared_mask_bytes());
  stats_.grammar_compiling = grammars_->num_compiling();
  stats_.waiting = scheduler_->num_waiting();
  stats_.swapped = scheduler_->num_swapped();
  stats_.chat_sessions = sessions_->size();
  stats_.healthy = NowNs() >= fault_until_ns_.load();
  if (full || now - last_cache_stats_ >= kCacheStatsInterval) {
    stats_.cache = cache_->stats();
    last_cache_stats_ = now;
  }
  std::lock_guard<std::mutex> lock(stats_mu_);
  snapshot_ = stats_;
}

}  // namespace kvserve
