// The plan emitter: a planned module, field by field, into runtime/schema/plan.fbs. Every field
// comes from the IR; nothing is decided here.
#include "compiler/pipelines/EmitPlan.h"

#include "compiler/target/IrOpStep.h"
#include "ir/plan/PlanOps.h"
#include "kernels/common/GpuLaunch.h"
#include "kernels/common/KernelSources.h"
#include "runtime/schema/PlanHash.h"
#include "runtime/schema/PlanVersion.h"
#include "runtime/schema/plan_generated.h"

#include "mlir/IR/BuiltinAttributes.h"
#include "llvm/ADT/StringMap.h"

namespace glm::compiler {

using namespace mlir;
namespace fb = flatbuffers;
namespace planir = glm::planir;

namespace {

Expected<plan::ElementType> elementOf(Type t) {
  if (t.isF32()) {
    return plan::ElementType::F32;
  }
  if (t.isBF16()) {
    return plan::ElementType::BF16;
  }
  if (t.isF16()) {
    return plan::ElementType::F16;
  }
  if (isa<Float8E4M3FNType>(t)) {
    return plan::ElementType::F8E4M3;
  }
  if (t.isInteger(32)) {
    return plan::ElementType::I32;
  }
  if (t.isInteger(64)) {
    return plan::ElementType::I64;
  }
  if (t.isUnsignedInteger(8)) {
    return plan::ElementType::U8; // Q4 weights' packed codes
  }
  return internalError("no plan element type for an MLIR type");
}

/// plan.weight's encoding, as glm-to-plan spells glm's DenseEncoding.
Expected<plan::DenseEncoding> encodingOf(StringRef encoding) {
  if (encoding == "plain" || encoding == "q4" || encoding == "fp8") {
    return encoding == "q4"    ? plan::DenseEncoding::Q4
           : encoding == "fp8" ? plan::DenseEncoding::Fp8
                               : plan::DenseEncoding::Plain;
  }
  return internalError("unknown weight encoding '", encoding.str(), "'");
}

Expected<plan::IoKind> ioKindOf(StringRef name) {
  if (name == "token_ids") {
    return plan::IoKind::TokenIds;
  }
  if (name == "logits") {
    return plan::IoKind::Logits;
  }
  if (name == "sampled_ids") {
    return plan::IoKind::SampledIds;
  }
  if (name == "positions") {
    return plan::IoKind::Positions;
  }
  if (name == "sequence_slots") {
    return plan::IoKind::SequenceSlots;
  }
  if (name == "page_table") {
    return plan::IoKind::PageTable;
  }
  if (name == "sampling_params") {
    return plan::IoKind::SamplingParams;
  }
  if (name == "logit_bias") {
    return plan::IoKind::LogitBias;
  }
  if (name == "token_mask") {
    return plan::IoKind::TokenMask;
  }
  if (name == "sampled_logprobs") {
    return plan::IoKind::SampledLogprobs;
  }
  if (name == "draft_ids") {
    return plan::IoKind::DraftIds;
  }
  return internalError("unknown io slot kind '", name.str(), "'");
}

plan::WeightFormat formatOf(StringRef f) {
  if (f == "float32") {
    return plan::WeightFormat::F32;
  }
  if (f == "float16") {
    return plan::WeightFormat::F16;
  }
  if (f == "fp8_e4m3") {
    return plan::WeightFormat::FP8;
  }
  if (f == "exl3") {
    return plan::WeightFormat::EXL3;
  }
  return plan::WeightFormat::BF16;
}

plan::ShardKind shardOf(StringRef s) {
  if (s == "column") {
    return plan::ShardKind::Column;
  }
  if (s == "row") {
    return plan::ShardKind::Row;
  }
  if (s == "expert") {
    return plan::ShardKind::Expert;
  }
  if (s == "head") {
    return plan::ShardKind::Head;
  }
  return plan::ShardKind::Replicated;
}

plan::StateKind stateKindOf(StringRef s) {
  if (s == "conv_window") {
    return plan::StateKind::ConvWindow;
  }
  if (s == "mla_latent") {
    return plan::StateKind::MlaLatent;
  }
  if (s == "index_keys") {
    return plan::StateKind::IndexKeys;
  }
  if (s == "token_counts") {
    return plan::StateKind::TokenCounts;
  }
  return plan::StateKind::KdaRecurrent;
}

plan::Arch archOf(StringRef target) {
  if (target == "sm_90a") {
    return plan::Arch::Sm90a;
  }
  if (target == "sm_121a") {
    return plan::Arch::Sm121a;
  }
  return plan::Arch::Cpu;
}

plan::SegmentEnd segmentEndOf(StringRef end) {
  return end == "collective" ? plan::SegmentEnd::Collective : plan::SegmentEnd::ProgramEnd;
}

class Emitter {
public:
  explicit Emitter(ModuleOp module) : module_(module) {}

