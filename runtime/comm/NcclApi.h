// NCCL's ABI as glmc declares it (no nccl.h at build time: the library is loaded with dlopen) and
// the entry points NcclComm resolves. Internal to runtime/comm: NcclComm.cpp fills it, and
// glm-comm-bench calls the bare entry points to measure NcclComm against them.
#pragma once

#include "runtime/cuda/CudaDriver.h"

#include <cstddef>
#include <string>

namespace glm::runtime {

// The ABI values below are nccl.h's (NCCL 2.28.9 as shipped in CUDA 13's
// /usr/local/cuda/include/nccl.h; the same in github.com/NVIDIA/nccl src/nccl.h.in). They have
// been stable since NCCL 2.0: ncclResult_t, ncclRedOp_t and ncclDataType_t are C enums (int).
constexpr int kNcclSuccess = 0;        // ncclResult_t ncclSuccess
constexpr int kNcclSystemError = 2;    // ncclSystemError
constexpr int kNcclRemoteError = 6;    // ncclRemoteError
constexpr int kNcclInProgress = 7;     // ncclInProgress
constexpr int kNcclUint8 = 1;          // ncclDataType_t ncclUint8
constexpr int kNcclFloat32 = 7;        // ncclDataType_t ncclFloat32
constexpr int kNcclBfloat16 = 9;       // ncclDataType_t ncclBfloat16 (NCCL 2.10 and later)
constexpr int kNcclSum = 0;            // ncclRedOp_t ncclSum
constexpr size_t kUniqueIdBytes = 128; // NCCL_UNIQUE_ID_BYTES

/// ncclUniqueId: an opaque 128-byte struct, passed by value to ncclCommInitRank.
struct UniqueId {
  char internal[kUniqueIdBytes];
};
using NcclHandle = struct NcclCommOpaque *; // ncclComm_t

/// The NCCL entry points glmc uses.
struct NcclApi {
  std::string path; // what was loaded, for messages
  int (*ncclGetVersion)(int *);
  int (*ncclGetUniqueId)(UniqueId *);
  int (*ncclCommInitRank)(NcclHandle *, int, UniqueId, int);
  int (*ncclCommDestroy)(NcclHandle);
  int (*ncclCommAbort)(NcclHandle);
  int (*ncclCommGetAsyncError)(NcclHandle, int *);
  int (*ncclAllReduce)(const void *, void *, size_t, int, int, NcclHandle, cuda::CUstream);
  int (*ncclAllGather)(const void *, void *, size_t, int, NcclHandle, cuda::CUstream);
  int (*ncclBroadcast)(const void *, void *, size_t, int, int, NcclHandle, cuda::CUstream);
  const char *(*ncclGetErrorString)(int);
  /// Optional (NCCL 2.13 and later): the detail behind the last error.
  const char *(*ncclGetLastError)(NcclHandle);
};

} // namespace glm::runtime
