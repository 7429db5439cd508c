// KvCacheManager: sequences, allocation, prefix sharing, fork, truncate and pins. Sliding
// window and host offload live in kv_cache_manager_window_swap.cpp, stats and integrity in
// kv_cache_manager_verify.cpp; the shared state is in kv_cache_manager_impl.h.
#include "cache/kv_cache_manager.h"

#include <algorithm>
#include <map>
#include <string>

#include "cache/kv_cache_manager_impl.h"

namespace kvserve {

// ---- Impl helpers ----------------------------------------------------------------------

// Each segment's share of a block of `spec`, padding included, so the dtypes sum to
// block_bytes, times `blocks`.
static void AddBytesByDtype(const KvSpec& spec, int64_t blocks, std::map<std::string, int64_t>* out) {
  struct Segment {
    size_t offset;
    KvDtype dtype;
  };
  std::vector<Segment> segments;
  for (int l = 0; l < spec.num_layers(); ++l) {
    for (int kind = 0; kind < 2; ++kind) {
      for (int h = 0; h < spec.num_kv_heads(); ++h) segments.push_back({spec.segment_offset(l, kind, h), spec.dtype(l, h)});
    }
  }
  std::sort(segments.begin(), segments.end(), [](const Segment& a, const Segment& b) { return a.offset < b.offset; });
  for (size_t i = 0; i < segments.size(); ++i) {
    const size_t end = i + 1 < segments.size() ? segments[i + 1].offset : spec.block_bytes();
    (*out)[std::string(KvDtypeName(segments[i].dtype))] += static_cast<int64_t>(end - segments[i].offset) * blocks;
  }
}

KvCacheManager::Impl::Impl(const KvSpec& spec, const KvCacheManagerConfig& c)
    : block_size(spec.block_size()),
      config(c),
      pool(c.num_blocks, c.num_compact_blocks),
      index(c.num_blocks + c.num_compact_blocks, spec.block_size(), c.test_hooks.prefix_hash),
      host(c.num_host_blocks, spec.block_bytes()),
      pinned(c.num_blocks + c.num_compact_blocks, 0) {
  AddBytesByDtype(spec, c.num_blocks, &pool_bytes_by_dtype);
  if (c.num_compact_blocks > 0) AddBytesByDtype(*c.compact_spec, c.num_compact_blocks, &pool_bytes_by_dtype);
}

KvCacheManager::Impl::Seq& KvCacheManager::Impl::Get(SeqId id) {
  auto it = seqs.find(id);
  CHECK(it != seqs.end()) << "unknown sequence " << id;
  return it->second;
}

const KvCacheManager::Impl::Seq& KvCacheManager::Impl::Get(SeqId id) const {
  auto it = seqs.find(id);
  CHECK(it != seqs.end()) << "unknown sequence " << id;
  return it->second;
}

std::optional<BlockId> KvCacheManager::Impl::TakeBlock() {
  std::optional<BlockId> b = pool.Allocate();
  if (b && index.indexed(*b)) {
    index.Remove(*b);
    ++evicted_blocks[static_cast<int>(EvictionReason::kPrefixLru)];
  }
  return b;
}

std::vector<BlockId> KvCacheManager::Impl::MatchPrefix(std::span<const int32_t> tokens, std::string_view salt,
                                                       int max_blocks, std::vector<ChainLink>* chain) const {
  std::vector<BlockId> matched;
  BlockHash parent_hash{};
  PrefixRef parent = kPrefixRoot;
  for (int i = 0; i < max_blocks; ++i) {
    const auto block_tokens = tokens.subspan(static_cast<size_t>(i) * block_size, block_size);
    const BlockHash h = index.Hash(parent_hash, block_tokens, salt);
    const std::optional<BlockId> b = index.Find(h, parent, block_tokens, salt);
    if (!b) break;
    matched.push_back(*b);
    parent = index.ref(*b);
    parent_hash = h;
    if (chain != nullptr) chain->push_back({h, parent});
  }
  return matched;
}

void KvCacheManager::Impl::ReleaseTable(Seq& s, std::optional<EvictionReason> reason) {
  // Last block first: the free list then evicts a sequence's tail before its head, the part
  // a later prompt is most likely to share.
  auto& blocks = s.table.mutable_blocks();
  if (reason) evicted_blocks[static_cast<int>(*reason)] += static_cast<int64_t>(blocks.size());
  for (auto b = blocks.rbegin(); b != blocks.rend(); ++b) pool.Release(*b);
  blocks.clear();
  for (int32_t slot : s.host_slots) host.Release(slot);
  s.host_slots.clear();
  s.host_compact.clear();
}

void KvCacheManager::Impl::MaybeVerify() const {
  if (!config.test_hooks.verify_each_operation) return;
  const Status st = owner->VerifyIntegrity();
  CHECK(st.ok()) << st.ToString();
}

// ---- KvCacheManager --------------------------------------------------------------------

KvCacheManager::KvCacheManager(KvSpec spec, const KvCacheManagerConfig& config) : spec_(std::move(spec)) {
  CHECK_GT(config.num_blocks, 0);
  CHECK_GE(config.num_host_blocks, 0);
  CHECK_GE(config.num_compact_blocks, 0);
  if (config.num_compact_blocks > 0) {
    const KvSpec& c = *config.compact_spec;  // host slots (main block bytes) hold either kind
    CHECK(c.block_size() == spec_.block_size() && c.block_bytes() <= spec_.block_bytes())
        << "compaction spec " << c.Describe() << " does not fit blocks of " << spec_.Describe();
  }
  impl_ = std::make_unique<Impl>(spec_, config);
  impl_->owner = this;
}

static KvCacheManagerConfig WithBlocks(int num_blocks) {
  KvCacheManagerConfig c;
  c.num_blocks = num_blocks;
  return c;
}

KvCacheManager::KvCacheManager(KvSpec spec, int num_blocks) : KvCacheManager(std::move(spec), WithBlocks(num_blocks)) {}

KvCacheManager::~KvCacheManager() = default;

int KvCacheManager::num_blocks() const { return impl_->pool.num_blocks(); }
int KvCacheManager::num_free_blocks() const { return impl_->pool.num_free(); }
bool KvCacheManager::is_free_block(BlockId id) const { return impl_->pool.is_free(id); }
int KvCacheManager::num_used_blocks() const { return impl_->pool.num_used(); }
double KvCacheManager::usage_ratio() const {
  return static_cast<double>(num_used_blocks()) / num_blocks();
}

int KvCacheManager::AcquireCachedPrefix(SeqId seq, std::span<const int32_t> tokens, std::string_view salt) {
  Impl& m = *impl_;
  auto existing = m.seqs.find(seq);
  CHECK(existing == m.seqs.end() || (!existing->second.swapped && existing->second.table.num_tokens() == 0))
      << "AcquireCachedPrefix needs a new, empty sequence; " << seq << " holds tokens";
  if (!m.config.enable_prefix_caching || tokens.empty()) return 0;
  ++m.prefix_queries;
  m.prefix_query_tokens += static_cast<int64_t>(tokens.size());
  // At least one token is left to compute so the step produces logits.
  const int max_blocks = static_cast<int>((tokens.size() - 1) / block_size());
  std::vector<Impl::ChainLink> chain;
  const std::vector<BlockId> matched = m.MatchPrefix(tokens, salt, max_blocks, &chain);
  if (matched.empty()) return 0;
  Impl::Seq& s = m.seqs[seq];
  for (BlockId b : matched) {
    m.pool.Acquire(b);  // a cached (free) block leaves the free list
    s.table.Append(b);
  }
  const int covered = static_cast<int>(matched.size()) * block_size();
  s.table.set_num_tokens(covered);
  s.chain = std::move(chain);
  ++m.prefix_hits;
  m.prefix_hit_tokens += covered;
  m.MaybeVerify();
  return covered;
}

int KvCacheManager::BlocksNeeded(SeqId seq, int num_new_tokens) const {
  CHECK_GE(num_new_tokens, 0);
  auto it = impl_->seqs.find(seq);
  if (it == impl_->seqs.end()) return (num_new_tokens + block_size() - 1) / block_size();
  CHECK(!it->second.swapped) << "sequence " << seq << " is swapped out";
  return it->second.table.BlocksNeeded(num_new_tokens, block_size());
}

std::optional<std::vector<BlockId>> KvCacheManager::AllocateSlots(SeqId seq, int num_new_tokens) {
  Impl& m = *impl_;
  const int needed = BlocksNeeded(seq, num_new_tokens);
  if (needed > m.pool.num_free()) return std::nullopt;
  Impl::Seq& s = m.seqs[seq];
  const BlockTable& t = s.table;
  if (num_new_tokens > 0 && t.num_tokens() % block_size() != 0) {
    // New positions land in the partially filled last block: it must be private.
    const BlockId last = t.blocks().back();
    CHECK(m.pool.ref_count(last) == 1 && !m.index.indexed(last))
        << "sequence " << seq << " would write into shared block " << last;
  }
  std::vector<BlockId> added;
  for (int i = 0; i < needed; ++i) {
    const std::optional<BlockId> b = m.TakeBlock();
    CHECK(b.has_value());
    added.push_back(*b);
    s.table.Append(*b);
  }
  s.table.AddTokens(num_new_tokens);
  m.MaybeVerify();
  return added;
}

void KvCacheManager::CommitComputed(SeqId seq, std::span<const int32_t> tokens, int num_computed,
                                    std::string_view salt) {
  Impl& m = *impl_;
  Impl::Seq& s = m.Get(seq);
  CHECK(!s.swapped) << "sequence " << seq << " is swapped out";
  CHECK(num_computed >= 0 && num_computed <= s.table.num_tokens())
      << "sequence " << seq << " commits " << num_computed << " of " << s.table.num_tokens() << " positions";
  CHECK_LE(static_cast<size_t>(num_computed), tokens.size());
  if (!m.config.enable_prefix_caching || s.windowed || s.chain_broken) return;
  const int bs = block_size();
  const int full = num_computed / bs;
  for (int i = static_cast<int>(s.chain.size()); i < full; ++i) {
    const BlockId b = s.table.blocks()[i];
    if (m.pool.is_compact(b)) {
      s.chain_broken = true;  // compact blocks are never published
      break;
    }
    const auto block_tokens = tokens.subspan(static_cast<size_t>(i) * bs, bs);
    const BlockHash parent_hash = i == 0 ? BlockHash{} : s.chain[i - 1].hash;
    const PrefixRef parent = i == 0 ? kPrefixRoot : s.chain[i - 1].canonical;
    const BlockHash h = m.index.Hash(parent_hash, block_tokens, salt);
    std::optional<PrefixRef> canonical;
    if (m.index.indexed(b)) {
      // Already published (a prefix hit, a fork sibling or a pin): it must be this content.
      if (m.index.Find(h, parent, block_tokens, salt) == b) canonical = m.index.ref(b);
    } else {
      canonical = m.index.Publish(b, h, parent_hash, parent, block_tokens, salt);
    }
    if (!canonical) {
      s.chain_broken = true;  // collision or different salt: stop publishing this sequence
      break;
    }
    s.chain.push_back({h, *canonical});
  }
  m.MaybeVerify();
}

void KvCacheManager::set_record_prefix_events(bool on) { impl_->index.set_record_events(on); }

std::vector<PrefixEvent> KvCacheManager::TakePrefixEvents() { return impl_->index.TakeEvents(); }

std::vector<PrefixEvent> KvCacheManager::SnapshotPrefixEvents() const { return impl_->index.Snapshot(); }

void KvCacheManager::Free(SeqId seq) {
  auto it = impl_->seqs.find(seq);
  if (it == impl_->seqs.end()) return;
  impl_->ReleaseTable(it->second, std::nullopt);
  impl_->seqs.erase(it);
  impl_->MaybeVerify();
}

void KvCacheManager::Free(SeqId seq, EvictionReason reason) {
  auto it = impl_->seqs.find(seq);
  if (it == impl_->seqs.end()) return;
  impl_->ReleaseTable(it->second, reason);
  impl_->seqs.erase(it);
  impl_->MaybeVerify();
}

void KvCacheManager::Rename(SeqId from, SeqId to) {
  Impl& m = *impl_;
  CHECK(Contains(from) && !Contains(to)) << "Rename " << from << " -> " << to;
  auto node = m.seqs.extract(from);
  node.key() = to;
  m.seqs.insert(std::move(node));
  m.MaybeVerify();
}

std::optional<std::vector<std::pair<BlockId, BlockId>>> KvCacheManager::Truncate(SeqId seq, int num_tokens) {
  Impl& m = *impl_;
  Impl::Seq& s = m.Get(seq);
  CHECK(!s.swapped) << "sequence " << seq << " is swapped out";
  CHECK(num_tokens >= 0 && num_tokens <= s.table.num_tokens())
      << "Truncate " << seq << " to " << num_tokens << " of " << s.table.num_tokens();
  const int bs = block_size();
  const int keep_blocks = (num_tokens + bs - 1) / bs;
  auto& blocks = s.table.mutable_blocks();
  const bool partial = num_tokens % bs != 0;
  const BlockId partial_block = partial ? blocks[keep_blocks - 1] : kNoBlock;
  // A shared partial block, or a compact one (new rows are written in the main dtype), is
  // replaced by a private main-region copy.
  const bool needs_copy = partial && (m.pool.ref_count(partial_block) > 1 || m.pool.is_compact(partial_block));
  if (needs_copy) {
    int freed = 0;
    for (int i = keep_blocks; i < static_cast<int>(blocks.size()); ++i) {
      freed += m.pool.ref_count(blocks[i]) == 1 && !m.pool.is_compact(blocks[i]);
    }
    if (m.pool.num_free() + freed < 1) return std::nullopt;
  } else if (partial && m.index.indexed(partial_block)) {
    m.index.Remove(partial_block);  // held by this sequence alone: writable again
  }
  for (int i = static_cast<int>(blocks.size()) - 1; i >= keep_blocks; --i) m.pool.Release(blocks[i]);
  blocks.resize(keep_blocks);
  std::vector<std::pair<BlockId, BlockId>> copies;
  if (needs_copy) {
    const std::optional<BlockId> copy = m.TakeBlock();
    CHECK(copy.has_value());
    copies.emplace_back(partial_block, *copy);
    blocks[keep_blocks - 1] = *copy;
    m.pool.Release(partial_block);
  }
  s.table.set_num_tokens(num_tokens);
  if (static_cast<int>(s.chain.size()) > num_tokens / bs) s.chain.resize(num_tokens / bs);
  m.MaybeVerify();
  return copies;
}

std::optional<std::vector<std::pair<BlockId, BlockId>>> KvCacheManager::Fork(SeqId parent, SeqId child) {
  Impl& m = *impl_;
  CHECK(Contains(parent) && !Contains(child)) << "Fork " << parent << " -> " << child;
  const Impl::Seq& p = m.Get(parent);
  CHECK(!p.swapped) << "sequence " << parent << " is swapped out";
  const int bs = block_size();
  const bool partial = p.table.num_tokens() % bs != 0;
  if (partial && m.pool.num_free() == 0) return std::nullopt;
  Impl::Seq c;
  c.windowed = p.windowed;
  c.chain_broken = p.chain_broken;
  c.chain = p.chain;
  std::vector<std::pair<BlockId, BlockId>> copies;
  const auto blocks = p.table.blocks();
  for (size_t i = 0; i < blocks.size(); ++i) {
    if (partial && i + 1 == blocks.size()) {
      const std::optional<BlockId> copy = m.TakeBlock();
      CHECK(copy.has_value());
      copies.emplace_back(blocks[i], *copy);
      c.table.Append(*copy);
    } else {
      m.pool.Acquire(blocks[i]);
      c.table.Append(blocks[i]);
    }
  }
  c.table.set_num_tokens(p.table.num_tokens());
  m.seqs.emplace(child, std::move(c));
  m.MaybeVerify();
  return copies;
}

bool KvCacheManager::Contains(SeqId seq) const { return impl_->seqs.contains(seq); }

const BlockTable& KvCacheManager::table(SeqId seq) const {
  const Impl::Seq& s = impl_->Get(seq);
  CHECK(!s.swapped) << "sequence " << seq << " is swapped out";
  return s.table;
}

int KvCacheManager::num_sequences() const { return static_cast<int>(impl_->seqs.size()); }

std::vector<std::pair<BlockId, BlockId>> KvCacheManager::Compact(SeqId seq, int keep_recent_tokens) {
  Impl& m = *impl_;
  Impl::Seq& s = m.Get(seq);
  CHECK(!s.swapped) << "sequence " << seq << " is swapped out";
  std::vector<std::pair<BlockId, BlockId>> copies;
  const int bs = block_size();
  const int old_blocks = std::max(0, s.table.num_tokens() - std::max(keep_recent_tokens, 0)) / bs;
  auto& blocks = s.table.mutable_blocks();
  for (int i = 0; i < old_blocks && m.pool.num_compact_free() > 0; ++i) {
    const BlockId b = blocks[i];
    if (m.pool.is_compact(b) || m.pool.ref_count(b) != 1) continue;  // done, or shared
    const BlockId dst = *m.pool.AllocateCompact();
    copies.emplace_back(b, dst);
    blocks[i] = dst;
    m.pool.Release(b);  // a published block stays cached (LRU), as a finished sequence's do
  }
  m.compacted_blocks += static_cast<int64_t>(copies.size());
  m.MaybeVerify();
  return copies;
}

bool KvCacheManager::is_compact_block(BlockId id) const { return impl_->pool.is_compact(id); }
int KvCacheManager::num_compact_blocks() const { return impl_->pool.num_compact_blocks(); }
int KvCacheManager::num_free_compact_blocks() const { return impl_->pool.num_compact_free(); }
const KvSpec* KvCacheManager::compact_spec() const {
  return impl_->config.num_compact_blocks > 0 ? &*impl_->config.compact_spec : nullptr;
}

KvCacheManager::Pin KvCacheManager::PinPrefix(std::span<const int32_t> tokens, std::string_view salt) {
  Impl& m = *impl_;
  if (!m.config.enable_prefix_caching) return {};
  const int max_blocks = static_cast<int>(tokens.size() / block_size());
  std::vector<BlockId> matched = m.MatchPrefix(tokens, salt, max_blocks, nullptr);
  if (matched.empty()) return {};
  for (BlockId b : matched) {
    if (m.pinned[b]++ == 0) ++m.num_pinned;
    m.pool.Acquire(b);  // a pin is a holder: never on the free list, never evicted
  }
  const Pin pin{m.next_pin_id++, static_cast<int>(matched.size()) * block_size(), static_cast<int>(matched.size())};
  m.pins.emplace(pin.id, std::move(matched));
  m.MaybeVerify();
  return pin;
}

bool KvCacheManager::Unpin(PinId id) {
  Impl& m = *impl_;
  auto it = m.pins.find(id);
  if (it == m.pins.end()) return false;
  for (BlockId b : it->second) {
    if (--m.pinned[b] == 0) --m.num_pinned;
    m.pool.Release(b);
  }
  m.pins.erase(it);
  m.MaybeVerify();
  return true;
}

void KvCacheManager::UnpinAll() {
  Impl& m = *impl_;
  while (!m.pins.empty()) Unpin(m.pins.begin()->first);
}

int KvCacheManager::num_pinned_blocks() const { return impl_->num_pinned; }

}  // namespace kvserve
