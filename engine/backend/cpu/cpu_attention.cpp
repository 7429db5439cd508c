// CpuBackend::Attention: paged attention over the block tables (cpu_backend.h).
#include <omp.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <optional>

#include "engine/backend/cpu/cpu_backend.h"

namespace kvserve {
namespace {

// How attention reads one (layer, kv head) segment of a region's blocks (the main arena, or
// the compaction region with its own dtype).
struct SegmentReader {
  const uint8_t* arena;
  int32_t first_id;  // block ids of the region start here
  size_t block_bytes;
  int group;
  KvDtype d;
  bool quantized, per_channel;
  // Float rows are read in place; a quantized block's rows are decoded to F32 once (kf, vf)
  // for all queries of the tile, so a query's arithmetic does not depend on the tiling. A
  // lone query reads INT8/INT4 blocks in place where the kernels can (the same bits without
  // the decode pass).
  bool in_place;
  cpu::KvDotFn dot;
  cpu::KvAxpyFn axpy;
  cpu::KvDecodeFn decode;
  cpu::KvQuantDotFn dot_in_place;
  cpu::KvQuantAxpyFn axpy_in_place;
  size_t k_offset, v_offset, scales_offset, segment_bytes;

  SegmentReader(const cpu::KernelTable& kt, const KvSpec& s, const uint8_t* arena_, int32_t first, int layer,
                int g, int tile_count)
      : arena(arena_), first_id(first), block_bytes(s.block_bytes()), group(s.group_size()), d(s.dtype(layer, g)) {
    quantized = IsQuantized(d);
    per_channel = KeysPerChannel(d);
    in_place = quantized && tile_count == 1 && kt.kv_in_place(s.head_dim(), group);
    const int row_kind = static_cast<int>(quantized ? KvDtype::kF32 : d);
    dot = kt.kv_dot[row_kind];
    axpy = kt.kv_axpy[row_kind];
    decode = d == KvDtype::kInt8 ? kt.kv_decode_int8 : kt.kv_decode_int4;
    dot_in_place = d == KvDtype::kInt8 ? kt.kv_dot_int8 : kt.kv_dot_int4;
    axpy_in_place = d == KvDtype::kInt8 ? kt.kv_axpy_int8 : kt.kv_axpy_int4;
    k_offset = s.segment_offset(layer, 0, g);
    v_offset = s.segment_offset(layer, 1, g);
    scales_offset = s.scales_offset(layer, g);
    segment_bytes = scales_offset + (quantized ? sizeof(uint16_t) * s.block_size() * s.params_per_row() : 0);
  }
  const uint8_t* block(int32_t id) const { return arena + static_cast<size_t>(id - first_id) * block_bytes; }
};

}  // namespace

void CpuBackend::Attention(const ForwardBatch& b, int layer) {
  const ModelConfig& c = config_;
  const KvSpec& s = *spec_;
  const int bs = s.block_size();
  const int hd = c.head_dim;
  const int n_rep = c.num_heads / c.num_kv_heads;
  const int T = b.num_tokens();
  // Query tiles: up to query_tile_ consecutive tokens of one sequence (a prefill chunk) read
  // each K/V block once for all of them. Each query still takes the blocks in order with the
  // arithmetic it would do alone, so its result does not depend on the tiling.
  query_tiles_.clear();
  for (int seq = 0; seq < b.num_seqs(); ++seq) {
    for (int t = b.query_start[seq]; t < b.query_start[seq + 1]; t += query_tile_) {
      query_tiles_.push_back({seq, t, std::min(query_tile_, b.query_start[seq + 1] - t)});
    }
  }
  const int num_tiles = static_cast<int>(query_tiles_.size());
  const int units = num_tiles * c.num_kv_heads;
  // Work estimate: every query token reads its whole context once per kv head.
  int64_t work = 0;
  for (int t = 0; t < T; ++t) work += static_cast<int64_t>(b.positions[t] + 1) * hd * c.num_heads;
  const bool parallel = num_threads_ > 1 && work >= kParallelWork;
  const int window = c.LayerWindow(layer);
  const float cap = c.attn_logit_softcap;

#pragma omp parallel for schedule(dynamic, 1) if (parallel) num_threads(num_threads_)
  for (int u = 0; u < units; ++u) {
    // Head-major: a thread's consecutive units read the same head's keys and values, which
    // then stay in its L2 (all heads of a 4k context do not).
    const QueryTile tile = query_tiles_[u % num_tiles];
    const int g = u / num_tiles;
    const int32_t* table = &b.block_tables[static_cast<size_t>(tile.seq) * b.max_blocks_per_seq];
    const SegmentReader main_reader(*kernels_, s, kv_arena_, 0, layer, g, tile.count);
    const std::optional<SegmentReader> compact_reader =
        compact_spec_ ? std::optional<SegmentReader>(std::in_place, *kernels_, *compact_spec_, compact_arena_,
                                                     num_blocks_, layer, g, tile.count)
                      : std::nullopt;
    auto reader_of = [&](int32_t id) -> const SegmentReader& { return id < num_blocks_ ? main_reader : *compact_reader; };
    float* kf = &kv_ws_[static_cast<size_t>(2 * bs * hd) * omp_get_thread_num()];
    float* vf = kf + static_cast<size_t>(bs) * hd;

    // Per query i of the tile: acc [n_rep][hd], scores [n_rep][bs], max [n_rep], sum [n_rep].
    float* ws = &attn_ws_[attn_ws_stride_ * query_tile_ * omp_get_thread_num()];
    int lo = INT32_MAX, hi = 0;  // the tile's blocks: [lo, hi) in positions
    for (int i = 0; i < tile.count; ++i) {
      float* acc = ws + i * attn_ws_stride_;
      std::fill(acc, acc + n_rep * hd, 0.0f);
      std::fill(acc + n_rep * (hd + bs), acc + n_rep * (hd + bs + 1), -INFINITY);
      std::fill(acc + n_rep * (hd + bs + 1), acc + n_rep * (hd + bs + 2), 0.0f);
      const int ctx = b.positions[tile.first + i] + 1;
      // Keys before `first` are outside a windowed layer's reach: masked in their block.
      const int first = window > 0 ? std::max(0, ctx - window) : 0;
      lo = std::min(lo, first / bs * bs);
      hi = std::max(hi, ctx);
    }
    for (int start = lo; start < hi; start += bs) {
      const int32_t id = table[start / bs];
      const SegmentReader& rd = reader_of(id);
      const uint8_t* block = rd.block(id);
      const uint8_t* kseg = block + rd.k_offset;
      const uint8_t* vseg = block + rd.v_offset;
      if (start + bs < hi) {
        // A head's rows are a few KB per block, blocks far apart: the hardware prefetcher does
        // not see the next one coming (decode at long context waits on memory otherwise).
        const int32_t next_id = table[start / bs + 1];
        const SegmentReader& nr = reader_of(next_id);
        const uint8_t* next = nr.block(next_id);
        for (size_t off = 0; off < nr.segment_bytes; off += 64) {
          __builtin_prefetch(next + nr.k_offset + off);
          __builtin_prefetch(next + nr.v_offset + off);
        }
      }
      const auto* kscales = reinterpret_cast<const uint16_t*>(kseg + rd.scales_offset);
      const auto* vscales = reinterpret_cast<const uint16_t*>(vseg + rd.scales_offset);
      const int block_rows = std::min(bs, hi - start);  // written rows some query of the tile reads
      const bool quantized = rd.quantized, in_place = rd.in_place, per_channel = rd.per_channel;
      bool keys_decoded = false;
      if (quantized && !in_place) {
        rd.decode(cpu::KvRows{vseg, vscales, block_rows}, hd, rd.group, vf);
        if (!per_channel) {
          rd.decode(cpu::KvRows{kseg, kscales, block_rows}, hd, rd.group, kf);
          keys_decoded = true;
        }
      }
      for (int i = 0; i < tile.count; ++i) {
        const int t = tile.first + i;
        const int ctx = b.positions[t] + 1;
        const int first = window > 0 ? std::max(0, ctx - window) : 0;
        if (start >= ctx || start < first / bs * bs) continue;
        float* acc = ws + i * attn_ws_stride_;
        float* scores = acc + n_rep * hd;
        float* max = scores + n_rep * bs;
        float* sum = max + n_rep;
        const int n = std::min(bs, ctx - start);
        // Keys and values as float rows (the cache's, or decoded into kf / vf), or in place.
        const auto* decoded_k = reinterpret_cast<const uint8_t*>(kf);
        const auto* decoded_v = reinterpret_cast<const uint8_t*>(vf);
        cpu::KvRows krows{kseg, kscales, n};
        const cpu::KvRows vrows{quantized && !in_place ? decoded_v : vseg, vscales, n};
        cpu::KvDotFn key_dot = rd.dot;
        bool keys_in_place = false;
        if (per_channel && staging_ && start == (ctx - 1) / bs * bs) {  // INT4C: a query's own block is staged F16
          krows.data = reinterpret_cast<const uint8_t*>(staging_->rows(id, layer, g));
          key_dot = kernels_->kv_dot[static_cast<int>(KvDtype::kF16)];
        } else if (per_channel) {  // earlier blocks: per channel
          if (!keys_decoded) kernels_->kv_decode_channel(kseg, block_rows, kscales, hd, rd.group, kf);
          keys_decoded = true;
          krows.data = decoded_k;
        } else if (quantized) {
          keys_in_place = in_place;
          if (!in_place) krows.data = decoded_k;
        }
        const float* q = &q_[static_cast<size_t>(t) * c.q_dim() + static_cast<size_t>(g) * n_rep * hd];
        for (int r = 0; r < n_rep; ++r) {
          float* sc = scores + r * bs;
          if (keys_in_place) {
            rd.dot_in_place(q + r * hd, krows, hd, rd.group, sc);
          } else {
            key_dot(q + r * hd, krows, hd, sc);
          }
          if (cap > 0) {
            for (int j = 0; j < krows.n; ++j) sc[j] = cap * std::tanh(sc[j] / cap);
          }
          for (int j = 0; j < first - start; ++j) sc[j] = -INFINITY;
          const float block_max = kernels_->max(sc, krows.n);
          if (block_max > max[r]) {
            const float rescale = std::exp(max[r] - block_max);  // exp(-inf) = 0 on the first block
            for (int k = 0; k < hd; ++k) acc[r * hd + k] *= rescale;
            sum[r] *= rescale;
            max[r] = block_max;
          }
          sum[r] += kernels_->exp_sub_sum(sc, krows.n, max[r]);
          if (in_place) {
            rd.axpy_in_place(sc, vrows, hd, rd.group, acc + r * hd);
          } else {
            rd.axpy(sc, vrows, hd, acc + r * hd);
          }
        }
      }
    }
    for (int i = 0; i < tile.count; ++i) {
      const float* acc = ws + i * attn_ws_stride_;
      const float* sum = acc + n_rep * (hd + bs + 1);
      float* out = &att_[static_cast<size_t>(tile.first + i) * c.q_dim() + static_cast<size_t>(g) * n_rep * hd];
      for (int r = 0; r < n_rep; ++r) {
        const float inv = 1.0f / sum[r];
        for (int k = 0; k < hd; ++k) out[r * hd + k] = acc[r * hd + k] * inv;
      }
    }
  }
}

}  // namespace kvserve
