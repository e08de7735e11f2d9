// exl3_moe: the routed experts of one MoE layer with EXL3 weights for decode steps, the trellis
// decoded in registers straight into the tensor cores (contract, data flow and roundings in
// exl3_moe_gpu.h).
#pragma once

#include "kernels/common/Device.cuh"
#include "kernels/common/Ptx.cuh"
#include "kernels/exl3/exl3.cuh"
#include "kernels/moe_experts/exl3_moe_gpu.h"

namespace glm::kernels {
namespace exl3_moe_detail {

using namespace ptx;

constexpr int kWarps = kExl3MoeThreads / 32;
constexpr int kChunkTiles = kExl3MoeChunk / 16; // k-tiles per chunk
// Gate/up: warp w owns tile columns 2w, 2w + 1 of the item's 128 columns of gate (w < 4) or
// 2(w - 4), 2(w - 4) + 1 of up's, over every k-tile of the block's chunks.
constexpr int kPairs = 8;
constexpr float kHadamardScale = 0.0883883476483184405f; // 1 / sqrt(128)

/// One matrix of a binding, resolved for expert e.
struct Matrix {
  const uint32_t *trellis; // [k/16][n/16][8·bits] words
  const uint16_t *suh;     // f16 [k]
  const uint16_t *svh;     // f16 [n]
  int64_t tilesN;
  int bits;
  int codebook;

  __device__ __forceinline__ const uint32_t *tile(int64_t kt, int64_t nt) const {
    return trellis + (kt * tilesN + nt) * 8 * bits;
  }
};

__device__ __forceinline__ Matrix matrixOf(const Exl3GpuWeights &w, int64_t e) {
  const uint32_t *meta = exl3Meta(w, e);
  Matrix m;
  m.trellis = reinterpret_cast<const uint32_t *>(w.slice + e * w.trellisStride);
  m.suh = reinterpret_cast<const uint16_t *>(w.slice + w.suhOffset) + e * w.k;
  m.svh = reinterpret_cast<const uint16_t *>(w.slice + w.svhOffset) + e * w.n;
  m.tilesN = w.n / 16;
  m.bits = static_cast<int>(meta[0]);
  m.codebook = static_cast<int>(meta[1]);
  return m;
}

__device__ __forceinline__ float halfAt(const uint16_t *p, int64_t i) {
  return exl3HalfToFloat(p[i]);
}

__device__ __forceinline__ uint32_t halfBits(float v) {
  uint16_t h;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(v));
  return h;
}

/// §3 for the tensor cores: a 32-bit register whose two fp16 halves sum to the weight of a state.
/// MCG and 3INST: the masked hash itself (lo + hi, formed exactly by the mma; see the contract).
/// MUL1: the exact fp16 value in the low half (the same fma as exl3CodebookHalf, done on a pair
/// whose high lane is 0 · 0 + 0).
template <int CB> __device__ __forceinline__ uint32_t splitWeight(uint32_t state) {
  if constexpr (CB == 2) {
    uint32_t h, w;
    asm("dp4a.u32.u32 %0, %1, %2, %3;"
        : "=r"(h)
        : "r"(state * 0x83DCD12Du), "r"(0x01010101u), "r"(0x6400u));
    asm("fma.rn.f16x2 %0, %1, %2, %3;" : "=r"(w) : "r"(h), "r"(0x00001EEEu), "r"(0x0000C931u));
    return w;
  } else {
    const uint32_t x = CB == 0 ? state * 89226354u + 64248484u : state * 0xCBAC1FEDu;
    // (x & 0x8FFF8FFF) ^ 0x3B603B60 as one lop3 (written in C, the compiler makes it two).
    uint32_t r;
    asm("lop3.b32 %0, %1, 0x8FFF8FFF, 0x3B603B60, 0x6A;" : "=r"(r) : "r"(x));
    return r;
  }
}

/// The fast path's decoder for compile-time K and codebook: lane l's eight weights (positions
/// 8l..8l+7 of a tile) from the tile's words in shared memory. K <= 4: the word the lane's last
/// state ends in and the word before (two loads, no conflicts); K > 4: three words.
template <int K, int CB> struct FastTiles {
  static constexpr int kTileWords = 8 * K;
  int word;    // the (last) tile word the lane reads
  int before;  // K <= 4: the word before it (tail-biting: the last for lane 0)
  int shift0;  // K <= 4: state j = (before:word) >> (shift0 - j K), low 16 bits
  int offset0; // K > 4: the end of state 0, in bits from the start of word - 2

  __device__ __forceinline__ explicit FastTiles(int lane) {
    const int end = (8 * lane + 8) * K; // stream bit after the lane's last state
    word = (end - 1) >> 5;
    before = (word + kTileWords - 1) % kTileWords;
    shift0 = 32 * word + 32 - (8 * lane + 1) * K;
    offset0 = (8 * lane + 1) * K - 32 * (word - 2);
  }

  __device__ __forceinline__ void decode(const uint32_t *tile, uint32_t (&w)[8]) const {
    if constexpr (K == 4) {
      // The states end at bits 4, 8, ..., 32 of the lane's word b; with a the word before,
      // state j = (a:b) >> (28 - 4j), low 16 bits. Windows at byte offsets of b or of a funnel
      // shift are one permute or mask each; three funnel shifts reach the others.
      const uint32_t b = tile[word], a = tile[before];
      const uint32_t f4 = __funnelshift_r(b, a, 4), f8 = __funnelshift_r(b, a, 8);
      const uint32_t f12 = __funnelshift_r(b, a, 12);
      w[7] = splitWeight<CB>(b & 0xFFFFu);
      w[6] = splitWeight<CB>(f4 & 0xFFFFu);
      w[5] = splitWeight<CB>(__byte_perm(b, 0u, 0x4421u));
      w[4] = splitWeight<CB>(f12 & 0xFFFFu);
      w[3] = splitWeight<CB>(b >> 16);
      w[2] = splitWeight<CB>(__byte_perm(f12, 0u, 0x4421u));
      w[1] = splitWeight<CB>(f8 >> 16);
      w[0] = splitWeight<CB>(f12 >> 16);
    } else if constexpr (K < 4) {
      const uint64_t v = (static_cast<uint64_t>(tile[before]) << 32) | tile[word];
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        w[j] = splitWeight<CB>(static_cast<uint32_t>(v >> (shift0 - j * K)) & 0xFFFFu);
      }
    } else {
      uint32_t r[3];
#pragma unroll
      for (int i = 0; i < 3; ++i) {
        r[i] = tile[(word - 2 + i + kTileWords) % kTileWords];
      }
      const uint64_t lo = (static_cast<uint64_t>(r[0]) << 32) | r[1];
      const uint64_t hi = (static_cast<uint64_t>(r[1]) << 32) | r[2];
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        const int end = offset0 + j * K; // in (16, 96]
        const uint64_t v = end <= 64 ? lo : hi;
        const int shift = (end <= 64 ? 64 : 96) - end;
        w[j] = splitWeight<CB>(static_cast<uint32_t>(v >> shift) & 0xFFFFu);
      }
    }
  }
};

