// The device, its primary context and stream, allocations, modules and launches.
#include "runtime/cuda/CudaContext.h"

namespace glm::cuda {

DeviceMemory &DeviceMemory::operator=(DeviceMemory &&other) noexcept {
  if (this != &other) {
    if (driver_ != nullptr && ptr_ != 0) {
      driver_->cuMemFree(ptr_);
    }
    driver_ = other.driver_;
    ptr_ = other.ptr_;
    bytes_ = other.bytes_;
    other.ptr_ = 0;
    other.bytes_ = 0;
  }
  return *this;
}

DeviceMemory::~DeviceMemory() {
  if (driver_ != nullptr && ptr_ != 0) {
    driver_->cuMemFree(ptr_);
  }
}

Module::~Module() { driver_->cuModuleUnload(module_); }

Expected<int> CudaContext::deviceCount() {
  GLM_ASSIGN_OR_RETURN(const CudaDriver *d, ::glm::cuda::driver());
  int count = 0;
  GLM_CU(d, cuDeviceGetCount(&count));
  return count;
}

Expected<std::unique_ptr<CudaContext>> CudaContext::create(int ordinal) {
  GLM_ASSIGN_OR_RETURN(const CudaDriver *d, ::glm::cuda::driver());
  int count = 0;
  GLM_CU(d, cuDeviceGetCount(&count));
  if (ordinal < 0 || ordinal >= count) {
    return Status(StatusCode::Unavailable,
                  strCat("no CUDA device ", ordinal, " (the driver sees ", count, ")"));
  }
  std::unique_ptr<CudaContext> ctx(new CudaContext());
  ctx->driver_ = d;
  GLM_CU(d, cuDeviceGet(&ctx->device_, ordinal));
  DeviceInfo &info = ctx->info_;
  char name[256] = {};
  GLM_CU(d, cuDeviceGetName(name, sizeof name, ctx->device_));
  info.name = name;
  GLM_CU(d, cuDeviceGetAttribute(&info.major, kAttrComputeCapabilityMajor, ctx->device_));
  GLM_CU(d, cuDeviceGetAttribute(&info.minor, kAttrComputeCapabilityMinor, ctx->device_));
  GLM_CU(d, cuDeviceGetAttribute(&info.smCount, kAttrMultiprocessorCount, ctx->device_));
  GLM_CU(d, cuDeviceGetAttribute(&info.sharedMemoryPerBlockOptin, kAttrMaxSharedMemoryPerBlockOptin,
                                 ctx->device_));
  GLM_CU(d, cuDeviceGetAttribute(&info.l2Bytes, kAttrL2CacheSize, ctx->device_));
  GLM_CU(d, cuDeviceTotalMem(&info.memoryBytes, ctx->device_));
  GLM_CU(d, cuDeviceGetAttribute(&info.singleToDoubleRatio, kAttrSingleToDoublePrecisionPerfRatio,
                                 ctx->device_));
  // The arch-specific targets ("a") unlock wgmma/setmaxnreg on Hopper and GB10's features; a
  // cubin for them runs only on that exact compute capability, which is what a plan is for.
  info.arch = (info.major == 9 && info.minor == 0)    ? "sm_90a"
              : (info.major == 12 && info.minor == 1) ? "sm_121a"
                                                      : strCat("sm_", info.major, info.minor);
  GLM_CU(d, cuDevicePrimaryCtxRetain(&ctx->context_, ctx->device_));
  GLM_CU(d, cuCtxSetCurrent(ctx->context_));
  GLM_CU(d, cuStreamCreate(&ctx->stream_, kStreamNonBlocking));
  return ctx;
}

CudaContext::~CudaContext() {
  if (stream_ != nullptr) {
    driver_->cuStreamSynchronize(stream_);
    driver_->cuStreamDestroy(stream_);
  }
  if (context_ != nullptr) {
    driver_->cuDevicePrimaryCtxRelease(device_);
  }
}

Status CudaContext::makeCurrent() const {
  GLM_CU(driver_, cuCtxSetCurrent(context_));
  return Status::success();
}

Expected<DeviceMemory> CudaContext::allocate(size_t bytes) {
  CUdeviceptr ptr = 0;
  if (bytes > 0) {
    GLM_RETURN_IF_ERROR(check(driver_->cuMemAlloc(&ptr, bytes), "cuMemAlloc")
                            .withContext(strCat("allocating ", bytes, " bytes on ", info_.name)));
  }
  return DeviceMemory(driver_, ptr, bytes);
}

Status CudaContext::upload(CUdeviceptr dst, const void *src, size_t bytes) {
  GLM_CU(driver_, cuMemcpyHtoDAsync(dst, src, bytes, stream_));
  GLM_CU(driver_, cuStreamSynchronize(stream_));
  return Status::success();
}

Status CudaContext::download(void *dst, CUdeviceptr src, size_t bytes) {
  GLM_CU(driver_, cuMemcpyDtoHAsync(dst, src, bytes, stream_));
  GLM_CU(driver_, cuStreamSynchronize(stream_));
  return Status::success();
}

Status CudaContext::synchronize() {
  GLM_CU(driver_, cuStreamSynchronize(stream_));
  return Status::success();
}

Expected<std::unique_ptr<Module>> CudaContext::load(std::span<const uint8_t> cubin,
                                                    const std::vector<std::string> &entries) {
  CUmodule module = nullptr;
  GLM_RETURN_IF_ERROR(
      check(driver_->cuModuleLoadData(&module, cubin.data()), "cuModuleLoadData")
          .withContext(strCat("loading a cubin on ", info_.name, " (", info_.arch, ")")));
  std::vector<CUfunction> functions;
  for (const std::string &entry : entries) {
    CUfunction fn = nullptr;
    if (Status s =
            check(driver_->cuModuleGetFunction(&fn, module, entry.c_str()), "cuModuleGetFunction");
        !s.ok()) {
      driver_->cuModuleUnload(module);
      return s.withContext(entry);
    }
    functions.push_back(fn);
  }
  return std::make_unique<Module>(driver_, module, std::move(functions));
}

Status CudaContext::launchRaw(CUfunction fn, const unsigned grid[3], const unsigned block[3],
                              unsigned sharedMemory, void **params) {
  if (sharedMemory > 48 * 1024) {
    GLM_CU(driver_,
           cuFuncSetAttribute(fn, kFuncAttrMaxDynamicSharedSize, static_cast<int>(sharedMemory)));
  }
  GLM_CU(driver_, cuLaunchKernel(fn, grid[0], grid[1], grid[2], block[0], block[1], block[2],
                                 sharedMemory, stream_, params, nullptr));
  return Status::success();
}

} // namespace glm::cuda
