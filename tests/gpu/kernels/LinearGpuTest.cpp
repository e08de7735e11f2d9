// linear's CUDA kernels against the CPU reference: every instance on every shape (GLM-5.3-Flash's
// projections, the tiny model's, and odd sizes that leave tails in every tile), bias on and off.
// Quantized weights (Q4 groups, fp8 blocks) are laid out as kernels/common/DenseFormats.h defines
// them, one buffer per weight, and the reference reads the same bytes through WeightView::encoded.
#include "kernels/linear/linear.h"
#include "kernels/linear/linear_gpu.h"
#include "tests/gpu/support/GpuTest.h"

#include <cstdio>
#include <cstring>
#include <functional>

namespace glm::testing {
namespace {

using kernels::LinearKernel;

const char *kSource = R"(#include "kernels/linear/linear.cuh")";

enum class Act { F32, Bf16 };
enum class Wt { F32, Bf16, Fp8, Q4 };

const char *actName(Act t) { return t == Act::F32 ? "float" : "glm::kernels::Bf16"; }
const char *wtName(Wt w) {
  return w == Wt::F32    ? "float"
         : w == Wt::Bf16 ? "glm::kernels::Bf16"
         : w == Wt::Fp8  ? "glm::kernels::Fp8E4m3"
                         : "glm::kernels::Q4Groups";
}

struct Shape {
  int64_t rows, in, out;
};

/// One kernel instance and its grid rule; `roundsWeights` when it multiplies bf16 roundings of the
/// weights (the Q4 prefill tile), which its bound allows for.
struct Variant {
  std::string label, name;
  std::function<kernels::LaunchDims(const Shape &)> dims;
  bool roundsWeights = false;
};

Variant variant(LinearKernel k, Act t, Wt w) {
  const char *label = k == LinearKernel::DecodeMma           ? "decode-mma"
                      : k == LinearKernel::DecodeMmaWide     ? "decode-mma-wide"
                      : k == LinearKernel::PrefillMma        ? "prefill-mma"
                      : k == LinearKernel::PrefillWgmma      ? "prefill-wgmma"
                      : k == LinearKernel::Gemv              ? "gemv"
                      : k == LinearKernel::DecodeQuant       ? "decode-quant"
                      : k == LinearKernel::DecodeQuantWide   ? "decode-quant-wide"
                      : k == LinearKernel::DecodeQuantSplit2 ? "decode-quant-split2"
                      : k == LinearKernel::DecodeQuantSplit4 ? "decode-quant-split4"
                      : k == LinearKernel::DecodeQuantSplit8 ? "decode-quant-split8"
                                                             : "tiled";
  return {std::string(label) + "<" + actName(t) + ", " + wtName(w) + ">",
          kernels::linearKernelName(k, actName(t), wtName(w)), [k, w](const Shape &s) {
            // Rings sized for the weights' format and this device, as the compiler sizes them.
            return kernels::linearLaunch(k, s.rows, s.in, s.out, gpu()->info().smCount,
                                         {w == Wt::Q4, gpu()->info().sharedMemoryPerBlockOptin});
          }};
}

const std::string kBf16Pair = "glm::kernels::Bf16, glm::kernels::Bf16";

/// The decode kernel with 16 x mTiles outputs per block and `unroll` chunks per step.
Variant decodeVariant(int mTiles, int unroll) {
  return {"decode-mma-" + std::to_string(mTiles) + "x" + std::to_string(unroll),
          "glm::kernels::linearDecodeMmaKernel<" + kBf16Pair + ", " + std::to_string(mTiles) +
              ", " + std::to_string(unroll) + ">",
          [mTiles](const Shape &s) {
            return kernels::linearDecodeLaunch(s.rows, s.out, gpu()->info().smCount, mTiles);
          }};
}

/// The mma.sync prefill kernel with tiles of 128 x tileN x k.
Variant prefillVariant(int tileN, int k) {
  return {
      "prefill-mma-" + std::to_string(tileN) + "x" + std::to_string(k),
      "glm::kernels::linearPrefillMmaKernel<" + kBf16Pair + ", " + std::to_string(tileN) + ", " +
          std::to_string(k) + ">",
      [tileN, k](const Shape &s) { return kernels::linearPrefillLaunch(s.rows, s.out, tileN, k); }};
}

/// The kernels that serve activations T and weights W; each must be right on any shape, whichever
/// shapes linearKernelFor sends it. bf16 x bf16 also runs the other sizes the bench compares and
/// the gemv; wgmma only where the GPU is an sm_90a.
std::vector<Variant> variantsFor(Act t, Wt w) {
  if (t == Act::Bf16 && w == Wt::Bf16) {
    std::vector<Variant> v = {variant(LinearKernel::DecodeMma, t, w),
                              variant(LinearKernel::DecodeMmaWide, t, w),
                              decodeVariant(2, 4),
                              variant(LinearKernel::PrefillMma, t, w),
                              prefillVariant(128, 64),
                              prefillVariant(256, 32),
                              prefillVariant(256, 64),
                              variant(LinearKernel::Gemv, t, w)};
    if (gpu()->info().arch == "sm_90a") {
      v.push_back(variant(LinearKernel::PrefillWgmma, t, w));
    }
    return v;
  }
  if (t == Act::Bf16 && (w == Wt::Q4 || w == Wt::Fp8)) {
    Variant prefill = variant(LinearKernel::PrefillMma, t, w);
    prefill.roundsWeights = w == Wt::Q4;
    std::vector<Variant> v = {variant(LinearKernel::DecodeQuant, t, w),
                              variant(LinearKernel::DecodeQuantWide, t, w),
                              variant(LinearKernel::DecodeQuantSplit2, t, w),
                              variant(LinearKernel::DecodeQuantSplit4, t, w),
                              variant(LinearKernel::DecodeQuantSplit8, t, w),
                              prefill};
    // The decode kernel with rings of 2 and 6 slots (the bench compares them).
    for (int stages : {2, 6}) {
      v.push_back({"decode-quant-" + std::to_string(stages) + "-stages<" + std::string(actName(t)) +
                       ", " + wtName(w) + ">",
                   "glm::kernels::linearDecodeQuantKernel<glm::kernels::Bf16, " +
                       std::string(wtName(w)) + ", 2, " + std::to_string(stages) + ">",
                   [stages, w](const Shape &s) {
                     return kernels::linearDecodeQuantStagesLaunch(
                         s.rows, s.in, s.out, gpu()->info().smCount, stages,
                         {w == Wt::Q4, gpu()->info().sharedMemoryPerBlockOptin});
                   }});
    }
    // The decode kernel with the warps sm_121a's 99 KB leaves (fewer at 16 rows than here).
    Variant gb10 = variant(LinearKernel::DecodeQuant, t, w);
    gb10.label += " at 99 KB";
    gb10.dims = [w](const Shape &s) {
      return kernels::linearLaunch(LinearKernel::DecodeQuant, s.rows, s.in, s.out,
                                   gpu()->info().smCount,
                                   {w == Wt::Q4, kernels::kLinearQuantMaxShared});
    };
    v.push_back(std::move(gb10));
    if (w == Wt::Fp8) {
      v.push_back(variant(LinearKernel::Gemv, t, w));
    }
    return v;
  }
  return {variant(LinearKernel::Gemv, t, w), variant(LinearKernel::Tiled, t, w)};
}

/// Every instance the tests run, in module order.
std::vector<std::string> allNames() {
  std::vector<std::string> names;
  for (Act t : {Act::F32, Act::Bf16}) {
    for (Wt w : {Wt::F32, Wt::Bf16, Wt::Fp8, Wt::Q4}) {
      for (const Variant &v : variantsFor(t, w)) {
        names.push_back(v.name);
      }
    }
  }
  return names;
}

// GLM-5.3-Flash: KDA q/k/v (4096 -> 8192) and o_proj (8192 -> 4096), DSA q_b (1536 -> 16384), the
// dense MLP's gate (4096 -> 12288) and down (12288 -> 4096), at decode, verify-window and prefill
// row counts.
const Shape kGlmShapes[] = {{1, 4096, 8192},    {1, 8192, 4096},    {1, 1536, 16384},
                            {4, 4096, 12288},   {16, 4096, 8192},   {3, 12288, 4096},
                            {64, 4096, 8192},   {2048, 4096, 8192}, {2048, 8192, 4096},
                            {2048, 4096, 12288}};
// The tiny model (hidden 128, intermediate 256, vocabulary 1024) and sizes that are no multiple of
// any tile: in not a multiple of 8 (unaligned rows), of 32 (a K tail in aligned rows), out and
// rows ragged.
const Shape kOddShapes[] = {{3, 128, 256}, {64, 128, 1024}, {1, 256, 128},    {37, 100, 130},
                            {1, 100, 130}, {16, 130, 100},  {3, 4096, 1000},  {37, 4096, 1000},
                            {17, 136, 72}, {65, 264, 300},  {200, 1000, 777}, {2048, 4096, 1000},
                            {129, 40, 8}};

// Quantized weights at GLM-5.3-Flash's projections (rows 1, 4, 16, 33, 200 and a prefill chunk)
// and tails: out not a multiple of any block (1000, 300, 72, 8), in not a multiple of 128 (Q4: in
// a multiple of 64 only), rows that fill neither tile of 8 nor the block's 16 (5, 12: the decode
// kernel's ring holds that many rows of activations).
const Shape kQuantShapes[] = {{1, 4096, 4096},  {4, 4096, 12288},   {16, 8192, 4096},
                              {33, 4096, 1536}, {200, 4096, 576},   {1, 1024, 4096},
                              {64, 6144, 4096}, {2048, 4096, 1000}, {3, 128, 256},
                              {17, 192, 72},    {65, 320, 300},     {129, 64, 8},
                              {1, 4096, 1000},  {16, 448, 130},     {200, 1000 / 64 * 64, 777},
                              {5, 4096, 1000},  {12, 448, 300}};

/// One product: host operands in f32 (bf16- / fp8-representable where stored narrow), the rows
/// checked against the reference and the reference itself. Fp8 and Q4 weights are one encoded
/// buffer (`wEncoded`), as the weights arena holds them.
struct Problem {
  Shape s;
  Act t;
  Wt w;
  bool hasBias, biasBf16;
  std::vector<float> x, wF32, bias;
  std::vector<uint16_t> wBf16;
  std::vector<uint8_t> wEncoded;
  std::vector<int64_t> checked; // rows compared (all, or a sample of large products)
  std::vector<float> ref;       // [checked, out]
};

Problem makeProblem(const Shape &s, Act t, Wt w, bool hasBias, uint64_t seed) {
  SplitMix64 rng(seed);
  Problem p{s, t, w, hasBias, t == Act::Bf16 || w != Wt::F32, {}, {}, {}, {}, {}, {}, {}};
  p.x.resize(s.rows * s.in);
  for (float &v : p.x) {
    v = rng.normal();
    if (t == Act::Bf16) {
      v = kernels::roundToBf16(v);
    }
  }
  const size_t n = s.out * s.in;
  const float wScale = 1.0f / std::sqrt(static_cast<float>(s.in));
  if (w == Wt::F32) {
    p.wF32.resize(n);
    for (float &v : p.wF32) {
      v = rng.normal() * wScale;
    }
  } else if (w == Wt::Bf16) {
    p.wBf16.resize(n);
    for (uint16_t &v : p.wBf16) {
      v = kernels::floatToBf16(rng.normal() * wScale);
    }
  } else if (w == Wt::Fp8) {
    // Codes over the whole e4m3 range (subnormals included), scales like a quantizer's amax / 448.
    p.wEncoded.assign(kernels::fp8Bytes(1, s.out, s.in), 0);
    for (size_t i = 0; i < n; ++i) {
      p.wEncoded[i] = kernels::floatToFp8E4m3(rng.normal() * 120.0f);
    }
    float *scales =
        reinterpret_cast<float *>(p.wEncoded.data() + kernels::fp8ScalesOffset(1, s.out, s.in));
    const int64_t blocks = kernels::fp8BlocksOf(s.out) * kernels::fp8BlocksOf(s.in);
    for (int64_t b = 0; b < blocks; ++b) {
      scales[b] = wScale / 120.0f * (0.5f + rng.uniform());
    }
  } else {
    // Any code; scales and minima finite f16 of either sign, about what a quantizer writes (the
    // scale a group's range / 15), with a few zero and subnormal scales.
    p.wEncoded.assign(kernels::q4Bytes(1, s.out, s.in), 0);
    for (size_t i = 0; i < n / 2; ++i) {
      p.wEncoded[i] = static_cast<uint8_t>(rng.next() & 0xFF);
    }
    uint16_t *groups =
        reinterpret_cast<uint16_t *>(p.wEncoded.data() + kernels::q4GroupsOffset(1, s.out, s.in));
    const int64_t count = s.out * (s.in / kernels::kQ4Group);
    for (int64_t gi = 0; gi < count; ++gi) {
      const uint64_t pick = rng.next() % 64;
      const double scale = pick == 0   ? 0.0
                           : pick == 1 ? std::ldexp(static_cast<double>(rng.next() % 1024), -24)
                                       : (rng.normal() + 0.1) * wScale / 4.0;
      groups[2 * gi] = kernels::doubleToF16(scale);
      groups[2 * gi + 1] = kernels::doubleToF16(rng.normal() * wScale * 2.0);
    }
  }
  if (hasBias) {
    p.bias.resize(s.out);
    for (float &v : p.bias) {
      v = rng.normal();
      if (p.biasBf16) {
        v = kernels::roundToBf16(v);
      }
    }
  }
  // Large products are checked on a sample of rows (first, middle and last 16), the rest only for
  // having been written; the reference's cost stays at a few hundred million multiply-adds.
  if (s.rows * s.in * s.out <= (int64_t{1} << 28)) {
    for (int64_t r = 0; r < s.rows; ++r) {
      p.checked.push_back(r);
    }
  } else {
    for (int64_t r = 0; r < s.rows; ++r) {
      if (r < 16 || r >= s.rows - 16 || (r >= s.rows / 2 && r < s.rows / 2 + 16)) {
        p.checked.push_back(r);
      }
    }
  }
  std::vector<float> xs(p.checked.size() * s.in);
  for (size_t i = 0; i < p.checked.size(); ++i) {
    std::copy_n(p.x.data() + p.checked[i] * s.in, s.in, xs.data() + i * s.in);
  }
  kernels::WeightView wv;
  if (w == Wt::F32) {
    wv = kernels::WeightView::f32(p.wF32.data(), {s.out, s.in});
  } else if (w == Wt::Bf16) {
    wv = kernels::WeightView::raw(p.wBf16.data(), DType::BF16, {s.out, s.in});
  } else {
    wv = kernels::WeightView::encoded(
        p.wEncoded.data(), w == Wt::Fp8 ? kernels::DenseEncoding::Fp8 : kernels::DenseEncoding::Q4,
        DType::BF16, s.out, s.in);
  }
  p.ref.resize(p.checked.size() * s.out);
  const Status st = kernels::linearRef(
      {.x = xs.data(),
       .weight = wv,
       .bias = hasBias ? kernels::WeightView::f32(p.bias.data(), {s.out}) : kernels::WeightView{},
       .y = p.ref.data(),
       .rows = static_cast<int64_t>(p.checked.size()),
       .inFeatures = s.in,
       .outFeatures = s.out});
  EXPECT_TRUE(st.ok()) << st.toString();
  return p;
}

/// The operands on the device, in the kernel's storage types.
struct DeviceProblem {
  cuda::DeviceMemory x, w, bias;
};

Expected<DeviceProblem> upload(const Problem &p) {
  DeviceProblem d;
  auto bf16 = [](const std::vector<float> &v) {
    std::vector<uint16_t> out(v.size());
    std::transform(v.begin(), v.end(), out.begin(), kernels::floatToBf16);
    return out;
  };
  if (p.t == Act::F32) {
    GLM_ASSIGN_OR_RETURN(d.x, toDevice(p.x));
  } else {
    GLM_ASSIGN_OR_RETURN(d.x, toDevice(bf16(p.x)));
  }
  if (p.w == Wt::F32) {
    GLM_ASSIGN_OR_RETURN(d.w, toDevice(p.wF32));
  } else if (p.w == Wt::Bf16) {
    GLM_ASSIGN_OR_RETURN(d.w, toDevice(p.wBf16));
  } else {
    GLM_ASSIGN_OR_RETURN(d.w, toDevice(p.wEncoded));
  }
  if (p.hasBias) {
    if (p.biasBf16) {
      GLM_ASSIGN_OR_RETURN(d.bias, toDevice(bf16(p.bias)));
    } else {
      GLM_ASSIGN_OR_RETURN(d.bias, toDevice(p.bias));
    }
  }
  return d;
}

/// Runs `v` on the problem (with `addend` [rows, out] in T where given); returns the checked rows
/// of y widened to f32, and through `allWritten` whether every element of y was written (none left
/// as the NaN poison).
Expected<std::vector<float>> runKernel(const cuda::Module &module, const Variant &v,
                                       const Problem &p, const DeviceProblem &d, bool *allWritten,
                                       const cuda::DeviceMemory *addend = nullptr) {
  const std::vector<std::string> names = allNames();
  const size_t index = std::find(names.begin(), names.end(), v.name) - names.begin();
  const size_t elementBytes = p.t == Act::F32 ? 4 : 2;
  const size_t count = p.s.rows * p.s.out;
  GLM_ASSIGN_OR_RETURN(cuda::DeviceMemory y, poisoned(count * elementBytes));
  // The sections after the codes, where linearGpu binds them.
  const kernels::LinearGpuArgs args{
      reinterpret_cast<const void *>(d.x.ptr()),
      reinterpret_cast<const void *>(d.w.ptr()),
      p.w == Wt::Fp8 ? reinterpret_cast<const float *>(d.w.ptr() +
                                                       kernels::fp8ScalesOffset(1, p.s.out, p.s.in))
                     : nullptr,
      p.hasBias ? reinterpret_cast<const void *>(d.bias.ptr()) : nullptr,
      reinterpret_cast<void *>(y.ptr()),
      p.s.rows,
      p.s.in,
      p.s.out,
      p.biasBf16 ? 1 : 0,
      p.w == Wt::Q4 ? reinterpret_cast<const uint32_t *>(
                          d.w.ptr() + kernels::q4GroupsOffset(1, p.s.out, p.s.in))
                    : nullptr,
      addend != nullptr ? reinterpret_cast<const void *>(addend->ptr()) : nullptr};
  GLM_RETURN_IF_ERROR(launchAndWait(module.function(index), v.dims(p.s), args));
  std::vector<float> all(count);
  if (p.t == Act::F32) {
    GLM_ASSIGN_OR_RETURN(all, fromDevice<float>(y, count));
  } else {
    GLM_ASSIGN_OR_RETURN(std::vector<uint16_t> raw, fromDevice<uint16_t>(y, count));
    all = widen(raw);
  }
  *allWritten = std::all_of(all.begin(), all.end(), [](float v) { return std::isfinite(v); });
  std::vector<float> checked(p.checked.size() * p.s.out);
  for (size_t i = 0; i < p.checked.size(); ++i) {
    std::copy_n(all.data() + p.checked[i] * p.s.out, p.s.out, checked.data() + i * p.s.out);
  }
  return checked;
}

class LinearGpu : public ::testing::Test {
protected:
  // One module for the whole suite: NVRTC takes seconds for all the instances.
  static void SetUpTestSuite() {
    if (gpu() != nullptr) {
      Expected<std::unique_ptr<cuda::Module>> m = compileForGpu(kSource, allNames());
      if (m.ok()) {
        module_ = std::move(m).value();
      } else {
        compileError_ = m.status().toString();
      }
    }
  }
  static void TearDownTestSuite() { module_.reset(); }
  void SetUp() override {
    std::string why;
    ASSERT_NE(gpu(&why), nullptr) << why;
    ASSERT_NE(module_, nullptr) << compileError_;
  }