/// A warp's ring of trellis tiles in shared memory: kRingSlots slots, each the 16 tiles of
/// 8 k-tile rows × 2 adjacent tile columns, [row][column][8K words], filled with cp.async ahead
/// of the decode (the chunked loop and down two slots ahead, the resident loop kRingSlots - 1).
constexpr int kRingSlots = kExl3MoeRingSlots;
static_assert(kRingSlots >= 3, "the chunked loop and down rotate three slots");
template <int K> constexpr int kRingSlotWords = kChunkTiles * 2 * 8 * K;

/// Copies (cp.async, one group's worth; the caller commits) the 16 tiles whose first row starts
/// at `first` (rows `rowWords` apart) into a ring slot.
template <int K>
__device__ __forceinline__ void copyTiles(uint32_t *slot, const uint32_t *first, int64_t rowWords,
                                          int lane) {
  constexpr int kRowUnits = 4 * K; // 16-byte units in 2 tiles of 32K bytes
#pragma unroll
  for (int i = 0; i < kChunkTiles * kRowUnits / 32; ++i) {
    const int u = lane + 32 * i, row = u / kRowUnits, within = u % kRowUnits;
    cpAsync16(sharedAddress(slot + row * 2 * 8 * K + 4 * within),
              first + row * rowWords + 4 * within, 16);
  }
}

/// The generic path, for a matrix whose K or codebook is not the kernel's: exact fp16 weights
/// from the reference primitives, read straight from the tile (L1-cached). Not inlined: it keeps
/// its registers out of the fast loop's.
struct Weights8 {
  uint32_t w[8];
};
__device__ __noinline__ Weights8 decodeAny(const uint32_t *tile, int bits, int codebook, int lane) {
  Weights8 r;
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    r.w[j] = exl3CodebookHalf(exl3State(tile, bits, 8 * lane + j), codebook);
  }
  return r;
}

/// The A operand in mma-fragment order: for each k-tile and token group, two fragments of 32
/// lanes × 16 bytes. Fragment P pairs with states 0, 1 (4, 5) of a lane, Q with 2, 3 (6, 7): each
/// register holds one activation twice (k-rows 2t, 2t+1 of the mma meet the two halves of one
/// weight register).
__device__ __forceinline__ int fragmentIndex(int kt, int group, int variant, int groups) {
  return ((kt * groups + group) * 2 + variant) * 32;
}

/// Stores activation (row, k) of a tile-local k in 0..127 as fp16, twice, at its place in a
/// region of 8 k-tiles laid out by fragmentIndex.
__device__ __forceinline__ void storeActivation(uint4 *region, int groups, int row, int k,
                                                float v) {
  const int kt = k >> 4, kw = k & 15;
  const int variant = kw >> 3, t = (kw & 7) >> 1, odd = kw & 1;
  const int rr = row & 15;
  const int lane = 4 * (rr & 7) + t;
  const int reg = 2 * odd + (rr >> 3);
  const uint32_t h = halfBits(v);
  reinterpret_cast<uint32_t *>(region + fragmentIndex(kt, row >> 4, variant, groups) + lane)[reg] =
      h | (h << 16);
}

/// The resident A operand of gate and up: [gate, up][kResidentKt][kExl3MoeResidentRows][4]
/// uint4, entry (m, kt, row, t) holding activations 2t, 2t + 1, 8 + 2t and 9 + 2t of k-tile kt
/// for that row, each twice: lane 4 · row + t's registers of fragments P (.x, .y) and Q (.z, .w)
/// for its first row, in a quarter of the chunked layout's bytes at batch 1. Resident items have
/// fewer than 8 rows, so every lane's second-row registers are 0.
constexpr int kResidentKt = kExl3MoeResidentChunks * kChunkTiles;

