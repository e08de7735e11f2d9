// The CPU backend: runs a plan's programs step by step with the reference kernels. It is the
// numerical oracle the GPU kernels are checked against, so it favours clarity over speed.
#pragma once

#include "kernels/common/TopK.h"
#include "runtime/comm/Comm.h"
#include "runtime/common/Status.h"
#include "runtime/plan/PlanFile.h"
#include "runtime/weights/SafeTensors.h"

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <vector>

namespace glm::runtime {

struct CpuEngineOptions {
  /// How top-k ties are broken (indexer pools, experts). LowerIndex is the serving contract;
  /// TorchCpu reproduces the HF reference run the goldens come from.
  kernels::TopkTieRule tieRule = kernels::TopkTieRule::LowerIndex;
  /// Tensor dumps for debugging against a reference: comma-separated globs over step names
  /// (`blk.3.attn.*,head.*`). After each program run, the outputs of matching steps are written
  /// under their IR names to `<dumpDir>/<run>.<program>.safetensors` (run counts from 0).
  std::string dumpPattern;
  std::string dumpDir = ".";
  /// This rank's communicator, for plans compiled with --tp N > 1 (not owned; its rank decides
  /// which weight slices the engine loads). Every rank must make the same calls in the same order.
  Comm *comm = nullptr;
};

class CpuEngine {
public:
  /// Binds `checkpoint` to an f32 CPU plan (the engine owns the plan). A TP N plan needs
  /// options.comm, a communicator of world N.
  static Expected<std::unique_ptr<CpuEngine>> create(std::unique_ptr<PlanFile> plan,
                                                     const Checkpoint &checkpoint,
                                                     CpuEngineOptions options = {});
  ~CpuEngine();

  /// A free state slot for a new sequence, or Unavailable when all max_seqs are taken.
  Expected<int> newSequence();
  /// Frees a sequence's slot and state.
  void endSequence(int slot);
  /// Tokens a sequence holds.
  int64_t length(int slot) const;
  /// State-pool pages a sequence must still take to hold `more` further tokens (0 for a plan
  /// without a pool), and the pages free now: the scheduler admits and preempts by them.
  int64_t pagesNeeded(int slot, int64_t more) const;
  int64_t freePages() const { return static_cast<int64_t>(freePages_.size()); }

  /// Appends `tokens` to a sequence through the plan's prefill programs (in chunks of at most the
  /// largest prefill size) and returns every row's logits, [tokens, vocab].
  Expected<std::vector<float>> prefill(int slot, std::span<const int32_t> tokens);
  /// One decode step: token i goes to sequence slots[i]. Returns [slots, vocab] logits.
  Expected<std::vector<float>> decode(std::span<const int> slots, std::span<const int32_t> tokens);

  /// Tokens one prefill program takes (the largest); prefill() splits longer inputs at multiples
  /// of it. 0 when the plan has no prefill program.
  int64_t prefillChunk() const;

  int64_t vocabSize() const { return vocab_; }
  const plan::Plan &plan() const { return plan_->root(); }

  struct SequenceState;

private:
  CpuEngine() = default;

  /// Rows [first, first + count) of the step belong to sequence `slot`.
  struct RowGroup {
    int slot;
    int64_t first;
    int64_t count;
  };
  Expected<std::vector<float>> run(const plan::Program &program, std::span<const int32_t> tokens,
                                   const std::vector<RowGroup> &groups);
  Status runStep(const plan::Step &step, int64_t rows, const std::vector<RowGroup> &groups);

  uint8_t *address(const plan::Slice &slice);
  bool matchesDump(const std::string &name) const;
  /// Gives a sequence the pages its first `tokens` tokens need, from the pool's free list.
  Status reservePages(SequenceState &seq, int64_t tokens);
  /// Row `row` of a paged state of a sequence, `rowsPerPage` rows of it to a page.
  float *pagedRow(const plan::StateLayout &state, const SequenceState &seq, int64_t row,
                  int64_t rowsPerPage);
  float *floats(const plan::TensorRef &t) { return reinterpret_cast<float *>(address(*t.slice())); }

  std::unique_ptr<PlanFile> plan_;
  CpuEngineOptions options_;
  std::vector<std::vector<uint64_t>> arenas_;             // 8-byte aligned storage per arena
  std::vector<std::unique_ptr<SequenceState>> sequences_; // by slot; null when free
  int64_t vocab_ = 0;
  int64_t runs_ = 0;
  int rank_ = 0;
  const plan::Program *prefill_ = nullptr; // the largest prefill program, found once
  // The state pool: pages of pageTokens_ tokens for every paged state, handed out to sequences.
  int64_t pageTokens_ = 1;
  uint64_t pageBytes_ = 0;
  std::vector<int32_t> freePages_;
  std::map<uint32_t, uint32_t> tailOf_; // indexer state -> its open-pool tail slot
};

} // namespace glm::runtime
