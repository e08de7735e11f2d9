// The CUDA backend: a plan's arenas on one GPU, its kernels loaded from the plan's cubins, and
// each program captured once as a CUDA graph and replayed per step with only the io slots
// rewritten (DESIGN.md §2).
#pragma once

#include "runtime/cuda/CudaContext.h"
#include "runtime/engine/Engine.h"
#include "runtime/plan/PlanFile.h"
#include "runtime/weights/SafeTensors.h"

#include <memory>
#include <span>
#include <vector>

namespace glm::cuda {

struct CudaEngineOptions {
  int device = 0;
  /// Replay each program as a CUDA graph (the serving path); false launches its kernels one by
  /// one, which tests compare the graphs against.
  bool graphs = true;
};

class CudaEngine : public runtime::Engine {
public:
  /// Binds `checkpoint` to a plan compiled for this GPU's architecture (the engine owns the plan).
  static Expected<std::unique_ptr<CudaEngine>> create(std::unique_ptr<runtime::PlanFile> plan,
                                                      const Checkpoint &checkpoint,
                                                      CudaEngineOptions options = {});
  ~CudaEngine() override;

  const plan::Plan &plan() const override { return plan_->root(); }
  const DeviceInfo &device() const { return ctx_->info(); }
  CudaContext &context() { return *ctx_; }

  struct ProgramTiming {
    double medianUs = 0, p10Us = 0, p90Us = 0; // graph replays
    std::vector<double> stepUs;                // per plan step, median over eager runs
  };
  /// Times `program` with every batch entry a sequence of `context` tokens: `reps` graph replays
  /// after warm-up, then eager runs with an event after each step for the per-step breakdown
  /// (launch gaps make the eager sum a little larger than a replay). The state the steps read is
  /// whatever the pool holds: this measures time, not results. Needs max_seqs free slots.
  Expected<ProgramTiming> timeProgram(const plan::Program &program, int64_t context, int reps);

private:
  struct Launch {
    CUfunction function;
    unsigned grid[3], block[3], sharedMemory;
    std::vector<uint8_t> args;
  };
  struct IoSlot {
    CUdeviceptr address = 0;
    size_t bytes = 0;
  };
  struct Program {
    const plan::Program *plan = nullptr;
    std::vector<Launch> launches;
    CUgraphExec graph = nullptr;
    IoSlot tokens, positions, slots, pageTable, sampling, logits;
    int64_t maxPages = 0;
  };
  CudaEngine() = default;
  Status clearSlots(int slot) override;
  Status prepare(Program &program);
  Status enqueue(const Launch &launch);
  Status enqueue(const Program &program);
  /// Only the logits rows `back` names are copied back.
  Expected<std::vector<float>> run(const plan::Program &program, std::span<const int32_t> tokens,
                                   const std::vector<RowGroup> &groups, LogitsBack back) override;
  Program *find(const plan::Program *p);

  std::unique_ptr<runtime::PlanFile> plan_;
  CudaEngineOptions options_;
  std::unique_ptr<CudaContext> ctx_;
  std::vector<DeviceMemory> arenas_;
  DeviceMemory workspace_;
  std::vector<std::unique_ptr<Module>> modules_; // one per plan kernel
  std::vector<Program> programs_;
};

} // namespace glm::cuda
