// The CUDA engine's DeviceQuantizer: a Q4 or fp8 binding's rank slice quantized on the GPU by
// kernels/quantize/quantize.cuh, straight into the device weights arena, with the host
// quantizer's bytes and statistics (quantize_gpu.h says which are bit-equal). The kernels are
// compiled with NVRTC when the engine is created (cached under $GLM_KERNEL_CACHE); when they
// cannot be, or a device step fails, the load goes on with the host quantizer and a warning.
//
// The order with the engine's window upload: loadPlanWeightsWindow calls quantize() for each
// such binding of the window while it fills the host staging buffer (leaving the slice zero
// there); the kernels write the arena at once; the engine then uploads the window except the
// ranges takeWritten() returns, so the staging zeros never overwrite the device's bytes.
//
// $GLM_GPU_QUANTIZE: "off" quantizes on the host; "exact" runs the f64 paths (fp8 blocks, and the
// bit-equal Q4 statistics) even on a GPU whose f64 is slow (by default such a GPU quantizes Q4
// with close f32 statistics and leaves fp8 blocks to the host).
#pragma once

#include "runtime/cuda/CudaContext.h"
#include "runtime/weights/PlanWeights.h"

#include <memory>
#include <vector>

namespace glm::cuda {

class CudaQuantizer final : public DeviceQuantizer {
public:
  /// Source bytes uploaded and quantized at a time (whole 128-row blocks, at least one).
  static constexpr uint64_t kBandBytes = uint64_t{256} << 20;

  /// The quantizer of the weights arena at `arena` (`arenaBytes` long) on `ctx`; null, with a
  /// warning logged, when its kernels do not compile or load, or $GLM_GPU_QUANTIZE is "off".
  static std::unique_ptr<CudaQuantizer>
  create(CudaContext &ctx, CUdeviceptr arena, uint64_t arenaBytes, uint64_t bandBytes = kBandBytes);
  ~CudaQuantizer() override;

  bool quantize(const Job &job, kernels::QuantizeStats &stats) override;

  /// The arena ranges quantize() wrote since the last call, in the order written.
  std::vector<WeightWindow> takeWritten();

  /// Whether f64 work runs on this GPU (fp8 blocks, exact Q4 statistics).
  bool exact() const { return exact_; }

private:
  CudaQuantizer(CudaContext &ctx, CUdeviceptr arena, uint64_t arenaBytes, uint64_t bandBytes)
      : ctx_(ctx), arena_(arena), arenaBytes_(arenaBytes), bandBytes_(bandBytes) {}
  Status run(const Job &job, kernels::QuantizeStats &stats, bool &bad);
  Expected<CUdeviceptr> scratch(size_t bytes);

  CudaContext &ctx_;
  CUdeviceptr arena_;
  uint64_t arenaBytes_;
  uint64_t bandBytes_;
  bool exact_ = false;
  bool disabled_ = false;
  std::unique_ptr<Module> module_;
  DeviceMemory scratch_;
  std::vector<WeightWindow> written_;
};

} // namespace glm::cuda
