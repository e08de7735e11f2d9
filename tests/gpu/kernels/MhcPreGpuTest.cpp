// mhc_pre's CUDA kernels (decode and prefill) against the CPU reference, at GLM-5.3-Flash's width
// (hc 4, hidden 4096: 16384 inputs a token) and the tiny model's (hidden 128); the decode kernel
// folded with mhc_post, the norm after it or both against the kernels it replaces.
#include "kernels/mhc_post/mhc_post_gpu.h"
#include "kernels/mhc_pre/mhc_pre.h"
#include "kernels/mhc_pre/mhc_pre_gpu.h"
#include "kernels/rms_norm/rms_norm_gpu.h"
#include "tests/gpu/support/GpuTest.h"

#include <cstdio>

namespace glm::testing {
namespace {

const char *kSource = R"(#include "kernels/mhc_pre/mhc_pre.cuh")";
constexpr int64_t kHc = 4, kMix = (2 + kHc) * kHc;

struct Shape {
  int64_t tokens, hidden;
};
// Flash at decode batches, either side of the decode/prefill switch (64) and at prefill; the tiny
// model; a hidden size that is not a multiple of the 8-element chunk (the scalar path).
const Shape kShapes[] = {{1, 4096}, {3, 4096}, {64, 4096}, {65, 4096},  {37, 4096}, {2048, 4096},
                         {1, 128},  {3, 128},  {37, 128},  {2048, 128}, {5, 100}};

// Kernel order in the module: the decode kernel's four instances, then the prefill kernel's.
const std::vector<std::string> kNames = {
    "glm::kernels::mhcPreDecodeKernel<float, float, 4>",
    "glm::kernels::mhcPreDecodeKernel<float, glm::kernels::Bf16, 4>",
    "glm::kernels::mhcPreDecodeKernel<glm::kernels::Bf16, glm::kernels::Bf16, 4>",
    "glm::kernels::mhcPreDecodeKernel<glm::kernels::Bf16, float, 4>",
    "glm::kernels::mhcPrePrefillKernel<float, float, 4>",
    "glm::kernels::mhcPrePrefillKernel<float, glm::kernels::Bf16, 4>",
    "glm::kernels::mhcPrePrefillKernel<glm::kernels::Bf16, glm::kernels::Bf16, 4>",
    "glm::kernels::mhcPrePrefillKernel<glm::kernels::Bf16, float, 4>",
};
size_t kernelIndex(bool prefill, bool bf16Act, bool bf16Weight) {
  const size_t types = bf16Act ? (bf16Weight ? 2 : 3) : (bf16Weight ? 1 : 0);
  return (prefill ? 4 : 0) + types;
}

/// One step's inputs. fn, base and scale hold bf16-representable values, so that the same numbers
/// feed the f32 and bf16 weight instances; fn's spread (2/sqrt(width)) puts the mixing logits near
/// unit size, where the sigmoids and the softmax are far from saturated. Each token's streams get
/// their own scale so that the RMS normalisation matters.
struct Inputs {
  std::vector<float> streams, fn, base, scale;
};
Inputs makeInputs(SplitMix64 &rng, const Shape &s, bool bf16Streams) {
  const int64_t width = kHc * s.hidden;
  Inputs in;
  in.streams.resize(s.tokens * width);
  for (int64_t t = 0; t < s.tokens; ++t) {
    const float tokenScale = 0.25f + static_cast<float>(t % 7);
    for (int64_t i = 0; i < width; ++i) {
      const float v = rng.normal() * tokenScale;
      in.streams[t * width + i] = bf16Streams ? kernels::roundToBf16(v) : v;
    }
  }
  in.fn.resize(kMix * width);
  for (float &v : in.fn) {
    v = kernels::roundToBf16(rng.normal() * 2.0f / std::sqrt(static_cast<float>(width)));
  }
  in.base.resize(kMix);
  for (float &v : in.base) {
    v = kernels::roundToBf16(rng.normal() * 0.5f);
  }
  in.scale.resize(3);
  for (float &v : in.scale) {
    v = kernels::roundToBf16(0.5f + rng.uniform());
  }
  return in;
}

struct Outputs {
  std::vector<float> x, pre, post, comb;
};

Outputs reference(const Inputs &in, const Shape &s, int iters) {
  const int64_t width = kHc * s.hidden;
  Outputs out;
  out.x.resize(s.tokens * s.hidden);
  out.pre.resize(s.tokens * kHc);
  out.post.resize(s.tokens * kHc);
  out.comb.resize(s.tokens * kHc * kHc);
  const Status status =
      kernels::mhcPreRef({.streams = in.streams.data(),
                          .fn = kernels::WeightView::f32(in.fn.data(), {kMix, width}),
                          .base = kernels::WeightView::f32(in.base.data(), {kMix}),
                          .scale = kernels::WeightView::f32(in.scale.data(), {3}),
                          .pre = out.pre.data(),
                          .post = out.post.data(),
                          .comb = out.comb.data(),
                          .x = out.x.data(),
                          .tokens = s.tokens,
                          .hcMult = kHc,
                          .hidden = s.hidden,
                          .sinkhornIters = iters,
                          .normEps = 1e-5f,
                          .hcEps = 1e-6f});
  EXPECT_TRUE(status.ok()) << status.toString();
  return out;
}

/// The worst relative error seen so far of x, post, comb and pre, printed at the end of a test so
/// that a run shows the margin under the bounds.
void note(double (&worst)[4], const Outputs &out, const Outputs &ref, bool withPre) {
  worst[0] = std::max(worst[0], relativeError(out.x, ref.x));
  worst[1] = std::max(worst[1], relativeError(out.post, ref.post));
  worst[2] = std::max(worst[2], relativeError(out.comb, ref.comb));
  if (withPre) {
    worst[3] = std::max(worst[3], relativeError(out.pre, ref.pre));
  }
}
void report(const char *what, const double (&worst)[4]) {
  std::printf("mhc_pre %s worst relative error: x %.3g post %.3g comb %.3g pre %.3g\n", what,
              worst[0], worst[1], worst[2], worst[3]);
}

class MhcPreGpu : public ::testing::Test {
protected:
  void SetUp() override {
    std::string why;
    ASSERT_NE(gpu(&why), nullptr) << why;
    GLM_ASSERT_OK_AND_ASSIGN(module_, compileForGpu(kSource, kNames));
  }

