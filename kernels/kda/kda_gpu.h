// kda on the GPU: the argument struct the KDA kernels take by value, and their grid rule.
//
//   q       T [rows, heads · keyDim]       after the short conv (+SiLU)
//   k       T [rows, heads · keyDim]
//   v       T [rows, heads · valueDim]
//   f       T [rows, heads · keyDim]       forget-gate logits f_b(f_a(x))
//   b       T [rows, heads]                write-strength logits b_proj(x)
//   aLog    W [heads]                      A_log
//   dtBias  W [heads · keyDim]             dt_bias
//   out     T [rows, heads · valueDim]     o_t, before the gated output norm
//   state   f32 [heads, keyDim, valueDim] per slot, in every plan precision (S_h, in/out)
//   ctx     which sequence each row belongs to, its slot, and which rows are padding
//
// The math is kda.h's per-token recurrence. keyDim <= 128 and a multiple of 8; valueDim a multiple
// of 8. In bf16 plans β = sigmoid(b) is rounded to bf16 (HF evaluates that sigmoid in bf16) and o
// is rounded once at the store; everything else, the state included, is f32.
//
// A block owns one head's columns [c0, c0 + 8·warps) of the state of one sequence, in registers for
// the whole step: grid (heads · ceil(valueDim / (8·warps)), batch). Each warp holds 8 columns: lane
// (rowLane = lane / 4, colLane = lane % 4) keeps key rows rowLane + 8m (m < keyDim / 8) of columns
// c + 2·colLane and c + 2·colLane + 1, so the column sums m = Sᵀk̂ and o = Sᵀq̂ are three shuffles
// and every state load fills whole 32-byte sectors. Since columns are independent, warps never
// wait for each other during the recurrence. Rows are taken `tile` tokens at a time: all warps
// first stage each token's k̂, q̂ (L2-normalised), exp(g) and β in shared memory (once per block,
// not per warp), then every warp steps its columns through the tile's tokens.
//
// Two instances of the same code:
//   kdaDecodeKernel<T, W>   2 warps (16 columns) per block, tiles of 4 tokens: for rowsPerSequence
//                           < 4 (decode; kdaUsesDecodeKernel). At batch 1 (Flash: 64 heads) that is
//                           512 blocks, each loading 8 KB of state at once, for the memory-bound
//                           step.
//   kdaPrefillKernel<T, W>  4 warps (32 columns), tiles of 16 tokens: for prefill chunks, where
//                           the per-token step repeats C times and staging is shared by more warps.
// Both step each column through the same per-token arithmetic, so a row's output and the state it
// leaves have the same bits in either (measured: tests/gpu/CudaEngineVerifyTest.cpp's windows of
// 4-16 rows against one-row steps), and the choice below is speed alone.
// Padding rows (negative positions) are skipped: the state does not see them and their output is
// 0. A sequence with a negative slot writes 0 to its rows and touches no state.
//
// Folded with the gated output norm after it (plan-fuse-kda-norm; gate, normWeight, normed and
// normEps set):
//   gate    T [rows, heads · valueDim]     g_b(g_a(x))
//   normWeight WN [valueDim]               o_norm.weight
//   normed  T [rows, heads · valueDim]     gated_rms_norm(out, gate) per head; aliases none of
//                                          out, gate
// kdaDecodeNormKernel<T, W, WN, C> launches the decode grid in clusters of C = ceil(valueDim / 16)
// blocks, one head of one sequence a cluster (kdaNormCluster: valueDim <= 128 makes C <= 8, the
// portable limit). Once every block of the cluster has stored its columns of o (rounded to T, as
// the norm would read them from the unfused step), the blocks pass a cluster barrier, and each
// then reads the head's whole row of o back from L2 and runs gatedRmsNormKernel's own row routine
// (norm::gatedNormRow, a warp a row) on it, writing its own columns: the bits of the two launches,
// at the cost of one barrier and one L2 round trip. Prefill steps run gatedRmsNormKernel after the
// prefill kernel.
#pragma once

#include "kernels/common/DeviceTypes.h"
#include "kernels/common/StepContext.h"
#ifndef __CUDACC_RTC__
#include "kernels/common/Launch.h"
#endif

namespace glm::kernels {

constexpr int kKdaMaxKeyDim = 128;
constexpr int kKdaColumnsPerWarp = 8;
constexpr int kKdaDecodeWarps = 2;
constexpr int kKdaDecodeTile = 4;
constexpr int kKdaPrefillWarps = 4;
constexpr int kKdaPrefillTile = 16;

struct KdaGpuArgs {
  const void *q;
  const void *k;
  const void *v;
  const void *f;
  const void *b;
  const void *aLog;
  const void *dtBias;
  void *out;
  SlotState state;
  StepContext ctx;
  int32_t heads;
  int32_t keyDim;
  int32_t valueDim;
  float lowerBound; // linear_lower_bound
  float l2Eps;      // 1e-6: inside the sqrt of q's and k's L2 norms
  // The folded gated norm's (kdaDecodeNormKernel only).
  const void *gate;
  const void *normWeight;
  void *normed;
  float normEps;
};

#ifndef __CUDACC_RTC__
/// Whether a step of `rowsPerSequence` rows runs kdaDecodeKernel (else kdaPrefillKernel). On an
/// H200 at Flash's shape the decode kernel is 13% faster at 1 row per sequence and 4% slower at 4.
inline bool kdaUsesDecodeKernel(int64_t rowsPerSequence) { return rowsPerSequence < 4; }

/// The blocks of kdaDecodeKernel's grid that share a head of a sequence: the cluster of
/// kdaDecodeNormKernel.
inline int kdaNormCluster(int64_t valueDim) {
  return static_cast<int>(ceilDiv(valueDim, kKdaColumnsPerWarp * kKdaDecodeWarps));
}

/// The grid of kdaDecodeKernel (`decode`) or kdaPrefillKernel.
inline LaunchDims kdaLaunch(bool decode, int64_t heads, int64_t valueDim, int64_t batch) {
  const int warps = decode ? kKdaDecodeWarps : kKdaPrefillWarps;
  LaunchDims d;
  d.grid[0] = static_cast<unsigned>(heads) * ceilDiv(valueDim, kKdaColumnsPerWarp * warps);
  d.grid[1] = static_cast<unsigned>(batch);
  d.block[0] = 32 * warps;
  return d;
}
#endif

} // namespace glm::kernels
