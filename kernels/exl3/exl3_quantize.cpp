// exl3_quantize: incoherence processing, the per-tensor scale search and the tail-biting trellis
// Viterbi of reference/exl3_format.md §6, on the CPU.
#include "kernels/exl3/exl3_quantize.h"

#include "base/Random.h"
#include "kernels/common/FloatFormats.h"
#include "kernels/common/ParallelFor.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <memory>
#include <mutex>

// The DP step is the whole cost of quantization (2^16 states x 256 positions x ~1.5 passes per
// tile), so it is compiled for AVX-512 and AVX2 as well as the baseline and picked at load time.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define GLM_EXL3_CLONES                                                                            \
  __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define GLM_EXL3_CLONES
#endif

namespace glm::kernels {

namespace {

/// Positions before and after position 0 that the first (start-node) pass covers.
constexpr int kWindowBefore = 64;
constexpr int kWindowAfter = 64;
/// A cost no real path reaches: the start nodes that pass 2 excludes.
constexpr float kUnreachable = 1e30f;

// The DP over one position, for K new bits per step, N = 2^(16-K) nodes (a node is the low 16-K
// bits a state hands on) and T = 2^K candidates per node (the state's top K bits t):
//
//   next[e] = min_t (codebook[t·N + e] − w)² + cost[(t·N + e) >> K]
//
// Costs are non-negative floats, whose bit patterns order like unsigned integers; replacing the
// low 8 mantissa bits by t makes one unsigned min give both the minimum (to 2^-15 relative, finer
// than exllamav3's fp16 costs) and its argmin.
//
// For K >= 4 the inner loop runs over the T consecutive nodes that share one predecessor cost.
// For K <= 3 that run is too short to vectorise, so the codebook is stored transposed as
// [t][e mod T][e / T] and the result as [e mod T][e / T]; dpFinish puts it back in node order.
template <int K>
GLM_EXL3_CLONES void dpStep(const float *__restrict table, const float *__restrict cost, float w,
                            uint32_t *__restrict next) {
  constexpr int N = 1 << (16 - K), T = 1 << K, Q = N / T;
  for (int t = 0; t < T; ++t) {
    const float *before = cost + t * Q;
    const uint32_t tag = static_cast<uint32_t>(t);
    if constexpr (K <= 3) {
      for (int b = 0; b < T; ++b) {
        const float *values = table + (t * T + b) * Q;
        uint32_t *out = next + b * Q;
        for (int q = 0; q < Q; ++q) {
          const float d = values[q] - w;
          const uint32_t key = (std::bit_cast<uint32_t>(d * d + before[q]) & ~255u) | tag;
          out[q] = (t == 0 || key < out[q]) ? key : out[q];
        }
      }
    } else {
      const float *values = table + t * N;
      for (int q = 0; q < Q; ++q) {
        const float c = before[q];
        for (int b = 0; b < T; ++b) {
          const int e = q * T + b;
          const float d = values[e] - w;
          const uint32_t key = (std::bit_cast<uint32_t>(d * d + c) & ~255u) | tag;
          next[e] = (t == 0 || key < next[e]) ? key : next[e];
        }
      }
    }
  }
}

/// Splits the step's keys into costs (node order) and backpointers t.
template <int K>
GLM_EXL3_CLONES void dpFinish(const uint32_t *__restrict next, float *__restrict cost,
                              uint8_t *__restrict back) {
  constexpr int N = 1 << (16 - K), T = 1 << K, Q = N / T;
  if constexpr (K <= 3) {
    for (int q = 0; q < Q; ++q) {
      for (int b = 0; b < T; ++b) {
        const uint32_t key = next[b * Q + q];
        back[q * T + b] = static_cast<uint8_t>(key & 255u);
        cost[q * T + b] = std::bit_cast<float>(key & ~255u);
      }
    }
  } else {
    for (int e = 0; e < N; ++e) {
      back[e] = static_cast<uint8_t>(next[e] & 255u);
      cost[e] = std::bit_cast<float>(next[e] & ~255u);
    }
  }
}

using StepFn = void (*)(const float *, const float *, float, uint32_t *);
using FinishFn = void (*)(const uint32_t *, float *, uint8_t *);

template <int K> constexpr std::pair<StepFn, FinishFn> kernelsOf() {
  return {&dpStep<K>, &dpFinish<K>};
}

std::pair<StepFn, FinishFn> dpKernels(int bits) {
  static constexpr std::array<std::pair<StepFn, FinishFn>, 8> kKernels = {
      kernelsOf<1>(), kernelsOf<2>(), kernelsOf<3>(), kernelsOf<4>(),
      kernelsOf<5>(), kernelsOf<6>(), kernelsOf<7>(), kernelsOf<8>()};
  return kKernels[static_cast<size_t>(bits - 1)];
}

/// The codebook in the order dpStep<K> reads it (transposed for K <= 3), built once.
const float *stepTable(Exl3Codebook codebook, int bits) {
  static std::once_flag once[3][8];
  static std::unique_ptr<std::vector<float>> tables[3][8];
  const auto c = static_cast<size_t>(codebook);
  const auto k = static_cast<size_t>(bits - 1);
  std::call_once(once[c][k], [&] {
    const float *values = exl3CodebookTable(codebook);
    auto table = std::make_unique<std::vector<float>>(values, values + 65536);
    if (bits <= 3) {
      const int n = 1 << (16 - bits), t = 1 << bits, q = n / t;
      for (int top = 0; top < t; ++top) {
        for (int e = 0; e < n; ++e) {
          (*table)[static_cast<size_t>((top * t + e % t) * q + e / t)] = values[top * n + e];
        }
      }
    }
    tables[c][k] = std::move(table);
  });
  return tables[c][k]->data();
}

/// Per-thread buffers of the Viterbi: node costs, keys, and one backpointer per node and step.
struct Scratch {
  std::vector<float> cost;
  std::vector<uint32_t> next;
  std::vector<uint8_t> back;
};

/// Σ (codebook(states) − values)² in double.
double squaredError(const float *values, const uint16_t *states, const float *codebook) {
  double sum = 0;
  for (int p = 0; p < kExl3TileValues; ++p) {
    const double d = static_cast<double>(codebook[states[p]]) - values[p];
    sum += d * d;
  }
  return sum;
}

/// The regularised matrix A (k × n, row = input feature) and its scale vectors, in double.
struct Regularised {
  int64_t k = 0, n = 0;
  std::vector<double> a;
  std::vector<double> su, sv;
};

void hadamardRows(Regularised &r) {
  parallelFor(r.k, 16, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      exl3Hadamard(r.a.data() + i * r.n, r.n);
    }
  });
}

