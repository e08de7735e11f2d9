// short_conv's CUDA kernel against its CPU reference, at GLM-5.3-Flash's width and the tiny's.
//
// Flash: 8192 channels per q/k/v conv, kernel 4; tiny: 128. Windows in slots, chunks carried across
// calls, padding rows and sequences, batched decode, several parts in one launch.
#include "kernels/short_conv/short_conv.h"
#include "kernels/short_conv/short_conv_gpu.h"
#include "tests/gpu/support/GpuTest.h"

#include <limits>

namespace glm::testing {
namespace {

using kernels::roundToBf16;

const char *kSource = R"(#include "kernels/short_conv/short_conv.cuh")";

constexpr int64_t kKernel = 4;   // linear_conv_kernel_dim
constexpr int64_t kFlash = 8192; // linear_num_heads · linear_head_dim
constexpr int64_t kTiny = 128;
constexpr int kSlots = 4;

int fn(bool tBf16, bool wBf16) { return (tBf16 ? 2 : 0) + (wBf16 ? 1 : 0); }

std::vector<float> randomValues(SplitMix64 &rng, size_t n, bool bf16, float scale = 1.0f) {
  std::vector<float> v(n);
  for (float &x : v) {
    x = scale * rng.normal();
    x = bf16 ? roundToBf16(x) : x;
  }
  return v;
}

int64_t unit(int64_t channels) { return channels * (kKernel - 1); } // values per slot

std::vector<float> slotOf(int64_t channels, const std::vector<float> &states, int slot) {
  return std::vector<float>(states.begin() + slot * unit(channels),
                            states.begin() + (slot + 1) * unit(channels));
}

std::vector<float> rows(const std::vector<float> &x, int64_t channels, int64_t first,
                        int64_t count) {
  return std::vector<float>(x.begin() + first * channels, x.begin() + (first + count) * channels);
}

void poisonRow(std::vector<float> &x, int64_t channels, int64_t r) {
  std::fill(x.begin() + r * channels, x.begin() + (r + 1) * channels,
            std::numeric_limits<float>::quiet_NaN());
}

/// The reference over `count` rows from row `first` of one sequence; state (may be null) in place.
void reference(const std::vector<float> &x, const std::vector<float> &w, int64_t channels,
               int64_t first, int64_t count, float *state, std::vector<float> &out) {
  out.resize(x.size());
  const Status s =
      kernels::shortConvRef({.x = x.data() + first * channels,
                             .weight = kernels::WeightView::f32(w.data(), {channels, 1, kKernel}),
                             .state = state,
                             .out = out.data() + first * channels,
                             .tokens = count,
                             .channels = channels,
                             .kernelSize = kKernel,
                             .activation = kernels::ConvActivation::Silu});
  ASSERT_TRUE(s.ok()) << s.toString();
}

std::vector<int32_t> positions(int32_t first, int32_t real, int32_t count) {
  std::vector<int32_t> p(count, -1);
  for (int32_t r = 0; r < real; ++r) {
    p[r] = first + r;
  }
  return p;
}

struct Launch {
  bool tBf16 = false, wBf16 = false;
  int32_t rowsPerSequence = 0;
  std::vector<int32_t> positions, slots;
  bool stateless = false; // a null state base: zero history, nothing kept
};

class ShortConvGpu : public ::testing::Test {
protected:
  void SetUp() override {
    std::string why;
    ASSERT_NE(gpu(&why), nullptr) << why;
    GLM_ASSERT_OK_AND_ASSIGN(
        module_,
        compileForGpu(kSource,
                      {
                          "glm::kernels::shortConvKernel<float, float>",
                          "glm::kernels::shortConvKernel<float, glm::kernels::Bf16>",
                          "glm::kernels::shortConvKernel<glm::kernels::Bf16, float>",
                          "glm::kernels::shortConvKernel<glm::kernels::Bf16, glm::kernels::Bf16>",
                      }));
  }

