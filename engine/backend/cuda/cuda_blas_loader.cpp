// The cuBLAS entry points the CUDA backend calls, defined here as forwarders into libcublas,
// which is opened with dlopen on the first call instead of being linked.
//
// Why: linking libcublas (and through it the 540 MB libcublasLt) runs their static initialisers
// in every process that links the engine, GPU or not: 0.37 s and ~100 MB of page faults per
// start on the CI machines, paid by `kvserve` on a CPU-only host and by each of the ~600 test
// processes ctest starts. Loaded on first use, the library costs only the processes that
// create a CUDA backend, and a CUDA build of kvserve starts on a host without cuBLAS.
//
// The library is looked up by its soname (KVSERVE_CUBLAS_SONAME, libcublas.so.<CUDA major>)
// through the usual search (RUNPATH, ld.so.cache), then in the toolkit's library folder seen at
// build time (KVSERVE_CUBLAS_DIR). When it cannot be loaded each call returns
// CUBLAS_STATUS_NOT_INITIALIZED and cublasGetStatusString says why (dlerror), so the backend
// fails to start with that message rather than the process failing to start.
//
// The forwarders keep cuBLAS's names and signatures (cublas_v2.h maps cublasCreate to
// cublasCreate_v2 and so on), so the call sites read as plain cuBLAS. Executables are linked
// without --export-dynamic, so libcublas's own calls never bind to these definitions.
#include <cublas_v2.h>
#include <dlfcn.h>

#include <mutex>
#include <string>

namespace {

struct Library {
  void* handle = nullptr;
  std::string error;  // why it could not be opened
};

const Library& Cublas() {
  static Library lib;
  static std::once_flag once;
  std::call_once(once, [] {
    lib.handle = dlopen(KVSERVE_CUBLAS_SONAME, RTLD_NOW | RTLD_LOCAL);
    if (lib.handle != nullptr) return;
    lib.error = dlerror();
    lib.handle = dlopen(KVSERVE_CUBLAS_DIR "/" KVSERVE_CUBLAS_SONAME, RTLD_NOW | RTLD_LOCAL);
    if (lib.handle == nullptr) lib.error = "cuBLAS could not be loaded: " + lib.error;
  });
  return lib;
}

// The symbol `name` of libcublas as a pointer of the forwarder's own type, or nullptr.
template <class Fn>
Fn Symbol(const char* name) {
  const Library& lib = Cublas();
  return lib.handle == nullptr ? nullptr : reinterpret_cast<Fn>(dlsym(lib.handle, name));
}

}  // namespace

// Each forwarder resolves its symbol once; a missing library or symbol reads as "not initialized".
#define KVSERVE_CUBLAS_FORWARD(name, params, args)                                  \
  extern "C" cublasStatus_t CUBLASWINAPI name params {                              \
    static const auto fn = Symbol<cublasStatus_t(*) params>(#name);                 \
    return fn == nullptr ? CUBLAS_STATUS_NOT_INITIALIZED : fn args;                 \
  }

KVSERVE_CUBLAS_FORWARD(cublasCreate_v2, (cublasHandle_t* handle), (handle))
KVSERVE_CUBLAS_FORWARD(cublasDestroy_v2, (cublasHandle_t handle), (handle))
KVSERVE_CUBLAS_FORWARD(cublasSetStream_v2, (cublasHandle_t handle, cudaStream_t stream), (handle, stream))
KVSERVE_CUBLAS_FORWARD(cublasSetMathMode, (cublasHandle_t handle, cublasMath_t mode), (handle, mode))
KVSERVE_CUBLAS_FORWARD(cublasSetWorkspace_v2, (cublasHandle_t handle, void* workspace, size_t bytes),
                       (handle, workspace, bytes))
KVSERVE_CUBLAS_FORWARD(cublasGemmEx,
                       (cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n,
                        int k, const void* alpha, const void* A, cudaDataType Atype, int lda, const void* B,
                        cudaDataType Btype, int ldb, const void* beta, void* C, cudaDataType Ctype, int ldc,
                        cublasComputeType_t computeType, cublasGemmAlgo_t algo),
                       (handle, transa, transb, m, n, k, alpha, A, Atype, lda, B, Btype, ldb, beta, C, Ctype,
                        ldc, computeType, algo))
#undef KVSERVE_CUBLAS_FORWARD

extern "C" const char* CUBLASWINAPI cublasGetStatusName(cublasStatus_t status) {
  static const auto fn = Symbol<decltype(&cublasGetStatusName)>("cublasGetStatusName");
  return fn == nullptr ? "CUBLAS_STATUS_NOT_INITIALIZED" : fn(status);
}

extern "C" const char* CUBLASWINAPI cublasGetStatusString(cublasStatus_t status) {
  static const auto fn = Symbol<decltype(&cublasGetStatusString)>("cublasGetStatusString");
  if (fn != nullptr) return fn(status);
  return Cublas().handle == nullptr ? Cublas().error.c_str() : "cuBLAS lacks cublasGetStatusString";
}
