// Plan execution on one GPU: arenas, weights, kernels, one CUDA graph per segment of a program.
#include "runtime/engine/CudaEngine.h"

#include "runtime/engine/PlanContracts.h"

#include "runtime/cuda/Ceilings.h"
#include "runtime/engine/CudaQuantizer.h"
#include "runtime/weights/PlanWeights.h"

#include <algorithm>
#include <cstring>

namespace glm::cuda {
namespace {

plan::Arch archOf(const std::string &arch) {
  return arch == "sm_90a" ? plan::Arch::Sm90a
                          : (arch == "sm_121a" ? plan::Arch::Sm121a : plan::Arch::Cpu);
}

/// Whether the loader quantizes any of the plan's weights (a Q4 or fp8 binding from a wider
/// checkpoint tensor; an FP8 checkpoint's are copied as stored).
bool quantizesWeights(const plan::Plan &p) {
  if (p.weights() == nullptr) {
    return false;
  }
  for (const plan::WeightBinding *w : *p.weights()) {
    if (w->encoding() != plan::DenseEncoding::Plain && w->format() != plan::WeightFormat::FP8 &&
        w->format() != plan::WeightFormat::EXL3) {
      return true;
    }
  }
  return false;
}

/// Uploads window [offset, offset + bytes) of `staging` to `arena`, except the ranges in
/// `skip` (the bindings the GPU quantizer wrote in the arena itself: the staging buffer holds
/// zeros for them).
Status uploadWindow(CudaContext &ctx, CUdeviceptr arena, uint64_t offset,
                    const std::vector<uint8_t> &staging, std::vector<WeightWindow> skip) {
  std::sort(skip.begin(), skip.end(),
            [](const WeightWindow &a, const WeightWindow &b) { return a.offset < b.offset; });
  const uint64_t end = offset + staging.size();
  uint64_t cursor = offset;
  for (const WeightWindow &s : skip) {
    const uint64_t from = std::max(s.offset, offset), to = std::min(s.offset + s.bytes, end);
    if (to <= from) {
      continue;
    }
    if (from > cursor) {
      GLM_RETURN_IF_ERROR(
          ctx.upload(arena + cursor, staging.data() + (cursor - offset), from - cursor));
    }
    cursor = std::max(cursor, to);
  }
  if (end > cursor) {
    GLM_RETURN_IF_ERROR(
        ctx.upload(arena + cursor, staging.data() + (cursor - offset), end - cursor));
  }
  return Status::success();
}

} // namespace

CudaEngine::~CudaEngine() {
  if (ctx_ != nullptr) {
    (void)ctx_->makeCurrent();
    (void)ctx_->synchronize();
    for (Program &p : programs_) {
      for (Segment &segment : p.segments) {
        if (segment.graph != nullptr) {
          ctx_->driver().cuGraphExecDestroy(segment.graph);
        }
      }
    }
  }
}

Expected<std::unique_ptr<CudaEngine>> CudaEngine::create(std::unique_ptr<runtime::PlanFile> file,
                                                         const Checkpoint &checkpoint,
                                                         CudaEngineOptions options) {
  std::unique_ptr<CudaEngine> engine(new CudaEngine());
  engine->options_ = options;
  engine->plan_ = std::move(file);
  const runtime::PlanFile &planFile = *engine->plan_;
  const plan::Plan &p = planFile.root();
  const int world = options.comm != nullptr ? options.comm->world() : 1;
  if (static_cast<int>(p.tp()) != world) {
    return invalidArgument(planFile.source(), ": a TP ", p.tp(),
                           " plan needs a device communicator of that many ranks (given ", world,
                           ")");
  }
  const uint32_t rank = options.comm != nullptr ? static_cast<uint32_t>(options.comm->rank()) : 0;
  GLM_ASSIGN_OR_RETURN(engine->ctx_, CudaContext::create(options.device));
  CudaContext &ctx = *engine->ctx_;
  const plan::Arch arch = archOf(ctx.info().arch);
  if (arch == plan::Arch::Cpu || p.target()->arch() != arch) {
    return invalidArgument(planFile.source(), ": compiled for ", p.target()->name()->str(),
                           ", but ", ctx.info().name, " is ", ctx.info().arch,
                           " (compile the plan with --target ", ctx.info().arch, ")");
  }
  GLM_RETURN_IF_ERROR(planFile.checkRunnableOn(arch));
  GLM_RETURN_IF_ERROR(validatePlanSteps(planFile));
  GLM_RETURN_IF_ERROR(engine->initCommon(p, planFile.source()));

  // One allocation per arena (the kernels' workspace among them), zeroed; the weights come in a
  // window of whole bindings at a time
  // through a bounded host buffer (a rank's weights arena is 86 GB for GLM-5.3-Flash, and a GB10
  // cannot hold a second copy).
  for (const plan::Arena *a : *p.arenas()) {
    if (a->kind() == plan::ArenaKind::Workspace) {
      engine->workspaceArena_ = static_cast<int64_t>(engine->arenas_.size());
    }
    GLM_ASSIGN_OR_RETURN(DeviceMemory m, ctx.allocate(a->size()));
    GLM_CU(&ctx.driver(), cuMemsetD8(m.ptr(), 0, a->size()));
    engine->arenas_.push_back(std::move(m));
  }
  // The memsets ran on the legacy stream, which the engine's non-blocking stream does not wait
  // for: the weights' uploads and the quantizer's kernels below write the same arena.
  GLM_CU(&ctx.driver(), cuCtxSynchronize());
  for (uint32_t i = 0; i < p.arenas()->size(); ++i) {
    if (p.arenas()->Get(i)->kind() == plan::ArenaKind::Weights) {
      constexpr uint64_t kStagingBytes = uint64_t{1} << 30;
      std::vector<uint8_t> staging;
      // Q4 and fp8 bindings are quantized on this GPU, straight into the arena, while the window
      // is filled (CudaQuantizer.h); the window's upload then leaves their ranges alone. Without
      // the quantizer (its kernels did not compile, say) the host quantizes them.
      const CUdeviceptr arena = engine->arenas_[i].ptr();
      std::unique_ptr<CudaQuantizer> quantizer =
          quantizesWeights(p) ? CudaQuantizer::create(ctx, arena, p.arenas()->Get(i)->size())
                              : nullptr;
      WeightLoadOptions weightOptions = options.weights;
      weightOptions.deviceQuantizer = quantizer.get();
      RankWeightLoad load(p, checkpoint, rank, weightOptions);
      for (const WeightWindow &window : planWeightWindows(p, kStagingBytes)) {
        staging.assign(window.bytes, 0); // gaps between bindings stay zero, as on the device
        GLM_RETURN_IF_ERROR(load.window(window.offset, staging));
        GLM_RETURN_IF_ERROR(uploadWindow(ctx, arena, window.offset, staging,
                                         quantizer != nullptr ? quantizer->takeWritten()
                                                              : std::vector<WeightWindow>{}));
      }
      GLM_RETURN_IF_ERROR(load.finish());
    }
  }
  for (const plan::Kernel *k : *p.kernels()) {
    for (const plan::Cubin *c : *k->cubins()) {
      if (c->arch() == arch) {
        GLM_ASSIGN_OR_RETURN(
            std::unique_ptr<Module> module,
            ctx.load(std::span<const uint8_t>(c->image()->data(), c->image()->size()),
                     {k->entry()->str()}));
        engine->modules_.push_back(std::move(module));
        break;
      }
    }
  }
  engine->sharedAllowed_.assign(engine->modules_.size(), 48 * 1024);
  for (const plan::Program *program : *p.programs()) {
    engine->programs_.push_back(Program{program});
  }
  for (Program &program : engine->programs_) {
    GLM_RETURN_IF_ERROR(engine->prepare(program).withContext(program.plan->name()->str()));
  }
  return engine;
}

Status CudaEngine::prepare(Program &program) {
  for (const plan::IoSlot *io : *program.plan->io()) {
    const IoSlot slot{address(*io->tensor()->slice()), io->tensor()->slice()->size()};
    switch (io->kind()) {
    case plan::IoKind::TokenIds:
      program.tokens = slot;
      break;
    case plan::IoKind::Positions:
      program.positions = slot;
      break;
    case plan::IoKind::SequenceSlots:
      program.slots = slot;
      break;
    case plan::IoKind::PageTable:
      program.pageTable = slot;
      program.maxPages = io->tensor()->shape()->Get(1);
      break;
    case plan::IoKind::SamplingParams:
      program.sampling = slot;
      break;
    case plan::IoKind::Logits:
      program.logits = slot;
      break;
    case plan::IoKind::LogitBias:
      program.bias = slot;
      break;
    case plan::IoKind::TokenMask:
      program.mask = slot;
      break;
    case plan::IoKind::SampledIds:
      program.sampledIds = slot;
      break;
    case plan::IoKind::SampledLogprobs:
      program.sampledLogprobs = slot;
      break;
    case plan::IoKind::DraftIds:
      program.draftIds = slot;
      break;
    }
  }
  // The plan's segments, as the compiler formed them: each one graph of its steps' kernels, then
  // the collective that ends it, if any (the other ranks' data comes in between the graphs).
  const auto &steps = *program.plan->steps();
  for (const plan::Segment *s : *program.plan->segments()) {
    Segment segment;
    segment.firstStep = s->first_step();
    segment.stepCount = s->step_count();
    segment.firstLaunch = program.launches.size();
    const bool collective = s->end() == plan::SegmentEnd::Collective;
    const uint32_t end = s->first_step() + s->step_count();
    for (uint32_t i = s->first_step(); i < (collective ? end - 1 : end); ++i) {
      GLM_RETURN_IF_ERROR(addLaunches(program, *steps.Get(i)));
    }
    segment.launchCount = program.launches.size() - segment.firstLaunch;
    if (collective) {
      GLM_ASSIGN_OR_RETURN(segment.collective, collectiveOf(*steps.Get(end - 1)));
    }
    program.segments.push_back(std::move(segment));
  }
  if (options_.graphs) {
    // Capture once; every later step replays the graphs with fresh io slots.
    const CudaDriver &d = ctx_->driver();
    for (Segment &segment : program.segments) {
      if (segment.launchCount == 0) {
        continue;
      }
      GLM_CU(&d, cuStreamBeginCapture(ctx_->stream(), kCaptureModeThreadLocal));
      const Status launched = enqueue(program, segment);
      CUgraph graph = nullptr;
      const Status ended =
          check(d.cuStreamEndCapture(ctx_->stream(), &graph), "cuStreamEndCapture");
      GLM_RETURN_IF_ERROR(launched);
      GLM_RETURN_IF_ERROR(ended);
      const Status instantiated =
          check(d.cuGraphInstantiateWithFlags(&segment.graph, graph, 0), "cuGraphInstantiate");
      d.cuGraphDestroy(graph);
      GLM_RETURN_IF_ERROR(instantiated);
    }
  }
  return Status::success();
}

Expected<CUdeviceptr> CudaEngine::bindingAddress(const plan::Step &step,
                                                 const plan::ArgBinding &b) const {
  // PlanFile's validator checked every index against the step.
  switch (b.source()) {
  case plan::ArgSource::Operand:
    return address(*step.operands()->Get(b.index())->slice()) + b.add();
  case plan::ArgSource::Result:
    return address(*step.results()->Get(b.index())->slice()) + b.add();
  case plan::ArgSource::Weight:
    return address(*plan().weights()->Get(step.weights()->Get(b.index()))->slice()) + b.add();
  case plan::ArgSource::State:
    return address(*plan().states()->Get(step.states()->Get(b.index()))->slice()) + b.add();
  case plan::ArgSource::Workspace:
    if (workspaceArena_ < 0) {
      return internalError("step ", step.name()->str(), " binds the workspace of a plan without");
    }
    return arenas_[static_cast<size_t>(workspaceArena_)].ptr() + b.add();
  case plan::ArgSource::RankTimes:
    break;
  }
  return internalError("step ", step.name()->str(), ": binding source ",
                       static_cast<int>(b.source()), " is not an address");
}

Status CudaEngine::addLaunches(Program &program, const plan::Step &step) {
  const auto *launches = step.launches();
  if (launches == nullptr || launches->size() == 0) {
    return unimplemented("step ", step.name()->str(), " (", step.op()->str(),
                         ") has no CUDA kernel in this plan: ",
                         step.no_kernel() != nullptr ? step.no_kernel()->str()
                                                     : "glmc compile wrote it without one");
  }
  const int rank = options_.comm != nullptr ? options_.comm->rank() : 0;
  for (const plan::KernelLaunch *l : *launches) {
    Launch launch{modules_[l->kernel()]->function(0),
                  {},
                  {},
                  l->shared_memory(),
                  std::vector<uint8_t>(l->args()->begin(), l->args()->end())};
    for (int d = 0; d < 3; ++d) {
      launch.grid[d] = l->grid()->Get(static_cast<uint32_t>(d));
      launch.block[d] = l->block()->Get(static_cast<uint32_t>(d));
    }
    // Every address in the arguments is fixed (arenas, io slots, the state pool), so the structs
    // are what the CUDA graph captures and replays.
    if (l->bindings() != nullptr) {
      for (const plan::ArgBinding *b : *l->bindings()) {
        if (b->source() == plan::ArgSource::RankTimes) {
          const auto value = static_cast<int32_t>(static_cast<uint64_t>(rank) * b->add());
          std::memcpy(launch.args.data() + b->offset(), &value, sizeof value);
          continue;
        }
        GLM_ASSIGN_OR_RETURN(CUdeviceptr at, bindingAddress(step, *b));
        const uint64_t value = at;
        std::memcpy(launch.args.data() + b->offset(), &value, sizeof value);
      }
    }
    // Raised, never lowered: a decode-quant kernel's ring holds its rows' activations where
    // they fit, so the same kernel asks more in one program than in another.
    if (launch.sharedMemory > sharedAllowed_[l->kernel()]) {
      GLM_CU(&ctx_->driver(), cuFuncSetAttribute(launch.function, kFuncAttrMaxDynamicSharedSize,
                                                 static_cast<int>(launch.sharedMemory)));
      sharedAllowed_[l->kernel()] = launch.sharedMemory;
    }
    program.launches.push_back(std::move(launch));
  }
  return Status::success();
}

Expected<CudaEngine::Collective> CudaEngine::collectiveOf(const plan::Step &step) const {
  const std::string name = step.name() != nullptr ? step.name()->str() : "?";
  if (options_.comm == nullptr) {
    return internalError("step ", name, " is a collective in a TP 1 plan");
  }
  Expected<runtime::CollectiveShape> shape = runtime::collectiveShape(step, plan().tp());
  if (!shape.ok()) {
    return shape.status().withContext(strCat("step ", name));
  }
  if (shape->element != plan::ElementType::F32 && shape->element != plan::ElementType::BF16) {
    return unimplemented("step ", name, ": a collective of ",
                         plan::EnumNameElementType(shape->element),
                         " (the engine moves f32 and bf16 activations)");
  }
  // The whole static shape moves, padding rows too: the graphs around it are static as well.
  return Collective{name, *shape,
                    shape->element == plan::ElementType::F32 ? runtime::CommElement::F32
                                                             : runtime::CommElement::BF16,
                    address(*step.operands()->Get(0)->slice()),
                    address(*step.results()->Get(0)->slice())};
}

Status CudaEngine::enqueue(const Launch &l) {
  void *params[] = {const_cast<uint8_t *>(l.args.data())};
  GLM_CU(&ctx_->driver(),
         cuLaunchKernel(l.function, l.grid[0], l.grid[1], l.grid[2], l.block[0], l.block[1],
                        l.block[2], l.sharedMemory, ctx_->stream(), params, nullptr));
  return Status::success();
}

Status CudaEngine::enqueue(const Program &program, const Segment &segment) {
  for (size_t i = segment.firstLaunch; i < segment.firstLaunch + segment.launchCount; ++i) {
    GLM_RETURN_IF_ERROR(enqueue(program.launches[i]));
  }
  return Status::success();
}

Status CudaEngine::collect(const Collective &c) {
  runtime::DeviceComm &comm = *options_.comm;
  const auto rows = static_cast<size_t>(c.shape.rows), width = static_cast<size_t>(c.shape.width);
  if (c.shape.kind == plan::CollectiveKind::AllReduce) {
    // In place in the result, as the CPU backend does: the operand stays as the step left it.
    if (c.out != c.in) {
      GLM_CU(&ctx_->driver(),
             cuMemcpyDtoDAsync(c.out, c.in, rows * width * runtime::commElementBytes(c.element),
                               ctx_->stream()));
    }
    return comm.allReduceDevice(reinterpret_cast<void *>(c.out), rows * width, c.element,
                                ctx_->stream());
  }
  return comm.allGatherDevice(reinterpret_cast<const void *>(c.in), reinterpret_cast<void *>(c.out),
                              rows, width, c.shape.axis, c.element, ctx_->stream());
}

Status CudaEngine::execute(const Program &program) {
  const CudaDriver &d = ctx_->driver();
  for (const Segment &segment : program.segments) {
    if (segment.graph != nullptr) {
      GLM_CU(&d, cuGraphLaunch(segment.graph, ctx_->stream()));
    } else {
      GLM_RETURN_IF_ERROR(enqueue(program, segment));
    }
    if (segment.collective) {
      GLM_RETURN_IF_ERROR(collect(*segment.collective).withContext(segment.collective->step));
    }
  }
  return Status::success();
}

Status CudaEngine::clearSlots(int slot) {
  GLM_RETURN_IF_ERROR(ctx_->makeCurrent());
  for (const plan::StateLayout *s : *plan().states()) {
    if (!s->paged()) {
      const CUdeviceptr base = address(*s->slice());
      GLM_CU(&ctx_->driver(), cuMemsetD8Async(base + static_cast<uint64_t>(slot) * s->unit_bytes(),
                                              0, s->unit_bytes(), ctx_->stream()));
    }
  }
  return Status::success();
}

CudaEngine::Program *CudaEngine::find(const plan::Program *p) {
  for (Program &program : programs_) {
    if (program.plan == p) {
      return &program;
    }
  }
  return nullptr;
}

Status CudaEngine::copyState(int from, int to) {
  GLM_RETURN_IF_ERROR(ctx_->makeCurrent());
  const CudaDriver &d = ctx_->driver();
  for (const plan::StateLayout *s : *plan().states()) {
    if (!s->paged()) {
      const CUdeviceptr base = address(*s->slice());
      GLM_CU(&d, cuMemcpyDtoDAsync(base + static_cast<uint64_t>(to) * s->unit_bytes(),
                                   base + static_cast<uint64_t>(from) * s->unit_bytes(),
                                   s->unit_bytes(), ctx_->stream()));
    }
  }
  // A page holds every paged state's rows of its tokens: whole pages copy them all.
  if (const plan::StatePool *pool = plan().state_pool()) {
    const CUdeviceptr base = address(*pool->slice());
    const std::vector<int32_t> &source = sequences_.pages(from), &target = sequences_.pages(to);
    for (size_t j = 0; j < source.size() && j < target.size(); ++j) {
      GLM_CU(&d, cuMemcpyDtoDAsync(base + static_cast<uint64_t>(target[j]) * pool->page_bytes(),
                                   base + static_cast<uint64_t>(source[j]) * pool->page_bytes(),
                                   pool->page_bytes(), ctx_->stream()));
    }
  }
  return Status::success();
}

Status CudaEngine::saveKept(int slot, int kept) {
  GLM_RETURN_IF_ERROR(ctx_->makeCurrent());
  const CudaDriver &d = ctx_->driver();
  if (kept_.size() <= static_cast<size_t>(kept)) {
    kept_.resize(static_cast<size_t>(kept) + 1);
  }
  if (kept_[static_cast<size_t>(kept)].bytes() == 0) {
    GLM_ASSIGN_OR_RETURN(kept_[static_cast<size_t>(kept)],
                         ctx_->allocate(static_cast<size_t>(keptStateBytes())));
  }
  CUdeviceptr at = kept_[static_cast<size_t>(kept)].ptr();
  for (const plan::StateLayout *s : *plan().states()) {
    if (s->paged()) {
      continue;
    }
    const CUdeviceptr from = address(*s->slice()) + static_cast<uint64_t>(slot) * s->unit_bytes();
    if (s->kind() == plan::StateKind::TokenCounts) {
      // A few hundred KB a sequence: through the host, where countsAsPrompt is defined once.
      counts_.resize(s->unit_bytes() / 4);
      GLM_CU(&d, cuMemcpyDtoHAsync(counts_.data(), from, s->unit_bytes(), ctx_->stream()));
      GLM_RETURN_IF_ERROR(waitForStream());
      countsAsPrompt(counts_);
      GLM_CU(&d, cuMemcpyHtoDAsync(at, counts_.data(), s->unit_bytes(), ctx_->stream()));
      GLM_RETURN_IF_ERROR(waitForStream()); // counts_ is reused by the next keep
    } else {
      GLM_CU(&d, cuMemcpyDtoDAsync(at, from, s->unit_bytes(), ctx_->stream()));
    }
    at += s->unit_bytes();
  }
  return Status::success();
}

Status CudaEngine::copySlots(int slot, CUdeviceptr copy, bool out) {
  GLM_RETURN_IF_ERROR(ctx_->makeCurrent());
  // Stream-ordered: the step after a copy reads what it copied, and no wait is needed.
  for (const plan::StateLayout *s : *plan().states()) {
    if (!s->paged()) {
      const CUdeviceptr at = address(*s->slice()) + static_cast<uint64_t>(slot) * s->unit_bytes();
      GLM_CU(&ctx_->driver(),
             cuMemcpyDtoDAsync(out ? copy : at, out ? at : copy, s->unit_bytes(), ctx_->stream()));
      copy += s->unit_bytes();
    }
  }
  return Status::success();
}

Status CudaEngine::loadKept(int kept, int slot) {
  return copySlots(slot, kept_[static_cast<size_t>(kept)].ptr(), /*out=*/false);
}

Status CudaEngine::checkpointSlots(int slot) {
  GLM_RETURN_IF_ERROR(ctx_->makeCurrent());
  if (checkpoints_.size() <= static_cast<size_t>(slot)) {
    checkpoints_.resize(static_cast<size_t>(slot) + 1);
  }
  DeviceMemory &copy = checkpoints_[static_cast<size_t>(slot)];
  if (copy.bytes() == 0) {
    GLM_ASSIGN_OR_RETURN(copy, ctx_->allocate(static_cast<size_t>(keptStateBytes())));
  }
  return copySlots(slot, copy.ptr(), /*out=*/true);
}

Status CudaEngine::restoreSlots(int slot) {
  if (checkpoints_.size() <= static_cast<size_t>(slot) ||
      checkpoints_[static_cast<size_t>(slot)].bytes() == 0) {
    return internalError("sequence slot ", slot, " has no checkpoint to restore");
  }
  return copySlots(slot, checkpoints_[static_cast<size_t>(slot)].ptr(), /*out=*/false);
}

Status CudaEngine::copyPage(int32_t from, int32_t to) {
  GLM_RETURN_IF_ERROR(ctx_->makeCurrent());
  const plan::StatePool *pool = plan().state_pool();
  const CUdeviceptr base = address(*pool->slice());
  GLM_CU(&ctx_->driver(), cuMemcpyDtoDAsync(base + static_cast<uint64_t>(to) * pool->page_bytes(),
                                            base + static_cast<uint64_t>(from) * pool->page_bytes(),
                                            pool->page_bytes(), ctx_->stream()));
  return Status::success();
}

Expected<CudaEngine::RunOutput> CudaEngine::run(const plan::Program &p,
                                                std::span<const int32_t> tokens,
                                                const std::vector<RowGroup> &groups,
                                                LogitsBack back, RunSampling sampling) {
  Program &program = *find(&p);
  // Every rank keeps the same books, so this fails on all of them alike, before any collective.
  for (const RowGroup &g : groups) {
    GLM_RETURN_IF_ERROR(sequences_.reserve(g.slot, sequences_.length(g.slot) + g.count));
  }
  Expected<RunOutput> out = runOnDevice(program, tokens, groups, back, sampling);
  if (!out.ok() && options_.comm != nullptr) {
    // This rank stops here: the others would wait for it in their next collective for good.
    options_.comm->abort(out.status());
  }
  return out;
}

Expected<CudaEngine::RunOutput> CudaEngine::runOnDevice(Program &program,
                                                        std::span<const int32_t> tokens,
                                                        const std::vector<RowGroup> &groups,
                                                        LogitsBack back, RunSampling sampling) {
  // The context is current per thread: serving calls from its scheduler thread, not the one that
  // created the engine.
  GLM_RETURN_IF_ERROR(ctx_->makeCurrent());
  const int64_t rows = static_cast<int64_t>(program.plan->batch()) * program.plan->rows();
  const int64_t perSequence = program.plan->rows();
  // The io slots of this step: rows the call does not use are padding (position -1, token 0),
  // batch entries it does not use have slot -1.
  std::vector<int32_t> ids(static_cast<size_t>(rows), 0), positions(ids.size(), -1);
  std::vector<int32_t> slots(program.plan->batch(), -1);
  const CudaDriver &d = ctx_->driver();
  for (size_t b = 0; b < groups.size(); ++b) {
    const RowGroup &g = groups[b];
    slots[b] = g.slot;
    for (int64_t r = 0; r < g.count; ++r) {
      ids[static_cast<size_t>(b * perSequence + r)] = tokens[static_cast<size_t>(g.first + r)];
      positions[static_cast<size_t>(b * perSequence + r)] =
          static_cast<int32_t>(sequences_.length(g.slot) + r);
    }
    const std::vector<int32_t> &held = sequences_.pages(g.slot);
    if (static_cast<int64_t>(held.size()) > program.maxPages) {
      return internalError("sequence ", g.slot, " holds ", held.size(),
                           " pages; the page table has ", program.maxPages);
    }
    // Only the pages a sequence holds: kernels read a sequence's table up to the page of its
    // last position, never past it, so the rest of its row (up to 16K entries at a 1M-token
    // context) need not cross to the device every step.
    if (program.pageTable.address != 0 && !held.empty()) {
      GLM_CU(&d, cuMemcpyHtoDAsync(program.pageTable.address + b * program.maxPages * 4,
                                   held.data(), held.size() * 4, ctx_->stream()));
    }
  }
  auto upload = [&](const IoSlot &slot, const void *data, size_t bytes) -> Status {
    if (slot.address != 0) {
      GLM_CU(&d,
             cuMemcpyHtoDAsync(slot.address, data, std::min(slot.bytes, bytes), ctx_->stream()));
    }
    return Status::success();
  };
  GLM_RETURN_IF_ERROR(upload(program.tokens, ids.data(), ids.size() * 4));
  GLM_RETURN_IF_ERROR(upload(program.positions, positions.data(), positions.size() * 4));
  GLM_RETURN_IF_ERROR(upload(program.slots, slots.data(), slots.size() * 4));
  // The sampler reads a sequence's logit_bias and token_mask rows only when its parameters say
  // it has them, so those slots cross only when some sequence does.
  const SamplingWords words =
      samplingWords(sampling.rows, program.plan->batch(), sampling.following);
  GLM_RETURN_IF_ERROR(upload(program.sampling, words.params.data(),
                             words.params.size() * sizeof(kernels::SampleWords)));
  if (!words.bias.empty()) {
    GLM_RETURN_IF_ERROR(upload(program.bias, words.bias.data(), words.bias.size() * 4));
  }
  if (!words.mask.empty()) {
    GLM_RETURN_IF_ERROR(upload(program.mask, words.mask.data(), words.mask.size() * 4));
  }
  GLM_RETURN_IF_ERROR(execute(program));
  // The step is waited for before the copies: a copy to pageable host memory blocks this thread
  // until the stream reaches it, outside the group's watched wait (waitForStream). The copies
  // then find the stream idle, and return once done (CUDA's rule for pageable destinations), so
  // no wait follows them.
  GLM_RETURN_IF_ERROR(waitForStream().withContext(strCat("running ", program.plan->name()->str())));
  // Only the rows the call used come back (or each group's last, or none).
  int64_t used = 0;
  for (const RowGroup &g : groups) {
    used += back == LogitsBack::All ? g.count : (back == LogitsBack::Last ? 1 : 0);
  }
  RunOutput out;
  std::vector<float> &logits = out.logits;
  logits.resize(static_cast<size_t>(used * vocab_));
  size_t offset = 0;
  const bool lastRowOnly = program.plan->last_row_logits();
  for (size_t b = 0; b < groups.size() && back != LogitsBack::None; ++b) {
    const int64_t rowsBack = back == LogitsBack::All ? groups[b].count : 1;
    if (lastRowOnly && rowsBack > 1) {
      return internalError("program ", program.plan->name()->str(),
                           " computes each sequence's last row's logits only");
    }
    // A last-row program's row b is sequence b's last row; otherwise the rows are B x R.
    const uint64_t firstRow = lastRowOnly ? b
                                          : b * static_cast<uint64_t>(perSequence) +
                                                static_cast<uint64_t>(groups[b].count - rowsBack);
    const size_t count = static_cast<size_t>(rowsBack * vocab_);
    GLM_CU(&d, cuMemcpyDtoHAsync(logits.data() + offset,
                                 program.logits.address + firstRow * vocab_ * sizeof(float),
                                 count * sizeof(float), ctx_->stream()));
    offset += count;
  }
  if (sampling.readBack) {
    // The sampled rows are a few hundred bytes: both slots come back whole, and each group's
    // token is its last row's (a last-row program's row b is sequence b's last row).
    if (program.sampledIds.address == 0 || program.sampledLogprobs.address == 0) {
      return internalError("program ", program.plan->name()->str(), " has no sampled io slots");
    }
    std::vector<int32_t> sampledIds(program.sampledIds.bytes / 4);
    std::vector<float> sampledLogprobs(program.sampledLogprobs.bytes / 4);
    GLM_CU(&d, cuMemcpyDtoHAsync(sampledIds.data(), program.sampledIds.address,
                                 program.sampledIds.bytes, ctx_->stream()));
    GLM_CU(&d, cuMemcpyDtoHAsync(sampledLogprobs.data(), program.sampledLogprobs.address,
                                 program.sampledLogprobs.bytes, ctx_->stream()));
    std::vector<int32_t> draftIds(program.draftIds.bytes / 4);
    if (program.draftIds.address != 0) {
      GLM_CU(&d, cuMemcpyDtoHAsync(draftIds.data(), program.draftIds.address,
                                   program.draftIds.bytes, ctx_->stream()));
    }
    if (sampling.everyRow && lastRowOnly) {
      return internalError("program ", program.plan->name()->str(),
                           " draws after each sequence's last row only");
    }
    constexpr size_t kOut = 1 + kernels::kSampleTopLogprobs;
    for (size_t b = 0; b < groups.size(); ++b) {
      const size_t first = lastRowOnly ? b : b * static_cast<size_t>(perSequence);
      const size_t last = lastRowOnly ? b : first + static_cast<size_t>(groups[b].count - 1);
      if ((last + 1) * kOut > sampledIds.size() || (last + 1) * kOut > sampledLogprobs.size() ||
          (!draftIds.empty() && (last + 1) * kOut > draftIds.size())) {
        return internalError("program ", program.plan->name()->str(),
                             "'s sampled io slots hold fewer rows than it runs");
      }
      for (size_t row = sampling.everyRow ? first : last; row <= last; ++row) {
        out.sampled.push_back(
            sampledToken(sampledIds.data() + row * kOut, sampledLogprobs.data() + row * kOut,
                         draftIds.empty() ? nullptr : draftIds.data() + row * kOut,
                         b < sampling.rows.size() ? &sampling.rows[b] : nullptr));
      }
    }
  }
  for (const RowGroup &g : groups) {
    sequences_.advance(g.slot, g.count);
  }
  return out;
}

Status CudaEngine::waitForStream() {
  return options_.comm != nullptr ? options_.comm->synchronize(ctx_->stream())
                                  : ctx_->synchronize();
}

Expected<CudaEngine::ProgramTiming> CudaEngine::timeProgram(const plan::Program &p, int64_t context,
                                                            int reps) {
  // A rank of a TP group that gave up on its own would leave the others waiting for it in their
  // next collective: it ends the group instead.
  auto fail = [this](Status status) {
    if (options_.comm != nullptr) {
      options_.comm->abort(status);
    }
    return status;
  };
  if (Status s = ctx_->makeCurrent(); !s.ok()) {
    return fail(s);
  }
  Program *program = find(&p);
  if (program == nullptr) {
    return fail(invalidArgument("program ", p.name()->str(), " is not in this engine's plan"));
  }
  // Sequences of `context` tokens: pages for them and the step's rows, state left as it is. Every
  // rank keeps the same books, so a full pool fails all of them here alike, before any collective.
  std::vector<int> slots;
  auto release = [&] {
    for (int s : slots) {
      sequences_.close(s);
    }
  };
  std::vector<RowGroup> groups;
  for (uint32_t b = 0; b < p.batch(); ++b) {
    Expected<int> slot = sequences_.open();
    if (!slot.ok()) {
      release();
      return slot.status();
    }
    slots.push_back(*slot);
    if (Status s = sequences_.reserve(*slot, context + p.rows()); !s.ok()) {
      release();
      return s;
    }
    sequences_.advance(*slot, context);
    groups.push_back({*slot, static_cast<int64_t>(b) * p.rows(), static_cast<int64_t>(p.rows())});
  }
  std::vector<int32_t> tokens(static_cast<size_t>(p.batch()) * p.rows(), 1);
  // One run writes the io slots (and checks the program runs); its lengths are then rolled back.
  // run() ends the group itself when it fails on the device.
  Expected<RunOutput> first = run(p, tokens, groups, LogitsBack::None, {});
  release();
  GLM_RETURN_IF_ERROR(first.status());

  ProgramTiming timing;
  Expected<EventTiming> replays = timeOnStream(
      *ctx_, [&]() -> Status { return execute(*program); }, reps, 5,
      [this](CUstream) { return waitForStream(); });
  if (!replays.ok()) {
    return fail(replays.status());
  }
  timing.medianUs = replays->medianUs;
  timing.p10Us = replays->p10Us;
  timing.p90Us = replays->p90Us;
  Expected<std::vector<double>> steps = timeSteps(*program, std::max(3, std::min(reps, 20)));
  if (!steps.ok()) {
    return fail(steps.status());
  }
  timing.stepUs = std::move(steps).value();
  return timing;
}

Expected<std::vector<double>> CudaEngine::timeSteps(const Program &program, int runs) {
  const CudaDriver &d = ctx_->driver();
  const auto &steps = *program.plan->steps();
  const uint32_t stepCount = steps.size();
  std::vector<CUevent> marks(stepCount + 1, nullptr);
  Status status = Status::success();
  for (CUevent &e : marks) {
    if (status.ok()) {
      status = check(d.cuEventCreate(&e, kEventDefault), "cuEventCreate");
    }
  }
  auto mark = [&](size_t i) {
    return check(d.cuEventRecord(marks[i], ctx_->stream()), "cuEventRecord");
  };

  // Eager runs with an event after each step: after its launches, or after its collective. Every
  // rank runs them all unless it fails (timeProgram then ends the group).
  std::vector<std::vector<double>> perStep(stepCount);
  for (int r = 0; r < runs && status.ok(); ++r) {
    status = mark(0);
    for (size_t i = 0; i < program.segments.size() && status.ok(); ++i) {
      const Segment &segment = program.segments[i];
      const uint32_t kernelSteps = segment.stepCount - (segment.collective ? 1 : 0);
      size_t next = segment.firstLaunch;
      for (uint32_t s = segment.firstStep; s < segment.firstStep + kernelSteps && status.ok();
           ++s) {
        const auto *launches = steps.Get(s)->launches();
        const size_t count = launches != nullptr ? launches->size() : 0;
        for (size_t l = 0; l < count && status.ok(); ++l, ++next) {
          status = enqueue(program.launches[next]);
        }
        if (status.ok()) {
          status = mark(s + 1);
        }
      }
      if (status.ok() && segment.collective) {
        status = collect(*segment.collective).withContext(segment.collective->step);
        if (status.ok()) {
          status = mark(segment.firstStep + segment.stepCount);
        }
      }
    }
    if (status.ok()) {
      status = waitForStream();
    }
    for (uint32_t s = 0; s < stepCount && status.ok(); ++s) {
      float ms = 0;
      status = check(d.cuEventElapsedTime(&ms, marks[s], marks[s + 1]), "cuEventElapsedTime");
      perStep[s].push_back(ms * 1000.0);
    }
  }
  for (CUevent e : marks) {
    if (e != nullptr) {
      d.cuEventDestroy(e);
    }
  }
  GLM_RETURN_IF_ERROR(status);
  std::vector<double> medians;
  for (std::vector<double> &v : perStep) {
    std::sort(v.begin(), v.end());
    medians.push_back(v[v.size() / 2]);
  }
  return medians;
}

} // namespace glm::cuda