  /// Runs `l` over x ([slots · rowsPerSequence, channels]); states (all slots, as f32) updated.
  void run(int64_t channels, const std::vector<float> &x, const std::vector<float> &w,
           const Launch &l, std::vector<float> &states, std::vector<float> &out) {
    const int64_t n = static_cast<int64_t>(l.slots.size()) * l.rowsPerSequence;
    ASSERT_EQ(static_cast<int64_t>(x.size()), n * channels);
    ASSERT_EQ(static_cast<int64_t>(l.positions.size()), n);
    GLM_ASSERT_OK_AND_ASSIGN(cuda::DeviceMemory dx, upload(x, l.tBf16));
    GLM_ASSERT_OK_AND_ASSIGN(cuda::DeviceMemory dw, upload(w, l.wBf16));
    GLM_ASSERT_OK_AND_ASSIGN(cuda::DeviceMemory dState, upload(states, l.tBf16));
    GLM_ASSERT_OK_AND_ASSIGN(cuda::DeviceMemory dPos, toDevice(l.positions));
    GLM_ASSERT_OK_AND_ASSIGN(cuda::DeviceMemory dSlots, toDevice(l.slots));
    GLM_ASSERT_OK_AND_ASSIGN(cuda::DeviceMemory dOut, poisoned(x.size() * (l.tBf16 ? 2 : 4)));
    kernels::ShortConvGpuArgs args{};
    args.part[0] = {
        .x = dx.as<const void>(),
        .weight = dw.as<const void>(),
        .out = dOut.as<void>(),
        .state = {l.stateless ? nullptr : dState.as<uint8_t>(), unit(channels) * (l.tBf16 ? 2 : 4)},
        .channels = channels,
        .blockEnd = kernels::shortConvPartEnd(0, channels)};
    args.parts = 1;
    args.ctx = {dPos.as<const int32_t>(), dSlots.as<const int32_t>(), nullptr, l.rowsPerSequence,
                0};
    args.kernelSize = static_cast<int32_t>(kKernel);
    args.silu = 1;
    GLM_ASSERT_OK(
        launchAndWait(module_->function(fn(l.tBf16, l.wBf16)),
                      kernels::shortConvLaunch(args, static_cast<int64_t>(l.slots.size())), args));
    GLM_ASSERT_OK_AND_ASSIGN(out, download(dOut, x.size(), l.tBf16));
    GLM_ASSERT_OK_AND_ASSIGN(states, download(dState, states.size(), l.tBf16));
  }

  /// One launch of several parts over the same rows (l's positions and slots; l.tBf16, l.wBf16):
  /// part p convolves xs[p] ([slots · rowsPerSequence, channels[p]]) with ws[p] into outs[p],
  /// its states (all slots) updated.
  void runParts(const std::vector<int64_t> &channels, const std::vector<std::vector<float>> &xs,
                const std::vector<std::vector<float>> &ws, const Launch &l,
                std::vector<std::vector<float>> &states, std::vector<std::vector<float>> &outs) {
    const size_t parts = channels.size();
    ASSERT_LE(parts, static_cast<size_t>(kernels::kShortConvMaxParts));
    GLM_ASSERT_OK_AND_ASSIGN(cuda::DeviceMemory dPos, toDevice(l.positions));
    GLM_ASSERT_OK_AND_ASSIGN(cuda::DeviceMemory dSlots, toDevice(l.slots));
    std::vector<cuda::DeviceMemory> dx, dw, dState, dOut;
    kernels::ShortConvGpuArgs args{};
    for (size_t p = 0; p < parts; ++p) {
      GLM_ASSERT_OK_AND_ASSIGN(cuda::DeviceMemory x, upload(xs[p], l.tBf16));
      GLM_ASSERT_OK_AND_ASSIGN(cuda::DeviceMemory w, upload(ws[p], l.wBf16));
      GLM_ASSERT_OK_AND_ASSIGN(cuda::DeviceMemory state, upload(states[p], l.tBf16));
      GLM_ASSERT_OK_AND_ASSIGN(cuda::DeviceMemory out, poisoned(xs[p].size() * (l.tBf16 ? 2 : 4)));
      dx.push_back(std::move(x));
      dw.push_back(std::move(w));
      dState.push_back(std::move(state));
      dOut.push_back(std::move(out));
      args.part[p] = {.x = dx[p].as<const void>(),
                      .weight = dw[p].as<const void>(),
                      .out = dOut[p].as<void>(),
                      .state = {dState[p].as<uint8_t>(), unit(channels[p]) * (l.tBf16 ? 2 : 4)},
                      .channels = channels[p],
                      .blockEnd = kernels::shortConvPartEnd(p == 0 ? 0 : args.part[p - 1].blockEnd,
                                                            channels[p])};
    }
    args.parts = static_cast<int32_t>(parts);
    args.ctx = {dPos.as<const int32_t>(), dSlots.as<const int32_t>(), nullptr, l.rowsPerSequence,
                0};
    args.kernelSize = static_cast<int32_t>(kKernel);
    args.silu = 1;
    GLM_ASSERT_OK(
        launchAndWait(module_->function(fn(l.tBf16, l.wBf16)),
                      kernels::shortConvLaunch(args, static_cast<int64_t>(l.slots.size())), args));
    outs.resize(parts);
    for (size_t p = 0; p < parts; ++p) {
      GLM_ASSERT_OK_AND_ASSIGN(outs[p], download(dOut[p], xs[p].size(), l.tBf16));
      GLM_ASSERT_OK_AND_ASSIGN(states[p], download(dState[p], states[p].size(), l.tBf16));
    }
  }