static_assert(2 * kResidentKt * kExl3MoeResidentRows * 4 * 16 <= 32768,
              "the resident A fits the A region of one group");
static_assert(kExl3MoeResidentRows * kExl3MoeResidentChunks * kExl3MoeChunk * 2 +
                      2 * kExl3MoeResidentChunks * kExl3MoeChunk * 2 <=
                  12288,
              "the resident staging fits exl3MoeStagingBytes");

__device__ __forceinline__ int residentIndex(int m, int kt, int row, int t) {
  return ((m * kResidentKt + kt) * kExl3MoeResidentRows + row) * 4 + t;
}

/// storeActivation for the resident layout: activation (row, k) of matrix m, k block-local.
__device__ __forceinline__ void storeResident(uint4 *region, int m, int row, int k, float v) {
  const int kt = k >> 4, kw = k & 15;
  const uint32_t h = halfBits(v);
  reinterpret_cast<uint32_t *>(
      region + residentIndex(m, kt, row, (kw & 7) >> 1))[2 * (kw >> 3) + (kw & 1)] = h | (h << 16);
}

/// acc (a tile's two 8-column halves) += A · W for the active token groups.
template <int G>
__device__ __forceinline__ void mmaTile(float (&acc)[2][G][4], const uint4 (&p)[G],
                                        const uint4 (&q)[G], const uint32_t (&w)[8], int groups) {
#pragma unroll
  for (int g = 0; g < G; ++g) {
    if (g == 0 || g < groups) { // group 0 always: a predicate would cost moves per mma
      mmaF16(acc[0][g], p[g].x, p[g].y, p[g].z, p[g].w, w[0], w[1]);
      mmaF16(acc[0][g], q[g].x, q[g].y, q[g].z, q[g].w, w[2], w[3]);
      mmaF16(acc[1][g], p[g].x, p[g].y, p[g].z, p[g].w, w[4], w[5]);
      mmaF16(acc[1][g], q[g].x, q[g].y, q[g].z, q[g].w, w[6], w[7]);
    }
  }
}

template <int G>
__device__ __forceinline__ void loadFragments(const uint4 *region, int kt, int lane, int groups,
                                              uint4 (&p)[G], uint4 (&q)[G]) {
#pragma unroll
  for (int g = 0; g < G; ++g) {
    if (g == 0 || g < groups) {
      p[g] = region[fragmentIndex(kt, g, 0, G) + lane];
      q[g] = region[fragmentIndex(kt, g, 1, G) + lane];
    }
  }
}

/// Clears a warp's accumulators of two tiles (two 8-column halves each, G token groups).
template <int G> __device__ __forceinline__ void zeroAccumulators(float (&acc)[2][2][G][4]) {
#pragma unroll
  for (int t = 0; t < 2; ++t) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
#pragma unroll
      for (int g = 0; g < G; ++g) {
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          acc[t][h][g][i] = 0.0f;
        }
      }
    }
  }
}

/// One chunk of kChunkTiles k-tiles against two adjacent tile columns, accumulated into acc: the A
/// fragments from `a` (a region laid out by fragmentIndex, or Resident: the chunk's first entry
/// of the resident layout, `rows` rows, one group), the weights decoded from the ring's `words`
/// (Fast) or by the generic decoder from tiles (kTile0 + kk, nt0 + t) of `matrix`.
template <int K, int CB, int G, bool Fast, bool Resident = false>
__device__ __forceinline__ void mmaChunk(const FastTiles<K, CB> &tiles, const uint32_t *words,
                                         const uint4 *a, const Matrix &matrix, int64_t kTile0,
                                         int64_t nt0, int lane, int groups,
                                         float (&acc)[2][2][G][4], int rows = 0) {
#pragma unroll
  for (int kk = 0; kk < kChunkTiles; ++kk) {
    uint4 p[G], q[G];
    if constexpr (Resident) {
      const int row = lane >> 2;
      const uint4 u = row < rows ? a[(kk * kExl3MoeResidentRows + row) * 4 + (lane & 3)]
                                 : uint4{0u, 0u, 0u, 0u};
      p[0] = uint4{u.x, 0u, u.y, 0u};
      q[0] = uint4{u.z, 0u, u.w, 0u};
    } else {
      loadFragments<G>(a, kk, lane, groups, p, q);
    }
#pragma unroll
    for (int t = 0; t < 2; ++t) {
      uint32_t weights[8];
      if constexpr (Fast) {
        tiles.decode(words + (2 * kk + t) * 8 * K, weights);
      } else {
        const Weights8 any =
            decodeAny(matrix.tile(kTile0 + kk, nt0 + t), matrix.bits, matrix.codebook, lane);
#pragma unroll
        for (int i = 0; i < 8; ++i) {
          weights[i] = any.w[i];
        }
      }
      mmaTile<G>(acc[t], p, q, weights, groups);
    }
  }
}

/// The block's work item, from the step's routing.
struct Item {
  int expert; // local index; -1: no work
  int rows;   // slots of the expert (rows of the mma), in slot order in `slots`
};