  Expected<std::vector<uint8_t>> run(const std::string &summary, const std::string &hash) {
    auto targets = llvm::to_vector(module_.getOps<planir::TargetOp>());
    auto pools = llvm::to_vector(module_.getOps<planir::StatePoolOp>());
    if (targets.size() != 1 || pools.size() != 1) {
      return internalError("emitPlan: expected one plan.target and one plan.state_pool");
    }
    planir::TargetOp target = targets.front();
    const plan::Arch arch = archOf(target.getName());

    std::vector<fb::Offset<plan::Arena>> arenas;
    for (auto a : module_.getOps<planir::ArenaOp>()) {
      arenaIndex_[a.getKind()] = static_cast<uint32_t>(arenas.size());
      static const llvm::StringMap<plan::ArenaKind> kinds = {
          {"weights", plan::ArenaKind::Weights},
          {"activations", plan::ArenaKind::Activations},
          {"state", plan::ArenaKind::State},
          {"io", plan::ArenaKind::Io},
          {"workspace", plan::ArenaKind::Workspace}};
      arenas.push_back(plan::CreateArenaDirect(
          b_, a.getSymName().str().c_str(), kinds.lookup(a.getKind()),
          static_cast<uint64_t>(a.getSize()), static_cast<uint32_t>(a.getAlignment())));
    }

    std::vector<fb::Offset<plan::WeightBinding>> weights;
    for (auto w : module_.getOps<planir::WeightOp>()) {
      weightIndex_[w.getSymName()] = static_cast<uint32_t>(weights.size());
      GLM_ASSIGN_OR_RETURN(plan::ElementType element, elementOf(w.getElement()));
      GLM_ASSIGN_OR_RETURN(plan::DenseEncoding encoding, encodingOf(w.getEncoding()));
      std::vector<int64_t> global(w.getGlobalShape().begin(), w.getGlobalShape().end());
      std::vector<int64_t> local(w.getRankShape().begin(), w.getRankShape().end());
      const plan::Slice slice(arenaIndex_.lookup("weights"),
                              static_cast<uint64_t>(w.getOffset().value_or(0)),
                              static_cast<uint64_t>(w.getSize()));
      weights.push_back(plan::CreateWeightBindingDirect(
          b_, w.getSymName().str().c_str(), w.getCheckpoint().str().c_str(),
          static_cast<uint32_t>(w.getExperts()), formatOf(w.getFormat()), &global,
          shardOf(w.getShard()), static_cast<uint32_t>(w.getShardDim()),
          plan::WeightLayout::AsStored, element, &local, &slice, encoding));
    }

    std::vector<fb::Offset<plan::StateLayout>> states;
    for (auto s : module_.getOps<planir::StateOp>()) {
      stateIndex_[s.getSymName()] = static_cast<uint32_t>(states.size());
      GLM_ASSIGN_OR_RETURN(plan::ElementType element, elementOf(s.getElement()));
      std::vector<int64_t> unit(s.getUnitShape().begin(), s.getUnitShape().end());
      uint64_t bytes = dtypeSize(dtypeOf(s.getElement()));
      for (int64_t d : unit) {
        bytes *= static_cast<uint64_t>(d);
      }
      const plan::Slice slice(arenaIndex_.lookup("state"),
                              static_cast<uint64_t>(s.getOffset().value_or(0)),
                              static_cast<uint64_t>(s.getSize().value_or(0)));
      states.push_back(plan::CreateStateLayoutDirect(
          b_, s.getSymName().str().c_str(), stateKindOf(s.getKind()), element, &unit, bytes,
          s.getPaged(), static_cast<uint64_t>(s.getOffsetInPage().value_or(0)), &slice));
    }
    planir::StatePoolOp p = pools.front();
    const plan::Slice poolSlice(arenaIndex_.lookup("state"),
                                static_cast<uint64_t>(p.getPoolOffset().value_or(0)),
                                static_cast<uint64_t>(p.getPageBytes().value_or(0)) *
                                    static_cast<uint64_t>(p.getPageCount().value_or(0)));
    auto pool = plan::CreateStatePool(
        b_, static_cast<uint32_t>(p.getMaxSequences()), static_cast<uint64_t>(p.getMaxContext()),
        static_cast<uint32_t>(p.getPageTokens()),
        static_cast<uint64_t>(p.getPageBytes().value_or(0)),
        static_cast<uint32_t>(p.getPageCount().value_or(0)), &poolSlice);

    // GPU plans carry the cubins of the kernel instances their steps launch (plan-compile-kernels
    // put them in the IR).
    std::vector<fb::Offset<plan::Kernel>> kernels;
    for (auto k : module_.getOps<planir::KernelOp>()) {
      kernelIndex_[k.getSymName()] = static_cast<uint32_t>(kernels.size());
      std::vector<fb::Offset<plan::Cubin>> cubins;
      if (auto blob = dyn_cast_or_null<DenseUI8ResourceElementsAttr>(k.getCubinAttr())) {
        std::optional<ArrayRef<uint8_t>> image = blob.tryGetAsArrayRef();
        if (!image) {
          return internalError("emitPlan: kernel ", k.getSymName().str(), "'s cubin is missing");
        }
        std::vector<uint8_t> bytes(image->begin(), image->end());
        cubins.push_back(plan::CreateCubinDirect(b_, arch, &bytes,
                                                 k.getSourceHash().value_or("").str().c_str()));
      }
      kernels.push_back(plan::CreateKernelDirect(b_, k.getInstance().str().c_str(),
                                                 k.getHeader().str().c_str(),
                                                 k.getEntry().value_or("").str().c_str(), &cubins));
    }

    std::vector<fb::Offset<plan::Program>> programs;
    for (auto program : module_.getOps<planir::ProgramOp>()) {
      GLM_ASSIGN_OR_RETURN(auto emitted, emitProgram(program));
      programs.push_back(emitted);
    }

    auto targetDesc = plan::CreateTargetDescDirect(
        b_, target.getName().str().c_str(), arch, static_cast<uint32_t>(target.getSmCount()),
        static_cast<uint32_t>(target.getSharedMemoryPerBlock()),
        static_cast<uint64_t>(target.getMemoryBytes()),
        target.getBandwidthBytesPerS().convertToDouble());
    auto root = plan::CreatePlanDirect(
        b_, plan::kPlanFormatVersion, "glmc", summary.c_str(), hash.c_str(), targetDesc,
        static_cast<uint32_t>(target.getTp()),
        target.getPrecision() == "f32" ? plan::Precision::F32 : plan::Precision::BF16, &arenas,
        &weights, &states, pool, &kernels, &programs, /*content_hash=*/~uint64_t{0},
        arch == plan::Arch::Cpu ? nullptr : kernels::kernelSourcesHash().c_str());
    plan::FinishPlanBuffer(b_, root);
    std::vector<uint8_t> bytes(b_.GetBufferPointer(), b_.GetBufferPointer() + b_.GetSize());
    // The placeholder above keeps the field in the buffer; sealing overwrites it.
    if (!plan::sealPlanBuffer(bytes)) {
      return internalError("the plan buffer lost its content_hash field");
    }
    return bytes;
  }

private:
  Expected<fb::Offset<plan::TensorRef>> tensor(Value buffer) {
    auto alloc = buffer.getDefiningOp<planir::AllocOp>();
    auto type = cast<planir::BufferType>(buffer.getType());
    GLM_ASSIGN_OR_RETURN(plan::ElementType element, elementOf(type.getElementType()));
    std::vector<int64_t> shape(type.getShape().begin(), type.getShape().end());
    const plan::Slice slice(arenaIndex_.lookup(alloc.getIo() ? "io" : "activations"),
                            static_cast<uint64_t>(alloc.getOffset().value_or(0)),
                            type.getByteSize());
    return plan::CreateTensorRefDirect(b_, alloc.getName().str().c_str(), element, &shape, &slice);
  }