  std::unique_ptr<cuda::Module> module_;
};

void expectOtherSlotsUntouched(int64_t channels, const std::vector<float> &before,
                               const std::vector<float> &after, std::vector<int> used) {
  for (int s = 0; s < kSlots; ++s) {
    if (std::find(used.begin(), used.end(), s) == used.end()) {
      EXPECT_TRUE(slotOf(channels, before, s) == slotOf(channels, after, s))
          << "slot " << s << " was written";
    }
  }
}

// f32 activations, f32 and bf16-stored weights, one sequence in slot 1, with a carried window and
// with none (null state): within 1e-5 of the reference; the new window is the same values exactly.
TEST_F(ShortConvGpu, F32MatchesReference) {
  SplitMix64 rng(31);
  const std::pair<int64_t, std::vector<int32_t>> cases[] = {{kFlash, {1, 2, 37, 2048}},
                                                            {kTiny, {1, 5, 64}}};
  for (const auto &[channels, lengths] : cases) {
    for (int32_t n : lengths) {
      for (bool wBf16 : {false, true}) {
        for (bool stateless : {false, true}) {
          const std::vector<float> x = randomValues(rng, n * channels, false);
          const std::vector<float> w = randomValues(rng, channels * kKernel, wBf16, 0.5f);
          const std::vector<float> initial = randomValues(rng, kSlots * unit(channels), false);
          std::vector<float> refState = slotOf(channels, initial, 1), ref;
          reference(x, w, channels, 0, n, stateless ? nullptr : refState.data(), ref);
          std::vector<float> states = initial, out;
          run(channels, x, w, {false, wBf16, n, positions(4, n, n), {1}, stateless}, states, out);
          const std::string what =
              strCat(n, "x", channels, wBf16 ? " bf16 W" : "", stateless ? " stateless" : "");
          EXPECT_LE(relativeError(out, ref), 1e-5) << what;
          EXPECT_TRUE(slotOf(channels, states, 1) == refState) << what << " state";
          expectOtherSlotsUntouched(channels, initial, states, {1});
        }
      }
    }
  }
}

// bf16 activations and window: the inputs and the carried window are bf16 values on both sides,
// the sum and SiLU are f32 and the output is rounded once, so each element is within one bf16
// rounding (2^-9 relative) of the reference (L2 bound 2^-9, + 1e-5 for f32 arithmetic). The new
// window holds input values, so it is exact.
TEST_F(ShortConvGpu, Bf16WithinOneRounding) {
  SplitMix64 rng(32);
  const std::pair<int64_t, std::vector<int32_t>> cases[] = {{kFlash, {1, 37, 2048}},
                                                            {kTiny, {1, 64}}};
  for (const auto &[channels, lengths] : cases) {
    for (int32_t n : lengths) {
      for (bool wBf16 : {false, true}) {
        const std::vector<float> x = randomValues(rng, n * channels, true);
        const std::vector<float> w = randomValues(rng, channels * kKernel, wBf16, 0.5f);
        const std::vector<float> initial = randomValues(rng, kSlots * unit(channels), true);
        std::vector<float> refState = slotOf(channels, initial, 2), ref;
        reference(x, w, channels, 0, n, refState.data(), ref);
        std::vector<float> states = initial, out;
        run(channels, x, w, {true, wBf16, n, positions(0, n, n), {2}}, states, out);
        const std::string what = strCat(n, "x", channels, wBf16 ? " bf16 W" : "");
        EXPECT_LE(relativeError(out, ref), 1.0 / 512 + 1e-5) << what;
        EXPECT_TRUE(slotOf(channels, states, 2) == refState) << what << " state";
        expectOtherSlotsUntouched(channels, initial, states, {2});
      }
    }
  }
}

// 203 tokens in one call equal a 120-token chunk padded to 128 rows (NaN inputs in the padding),
// an 80-token chunk and three one-token steps with the window carried in the slot: each output is
// computed from the same window values in the same order, so they are equal exactly.
TEST_F(ShortConvGpu, ChunksAndDecodeStepsEqualOnePass) {
  SplitMix64 rng(33);
  for (int64_t channels : {kFlash, kTiny}) {
    for (bool tBf16 : {false, true}) {
      const std::vector<float> x = randomValues(rng, 203 * channels, tBf16);
      const std::vector<float> w = randomValues(rng, channels * kKernel, false, 0.5f);
      const std::vector<float> initial = randomValues(rng, kSlots * unit(channels), tBf16);
      std::vector<float> onePassStates = initial, onePass;
      run(channels, x, w, {tBf16, false, 203, positions(0, 203, 203), {3}}, onePassStates, onePass);
      if (HasFatalFailure()) {
        return;
      }
      std::vector<float> states = initial, chunked, out;
      std::vector<float> first = rows(x, channels, 0, 128);
      for (int64_t r = 120; r < 128; ++r) {
        poisonRow(first, channels, r);
      }
      run(channels, first, w, {tBf16, false, 128, positions(0, 120, 128), {3}}, states, out);
      chunked.insert(chunked.end(), out.begin(), out.begin() + 120 * channels);
      EXPECT_TRUE(std::all_of(out.begin() + 120 * channels, out.end(), [](float v) {
        return v == 0.0f;
      })) << "a padding row's output is not 0";
      run(channels, rows(x, channels, 120, 80), w, {tBf16, false, 80, positions(120, 80, 80), {3}},
          states, out);
      chunked.insert(chunked.end(), out.begin(), out.end());
      for (int32_t r = 200; r < 203; ++r) {
        run(channels, rows(x, channels, r, 1), w, {tBf16, false, 1, {r}, {3}}, states, out);
        chunked.insert(chunked.end(), out.begin(), out.end());
      }
      const std::string what = strCat(channels, tBf16 ? " bf16" : " f32");
      EXPECT_TRUE(chunked == onePass) << what << ": " << relativeError(chunked, onePass);
      EXPECT_TRUE(slotOf(channels, states, 3) == slotOf(channels, onePassStates, 3)) << what;
      expectOtherSlotsUntouched(channels, initial, states, {3});
    }
  }
}

// Three sequences of 8 rows: sequence 0 (slot 2) has 2 real rows then 6 padding rows (fewer real
// rows than the window: the new window keeps one old value), sequence 1 is a padding sequence
// (slot -1) and sequence 2 has a slot (0) but only padding rows. Padding rows hold NaN. Only slot
// 2 changes, to the reference's window after its 2 rows; padding rows' outputs are 0.
TEST_F(ShortConvGpu, PaddingLeavesStateUntouched) {
  SplitMix64 rng(34);
  for (int64_t channels : {kFlash, kTiny}) {
    std::vector<float> x = randomValues(rng, 24 * channels, false);
    for (int64_t r = 2; r < 24; ++r) {
      poisonRow(x, channels, r);
    }
    const std::vector<float> w = randomValues(rng, channels * kKernel, false, 0.5f);
    const std::vector<float> initial = randomValues(rng, kSlots * unit(channels), false);
    std::vector<float> refState = slotOf(channels, initial, 2), ref;
    reference(x, w, channels, 0, 2, refState.data(), ref);
    std::vector<int32_t> pos = positions(40, 2, 8);
    pos.resize(24, -1);
    std::vector<float> states = initial, out;
    run(channels, x, w, {false, false, 8, pos, {2, -1, 0}}, states, out);
    EXPECT_LE(relativeError(rows(out, channels, 0, 2), rows(ref, channels, 0, 2)), 1e-5)
        << channels;
    EXPECT_TRUE(
        std::all_of(out.begin() + 2 * channels, out.end(), [](float v) { return v == 0.0f; }))
        << channels << ": a padding row's output is not 0";
    EXPECT_TRUE(slotOf(channels, states, 2) == refState) << channels;
    expectOtherSlotsUntouched(channels, initial, states, {2});
  }
}

// Decode of 4 sequences (slots 3, 0, 2, 1), 1 and 2 rows each: every sequence equals its run
// alone and the reference from its own slot's window.
TEST_F(ShortConvGpu, BatchedDecodeUsesOwnSlots) {
  SplitMix64 rng(35);
  const std::vector<int32_t> slots = {3, 0, 2, 1};
  for (int64_t channels : {kFlash, kTiny}) {
    for (bool tBf16 : {false, true}) {
      for (int32_t perSeq : {1, 2}) {
        const std::vector<float> x = randomValues(rng, 4 * perSeq * channels, tBf16);
        const std::vector<float> w = randomValues(rng, channels * kKernel, false, 0.5f);
        const std::vector<float> initial = randomValues(rng, kSlots * unit(channels), tBf16);
        std::vector<int32_t> pos;
        for (int b = 0; b < 4; ++b) {
          for (int32_t r = 0; r < perSeq; ++r) {
            pos.push_back(11 * b + 5 + r);
          }
        }
        std::vector<float> batched = initial, out;
        run(channels, x, w, {tBf16, false, perSeq, pos, slots}, batched, out);
        if (HasFatalFailure()) {
          return;
        }
        const std::string what =
            strCat(channels, tBf16 ? " bf16 " : " f32 ", perSeq, " rows per sequence");
        std::vector<float> ref;
        for (int b = 0; b < 4; ++b) {
          const int64_t first = b * perSeq;
          std::vector<float> alone = initial, aloneOut;
          run(channels, rows(x, channels, first, perSeq), w,
              {tBf16,
               false,
               perSeq,
               {pos.begin() + first, pos.begin() + first + perSeq},
               {slots[b]}},
              alone, aloneOut);
          const std::vector<float> got = rows(out, channels, first, perSeq);
          EXPECT_TRUE(got == aloneOut) << what << " sequence " << b;
          EXPECT_TRUE(slotOf(channels, batched, slots[b]) == slotOf(channels, alone, slots[b]))
              << what << " sequence " << b << " state";
          std::vector<float> refState = slotOf(channels, initial, slots[b]);
          reference(x, w, channels, first, perSeq, refState.data(), ref);
          EXPECT_LE(relativeError(got, rows(ref, channels, first, perSeq)),
                    tBf16 ? 1.0 / 512 + 1e-5 : 1e-5)
              << what << " sequence " << b << " vs reference";
          EXPECT_TRUE(slotOf(channels, batched, slots[b]) == refState)
              << what << " sequence " << b << " state vs reference";
        }
      }
    }
  }
}

// Three parts in one launch (plan-group-short-convs' step for a KDA layer's q, k and v), of
// widths that end mid-block (Flash's 8192, 300 and the tiny's 128): each part's outputs and new
// windows equal its launch alone, bit for bit, for batched decode (2 sequences, 1 and 2 rows each)
// and a 37-row prefill chunk, f32 and bf16.
TEST_F(ShortConvGpu, PartsEqualTheirLaunchesAlone) {
  SplitMix64 rng(36);
  const std::vector<int64_t> channels = {kFlash, 300, kTiny};
  for (bool tBf16 : {false, true}) {
    for (const auto &[perSeq, slots] :
         {std::pair<int32_t, std::vector<int32_t>>{1, {2, 0}}, {2, {1, 3}}, {37, {2}}}) {
      std::vector<int32_t> pos;
      for (size_t b = 0; b < slots.size(); ++b) {
        for (int32_t r = 0; r < perSeq; ++r) {
          pos.push_back(7 * static_cast<int32_t>(b) + 3 + r);
        }
      }
      const Launch l{tBf16, false, perSeq, pos, slots};
      const int64_t n = static_cast<int64_t>(slots.size()) * perSeq;
      std::vector<std::vector<float>> xs, ws, initial;
      for (int64_t c : channels) {
        xs.push_back(randomValues(rng, n * c, tBf16));
        ws.push_back(randomValues(rng, c * kKernel, false, 0.5f));
        initial.push_back(randomValues(rng, kSlots * unit(c), tBf16));
      }
      std::vector<std::vector<float>> states = initial, outs;
      runParts(channels, xs, ws, l, states, outs);
      if (HasFatalFailure()) {
        return;
      }
      for (size_t p = 0; p < channels.size(); ++p) {
        std::vector<float> alone = initial[p], aloneOut;
        run(channels[p], xs[p], ws[p], l, alone, aloneOut);
        const std::string what = strCat(tBf16 ? "bf16" : "f32", " part ", p, " (", channels[p],
                                        " channels), ", perSeq, " rows per sequence");
        EXPECT_TRUE(outs[p] == aloneOut) << what << ": " << relativeError(outs[p], aloneOut);
        EXPECT_TRUE(states[p] == alone) << what << " state";
      }
    }
  }
}

} // namespace
} // namespace glm::testing