/// The u-th distinct local expert the step selects (increasing id) and its slots. Ends with the
/// block synchronised.
template <int G>
__device__ __forceinline__ Item findItem(const Exl3MoeGpuArgs &a, int u, uint32_t *bitmap,
                                         int32_t *slots, int *shared) {
  const int lane = threadIdx.x & 31;
  const int64_t slotCount = a.tokens * a.topK;
  const int words = static_cast<int>((a.experts + 31) / 32);
  for (int i = threadIdx.x; i < words; i += blockDim.x) {
    bitmap[i] = 0;
  }
  __syncthreads();
  for (int64_t s = threadIdx.x; s < slotCount; s += blockDim.x) {
    const int64_t e = static_cast<int64_t>(a.expertIds[s]) - a.firstExpert;
    if (e >= 0 && e < a.experts) {
      atomicOr(&bitmap[e >> 5], 1u << (e & 31));
    }
  }
  __syncthreads();
  if (threadIdx.x < 32) {
    int found = -1, remaining = u;
    for (int base = 0; base < words && found < 0; base += 32) {
      const uint32_t bits = base + lane < words ? bitmap[base + lane] : 0u;
      const int count = __popc(bits);
      int inclusive = count;
#pragma unroll
      for (int o = 1; o < 32; o <<= 1) {
        const int v = __shfl_up_sync(0xFFFFFFFFu, inclusive, o);
        inclusive += lane >= o ? v : 0;
      }
      const int total = __shfl_sync(0xFFFFFFFFu, inclusive, 31);
      if (remaining < total) {
        const bool mine = inclusive > remaining && inclusive - count <= remaining;
        const int holder = __ffs(__ballot_sync(0xFFFFFFFFu, mine)) - 1;
        int e = 0;
        if (lane == holder) {
          uint32_t rest = bits;
          for (int r = remaining - (inclusive - count); r > 0; --r) {
            rest &= rest - 1; // drop the lowest set bit
          }
          e = (base + lane) * 32 + __ffs(rest) - 1;
        }
        found = __shfl_sync(0xFFFFFFFFu, e, holder);
      } else {
        remaining -= total;
      }
    }
    int rows = 0;
    if (found >= 0) {
      for (int64_t base = 0; base < slotCount; base += 32) {
        const int64_t s = base + lane;
        const bool match =
            s < slotCount && static_cast<int64_t>(a.expertIds[s]) - a.firstExpert == found;
        const unsigned ballot = __ballot_sync(0xFFFFFFFFu, match);
        const int at = rows + __popc(ballot & ((1u << lane) - 1u));
        if (match && at < 16 * G) {
          slots[at] = static_cast<int32_t>(s);
        }
        rows += __popc(ballot);
      }
    }
    if (lane == 0) {
      shared[0] = found;
      shared[1] = rows < 16 * G ? rows : 16 * G;
    }
  }
  __syncthreads();
  return Item{shared[0], shared[1]};
}

