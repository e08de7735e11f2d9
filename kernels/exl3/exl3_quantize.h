// exl3_quantize: an EXL3 encoder written from reference/exl3_format.md §6 (incoherence processing,
// a per-tensor scale, tail-biting Viterbi per 16x16 tile; no Hessian), for `glmc quantize` and for
// tests that need real trellises.
#pragma once

#include "base/Status.h"
#include "kernels/exl3/exl3.h"

#include <cstdint>
#include <functional>
#include <vector>

namespace glm::kernels {

/// §6.1: the tail-biting Viterbi of one tile. `values` are the 256 targets in stream order;
/// `states` receives 256 states that chain cyclically (exl3StatesChain) and minimise
/// Σ (codebook(state_p) − values_p)². Returns that sum.
///
/// The search keeps every one of the 2^16 states at each position. The start node E0 (the
/// in-edge of position 0, which the tail-biting path must also end on) comes from an
/// unconstrained pass over the 64 positions before and after position 0 instead of exllamav3's
/// full turn starting at 128: the survivor paths merge well within that window, and it saves a
/// quarter of the work (measured: within 0.3% of the full turn's error at K = 2 and 3).
double exl3EncodeTile(const float *values, int bits, Exl3Codebook codebook, uint16_t *states);

struct Exl3QuantizeOptions {
  int bits = 4;
  Exl3Codebook codebook = Exl3Codebook::Mcg;
  /// Seeds the random input and output sign vectors (su0, sv0).
  uint64_t seed = 0;
  /// Search the per-tensor scale g on a sample of tiles (§6.2 step 6); else g = 1.
  bool scaleSearch = true;
  /// Called with the number of tiles just finished, from worker threads (progress).
  std::function<void(int64_t)> onTiles;
};

/// One quantized matrix in the layout of the checkpoint (§1.1).
struct Exl3Quantized {
  int64_t in = 0, out = 0; // unpadded features
  int64_t k = 0, n = 0;    // padded to 128
  int bits = 0;
  Exl3Codebook codebook = Exl3Codebook::Mcg;
  std::vector<uint16_t> trellis; // [k/16][n/16][16·bits]
  std::vector<uint16_t> suh;     // f16 [k]
  std::vector<uint16_t> svh;     // f16 [n]
  double scale = 1.0;            // the per-tensor scale g that was chosen

  Exl3MatrixView view() const;
};

/// Quantizes a dense weight in PyTorch orientation [out][in] (§6.2, §6.4):
///   1. pad to multiples of 128 (zero rows and columns get zero scales, so they decode to 0);
///   2. output scales: svh = sv0 · column RMS / mean, W ← W / svh, W ← W · Hn;
///   3. input scales: suh = su0 · row RMS / σ (σ the codebook's RMS), W ← W / suh, W ← Hk · W;
///   4. the per-tensor scale g (W ← g W, suh ← suh / g), searched on a sample of tiles;
///   5. every tile, gathered in stream order (§5.1), through exl3EncodeTile and packed (§2.4);
///   6. suh and svh share a factor so that both sit near 1 in fp16, then are rounded to fp16.
/// Tiles are encoded in parallel (parallelFor).
Expected<Exl3Quantized> exl3Quantize(const float *weight, int64_t out, int64_t in,
                                     const Exl3QuantizeOptions &options);

} // namespace glm::kernels