void hadamardColumns(Regularised &r) {
  parallelFor(r.n, 8, [&](int64_t begin, int64_t end) {
    std::vector<double> column(static_cast<size_t>(r.k));
    for (int64_t j = begin; j < end; ++j) {
      for (int64_t i = 0; i < r.k; ++i) {
        column[i] = r.a[i * r.n + j];
      }
      exl3Hadamard(column.data(), r.k);
      for (int64_t i = 0; i < r.k; ++i) {
        r.a[i * r.n + j] = column[i];
      }
    }
  });
}

/// §6.2 steps 1-5 (with §6.4's codebook-dependent σ): signs, output scales, Hn, input scales, Hk.
Regularised regularise(const float *weight, int64_t out, int64_t in, const Exl3QuantizeOptions &o) {
  Regularised r;
  r.k = exl3Padded(in);
  r.n = exl3Padded(out);
  const int64_t k = r.k, n = r.n;
  r.a.assign(static_cast<size_t>(k * n), 0.0);
  for (int64_t o2 = 0; o2 < out; ++o2) {
    for (int64_t i = 0; i < in; ++i) {
      r.a[i * n + o2] = weight[o2 * in + i];
    }
  }
  SplitMix64 rng(o.seed ^ 0x5EC7E1A3D1B54A32ull);
  auto sign = [&] { return (rng.next() >> 63) != 0 ? -1.0 : 1.0; };
  std::vector<double> su0(static_cast<size_t>(k)), sv0(static_cast<size_t>(n));
  for (double &s : su0) {
    s = sign();
  }
  for (double &s : sv0) {
    s = sign();
  }

  // Output channels: RMS over the real inputs, normalised by the mean over non-zero columns. A
  // zero column (the padding, or a dead output) keeps svh = 0 and is divided by 1.
  r.sv.assign(static_cast<size_t>(n), 0.0);
  double sum = 0;
  int64_t live = 0;
  for (int64_t j = 0; j < n; ++j) {
    double s2 = 0;
    for (int64_t i = 0; i < in; ++i) {
      s2 += r.a[i * n + j] * r.a[i * n + j];
    }
    r.sv[j] = std::sqrt(s2 / static_cast<double>(in));
    if (r.sv[j] > 0) {
      sum += r.sv[j];
      ++live;
    }
  }
  const double mean = live > 0 ? sum / static_cast<double>(live) : 1.0;
  for (int64_t j = 0; j < n; ++j) {
    r.sv[j] = sv0[j] * r.sv[j] / mean;
  }
  for (int64_t i = 0; i < k; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      if (r.sv[j] != 0) {
        r.a[i * n + j] /= r.sv[j];
      }
    }
  }
  hadamardRows(r);

  // Input channels: RMS over the (now mixed) outputs, divided by the codebook's RMS so that the
  // rotated weights have the codebook's spread.
  const double sigma = o.codebook == Exl3Codebook::Mul1 ? 1.0 : 1.24371088;
  r.su.assign(static_cast<size_t>(k), 0.0);
  for (int64_t i = 0; i < k; ++i) {
    double s2 = 0;
    for (int64_t j = 0; j < n; ++j) {
      s2 += r.a[i * n + j] * r.a[i * n + j];
    }
    r.su[i] = su0[i] * std::sqrt(s2 / static_cast<double>(n)) / sigma;
    if (r.su[i] != 0) {
      for (int64_t j = 0; j < n; ++j) {
        r.a[i * n + j] /= r.su[i];
      }
    }
  }
  hadamardColumns(r);
  return r;
}

