#include "engine/model_runner.h"

#include <fmt/format.h>

#include <algorithm>

namespace kvserve {

ModelRunner::ModelRunner(Backend* backend, KvCacheManager* cache, int vocab_size, Profiler* profiler)
    : backend_(backend), cache_(cache), vocab_size_(vocab_size), profiler_(profiler) {}

Status ModelRunner::ExecuteStep(const SchedulerOutput& out, std::span<float> logits, std::vector<Request*>* failed) {
  failed->clear();
  for (size_t i = 0; i < out.block_ops.size(); ++i) {
    Status st = Apply(out.block_ops[i]);
    if (st.ok()) continue;
    // The caches of this op's sequence and of every later op's are no longer what the
    // bookkeeping says; the batch would read them.
    ++num_steps_;
    for (size_t j = i; j < out.block_ops.size(); ++j) failed->push_back(out.block_ops[j].seq->request);
    for (const ScheduledWork& w : out.work) failed->push_back(w.seq->request);
    return st;
  }
  // The byte movements are done (a swapped-out block's staged keys went with it): staged keys of
  // blocks the cache has freed can go. The pass below writes only blocks its sequences hold.
  backend_->ReleaseStaging([this](int32_t block) { return cache_->is_free_block(block); });
  if (out.work.empty()) return OkStatus();
  seqs_.clear();
  for (const ScheduledWork& w : out.work) {
    const Sequence& s = *w.seq;
    seqs_.push_back({s.id, std::span<const int32_t>(s.tokens).subspan(s.num_computed, w.num_new_tokens),
                     s.cache_position(), w.num_logits});
  }
  const int64_t index = num_steps_++;
  Status st = fail_forward_ && fail_forward_(index)
                  ? InternalError(fmt::format("injected forward fault at pass {} (test hook)", index))
                  : Execute(seqs_, logits);
  if (!st.ok()) {
    for (const ScheduledWork& w : out.work) failed->push_back(w.seq->request);
  }
  return st;
}

Status ModelRunner::Apply(const BlockOp& op) {
  switch (op.kind) {
    case BlockOp::Kind::kSwapOut: return MoveSwapBlocks(op.swap, /*to_host=*/true);
    case BlockOp::Kind::kSwapIn: return MoveSwapBlocks(op.swap, /*to_host=*/false);
    case BlockOp::Kind::kCopy: return CopyBlocks(op.copies);
    case BlockOp::Kind::kShiftKeys: return backend_->ShiftKeys(op.blocks, op.delta);
  }
  return InternalError("unknown block operation");
}

Status ModelRunner::CopyBlocks(std::span<const std::pair<BlockId, BlockId>> src_dst) {
  return backend_->CopyBlocks(src_dst);
}

Status ModelRunner::MoveSwapBlocks(const KvCacheManager::SwapPlan& plan, bool to_host) {
  const size_t bytes = cache_->spec().block_bytes();
  transfers_.clear();
  for (const auto& [device, host] : plan.device_host) {
    transfers_.push_back({device, std::span<uint8_t>(cache_->host_block_data(host), bytes)});
  }
  return to_host ? backend_->ReadBlocks(transfers_) : backend_->WriteBlocks(transfers_);
}

Status ModelRunner::Execute(std::span<const ScheduledSeq> seqs, std::span<float> logits) {
  Profiler::Scope build_scope(profiler_, ProfileOp::kBatchBuild);
  const int bs = cache_->block_size();
  token_ids_.clear();
  positions_.clear();
  slot_mapping_.clear();
  query_start_.assign(1, 0);
  seq_lens_.clear();
  logits_indices_.clear();
  int max_blocks = 1;
  for (const ScheduledSeq& s : seqs) {
    max_blocks = std::max(max_blocks, (s.start_position + static_cast<int>(s.tokens.size()) + bs - 1) / bs);
  }
  block_tables_.assign(seqs.size() * static_cast<size_t>(max_blocks), -1);

  for (size_t i = 0; i < seqs.size(); ++i) {
    const ScheduledSeq& s = seqs[i];
    CHECK(!s.tokens.empty()) << "scheduled sequence " << s.seq << " has no tokens";
    CHECK(s.num_logits >= 0 && s.num_logits <= static_cast<int>(s.tokens.size()))
        << "sequence " << s.seq << " wants " << s.num_logits << " logits rows for " << s.tokens.size() << " tokens";
    const BlockTable& table = cache_->table(s.seq);
    const int end = s.start_position + static_cast<int>(s.tokens.size());
    CHECK_LE(end, table.capacity(bs)) << "slots not reserved for sequence " << s.seq;
    std::span<const BlockId> blocks = table.blocks();
    const int used_blocks = (end + bs - 1) / bs;
    std::copy_n(blocks.begin(), used_blocks, block_tables_.begin() + i * max_blocks);
    for (size_t j = 0; j < s.tokens.size(); ++j) {
      const int pos = s.start_position + static_cast<int>(j);
      token_ids_.push_back(s.tokens[j]);
      positions_.push_back(pos);
      slot_mapping_.push_back(static_cast<int64_t>(blocks[pos / bs]) * bs + pos % bs);
    }
    query_start_.push_back(static_cast<int32_t>(token_ids_.size()));
    seq_lens_.push_back(end);
    for (int k = s.num_logits; k > 0; --k) logits_indices_.push_back(static_cast<int32_t>(token_ids_.size()) - k);
  }
  if (logits.size() < logits_indices_.size() * static_cast<size_t>(vocab_size_)) {
    return InvalidArgumentError("logits buffer too small for the step");
  }
  batch_.token_ids = token_ids_;
  batch_.positions = positions_;
  batch_.slot_mapping = slot_mapping_;
  batch_.query_start = query_start_;
  batch_.seq_lens = seq_lens_;
  batch_.block_tables = block_tables_;
  batch_.max_blocks_per_seq = max_blocks;
  batch_.logits_indices = logits_indices_;
  build_scope.Stop();
  return backend_->Forward(batch_, logits);
}

}  // namespace kvserve