/// Gate and up of one item on one block: the staging of x and suh, the A operand, and the
/// decode-and-multiply loop over the block's chunks [c0, c1) of hidden, warp w owning the tile
/// columns 2w, 2w + 1 of gate's 128 columns of block j (w < 4) or 2(w - 4), 2(w - 4) + 1 of up's.
/// Two forms of the loop: chunked (run: A of the next chunk built during this one, a block
/// barrier per chunk) and resident (runResident: every chunk's A built first, then each warp
/// streams its tiles alone).
template <int K, int CB, int G> struct GateUp {
  static constexpr int kMatrixFragments = kChunkTiles * G * 2 * 32; // uint4 per chunk and matrix
  static constexpr int kStageFragments = 2 * kMatrixFragments;
  static constexpr int kStagingBytes = G * 4096 + 512;
  // Resident staging: x [kExl3MoeResidentRows][kResidentFeatures], then suh of gate and of up.
  static constexpr int kResidentFeatures = kExl3MoeResidentChunks * kExl3MoeChunk;
  static constexpr int kResidentXBytes = kExl3MoeResidentRows * kResidentFeatures * 2;

  // Fields, not a reference to the kernel's argument: that would copy it to local memory.
  const Bf16 *x;
  int64_t hidden, topK;
  const int32_t *slots; // the rows' slots (shared memory)
  uint4 *aRegion;       // [stage 2][gate, up][kChunkTiles][G][P, Q][32] (fragmentIndex)
  uint8_t *staging;     // [slot 2]{x [16G][128] bf16, suh of gate, up [128] f16}
  uint32_t *ring;       // this warp's kRingSlots slots of kRingSlotWords<K> words
  Matrix gate, up;
  int rows, groups, j, c0, c1, warp, lane;
  bool xAligned;

  __device__ __forceinline__ uint16_t *stagedX(int slot) const {
    return reinterpret_cast<uint16_t *>(staging + slot * kStagingBytes);
  }
  __device__ __forceinline__ uint16_t *stagedSuh(int slot, int m) const {
    return reinterpret_cast<uint16_t *>(staging + slot * kStagingBytes + G * 4096 + m * 256);
  }
  __device__ __forceinline__ uint16_t *residentX(int row) const {
    return reinterpret_cast<uint16_t *>(staging) + row * kResidentFeatures;
  }
  __device__ __forceinline__ uint16_t *residentSuh(int m) const {
    return reinterpret_cast<uint16_t *>(staging + kResidentXBytes) + m * kResidentFeatures;
  }

  /// Eight features k0.. of a staged row of x (cp.async when 16-byte aligned; zeros past hidden).
  __device__ __forceinline__ void stageX(int row, int64_t k0, uint16_t *dst) const {
    const Bf16 *src = x + (slots[row] / topK) * hidden + k0;
    if (xAligned) {
      const int64_t valid = hidden - k0;
      const uint32_t bytes = valid >= 8 ? 16u : valid > 0 ? static_cast<uint32_t>(2 * valid) : 0u;
      cpAsync16(sharedAddress(dst), bytes > 0 ? src : x, bytes);
    } else {
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        dst[e] = k0 + e < hidden ? src[e].bits : 0;
      }
    }
  }

  /// x ∘ suh of one staged row's 128 features (lane l holds l + 32i), rotated by H128.
  __device__ __forceinline__ void rotate(const uint16_t *stagedRow, const uint16_t *suh,
                                         float (&v)[4]) const {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int k = lane + 32 * i;
      v[i] = __uint_as_float(static_cast<uint32_t>(stagedRow[k]) << 16) * exl3HalfToFloat(suh[k]);
    }
    exl3Butterfly128(v);
  }

  /// Chunk c's x rows and suh into staging slot (c - c0) & 1: cp.async when 16-byte aligned.
  __device__ __forceinline__ void stage(int c) const {
    const int slot = (c - c0) & 1;
    const int units = rows * 16 + 32;
    for (int i = threadIdx.x; i < units; i += kExl3MoeThreads) {
      const int q = i & 15;
      const int64_t k0 = static_cast<int64_t>(c) * kExl3MoeChunk + 8 * q;
      if (i < rows * 16) {
        const int row = i >> 4;
        stageX(row, k0, stagedX(slot) + row * 128 + 8 * q);
      } else {
        const int m = (i - rows * 16) >> 4;
        cpAsync16(sharedAddress(stagedSuh(slot, m) + 8 * q), (m ? up.suh : gate.suh) + k0, 16);
      }
    }
    cpAsyncCommit();
  }

  /// A of chunk c (one warp per token and matrix): x ∘ suh, H, fp16, into stage (c - c0) & 1.
  __device__ __forceinline__ void produce(int c) const {
    const int slot = (c - c0) & 1;
    for (int task = warp; task < 2 * rows; task += kWarps) {
      const int row = task >> 1, m = task & 1;
      float v[4];
      rotate(stagedX(slot) + row * 128, stagedSuh(slot, m), v);
      uint4 *region = aRegion + slot * kStageFragments + m * kMatrixFragments;
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        storeActivation(region, G, row, lane + 32 * i, v[i] * kHadamardScale);
      }
    }
  }

  /// Resident: x rows and both suh over all of the block's chunks, one cp.async group.
  __device__ __forceinline__ void stageAll() const {
    const int perRow = (c1 - c0) * (kExl3MoeChunk / 8); // 16-byte units
    for (int i = threadIdx.x; i < (rows + 2) * perRow; i += kExl3MoeThreads) {
      const int r = i / perRow, q = i % perRow;
      const int64_t k0 = static_cast<int64_t>(c0) * kExl3MoeChunk + 8 * q;
      if (r < rows) {
        stageX(r, k0, residentX(r) + 8 * q);
      } else {
        const int m = r - rows;
        cpAsync16(sharedAddress(residentSuh(m) + 8 * q), (m ? up.suh : gate.suh) + k0, 16);
      }
    }
    cpAsyncCommit();
  }

  /// Resident: A of every chunk (one warp per chunk, row and matrix).
  __device__ __forceinline__ void produceAll() const {
    for (int task = warp; task < 2 * rows * (c1 - c0); task += kWarps) {
      const int chunk = task / (2 * rows), row = (task % (2 * rows)) >> 1, m = task & 1;
      float v[4];
      rotate(residentX(row) + chunk * kExl3MoeChunk, residentSuh(m) + chunk * kExl3MoeChunk, v);
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        storeResident(aRegion, m, row, chunk * kExl3MoeChunk + lane + 32 * i,
                      v[i] * kHadamardScale);
      }
    }
  }

  /// The warp's matrix (gate or up) and its first tile column.
  __device__ __forceinline__ Matrix warpMatrix() const { return warp >> 2 ? up : gate; }
  __device__ __forceinline__ int64_t warpColumn() const {
    return 8 * static_cast<int64_t>(j) + 2 * (warp & 3);
  }

  /// Chunk c's tiles of the warp's two columns of w (fast path: K bits a weight) into ring slot
  /// `slot`, one cp.async group's worth (the caller commits).
  __device__ __forceinline__ void fetch(const Matrix &w, int slot, int c) const {
    const uint32_t *first =
        w.trellis + (static_cast<int64_t>(c) * kChunkTiles * w.tilesN + warpColumn()) * 8 * K;
    copyTiles<K>(ring + slot * kRingSlotWords<K>, first, w.tilesN * 8 * K, lane);
  }

  /// The resident loop: A built once, then each warp streams its tiles through its ring,
  /// kRingSlots - 1 chunks ahead, with no block barrier until the end (the caller reuses the A
  /// region).
  template <bool Fast> __device__ __forceinline__ void runResident(float (&acc)[2][2][G][4]) const {
    constexpr int kAhead = kRingSlots - 1;
    const Matrix w = warpMatrix();
    const FastTiles<K, CB> tiles(lane);
#pragma unroll
    for (int i = 0; i < kAhead; ++i) {
      if (Fast && c0 + i < c1) {
        fetch(w, i, c0 + i);
      }
      cpAsyncCommit();
    }
    stageAll();
    cpAsyncWait<0>();
    blockSync();
    produceAll();
    blockSync();
    int slot = 0; // ring slot of chunk c
    for (int c = c0; c < c1; ++c) {
      if (Fast && c + kAhead < c1) {
        fetch(w, slot + kAhead < kRingSlots ? slot + kAhead : slot + kAhead - kRingSlots,
              c + kAhead);
      }
      cpAsyncCommit();
      mmaChunk<K, CB, G, Fast, true>(
          tiles, ring + slot * kRingSlotWords<K>,
          aRegion + residentIndex(warp >> 2, (c - c0) * kChunkTiles, 0, 0), w,
          static_cast<int64_t>(c) * kChunkTiles, warpColumn(), lane, 1, acc, rows);
      cpAsyncWait<kAhead - 1>(); // this lane's tiles of chunk c + 1
      __syncwarp();              // and the warp's
      slot = slot + 1 < kRingSlots ? slot + 1 : 0;
    }
    blockSync();
  }

  /// The loop, with the fast decoder (the warp's matrix has the kernel's K and codebook: its
  /// tiles stream through the warp's ring) or the generic one. cp.async groups per chunk: x and
  /// suh of chunk c + 2, then the tiles of chunk c + 2 (empty on the generic path), so that
  /// waiting for all but the newest group leaves only the tiles in flight. The block barriers are
  /// blockSync: gate's and up's warps may run different instances.
  template <bool Fast> __device__ __forceinline__ void run(float (&acc)[2][2][G][4]) const {
    const int m = warp >> 2;
    const Matrix w = warpMatrix();
    const FastTiles<K, CB> tiles(lane);
    constexpr int kSlotWords = kRingSlotWords<K>;
    if (c0 < c1) {
      if constexpr (Fast) {
        fetch(w, 0, c0);
      }
      cpAsyncCommit();
      if constexpr (Fast) {
        if (c0 + 1 < c1) {
          fetch(w, 1, c0 + 1);
        }
      }
      cpAsyncCommit();
      stage(c0);
      if (c0 + 1 < c1) {
        stage(c0 + 1);
      }
      cpAsyncWait<0>();
      blockSync();
      produce(c0);
      blockSync();
    }
    int slot = 0; // ring slot of chunk c
    for (int c = c0; c < c1; ++c) {
      if (c + 2 < c1) {
        stage(c + 2); // commits its own group
        if constexpr (Fast) {
          fetch(w, slot == 0 ? 2 : slot - 1, c + 2);
        }
      }
      cpAsyncCommit();
      if (c + 1 < c1) {
        produce(c + 1);
      }
      const uint4 *region = aRegion + ((c - c0) & 1) * kStageFragments + m * kMatrixFragments;
      mmaChunk<K, CB, G, Fast>(tiles, ring + slot * kSlotWords, region, w,
                               static_cast<int64_t>(c) * kChunkTiles, warpColumn(), lane, groups,
                               acc);
      // All but the newest group: x and suh of c + 2 and the tiles of c + 1 have landed.
      cpAsyncWait<1>();
      blockSync();
      slot = slot == 2 ? 0 : slot + 1;
    }
  }
};

