// The CUDA backend: a plan's arenas on one GPU, its kernels loaded from the plan's cubins, and
// each of a program's segments captured once as a CUDA graph and replayed per step with only the
// io slots rewritten (DESIGN.md §2). The engine decides nothing: every launch's kernel, grid and
// argument struct is in the plan, and it only adds arena addresses to the arguments' bindings; the
// segments are the plan's too, and the collective that ends one runs through a DeviceComm.
#pragma once

#include "runtime/comm/DeviceComm.h"
#include "runtime/cuda/CudaContext.h"
#include "runtime/engine/Engine.h"
#include "runtime/plan/Collectives.h"
#include "runtime/plan/PlanFile.h"
#include "runtime/weights/PlanWeights.h"
#include "runtime/weights/SafeTensors.h"

#include <memory>
#include <optional>
#include <span>
#include <vector>

namespace glm::cuda {

struct CudaEngineOptions {
  int device = 0;
  /// Replay each program as a CUDA graph (the serving path); false launches its kernels one by
  /// one, which tests compare the graphs against.
  bool graphs = true;
  /// This rank's device communicator, for plans compiled with --tp N > 1 (not owned; its rank
  /// decides which weight slices the engine loads). Every rank must make the same engine calls in
  /// the same order (LockstepEngine keeps them so).
  runtime::DeviceComm *comm = nullptr;
  /// Held as long as the engine and released after everything else it holds: the owner of
  /// `comm`, when the engine is to own it.
  std::shared_ptr<void> keepAlive;
  /// Load-time weight transforms (the ablation) and progress.
  WeightLoadOptions weights;
};

class CudaEngine : public runtime::Engine {
public:
  /// Binds `checkpoint` to a plan compiled for this GPU's architecture (the engine owns the plan).
  /// A TP N plan needs options.comm, a device communicator of world N.
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
  ///
  /// A TP N plan's ranks call it at the same time, each on its own engine from a thread of its
  /// own, with the same `context` and `reps` and their own plan's `program`. The replays run the
  /// collectives between the graphs, as serving does; in the eager runs a collective step runs its
  /// collective between its two events, so its time is this rank's, waiting for the other ranks
  /// to arrive included (ranks that arrive late see less of it, so the ranks' figures differ).
  /// Ranks sharing one GPU over the loopback also time each other's kernels. Every rank makes the
  /// same collective calls whatever its own timings. A rank that fails ends the group
  /// (DeviceComm::abort), so that the others fail rather than wait for it, and the group is
  /// unusable after; only a full state pool, which every rank's books show alike before any
  /// collective, fails without ending it.
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
  /// A collective step between two graphs: what it moves, from where to where.
  struct Collective {
    std::string step; // its name, for errors
    runtime::CollectiveShape shape;
    runtime::CommElement element = runtime::CommElement::F32;
    CUdeviceptr in = 0, out = 0;
  };
  /// One of the plan's segments: its steps' kernels (one graph), then the collective that ends
  /// it, if any.
  struct Segment {
    uint32_t firstStep = 0, stepCount = 0;   // the plan's segment
    size_t firstLaunch = 0, launchCount = 0; // its steps' kernels, in Program::launches
    CUgraphExec graph = nullptr;             // when captured (options.graphs) and not empty
    std::optional<Collective> collective;
  };
  struct Program {
    const plan::Program *plan = nullptr;
    std::vector<Launch> launches; // every step's kernels, in step order
    std::vector<Segment> segments;
    IoSlot tokens, positions, slots, pageTable, sampling, bias, mask, logits;
    IoSlot sampledIds, sampledLogprobs;
    IoSlot draftIds; // the MTP head's draws (address 0: the plan has no head)
    int64_t maxPages = 0;
  };
  CudaEngine() = default;
  Status clearSlots(int slot) override;
  Status copyState(int from, int to) override;
  Status saveKept(int slot, int kept) override;
  Status loadKept(int kept, int slot) override;
  Status checkpointSlots(int slot) override;
  Status restoreSlots(int slot) override;
  /// Copies sequence `slot`'s per-sequence slots, in plan order, to device memory `copy` (`out`)
  /// or from it.
  Status copySlots(int slot, CUdeviceptr copy, bool out);
  Status copyPage(int32_t from, int32_t to) override;
  Status prepare(Program &program);
  /// Appends `step`'s kernel launches to the program's, with their argument structs' addresses
  /// filled in.
  Status addLaunches(Program &program, const plan::Step &step);
  /// The device address a binding of `step`'s arguments names.
  Expected<CUdeviceptr> bindingAddress(const plan::Step &step, const plan::ArgBinding &b) const;
  CUdeviceptr address(const plan::Slice &slice) const {
    return arenas_[slice.arena()].ptr() + slice.offset();
  }
  Expected<Collective> collectiveOf(const plan::Step &step) const;
  Status enqueue(const Launch &launch);
  Status enqueue(const Program &program, const Segment &segment);
  /// Every segment of `program` with the collectives between them, on this engine's stream.
  Status execute(const Program &program);
  Status collect(const Collective &collective);
  /// timeProgram's per-step breakdown: the median over `runs` eager runs of each step's time
  /// (a collective step's is its collective's).
  Expected<std::vector<double>> timeSteps(const Program &program, int runs);
  /// Waits for this engine's stream: through the group's wait when it is a rank of one, which
  /// watches the other ranks, where a plain wait would hang behind a collective whose peer is gone.
  Status waitForStream();
  /// The work of run() after the io slots' pages are reserved.
  Expected<RunOutput> runOnDevice(Program &program, std::span<const int32_t> tokens,
                                  const std::vector<RowGroup> &groups, LogitsBack back,
                                  RunSampling sampling);
  /// Only the logits rows `back` names are copied back, and the sampled tokens when asked.
  Expected<RunOutput> run(const plan::Program &program, std::span<const int32_t> tokens,
                          const std::vector<RowGroup> &groups, LogitsBack back,
                          RunSampling sampling) override;
  Program *find(const plan::Program *p);

  CudaEngineOptions options_; // first: its keepAlive outlives every other member
  std::unique_ptr<runtime::PlanFile> plan_;
  std::unique_ptr<CudaContext> ctx_;
  std::vector<DeviceMemory> arenas_;
  /// Per kept state id: its per-sequence slots in order, on the device. Allocated when an id is
  /// first kept and reused by the ids kept later (the scheduler bounds how many there are), so
  /// that keeping a state never waits for an allocation or a free.
  std::vector<DeviceMemory> kept_;
  std::vector<DeviceMemory> checkpoints_;        // per slot, allocated at its first verify window
  std::vector<uint32_t> counts_;                 // host staging for a kept state's token counts
  int64_t workspaceArena_ = -1;                  // the plan's workspace arena, if it has one
  std::vector<std::unique_ptr<Module>> modules_; // one per plan kernel
  /// Per plan kernel, the dynamic shared memory its function may take (set above 48 KB): the
  /// most any of its launches asks, since one kernel's launches ask different amounts.
  std::vector<unsigned> sharedAllowed_;
  std::vector<Program> programs_;
};

} // namespace glm::cuda
