// mhc_post's CUDA kernel against its CPU reference, at GLM-5.3-Flash's width (hc 4, hidden 4096)
// and the tiny model's (hidden 128), in place and out of place.
#include "kernels/mhc_post/mhc_post.h"
#include "kernels/mhc_post/mhc_post_gpu.h"
#include "tests/gpu/support/GpuTest.h"

#include <cstdio>

namespace glm::testing {
namespace {

const char *kSource = R"(#include "kernels/mhc_post/mhc_post.cuh")";
constexpr int64_t kHc = 4;

struct Shape {
  int64_t tokens, hidden;
};
const Shape kShapes[] = {{1, 4096}, {3, 4096}, {37, 4096},  {2048, 4096}, {1, 128},
                         {3, 128},  {37, 128}, {2048, 128}, {5, 100}};

/// post in (0, 2) and a positive, roughly doubly stochastic comb, as mhc_pre produces them.
struct Inputs {
  std::vector<float> y, residual, post, comb;
};
Inputs makeInputs(SplitMix64 &rng, const Shape &s, bool bf16) {
  auto value = [&](float scale) {
    const float v = rng.normal() * scale;
    return bf16 ? kernels::roundToBf16(v) : v;
  };
  Inputs in;
  in.y.resize(s.tokens * s.hidden);
  for (float &v : in.y) {
    v = value(2.0f);
  }
  in.residual.resize(s.tokens * kHc * s.hidden);
  for (float &v : in.residual) {
    v = value(3.0f);
  }
  in.post.resize(s.tokens * kHc);
  for (float &v : in.post) {
    v = 2.0f * rng.uniform();
  }
  in.comb.resize(s.tokens * kHc * kHc);
  for (float &v : in.comb) {
    v = 0.25f * (0.5f + rng.uniform());
  }
  return in;
}

std::vector<float> reference(const Inputs &in, const Shape &s) {
  std::vector<float> out(in.residual.size());
  const Status status = kernels::mhcPostRef({.y = in.y.data(),
                                             .residual = in.residual.data(),
                                             .post = in.post.data(),
                                             .comb = in.comb.data(),
                                             .out = out.data(),
                                             .tokens = s.tokens,
                                             .hcMult = kHc,
                                             .hidden = s.hidden});
  EXPECT_TRUE(status.ok()) << status.toString();
  return out;
}

class MhcPostGpu : public ::testing::Test {
protected:
  void SetUp() override {
    std::string why;
    ASSERT_NE(gpu(&why), nullptr) << why;
    GLM_ASSERT_OK_AND_ASSIGN(module_,
                             compileForGpu(kSource, {
                                                        "glm::kernels::mhcPostKernel<float, 4>",
                                                        "glm::kernels::mhcPostKernel<"
                                                        "glm::kernels::Bf16, 4>",
                                                    }));
  }

  /// Runs the kernel; `inPlace` writes the new streams over the residual.
  void run(const Inputs &in, const Shape &s, bool bf16, bool inPlace, std::vector<float> &out) {
    GLM_ASSERT_OK_AND_ASSIGN(cuda::DeviceMemory y, bf16 ? toDevice(toBf16(in.y)) : toDevice(in.y));
    GLM_ASSERT_OK_AND_ASSIGN(cuda::DeviceMemory residual,
                             bf16 ? toDevice(toBf16(in.residual)) : toDevice(in.residual));
    GLM_ASSERT_OK_AND_ASSIGN(cuda::DeviceMemory post, toDevice(in.post));
    GLM_ASSERT_OK_AND_ASSIGN(cuda::DeviceMemory comb, toDevice(in.comb));
    GLM_ASSERT_OK_AND_ASSIGN(cuda::DeviceMemory fresh, poisoned(in.residual.size() * 4));
    const cuda::DeviceMemory &target = inPlace ? residual : fresh;
    const kernels::MhcPostGpuArgs args{reinterpret_cast<const void *>(y.ptr()),
                                       reinterpret_cast<const void *>(residual.ptr()),
                                       reinterpret_cast<const void *>(post.ptr()),
                                       reinterpret_cast<const void *>(comb.ptr()),
                                       reinterpret_cast<void *>(target.ptr()),
                                       s.tokens,
                                       s.hidden};
    GLM_ASSERT_OK(launchAndWait(module_->function(bf16 ? 1 : 0),
                                kernels::mhcPostLaunch(s.tokens, s.hidden), args));
    if (bf16) {
      GLM_ASSERT_OK_AND_ASSIGN(std::vector<uint16_t> b,
                               fromDevice<uint16_t>(target, in.residual.size()));
      out = widen(b);
    } else {
      GLM_ASSERT_OK_AND_ASSIGN(out, fromDevice<float>(target, in.residual.size()));
    }
  }