  /// Every kernel of (t, w) on `shapes`, bias alternating on and off, within `bound(in)`.
  template <typename Bound>
  void checkAll(Act t, Wt w, const std::vector<Shape> &shapes, uint64_t seed, Bound bound) {
    int i = 0;
    for (const Shape &s : shapes) {
      const bool hasBias = (i++ % 2) == 0;
      const Problem p = makeProblem(s, t, w, hasBias, seed + i);
      GLM_ASSERT_OK_AND_ASSIGN(DeviceProblem d, upload(p));
      for (const Variant &v : variantsFor(t, w)) {
        bool allWritten = false;
        GLM_ASSERT_OK_AND_ASSIGN(std::vector<float> y, runKernel(*module_, v, p, d, &allWritten));
        const double err = relativeError(y, p.ref);
        const std::string what = v.label + " " + std::to_string(s.rows) + "x" +
                                 std::to_string(s.in) + "x" + std::to_string(s.out) +
                                 (hasBias ? " bias" : "");
        EXPECT_TRUE(allWritten) << what << ": elements left unwritten";
        // A bf16 rounding of each weight adds up to 2^-9 of ||y|| as the output's rounding does.
        EXPECT_LE(err, bound(s.in) + (v.roundsWeights ? std::ldexp(1.0, -9) : 0.0)) << what;
        std::printf("  %-60s rel err %.3g\n", what.c_str(), err);
      }
    }
  }

