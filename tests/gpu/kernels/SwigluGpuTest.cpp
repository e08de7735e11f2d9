// swiglu's CUDA kernel (the clamped activation between the gate/up and down projections) against
// its CPU reference, at GLM-5.3-Flash's MLP widths (dense 12288, expert 2048) and the tiny model's
// (256, 64), with separate and fused [gate | up] inputs.
#include "kernels/swiglu/swiglu.h"
#include "kernels/swiglu/swiglu_gpu.h"
#include "tests/gpu/support/GpuTest.h"

namespace glm::testing {
namespace {

const char *kSource = R"(#include "kernels/swiglu/swiglu.cuh")";

struct Shape {
  int64_t rows, width;
};
const Shape kShapes[] = {{1, 12288}, {3, 12288},   {37, 12288}, {2048, 12288}, {1, 2048},
                         {37, 2048}, {2048, 2048}, {3, 256},    {37, 64},      {5, 100}};

/// Gate and up values spread wide enough (σ = 6) that limit 10 clamps a tenth of them.
std::vector<float> randomValues(SplitMix64 &rng, size_t n, bool bf16) {
  std::vector<float> v(n);
  for (float &x : v) {
    x = rng.normal() * 6.0f;
    if (bf16) {
      x = kernels::roundToBf16(x);
    }
  }
  return v;
}

class SwigluGpu : public ::testing::Test {
protected:
  void SetUp() override {
    std::string why;
    ASSERT_NE(gpu(&why), nullptr) << why;
    GLM_ASSERT_OK_AND_ASSIGN(module_,
                             compileForGpu(kSource, {
                                                        "glm::kernels::swigluKernel<float>",
                                                        "glm::kernels::swigluKernel<"
                                                        "glm::kernels::Bf16>",
                                                    }));
  }

  /// Runs the kernel on gate and up, either as two tensors or as one fused [gate | up] row (row
  /// stride 2·width); `inPlace` writes over gate (separate tensors only).
  void run(const std::vector<float> &gate, const std::vector<float> &up, const Shape &s,
           float limit, bool bf16, bool fused, bool inPlace, std::vector<float> &out) {
    std::vector<float> joined;
    if (fused) {
      joined.resize(2 * gate.size());
      for (int64_t r = 0; r < s.rows; ++r) {
        std::copy_n(gate.begin() + r * s.width, s.width, joined.begin() + 2 * r * s.width);
        std::copy_n(up.begin() + r * s.width, s.width, joined.begin() + (2 * r + 1) * s.width);
      }
    }
    const std::vector<float> &first = fused ? joined : gate;
    GLM_ASSERT_OK_AND_ASSIGN(cuda::DeviceMemory dg,
                             bf16 ? toDevice(toBf16(first)) : toDevice(first));
    GLM_ASSERT_OK_AND_ASSIGN(cuda::DeviceMemory du, bf16 ? toDevice(toBf16(up)) : toDevice(up));
    GLM_ASSERT_OK_AND_ASSIGN(cuda::DeviceMemory fresh, poisoned(gate.size() * 4));
    const cuda::DeviceMemory &target = inPlace ? dg : fresh;
    const size_t bytes = bf16 ? 2 : 4;
    const kernels::SwigluGpuArgs args{
        reinterpret_cast<const void *>(dg.ptr()),
        fused ? reinterpret_cast<const void *>(dg.ptr() + s.width * bytes)
              : reinterpret_cast<const void *>(du.ptr()),
        reinterpret_cast<void *>(target.ptr()),
        s.rows,
        s.width,
        fused ? 2 * s.width : s.width,
        limit};
    GLM_ASSERT_OK(launchAndWait(module_->function(bf16 ? 1 : 0),
                                kernels::swigluLaunch(s.rows, s.width), args));
    if (bf16) {
      GLM_ASSERT_OK_AND_ASSIGN(std::vector<uint16_t> b, fromDevice<uint16_t>(target, gate.size()));
      out = widen(b);
    } else {
      GLM_ASSERT_OK_AND_ASSIGN(out, fromDevice<float>(target, gate.size()));
    }
  }

