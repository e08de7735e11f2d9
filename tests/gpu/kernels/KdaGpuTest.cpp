// kda's CUDA kernels (decode, prefill) against the CPU reference at Flash's and the tiny dims,
// and the decode kernel folded with the gated output norm against the two kernels it replaces.
//
// Flash: 64 heads of 128; tiny: 4 heads of 32. State in slots, chunks carried across calls,
// padding rows and sequences, batched decode.
#include "kernels/gated_rms_norm/gated_rms_norm_gpu.h"
#include "kernels/kda/kda.h"
#include "kernels/kda/kda_gpu.h"
#include "tests/gpu/support/GpuTest.h"

#include <limits>

namespace glm::testing {
namespace {

using kernels::roundToBf16;

const char *kSource = R"(#include "kernels/kda/kda.cuh")";

struct Problem {
  int64_t heads, dk; // dv = dk, as in GLM-5.3
  int64_t width() const { return heads * dk; }
  int64_t unit() const { return heads * dk * dk; } // floats of one slot
};
const Problem kFlash{64, 128}; // linear_num_heads, linear_head_dim
const Problem kTiny{4, 32};
constexpr int kSlots = 4;
constexpr float kLowerBound = -5.0f;

/// Module order: (activation bf16, weight bf16, prefill) as bits, high to low; then the folded
/// decode kernels (normFn) and the gated norm's (gatedNormFn).
int fn(bool decode, bool tBf16, bool wBf16) {
  return (tBf16 ? 4 : 0) + (wBf16 ? 2 : 0) + (decode ? 0 : 1);
}
/// The folded kernel's clusters at the two problems' dims (kdaNormCluster: 8 for 128, 2 for 32).
constexpr int kNormClusters[] = {8, 2};
int normFn(bool tBf16, bool wBf16, bool nBf16, int cluster) {
  return 8 + (tBf16 ? 8 : 0) + (wBf16 ? 4 : 0) + (nBf16 ? 2 : 0) + (cluster == 8 ? 0 : 1);
}
int gatedNormFn(bool tBf16, bool nBf16) { return 24 + (tBf16 ? 2 : 0) + (nBf16 ? 1 : 0); }

/// One step's inputs, `rows` rows. b is what the kernel reads; bRef what the reference reads (see
/// makeTokens).
struct Tokens {
  int64_t rows = 0;
  std::vector<float> q, k, v, f, b, bRef;
};

/// Random inputs. With bf16 activations every value is a bf16 value, and b is drawn so that
/// sigmoid(b) is not within 1e-5 (relative) of a bf16 rounding boundary: the kernel's f32 sigmoid
/// then rounds to the same bf16 β as the exact one, and the reference gets bRef = logit(that β),
/// so both run the recurrence with the same β.
Tokens makeTokens(SplitMix64 &rng, const Problem &p, int64_t rows, bool bf16) {
  auto act = [&](float x) { return bf16 ? roundToBf16(x) : x; };
  Tokens t;
  t.rows = rows;
  for (auto *vec : {&t.q, &t.k, &t.v}) {
    vec->resize(rows * p.width());
    for (float &x : *vec) {
      x = act(rng.normal());
    }
  }
  // Forget logits around -3 ± 2: decays exp(g) from ~0.01 to ~0.998, short and long memories.
  t.f.resize(rows * p.width());
  for (float &x : t.f) {
    x = act(2.0f * rng.normal() - 3.0f);
  }
  t.b.resize(rows * p.heads);
  t.bRef.resize(t.b.size());
  for (size_t i = 0; i < t.b.size(); ++i) {
    for (;;) {
      const float x = act(rng.normal());
      const double s = 1.0 / (1.0 + std::exp(-static_cast<double>(x)));
      const float beta = roundToBf16(static_cast<float>(s));
      if (bf16 && (roundToBf16(static_cast<float>(s * (1 + 1e-5))) != beta ||
                   roundToBf16(static_cast<float>(s * (1 - 1e-5))) != beta)) {
        continue;
      }
      t.b[i] = x;
      t.bRef[i] = bf16 ? static_cast<float>(std::log(beta / (1.0 - beta))) : x;
      break;
    }
  }
  return t;
}

/// Rows [first, first + count) of `t` (the padding tests overwrite some with NaN).
Tokens slice(const Problem &p, const Tokens &t, int64_t first, int64_t count) {
  Tokens s;
  s.rows = count;
  auto cut = [&](const std::vector<float> &from, int64_t w) {
    return std::vector<float>(from.begin() + first * w, from.begin() + (first + count) * w);
  };
  s.q = cut(t.q, p.width());
  s.k = cut(t.k, p.width());
  s.v = cut(t.v, p.width());
  s.f = cut(t.f, p.width());
  s.b = cut(t.b, p.heads);
  s.bRef = cut(t.bRef, p.heads);
  return s;
}

/// `a` followed by `b`.
Tokens join(const Tokens &a, const Tokens &b) {
  Tokens s = a;
  s.rows += b.rows;
  auto append = [](std::vector<float> &to, const std::vector<float> &from) {
    to.insert(to.end(), from.begin(), from.end());
  };
  append(s.q, b.q);
  append(s.k, b.k);
  append(s.v, b.v);
  append(s.f, b.f);
  append(s.b, b.b);
  append(s.bRef, b.bRef);
  return s;
}

/// Row r's inputs all NaN: a kernel that reads a padding row into the state cannot pass.
void poisonRow(const Problem &p, Tokens &t, int64_t r) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (auto *vec : {&t.q, &t.k, &t.v, &t.f}) {
    std::fill(vec->begin() + r * p.width(), vec->begin() + (r + 1) * p.width(), nan);
  }
  std::fill(t.b.begin() + r * p.heads, t.b.begin() + (r + 1) * p.heads, nan);
}

struct Weights {
  std::vector<float> aLog, dtBias;
};

Weights makeWeights(SplitMix64 &rng, const Problem &p, bool bf16) {
  Weights w;
  w.aLog.resize(p.heads);
  w.dtBias.resize(p.width());
  for (auto *vec : {&w.aLog, &w.dtBias}) {
    for (float &x : *vec) {
      x = 0.5f * rng.normal();
      x = bf16 ? roundToBf16(x) : x;
    }
  }
  return w;
}

std::vector<float> randomStates(SplitMix64 &rng, const Problem &p) {
  std::vector<float> s(kSlots * p.unit());
  for (float &x : s) {
    x = 0.1f * rng.normal();
  }
  return s;
}

std::vector<float> slotOf(const Problem &p, const std::vector<float> &states, int slot) {
  return std::vector<float>(states.begin() + slot * p.unit(),
                            states.begin() + (slot + 1) * p.unit());
}

/// The reference over `count` rows of one sequence from row `first`, state in place; its outputs
/// go to the same rows of `out`.
void reference(const Problem &p, const Tokens &t, const Weights &w, int64_t first, int64_t count,
               float *state, std::vector<float> &out) {
  out.resize(t.rows * p.width());
  const Status s =
      kernels::kdaRef({.q = t.q.data() + first * p.width(),
                       .k = t.k.data() + first * p.width(),
                       .v = t.v.data() + first * p.width(),
                       .f = t.f.data() + first * p.width(),
                       .b = t.bRef.data() + first * p.heads,
                       .aLog = kernels::WeightView::f32(w.aLog.data(), {p.heads}),
                       .dtBias = kernels::WeightView::f32(w.dtBias.data(), {p.width()}),
                       .state = state,
                       .out = out.data() + first * p.width(),
                       .tokens = count,
                       .heads = p.heads,
                       .keyDim = p.dk,
                       .valueDim = p.dk,
                       .lowerBound = kLowerBound});
  ASSERT_TRUE(s.ok()) << s.toString();
}

/// One launch: `slots.size()` sequences of `rowsPerSequence` rows (t.rows in all).
struct Launch {
  bool decode = false;
  bool tBf16 = false, wBf16 = false;
  int32_t rowsPerSequence = 0;
  std::vector<int32_t> positions, slots;
};

/// The gated output norm after kda, for run(): its gate [rows, width] and weight [dk] (each value
/// exact in the type it is uploaded as), and whether the folded kernel runs it (else
/// kdaDecodeKernel and then gatedRmsNormKernel).
struct OutputNorm {
  std::vector<float> gate, weight;
  bool nBf16 = false;
  bool folded = false;
  float eps = 1e-5f;
};

/// Positions first, first + 1, ... for `real` rows, then -1 up to `rows`.
std::vector<int32_t> positions(int32_t first, int32_t real, int32_t rows) {
  std::vector<int32_t> p(rows, -1);
  for (int32_t r = 0; r < real; ++r) {
    p[r] = first + r;
  }
  return p;
}

class KdaGpu : public ::testing::Test {
protected:
  void SetUp() override {
    std::string why;
    ASSERT_NE(gpu(&why), nullptr) << why;
    std::vector<std::string> names;
    for (const char *t : {"float", "glm::kernels::Bf16"}) {
      for (const char *w : {"float", "glm::kernels::Bf16"}) {
        for (const char *kernel : {"kdaDecodeKernel", "kdaPrefillKernel"}) {
          names.push_back(strCat("glm::kernels::", kernel, "<", t, ", ", w, ">"));
        }
      }
    }
    for (const char *t : {"float", "glm::kernels::Bf16"}) {
      for (const char *w : {"float", "glm::kernels::Bf16"}) {
        for (const char *n : {"float", "glm::kernels::Bf16"}) {
          for (int cluster : kNormClusters) {
            names.push_back(strCat("glm::kernels::kdaDecodeNormKernel<", t, ", ", w, ", ", n, ", ",
                                   cluster, ">"));
          }
        }
      }
    }
    for (const char *t : {"float", "glm::kernels::Bf16"}) {
      for (const char *n : {"float", "glm::kernels::Bf16"}) {
        names.push_back(strCat("glm::kernels::gatedRmsNormKernel<", t, ", ", n, ">"));
      }
    }
    GLM_ASSERT_OK_AND_ASSIGN(module_, compileForGpu(kSource, names));
  }

