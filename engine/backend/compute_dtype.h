// The precision of the matrix products (`--compute-dtype`).
//
// kF32: activations stay F32 and every weight is widened to F32 before its multiply-add.
// kBF16: activations are rounded to BF16 (nearest even; BF16 subnormals flushed to zero) once
// per matrix product and multiplied with BF16 weights (F32/F16 matrices rounded to BF16 when
// they are packed) by pairs, accumulating in F32 in the order of AVX512-BF16's `vdpbf16ps`:
// acc += w[2i+1] * x[2i+1], then acc += w[2i] * x[2i]. Each product of two BF16 values is
// exact in F32, so a CPU without the instruction computes the same bits with two FMAs.
// Quantized matrices keep their F32 kernels in both modes. Either mode runs the same
// operations for every batch size, so a request's results never depend on its batch.
#pragma once

#include <optional>
#include <string_view>

namespace kvserve {

enum class ComputeDtype { kF32, kBF16 };

inline std::string_view ComputeDtypeName(ComputeDtype d) { return d == ComputeDtype::kBF16 ? "bf16" : "f32"; }

inline std::optional<ComputeDtype> ParseComputeDtype(std::string_view s) {
  if (s == "f32") return ComputeDtype::kF32;
  if (s == "bf16") return ComputeDtype::kBF16;
  return std::nullopt;
}

}  // namespace kvserve