/// Tile (kt, nt) of A in stream order, times `scale`.
void gatherTile(const Regularised &r, int64_t tile, double scale, float *values) {
  const int64_t tilesN = r.n / 16;
  const int64_t kt = tile / tilesN, nt = tile % tilesN;
  for (int p = 0; p < kExl3TileValues; ++p) {
    values[p] = static_cast<float>(
        r.a[(16 * kt + exl3TileRow(p)) * r.n + 16 * nt + exl3TileCol(p)] * scale);
  }
}

/// §6.2 step 6: the g that minimises the error of Viterbi(tile·g)/g over a sample of tiles: a
/// coarse grid, then the vertex of the parabola through the best point and its neighbours. The
/// comparison is paired (every g sees the same tiles), but it still needs tens of tiles to beat
/// g = 1 reliably (measured on Gaussian weights: 12 tiles picked g = 0.8, worse than 1; all tiles
/// picked 0.9, 3.5% better), so smaller matrices keep g = 1.
constexpr int64_t kScaleSamples = 64;
constexpr int64_t kScaleSearchMinTiles = 1024;

double searchScale(const Regularised &r, const Exl3QuantizeOptions &o) {
  const int64_t tiles = (r.k / 16) * (r.n / 16);
  if (tiles < kScaleSearchMinTiles) {
    return 1.0;
  }
  std::vector<int64_t> picks(static_cast<size_t>(kScaleSamples));
  for (int64_t s = 0; s < kScaleSamples; ++s) {
    // Evenly spread, offset so that the picks do not all fall in the same tile column.
    picks[s] = (s * tiles / kScaleSamples + s * 17) % tiles;
  }
  auto errorAt = [&](const std::vector<double> &scales) {
    std::vector<double> errors(scales.size() * static_cast<size_t>(kScaleSamples));
    parallelFor(static_cast<int64_t>(errors.size()), 1, [&](int64_t begin, int64_t end) {
      float values[kExl3TileValues];
      uint16_t states[kExl3TileValues];
      for (int64_t i = begin; i < end; ++i) {
        const double g = scales[static_cast<size_t>(i / kScaleSamples)];
        gatherTile(r, picks[i % kScaleSamples], g, values);
        errors[i] = exl3EncodeTile(values, o.bits, o.codebook, states) / (g * g);
      }
    });
    std::vector<double> totals(scales.size(), 0.0);
    for (size_t i = 0; i < errors.size(); ++i) {
      totals[i / static_cast<size_t>(kScaleSamples)] += errors[i];
    }
    return totals;
  };
  const std::vector<double> grid = {0.8, 0.9, 1.0};
  const std::vector<double> errors = errorAt(grid);
  const size_t best =
      static_cast<size_t>(std::min_element(errors.begin(), errors.end()) - errors.begin());
  if (best == 0 || best + 1 == grid.size()) {
    return grid[best];
  }
  // Equally spaced points: the vertex is at g_b + h (e₋ − e₊) / (2 (e₋ − 2 e_b + e₊)).
  const double h = grid[best + 1] - grid[best];
  const double curvature = errors[best - 1] - 2 * errors[best] + errors[best + 1];
  if (curvature <= 0) {
    return grid[best];
  }
  const double vertex =
      std::clamp(grid[best] + h * (errors[best - 1] - errors[best + 1]) / (2 * curvature),
                 grid[best] - h, grid[best] + h);
  return errorAt({vertex})[0] < errors[best] ? vertex : grid[best];
}

} // namespace

