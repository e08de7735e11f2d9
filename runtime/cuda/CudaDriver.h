// The CUDA driver API, reached through dlopen so that a machine without a GPU builds glmc and runs
// every CPU test. Only the entry points glmc uses are declared; their types follow cuda.h's ABI.
#pragma once

#include "base/Status.h"

#include <cstddef>
#include <cstdint>

namespace glm::cuda {

using CUresult = int;
using CUdevice = int;
using CUdeviceptr = unsigned long long;
using CUcontext = struct CUctx_st *;
using CUmodule = struct CUmod_st *;
using CUfunction = struct CUfunc_st *;
using CUstream = struct CUstream_st *;
using CUevent = struct CUevent_st *;
using CUgraph = struct CUgraph_st *;
using CUgraphExec = struct CUgraphExec_st *;

// The few enum values glmc passes (cuda.h's numbering).
inline constexpr int kAttrMultiprocessorCount = 16;
inline constexpr int kAttrL2CacheSize = 38;
inline constexpr int kAttrComputeCapabilityMajor = 75;
inline constexpr int kAttrComputeCapabilityMinor = 76;
inline constexpr int kAttrMaxSharedMemoryPerBlockOptin = 97;
inline constexpr int kAttrSingleToDoublePrecisionPerfRatio = 87;
inline constexpr int kFuncAttrMaxDynamicSharedSize = 8;
inline constexpr int kStreamNonBlocking = 1;
inline constexpr int kCaptureModeThreadLocal = 1;
inline constexpr int kEventDefault = 0;
inline constexpr CUresult kErrorNotReady = 600; // CUDA_ERROR_NOT_READY
inline constexpr int kMemoryTypeDevice = 2;     // CU_MEMORYTYPE_DEVICE

/// CUDA_MEMCPY2D (cuda.h's CUDA_MEMCPY2D_v2): a copy of `Height` rows of `WidthInBytes` bytes
/// between two pitched buffers. Arrays are not used here, so their handles are untyped.
struct Memcpy2D {
  size_t srcXInBytes = 0, srcY = 0;
  int srcMemoryType = 0;
  const void *srcHost = nullptr;
  CUdeviceptr srcDevice = 0;
  void *srcArray = nullptr;
  size_t srcPitch = 0;
  size_t dstXInBytes = 0, dstY = 0;
  int dstMemoryType = 0;
  void *dstHost = nullptr;
  CUdeviceptr dstDevice = 0;
  void *dstArray = nullptr;
  size_t dstPitch = 0;
  size_t WidthInBytes = 0;
  size_t Height = 0;
};

/// The loaded driver: one per process, loaded on first use.
struct CudaDriver {
  CUresult (*cuInit)(unsigned);
  CUresult (*cuDriverGetVersion)(int *);
  CUresult (*cuDeviceGetCount)(int *);
  CUresult (*cuDeviceGet)(CUdevice *, int);
  CUresult (*cuDeviceGetName)(char *, int, CUdevice);
  CUresult (*cuDeviceGetAttribute)(int *, int, CUdevice);
  CUresult (*cuDeviceTotalMem)(size_t *, CUdevice);
  CUresult (*cuDevicePrimaryCtxRetain)(CUcontext *, CUdevice);
  CUresult (*cuDevicePrimaryCtxRelease)(CUdevice);
  CUresult (*cuCtxSetCurrent)(CUcontext);
  CUresult (*cuCtxSynchronize)();
  CUresult (*cuMemAlloc)(CUdeviceptr *, size_t);
  CUresult (*cuMemFree)(CUdeviceptr);
  CUresult (*cuMemcpyHtoD)(CUdeviceptr, const void *, size_t);
  CUresult (*cuMemcpyDtoH)(void *, CUdeviceptr, size_t);
  CUresult (*cuMemcpyDtoD)(CUdeviceptr, CUdeviceptr, size_t);
  CUresult (*cuMemcpyHtoDAsync)(CUdeviceptr, const void *, size_t, CUstream);
  CUresult (*cuMemcpyDtoHAsync)(void *, CUdeviceptr, size_t, CUstream);
  CUresult (*cuMemcpyDtoDAsync)(CUdeviceptr, CUdeviceptr, size_t, CUstream);
  CUresult (*cuMemcpy2DAsync)(const Memcpy2D *, CUstream);
  CUresult (*cuMemsetD8)(CUdeviceptr, unsigned char, size_t);
  CUresult (*cuMemsetD8Async)(CUdeviceptr, unsigned char, size_t, CUstream);
  CUresult (*cuModuleLoadData)(CUmodule *, const void *);
  CUresult (*cuModuleUnload)(CUmodule);
  CUresult (*cuModuleGetFunction)(CUfunction *, CUmodule, const char *);
  CUresult (*cuFuncSetAttribute)(CUfunction, int, int);
  CUresult (*cuLaunchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                             unsigned, CUstream, void **, void **);
  CUresult (*cuStreamCreate)(CUstream *, unsigned);
  CUresult (*cuStreamDestroy)(CUstream);
  CUresult (*cuStreamSynchronize)(CUstream);
  CUresult (*cuStreamQuery)(CUstream); // 0 when done, kErrorNotReady while work is pending
  CUresult (*cuStreamBeginCapture)(CUstream, int);
  CUresult (*cuStreamEndCapture)(CUstream, CUgraph *);
  CUresult (*cuGraphInstantiateWithFlags)(CUgraphExec *, CUgraph, unsigned long long);
  CUresult (*cuGraphLaunch)(CUgraphExec, CUstream);
  CUresult (*cuGraphExecDestroy)(CUgraphExec);
  CUresult (*cuGraphDestroy)(CUgraph);
  CUresult (*cuEventCreate)(CUevent *, unsigned);
  CUresult (*cuEventDestroy)(CUevent);
  CUresult (*cuEventRecord)(CUevent, CUstream);
  CUresult (*cuEventSynchronize)(CUevent);
  CUresult (*cuEventElapsedTime)(float *, CUevent, CUevent);
  CUresult (*cuGetErrorName)(CUresult, const char **);
  CUresult (*cuGetErrorString)(CUresult, const char **);
};

/// The driver, loaded and initialised once (libcuda.so.1, then libcuda.so). Fails with a message
/// that says why on a machine without the NVIDIA driver or without a GPU.
Expected<const CudaDriver *> driver();

/// Success, or an error naming the driver call and the driver's error name and text.
Status check(CUresult result, const char *call);

} // namespace glm::cuda

/// Calls `call` (a CudaDriver member, e.g. cuMemAlloc(&p, n)) on the loaded driver `drv` and
/// returns its error from the enclosing function, named.
#define GLM_CU(drv, call) GLM_RETURN_IF_ERROR(::glm::cuda::check((drv)->call, #call))