  /// Runs `l` over `t` with the slots in `states` (updated), outputs widened to f32 in `out`; with
  /// `norm`, then the gated norm of `out` into `normed`.
  void run(const Problem &p, const Tokens &t, const Weights &w, const Launch &l,
           std::vector<float> &states, std::vector<float> &out, const OutputNorm *norm = nullptr,
           std::vector<float> *normed = nullptr) {
    ASSERT_EQ(static_cast<int64_t>(l.positions.size()), t.rows);
    ASSERT_EQ(static_cast<int64_t>(l.slots.size()) * l.rowsPerSequence, t.rows);
    GLM_ASSERT_OK_AND_ASSIGN(cuda::DeviceMemory dq, upload(t.q, l.tBf16));
    GLM_ASSERT_OK_AND_ASSIGN(cuda::DeviceMemory dk, upload(t.k, l.tBf16));
    GLM_ASSERT_OK_AND_ASSIGN(cuda::DeviceMemory dv, upload(t.v, l.tBf16));
    GLM_ASSERT_OK_AND_ASSIGN(cuda::DeviceMemory df, upload(t.f, l.tBf16));
    GLM_ASSERT_OK_AND_ASSIGN(cuda::DeviceMemory db, upload(t.b, l.tBf16));
    GLM_ASSERT_OK_AND_ASSIGN(cuda::DeviceMemory dA, upload(w.aLog, l.wBf16));
    GLM_ASSERT_OK_AND_ASSIGN(cuda::DeviceMemory dDt, upload(w.dtBias, l.wBf16));
    GLM_ASSERT_OK_AND_ASSIGN(cuda::DeviceMemory dState, toDevice(states));
    GLM_ASSERT_OK_AND_ASSIGN(cuda::DeviceMemory dPos, toDevice(l.positions));
    GLM_ASSERT_OK_AND_ASSIGN(cuda::DeviceMemory dSlots, toDevice(l.slots));
    const size_t outCount = t.rows * p.width();
    GLM_ASSERT_OK_AND_ASSIGN(cuda::DeviceMemory dOut, poisoned(outCount * (l.tBf16 ? 2 : 4)));
    kernels::KdaGpuArgs args{.q = dq.as<const void>(),
                             .k = dk.as<const void>(),
                             .v = dv.as<const void>(),
                             .f = df.as<const void>(),
                             .b = db.as<const void>(),
                             .aLog = dA.as<const void>(),
                             .dtBias = dDt.as<const void>(),
                             .out = dOut.as<void>(),
                             .state = {dState.as<uint8_t>(), p.unit() * 4},
                             .ctx = {dPos.as<const int32_t>(), dSlots.as<const int32_t>(), nullptr,
                                     l.rowsPerSequence, 0},
                             .heads = static_cast<int32_t>(p.heads),
                             .keyDim = static_cast<int32_t>(p.dk),
                             .valueDim = static_cast<int32_t>(p.dk),
                             .lowerBound = kLowerBound,
                             .l2Eps = 1e-6f};
    const kernels::LaunchDims dims =
        kernels::kdaLaunch(l.decode, p.heads, p.dk, static_cast<int64_t>(l.slots.size()));
    if (norm == nullptr) {
      GLM_ASSERT_OK(launchAndWait(module_->function(fn(l.decode, l.tBf16, l.wBf16)), dims, args));
      GLM_ASSERT_OK_AND_ASSIGN(out, download(dOut, outCount, l.tBf16));
      GLM_ASSERT_OK_AND_ASSIGN(states, fromDevice<float>(dState, states.size()));
      return;
    }
    ASSERT_TRUE(l.decode) << "the folded kernel is a decode kernel";
    GLM_ASSERT_OK_AND_ASSIGN(cuda::DeviceMemory dGate, upload(norm->gate, l.tBf16));
    GLM_ASSERT_OK_AND_ASSIGN(cuda::DeviceMemory dWeight, upload(norm->weight, norm->nBf16));
    GLM_ASSERT_OK_AND_ASSIGN(cuda::DeviceMemory dNormed, poisoned(outCount * (l.tBf16 ? 2 : 4)));
    if (norm->folded) {
      args.gate = dGate.as<const void>();
      args.normWeight = dWeight.as<const void>();
      args.normed = dNormed.as<void>();
      args.normEps = norm->eps;
      GLM_ASSERT_OK(launchAndWait(
          module_->function(normFn(l.tBf16, l.wBf16, norm->nBf16, kernels::kdaNormCluster(p.dk))),
          dims, args));
    } else {
      GLM_ASSERT_OK(launchAndWait(module_->function(fn(true, l.tBf16, l.wBf16)), dims, args));
      const int64_t rows = t.rows * p.heads;
      const kernels::GatedRmsNormGpuArgs normArgs{.x = dOut.as<const void>(),
                                                  .gate = dGate.as<const void>(),
                                                  .weight = dWeight.as<const void>(),
                                                  .out = dNormed.as<void>(),
                                                  .rows = rows,
                                                  .dim = p.dk,
                                                  .eps = norm->eps};
      GLM_ASSERT_OK(launchAndWait(module_->function(gatedNormFn(l.tBf16, norm->nBf16)),
                                  kernels::gatedRmsNormLaunch(rows), normArgs));
    }
    GLM_ASSERT_OK_AND_ASSIGN(*normed, download(dNormed, outCount, l.tBf16));
    GLM_ASSERT_OK_AND_ASSIGN(out, download(dOut, outCount, l.tBf16));
    GLM_ASSERT_OK_AND_ASSIGN(states, fromDevice<float>(dState, states.size()));
  }

