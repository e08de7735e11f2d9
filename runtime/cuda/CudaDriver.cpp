// Loading the CUDA driver with dlopen and naming its errors.
#include "runtime/cuda/CudaDriver.h"

#include <atomic>
#include <dlfcn.h>
#include <mutex>
#include <type_traits>

namespace glm::cuda {
namespace {

/// Resolves every entry point; the versioned names are the ones cuda.h maps the plain names to.
Status resolve(void *lib, CudaDriver &d) {
  Status missing = Status::success();
  auto get = [&](auto &fn, const char *symbol) {
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(lib, symbol));
    if (fn == nullptr && missing.ok()) {
      missing = Status(StatusCode::Unavailable,
                       strCat("the CUDA driver has no ", symbol, " (driver too old?)"));
    }
  };
  get(d.cuInit, "cuInit");
  get(d.cuDriverGetVersion, "cuDriverGetVersion");
  get(d.cuDeviceGetCount, "cuDeviceGetCount");
  get(d.cuDeviceGet, "cuDeviceGet");
  get(d.cuDeviceGetName, "cuDeviceGetName");
  get(d.cuDeviceGetAttribute, "cuDeviceGetAttribute");
  get(d.cuDeviceTotalMem, "cuDeviceTotalMem_v2");
  get(d.cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain");
  get(d.cuDevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2");
  get(d.cuCtxSetCurrent, "cuCtxSetCurrent");
  get(d.cuCtxSynchronize, "cuCtxSynchronize");
  get(d.cuMemAlloc, "cuMemAlloc_v2");
  get(d.cuMemFree, "cuMemFree_v2");
  get(d.cuMemcpyHtoD, "cuMemcpyHtoD_v2");
  get(d.cuMemcpyDtoH, "cuMemcpyDtoH_v2");
  get(d.cuMemcpyDtoD, "cuMemcpyDtoD_v2");
  get(d.cuMemcpyHtoDAsync, "cuMemcpyHtoDAsync_v2");
  get(d.cuMemcpyDtoHAsync, "cuMemcpyDtoHAsync_v2");
  get(d.cuMemcpyDtoDAsync, "cuMemcpyDtoDAsync_v2");
  get(d.cuMemcpy2DAsync, "cuMemcpy2DAsync_v2");
  get(d.cuMemsetD8, "cuMemsetD8_v2");
  get(d.cuMemsetD8Async, "cuMemsetD8Async");
  get(d.cuModuleLoadData, "cuModuleLoadData");
  get(d.cuModuleUnload, "cuModuleUnload");
  get(d.cuModuleGetFunction, "cuModuleGetFunction");
  get(d.cuFuncSetAttribute, "cuFuncSetAttribute");
  get(d.cuLaunchKernel, "cuLaunchKernel");
  get(d.cuStreamCreate, "cuStreamCreate");
  get(d.cuStreamDestroy, "cuStreamDestroy_v2");
  get(d.cuStreamSynchronize, "cuStreamSynchronize");
  get(d.cuStreamQuery, "cuStreamQuery");
  get(d.cuStreamBeginCapture, "cuStreamBeginCapture_v2");
  get(d.cuStreamEndCapture, "cuStreamEndCapture");
  get(d.cuGraphInstantiateWithFlags, "cuGraphInstantiateWithFlags");
  get(d.cuGraphLaunch, "cuGraphLaunch");
  get(d.cuGraphExecDestroy, "cuGraphExecDestroy");
  get(d.cuGraphDestroy, "cuGraphDestroy");
  get(d.cuEventCreate, "cuEventCreate");
  get(d.cuEventDestroy, "cuEventDestroy_v2");
  get(d.cuEventRecord, "cuEventRecord");
  get(d.cuEventSynchronize, "cuEventSynchronize");
  get(d.cuEventElapsedTime, "cuEventElapsedTime");
  get(d.cuGetErrorName, "cuGetErrorName");
  get(d.cuGetErrorString, "cuGetErrorString");
  return missing;
}

/// The resolved table, for naming errors, once its symbols are in (even if cuInit then failed).
std::atomic<const CudaDriver *> resolved{nullptr};

} // namespace

Expected<const CudaDriver *> driver() {
  static CudaDriver table;
  static Status loaded = Status(StatusCode::Internal, "not loaded");
  static std::once_flag once;
  std::call_once(once, [] {
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) {
      lib = dlopen("libcuda.so", RTLD_NOW | RTLD_LOCAL);
    }
    if (lib == nullptr) {
      loaded = Status(StatusCode::Unavailable,
                      strCat("cannot load the CUDA driver (libcuda.so.1): ", dlerror(),
                             "; GPU plans need an NVIDIA GPU and its driver"));
      return;
    }
    loaded = resolve(lib, table);
    if (loaded.ok()) {
      resolved.store(&table);
      loaded = check(table.cuInit(0), "cuInit(0)");
    }
  });
  if (!loaded.ok()) {
    return loaded;
  }
  return &table;
}

Status check(CUresult result, const char *call) {
  if (result == 0) {
    return Status::success();
  }
  const char *name = "unknown error";
  const char *text = "";
  if (const CudaDriver *d = resolved.load()) {
    d->cuGetErrorName(result, &name);
    d->cuGetErrorString(result, &text);
  }
  return Status(StatusCode::Internal, strCat(call, " failed: ", name, " (", result, "): ", text));
}

} // namespace glm::cuda