double exl3EncodeTile(const float *values, int bits, Exl3Codebook codebook, uint16_t *states) {
  static thread_local Scratch s;
  const int nodes = 1 << (16 - bits);
  const auto [step, finish] = dpKernels(bits);
  const float *table = stepTable(codebook, bits);
  s.cost.assign(static_cast<size_t>(nodes), 0.0f);
  s.next.resize(static_cast<size_t>(nodes));
  s.back.resize(static_cast<size_t>(kExl3TileValues) * static_cast<size_t>(nodes));
  auto backAt = [&](int step) { return s.back.data() + static_cast<size_t>(step) * nodes; };

  // Pass 1: from any start, over positions -64..63 (mod 256); the best path's in-edge at position
  // 0 becomes E0.
  const int window = kWindowBefore + kWindowAfter;
  for (int i = 0; i < window; ++i) {
    const int p = (kExl3TileValues - kWindowBefore + i) % kExl3TileValues;
    step(table, s.cost.data(), values[p], s.next.data());
    finish(s.next.data(), s.cost.data(), backAt(i));
  }
  uint32_t node =
      static_cast<uint32_t>(std::min_element(s.cost.begin(), s.cost.end()) - s.cost.begin());
  for (int i = window - 1; i >= kWindowBefore; --i) {
    const uint32_t state = (static_cast<uint32_t>(backAt(i)[node]) << (16 - bits)) | node;
    node = state >> bits;
  }
  const uint32_t start = node; // in-edge of the state at position 0

  // Pass 2: positions 0..255 starting from node E0, backtracked from node E0 at position 255, so
  // the states chain around the tile.
  s.cost.assign(static_cast<size_t>(nodes), kUnreachable);
  s.cost[start] = 0.0f;
  for (int p = 0; p < kExl3TileValues; ++p) {
    step(table, s.cost.data(), values[p], s.next.data());
    finish(s.next.data(), s.cost.data(), backAt(p));
  }
  node = start;
  for (int p = kExl3TileValues - 1; p >= 0; --p) {
    const uint32_t state = (static_cast<uint32_t>(backAt(p)[node]) << (16 - bits)) | node;
    states[p] = static_cast<uint16_t>(state);
    node = state >> bits;
  }
  return squaredError(values, states, exl3CodebookTable(codebook));
}

