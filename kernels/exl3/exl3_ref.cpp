// exl3: CPU reference of EXL3 decode (bitstream, codebooks, tile order, Hadamard), dense
// reconstruction, the linear layer and the routed experts.
#include "kernels/exl3/exl3.h"

#include "kernels/common/FloatFormats.h"
#include "kernels/common/ParallelFor.h"

#include <array>
#include <memory>
#include <vector>

namespace glm::kernels {

namespace {

/// A tile's stream as 8K 32-bit words, word j = u[2j] | u[2j+1] << 16 (§2.2): stream bit b is
/// bit 31 - b % 32 of word b / 32.
uint32_t streamWord(const uint16_t *tile, int word) {
  return static_cast<uint32_t>(tile[2 * word]) | (static_cast<uint32_t>(tile[2 * word + 1]) << 16);
}

std::unique_ptr<std::array<float, 65536>> buildTable(Exl3Codebook codebook) {
  auto table = std::make_unique<std::array<float, 65536>>();
  for (uint32_t s = 0; s < 65536; ++s) {
    (*table)[s] = f16ToFloat(exl3CodebookHalf(codebook, s));
  }
  return table;
}

template <typename T> void hadamardBlocks(T *x, int64_t length) {
  // The normalised H128 is symmetric, so x · H = H · x: the textbook in-place butterfly.
  const T scale = static_cast<T>(1.0 / std::sqrt(static_cast<double>(kExl3Block)));
  for (int64_t base = 0; base < length; base += kExl3Block) {
    T *v = x + base;
    for (int64_t h = 1; h < kExl3Block; h *= 2) {
      for (int64_t i = 0; i < kExl3Block; i += 2 * h) {
        for (int64_t j = i; j < i + h; ++j) {
          const T a = v[j], b = v[j + h];
          v[j] = a + b;
          v[j + h] = a - b;
        }
      }
    }
    for (int64_t j = 0; j < kExl3Block; ++j) {
      v[j] *= scale;
    }
  }
}

/// Decodes the 16 × 128 block of Ŵ held by tiles (kt, 8·block .. 8·block + 7) into `out` (row
/// stride `stride` doubles, starting at row 16·kt of the block's column range).
void decodeTileRow(const Exl3MatrixView &m, const float *table, int64_t kt, int64_t nt0,
                   int64_t tiles, double *out, int64_t stride) {
  const int64_t tilesN = m.n() / 16;
  const int64_t tileWords = 16 * m.bits;
  uint16_t states[kExl3TileValues];
  for (int64_t t = 0; t < tiles; ++t) {
    exl3TileStates(m.trellis + (kt * tilesN + nt0 + t) * tileWords, m.bits, states);
    for (int p = 0; p < kExl3TileValues; ++p) {
      out[exl3TileRow(p) * stride + 16 * t + exl3TileCol(p)] = table[states[p]];
    }
  }
}

/// W restricted to output columns [128·block, 128·block + 128), as doubles [k][128]:
/// diag(suh) · Hk · Ŵ · Hn · diag(svh), the Hadamards in double.
void reconstructBlock(const Exl3MatrixView &m, int64_t block, std::vector<double> &w) {
  const int64_t k = m.k(), width = kExl3Block;
  const float *table = exl3CodebookTable(m.codebook);
  w.assign(static_cast<size_t>(k * width), 0.0);
  for (int64_t kt = 0; kt < k / 16; ++kt) {
    decodeTileRow(m, table, kt, block * (width / 16), width / 16, w.data() + kt * 16 * width,
                  width);
  }
  // Ŵ · Hn: each row's 128-block.
  for (int64_t i = 0; i < k; ++i) {
    hadamardBlocks(w.data() + i * width, width);
  }
  // Hk · (...): each column, a 128-block of rows at a time.
  std::vector<double> column(static_cast<size_t>(k));
  for (int64_t j = 0; j < width; ++j) {
    for (int64_t i = 0; i < k; ++i) {
      column[i] = w[i * width + j];
    }
    hadamardBlocks(column.data(), k);
    const double sv = f16ToFloat(m.svh[block * width + j]);
    for (int64_t i = 0; i < k; ++i) {
      w[i * width + j] = column[i] * f16ToFloat(m.suh[i]) * sv;
    }
  }
}

/// Runs reconstructBlock over all column blocks in parallel and hands each weight (o, i) of the
/// unpadded matrix to store(o, i, value).
template <typename Store> void reconstruct(const Exl3MatrixView &m, Store store) {
  const int64_t blocks = m.n() / kExl3Block;
  parallelFor(blocks, 1, [&](int64_t begin, int64_t end) {
    std::vector<double> w;
    for (int64_t b = begin; b < end; ++b) {
      reconstructBlock(m, b, w);
      const int64_t columns = std::min<int64_t>(kExl3Block, m.out - b * kExl3Block);
      for (int64_t j = 0; j < columns; ++j) {
        const int64_t o = b * kExl3Block + j;
        for (int64_t i = 0; i < m.in; ++i) {
          store(o, i, w[i * kExl3Block + j]);
        }
      }
    }
  });
}

} // namespace

uint16_t exl3CodebookHalf(Exl3Codebook codebook, uint32_t state) {
  state &= 0xFFFFu;
  if (codebook == Exl3Codebook::Mul1) {
    // A byte sum of the hashed state, mapped affinely (§3.2). In double the affine map is exact,
    // so one rounding to fp16 equals the kernel's single __hfma.
    const uint32_t x = state * kExl3Mul1Marker;
    const uint32_t sum = (x & 0xFFu) + ((x >> 8) & 0xFFu) + ((x >> 16) & 0xFFu) + (x >> 24);
    return doubleToF16((1024.0 + sum) * 0.00676727294921875 - 10.3828125);
  }
  // 3INST (QTIP's constants) or MCG (a bare multiplier); the mask and xor leave two halves in
  // ±[0.125, 2), whose sum (exact in double) is rounded once like the kernel's __hadd (§3.1).
  uint32_t x =
      codebook == Exl3Codebook::Inst3 ? state * 89226354u + 64248484u : state * kExl3McgMarker;
  x = (x & 0x8FFF8FFFu) ^ 0x3B603B60u;
  const double sum = static_cast<double>(f16ToFloat(static_cast<uint16_t>(x & 0xFFFFu))) +
                     static_cast<double>(f16ToFloat(static_cast<uint16_t>(x >> 16)));
  return doubleToF16(sum);
}

const float *exl3CodebookTable(Exl3Codebook codebook) {
  // Built on first use, once per codebook (function-local statics are thread-safe).
  static const std::unique_ptr<std::array<float, 65536>> inst3 = buildTable(Exl3Codebook::Inst3);
  static const std::unique_ptr<std::array<float, 65536>> mcg = buildTable(Exl3Codebook::Mcg);
  static const std::unique_ptr<std::array<float, 65536>> mul1 = buildTable(Exl3Codebook::Mul1);
  switch (codebook) {
  case Exl3Codebook::Inst3:
    return inst3->data();
  case Exl3Codebook::Mcg:
    return mcg->data();
  case Exl3Codebook::Mul1:
    return mul1->data();
  }
  return inst3->data();
}

float exl3CodebookValue(Exl3Codebook codebook, uint32_t state) {
  return exl3CodebookTable(codebook)[state & 0xFFFFu];
}

uint32_t exl3State(const uint16_t *tile, int bits, int position) {
  // The 16-bit window that ends at stream bit (p + 1)·K, which may straddle two words and wrap
  // around the end of the stream.
  const int streamBits = kExl3TileValues * bits, words = 8 * bits;
  const int first = ((position + 1) * bits - 16 + streamBits) % streamBits;
  const int word = first >> 5, offset = first & 31;
  const uint64_t pair =
      (static_cast<uint64_t>(streamWord(tile, word)) << 32) | streamWord(tile, (word + 1) % words);
  return static_cast<uint32_t>((pair >> (48 - offset)) & 0xFFFFu);
}

void exl3TileStates(const uint16_t *tile, int bits, uint16_t *states) {
  // The state before position 0 is the last one (tail-biting); each position shifts in its own K
  // new bits.
  const int words = 8 * bits;
  const uint32_t mask = (1u << bits) - 1u;
  uint32_t state = exl3State(tile, bits, kExl3TileValues - 1);
  for (int p = 0; p < kExl3TileValues; ++p) {
    const int first = p * bits;
    const int word = first >> 5, offset = first & 31;
    const uint64_t pair = (static_cast<uint64_t>(streamWord(tile, word)) << 32) |
                          streamWord(tile, (word + 1) % words);
    const uint32_t index = static_cast<uint32_t>(pair >> (64 - offset - bits)) & mask;
    state = ((state << bits) | index) & 0xFFFFu;
    states[p] = static_cast<uint16_t>(state);
  }
}

void exl3PackTile(const uint16_t *states, int bits, uint16_t *tile) {
  // Indices MSB-first into 32-bit words, each stored low half first.
  const int words = 8 * bits;
  uint32_t stream[64] = {};
  for (int p = 0; p < kExl3TileValues; ++p) {
    const uint32_t index = states[p] & ((1u << bits) - 1u);
    for (int b = 0; b < bits; ++b) {
      const int bit = p * bits + b;
      if ((index >> (bits - 1 - b)) & 1u) {
        stream[bit >> 5] |= 1u << (31 - (bit & 31));
      }
    }
  }
  for (int j = 0; j < words; ++j) {
    tile[2 * j] = static_cast<uint16_t>(stream[j] & 0xFFFFu);
    tile[2 * j + 1] = static_cast<uint16_t>(stream[j] >> 16);
  }
}

bool exl3StatesChain(const uint16_t *states, int bits) {
  const uint32_t keep = (1u << (16 - bits)) - 1u;
  for (int p = 0; p < kExl3TileValues; ++p) {
    const uint32_t previous = states[(p + kExl3TileValues - 1) % kExl3TileValues];
    if ((static_cast<uint32_t>(states[p]) >> bits) != (previous & keep)) {
      return false;
    }
  }
  return true;
}

void exl3Hadamard(double *x, int64_t length) { hadamardBlocks(x, length); }
void exl3Hadamard(float *x, int64_t length) { hadamardBlocks(x, length); }

Exl3MatrixView exl3MatrixAt(const uint8_t *slice, const Exl3Geometry &g, int64_t m) {
  Exl3MatrixView v;
  const auto index = static_cast<uint64_t>(m);
  v.trellis = reinterpret_cast<const uint16_t *>(slice + index * g.trellisStride);
  v.suh = reinterpret_cast<const uint16_t *>(slice + g.suhOffset) + index * g.k;
  v.svh = reinterpret_cast<const uint16_t *>(slice + g.svhOffset) + index * g.n;
  const auto *meta = reinterpret_cast<const uint32_t *>(slice + g.metaOffset) + 2 * index;
  v.bits = static_cast<int>(meta[0]);
  v.codebook = static_cast<Exl3Codebook>(meta[1]);
  v.in = g.in;
  v.out = g.out;
  return v;
}

Status checkExl3Matrix(const Exl3MatrixView &m, std::string_view what) {
  if (m.trellis == nullptr || m.suh == nullptr || m.svh == nullptr) {
    return invalidArgument(what, ": EXL3 trellis, suh and svh are required");
  }
  if (m.bits < kExl3MinBits || m.bits > kExl3MaxBits) {
    return invalidArgument(what, ": EXL3 bits per weight is ", m.bits, ", not in 1..8");
  }
  if (static_cast<uint8_t>(m.codebook) > static_cast<uint8_t>(Exl3Codebook::Mul1)) {
    return invalidArgument(what, ": unknown EXL3 codebook ", static_cast<int>(m.codebook));
  }
  if (m.in <= 0 || m.out <= 0) {
    return invalidArgument(what, ": EXL3 features must be positive, got [", m.out, ", ", m.in, "]");
  }
  if (m.bias != nullptr && m.biasDType != DType::F16 && m.biasDType != DType::F32) {
    return invalidArgument(what, ": EXL3 bias must be F16 or F32");
  }
  return Status::success();
}

Status exl3DecodeRotatedRef(const Exl3MatrixView &m, float *wHat) {
  GLM_RETURN_IF_ERROR(checkExl3Matrix(m, "exl3 decode"));
  const float *table = exl3CodebookTable(m.codebook);
  const int64_t n = m.n(), tilesN = n / 16;
  parallelFor(m.k() / 16, 1, [&](int64_t begin, int64_t end) {
    uint16_t states[kExl3TileValues];
    for (int64_t kt = begin; kt < end; ++kt) {
      for (int64_t nt = 0; nt < tilesN; ++nt) {
        exl3TileStates(m.trellis + (kt * tilesN + nt) * 16 * m.bits, m.bits, states);
        for (int p = 0; p < kExl3TileValues; ++p) {
          wHat[(16 * kt + exl3TileRow(p)) * n + 16 * nt + exl3TileCol(p)] = table[states[p]];
        }
      }
    }
  });
  return Status::success();
}

Status exl3ReconstructRef(const Exl3MatrixView &m, float *weight) {
  GLM_RETURN_IF_ERROR(checkExl3Matrix(m, "exl3 reconstruct"));
  reconstruct(
      m, [&](int64_t o, int64_t i, double v) { weight[o * m.in + i] = static_cast<float>(v); });
  return Status::success();
}

Status exl3ReconstructBf16Ref(const Exl3MatrixView &m, uint16_t *weight) {
  GLM_RETURN_IF_ERROR(checkExl3Matrix(m, "exl3 reconstruct"));
  reconstruct(m, [&](int64_t o, int64_t i, double v) { weight[o * m.in + i] = doubleToBf16(v); });
  return Status::success();
}

Status exl3LinearRef(const Exl3LinearArgs &a) {
  const Exl3MatrixView &m = a.weight;
  GLM_RETURN_IF_ERROR(checkExl3Matrix(m, "exl3 linear"));
  if (a.rows < 0) {
    return invalidArgument("exl3 linear: rows must be >= 0");
  }
  const int64_t k = m.k(), n = m.n();
  std::vector<float> wHat(static_cast<size_t>(k * n));
  GLM_RETURN_IF_ERROR(exl3DecodeRotatedRef(m, wHat.data()));
  parallelFor(a.rows, 1, [&](int64_t begin, int64_t end) {
    std::vector<double> u(static_cast<size_t>(k)), z(static_cast<size_t>(n));
    for (int64_t r = begin; r < end; ++r) {
      // Input side: x ∘ suh (zero in the padding), then H.
      for (int64_t i = 0; i < k; ++i) {
        u[i] = i < m.in ? static_cast<double>(a.x[r * m.in + i]) * f16ToFloat(m.suh[i]) : 0.0;
      }
      hadamardBlocks(u.data(), k);
      std::fill(z.begin(), z.end(), 0.0);
      for (int64_t i = 0; i < k; ++i) {
        const float *row = wHat.data() + i * n;
        for (int64_t j = 0; j < n; ++j) {
          z[j] += u[i] * row[j];
        }
      }
      // Output side: H, then ∘ svh, then the bias.
      hadamardBlocks(z.data(), n);
      for (int64_t o = 0; o < m.out; ++o) {
        double v = z[o] * f16ToFloat(m.svh[o]);
        if (m.bias != nullptr) {
          v += m.biasDType == DType::F32 ? static_cast<const float *>(m.bias)[o]
                                         : f16ToFloat(static_cast<const uint16_t *>(m.bias)[o]);
        }
        a.y[r * m.out + o] = static_cast<float>(v);
      }
    }
  });
  return Status::success();
}

} // namespace glm::kernels
