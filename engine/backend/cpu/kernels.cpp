#include "engine/backend/cpu/kernels.h"

#include <cstdlib>
#include <string>

#include "common/log.h"

namespace kvserve::cpu {
namespace {

bool CpuHasAvx512() {
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("f16c") &&
         __builtin_cpu_supports("fma");
}
bool CpuHasAvx2() {
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
         __builtin_cpu_supports("f16c");
}

const KernelTable& ChooseKernels() {
  if (const char* forced = std::getenv("KVSERVE_ISA")) {
    if (const KernelTable* t = KernelsFor(forced)) return *t;
    LOG_WARN("KVSERVE_ISA={} is not available on this CPU; choosing automatically", forced);
  }
  if (CpuHasAvx512()) return Avx512Kernels();
  if (CpuHasAvx2()) return Avx2Kernels();
  return GenericKernels();
}

}  // namespace

int WeightKind(GgmlType type) {
  switch (type) {
    case GgmlType::kF32: return 0;
    case GgmlType::kF16: return 1;
    case GgmlType::kBF16: return 2;
    case GgmlType::kQ8_0: return 3;
    default: return -1;
  }
}

const KernelTable& Kernels() {
  static const KernelTable& table = ChooseKernels();
  return table;
}

const KernelTable* KernelsFor(std::string_view isa) {
  if (isa == "generic") return &GenericKernels();
  if (isa == "avx2") return CpuHasAvx2() ? &Avx2Kernels() : nullptr;
  if (isa == "avx512") return CpuHasAvx512() ? &Avx512Kernels() : nullptr;
  return nullptr;
}

}  // namespace kvserve::cpu
