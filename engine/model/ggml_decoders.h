// Decoders of the ggml types kvserve reads (and converts at load) but never writes: Q4_1,
// Q5_0, Q5_1, Q2_K, Q3_K, IQ4_NL, IQ4_XS. DequantizeRow (ggml_types.h) dispatches here.
#pragma once

#include <cstdint>

#include "engine/model/ggml_types.h"

namespace kvserve {

// dst[0..n) = the values of the row at src when `type` is one of the types above (then
// returns true; n must be a multiple of its block size); false for any other type.
bool DecodeReadOnlyType(GgmlType type, const void* src, float* dst, int64_t n);

}  // namespace kvserve
