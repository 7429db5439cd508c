// A host copy of a KV arena addressed as cache/kv_spec.h lays it out, written and read only
// through the reference codecs (cache/kv_codec.h), plus the device-side layout tables the CUDA
// kernels take. The GPU tests build expected arenas with it and compare bytes.
#pragma once

#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "cache/kv_codec.h"
#include "cache/kv_spec.h"
#include "engine/backend/cuda/cuda_kernels.h"
#include "tests/gpu/gpu_test_util.h"

namespace kvserve::testing {

class HostKvArena {
 public:
  HostKvArena(const KvSpec& spec, int num_blocks)
      : spec_(spec), num_blocks_(num_blocks), bytes_(spec.block_bytes() * num_blocks, 0) {}

  const KvSpec& spec() const { return spec_; }
  std::vector<uint8_t>& bytes() { return bytes_; }
  const std::vector<uint8_t>& bytes() const { return bytes_; }

  uint8_t* Data(int block, int layer, int kind, int head, int row) {
    return Segment(block, layer, kind, head) + row * spec_.row_bytes(layer, head);
  }
  uint8_t* Scales(int block, int layer, int kind, int head, int row) {
    return Segment(block, layer, kind, head) + spec_.scales_offset(layer, head) +
           static_cast<size_t>(row) * spec_.params_per_row() * 2;
  }

  // Encodes x[0..head_dim) into the row (copies through aligned temporaries: scales may sit
  // at odd offsets).
  void Encode(int block, int layer, int kind, int head, int row, const float* x) {
    std::vector<uint8_t> data(spec_.row_bytes(layer, head));
    std::vector<uint16_t> scales(spec_.params_per_row());
    const KvDtype d = spec_.dtype(layer, head);
    EncodeKvRow(d, x, spec_.head_dim(), spec_.group_size(), data.data(), scales.data());
    std::memcpy(Data(block, layer, kind, head, row), data.data(), data.size());
    if (IsQuantized(d)) std::memcpy(Scales(block, layer, kind, head, row), scales.data(), scales.size() * 2);
  }
  void Decode(int block, int layer, int kind, int head, int row, float* out) {
    std::vector<uint8_t> data(spec_.row_bytes(layer, head));
    std::vector<uint16_t> scales(spec_.params_per_row());
    const KvDtype d = spec_.dtype(layer, head);
    std::memcpy(data.data(), Data(block, layer, kind, head, row), data.size());
    if (IsQuantized(d)) std::memcpy(scales.data(), Scales(block, layer, kind, head, row), scales.size() * 2);
    DecodeKvRow(d, data.data(), scales.data(), spec_.head_dim(), spec_.group_size(), out);
  }

 private:
  uint8_t* Segment(int block, int layer, int kind, int head) {
    return bytes_.data() + static_cast<size_t>(block) * spec_.block_bytes() + spec_.segment_offset(layer, kind, head);
  }

  KvSpec spec_;
  int num_blocks_;
  std::vector<uint8_t> bytes_;
};

// Device copies of an arena and of its layout tables ([layers][2][kv_heads] segment offsets,
// [layers][kv_heads] dtype codes).
class DeviceKvArena {
 public:
  explicit DeviceKvArena(const HostKvArena& host)
      : spec_(host.spec()), arena_(host.bytes()), offsets_(Offsets(host.spec())), dtypes_(Dtypes(host.spec())) {}

  uint8_t* arena() const { return arena_.get(); }
  const uint64_t* seg_offsets() const { return offsets_.get(); }
  const uint8_t* dtypes() const { return dtypes_.get(); }
  std::vector<uint8_t> Download() const { return arena_.Download(); }

  cuda::KvLayerView View(int layer) const {
    cuda::KvLayerView v;
    v.arena = arena_.get();
    v.block_bytes = spec_.block_bytes();
    v.block_size = spec_.block_size();
    v.head_dim = spec_.head_dim();
    v.group_size = spec_.group_size();
    v.num_kv_heads = spec_.num_kv_heads();
    v.seg_offsets = offsets_.get() + static_cast<size_t>(layer) * 2 * spec_.num_kv_heads();
    v.dtypes = dtypes_.get() + static_cast<size_t>(layer) * spec_.num_kv_heads();
    v.vec8 = spec_.head_dim() % 8 == 0 && spec_.group_size() % 8 == 0;
    return v;
  }

 private:
  static std::vector<uint64_t> Offsets(const KvSpec& s) {
    std::vector<uint64_t> o;
    for (int l = 0; l < s.num_layers(); ++l)
      for (int kind = 0; kind < 2; ++kind)
        for (int h = 0; h < s.num_kv_heads(); ++h) o.push_back(s.segment_offset(l, kind, h));
    return o;
  }
  static std::vector<uint8_t> Dtypes(const KvSpec& s) {
    std::vector<uint8_t> d;
    for (int l = 0; l < s.num_layers(); ++l)
      for (int h = 0; h < s.num_kv_heads(); ++h) d.push_back(static_cast<uint8_t>(s.dtype(l, h)));
    return d;
  }

  KvSpec spec_;
  DeviceBuffer<uint8_t> arena_;
  DeviceBuffer<uint64_t> offsets_;
  DeviceBuffer<uint8_t> dtypes_;
};

inline KvSpec MakeSpec(int layers, int kv_heads, int head_dim, int block_size, KvDtype dtype, int group_size = 0,
                       std::vector<KvSpecConfig::Keep> keep = {}, KvDtype keep_dtype = KvDtype::kF16) {
  KvSpecConfig c;
  c.num_layers = layers;
  c.num_kv_heads = kv_heads;
  c.head_dim = head_dim;
  c.block_size = block_size;
  c.dtype = dtype;
  c.group_size = group_size;
  c.keep = std::move(keep);
  c.keep_dtype = keep_dtype;
  auto s = KvSpec::Create(c);
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  return *s;
}

}  // namespace kvserve::testing