  std::unique_ptr<cuda::Module> module_;
};

TEST_F(MhcPostGpu, F32MatchesReference) {
  SplitMix64 rng(201);
  for (const Shape &s : kShapes) {
    const Inputs in = makeInputs(rng, s, false);
    const std::vector<float> ref = reference(in, s);
    for (bool inPlace : {false, true}) {
      std::vector<float> out;
      run(in, s, false, inPlace, out);
      EXPECT_LE(relativeError(out, ref), 1e-5)
          << s.tokens << "x" << s.hidden << (inPlace ? " in place" : "");
    }
  }
}

// bf16: HF rounds post and comb to bf16, the product post·y, the 4-term mix Σ_i comb·R and the
// final sum (glm53_arch.md §2.2). Two checks:
//  - against the f32 reference, a bound derived from those five roundings, each at most 2^-8 of
//    the value it rounds (bf16 keeps 8 significant bits): |err| <= 2^-8 (2|p·y| + Σ_i |c_i·R_i| +
//    |mix| + |out|) per element, so by the triangle inequality the L2 error is at most 2^-8 times
//    the L2 norms of those terms;
//  - against a host emulation of the same roundings: the kernel's f32 mix differs from the
//    emulation's double one by a few f32 ulps, so a bf16 rounding can land differently only when
//    the value lies within ~2^-22 relative of a rounding midpoint, about 2^-22 / 2^-8 = 2^-14 of
//    the elements per rounding; allow 1e-3 of the elements to differ (and none by more than a bf16
//    ulp of the mix plus one of the result).
TEST_F(MhcPostGpu, Bf16RoundsAsHf) {
  SplitMix64 rng(202);
  for (const Shape &s : kShapes) {
    const Inputs in = makeInputs(rng, s, true);
    const std::vector<float> ref = reference(in, s);
    std::vector<float> emulated(ref.size()), slack(ref.size());
    double normPy = 0, normAbsMix = 0, normMix = 0, normOut = 0;
    for (int64_t t = 0; t < s.tokens; ++t) {
      for (int64_t j = 0; j < kHc; ++j) {
        const float p = kernels::roundToBf16(in.post[t * kHc + j]);
        for (int64_t d = 0; d < s.hidden; ++d) {
          const float py = kernels::roundToBf16(p * in.y[t * s.hidden + d]);
          double mix = 0.0, absMix = 0.0;
          for (int64_t i = 0; i < kHc; ++i) {
            const double term =
                static_cast<double>(kernels::roundToBf16(in.comb[(t * kHc + i) * kHc + j])) *
                in.residual[(t * kHc + i) * s.hidden + d];
            mix += term;
            absMix += std::abs(term);
          }
          const size_t e = (t * kHc + j) * s.hidden + d;
          const float mixed = kernels::roundToBf16(static_cast<float>(mix));
          emulated[e] = kernels::roundToBf16(py + mixed);
          // One bf16 ulp (2^-7 relative at most) of the mix and of the result.
          slack[e] = (std::abs(mixed) + std::abs(emulated[e])) / 128;
          normPy += static_cast<double>(py) * py;
          normAbsMix += absMix * absMix;
          normMix += mix * mix;
          normOut += static_cast<double>(ref[e]) * ref[e];
        }
      }
    }
    const double bound =
        (2 * std::sqrt(normPy) + std::sqrt(normAbsMix) + std::sqrt(normMix) + std::sqrt(normOut)) /
            256 / std::sqrt(normOut) +
        1e-5;
    std::vector<float> out;
    run(in, s, true, s.tokens % 2 == 1, out);
    EXPECT_LE(relativeError(out, ref), bound) << s.tokens << "x" << s.hidden;
    size_t differ = 0, beyond = 0;
    for (size_t e = 0; e < out.size(); ++e) {
      differ += out[e] != emulated[e] ? 1 : 0;
      beyond += std::abs(out[e] - emulated[e]) <= slack[e] ? 0 : 1;
    }
    EXPECT_EQ(beyond, 0u) << s.tokens << "x" << s.hidden;
    EXPECT_LE(static_cast<double>(differ), 1e-3 * out.size()) << s.tokens << "x" << s.hidden;
    std::printf("mhc_post bf16 %lldx%lld: error %.3g (bound %.3g), %zu of %zu differ from the "
                "emulation\n",
                static_cast<long long>(s.tokens), static_cast<long long>(s.hidden),
                relativeError(out, ref), bound, differ, out.size());
  }
}

} // namespace
} // namespace glm::testing
