// CPU compute kernels behind a table of function pointers, one table per instruction set
// (AVX-512, AVX2+FMA+F16C, generic C++), chosen at run time from the CPU's features so one
// binary runs on any x86-64. Every table computes the same function; tests compare each
// table with the generic one and with the reference codecs.
//
// Stateless; thread-safe. Callers parallelise (OpenMP) over row ranges / attention units.
#pragma once

#include <cstdint>
#include <string_view>

#include "cache/kv_spec.h"
#include "engine/model/weights.h"

namespace kvserve::cpu {

// y[t * ldy + r] = dot(x[t * ldx + 0 .. cols), row r of w), for t < num_tokens.
struct MatMulArgs {
  const WeightMatrix* w = nullptr;
  const float* x = nullptr;
  int64_t ldx = 0;
  int num_tokens = 0;
  float* y = nullptr;
  int64_t ldy = 0;
};
// Computes rows [row_begin, row_end) of y.
using MatMulRangeFn = void (*)(const MatMulArgs& args, int64_t row_begin, int64_t row_end);

// One KV segment's rows (see kv_spec.h): `data` = [n][row bytes], `scales` = [n][groups].
struct KvRows {
  const uint8_t* data = nullptr;
  const uint16_t* scales = nullptr;
  int n = 0;
};
// scores[j] = dot(q, row j) for j < rows.n.
using KvDotFn = void (*)(const float* q, const KvRows& rows, int head_dim, int group_size,
                         float* scores);
// acc[d] += sum_j p[j] * row j[d].
using KvAxpyFn = void (*)(const float* p, const KvRows& rows, int head_dim, int group_size,
                          float* acc);

struct KernelTable {
  std::string_view isa;
  // Indexed by WeightKind(type).
  MatMulRangeFn matmul[4];
  // Indexed by static_cast<int>(KvDtype).
  KvDotFn kv_dot[5];
  KvAxpyFn kv_axpy[5];
};

// 0 f32, 1 f16, 2 bf16, 3 q8_0; -1 for types the kernels do not take.
int WeightKind(GgmlType type);

// The best table for this CPU (overridable with KVSERVE_ISA=avx512|avx2|generic).
const KernelTable& Kernels();
// A specific table, or nullptr when this CPU cannot run it. isa: "avx512", "avx2", "generic".
const KernelTable* KernelsFor(std::string_view isa);

// Per-ISA tables, defined in kernels_<isa>.cpp.
const KernelTable& GenericKernels();
const KernelTable& Avx2Kernels();
const KernelTable& Avx512Kernels();

}  // namespace kvserve::cpu