/// Down of one item on one block: the tile-column pairs [p0, p1) of the 8 k-tiles of block j,
/// pair p0 + w + 8i by warp w, each pair's f32 sums to `partial`. Fast: the pairs' tiles stream
/// through the warp's ring, the first two fetched (fetchFirst) before the gate/up epilogue.
template <int K, int CB, int G> struct Down {
  float *partial;
  int64_t blocksJ;
  const int32_t *slots;
  const uint4 *downA; // [kChunkTiles][G][P, Q][32]
  uint32_t *ring;
  Matrix down;
  int rows, groups, j, warp, lane;
  int64_t p0, p1;

  __device__ __forceinline__ const uint32_t *pairWords(int64_t pr) const {
    return down.trellis + (8 * static_cast<int64_t>(j) * down.tilesN + 2 * pr) * 8 * K;
  }

  /// Two cp.async groups: the warp's first and second pairs (empty where there is none).
  __device__ __forceinline__ void fetchFirst() const {
    const int64_t rowWords = down.tilesN * 8 * K;
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      if (p0 + warp + i * kWarps < p1) {
        copyTiles<K>(ring + i * kRingSlotWords<K>, pairWords(p0 + warp + i * kWarps), rowWords,
                     lane);
      }
      cpAsyncCommit();
    }
  }

  template <bool Fast> __device__ __forceinline__ void run() const {
    const FastTiles<K, CB> tiles(lane);
    constexpr int kSlotWords = kRingSlotWords<K>;
    const int64_t rowWords = down.tilesN * 8 * K;
    const int64_t partialRow = down.tilesN * 16;
    int slot = 0;
    for (int64_t pr = p0 + warp; pr < p1; pr += kWarps) {
      if constexpr (Fast) {
        cpAsyncWait<1>(); // this pair's tiles (the next pair's may still be in flight)
        __syncwarp();
        const int64_t ahead = pr + 2 * kWarps;
        if (ahead < p1) {
          copyTiles<K>(ring + (slot == 0 ? 2 : slot - 1) * kSlotWords, pairWords(ahead), rowWords,
                       lane);
        }
        cpAsyncCommit();
      }
      float acc[2][2][G][4];
      zeroAccumulators<G>(acc);
      mmaChunk<K, CB, G, Fast>(tiles, ring + slot * kSlotWords, downA, down,
                               8 * static_cast<int64_t>(j), 2 * pr, lane, groups, acc);
#pragma unroll
      for (int t = 0; t < 2; ++t) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
#pragma unroll
          for (int g = 0; g < G; ++g) {
            const int64_t col = 16 * (2 * pr + t) + 8 * h + 2 * (lane & 3);
#pragma unroll
            for (int r8 = 0; r8 < 2; ++r8) {
              const int row = 16 * g + (lane >> 2) + 8 * r8;
              if (row < rows) {
                float *at = partial + (slots[row] * blocksJ + j) * partialRow + col;
                *reinterpret_cast<float2 *>(at) =
                    float2{acc[t][h][g][2 * r8], acc[t][h][g][2 * r8 + 1]};
              }
            }
          }
        }
      }
      slot = slot == 2 ? 0 : slot + 1;
    }
  }
};

} // namespace exl3_moe_detail

