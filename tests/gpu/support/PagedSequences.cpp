// What the paged-state GPU tests share (PagedSequences.h).
#include "tests/gpu/support/PagedSequences.h"

#include "tests/gpu/support/GpuTest.h"

#include <algorithm>
#include <numeric>

namespace glm::testing {

Status StepRows::upload() {
  GLM_ASSIGN_OR_RETURN(dPositions, toDevice(positions));
  GLM_ASSIGN_OR_RETURN(dSlots, toDevice(slots));
  GLM_ASSIGN_OR_RETURN(dTable, toDevice(table));
  return Status::success();
}

kernels::StepContext StepRows::context() const {
  return {reinterpret_cast<const int32_t *>(dPositions.ptr()),
          reinterpret_cast<const int32_t *>(dSlots.ptr()),
          reinterpret_cast<const int32_t *>(dTable.ptr()), static_cast<int32_t>(rowsPerSeq),
          static_cast<int32_t>(maxPages)};
}

PagedSequences::PagedSequences(int maxSeqs, int64_t maxContext, int64_t pageTokens,
                               int64_t unitsPerPage, int64_t unitBytes, int64_t gapBytes,
                               uint64_t shuffleSeed)
    : maxSeqs_(maxSeqs), maxPages_((maxContext + pageTokens - 1) / pageTokens) {
  const int64_t layerBytes = unitsPerPage * unitBytes;
  layout_ = {.poolBase = nullptr,
             .pageBytes = 3 * layerBytes + 2 * gapBytes,
             .offsetInPage = layerBytes + gapBytes,
             .unitBytes = unitBytes,
             .unitsPerPage = static_cast<int32_t>(unitsPerPage)};
  pageTable_.resize(static_cast<size_t>(maxSeqs * maxPages_));
  std::iota(pageTable_.begin(), pageTable_.end(), 0);
  SplitMix64 rng(shuffleSeed);
  for (size_t i = pageTable_.size(); i > 1; --i) {
    std::swap(pageTable_[i - 1], pageTable_[rng.below(i)]);
  }
}

Status PagedSequences::allocate() {
  GLM_ASSIGN_OR_RETURN(pool_,
                       poisoned(static_cast<size_t>(maxSeqs_ * maxPages_ * layout_.pageBytes)));
  return Status::success();
}

kernels::PagedState PagedSequences::state() const {
  kernels::PagedState s = layout_;
  s.poolBase = reinterpret_cast<uint8_t *>(pool_.ptr());
  return s;
}

Expected<std::vector<uint8_t>> PagedSequences::download() const {
  return fromDevice<uint8_t>(pool_, pool_.bytes());
}

int64_t PagedSequences::rowOffset(int slot, int64_t unit) const {
  const int64_t page =
      pageTable_[static_cast<size_t>(slot * maxPages_ + unit / layout_.unitsPerPage)];
  return page * layout_.pageBytes + layout_.offsetInPage +
         (unit % layout_.unitsPerPage) * layout_.unitBytes;
}

StepRows PagedSequences::layOut(
    const std::vector<PagedSeq> &seqs, int64_t rowsPerSeq,
    const std::function<int64_t(int slot)> &lengthOf, uint64_t paddingSeed,
    const std::function<void(int64_t r, int64_t position, SplitMix64 &rng)> &row) const {
  const int64_t B = static_cast<int64_t>(seqs.size()), R = rowsPerSeq;
  StepRows out;
  out.rowsPerSeq = R;
  out.maxPages = maxPages_;
  out.positions.assign(static_cast<size_t>(B * R), -1);
  out.slots.resize(static_cast<size_t>(B));
  out.table.assign(static_cast<size_t>(B * maxPages_), 0);
  for (int64_t b = 0; b < B; ++b) {
    const PagedSeq &s = seqs[static_cast<size_t>(b)];
    out.slots[static_cast<size_t>(b)] = s.real > 0 ? s.slot : -1;
    if (s.real > 0) {
      std::copy_n(pageTable_.begin() + s.slot * maxPages_, maxPages_,
                  out.table.begin() + b * maxPages_);
    }
    for (int64_t i = 0; i < R; ++i) {
      const int64_t r = b * R + i;
      const int64_t pos = i < s.real ? lengthOf(s.slot) + i : -1;
      out.positions[static_cast<size_t>(r)] = static_cast<int32_t>(pos);
      SplitMix64 rng(pos >= 0 ? s.stream * 0x9E3779B97F4A7C15ull + static_cast<uint64_t>(pos)
                              : paddingSeed + static_cast<uint64_t>(r));
      row(r, pos, rng);
    }
  }
  return out;
}

void PagedSequences::expectOnlyRowsWritten(const std::vector<uint8_t> &poolBytes,
                                           const std::function<int64_t(int slot)> &unitsOf) const {
  std::vector<char> owned(poolBytes.size(), 0);
  for (int slot = 0; slot < maxSeqs_; ++slot) {
    for (int64_t j = 0; j < unitsOf(slot); ++j) {
      const int64_t at = rowOffset(slot, j);
      std::fill(owned.begin() + at, owned.begin() + at + layout_.unitBytes, 1);
    }
  }
  for (size_t i = 0; i < poolBytes.size(); ++i) {
    if (!owned[i]) {
      ASSERT_EQ(poolBytes[i], 0xFF) << "pool byte " << i << " was written";
    }
  }
}

} // namespace glm::testing