  std::unique_ptr<cuda::Module> module_;
};

/// Every slot but `used` is bit for bit what it was.
void expectOtherSlotsUntouched(const Problem &p, const std::vector<float> &before,
                               const std::vector<float> &after, std::vector<int> used) {
  for (int s = 0; s < kSlots; ++s) {
    if (std::find(used.begin(), used.end(), s) == used.end()) {
      EXPECT_TRUE(slotOf(p, before, s) == slotOf(p, after, s)) << "slot " << s << " was written";
    }
  }
}

// One sequence in slot 1, both kernels, f32 activations with f32 and bf16-stored A_log/dt_bias:
// output and state within 1e-5 of the double-accumulated reference.
TEST_F(KdaGpu, F32MatchesReference) {
  SplitMix64 rng(21);
  const std::pair<Problem, std::vector<int64_t>> cases[] = {{kFlash, {1, 7, 300, 2048}},
                                                            {kTiny, {1, 5, 64}}};
  for (const auto &[p, lengths] : cases) {
    for (int64_t rows : lengths) {
      for (bool wBf16 : {false, true}) {
        if (rows == 2048 && wBf16) {
          continue; // the long sequence once: the reference takes seconds
        }
        const Tokens t = makeTokens(rng, p, rows, false);
        const Weights w = makeWeights(rng, p, wBf16);
        const std::vector<float> initial = randomStates(rng, p);
        std::vector<float> refState = slotOf(p, initial, 1), ref;
        reference(p, t, w, 0, rows, refState.data(), ref);
        for (bool decode : {true, false}) {
          std::vector<float> states = initial, out;
          const Launch l{decode,
                         false,
                         wBf16,
                         static_cast<int32_t>(rows),
                         positions(9, static_cast<int32_t>(rows), static_cast<int32_t>(rows)),
                         {1}};
          run(p, t, w, l, states, out);
          const std::string what = strCat(p.heads, "x", p.dk, " rows ", rows,
                                          decode ? " decode" : " prefill", wBf16 ? " bf16 W" : "");
          EXPECT_LE(relativeError(out, ref), 1e-5) << what;
          EXPECT_LE(relativeError(slotOf(p, states, 1), refState), 1e-5) << what << " state";
          expectOtherSlotsUntouched(p, initial, states, {1});
        }
      }
    }
  }
}

// bf16 activations: q, k, v, f and b are bf16 values for both sides, the state and all arithmetic
// stay f32, β is rounded to bf16 (matched on the reference side through bRef, see makeTokens),
// and o is rounded once to bf16 at the store. So the state agrees to f32 accuracy (1e-5) and each
// output element is within one bf16 rounding (2^-9 relative) of the reference's, which bounds the
// L2 relative error by 2^-9 (+ 1e-5 for the f32 arithmetic).
TEST_F(KdaGpu, Bf16WithinOneRounding) {
  SplitMix64 rng(22);
  const std::pair<Problem, std::vector<int64_t>> cases[] = {{kFlash, {1, 300, 2048}},
                                                            {kTiny, {1, 64}}};
  for (const auto &[p, lengths] : cases) {
    for (int64_t rows : lengths) {
      for (bool wBf16 : {false, true}) {
        if (rows == 2048 && wBf16) {
          continue;
        }
        const Tokens t = makeTokens(rng, p, rows, true);
        const Weights w = makeWeights(rng, p, wBf16);
        const std::vector<float> initial = randomStates(rng, p);
        std::vector<float> refState = slotOf(p, initial, 2), ref;
        reference(p, t, w, 0, rows, refState.data(), ref);
        for (bool decode : {true, false}) {
          std::vector<float> states = initial, out;
          const Launch l{decode,
                         true,
                         wBf16,
                         static_cast<int32_t>(rows),
                         positions(0, static_cast<int32_t>(rows), static_cast<int32_t>(rows)),
                         {2}};
          run(p, t, w, l, states, out);
          const std::string what = strCat(p.heads, "x", p.dk, " rows ", rows,
                                          decode ? " decode" : " prefill", wBf16 ? " bf16 W" : "");
          EXPECT_LE(relativeError(out, ref), 1.0 / 512 + 1e-5) << what;
          EXPECT_LE(relativeError(slotOf(p, states, 2), refState), 1e-5) << what << " state";
          expectOtherSlotsUntouched(p, initial, states, {2});
        }
      }
    }
  }
}

// A prompt of 200 tokens in one prefill call equals: a 120-token chunk padded to 128 rows (the
// padding rows' inputs are NaN), an 80-token chunk, then three one-token decode steps, with the
// state carried in the slot between calls. Same per-column arithmetic in both kernels, so equal to
// f32 rounding of nothing (1e-6 leaves room only for a compiler's different contraction).
TEST_F(KdaGpu, ChunksAndDecodeStepsEqualOnePass) {
  SplitMix64 rng(23);
  for (const Problem &p : {kFlash, kTiny}) {
    for (bool tBf16 : {false, true}) {
      const Tokens all = makeTokens(rng, p, 203, tBf16);
      const Weights w = makeWeights(rng, p, false);
      const std::vector<float> initial = randomStates(rng, p);
      std::vector<float> onePassStates = initial, onePass;
      run(p, all, w, {false, tBf16, false, 203, positions(0, 203, 203), {3}}, onePassStates,
          onePass);
      if (HasFatalFailure()) {
        return;
      }

      std::vector<float> states = initial, chunked, out;
      Tokens first = join(slice(p, all, 0, 120), slice(p, all, 0, 8));
      for (int64_t r = 120; r < 128; ++r) {
        poisonRow(p, first, r);
      }
      run(p, first, w, {false, tBf16, false, 128, positions(0, 120, 128), {3}}, states, out);
      chunked.insert(chunked.end(), out.begin(), out.begin() + 120 * p.width());
      for (int64_t r = 120; r < 128; ++r) {
        EXPECT_TRUE(std::all_of(out.begin() + r * p.width(), out.begin() + (r + 1) * p.width(),
                                [](float x) { return x == 0.0f; }))
            << "padding row " << r << " is not 0";
      }
      run(p, slice(p, all, 120, 80), w, {false, tBf16, false, 80, positions(120, 80, 80), {3}},
          states, out);
      chunked.insert(chunked.end(), out.begin(), out.end());
      for (int32_t r = 200; r < 203; ++r) {
        run(p, slice(p, all, r, 1), w, {true, tBf16, false, 1, {r}, {3}}, states, out);
        chunked.insert(chunked.end(), out.begin(), out.end());
      }
      const std::string what = strCat(p.heads, "x", p.dk, tBf16 ? " bf16" : " f32");
      EXPECT_LE(relativeError(chunked, onePass), 1e-6) << what;
      EXPECT_LE(relativeError(slotOf(p, states, 3), slotOf(p, onePassStates, 3)), 1e-6) << what;
      expectOtherSlotsUntouched(p, initial, states, {3});
    }
  }
}

// Three sequences of 8 rows: sequence 0 (slot 2) has 6 real rows then 2 padding rows, sequence 1
// is a padding sequence (slot -1), sequence 2 has a slot (0) but only padding rows. Padding rows
// hold NaN inputs. Only slot 2 changes, to the reference's state after its 6 rows; every padding
// row's output is 0.
TEST_F(KdaGpu, PaddingLeavesStateUntouched) {
  SplitMix64 rng(24);
  for (const Problem &p : {kFlash, kTiny}) {
    for (bool decode : {true, false}) {
      Tokens t = makeTokens(rng, p, 24, false);
      for (int64_t r : {6, 7}) {
        poisonRow(p, t, r);
      }
      for (int64_t r = 8; r < 24; ++r) {
        poisonRow(p, t, r);
      }
      const Weights w = makeWeights(rng, p, false);
      const std::vector<float> initial = randomStates(rng, p);
      std::vector<float> refState = slotOf(p, initial, 2), ref;
      reference(p, t, w, 0, 6, refState.data(), ref);

      std::vector<int32_t> pos = positions(40, 6, 8);
      for (int i = 0; i < 16; ++i) {
        pos.push_back(-1);
      }
      std::vector<float> states = initial, out;
      run(p, t, w, {decode, false, false, 8, pos, {2, -1, 0}}, states, out);
      const std::string what = strCat(p.heads, "x", p.dk, decode ? " decode" : " prefill");
      EXPECT_LE(relativeError(std::vector<float>(out.begin(), out.begin() + 6 * p.width()),
                              std::vector<float>(ref.begin(), ref.begin() + 6 * p.width())),
                1e-5)
          << what;
      EXPECT_TRUE(
          std::all_of(out.begin() + 6 * p.width(), out.end(), [](float x) { return x == 0.0f; }))
          << what << ": a padding row's output is not 0";
      EXPECT_LE(relativeError(slotOf(p, states, 2), refState), 1e-5) << what;
      expectOtherSlotsUntouched(p, initial, states, {2});
    }
  }
}

// Decode of 4 sequences (slots 3, 0, 2, 1) of 1 and 2 rows per step: each sequence equals its own
// run alone (same kernel, batch 1) and the reference from its own slot's state.
TEST_F(KdaGpu, BatchedDecodeUsesOwnSlots) {
  SplitMix64 rng(25);
  const std::vector<int32_t> slots = {3, 0, 2, 1};
  for (const Problem &p : {kFlash, kTiny}) {
    for (bool tBf16 : {false, true}) {
      for (int32_t perSeq : {1, 2}) {
        const int64_t rows = perSeq * 4;
        const Tokens t = makeTokens(rng, p, rows, tBf16);
        const Weights w = makeWeights(rng, p, false);
        const std::vector<float> initial = randomStates(rng, p);
        std::vector<int32_t> pos;
        for (int b = 0; b < 4; ++b) {
          for (int32_t r = 0; r < perSeq; ++r) {
            pos.push_back(17 * b + 3 + r);
          }
        }
        std::vector<float> batched = initial, out;
        run(p, t, w, {true, tBf16, false, perSeq, pos, slots}, batched, out);
        if (HasFatalFailure()) {
          return;
        }
        const std::string what =
            strCat(p.heads, "x", p.dk, tBf16 ? " bf16" : " f32", " ", perSeq, " rows per sequence");
        std::vector<float> ref;
        for (int b = 0; b < 4; ++b) {
          const int64_t first = b * perSeq;
          std::vector<float> alone = initial, aloneOut;
          run(p, slice(p, t, first, perSeq), w,
              {true,
               tBf16,
               false,
               perSeq,
               {pos.begin() + first, pos.begin() + first + perSeq},
               {slots[b]}},
              alone, aloneOut);
          const std::vector<float> got(out.begin() + first * p.width(),
                                       out.begin() + (first + perSeq) * p.width());
          EXPECT_LE(relativeError(got, aloneOut), 1e-6) << what << " sequence " << b;
          EXPECT_LE(relativeError(slotOf(p, batched, slots[b]), slotOf(p, alone, slots[b])), 1e-6)
              << what << " sequence " << b << " state";
          std::vector<float> refState = slotOf(p, initial, slots[b]);
          reference(p, t, w, first, perSeq, refState.data(), ref);
          const std::vector<float> want(ref.begin() + first * p.width(),
                                        ref.begin() + (first + perSeq) * p.width());
          EXPECT_LE(relativeError(got, want), tBf16 ? 1.0 / 512 + 1e-5 : 1e-5)
              << what << " sequence " << b << " vs reference";
          EXPECT_LE(relativeError(slotOf(p, batched, slots[b]), refState), 1e-5)
              << what << " sequence " << b << " state vs reference";
        }
      }
    }
  }
}

// plan-fuse-kda-norm: kdaDecodeNormKernel against kdaDecodeKernel then gatedRmsNormKernel on its
// output. o, the norm and the state bit for bit, every activation and weight type, 1-4 sequences
// of 1-3 rows (the decode kernel's range), with a padding row and a sequence without a slot
// (whose rows the norm still normalises, from o = 0).
TEST_F(KdaGpu, FoldedNormGivesTheTwoKernelsBits) {
  SplitMix64 rng(26);
  for (const Problem &p : {kFlash, kTiny}) {
    for (bool tBf16 : {false, true}) {
      for (bool wBf16 : {false, true}) {
        for (auto [batch, perSeq] : {std::pair{1, 1}, {4, 1}, {2, 3}, {3, 2}}) {
          const int64_t rows = static_cast<int64_t>(batch) * perSeq;
          const Tokens t = makeTokens(rng, p, rows, tBf16);
          const Weights w = makeWeights(rng, p, wBf16);
          const std::vector<float> initial = randomStates(rng, p);
          std::vector<int32_t> pos;
          for (int b = 0; b < batch; ++b) {
            for (int32_t r = 0; r < perSeq; ++r) {
              pos.push_back(11 * b + 5 + r);
            }
          }
          std::vector<int32_t> slots = {2, 0, 3, 1};
          slots.resize(batch);
          if (batch > 1) {
            slots[1] = -1; // no slot: o = 0 in all its rows
          }
          if (perSeq > 1) {
            pos[perSeq - 1] = -1; // the first sequence's last row is padding
          }
          OutputNorm norm;
          norm.nBf16 = tBf16 || wBf16;
          for (int64_t i = 0; i < rows * p.width(); ++i) {
            const float g = 2.0f * rng.normal();
            norm.gate.push_back(tBf16 ? roundToBf16(g) : g);
          }
          for (int64_t i = 0; i < p.dk; ++i) {
            const float x = 1.0f + 0.25f * rng.normal();
            norm.weight.push_back(norm.nBf16 ? roundToBf16(x) : x);
          }
          const Launch l{true, tBf16, wBf16, perSeq, pos, slots};
          std::vector<float> twoStates = initial, twoOut, twoNormed;
          run(p, t, w, l, twoStates, twoOut, &norm, &twoNormed);
          norm.folded = true;
          std::vector<float> oneStates = initial, oneOut, oneNormed;
          run(p, t, w, l, oneStates, oneOut, &norm, &oneNormed);
          if (HasFatalFailure()) {
            return;
          }
          const std::string what =
              strCat(p.heads, "x", p.dk, tBf16 ? " bf16" : " f32",
                     wBf16 ? " bf16 weights" : " f32 weights", ", ", batch, " x ", perSeq);
          EXPECT_TRUE(oneOut == twoOut) << what << ": o";
          EXPECT_TRUE(oneNormed == twoNormed) << what << ": the norm";
          EXPECT_TRUE(oneStates == twoStates) << what << ": the state";
          // Not a vacuous equality: the norm of a real row is neither o nor 0.
          EXPECT_NE(oneNormed[0], 0.0f) << what;
          EXPECT_NE(oneNormed[0], oneOut[0]) << what;
        }
      }
    }
  }
}

} // namespace
} // namespace glm::testing
