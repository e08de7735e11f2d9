// What the exl3_moe GPU tests (decode and prefill) share: layers of random EXL3 experts at the
// model's shapes, their CPU reference (exl3LinearRef per expert), the random cases both draw, the
// unused data both rewrite to show it is not read, and a step's device buffers.
//
// The trellises are random bits (every bitstream is a valid encoding, §6.1) and the scales are
// drawn so that gate and up come out with spread ~4 and ~5: the clamp at swiglu_limit bites.
#pragma once

#include "kernels/exl3/exl3.h"
#include "kernels/moe_experts/exl3_moe_gpu.h"
#include "runtime/weights/KernelViews.h"
#include "tests/gpu/support/GpuTest.h"

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

namespace glm::testing::exl3_moe_test {

struct Shape {
  int64_t hidden, inter, experts, topK;
};

/// GLM-5.3-Flash's expert shape (from the fixture's config) with `experts` experts held.
Shape flashShape(int64_t experts);
/// The tiny fixture's expert shape, all its experts.
Shape tinyShape();
/// Padded on both sides, and x rows of 200 bytes: a staging takes its element path.
inline constexpr Shape kRagged{100, 72, 6, 3};

float swigluLimit();

/// One EXL3 binding of the weights arena (Exl3ArenaLayout) on the host.
struct Binding {
  Exl3ArenaLayout layout;
  std::vector<uint8_t> bytes;

  kernels::Exl3MatrixView view(int64_t m) const {
    return exl3MatrixInArena(bytes.data(), layout, m);
  }
};

uint16_t *suhOf(Binding &b, int64_t m);
uint16_t *svhOf(Binding &b, int64_t m);

/// Matrix m's trellis as random bits and its scales as ±scale·U(0.5, 1.5): the input scale makes
/// x ∘ suh · Ŵ of unit spread per unit input, the output scale sets the spread of the result.
void fillMatrix(Binding &b, int64_t m, int bits, Exl3Codebook codebook, double outScale,
                SplitMix64 &rng);

/// A layer's gate, up and down bindings.
struct Layer {
  Binding gate, up, down;
};

/// K and codebook per matrix from `bitsOf`/`codebookOf` (matrix index 0..3·experts-1: gate
/// experts, up experts, down experts).
template <typename Bits, typename Codebook>
Layer makeLayer(const Shape &d, Bits bitsOf, Codebook codebookOf, uint64_t seed) {
  SplitMix64 rng(seed);
  int slotBits = 1;
  for (int64_t i = 0; i < 3 * d.experts; ++i) {
    slotBits = std::max(slotBits, bitsOf(i));
  }
  auto binding = [&](int64_t out, int64_t in) {
    Binding b;
    b.layout = {d.experts, in, out, exl3Padded(in), exl3Padded(out), slotBits};
    b.bytes.assign(b.layout.bytes(), 0);
    return b;
  };
  Layer l{binding(d.inter, d.hidden), binding(d.inter, d.hidden), binding(d.hidden, d.inter)};
  for (int64_t e = 0; e < d.experts; ++e) {
    fillMatrix(l.gate, e, bitsOf(e), codebookOf(e), 4.0, rng);
    fillMatrix(l.up, e, bitsOf(d.experts + e), codebookOf(d.experts + e), 5.0, rng);
    fillMatrix(l.down, e, bitsOf(2 * d.experts + e), codebookOf(2 * d.experts + e), 0.3, rng);
  }
  return l;
}

Layer uniformLayer(const Shape &d, int bits, Exl3Codebook codebook, uint64_t seed);

/// A layer whose matrices mix K = 2, 3, 4 and, when `mixCodebooks`, the three codebooks (else all
/// MCG): a kernel compiled for K = 4 MCG takes its generic path for the others.
Layer mixedLayer(const Shape &d, bool mixCodebooks, uint64_t seed);

/// tokens × hidden bf16-representable normal values.
std::vector<float> randomX(SplitMix64 &rng, int64_t tokens, int64_t hidden);

/// The reference: per local expert, its tokens through exl3LinearRef (gate, up), the clamped
/// SwiGLU in double, exl3LinearRef (down), weighted and summed in double. `clamped` counts the
/// gate and up values the clamp changed.
std::vector<float> reference(const Layer &l, const Shape &d, const std::vector<float> &x,
                             const Routing &r, int64_t tokens, int32_t firstExpert, float limit,
                             int64_t *clamped = nullptr);

/// A step's random inputs and the reference's output for them (at swigluLimit()).
struct Case {
  std::vector<float> x;
  Routing r;
  std::vector<float> ref;
  int64_t clamped = 0; // gate and up values the clamp changed
};

/// Draws x (randomX) and then the routing over `globalExperts` (randomRouting) from `rng`, in that
/// order, and computes the reference of the rank whose experts start at `firstExpert`.
Case drawCase(const Layer &l, const Shape &d, int64_t tokens, int64_t globalExperts,
              int32_t firstExpert, SplitMix64 &rng);

/// What a case's comparison says on failure: `what`, the tokens, the shape and the clamp count.
std::string describe(const std::string &what, const Shape &d, int64_t tokens, int64_t clamped);

/// A routing of `tokens` that never selects local experts 0 and 1 (ids from [2, experts)), so that
/// scribbleOnUnusedData may change them.
Routing routingWithoutExperts01(SplitMix64 &rng, int64_t tokens, const Shape &d);

/// Rewrites what a step routed by routingWithoutExperts01 must not read: experts 0 and 1's gate and
/// down (other bits as K = 4 MCG, output scale 100: the layer's slots must hold K = 4), and large
/// values in the padding of the other experts' suh and svh (where x and h are zero, or outputs are
/// dropped). The output must keep its bits.
void scribbleOnUnusedData(Layer &l, const Shape &d);

/// A step's inputs on the device, the output poisoned, and the decode kernel's arguments over them
/// (no scratch bound).
struct DeviceStep {
  cuda::DeviceMemory x, ids, weights, gate, up, down, out;
  kernels::Exl3MoeGpuArgs args{};
};

Expected<DeviceStep> uploadStep(const Layer &l, const Shape &d, const std::vector<float> &x,
                                const Routing &r, int64_t tokens, int32_t firstExpert, float limit);

} // namespace glm::testing::exl3_moe_test
