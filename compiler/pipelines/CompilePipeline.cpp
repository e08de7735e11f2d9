// The compile pipeline, as one readable sequence of passes.
#include "compiler/pipelines/CompilePipeline.h"

#include "base/Hash.h"
#include "base/Progress.h"
#include "compiler/Passes.h"
#include "compiler/pipelines/EmitPlan.h"
#include "compiler/target/Target.h"
#include "ir/plan/PlanOps.h"
#include "models/glm53/Budget.h"

#include "mlir/IR/Diagnostics.h"
#include "mlir/Pass/PassInstrumentation.h"

#include <algorithm>
#include <cstdio>
#include <memory>
#include <unistd.h>

namespace glm::compiler {

std::vector<glm53::ProgramShape> defaultPrograms(const CompileOptions &options) {
  using Kind = glm53::ProgramShape::Kind;
  std::vector<glm53::ProgramShape> programs = {{Kind::Decode, 1, 1}};
  if (options.maxSeqs > 1) {
    programs.push_back({Kind::Decode, options.maxSeqs, 1});
  }
  // Verify windows (docs/speculative-decoding.md): one sequence's of 4, 8 and 16 rows (the
  // scheduler's draft limits 3, 7 and 15) and up to 4 sequences' of 4 rows (and of 2, the MTP
  // head's one guess, in a plan with the head), all within the rows
  // whose kernels give each row its one-row bits (kernels::OpStep::kRowInvariantRows). A step
  // takes the smallest that holds its windows.
  auto window = [&](int64_t batch, int64_t rows) {
    if (rows < options.maxContext) {
      programs.push_back({Kind::Decode, batch, rows});
    }
  };
  if (options.mtp) {
    // The MTP head's one guess a round (where no copy draft is longer).
    window(1, 2);
    if (options.maxSeqs > 1) {
      window(std::min<int64_t>(options.maxSeqs, 4), 2);
    }
  }
  window(1, 4);
  window(1, 8);
  window(1, 16);
  if (options.maxSeqs > 1) {
    window(std::min<int64_t>(options.maxSeqs, 4), 4);
  }
  programs.push_back({Kind::Prefill, 1, std::min<int64_t>(512, options.maxContext)});
  return programs;
}

std::vector<glm53::ProgramShape> planPrograms(const CompileOptions &options) {
  // Given decode shapes replace the default decode programs, given prefill sizes the default
  // prefill program; a kind not asked for keeps its defaults.
  std::vector<glm53::ProgramShape> programs = options.programs;
  for (glm53::ProgramShape::Kind kind :
       {glm53::ProgramShape::Kind::Decode, glm53::ProgramShape::Kind::Prefill}) {
    auto sameKind = [kind](const glm53::ProgramShape &p) { return p.kind == kind; };
    if (std::none_of(programs.begin(), programs.end(), sameKind)) {
      for (const glm53::ProgramShape &p : defaultPrograms(options)) {
        if (sameKind(p)) {
          programs.push_back(p);
        }
      }
    }
  }
  for (glm53::ProgramShape &p : programs) {
    p.lastRowLogits = p.kind == glm53::ProgramShape::Kind::Prefill && options.prefillLastRowLogits;
  }
  return programs;
}

Expected<bool> parsePrefillLogits(const std::string &text) {
  if (text == "last" || text == "all") {
    return text == "last";
  }
  return invalidArgument("--prefill-logits is last or all, got '", text, "'");
}

std::pair<std::string, std::string> denseDefaults(const CompileOptions &options) {
  const bool deployment = options.target != "cpu" && options.precision == "bf16";
  return {options.dense.empty() ? (deployment ? "q4" : "bf16") : options.dense,
          options.head.empty() ? (deployment ? "fp8" : "bf16") : options.head};
}

void addFusionPasses(mlir::OpPassManager &pm) {
  pm.addPass(createGlmFuseExl3MoePass());
  pm.addPass(createGlmFuseSparseMlaPass());
  pm.addPass(createGlmFuseAllGatherPass());
}

void buildCompilePipeline(mlir::OpPassManager &pm, const CompileOptions &options) {
  // Per-rank shapes and the collectives between ranks.
  pm.addPass(createGlmPartitionTpPass({options.tp}));
  // How the weights arena holds each dense linear, from the rank's shapes.
  const auto [dense, head] = denseDefaults(options);
  pm.addPass(createGlmChooseDenseFormatsPass({dense, head}));
  // Fusion decisions, recorded on the ops for kernel selection (the math is unchanged).
  addFusionPasses(pm);
  // Steps with a buffer per value, the target's kernels, bytes and FLOPs.
  GlmToPlanPassOptions lower;
  lower.target = options.target;
  lower.precision = options.precision;
  lower.kv = options.kv;
  lower.maxSeqs = options.maxSeqs;
  lower.maxContext = options.maxContext;
  lower.exl3Bits = options.exl3Bits;
  pm.addPass(createGlmToPlanPass(lower));
  // A decode program's independent linears of one width in one launch where the target's kernel
  // takes them, and a KDA layer's convs in one.
  if (options.groupLinears) {
    pm.addPass(createPlanGroupLinearsPass());
  }
  if (options.groupShortConvs) {
    pm.addPass(createPlanGroupShortConvsPass());
  }
  // Each sub-block's residual update in the launch of the next one's mixer.
  if (options.fuseMhc) {
    pm.addPass(createPlanFuseMhcPass());
  }
  // And each sub-block's input norm in its mixer's.
  if (options.fuseMhcNorm) {
    pm.addPass(createPlanFuseMhcNormPass());
  }
  // A KDA layer's gated output norm in its recurrence's launch.
  if (options.fuseKdaNorm) {
    pm.addPass(createPlanFuseKdaNormPass());
  }
  // An MoE layer's sum of routed and shared experts in the shared down projection's launch.
  if (options.fuseLinearAdd) {
    pm.addPass(createPlanFuseLinearAddPass());
  }
  // Slices of arenas: weights, state slots and pages, activations by liveness, io.
  pm.addPass(createPlanAssignArenasPass());
  // GPU targets: each step's kernels, grids and argument structs, the kernel table, the
  // workspace arena.
  pm.addPass(createPlanSelectKernelsPass());
  // The pool of pages all sequences share, apart from each request's window.
  PlanSizeStatePoolPassOptions pool;
  pool.poolTokens = options.poolTokens;
  pool.hostReserve = options.hostReserve.value_or(
      findTarget(options.target) ? findTarget(options.target)->hostReserveBytes : 0);
  pm.addPass(createPlanSizeStatePoolPass(pool));
  // One CUDA graph per run of steps between the points where the host must act.
  pm.addPass(createPlanFormSegmentsPass());
  // Slices inside arenas, no live overlap, segments, launches within the target's limits,
  // memory fit.
  pm.addPass(createPlanVerifyPass());
}

namespace {

/// Whether a compile of this model shows its stages when not told: above 1 GiB of weights at the
/// release's dtypes, the threshold at which weight loading shows its bar.
bool showsProgress(const glm53::Glm53Config &config) {
  const std::vector<glm53::WeightInfo> table = glm53::glm53Weights(config);
  Expected<glm53::ParameterCounts> params = glm53::countParameters(config, table);
  return !params.ok() || params->total > (int64_t(1) << 29);
}

/// One stage of a compile on stderr, or nothing when progress is off.
std::unique_ptr<ProgressReporter> stage(bool on, std::string label, uint64_t total) {
  if (!on) {
    return nullptr;
  }
  ProgressReporter::Options o;
  o.label = "glmc compile: " + std::move(label);
  o.total = total;
  return std::make_unique<ProgressReporter>(std::move(o));
}

/// Advances a stage by one for every pass of the top-level pipeline.
class PassProgress : public mlir::PassInstrumentation {
public:
  PassProgress(ProgressReporter &progress, mlir::Operation *top) : progress_(progress), top_(top) {}
  void runAfterPass(mlir::Pass *, mlir::Operation *op) override { advance(op); }
  void runAfterPassFailed(mlir::Pass *, mlir::Operation *op) override { advance(op); }

private:
  void advance(mlir::Operation *op) {
    if (op == top_) {
      progress_.advance(1);
    }
  }
  ProgressReporter &progress_;
  mlir::Operation *top_;
};

} // namespace

Expected<std::vector<uint8_t>> compileGlm53Plan(mlir::MLIRContext &context,
                                                const glm53::Glm53Config &config,
                                                const glm53::WeightFormatFn &formats,
                                                const CompileOptions &options) {
  const bool progress = options.progress.value_or(showsProgress(config));
  std::unique_ptr<ProgressReporter> building = stage(
      progress,
      strCat("model IR (", config.numHiddenLayers + config.numNextnPredictLayers, " layers)"), 1);
  GLM_ASSIGN_OR_RETURN(
      mlir::OwningOpRef<mlir::ModuleOp> module,
      glm53::buildGlm53Module(context, config, planPrograms(options), formats, options.mtp));
  if (building) {
    building->advance(1);
    building->finish();
  }
  mlir::PassManager pm(&context);
  buildCompilePipeline(pm, options);
  std::unique_ptr<ProgressReporter> passes =
      stage(progress, strCat(pm.size(), " passes"), pm.size());
  // A bar moves pass by pass; plain lines (stderr not a terminal) only say when all are done.
  const bool terminal = isatty(STDERR_FILENO) != 0;
  if (passes && terminal) {
    pm.addInstrumentation(std::make_unique<PassProgress>(*passes, module->getOperation()));
  }
  if (mlir::failed(pm.run(*module))) {
    return invalidArgument("compilation failed (the diagnostics above say where)");
  }
  if (passes) {
    passes->advance(terminal ? 0 : pm.size());
    passes->finish();
  }
  // A plan remembers what it was compiled from, so serving it with another checkpoint is refused.
  const std::string summary = strCat(
      "glm5_next hidden ", config.hiddenSize, " layers ", config.numHiddenLayers, " experts ",
      config.nRoutedExperts, " top ", config.numExpertsPerTok, " vocab ", config.vocabSize, " kda ",
      config.linearNumHeads, "x", config.linearHeadDim, " mla ", config.numAttentionHeads, "x",
      config.qkHeadDim(), "/", config.vHeadDim, " index ", config.indexNHeads, "x",
      config.indexHeadDim, " topk ", config.indexTopk, "/", config.indexKpool);
  const std::string hash = Fnv1a64().add(summary).hex();
  // GPU plans: the kernel table's cubins, then the file, written once from the IR.
  uint64_t kernels = 0;
  for (planir::KernelOp k : module->getOps<planir::KernelOp>()) {
    kernels += k.getCubin() ? 0 : 1;
  }
  std::unique_ptr<ProgressReporter> compiling;
  if (progress && kernels > 0) {
    // The pass compiles them all at once (in parallel, or from the kernel cache), so the stage is
    // drawn as it starts, naming the count, and completes when the pass does.
    ProgressReporter::Options o;
    o.label = strCat("glmc compile: ", kernels, " kernels (NVRTC)");
    o.total = kernels;
    o.redrawInterval = o.lineInterval = std::chrono::milliseconds(0);
    compiling = std::make_unique<ProgressReporter>(std::move(o));
    compiling->advance(0);
  }
  mlir::PassManager compile(&context);
  compile.addPass(createPlanCompileKernelsPass());
  if (mlir::failed(compile.run(*module))) {
    return invalidArgument("compiling the plan's kernels failed (the diagnostics above say why)");
  }
  if (compiling) {
    compiling->advance(kernels);
    compiling->finish();
  }
  std::unique_ptr<ProgressReporter> emitting = stage(progress, "plan file", 1);
  Expected<std::vector<uint8_t>> plan = emitPlan(*module, summary, hash);
  if (emitting && plan.ok()) {
    emitting->advance(1);
    emitting->finish();
  }
  return plan;
}

} // namespace glm::compiler
