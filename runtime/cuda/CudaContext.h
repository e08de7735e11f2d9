// One GPU as glmc uses it: the device's primary context, a stream, device memory, modules loaded
// from cubins and kernel launches. Every failing driver call comes back as a Status naming it.
#pragma once

#include "runtime/cuda/CudaDriver.h"

#include <memory>
#include <span>
#include <string>
#include <vector>

namespace glm::cuda {

/// A device allocation, freed on destruction.
class DeviceMemory {
public:
  DeviceMemory() = default;
  DeviceMemory(const CudaDriver *driver, CUdeviceptr ptr, size_t bytes)
      : driver_(driver), ptr_(ptr), bytes_(bytes) {}
  DeviceMemory(DeviceMemory &&other) noexcept { *this = std::move(other); }
  DeviceMemory &operator=(DeviceMemory &&other) noexcept;
  ~DeviceMemory();

  CUdeviceptr ptr() const { return ptr_; }
  size_t bytes() const { return bytes_; }
  template <typename T> T *as() const { return reinterpret_cast<T *>(ptr_); }

private:
  const CudaDriver *driver_ = nullptr;
  CUdeviceptr ptr_ = 0;
  size_t bytes_ = 0;
};

/// A loaded cubin and the functions asked of it, unloaded on destruction.
class Module {
public:
  Module(const CudaDriver *driver, CUmodule module, std::vector<CUfunction> functions)
      : driver_(driver), module_(module), functions_(std::move(functions)) {}
  Module(const Module &) = delete;
  Module &operator=(const Module &) = delete;
  ~Module();
  CUfunction function(size_t i) const { return functions_[i]; }
  size_t size() const { return functions_.size(); }

private:
  const CudaDriver *driver_;
  CUmodule module_;
  std::vector<CUfunction> functions_;
};

struct DeviceInfo {
  std::string name;
  int major = 0, minor = 0;
  int smCount = 0;
  int sharedMemoryPerBlockOptin = 0;
  int l2Bytes = 0;
  size_t memoryBytes = 0;
  /// f32 throughput over f64 throughput (2 on H100/H200, 32-64 on GeForce-class parts).
  int singleToDoubleRatio = 0;
  /// The NVRTC target glmc compiles for on this device: "sm_90a", "sm_121a", else
  /// "sm_<major><minor>".
  std::string arch;
};

class CudaContext {
public:
  /// Makes device `ordinal`'s primary context current on the calling thread and creates a stream.
  static Expected<std::unique_ptr<CudaContext>> create(int ordinal = 0);
  /// How many CUDA devices the driver shows this process.
  static Expected<int> deviceCount();
  ~CudaContext();

  const CudaDriver &driver() const { return *driver_; }
  const DeviceInfo &info() const { return info_; }
  CUstream stream() const { return stream_; }
  /// Makes this context current on the calling thread (each thread that launches needs it).
  Status makeCurrent() const;

  Expected<DeviceMemory> allocate(size_t bytes);
  Status upload(CUdeviceptr dst, const void *src, size_t bytes);
  Status download(void *dst, CUdeviceptr src, size_t bytes);
  Status synchronize();

  /// Loads `cubin` and looks up `entries` (mangled names) in it.
  Expected<std::unique_ptr<Module>> load(std::span<const uint8_t> cubin,
                                         const std::vector<std::string> &entries);

  /// Launches `fn` on the stream with the kernel's single by-value argument struct; opts the
  /// function into more than 48 KB of dynamic shared memory when asked for it.
  template <typename Args>
  Status launch(CUfunction fn, const unsigned grid[3], const unsigned block[3],
                unsigned sharedMemory, const Args &args) {
    void *params[] = {const_cast<Args *>(&args)};
    return launchRaw(fn, grid, block, sharedMemory, params);
  }
  Status launchRaw(CUfunction fn, const unsigned grid[3], const unsigned block[3],
                   unsigned sharedMemory, void **params);

private:
  CudaContext() = default;
  const CudaDriver *driver_ = nullptr;
  CUdevice device_ = 0;
  CUcontext context_ = nullptr;
  CUstream stream_ = nullptr;
  DeviceInfo info_;
};

} // namespace glm::cuda