  std::unique_ptr<cuda::Module> module_;
};

std::vector<float> reference(const std::vector<float> &gate, const std::vector<float> &up,
                             float limit) {
  std::vector<float> out(gate.size());
  const Status status = kernels::swigluActivationRef({.gate = gate.data(),
                                                      .up = up.data(),
                                                      .out = out.data(),
                                                      .count = static_cast<int64_t>(gate.size()),
                                                      .limit = limit});
  EXPECT_TRUE(status.ok()) << status.toString();
  return out;
}

TEST_F(SwigluGpu, F32MatchesReference) {
  SplitMix64 rng(401);
  for (const Shape &s : kShapes) {
    const std::vector<float> gate = randomValues(rng, s.rows * s.width, false);
    const std::vector<float> up = randomValues(rng, s.rows * s.width, false);
    for (float limit : {10.0f, INFINITY}) {
      const std::vector<float> ref = reference(gate, up, limit);
      for (int layout = 0; layout < 3; ++layout) { // separate, fused, in place
        std::vector<float> out;
        run(gate, up, s, limit, false, layout == 1, layout == 2, out);
        EXPECT_LE(relativeError(out, ref), 1e-5)
            << s.rows << "x" << s.width << " limit " << limit << " layout " << layout;
      }
    }
  }
}

// bf16: HF's bf16 silu rounds silu(gate) to bf16 and the bf16 product rounds again: two roundings
// of at most 2^-8 relative each (bf16 keeps 8 significant bits; no cancellation in a product), so
// the L2 error against the f32 reference on the same inputs is at most 2 · 2^-8 (+ 1e-5 for the f32
// part). Against a host emulation of those two roundings, the product of two bf16 values is exact
// in f32, so only the silu rounding can differ, and only where the device's expf and the host's
// differ across a bf16 rounding midpoint (a few f32 ulps against a 2^-8 spacing: ~2^-14 of the
// elements); allow 1e-3.
TEST_F(SwigluGpu, Bf16RoundsAsHf) {
  SplitMix64 rng(402);
  for (const Shape &s : kShapes) {
    const std::vector<float> gate = randomValues(rng, s.rows * s.width, true);
    const std::vector<float> up = randomValues(rng, s.rows * s.width, true);
    for (float limit : {10.0f, INFINITY}) {
      const std::vector<float> ref = reference(gate, up, limit);
      std::vector<float> emulated(ref.size());
      for (size_t i = 0; i < ref.size(); ++i) {
        const float g = std::min(gate[i], limit);
        const float u = std::clamp(up[i], -limit, limit);
        emulated[i] = kernels::roundToBf16(kernels::roundToBf16(g / (1.0f + std::exp(-g))) * u);
      }
      for (bool fused : {false, true}) {
        std::vector<float> out;
        run(gate, up, s, limit, true, fused, false, out);
        EXPECT_LE(relativeError(out, ref), 2.0 / 256 + 1e-5)
            << s.rows << "x" << s.width << " limit " << limit;
        size_t differ = 0;
        for (size_t i = 0; i < out.size(); ++i) {
          differ += out[i] != emulated[i] ? 1 : 0;
        }
        EXPECT_LE(static_cast<double>(differ), 1e-3 * out.size())
            << s.rows << "x" << s.width << " limit " << limit;
      }
    }
  }
}

// The clamps: the gate only from above, up both ways; NaN passes through (torch.clamp keeps NaN).
TEST_F(SwigluGpu, ClampsAsHf) {
  const std::vector<float> gate = {-30.0f, -10.0f, 0.0f, 9.0f, 11.0f, 50.0f, NAN, 1.0f};
  const std::vector<float> up = {-30.0f, -11.0f, 1.0f, 9.0f, 11.0f, 50.0f, 1.0f, NAN};
  const Shape s{1, static_cast<int64_t>(gate.size())};
  std::vector<float> out;
  run(gate, up, s, 10.0f, false, false, false, out);
  const std::vector<float> ref = reference(gate, up, 10.0f);
  for (size_t i = 0; i < gate.size(); ++i) {
    if (std::isnan(ref[i])) {
      EXPECT_TRUE(std::isnan(out[i])) << i;
    } else {
      EXPECT_NEAR(out[i], ref[i], 1e-5f * std::max(1.0f, std::abs(ref[i]))) << i;
    }
  }
}

} // namespace
} // namespace glm::testing
