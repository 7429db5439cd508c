// Tensor element types of the GGUF/ggml format and their CPU reference codecs.
//
// A "block" is the quantization unit: F32/F16/BF16 have blocks of 1 value; Q8_0, Q4_0, Q4_1,
// Q5_0, Q5_1 and IQ4_NL of 32; the K types and IQ4_XS super-blocks of 256. A row of n values (n a multiple of the block size) takes
// n / block_values * block_bytes bytes. Pure functions; thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

#include "common/status.h"

namespace kvserve {

inline constexpr int kGgmlSuperBlockValues = 256;  // the K types' and IQ4_XS's super-block

enum class GgmlType : uint32_t {
  kF32 = 0,
  kF16 = 1,
  kQ4_0 = 2,
  kQ4_1 = 3,
  kQ5_0 = 6,
  kQ5_1 = 7,
  kQ8_0 = 8,
  kQ8_1 = 9,
  kQ2_K = 10,
  kQ3_K = 11,
  kQ4_K = 12,
  kQ5_K = 13,
  kQ6_K = 14,
  kQ8_K = 15,
  kIQ4_NL = 20,
  kIQ4_XS = 23,
  kBF16 = 30,
};

struct GgmlTypeInfo {
  std::string_view name;  // "f32", "q8_0", ...
  int block_values;       // values per block
  int block_bytes;        // bytes per block
  bool can_dequantize;    // DequantizeRow supports it
};

// Layout facts of a type, or nullopt for a type id kvserve does not know.
[[nodiscard]] std::optional<GgmlTypeInfo> GetGgmlTypeInfo(uint32_t type);
[[nodiscard]] std::string_view GgmlTypeName(GgmlType type);
// Parses "f32", "f16", "bf16", "q8_0", "q4_0", "q4_k", "q6_k" (case-insensitive).
[[nodiscard]] std::optional<GgmlType> ParseGgmlType(std::string_view name);

// Bytes of a row of `n` values, or an error when n is not a multiple of the block size or the
// type is unknown.
[[nodiscard]] StatusOr<uint64_t> GgmlRowBytes(GgmlType type, uint64_t n);

// Reference decoders (ggml's formulas; the read-only types in ggml_decoders.cpp): dst[0..n) =
// values of the row at src. REQUIRES: n % block_values == 0
// and the type can be dequantized (CHECKed).
void DequantizeRow(GgmlType type, const void* src, float* dst, int64_t n);

// Reference encoders (used by `kvserve mkmodel` and tests). REQUIRES: n % block_values == 0.
// Supported: F32, F16, BF16, Q8_0, Q4_0, Q4_K, Q6_K; CHECK-fails on others.
// F16/BF16 round to nearest even. For finite inputs whose block scales are normal f16
// numbers, the decoded value differs from the input by at most (amax = max |x| over the
// value's block, or super-block for the K types):
//   Q8_0  amax * (1/254 + 2^-11)      (as ggml: d = amax/127 is rounded to f16 after use)
//   Q4_0  amax / 8 * (1 + 2^-8)       (as ggml: the extreme value of the other sign clamps)
//   Q4_K  0.0683 * amax               (simple min/max encoder, not ggml's optimizing one)
//   Q6_K  0.01626 * amax              (simple symmetric encoder, quants in [-31, 31])
void QuantizeRow(GgmlType type, const float* src, void* dst, int64_t n);

// Block structs, bit-exact with the GGUF spec.
#pragma pack(push, 1)
struct BlockQ8_0 {
  uint16_t d;  // f16 scale
  int8_t qs[32];
};
struct BlockQ4_0 {
  uint16_t d;  // f16 scale
  uint8_t qs[16];
};
struct BlockQ4_K {
  uint16_t d;          // f16 super-block scale for the 6-bit scales
  uint16_t dmin;       // f16 super-block scale for the 6-bit mins
  uint8_t scales[12];  // 8 scales and 8 mins, 6 bits each, packed
  uint8_t qs[128];     // 256 4-bit values
};
struct BlockQ5_K {
  uint16_t d;          // f16 super-block scale for the 6-bit scales
  uint16_t dmin;       // f16 super-block scale for the 6-bit mins
  uint8_t scales[12];  // packed as Q4_K's
  uint8_t qh[32];      // the 5th bit of each value
  uint8_t qs[128];     // the low 4 bits, laid out as Q4_K's
};
struct BlockQ6_K {
  uint8_t ql[128];     // lower 4 bits
  uint8_t qh[64];      // upper 2 bits
  int8_t scales[16];   // 8-bit sub-block scales
  uint16_t d;          // f16 super-block scale
};
#pragma pack(pop)
static_assert(sizeof(BlockQ8_0) == 34);
static_assert(sizeof(BlockQ4_0) == 18);
static_assert(sizeof(BlockQ4_K) == 144);
static_assert(sizeof(BlockQ5_K) == 176);
static_assert(sizeof(BlockQ6_K) == 210);

// Sub-block j (0..7) of a Q4_K or Q5_K super-block: its 6-bit scale and min, unpacked from
// the block's `scales` (value = d * sc * q - dmin * m).
void UnpackScaleMinQ4K(int j, const uint8_t* scales, uint8_t* sc, uint8_t* m);

}  // namespace kvserve