  static inline std::unique_ptr<cuda::Module> module_;
  static inline std::string compileError_;
};

std::vector<Shape> allShapes() {
  std::vector<Shape> v(std::begin(kGlmShapes), std::end(kGlmShapes));
  v.insert(v.end(), std::begin(kOddShapes), std::end(kOddShapes));
  return v;
}

// f32 activations: f32 FMA accumulation of the reference's own f32 weights (fp8 widened as value
// x block scale, one rounding, as the reference does), so only the accumulation order differs.
const auto kF32Bound = [](int64_t) { return 1e-5; };

// bf16 activations. The inputs are bf16 already and the kernels widen weights exactly as the
// reference does, so two effects remain:
//  - the final rounding of y (plus bias) to bf16: round-to-nearest with 8 significant bits moves
//    every element by at most 2^-9 of itself, hence the L2 norm of the error by at most 2^-9 of
//    ||y||;
//  - f32 accumulation instead of the reference's double: n rounding errors of at most 2^-24 of a
//    partial sum; with random-sign terms the partial sums are ~sqrt(j/n) |y|-sized and the errors
//    independent, about sqrt(n) 2^-24 relative. The tensor cores' adder (which aligns to the
//    largest exponent and truncates) and the split-K partial sums are covered by a factor 8.
const auto kBf16Bound = [](int64_t in) {
  return std::ldexp(1.0, -9) + 8.0 * std::sqrt(static_cast<double>(in)) * std::ldexp(1.0, -24);
};

TEST_F(LinearGpu, F32ActivationsF32Weights) {
  checkAll(Act::F32, Wt::F32, allShapes(), 100, kF32Bound);
}
TEST_F(LinearGpu, F32ActivationsBf16Weights) {
  checkAll(Act::F32, Wt::Bf16, allShapes(), 200, kF32Bound);
}
TEST_F(LinearGpu, F32ActivationsFp8Weights) {
  checkAll(Act::F32, Wt::Fp8, allShapes(), 300, kF32Bound);
}
TEST_F(LinearGpu, Bf16ActivationsBf16Weights) {
  checkAll(Act::Bf16, Wt::Bf16, allShapes(), 400, kBf16Bound);
}
TEST_F(LinearGpu, Bf16ActivationsFp8Weights) {
  checkAll(Act::Bf16, Wt::Fp8, std::vector<Shape>(std::begin(kOddShapes), std::end(kOddShapes)),
           500, kBf16Bound);
}
// (Bf16ActivationsFp8Weights above runs the same kernels on rows of any width: unaligned, 100,
// 130, 40, and K tails.)
std::vector<Shape> quantShapes() {
  return std::vector<Shape>(std::begin(kQuantShapes), std::end(kQuantShapes));
}
TEST_F(LinearGpu, Bf16ActivationsQ4Weights) {
  checkAll(Act::Bf16, Wt::Q4, quantShapes(), 700, kBf16Bound);
}
TEST_F(LinearGpu, Bf16ActivationsFp8BlockWeights) {
  checkAll(Act::Bf16, Wt::Fp8, quantShapes(), 800, kBf16Bound);
}
TEST_F(LinearGpu, F32ActivationsQ4Weights) {
  checkAll(Act::F32, Wt::Q4, quantShapes(), 900, kF32Bound);
}
TEST_F(LinearGpu, Bf16ActivationsF32Weights) {
  checkAll(Act::Bf16, Wt::F32, std::vector<Shape>(std::begin(kOddShapes), std::end(kOddShapes)),
           600, kBf16Bound);
}

// plan-fuse-linear-add's addend: every kernel of every activation and weight type, at decode and
// prefill shapes with and without bias, gives roundTo<T>(y + addend) for its own rounded y, the
// add kernel's arithmetic, to the bit.
TEST_F(LinearGpu, AddendIsAddedToTheRoundedOutput) {
  const Shape shapes[] = {{1, 4096, 1000},
                          {5, 448, 300},
                          {16, 4096, 8192},
                          {200, 1000 / 64 * 64, 777},
                          {2048, 4096, 1000}};
  uint64_t seed = 1000;
  for (const auto [t, w] : {std::pair{Act::F32, Wt::F32},
                            {Act::F32, Wt::Bf16},
                            {Act::F32, Wt::Q4},
                            {Act::Bf16, Wt::Bf16},
                            {Act::Bf16, Wt::Fp8},
                            {Act::Bf16, Wt::Q4}}) {
    for (const Shape &s : shapes) {
      const bool hasBias = seed % 2 == 0;
      const Problem p = makeProblem(s, t, w, hasBias, ++seed);
      GLM_ASSERT_OK_AND_ASSIGN(DeviceProblem d, upload(p));
      SplitMix64 rng(seed);
      std::vector<float> addend(s.rows * s.out);
      for (float &v : addend) {
        v = t == Act::Bf16 ? kernels::roundToBf16(rng.normal()) : rng.normal();
      }
      GLM_ASSERT_OK_AND_ASSIGN(cuda::DeviceMemory da,
                               t == Act::Bf16 ? toDevice(toBf16(addend)) : toDevice(addend));
      for (const Variant &v : variantsFor(t, w)) {
        const std::string what = v.label + " " + std::to_string(s.rows) + "x" +
                                 std::to_string(s.in) + "x" + std::to_string(s.out);
        bool allWritten = false;
        GLM_ASSERT_OK_AND_ASSIGN(std::vector<float> y, runKernel(*module_, v, p, d, &allWritten));
        GLM_ASSERT_OK_AND_ASSIGN(std::vector<float> sum,
                                 runKernel(*module_, v, p, d, &allWritten, &da));
        EXPECT_TRUE(allWritten) << what;
        size_t differ = 0;
        for (size_t i = 0; i < p.checked.size(); ++i) {
          for (int64_t o = 0; o < s.out; ++o) {
            const float a = y[i * s.out + o] + addend[p.checked[i] * s.out + o];
            const float want = t == Act::Bf16 ? kernels::roundToBf16(a) : a;
            differ += std::memcmp(&want, &sum[i * s.out + o], 4) != 0 ? 1 : 0;
          }
        }
        EXPECT_EQ(differ, 0u) << what;
      }
    }
  }
}

// The rule sends few rows to the streaming kernels and many to the tiled ones; GLM's decode
// products on an H200 (132 SMs) take the wide decode blocks except o_proj (4096 outputs).
TEST(LinearKernelRule, DecodeAndPrefill) {
  const int64_t maxRows = kernels::kLinearDecodeMaxRows;
  EXPECT_EQ(kernels::linearKernelFor(true, 1, 8192, "sm_90a", 132), LinearKernel::DecodeMmaWide);
  EXPECT_EQ(kernels::linearKernelFor(true, 1, 16384, "sm_90a", 132), LinearKernel::DecodeMmaWide);
  EXPECT_EQ(kernels::linearKernelFor(true, 1, 154880, "sm_90a", 132), LinearKernel::DecodeMmaWide);
  EXPECT_EQ(kernels::linearKernelFor(true, 1, 4096, "sm_90a", 132), LinearKernel::DecodeMma);
  EXPECT_EQ(kernels::linearKernelFor(true, 16, 1000, "sm_121a", 48), LinearKernel::DecodeMma);
  EXPECT_EQ(kernels::linearKernelFor(true, maxRows, 4096, "sm_90a", 132),
            LinearKernel::DecodeMmaWide);
  EXPECT_EQ(kernels::linearKernelFor(true, maxRows + 1, 4096, "sm_90a", 132),
            LinearKernel::PrefillWgmma);
  EXPECT_EQ(kernels::linearKernelFor(true, maxRows + 1, 4096, "sm_121a", 48),
            LinearKernel::PrefillMma);
  EXPECT_EQ(kernels::linearKernelFor(false, 16, 4096, "sm_90a", 132), LinearKernel::Gemv);
  EXPECT_EQ(kernels::linearKernelFor(false, 17, 4096, "sm_121a", 48), LinearKernel::Tiled);
  EXPECT_EQ(kernels::linearKernelName(LinearKernel::DecodeMmaWide, "glm::kernels::Bf16",
                                      "glm::kernels::Bf16"),
            "glm::kernels::linearDecodeMmaKernel<glm::kernels::Bf16, glm::kernels::Bf16, 4, 1>");
}

// Quantized weights: bf16 plans stream them through the decode-quant kernel (32-output blocks
// always) up to 64 rows and the decoding mma.sync prefill beyond; f32 plans the exact FMA
// kernels.
TEST(LinearKernelRule, QuantizedWeights) {
  EXPECT_EQ(kernels::linearQuantKernelFor(true, 1, 4096, 132), LinearKernel::DecodeQuant);
  EXPECT_EQ(kernels::linearQuantKernelFor(true, 1, 77440, 132), LinearKernel::DecodeQuant);
  EXPECT_EQ(kernels::linearQuantKernelFor(true, 64, 4096, 132), LinearKernel::DecodeQuant);
  EXPECT_EQ(kernels::linearQuantKernelFor(true, 65, 4096, 132), LinearKernel::PrefillMma);
  // Too few 32-output blocks for the SMs: K split over clusters (H200 132 SMs, GB10 48).
  EXPECT_EQ(kernels::linearQuantKernelFor(true, 1, 2048, 132), LinearKernel::DecodeQuantSplit2);
  EXPECT_EQ(kernels::linearQuantKernelFor(true, 1, 1024, 132), LinearKernel::DecodeQuantSplit4);
  EXPECT_EQ(kernels::linearQuantKernelFor(true, 1, 576, 132), LinearKernel::DecodeQuantSplit4);
  EXPECT_EQ(kernels::linearQuantKernelFor(true, 1, 2048, 48), LinearKernel::DecodeQuant);
  EXPECT_EQ(kernels::linearQuantKernelFor(true, 1, 1024, 48), LinearKernel::DecodeQuantSplit2);
  EXPECT_EQ(kernels::linearQuantKernelFor(true, 1, 576, 48), LinearKernel::DecodeQuantSplit4);
  EXPECT_EQ(kernels::linearKernelName(LinearKernel::DecodeQuantSplit4, "glm::kernels::Bf16",
                                      "glm::kernels::Fp8E4m3"),
            "glm::kernels::linearDecodeQuantSplitKernel<glm::kernels::Bf16, "
            "glm::kernels::Fp8E4m3, 2, 4>");
  EXPECT_EQ(kernels::linearQuantKernelFor(false, 16, 4096, 132), LinearKernel::Gemv);
  EXPECT_EQ(kernels::linearQuantKernelFor(false, 17, 4096, 132), LinearKernel::Tiled);
  EXPECT_EQ(kernels::linearKernelName(LinearKernel::DecodeQuantWide, "glm::kernels::Bf16",
                                      "glm::kernels::Q4Groups"),
            "glm::kernels::linearDecodeQuantKernel<glm::kernels::Bf16, glm::kernels::Q4Groups, 4>");
}

} // namespace
} // namespace glm::testing
