// AVX2 with AVX-VNNI (Alder Lake and later Intel cores, AMD Zen 5): the AVX2 table with its
// integer dots on the VEX vpdpbusd. This file is compiled with the AVX2 flags plus -mavxvnni
// (engine/backend/CMakeLists.txt) and only called after a CPU feature check; the integer sums
// are exact, so it gives the AVX2 table's bits (kernels_int8_test).
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
namespace avxvnni {

#include "engine/backend/cpu/kernels_avx2_isa.h"

#include "engine/backend/cpu/kernels_impl.h"

}  // namespace avxvnni

const KernelTable& AvxVnniKernels() {
  static const KernelTable table = avxvnni::MakeTable("avxvnni");
  return table;
}

}  // namespace kvserve::cpu
