#include "cache/kv_spec.h"

#include <algorithm>

namespace kvserve {
namespace {
constexpr size_t kSegmentAlign = 32;
size_t AlignUp(size_t v, size_t a) { return (v + a - 1) / a * a; }
}  // namespace

std::string_view KvDtypeName(KvDtype dtype) {
  switch (dtype) {
    case KvDtype::kF32: return "f32";
    case KvDtype::kF16: return "f16";
    case KvDtype::kBF16: return "bf16";
    case KvDtype::kInt8: return "int8";
    case KvDtype::kInt4: return "int4";
    case KvDtype::kInt4C: return "int4c";
  }
  return "unknown";
}

std::optional<KvDtype> ParseKvDtype(std::string_view name) {
  for (KvDtype d : {KvDtype::kF32, KvDtype::kF16, KvDtype::kBF16, KvDtype::kInt8, KvDtype::kInt4, KvDtype::kInt4C}) {
    if (KvDtypeName(d) == name) return d;
  }
  if (name == "fp32" || name == "float32") return KvDtype::kF32;
  if (name == "fp16" || name == "float16") return KvDtype::kF16;
  return std::nullopt;
}

size_t KvRowDataBytes(KvDtype dtype, int head_dim) {
  switch (dtype) {
    case KvDtype::kF32: return 4 * static_cast<size_t>(head_dim);
    case KvDtype::kF16:
    case KvDtype::kBF16: return 2 * static_cast<size_t>(head_dim);
    case KvDtype::kInt8: return static_cast<size_t>(head_dim);
    case KvDtype::kInt4:
    case KvDtype::kInt4C: return static_cast<size_t>(head_dim + 1) / 2;
  }
  return 0;
}

StatusOr<KvSpec> KvSpec::Create(const KvSpecConfig& config) {
  KvSpecConfig c = config;
  if (c.block_size == 0) c.block_size = DefaultBlockSize(c);
  if (c.num_layers <= 0 || c.num_kv_heads <= 0 || c.head_dim <= 0) {
    return InvalidArgumentError("KV spec needs positive layers, kv heads and head dim");
  }
  if (c.block_size <= 0 || c.block_size > 1024) {
    return InvalidArgumentError("block size must be in [1, 1024], got " + std::to_string(c.block_size));
  }
  KvSpec s;
  s.num_layers_ = c.num_layers;
  s.num_kv_heads_ = c.num_kv_heads;
  s.head_dim_ = c.head_dim;
  s.block_size_ = c.block_size;
  s.group_size_ = c.group_size > 0 ? c.group_size : std::min(c.head_dim, 128);
  if (s.group_size_ > 128 || c.head_dim % s.group_size_ != 0) {
    return InvalidArgumentError("KV group size " + std::to_string(s.group_size_) +
                                " must divide head dim " + std::to_string(c.head_dim) +
                                " and be at most 128");
  }
  if (c.head_dim / s.group_size_ > kMaxKvGroupsPerRow) {
    return InvalidArgumentError("KV group size " + std::to_string(s.group_size_) + " gives more than " +
                                std::to_string(kMaxKvGroupsPerRow) + " groups per row");
  }
  auto is_int4 = [](KvDtype d) { return RowDtype(d) == KvDtype::kInt4; };
  if ((is_int4(c.dtype) || is_int4(c.keep_dtype)) && s.group_size_ % 2 != 0) {
    return InvalidArgumentError("INT4 KV needs an even group size");
  }
  if ((KeysPerChannel(c.dtype) || KeysPerChannel(c.keep_dtype)) && c.head_dim > kMaxChannelKeyHeadDim) {
    return InvalidArgumentError("int4c KV supports head dims up to " + std::to_string(kMaxChannelKeyHeadDim));
  }
  s.default_dtype_ = c.dtype;
  s.dtypes_.assign(static_cast<size_t>(c.num_layers) * c.num_kv_heads, c.dtype);
  for (const KvSpecConfig::Keep& k : c.keep) {
    if (k.layer < 0 || k.layer >= c.num_layers) {
      return InvalidArgumentError("kv-keep layer " + std::to_string(k.layer) + " out of range [0, " +
                                  std::to_string(c.num_layers) + ")");
    }
    if (k.head < -1 || k.head >= c.num_kv_heads) {
      return InvalidArgumentError("kv-keep head " + std::to_string(k.head) + " out of range [0, " +
                                  std::to_string(c.num_kv_heads) + ")");
    }
    for (int h = 0; h < c.num_kv_heads; ++h) {
      if (k.head == -1 || k.head == h) s.dtypes_[s.Index(k.layer, h)] = c.keep_dtype;
    }
  }
  s.uniform_ = std::all_of(s.dtypes_.begin(), s.dtypes_.end(),
                           [&](KvDtype d) { return d == s.dtypes_[0]; });
  s.segment_offsets_.resize(static_cast<size_t>(c.num_layers) * 2 * c.num_kv_heads);
  size_t offset = 0;
  for (int l = 0; l < c.num_layers; ++l) {
    for (int kind = 0; kind < 2; ++kind) {
      for (int h = 0; h < c.num_kv_heads; ++h) {
        s.segment_offsets_[(static_cast<size_t>(l) * 2 + kind) * c.num_kv_heads + h] = offset;
        const KvDtype d = s.dtype(l, h);
        size_t bytes = static_cast<size_t>(c.block_size) * KvRowDataBytes(d, c.head_dim);
        if (KeysPerChannel(d) && kind == 0) {
          bytes += static_cast<size_t>(c.head_dim) * kKvParamsPerGroup * 2;  // per channel
        } else if (IsQuantized(d)) {
          bytes += static_cast<size_t>(c.block_size) * s.params_per_row() * 2;
        }
        offset += AlignUp(bytes, kSegmentAlign);
      }
    }
  }
  s.block_bytes_ = AlignUp(offset, 64);
  if (std::any_of(s.dtypes_.begin(), s.dtypes_.end(), KeysPerChannel)) {
    s.staging_bytes_ = static_cast<size_t>(s.num_layers_) * s.num_kv_heads_ * s.block_size_ * s.head_dim_ * sizeof(uint16_t);
  }
  return s;
}

size_t KvSpec::bytes_for_tokens(int64_t tokens) const {
  const int64_t blocks = (tokens + block_size_ - 1) / block_size_;
  return static_cast<size_t>(blocks) * block_bytes_;
}

std::string KvSpec::Describe() const {
  std::string out(KvDtypeName(default_dtype_));
  if (!uniform_) {
    out += " (kept: ";
    bool first = true;
    for (int l = 0; l < num_layers_; ++l) {
      int kept = 0;
      for (int h = 0; h < num_kv_heads_; ++h) kept += dtype(l, h) != default_dtype_;
      if (kept == 0) continue;
      if (!first) out += ",";
      first = false;
      out += 'L';
      out += std::to_string(l);
      if (kept != num_kv_heads_) {
        out += ":";
        for (int h = 0; h < num_kv_heads_; ++h) {
          if (dtype(l, h) != default_dtype_) {
            out += 'h';
            out += std::to_string(h);
          }
        }
      }
    }
    out += ")";
  }
  out += ", block ";
  out += std::to_string(block_size_);
  if (IsQuantized(default_dtype_) || !uniform_) {
    out += ", group ";
    out += std::to_string(group_size_);
  }
  return out;
}

StatusOr<KvSpec> CompactSpecFor(const KvSpec& main, KvDtype dtype) {
  KvSpecConfig c;
  c.num_layers = main.num_layers();
  c.num_kv_heads = main.num_kv_heads();
  c.head_dim = main.head_dim();
  c.block_size = main.block_size();
  c.group_size = main.group_size();
  c.dtype = dtype;
  for (int l = 0; l < main.num_layers(); ++l) {
    for (int h = 0; h < main.num_kv_heads(); ++h) {
      const KvDtype d = main.dtype(l, h);
      if (KeysPerChannel(d)) return InvalidArgumentError("KV compaction needs a cache without int4c keys");
      if (d == main.default_dtype()) continue;
      c.keep.push_back({l, h});
      c.keep_dtype = d;
    }
  }
  ASSIGN_OR_RETURN(KvSpec spec, KvSpec::Create(c));
  if (spec.block_bytes() >= main.block_bytes()) {
    return InvalidArgumentError("KV compaction to " + std::string(KvDtypeName(dtype)) + " does not shrink " +
                                std::string(KvDtypeName(main.default_dtype())) + " blocks");
  }
  return spec;
}

}  // namespace kvserve