  /// A launch attribute as the plan file holds it: the kernel's index, the geometry, the
  /// argument struct's bytes (its constants) and its bindings.
  Expected<fb::Offset<plan::KernelLaunch>> launch(planir::StepOp step, planir::LaunchAttr l) {
    auto kernel = kernelIndex_.find(l.getKernel().getValue());
    if (kernel == kernelIndex_.end()) {
      return internalError("step ", step.getName().str(), " launches @",
                           l.getKernel().getValue().str(), ", which is not in the kernel table");
    }
    std::vector<kernels::ArgConstant> constants;
    std::vector<plan::ArgBinding> bindings;
    for (Attribute field : l.getFields()) {
      if (auto c = dyn_cast<planir::ArgFieldAttr>(field)) {
        kernels::ArgConstant k;
        k.offset = static_cast<uint32_t>(c.getOffset());
        if (auto f = dyn_cast<FloatAttr>(c.getValue())) {
          k.isFloat = true;
          k.width = static_cast<uint8_t>(f.getType().getIntOrFloatBitWidth() / 8);
          k.floatValue = f.getValueAsDouble();
        } else if (auto i = dyn_cast<IntegerAttr>(c.getValue())) {
          k.width = static_cast<uint8_t>(i.getType().getIntOrFloatBitWidth() / 8);
          k.intValue = i.getValue().getSExtValue();
        }
        constants.push_back(k);
      } else if (auto a = dyn_cast<planir::ArgBindAttr>(field)) {
        kernels::ArgSource source = kernels::ArgSource::Operand;
        if (!kernels::parseArgSource(a.getSource().str(), source)) {
          return internalError("step ", step.getName().str(), ": argument source '",
                               a.getSource().str(), "'");
        }
        bindings.emplace_back(
            static_cast<uint32_t>(a.getOffset()), static_cast<plan::ArgSource>(source),
            static_cast<uint32_t>(a.getIndex()), static_cast<uint64_t>(a.getAdd()));
      }
    }
    std::vector<uint8_t> args =
        kernels::assembleArgs(static_cast<uint32_t>(l.getArgsSize()), constants);
    if (args.empty()) {
      return internalError("step ", step.getName().str(), ": arguments outside their struct");
    }
    std::vector<uint32_t> grid(l.getGrid().begin(), l.getGrid().end());
    std::vector<uint32_t> block(l.getBlock().begin(), l.getBlock().end());
    return plan::CreateKernelLaunchDirect(b_, kernel->second, &grid, &block,
                                          static_cast<uint32_t>(l.getSmem()), &args, &bindings);
  }

