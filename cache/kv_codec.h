// Reference encoders/decoders of one K or V row (one token, one kv head) in every KvDtype.
//
// Layout (see kv_spec.h): `data` holds the row's values; quantized dtypes also write two f16
// parameters per group of `group_size` values to `scales`: {scale, bias}, and a code q stands
// for fma(q, scale, bias). Asymmetric groups: K and V rows are skewed (RoPE'd keys carry
// per-channel offsets), and a zero point uses all 2^bits levels on [min, max] of the group.
//   INT8: scale = (max - min) / 255, bias = min + 128 * scale (both rounded to f16),
//         q = round((x - bias) / scale) in [-128, 127].
//   INT4: scale = (max - min) / 15, bias = min + 8 * scale, q in [-8, 7] stored as q + 8; inside
//         a group of G values, byte i holds value i (low nibble) and value i + G/2 (high nibble).
// Backends must produce and consume exactly these bytes; their kernels are tested against
// these functions. Pure functions; thread-safe.
#pragma once

#include <cstdint>

#include "cache/kv_spec.h"

namespace kvserve {

// REQUIRES: head_dim % group_size == 0 (and group_size even for INT4); `scales` holds
// kKvParamsPerGroup * head_dim / group_size values.
void EncodeKvRow(KvDtype dtype, const float* src, int head_dim, int group_size, uint8_t* data,
                 uint16_t* scales);
void DecodeKvRow(KvDtype dtype, const uint8_t* data, const uint16_t* scales, int head_dim,
                 int group_size, float* dst);

}  // namespace kvserve
