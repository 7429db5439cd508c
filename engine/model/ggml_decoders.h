// Decoders of the ggml types kvserve reads but never writes: Q4_1, Q5_0, Q5_1, Q2_K, Q3_K,
// IQ4_NL, IQ4_XS. DequantizeRow (ggml_types.h) dispatches here; the CPU kernels pack these
// types from their integer form (engine/backend/cpu/kernels.cpp).
#pragma once

#include <cstdint>
#include <optional>

#include "engine/model/ggml_types.h"

namespace kvserve {

// The non-linear 4-bit codebook of IQ4_NL and IQ4_XS.
inline constexpr int8_t kIq4Values[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

// A row of one of these types as integers: value k = scale[k / group] * q[k], plus
// offset[k / group] when the type has offsets. These are the float operations ggml's decoder
// does, so the values are the decoded ones bit for bit.
struct IntegerForm {
  int group = 32;           // values per scale: 32, or 16 (Q2_K, Q3_K)
  bool has_offset = false;  // Q4_1, Q5_1, Q2_K
  bool f16_scales = false;  // every scale is the block's f16 d (Q5_0, IQ4_NL)
};
[[nodiscard]] std::optional<IntegerForm> IntegerFormOf(GgmlType type);
// q[0..n), scale[0..n / group) and, for types with offsets, offset[0..n / group) of the row at
// src. q is in [-127, 127]. REQUIRES: IntegerFormOf(type); n a multiple of the block size.
void DecodeIntegers(GgmlType type, const void* src, int64_t n, int8_t* q, float* scale, float* offset);

// Q2_K and Q3_K: each super-block's d (and Q2_K's dmin; Q3_K's is 0) as floats, per 256
// values of the row at src. Their integer form's scales are d times small integers (and
// Q2_K's offsets -dmin times them), exactly in f32.
void SuperBlockScales(GgmlType type, const void* src, int64_t n, float* d, float* dmin);

// dst[0..n) = the values of the row at src when `type` is one of the types above (then
// returns true; n must be a multiple of its block size); false for any other type.
bool DecodeReadOnlyType(GgmlType type, const void* src, float* dst, int64_t n);

}  // namespace kvserve