  Expected<fb::Offset<plan::Program>> emitProgram(planir::ProgramOp program) {
    std::vector<fb::Offset<plan::IoSlot>> io;
    std::vector<fb::Offset<plan::Step>> steps;
    for (Operation &op : program.getBody().front()) {
      if (auto alloc = dyn_cast<planir::AllocOp>(op)) {
        if (alloc.getIo()) {
          GLM_ASSIGN_OR_RETURN(plan::IoKind kind, ioKindOf(*alloc.getIo()));
          GLM_ASSIGN_OR_RETURN(auto t, tensor(alloc.getBuffer()));
          io.push_back(plan::CreateIoSlot(b_, kind, t));
        }
        continue;
      }
      auto step = cast<planir::StepOp>(op);
      std::vector<fb::Offset<plan::TensorRef>> inputs, outputs;
      for (Value v : step.getInputs()) {
        GLM_ASSIGN_OR_RETURN(auto t, tensor(v));
        inputs.push_back(t);
      }
      for (Value v : step.getOutputs()) {
        GLM_ASSIGN_OR_RETURN(auto t, tensor(v));
        outputs.push_back(t);
      }
      std::vector<uint32_t> weights, states;
      for (Attribute a : step.getWeights()) {
        weights.push_back(weightIndex_.lookup(cast<FlatSymbolRefAttr>(a).getValue()));
      }
      for (Attribute a : step.getStates()) {
        states.push_back(stateIndex_.lookup(cast<FlatSymbolRefAttr>(a).getValue()));
      }
      std::vector<fb::Offset<plan::Attribute>> attributes;
      for (NamedAttribute attr : step.getParams()) {
        int64_t i = 0;
        double f = 0;
        if (auto ia = dyn_cast<IntegerAttr>(attr.getValue())) {
          i = ia.getValue().getSExtValue();
        } else if (auto fa = dyn_cast<FloatAttr>(attr.getValue())) {
          f = fa.getValueAsDouble();
        } else if (auto ba = dyn_cast<BoolAttr>(attr.getValue())) {
          i = ba.getValue() ? 1 : 0;
        } else if (isa<UnitAttr>(attr.getValue())) {
          i = 1;
        }
        attributes.push_back(
            plan::CreateAttributeDirect(b_, attr.getName().str().c_str(), i, f, nullptr));
      }
      fb::Offset<plan::Collective> collective = 0;
      if (step.isCollective()) {
        const bool isAllReduce = step.getOp() == "all_reduce";
        auto world = step.getParams().getAs<IntegerAttr>("world");
        auto axis = step.getParams().getAs<IntegerAttr>("axis");
        collective = plan::CreateCollective(
            b_, isAllReduce ? plan::CollectiveKind::AllReduce : plan::CollectiveKind::AllGather,
            axis ? static_cast<uint32_t>(axis.getInt()) : 0,
            world ? static_cast<uint32_t>(world.getInt()) : 1);
      }
      std::vector<fb::Offset<plan::KernelLaunch>> launches;
      if (auto l = step.getLaunches()) {
        for (auto attr : l->getAsRange<planir::LaunchAttr>()) {
          GLM_ASSIGN_OR_RETURN(auto emitted, launch(step, attr));
          launches.push_back(emitted);
        }
      }
      const std::string noKernel = step.getNoKernel().value_or("").str();
      steps.push_back(plan::CreateStepDirect(
          b_, step.getOp().str().c_str(), step.getName().str().c_str(), &inputs, &outputs, &weights,
          &states, &attributes, &launches, noKernel.empty() ? nullptr : noKernel.c_str(),
          collective, static_cast<uint64_t>(step.getBytesRead()),
          static_cast<uint64_t>(step.getBytesWritten()), static_cast<uint64_t>(step.getFlops())));
    }
    std::vector<fb::Offset<plan::Segment>> segments;
    if (auto s = program.getSegments()) {
      for (auto segment : s->getAsRange<planir::SegmentAttr>()) {
        segments.push_back(plan::CreateSegmentDirect(b_, static_cast<uint32_t>(segment.getFirst()),
                                                     static_cast<uint32_t>(segment.getCount()),
                                                     segmentEndOf(segment.getEnd()),
                                                     segment.getReason().str().c_str()));
      }
    }
    return plan::CreateProgramDirect(
        b_, program.getSymName().str().c_str(),
        program.getKind() == "prefill" ? plan::ProgramKind::Prefill : plan::ProgramKind::Decode,
        static_cast<uint32_t>(program.getBatch()), static_cast<uint32_t>(program.getRows()),
        program.getLastRowLogits(), &io, &steps, &segments);
  }

  ModuleOp module_;
  fb::FlatBufferBuilder b_;
  llvm::StringMap<uint32_t> arenaIndex_;
  llvm::StringMap<uint32_t> weightIndex_;
  llvm::StringMap<uint32_t> stateIndex_;
  llvm::StringMap<uint32_t> kernelIndex_;
};

} // namespace

Expected<std::vector<uint8_t>> emitPlan(ModuleOp module, const std::string &modelSummary,
                                        const std::string &configHash) {
  return Emitter(module).run(modelSummary, configHash);
}

} // namespace glm::compiler