  /// Runs one kernel instance on `in`; x comes back widened to f32.
  void run(const Inputs &in, const Shape &s, bool prefill, bool bf16Act, bool bf16Weight,
           bool withPre, int iters, Outputs &out) {
    GLM_ASSERT_OK_AND_ASSIGN(cuda::DeviceMemory streams,
                             bf16Act ? toDevice(toBf16(in.streams)) : toDevice(in.streams));
    GLM_ASSERT_OK_AND_ASSIGN(cuda::DeviceMemory fn,
                             bf16Weight ? toDevice(toBf16(in.fn)) : toDevice(in.fn));
    GLM_ASSERT_OK_AND_ASSIGN(cuda::DeviceMemory base,
                             bf16Weight ? toDevice(toBf16(in.base)) : toDevice(in.base));
    GLM_ASSERT_OK_AND_ASSIGN(cuda::DeviceMemory scale,
                             bf16Weight ? toDevice(toBf16(in.scale)) : toDevice(in.scale));
    GLM_ASSERT_OK_AND_ASSIGN(cuda::DeviceMemory x, poisoned(s.tokens * s.hidden * 4));
    GLM_ASSERT_OK_AND_ASSIGN(cuda::DeviceMemory pre, poisoned(s.tokens * kHc * 4));
    GLM_ASSERT_OK_AND_ASSIGN(cuda::DeviceMemory post, poisoned(s.tokens * kHc * 4));
    GLM_ASSERT_OK_AND_ASSIGN(cuda::DeviceMemory comb, poisoned(s.tokens * kHc * kHc * 4));
    const kernels::MhcPreGpuArgs args{reinterpret_cast<const void *>(streams.ptr()),
                                      reinterpret_cast<const void *>(fn.ptr()),
                                      reinterpret_cast<const void *>(base.ptr()),
                                      reinterpret_cast<const void *>(scale.ptr()),
                                      withPre ? reinterpret_cast<void *>(pre.ptr()) : nullptr,
                                      reinterpret_cast<void *>(post.ptr()),
                                      reinterpret_cast<void *>(comb.ptr()),
                                      reinterpret_cast<void *>(x.ptr()),
                                      s.tokens,
                                      s.hidden,
                                      iters,
                                      1e-5f,
                                      1e-6f};
    GLM_ASSERT_OK(launchAndWait(module_->function(kernelIndex(prefill, bf16Act, bf16Weight)),
                                kernels::mhcPreLaunch(s.tokens, prefill), args));
    if (bf16Act) {
      GLM_ASSERT_OK_AND_ASSIGN(std::vector<uint16_t> xb,
                               fromDevice<uint16_t>(x, s.tokens * s.hidden));
      out.x = widen(xb);
    } else {
      GLM_ASSERT_OK_AND_ASSIGN(out.x, fromDevice<float>(x, s.tokens * s.hidden));
    }
    GLM_ASSERT_OK_AND_ASSIGN(out.post, fromDevice<float>(post, s.tokens * kHc));
    GLM_ASSERT_OK_AND_ASSIGN(out.comb, fromDevice<float>(comb, s.tokens * kHc * kHc));
    GLM_ASSERT_OK_AND_ASSIGN(out.pre, fromDevice<float>(pre, s.tokens * kHc));
    if (!withPre) {
      // Untouched: still the poison (NaN) everywhere.
      for (float v : out.pre) {
        ASSERT_TRUE(std::isnan(v)) << "pre written although null";
      }
    }
  }

