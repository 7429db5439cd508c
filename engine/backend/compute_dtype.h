// The precision of the matrix products (`--compute-dtype`).
//
// kF32: activations stay F32 and every weight is widened to F32 before its multiply-add.
// kBF16: activations are rounded to BF16 (nearest even; BF16 subnormals flushed to zero) once
// per matrix product and multiplied with BF16 weights (F32/F16 matrices rounded to BF16 when
// they are packed) by pairs, accumulating in F32 in the order of AVX512-BF16's `vdpbf16ps`:
// acc += w[2i+1] * x[2i+1], then acc += w[2i] * x[2i]. Each product of two BF16 values is
// exact in F32, so a CPU without the instruction computes the same bits with two FMAs.
// kInt8: F32/F16/BF16 matrices as kF32; quantized matrices (Q4_0 ... Q8_0, K and IQ4 types)
// take the activations quantized to int8 per 32 values (f32 scale max|x| / 127, nearest even)
// and multiply them with the weights' integer codes exactly in int32 (`vpdpbusd` where the CPU
// has AVX512-VNNI), scaling per group of 16 or 32 columns in F32: llama.cpp's method, several
// times the speed of widening every weight to F32 at the cost of the activations' rounding.
// kBF16 treats quantized matrices as kInt8 does; kF32 keeps them exact (F32 kernels).
// Every mode runs the same operations for every batch size, so a request's results never
// depend on its batch.
#pragma once

#include <optional>
#include <string_view>

namespace kvserve {

enum class ComputeDtype { kF32, kBF16, kInt8 };

inline std::string_view ComputeDtypeName(ComputeDtype d) {
  return d == ComputeDtype::kBF16 ? "bf16" : d == ComputeDtype::kInt8 ? "int8" : "f32";
}

inline std::optional<ComputeDtype> ParseComputeDtype(std::string_view s) {
  if (s == "f32") return ComputeDtype::kF32;
  if (s == "bf16") return ComputeDtype::kBF16;
  if (s == "int8") return ComputeDtype::kInt8;
  return std::nullopt;
}

}  // namespace kvserve