Exl3MatrixView Exl3Quantized::view() const {
  Exl3MatrixView v;
  v.trellis = trellis.data();
  v.suh = suh.data();
  v.svh = svh.data();
  v.bits = bits;
  v.codebook = codebook;
  v.in = in;
  v.out = out;
  return v;
}

Expected<Exl3Quantized> exl3Quantize(const float *weight, int64_t out, int64_t in,
                                     const Exl3QuantizeOptions &o) {
  if (o.bits < kExl3MinBits || o.bits > kExl3MaxBits) {
    return invalidArgument("exl3 quantize: bits per weight must be in 1..8, got ", o.bits);
  }
  if (out <= 0 || in <= 0) {
    return invalidArgument("exl3 quantize: a [", out, ", ", in, "] weight has no elements");
  }
  for (int64_t i = 0; i < out * in; ++i) {
    if (!std::isfinite(weight[i])) {
      return invalidArgument("exl3 quantize: element ", i, " (row ", i / in, ", column ", i % in,
                             ") is not finite");
    }
  }
  Regularised r = regularise(weight, out, in, o);
  const double g = o.scaleSearch ? searchScale(r, o) : 1.0;

  Exl3Quantized q;
  q.in = in;
  q.out = out;
  q.k = r.k;
  q.n = r.n;
  q.bits = o.bits;
  q.codebook = o.codebook;
  q.scale = g;
  const int64_t tilesN = r.n / 16, tiles = (r.k / 16) * tilesN;
  const int64_t tileWords = 16 * o.bits;
  q.trellis.assign(static_cast<size_t>(tiles * tileWords), 0);
  parallelFor(tiles, 1, [&](int64_t begin, int64_t end) {
    float values[kExl3TileValues];
    uint16_t states[kExl3TileValues];
    for (int64_t t = begin; t < end; ++t) {
      gatherTile(r, t, g, values);
      exl3EncodeTile(values, o.bits, o.codebook, states);
      exl3PackTile(states, o.bits, q.trellis.data() + t * tileWords);
    }
    if (o.onTiles) {
      o.onTiles(end - begin);
    }
  });

  // W = diag(su / g) · Hk · Ŵ · Hn · diag(sv); a common factor moves freely between su and sv,
  // and splitting it evenly (by RMS) keeps both far from fp16's subnormals and overflow.
  double su2 = 0, sv2 = 0;
  for (double s : r.su) {
    su2 += s * s / (g * g);
  }
  for (double s : r.sv) {
    sv2 += s * s;
  }
  const double balance = su2 > 0 && sv2 > 0 ? std::sqrt(std::sqrt(sv2 / static_cast<double>(r.n)) /
                                                        std::sqrt(su2 / static_cast<double>(r.k)))
                                            : 1.0;
  q.suh.resize(static_cast<size_t>(r.k));
  q.svh.resize(static_cast<size_t>(r.n));
  for (int64_t i = 0; i < r.k; ++i) {
    const double s = r.su[i] / g * balance;
    if (std::fabs(s) > 65504.0) {
      return invalidArgument("exl3 quantize: input channel ", i, " needs a scale of ", s,
                             ", beyond fp16");
    }
    q.suh[i] = doubleToF16(s);
  }
  for (int64_t j = 0; j < r.n; ++j) {
    const double s = r.sv[j] / balance;
    if (std::fabs(s) > 65504.0) {
      return invalidArgument("exl3 quantize: output channel ", j, " needs a scale of ", s,
                             ", beyond fp16");
    }
    q.svh[j] = doubleToF16(s);
  }
  return q;
}

} // namespace glm::kernels