/// One (expert, 128-block of inter) item per cluster of kExl3MoeCluster blocks: gate/up split over
/// hidden, SwiGLU, down split over its outputs; f32 partials to `partial`.
template <int K, int CB, int G>
__global__ void __cluster_dims__(kExl3MoeCluster, 1, 1)
    __launch_bounds__(kExl3MoeThreads, G <= 2 ? 2 : 1) exl3MoeKernel(const Exl3MoeGpuArgs a) {
  using namespace exl3_moe_detail;
  static_assert(kWarps == kPairs, "a warp per pair of gate/up tile columns");
  constexpr int kCluster = kExl3MoeCluster;
  extern __shared__ __align__(16) uint8_t smem[];
  __shared__ uint32_t bitmap[kExl3MoeMaxExperts / 32];
  __shared__ int32_t slots[16 * G];
  __shared__ int itemShared[2];

  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const unsigned rank = clusterRank();
  const int64_t blocksJ = a.gate.n / 128;
  const int64_t itemIndex = blockIdx.x / kCluster;
  const int j = static_cast<int>(itemIndex % blocksJ);
  const Item item =
      findItem<G>(a, static_cast<int>(itemIndex / blocksJ), bitmap, slots, itemShared);
  if (item.expert < 0) {
    return; // every block of the cluster: the same item
  }
  const int rows = item.rows, groups = (rows + 15) / 16;
  // Shared memory: A of two chunks (then the cluster reduction, h and down's A), then the staging
  // of two chunks of x and suh.
  uint4 *aRegion = reinterpret_cast<uint4 *>(smem);
  const Matrix gateMatrix = matrixOf(a.gate, item.expert), upMatrix = matrixOf(a.up, item.expert);
  const Matrix down = matrixOf(a.down, item.expert);

  // --- gate/up over this block's share of hidden's 128-chunks -------------------------------
  const int chunks = static_cast<int>(a.gate.k / kExl3MoeChunk);
  // This warp's ring of trellis tiles, after the A and staging regions.
  uint32_t *ring = reinterpret_cast<uint32_t *>(smem + exl3MoeSharedBytes(G, 0)) +
                   warp * kRingSlots * kRingSlotWords<K>;
  const GateUp<K, CB, G> gateUp{a.x,
                                a.hidden,
                                a.topK,
                                slots,
                                aRegion,
                                smem + G * 32768,
                                ring,
                                gateMatrix,
                                upMatrix,
                                rows,
                                groups,
                                j,
                                static_cast<int>(rank) * chunks / kCluster,
                                static_cast<int>(rank + 1) * chunks / kCluster,
                                warp,
                                lane,
                                a.hidden % 8 == 0 && (reinterpret_cast<uint64_t>(a.x) & 15u) == 0};
  const Matrix mine = gateUp.warpMatrix();
  float acc[2][2][G][4]; // [tile][8-column half][group]
  zeroAccumulators<G>(acc);
  const bool fast = mine.bits == K && mine.codebook == CB;
  if (rows <= a.residentRows && rows <= kExl3MoeResidentRows &&
      gateUp.c1 - gateUp.c0 <= kExl3MoeResidentChunks) {
    if (fast) {
      gateUp.template runResident<true>(acc);
    } else {
      gateUp.template runResident<false>(acc);
    }
  } else if (fast) {
    gateUp.template run<true>(acc);
  } else {
    gateUp.template run<false>(acc);
  }

  // --- the cluster's sum, SwiGLU and down's A operand ------------------------------------------
  // Down's tiles for this warp's first two pairs, fetched now so that they arrive during the
  // reduction.
  const bool downFast = down.bits == K && down.codebook == CB;
  const int64_t pairsDown = a.down.n / 32; // pairs of tile columns
  const Down<K, CB, G> downPhase{a.partial,
                                 blocksJ,
                                 slots,
                                 aRegion + G * 1024,
                                 ring,
                                 down,
                                 rows,
                                 groups,
                                 j,
                                 warp,
                                 lane,
                                 rank * pairsDown / kCluster,
                                 (rank + 1) * pairsDown / kCluster};
  if (downFast) {
    downPhase.fetchFirst();
  }

  // Each warp's gate/up partial sums into red[row][256] (the A stages are free).
  float *red = reinterpret_cast<float *>(smem);
  const int matrixIndex = warp >> 2;
#pragma unroll
  for (int t = 0; t < 2; ++t) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
#pragma unroll
      for (int g = 0; g < G; ++g) {
        const int row = 16 * g + (lane >> 2);
        const int col = matrixIndex * 128 + 16 * (2 * (warp & 3) + t) + 8 * h + 2 * (lane & 3);
        float *at = red + row * 256 + col;
        at[0] = acc[t][h][g][0];
        at[1] = acc[t][h][g][1];
        at[8 * 256] = acc[t][h][g][2];
        at[8 * 256 + 1] = acc[t][h][g][3];
      }
    }
  }
  clusterSync();
  // z = the cluster's partial sums in rank order, the same sum in every block.
  constexpr int kZPerThread = 16 * G * 256 / kExl3MoeThreads;
  float z[kZPerThread];