  std::unique_ptr<cuda::Module> module_;
};

// f32 activations: everything is f32 arithmetic, so every output sits within 1e-5 of the
// double-accumulated reference, for both kernels at every row count and either weight type.
TEST_F(MhcPreGpu, F32MatchesReference) {
  SplitMix64 rng(101);
  double worst[4] = {};
  for (const Shape &s : kShapes) {
    const Inputs in = makeInputs(rng, s, false);
    const Outputs ref = reference(in, s, 20);
    for (bool prefill : {false, true}) {
      for (bool bf16Weight : {false, true}) {
        Outputs out;
        const bool withPre = !bf16Weight;
        run(in, s, prefill, false, bf16Weight, withPre, 20, out);
        const std::string what = std::to_string(s.tokens) + "x" + std::to_string(s.hidden) +
                                 (prefill ? " prefill" : " decode") +
                                 (bf16Weight ? " bf16 weights" : " f32 weights");
        EXPECT_LE(relativeError(out.x, ref.x), 1e-5) << what << " x";
        EXPECT_LE(relativeError(out.post, ref.post), 1e-5) << what << " post";
        EXPECT_LE(relativeError(out.comb, ref.comb), 1e-5) << what << " comb";
        if (withPre) {
          EXPECT_LE(relativeError(out.pre, ref.pre), 1e-5) << what << " pre";
        }
        note(worst, out, ref, withPre);
      }
    }
  }
  report("f32", worst);
}

// Sinkhorn's loop structure (softmax + eps, one column pass, then iters − 1 row/column rounds)
// at iteration counts where an off-by-one would show.
TEST_F(MhcPreGpu, SinkhornIterationCounts) {
  SplitMix64 rng(102);
  const Shape s{3, 128};
  const Inputs in = makeInputs(rng, s, false);
  for (int iters : {0, 1, 2, 5}) {
    const Outputs ref = reference(in, s, iters);
    for (bool prefill : {false, true}) {
      Outputs out;
      run(in, s, prefill, false, false, true, iters, out);
      EXPECT_LE(relativeError(out.comb, ref.comb), 1e-5) << iters << " iterations";
      EXPECT_LE(relativeError(out.x, ref.x), 1e-5) << iters << " iterations";
    }
  }
}

// bf16 activations (bf16 streams, x stored in bf16): HF computes the norm, the projection, the
// weights and Sinkhorn in f32, so post, comb and pre must still sit within f32 rounding (1e-5) of
// the reference on the same bf16 inputs; x is f32 Σ_s pre[s]·X[s] rounded once to bf16, so each
// element is within 2^-8 relative of the reference (bf16 keeps 8 significant bits, so one
// round-to-nearest moves a value by at most 2^-8 of itself), plus the f32 part, 1e-5.
TEST_F(MhcPreGpu, Bf16WithinOneRounding) {
  SplitMix64 rng(103);
  double worst[4] = {};
  for (const Shape &s : kShapes) {
    const Inputs in = makeInputs(rng, s, true);
    const Outputs ref = reference(in, s, 20);
    for (bool prefill : {false, true}) {
      for (bool bf16Weight : {true, false}) {
        Outputs out;
        run(in, s, prefill, true, bf16Weight, true, 20, out);
        const std::string what = std::to_string(s.tokens) + "x" + std::to_string(s.hidden) +
                                 (prefill ? " prefill" : " decode") +
                                 (bf16Weight ? " bf16 weights" : " f32 weights");
        EXPECT_LE(relativeError(out.x, ref.x), 1.0 / 256 + 1e-5) << what << " x";
        EXPECT_LE(relativeError(out.post, ref.post), 1e-5) << what << " post";
        EXPECT_LE(relativeError(out.comb, ref.comb), 1e-5) << what << " comb";
        EXPECT_LE(relativeError(out.pre, ref.pre), 1e-5) << what << " pre";
        note(worst, out, ref, true);
      }
    }
  }
  report("bf16", worst);
}

// comb is close to doubly stochastic after 20 rounds, whatever the logits (a check on the kernel
// alone, with large logits that make the softmax peaky).
TEST_F(MhcPreGpu, CombIsNearlyDoublyStochastic) {
  SplitMix64 rng(104);
  const Shape s{37, 4096};
  Inputs in = makeInputs(rng, s, false);
  for (float &v : in.base) {
    v *= 6.0f;
  }
  Outputs out;
  run(in, s, true, false, false, true, 20, out);
  for (int64_t t = 0; t < s.tokens; ++t) {
    for (int64_t i = 0; i < kHc; ++i) {
      double column = 0.0;
      for (int64_t j = 0; j < kHc; ++j) {
        column += out.comb[t * kHc * kHc + j * kHc + i];
      }
      EXPECT_NEAR(column, 1.0, 1e-4) << "token " << t << " column " << i;
    }
  }
}

// The decode kernel's folded twins against the launches they replace, on the same inputs:
// mhcPostPreDecodeKernel (plan-fuse-mhc) against mhcPostKernel then mhcPreDecodeKernel, the
// *NormDecodeKernels (plan-fuse-mhc-norm) against those then rmsNormKernel on x. The new streams,
// x, post, comb and the normalised x are the same bits, in f32 and bf16, at every decode row
// count, the tiny width and the scalar path's.
class MhcPostPreGpu : public ::testing::Test {
protected:
  void SetUp() override {
    std::string why;
    ASSERT_NE(gpu(&why), nullptr) << why;
    // Per kernel, its f32 instance, then its bf16 one.
    GLM_ASSERT_OK_AND_ASSIGN(
        module_,
        compileForGpu(
            kSource,
            {"glm::kernels::mhcPostKernel<float, 4>",
             "glm::kernels::mhcPostKernel<glm::kernels::Bf16, 4>",
             "glm::kernels::mhcPreDecodeKernel<float, float, 4>",
             "glm::kernels::mhcPreDecodeKernel<glm::kernels::Bf16, glm::kernels::Bf16, 4>",
             "glm::kernels::mhcPostPreDecodeKernel<float, float, 4>",
             "glm::kernels::mhcPostPreDecodeKernel<glm::kernels::Bf16, glm::kernels::Bf16, 4>",
             "glm::kernels::mhcPreNormDecodeKernel<float, float, 4, float>",
             "glm::kernels::mhcPreNormDecodeKernel<glm::kernels::Bf16, glm::kernels::Bf16, 4, "
             "glm::kernels::Bf16>",
             "glm::kernels::mhcPostPreNormDecodeKernel<float, float, 4, float>",
             "glm::kernels::mhcPostPreNormDecodeKernel<glm::kernels::Bf16, glm::kernels::Bf16, "
             "4, glm::kernels::Bf16>",
             "glm::kernels::rmsNormKernel<float, float>",
             "glm::kernels::rmsNormKernel<glm::kernels::Bf16, glm::kernels::Bf16>"}));
  }

