// What a GPU kernel of a stateful op needs to know about the step it runs in: which sequence each
// row belongs to, where that sequence's state lives, and which rows are padding. The engine writes
// these into the program's io slots before each replay, so a program captured once as a CUDA graph
// serves any batch (DESIGN.md §2).
//
// Rows and sequences. A program has `batch` sequences of `rowsPerSequence` rows each (decode B x R,
// prefill 1 x C); row r belongs to sequence b = r / rowsPerSequence, and a sequence's rows are
// consecutive tokens. positions[r] is row r's absolute position in its sequence; a negative
// position marks a padding row (a prefill chunk shorter than C, a batch smaller than B): stateful
// kernels neither read it into nor write it to state, and whatever stateless kernels compute for
// it is never used. A sequence's length before the step is positions[b * rowsPerSequence] (its
// first row is never padding unless all its rows are).
//
// Per-sequence state (KDA recurrent state, conv windows, the indexer's open-pool tail) lives in
// slots: sequence b's slot is slots[b], at base + slots[b] * unitBytes.
//
// Paged state (MLA latents, pooled index keys) lives in pages of the shared pool: token (or pool)
// j of sequence b is in page pageTable[b * maxPages + j / unitsPerPage], at
//   poolBase + page * pageBytes + offsetInPage + (j % unitsPerPage) * unitBytes,
// where unitsPerPage = pageTokens for per-token rows and pageTokens / kpool for pooled keys. The
// engine gives a sequence every page its rows up to the end of the step need before the step.
#pragma once

#include "kernels/common/DeviceTypes.h"

namespace glm::kernels {

struct StepContext {
  const int32_t *positions; // [batch * rowsPerSequence]
  const int32_t *slots;     // [batch]
  const int32_t *pageTable; // [batch, maxPages]
  int32_t rowsPerSequence;
  int32_t maxPages;
};

/// A paged state layout: one per MLA latent cache or pooled-key cache of a layer.
struct PagedState {
  uint8_t *poolBase;    // the state pool
  int64_t pageBytes;    // bytes of one page (all layers' rows of pageTokens tokens)
  int64_t offsetInPage; // where this layout's rows start in a page
  int64_t unitBytes;    // one row
  int32_t unitsPerPage; // rows of this layout per page
};

/// A per-sequence slot layout.
struct SlotState {
  uint8_t *base;
  int64_t unitBytes;
};

#ifdef __CUDACC_RTC__
/// Row j of sequence b of a paged layout.
__device__ __forceinline__ uint8_t *pagedRow(const PagedState &s, const StepContext &ctx, int64_t b,
                                             int64_t j) {
  const int32_t page = ctx.pageTable[b * ctx.maxPages + j / s.unitsPerPage];
  return s.poolBase + page * s.pageBytes + s.offsetInPage + (j % s.unitsPerPage) * s.unitBytes;
}

/// Sequence b's slot, or null when b is a padding entry (slot < 0).
__device__ __forceinline__ uint8_t *slotOf(const SlotState &s, const StepContext &ctx, int64_t b) {
  const int32_t slot = ctx.slots[b];
  return slot < 0 ? nullptr : s.base + slot * s.unitBytes;
}
#endif

} // namespace glm::kernels