#pragma unroll
  for (int i = 0; i < kZPerThread; ++i) {
    const int index = threadIdx.x + i * kExl3MoeThreads;
    z[i] = 0.0f;
    if (index < rows * 256) {
      const uint32_t address = sharedAddress(red + index);
#pragma unroll
      for (int r = 0; r < kCluster; ++r) {
        z[i] += loadClusterShared(address, static_cast<unsigned>(r));
      }
    }
  }
  clusterSync();   // every block has read the others' sums
  float *zs = red; // [rows][256]: gate columns, then up's
#pragma unroll
  for (int i = 0; i < kZPerThread; ++i) {
    const int index = threadIdx.x + i * kExl3MoeThreads;
    if (index < rows * 256) {
      zs[index] = z[i];
    }
  }
  __syncthreads();
  // Output side of gate and up: H, then ∘ svh.
  for (int task = warp; task < 2 * rows; task += kWarps) {
    const int row = task >> 1, m = task & 1;
    const uint16_t *svh = (m ? upMatrix.svh : gateMatrix.svh) + 128 * static_cast<int64_t>(j);
    float v[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      v[i] = zs[row * 256 + m * 128 + lane + 32 * i];
    }
    exl3Butterfly128(v);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      zs[row * 256 + m * 128 + lane + 32 * i] =
          v[i] * kHadamardScale * exl3HalfToFloat(svh[lane + 32 * i]);
    }
  }
  __syncthreads();
  // h = silu(min(g, limit)) · clamp(u, ±limit), 0 past inter, then ∘ suh of down. Comparisons
  // rather than fminf/fmaxf so that a NaN passes the clamps as torch.clamp's does.
  const float limit = a.limit;
  for (int index = threadIdx.x; index < rows * 128; index += kExl3MoeThreads) {
    const int row = index >> 7, col = index & 127;
    const int64_t feature = 128 * static_cast<int64_t>(j) + col;
    const float g = zs[row * 256 + col], u = zs[row * 256 + 128 + col];
    const float x = g > limit ? limit : g;
    const float y = u > limit ? limit : (u < -limit ? -limit : u);
    const float h = feature < a.inter ? x / (1.0f + expf(-x)) * y : 0.0f;
    zs[row * 256 + col] = h * halfAt(down.suh, feature);
  }
  __syncthreads();
  // Input side of down: H of this block's 128 rows, fp16, into down's A region (after z).
  uint4 *downA = aRegion + G * 1024;
  for (int row = warp; row < rows; row += kWarps) {
    float v[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      v[i] = zs[row * 256 + lane + 32 * i];
    }
    exl3Butterfly128(v);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      storeActivation(downA, G, row, lane + 32 * i, v[i] * kHadamardScale);
    }
  }
  __syncthreads();

  // --- down: this block's share of the output tile-column pairs, the 8 k-tiles of block j -----
  if (downFast) {
    downPhase.template run<true>();
  } else {
    downPhase.template run<false>();
  }
}

/// out[t] = Σ_k w[t][k] · (H(Σ_j partial[slot][j]) ∘ svh_down[e]) over the token's local slots in k
/// order, rounded once to bf16. Grid (tokens, 128-column blocks of hidden).
__global__ void __launch_bounds__(kExl3MoeCombineThreads)
    exl3MoeCombineKernel(const Exl3MoeGpuArgs a) {
  using namespace exl3_moe_detail;
  __shared__ float slotSums[kExl3MoeMaxTopK][128];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int64_t t = blockIdx.x, column0 = 128 * static_cast<int64_t>(blockIdx.y);
  const int64_t blocksJ = a.down.k / 128, partialRow = a.down.n;
  for (int k = warp; k < a.topK; k += kExl3MoeCombineThreads / 32) {
    const int64_t slot = t * a.topK + k;
    const int64_t e = static_cast<int64_t>(a.expertIds[slot]) - a.firstExpert;
    float v[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    if (e >= 0 && e < a.experts) {
      const float *p = a.partial + slot * blocksJ * partialRow + column0;
      for (int64_t jj = 0; jj < blocksJ; ++jj) {
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          v[i] += p[jj * partialRow + lane + 32 * i];
        }
      }
      exl3Butterfly128(v);
      const uint16_t *svh = reinterpret_cast<const uint16_t *>(a.down.slice + a.down.svhOffset) +
                            e * a.down.n + column0;
      const float w = toFloat(a.expertWeights[slot]);
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        v[i] = v[i] * kHadamardScale * exl3HalfToFloat(svh[lane + 32 * i]) * w;
      }
    }
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      slotSums[k][lane + 32 * i] = v[i];
    }
  }
  __syncthreads();
  if (threadIdx.x < 128) {
    float sum = 0.0f;
    for (int k = 0; k < a.topK; ++k) {
      sum += slotSums[k][threadIdx.x];
    }
    const int64_t col = column0 + threadIdx.x;
    if (col < a.hidden) {
      a.out[t * a.hidden + col] = fromFloat<Bf16>(sum);
    }
  }
}

} // namespace glm::kernels
