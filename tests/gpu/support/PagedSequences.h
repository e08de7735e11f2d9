// What the GPU tests of the paged-state kernels (dsa_indexer, mla_sparse_attention) share: one
// layer's paged state for several sequences in a poisoned pool, and a step's rows as the kernels'
// StepContext sees them (kernels/common/StepContext.h).
#pragma once

#include "base/Random.h"
#include "kernels/common/StepContext.h"
#include "runtime/cuda/CudaContext.h"

#include <cstdint>
#include <functional>
#include <vector>

namespace glm::testing {

/// One sequence of a step: its state slot, the input stream its tokens come from (equal streams
/// give equal inputs at equal positions), and how many of its rows are real (0: a padding
/// sequence).
struct PagedSeq {
  int slot;
  uint64_t stream;
  int64_t real;
};

/// A step's rows: StepContext's arrays on the host and, after upload(), on the device.
struct StepRows {
  int64_t rowsPerSeq = 0, maxPages = 0;
  std::vector<int32_t> positions; // per row; -1 for a padding row
  std::vector<int32_t> slots;     // per sequence; -1 for a padding sequence
  std::vector<int32_t> table;     // [sequences, maxPages]: each sequence's pages (0 for padding)
  cuda::DeviceMemory dPositions, dSlots, dTable;

  Status upload();
  /// Over the uploaded arrays.
  kernels::StepContext context() const;
};

/// One layer's paged state for `maxSeqs` sequences of up to `maxContext` tokens, in pages of
/// `pageTokens` tokens. The pages are dealt to the slots in a shuffled order (from `shuffleSeed`),
/// so that neighbouring pages belong to different sequences. A page holds three layers' worth of
/// rows (`unitsPerPage` rows of `unitBytes` each) and two gaps of `gapBytes`; this layer's rows
/// start after one layer's rows and a gap, so that a write outside them lands on other layers'.
class PagedSequences {
public:
  PagedSequences() = default;
  PagedSequences(int maxSeqs, int64_t maxContext, int64_t pageTokens, int64_t unitsPerPage,
                 int64_t unitBytes, int64_t gapBytes, uint64_t shuffleSeed);

  /// Allocates the pool, poisoned (0xFF) so that bytes nothing may write can be checked.
  Status allocate();
  /// The layout over the device pool, as the kernels take it.
  kernels::PagedState state() const;
  /// The whole pool's bytes.
  Expected<std::vector<uint8_t>> download() const;

  int64_t maxPages() const { return maxPages_; }
  /// Where row `unit` (a token, or a pool of keys) of `slot`'s sequence starts in the pool.
  int64_t rowOffset(int slot, int64_t unit) const;

  /// Lays out a step of `seqs` with `rowsPerSeq` rows each: row i of a sequence is at position
  /// lengthOf(slot) + i while i < real, else padding. Calls `row(r, position, rng)` for every row
  /// r in order (position -1: padding), rng seeded by the sequence's stream and the position, so
  /// that equal streams give equal inputs at equal positions. Padding rows get inputs too, from
  /// `paddingSeed + r` (a stream nothing else uses): they must not matter.
  StepRows
  layOut(const std::vector<PagedSeq> &seqs, int64_t rowsPerSeq,
         const std::function<int64_t(int slot)> &lengthOf, uint64_t paddingSeed,
         const std::function<void(int64_t r, int64_t position, SplitMix64 &rng)> &row) const;

  /// Asserts that every byte of `poolBytes` outside the first unitsOf(slot) rows of each slot is
  /// still poison: padding rows and padding sequences wrote nothing, each sequence wrote only its
  /// own pages.
  void expectOnlyRowsWritten(const std::vector<uint8_t> &poolBytes,
                             const std::function<int64_t(int slot)> &unitsOf) const;

private:
  int maxSeqs_ = 0;
  int64_t maxPages_ = 0;
  kernels::PagedState layout_{};
  std::vector<int32_t> pageTable_;
  cuda::DeviceMemory pool_;
};

} // namespace glm::testing
