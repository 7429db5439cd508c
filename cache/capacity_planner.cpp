#include "cache/capacity_planner.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <string>

namespace kvserve {

int64_t LlamaParameterCount(const LlamaShape& s) {
  const int64_t head_dim = s.head_dim > 0 ? s.head_dim : s.dim / std::max<int64_t>(s.num_heads, 1);
  const int64_t q_dim = s.num_heads * head_dim;
  const int64_t kv_dim = s.num_kv_heads * head_dim;
  const int64_t per_layer = s.dim * q_dim + 2 * s.dim * kv_dim + q_dim * s.dim  // q, k, v, o
                            + 3 * s.dim * s.ffn_dim                              // gate, up, down
                            + 2 * s.dim;                                         // norms
  return s.vocab_size * s.dim * (s.tied_output ? 1 : 2) + s.num_layers * per_layer + s.dim;
}

int64_t EstimateLlamaWeightBytes(const LlamaShape& s, double bits_per_weight) {
  const int64_t norms = (2 * s.num_layers + 1) * s.dim;
  const int64_t matrices = LlamaParameterCount(s) - norms;
  return static_cast<int64_t>(std::ceil(static_cast<double>(matrices) * bits_per_weight / 8.0)) + norms * 4;
}

std::span<const KvDtype> AllKvDtypes() {
  static constexpr std::array<KvDtype, 6> kAll = {KvDtype::kF32, KvDtype::kF16, KvDtype::kBF16, KvDtype::kInt8,
                                                  KvDtype::kInt4, KvDtype::kInt4C};
  return kAll;
}

int64_t NumBlocksForMemory(const KvSpec& spec, int64_t kv_memory_bytes) {
  if (kv_memory_bytes <= 0) return 0;
  return kv_memory_bytes / static_cast<int64_t>(spec.block_bytes());
}

StatusOr<CapacityPlanRow> PlanCapacity(const CapacityPlanConfig& c) {
  if (c.memory_bytes <= 0) return InvalidArgumentError("memory must be positive");
  if (c.weight_bytes < 0 || c.reserve_bytes < 0) return InvalidArgumentError("weights and reserve must be >= 0");
  if (c.context_tokens <= 0) return InvalidArgumentError("context length must be positive");
  ASSIGN_OR_RETURN(KvSpec spec, KvSpec::Create(c.kv));
  KvSpecConfig f16_config = c.kv;
  f16_config.dtype = KvDtype::kF16;
  f16_config.keep.clear();
  f16_config.group_size = 0;
  ASSIGN_OR_RETURN(KvSpec f16, KvSpec::Create(f16_config));

  CapacityPlanRow row;
  row.kv_setting = spec.Describe();
  row.dtype = spec.default_dtype();
  row.layered = !spec.is_uniform();
  row.weight_bytes = c.weight_bytes;
  row.kv_bytes_per_token = spec.bytes_per_token();
  row.staging_bytes_per_sequence = static_cast<int64_t>(spec.staging_bytes());
  row.kv_bytes_per_sequence =
      static_cast<int64_t>(spec.bytes_for_tokens(c.context_tokens)) + row.staging_bytes_per_sequence;
  row.ratio_to_f16 = spec.bytes_per_token() / f16.bytes_per_token();
  row.kv_memory_bytes = std::max<int64_t>(0, c.memory_bytes - c.weight_bytes - c.reserve_bytes);
  row.max_sequences = row.kv_memory_bytes / row.kv_bytes_per_sequence;
  row.num_blocks =
      NumBlocksForMemory(spec, row.kv_memory_bytes - row.max_sequences * row.staging_bytes_per_sequence);
  row.fits = row.max_sequences > 0;
  return row;
}

StatusOr<CapacityPlanRow> PlanCapacityCompacted(const CapacityPlanConfig& c, const CompactionPlan& p) {
  if (!(p.share > 0 && p.share < 1)) return InvalidArgumentError("compaction share must be in (0, 1)");
  if (p.every_tokens < 1 || p.keep_tokens < 0) return InvalidArgumentError("compaction every >= 1 and keep >= 0");
  ASSIGN_OR_RETURN(CapacityPlanRow row, PlanCapacity(c));
  ASSIGN_OR_RETURN(KvSpec spec, KvSpec::Create(c.kv));
  ASSIGN_OR_RETURN(KvSpec compact, CompactSpecFor(spec, p.dtype));
  const int64_t bs = spec.block_size();
  const int64_t main_blocks =
      std::min((c.context_tokens + bs - 1) / bs, (p.keep_tokens + p.every_tokens + bs - 1) / bs + 1);
  const int64_t compact_blocks = std::max<int64_t>(0, (c.context_tokens - p.keep_tokens) / bs);
  const int64_t main_bytes = main_blocks * static_cast<int64_t>(spec.block_bytes());
  const int64_t compact_bytes = compact_blocks * static_cast<int64_t>(compact.block_bytes());
  // As the engine: the compaction share of the memory (truncated), the rest for the pool.
  const int64_t compact_memory = static_cast<int64_t>(static_cast<double>(row.kv_memory_bytes) * p.share);
  const int64_t main_memory = row.kv_memory_bytes - compact_memory;
  row.kv_setting +=
      " + old " + std::string(KvDtypeName(p.dtype)) + " (group " + std::to_string(compact.group_size()) + ")";
  row.compact_bytes_per_sequence = compact_bytes;
  row.kv_bytes_per_sequence = main_bytes + compact_bytes;
  row.kv_bytes_per_token = static_cast<double>(row.kv_bytes_per_sequence) / static_cast<double>(c.context_tokens);
  row.ratio_to_f16 *= row.kv_bytes_per_token / spec.bytes_per_token();
  row.max_sequences = main_memory / main_bytes;
  if (compact_bytes > 0) row.max_sequences = std::min(row.max_sequences, compact_memory / compact_bytes);
  row.num_blocks = NumBlocksForMemory(spec, main_memory);
  row.fits = row.max_sequences > 0;
  return row;
}

StatusOr<std::vector<CapacityPlanRow>> PlanCapacityTable(const CapacityPlanConfig& config,
                                                         std::span<const KvDtype> dtypes) {
  std::vector<CapacityPlanRow> rows;
  for (KvDtype d : dtypes) {
    CapacityPlanConfig c = config;
    c.kv.dtype = d;
    c.kv.keep.clear();
    // A group size chosen for a quantized dtype must still be valid (INT4 needs an even one).
    ASSIGN_OR_RETURN(CapacityPlanRow row, PlanCapacity(c));
    rows.push_back(std::move(row));
  }
  if (!config.kv.keep.empty()) {
    ASSIGN_OR_RETURN(CapacityPlanRow row, PlanCapacity(config));
    rows.push_back(std::move(row));
  }
  return rows;
}

std::string FormatBytes(double bytes) {
  static constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int unit = 0;
  while (std::fabs(bytes) >= 1024.0 && unit < 4) {
    bytes /= 1024.0;
    ++unit;
  }
  char buf[64];
  if (unit == 0) {
    std::snprintf(buf, sizeof(buf), "%.0f B", bytes);
  } else {
    std::snprintf(buf, sizeof(buf), "%.2f %s", bytes, kUnits[unit]);
  }
  return buf;
}

std::string FormatCapacityPlan(std::span<const CapacityPlanRow> rows) {
  std::string out;
  char line[512];
  std::snprintf(line, sizeof(line), "%-44s %12s %12s %14s %7s %12s %10s %10s\n", "kv cache", "weights",
                "kv/token", "kv/sequence", "x f16", "kv memory", "blocks", "max seqs");
  out += line;
  for (const CapacityPlanRow& r : rows) {
    std::snprintf(line, sizeof(line), "%-44s %12s %12s %14s %7.3f %12s %10lld %10lld\n", r.kv_setting.c_str(),
                  FormatBytes(static_cast<double>(r.weight_bytes)).c_str(), FormatBytes(r.kv_bytes_per_token).c_str(),
                  FormatBytes(static_cast<double>(r.kv_bytes_per_sequence)).c_str(), r.ratio_to_f16,
                  FormatBytes(static_cast<double>(r.kv_memory_bytes)).c_str(), static_cast<long long>(r.num_blocks),
                  static_cast<long long>(r.max_sequences));
    out += line;
  }
  for (const CapacityPlanRow& r : rows) {
    if (r.staging_bytes_per_sequence == 0) continue;
    out += "\n" + r.kv_setting + ": kv/sequence includes " +
           FormatBytes(static_cast<double>(r.staging_bytes_per_sequence)) +
           " of F16 keys for the block being filled (host memory beside the pool, one per sequence)\n";
  }
  return out;
}

StatusOr<int64_t> ParseByteSize(std::string_view text) {
  auto bad = [&] { return InvalidArgumentError("cannot read '" + std::string(text) + "' as a byte size (e.g. 40GiB)"); };
  size_t i = 0;
  while (i < text.size() && (std::isdigit(static_cast<unsigned char>(text[i])) || text[i] == '.')) ++i;
  if (i == 0) return bad();
  double value = 0;
  try {
    value = std::stod(std::string(text.substr(0, i)));
  } catch (...) {
    return bad();
  }
  std::string unit;
  for (char ch : text.substr(i)) {
    if (ch != ' ') unit += static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  }
  double scale = 0;
  if (unit.empty() || unit == "b") scale = 1;
  else if (unit == "k" || unit == "kib") scale = 1024.0;
  else if (unit == "m" || unit == "mib") scale = 1024.0 * 1024;
  else if (unit == "g" || unit == "gib") scale = 1024.0 * 1024 * 1024;
  else if (unit == "t" || unit == "tib") scale = 1024.0 * 1024 * 1024 * 1024;
  else if (unit == "kb") scale = 1e3;
  else if (unit == "mb") scale = 1e6;
  else if (unit == "gb") scale = 1e9;
  else if (unit == "tb") scale = 1e12;
  else return bad();
  const double bytes = value * scale;
  if (!(bytes >= 0) || bytes > 9.0e18) return bad();
  return static_cast<int64_t>(std::llround(bytes));
}

}  // namespace kvserve
