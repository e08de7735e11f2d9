// convert's CUDA kernel against its CPU reference: bf16 -> f32 widening is exact, so the outputs
// must be equal bit for bit, at the real vocabulary's logits width and at sizes that are not
// multiples of the 8-wide path.
#include "kernels/convert/convert.h"
#include "kernels/convert/convert_gpu.h"
#include "tests/gpu/support/GpuTest.h"

namespace glm::testing {
namespace {

TEST(ConvertGpu, WidensBf16ExactlyAsTheReference) {
  std::string why;
  ASSERT_NE(gpu(&why), nullptr) << why;
  GLM_ASSERT_OK_AND_ASSIGN(std::unique_ptr<cuda::Module> module,
                           compileForGpu(R"(#include "kernels/convert/convert.cuh")",
                                         {"glm::kernels::convertBf16ToF32Kernel"}));
  SplitMix64 rng(21);
  // GLM-5.3-Flash's logits rows at 1 and 4 rows, the tiny model's, and counts that are not
  // multiples of the 8-wide path.
  const int64_t flash = flashConfig().vocabSize, tiny = tinyConfig().vocabSize;
  for (int64_t count : {flash, 4 * flash, tiny, int64_t{13}, int64_t{1001}}) {
    std::vector<uint16_t> x(static_cast<size_t>(count));
    for (uint16_t &v : x) {
      v = kernels::floatToBf16(rng.normal() * 10.0f);
    }
    x[0] = 0x7FC0; // NaN widens to NaN, exactly as the reference does
    std::vector<float> ref(x.size());
    GLM_ASSERT_OK(kernels::convertRef({.x = x.data(), .out = ref.data(), .count = count}));
    GLM_ASSERT_OK_AND_ASSIGN(cuda::DeviceMemory dx, toDevice(x));
    GLM_ASSERT_OK_AND_ASSIGN(cuda::DeviceMemory dout, poisoned(x.size() * 4));
    GLM_ASSERT_OK(
        launchAndWait(module->function(0), kernels::convertLaunch(count),
                      kernels::ConvertGpuArgs{reinterpret_cast<const void *>(dx.ptr()),
                                              reinterpret_cast<void *>(dout.ptr()), count}));
    GLM_ASSERT_OK_AND_ASSIGN(std::vector<float> out, fromDevice<float>(dout, x.size()));
    EXPECT_EQ(std::memcmp(out.data(), ref.data(), out.size() * 4), 0) << count;
  }
}

} // namespace
} // namespace glm::testing
