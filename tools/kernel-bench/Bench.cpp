// Event timing, random device data and the ceilings for glm-kernel-bench.
#include "tools/kernel-bench/Bench.h"

#include "kernels/common/FloatFormats.h"
#include "runtime/common/Random.h"

#include <algorithm>

namespace glm::bench {

Expected<std::unique_ptr<cuda::Module>> Suite::compile(const std::string &source,
                                                       const std::vector<std::string> &names) {
  GLM_ASSIGN_OR_RETURN(kernels::CompiledModule module,
                       kernels::compileKernels(source, names, ctx_.info().arch));
  return ctx_.load(module.cubin, module.entries);
}

Expected<cuda::DeviceMemory> Suite::random(size_t count, bool bf16, float scale) {
  SplitMix64 rng(count * 2654435761u + (bf16 ? 1 : 0));
  const size_t bytes = count * (bf16 ? 2 : 4);
  GLM_ASSIGN_OR_RETURN(cuda::DeviceMemory m, ctx_.allocate(bytes));
  // Fill in chunks so that multi-GB buffers do not need a host copy of their size.
  const size_t chunk = 1 << 22;
  std::vector<uint8_t> host(std::min(bytes, chunk * (bf16 ? 2 : 4)));
  for (size_t done = 0; done < count; done += chunk) {
    const size_t n = std::min(chunk, count - done);
    for (size_t i = 0; i < n; ++i) {
      const float v = rng.normal() * scale;
      if (bf16) {
        reinterpret_cast<uint16_t *>(host.data())[i] = kernels::floatToBf16(v);
      } else {
        reinterpret_cast<float *>(host.data())[i] = v;
      }
    }
    GLM_RETURN_IF_ERROR(
        ctx_.upload(m.ptr() + done * (bf16 ? 2 : 4), host.data(), n * (bf16 ? 2 : 4)));
  }
  return m;
}

Status Suite::time(const std::function<Status()> &launch, Row &row, int reps) {
  const cuda::CudaDriver &d = ctx_.driver();
  for (int i = 0; i < 5; ++i) {
    GLM_RETURN_IF_ERROR(launch());
  }
  GLM_RETURN_IF_ERROR(ctx_.synchronize());
  cuda::CUevent start = nullptr, stop = nullptr;
  GLM_CU(&d, cuEventCreate(&start, cuda::kEventDefault));
  GLM_CU(&d, cuEventCreate(&stop, cuda::kEventDefault));
  std::vector<double> us;
  Status status = Status::success();
  for (int i = 0; i < reps && status.ok(); ++i) {
    status = cuda::check(d.cuEventRecord(start, ctx_.stream()), "cuEventRecord");
    if (status.ok()) {
      status = launch();
    }
    if (status.ok()) {
      status = cuda::check(d.cuEventRecord(stop, ctx_.stream()), "cuEventRecord");
    }
    if (status.ok()) {
      status = cuda::check(d.cuEventSynchronize(stop), "cuEventSynchronize");
    }
    float ms = 0;
    if (status.ok()) {
      status = cuda::check(d.cuEventElapsedTime(&ms, start, stop), "cuEventElapsedTime");
    }
    us.push_back(ms * 1000.0);
  }
  d.cuEventDestroy(start);
  d.cuEventDestroy(stop);
  GLM_RETURN_IF_ERROR(status);
  std::sort(us.begin(), us.end());
  row.medianUs = us[us.size() / 2];
  row.spreadUs = (us[us.size() * 9 / 10] - us[us.size() / 10]) / 2;
  return Status::success();
}

} // namespace glm::bench
