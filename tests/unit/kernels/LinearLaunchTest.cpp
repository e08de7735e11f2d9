// The decode-quant kernel's launch rule (kernels/linear/linear_gpu.h), checked without a GPU: what
// the compiler writes into every plan, for both targets.
#include "kernels/linear/linear_gpu.h"

#include <gtest/gtest.h>

namespace glm::kernels {
namespace {

// GLM-5.3-Flash's projections (out x in) at TP 1 and TP 2, as glm-kernel-bench times them, and
// tails the kernel must also take (in a multiple of 64 only, out ragged).
struct Product {
  int64_t out, in;
};
constexpr Product kProducts[] = {{4096, 4096}, {12288, 4096}, {4096, 8192}, {8192, 4096},
                                 {6144, 4096}, {4096, 6144},  {2048, 4096}, {1536, 4096},
                                 {1024, 4096}, {576, 4096},   {4096, 1024}, {77440, 4096},
                                 {72, 192},    {300, 320},    {1000, 4096}};

TEST(LinearLaunch, SlotsHoldTheUnitsCodesParametersAndActivations) {
  // Q4: 4 weight rows of 8 lanes x 64 bytes, their two groups' 4-byte parameters, 256 bytes of
  // activations a row; fp8: no parameters, 128 bytes a row; rows past 16 are the next block's.
  EXPECT_EQ(linearQuantSlotBytes(true, 2, 1), 2048 + 256 + 256);
  EXPECT_EQ(linearQuantSlotBytes(true, 2, 16), 2048 + 256 + 16 * 256);
  EXPECT_EQ(linearQuantSlotBytes(true, 2, 64), linearQuantSlotBytes(true, 2, 16));
  EXPECT_EQ(linearQuantSlotBytes(false, 2, 1), 2048 + 128);
  EXPECT_EQ(linearQuantSlotBytes(true, 2, 0), 2048 + 256); // the activations outside the ring
  EXPECT_EQ(linearQuantSlotBytes(true, 4, 1), 4096 + 512 + 256);
  for (int64_t rows = 1; rows <= 64; ++rows) {
    EXPECT_EQ(linearQuantSlotBytes(true, 2, rows) % 16, 0) << rows; // cp.async's 16-byte chunks
    EXPECT_GE(linearQuantSlotBytes(true, 2, rows), linearQuantSlotBytes(false, 2, rows)) << rows;
  }
}

// The two GPU targets as compiler/target/Target.cpp describes them: SMs, shared memory a block.
struct GpuTarget {
  int sms;
  int64_t sharedLimit;
};
constexpr GpuTarget kSm90a{132, 232448}, kSm121a{48, 101376};

TEST(LinearLaunch, RingsFitTheTargetAndEveryWarpHasTwoUnits) {
  for (const GpuTarget &target : {kSm90a, kSm121a}) {
    for (bool q4 : {true, false}) {
      for (int64_t rows : {1, 2, 3, 4, 5, 8, 9, 12, 16, 17, 33, 64}) {
        for (const Product &p : kProducts) {
          for (int mTiles : {2, 4}) {
            for (int split : {1, 2, 4, 8}) {
              const LaunchDims d = linearDecodeQuantLaunch(rows, p.in, p.out, target.sms,
                                                           {q4, target.sharedLimit}, mTiles, split);
              const unsigned warps = d.block[0] / 32;
              const std::string what = std::string(q4 ? "Q4 " : "fp8 ") + std::to_string(rows) +
                                       " x " + std::to_string(p.in) + " -> " +
                                       std::to_string(p.out) + ", " + std::to_string(target.sms) +
                                       " SMs, " + std::to_string(mTiles) + " tiles, split " +
                                       std::to_string(split);
              ASSERT_EQ(d.block[0] % 32, 0u) << what;
              EXPECT_GE(warps, 1u) << what;
              EXPECT_LE(warps, static_cast<unsigned>(kLinearQuantMaxWarps)) << what;
              // The rings the kernel strides by its format's slot size, with the activations
              // where they fit (the kernel tests the same sum), fit the launch and the target's
              // shared memory a block.
              const int64_t withX =
                  warps * kLinearQuantStages * linearQuantSlotBytes(q4, mTiles, rows);
              const int64_t codes =
                  warps * kLinearQuantStages * linearQuantSlotBytes(q4, mTiles, 0);
              EXPECT_EQ(d.sharedMemory, withX <= target.sharedLimit ? withX : codes) << what;
              EXPECT_LE(d.sharedMemory, target.sharedLimit) << what;
              // A row gets the same sums whatever rows share its launch: the warps, which split
              // K, are one row's.
              const LaunchDims one = linearDecodeQuantLaunch(
                  1, p.in, p.out, target.sms, {q4, target.sharedLimit}, mTiles, split);
              EXPECT_EQ(d.block[0], one.block[0]) << what;
              const int64_t blockUnits = ceilDiv(p.in, 128) / split;
              if (warps > 1) {
                EXPECT_LE(2 * static_cast<int64_t>(warps), blockUnits) << what;
              }
              EXPECT_EQ(d.grid[0], ceilDiv(rows, kLinearDecodeRows) * ceilDiv(p.out, 16 * mTiles) *
                                       static_cast<unsigned>(split))
                  << what;
            }
          }
        }
      }
    }
  }
}

TEST(LinearLaunch, WarpsFollowTheBlocksThatFitOneWave) {
  // H200 (132 SMs, 16 warps an SM): 4096 x 4096 is 128 blocks of 16 warps; q_b's 384 blocks
  // take 4 (8-warp blocks would make 1.5 waves); lm_head's 2420 blocks 4.
  EXPECT_EQ(linearDecodeQuantLaunch(1, 4096, 4096, 132).block[0], 16u * 32);
  EXPECT_EQ(linearDecodeQuantLaunch(1, 4096, 8192, 132).block[0], 8u * 32);
  EXPECT_EQ(linearDecodeQuantLaunch(1, 4096, 12288, 132).block[0], 4u * 32);
  EXPECT_EQ(linearDecodeQuantLaunch(1, 4096, 77440, 132).block[0], 4u * 32);
  // Rows never change the warps; they decide whether the activations ride the ring: under
  // sm_121a's 99 KB (the default) Q4's do at 1 row (80 KB) and not at 4 (106 KB: the codes' 72
  // KB alone), fp8's at 4 rows (80 KB) and not at 16 (128 KB); sm_90a's 227 KB holds 16 rows'.
  EXPECT_EQ(linearDecodeQuantLaunch(16, 4096, 4096, 132).block[0], 16u * 32);
  EXPECT_EQ(linearDecodeQuantLaunch(1, 4096, 4096, 132).sharedMemory,
            16 * 2 * linearQuantSlotBytes(true, 2, 1));
  EXPECT_EQ(linearDecodeQuantLaunch(4, 4096, 4096, 132).sharedMemory,
            16 * 2 * linearQuantSlotBytes(true, 2, 0));
  EXPECT_EQ(linearDecodeQuantLaunch(4, 4096, 4096, 132, {false, kSm121a.sharedLimit}).sharedMemory,
            16 * 2 * linearQuantSlotBytes(false, 2, 4));
  EXPECT_EQ(linearDecodeQuantLaunch(16, 4096, 4096, 132, {false, kSm121a.sharedLimit}).sharedMemory,
            16 * 2 * linearQuantSlotBytes(false, 2, 0));
  EXPECT_EQ(linearDecodeQuantLaunch(16, 4096, 4096, 132, {true, kSm90a.sharedLimit}).sharedMemory,
            16 * 2 * linearQuantSlotBytes(true, 2, 16));
  // A K of 4 units (in 512) gives each of 2 warps two of them.
  EXPECT_EQ(linearDecodeQuantLaunch(1, 512, 4096, 132).block[0], 2u * 32);
}

TEST(LinearLaunch, DeeperRingsHalveWarpsUntilTheyFit) {
  const LaunchDims two = linearDecodeQuantLaunch(1, 4096, 4096, 132);
  const LaunchDims six =
      linearDecodeQuantStagesLaunch(1, 4096, 4096, 132, 6, {true, kSm90a.sharedLimit});
  EXPECT_EQ(two.block[0], 16u * 32);
  EXPECT_EQ(six.block[0], 8u * 32); // 16 warps x 6 slots x 2.5 KB is over 227 KB
  EXPECT_EQ(six.sharedMemory, 8 * 6 * linearQuantSlotBytes(true, 2, 1));
}

} // namespace
} // namespace glm::kernels
