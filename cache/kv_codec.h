// Reference encoders/decoders of one K or V row (one token, one kv head) in every KvDtype.
//
// Layout (see kv_spec.h): `data` holds the row's values; quantized dtypes also write one f16
// scale per group of `group_size` values to `scales`.
//   INT8: symmetric, scale = max|x| / 127 (rounded to f16), q = round(x / scale) in [-127, 127].
//   INT4: symmetric, scale = max|x| / 7, q in [-7, 7] stored as q + 8; inside a group of G
//         values, byte i holds value i (low nibble) and value i + G/2 (high nibble).
// Backends must produce and consume exactly these bytes; their kernels are tested against
// these functions. Pure functions; thread-safe.
#pragma once

#include <cstdint>

#include "cache/kv_spec.h"

namespace kvserve {

// REQUIRES: head_dim % group_size == 0 (and group_size even for INT4).
void EncodeKvRow(KvDtype dtype, const float* src, int head_dim, int group_size, uint8_t* data,
                 uint16_t* scales);
void DecodeKvRow(KvDtype dtype, const uint8_t* data, const uint16_t* scales, int head_dim,
                 int group_size, float* dst);

}  // namespace kvserve
