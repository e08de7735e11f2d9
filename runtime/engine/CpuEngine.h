// The CPU backend: runs a plan's programs step by step with the reference kernels. It is the
// numerical oracle the GPU kernels are checked against, so it favours clarity over speed.
#pragma once

#include "base/Status.h"
#include "kernels/common/TopK.h"
#include "runtime/comm/Comm.h"
#include "runtime/engine/Engine.h"
#include "runtime/plan/PlanFile.h"
#include "runtime/weights/PlanWeights.h"
#include "runtime/weights/SafeTensors.h"

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

namespace glm::runtime {

struct CpuEngineOptions {
  /// How top-k ties are broken (indexer pools, experts). LowerIndex is the serving contract;
  /// TorchCpu reproduces the HF reference run the goldens come from.
  kernels::TopkTieRule tieRule = kernels::TopkTieRule::LowerIndex;
  /// Tensor dumps for debugging against a reference: comma-separated globs over step and result
  /// names (`blk.3.attn.*,head.*`). After each program run, the outputs of matching steps and the
  /// matching outputs of others are written under their IR names to
  /// `<dumpDir>/<run>.<program>.safetensors` (run counts from 0).
  std::string dumpPattern;
  std::string dumpDir = ".";
  /// This rank's communicator, for plans compiled with --tp N > 1 (not owned; its rank decides
  /// which weight slices the engine loads). Every rank must make the same calls in the same order.
  Comm *comm = nullptr;
  /// Load-time weight transforms (the ablation) and progress.
  WeightLoadOptions weights;
};

class CpuEngine : public Engine {
public:
  /// Binds `checkpoint` to an f32 CPU plan (the engine owns the plan). A TP N plan needs
  /// options.comm, a communicator of world N.
  static Expected<std::unique_ptr<CpuEngine>> create(std::unique_ptr<PlanFile> plan,
                                                     const Checkpoint &checkpoint,
                                                     CpuEngineOptions options = {});
  ~CpuEngine() override;

  const plan::Plan &plan() const override { return plan_->root(); }

private:
  CpuEngine() = default;
  Status clearSlots(int slot) override;
  Status copyState(int from, int to) override;
  Status saveKept(int slot, int kept) override;
  Status loadKept(int kept, int slot) override;
  void freeKept(int kept) override;
  Status checkpointSlots(int slot) override;
  Status restoreSlots(int slot) override;
  /// Sequence `slot`'s per-sequence slots, in plan order, copied out (token counts made those of
  /// prompt tokens when asked: a kept state's) and back in.
  void slotsOut(int slot, std::vector<uint8_t> &copy, bool asPrompt);
  void slotsIn(const std::vector<uint8_t> &copy, int slot);
  Status copyPage(int32_t from, int32_t to) override;

  Expected<RunOutput> run(const plan::Program &program, std::span<const int32_t> tokens,
                          const std::vector<RowGroup> &groups, LogitsBack back,
                          RunSampling sampling) override;
  /// Runs `step` of `program` over the first `rows` rows, which belong to `groups`.
  Status runStep(const plan::Program &program, const plan::Step &step, int64_t rows,
                 const std::vector<RowGroup> &groups);
  Status runCollective(const plan::Step &step, int64_t rows);
  /// Whether `step` runs one row per sequence (the head after a last_rows step) rather than the
  /// program's rows.
  static bool onePerSequence(const plan::Plan &plan, const plan::Program &program,
                             const plan::Step &step);

  uint8_t *address(const plan::Slice &slice);
  bool matchesDump(const std::string &name) const;
  float *floats(const plan::TensorRef &t) { return reinterpret_cast<float *>(address(*t.slice())); }

  std::unique_ptr<PlanFile> plan_;
  CpuEngineOptions options_;
  std::vector<std::vector<uint64_t>> arenas_;     // 8-byte aligned storage per arena
  std::vector<std::vector<uint8_t>> checkpoints_; // per slot: its verify window's checkpoint
  std::vector<std::vector<uint8_t>> kept_;        // per kept state: its per-sequence slots in order
  int64_t runs_ = 0;
  int rank_ = 0;
};

} // namespace glm::runtime
