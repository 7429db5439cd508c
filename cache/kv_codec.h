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
//   INT4C: values as INT4 (EncodeKvRow/DecodeKvRow treat it as INT4); keys per channel over a
//         block with the functions below.
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

// INT4C keys: rows[num_rows][head_dim] (the first num_rows rows of a block) quantized per
// channel. Channel c gets f16 {scale, bias} = channel_params[2c], [2c + 1] over its num_rows
// values (the INT4 code above with the group running down the channel); the codes are packed
// per row as INT4 packs a row (nibbles paired within groups of group_size), row r at
// data + r * KvRowDataBytes(kInt4, head_dim). Rows >= num_rows are not touched.
void EncodeKvKeysPerChannel(const float* rows, int num_rows, int head_dim, int group_size,
                            uint8_t* data, uint16_t* channel_params);
// One row of such a block: dst[c] = code(c) * scale_c + bias_c.
void DecodeKvKeyRowPerChannel(const uint8_t* row_data, const uint16_t* channel_params, int head_dim,
                              int group_size, float* dst);

// Segment (layer, kind 0=K 1=V, kv head) of a whole block laid out by `spec`, as float rows
// [block_size][head_dim]: every row decoded, or encoded (INT4C keys per channel over all
// rows, so the block must be full).
void DecodeKvSegment(const KvSpec& spec, const uint8_t* block, int layer, int kind, int head, float* rows);
void EncodeKvSegment(const KvSpec& spec, uint8_t* block, int layer, int kind, int head, const float* rows);
// A full block re-encoded in another layout of the same shape and block size (compaction to
// a smaller dtype, or back): every segment decoded from `src` and encoded into `dst`.
void ConvertKvBlock(const KvSpec& src_spec, const uint8_t* src, const KvSpec& dst_spec, uint8_t* dst);

}  // namespace kvserve