  enum Kernel : size_t {
    kPost = 0,
    kPre = 2,
    kPostPre = 4,
    kPreNorm = 6,
    kPostPreNorm = 8,
    kNorm = 10
  };
  cuda::CUfunction function(Kernel k, bool bf16) const {
    return module_->function(k + (bf16 ? 1 : 0));
  }

  /// The folded kernel (mhc_post folded when `post`, the norm when `norm`) against the launches it
  /// replaces.
  void checkAgainstTheLaunchesItReplaces(bool post, bool norm) {
    SplitMix64 rng(105);
    for (const Shape s :
         {Shape{1, 4096}, Shape{3, 4096}, Shape{64, 4096}, Shape{2, 128}, Shape{5, 100}}) {
      for (bool bf16 : {false, true}) {
        check(rng, s, bf16, post, norm);
      }
    }
  }

  void check(SplitMix64 &rng, const Shape s, bool bf16, bool post, bool norm) {
    const std::string what =
        std::to_string(s.tokens) + "x" + std::to_string(s.hidden) + (bf16 ? " bf16" : " f32");
    // The residual streams, their mixer's post and comb (the previous mhc_pre's, as a plan has
    // them), and a sub-block output y; the next mixer's weights and its sub-block's norm weight.
    const Inputs last = makeInputs(rng, s, bf16);
    const Outputs lastOut = reference(last, s, 20);
    const Inputs next = makeInputs(rng, s, bf16);
    std::vector<float> y(s.tokens * s.hidden), normWeight(s.hidden);
    for (float &v : y) {
      v = bf16 ? kernels::roundToBf16(rng.normal()) : rng.normal();
    }
    for (float &v : normWeight) {
      v = kernels::roundToBf16(1.0f + 0.25f * rng.normal());
    }
    auto device = [&](const std::vector<float> &v) {
      return bf16 ? toDevice(toBf16(v)) : toDevice(v);
    };
    const int64_t element = bf16 ? 2 : 4, streamBytes = s.tokens * kHc * s.hidden * element,
                  xBytes = s.tokens * s.hidden * element;
    GLM_ASSERT_OK_AND_ASSIGN(cuda::DeviceMemory residual,
                             device(post ? last.streams : next.streams));
    GLM_ASSERT_OK_AND_ASSIGN(cuda::DeviceMemory yd, device(y));
    GLM_ASSERT_OK_AND_ASSIGN(cuda::DeviceMemory post0, toDevice(lastOut.post));
    GLM_ASSERT_OK_AND_ASSIGN(cuda::DeviceMemory comb0, toDevice(lastOut.comb));
    GLM_ASSERT_OK_AND_ASSIGN(cuda::DeviceMemory fn, device(next.fn));
    GLM_ASSERT_OK_AND_ASSIGN(cuda::DeviceMemory base, device(next.base));
    GLM_ASSERT_OK_AND_ASSIGN(cuda::DeviceMemory scale, device(next.scale));
    GLM_ASSERT_OK_AND_ASSIGN(cuda::DeviceMemory gamma, device(normWeight));
    struct Results {
      cuda::DeviceMemory streams, x, post, comb, normed;
    };
    auto results = [&]() -> Expected<Results> {
      GLM_ASSIGN_OR_RETURN(cuda::DeviceMemory streams, poisoned(streamBytes));
      GLM_ASSIGN_OR_RETURN(cuda::DeviceMemory x, poisoned(xBytes));
      GLM_ASSIGN_OR_RETURN(cuda::DeviceMemory post, poisoned(s.tokens * kHc * 4));
      GLM_ASSIGN_OR_RETURN(cuda::DeviceMemory comb, poisoned(s.tokens * kHc * kHc * 4));
      GLM_ASSIGN_OR_RETURN(cuda::DeviceMemory normed, poisoned(xBytes));
      return Results{std::move(streams), std::move(x), std::move(post), std::move(comb),
                     std::move(normed)};
    };
    GLM_ASSERT_OK_AND_ASSIGN(Results apart, results());
    GLM_ASSERT_OK_AND_ASSIGN(Results folded, results());
    auto ptr = [](const cuda::DeviceMemory &m) { return reinterpret_cast<void *>(m.ptr()); };
    auto mixerArgs = [&](const Results &r) {
      kernels::MhcPreGpuArgs a{};
      // Unfolded, the mixer reads the residual streams themselves.
      a.streams = post ? ptr(r.streams) : ptr(residual);
      a.fn = ptr(fn);
      a.base = ptr(base);
      a.scale = ptr(scale);
      a.post = ptr(r.post);
      a.comb = ptr(r.comb);
      a.x = ptr(r.x);
      a.tokens = s.tokens;
      a.hidden = s.hidden;
      a.sinkhornIters = 20;
      a.normEps = 1e-5f;
      a.hcEps = 1e-6f;
      return a;
    };
    const kernels::LaunchDims mixerDims = kernels::mhcPreLaunch(s.tokens, false);
    const float eps = 1e-6f;

    // The launches the folded kernel replaces.
    if (post) {
      const kernels::MhcPostGpuArgs postArgs{
          ptr(yd), ptr(residual), ptr(post0), ptr(comb0), ptr(apart.streams), s.tokens, s.hidden};
      GLM_ASSERT_OK(launchAndWait(function(kPost, bf16), kernels::mhcPostLaunch(s.tokens, s.hidden),
                                  postArgs));
    }
    GLM_ASSERT_OK(launchAndWait(function(kPre, bf16), mixerDims, mixerArgs(apart)));
    if (norm) {
      const kernels::RmsNormGpuArgs normArgs{ptr(apart.x), ptr(gamma), ptr(apart.normed),
                                             s.tokens,     s.hidden,   eps};
      GLM_ASSERT_OK(
          launchAndWait(function(kNorm, bf16), kernels::rmsNormLaunch(s.tokens), normArgs));
    }

    kernels::MhcPreGpuArgs args = mixerArgs(folded);
    if (post) {
      args.streams = nullptr; // the folded kernel reads what it writes to newStreams
      args.y = ptr(yd);
      args.residual = ptr(residual);
      args.lastPost = ptr(post0);
      args.lastComb = ptr(comb0);
      args.newStreams = ptr(folded.streams);
    }
    if (norm) {
      args.inputNormWeight = ptr(gamma);
      args.normed = ptr(folded.normed);
      args.inputNormEps = eps;
    }
    const Kernel kernel = post ? (norm ? kPostPreNorm : kPostPre) : kPreNorm;
    GLM_ASSERT_OK(launchAndWait(function(kernel, bf16), mixerDims, args));

    auto same = [&](const cuda::DeviceMemory &a, const cuda::DeviceMemory &b, int64_t bytes,
                    const char *name) {
      Expected<std::vector<uint8_t>> ha = fromDevice<uint8_t>(a, bytes);
      Expected<std::vector<uint8_t>> hb = fromDevice<uint8_t>(b, bytes);
      ASSERT_TRUE(ha.ok() && hb.ok());
      EXPECT_TRUE(*ha == *hb) << what << ": " << name << " differs";
    };
    if (post) {
      same(folded.streams, apart.streams, streamBytes, "streams");
    }
    same(folded.x, apart.x, xBytes, "x");
    same(folded.post, apart.post, s.tokens * kHc * 4, "post");
    same(folded.comb, apart.comb, s.tokens * kHc * kHc * 4, "comb");
    if (norm) {
      same(folded.normed, apart.normed, xBytes, "normalised x");
    }
  }

  std::unique_ptr<cuda::Module> module_;
};

TEST_F(MhcPostPreGpu, FoldedPostGivesTheTwoKernelsBits) {
  checkAgainstTheLaunchesItReplaces(/*post=*/true, /*norm=*/false);
}

TEST_F(MhcPostPreGpu, FoldedNormGivesTheTwoKernelsBits) {
  checkAgainstTheLaunchesItReplaces(/*post=*/false, /*norm=*/true);
}

TEST_F(MhcPostPreGpu, FoldedPostAndNormGiveTheThreeKernelsBits) {
  checkAgainstTheLaunchesItReplaces(/*post=*/true, /*norm=*/true);
}

} // namespace
} // namespace glm::testing
