// AVX2 with F16C and FMA. This file is compiled with those flags (see
// engine/backend/CMakeLists.txt) and only called after a CPU feature check.
#include <immintrin.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>
#include <utility>

#include "common/fp16.h"
#include "engine/backend/cpu/kernels.h"
#include "engine/model/ggml_decoders.h"  // kIq4Values

namespace kvserve::cpu {
namespace avx2 {

#include "engine/backend/cpu/kernels_avx2_isa.h"

#include "engine/backend/cpu/kernels_impl.h"

}  // namespace avx2

const KernelTable& Avx2Kernels() {
  static const KernelTable table = avx2::MakeTable("avx2");
  return table;
}

}  // namespace kvserve::cpu
