//===- Passes.td - the compiler's passes ----------------------*- tablegen -*-===//
//
// Every pass of the pipeline, in pipeline order; each lives in its own file
// (transforms/, lowering/, planning/) with a lit test in tests/lit/compiler/.
//
//===----------------------------------------------------------------------===//

#ifndef GLM_COMPILER_PASSES_TD
#define GLM_COMPILER_PASSES_TD

include "mlir/Pass/PassBase.td"

def GlmPartitionTpPass : Pass<"glm-partition-tp", "mlir::ModuleOp"> {
  let summary = "splits the model across tensor-parallel ranks and inserts collectives";
  let description = [{
    Rewrites a model with global shapes into the program every rank runs (SPMD)
    with per-rank shapes. Each weight's `#glm.shard` says how it splits:
    column-split linears produce column-split activations, row-split linears
    consume them and produce partial sums, expert-split MoE weights give each
    rank a partial sum over its own experts, head-split attention keeps its
    heads local. Replicated ops (mHC, norms, router, indexer) need replicated
    inputs, so the pass inserts `glm.all_reduce` where a partial sum reaches
    one and `glm.all_gather` where a split value does. State declarations and
    head counts shrink with their ops. docs/tensor-parallel.md gives the
    split and its bytes per token.

    With tp = 2, a KDA layer's `o_proj` (row-split) produces a partial sum
    that is all-reduced before `mhc_post`; the MoE's routed and shared
    partial sums are added first and all-reduced once.
  }];
  let options = [
    Option<"tp", "tp", "int64_t", /*default=*/"2", "number of tensor-parallel ranks">,
  ];
  let dependentDialects = ["::glm::ir::GlmDialect"];
}

def GlmChooseDenseFormatsPass : Pass<"glm-choose-dense-formats", "mlir::ModuleOp"> {
  let summary = "chooses how the weights arena holds each dense linear weight: q4, fp8 or as stored";
  let description = [{
    Sets `encoding` on each glm.weight the loader quantizes from a bf16, f16
    or f32 checkpoint (kernels/common/DenseFormats.h). The rule, applied to
    per-rank shapes (so it runs after partitioning):

    - a weight takes an encoding when every op that reads it has kernels
      that read it (`gpuEncodings` in kernels/OpTable.cpp: glm.linear and
      the sparse MLA's kv_b read Q4 and fp8, the router fp8 only); the head
      (the linear whose result, gathered or not, is sampled or returned)
      takes `head`, every other weight `dense`, and one whose readers take
      fp8 but not q4 takes fp8 where q4 was asked (never fewer bits); the
      embedding (gathered a row at a time), norms and mHC stay as stored;
    - q4 needs the rank's input features to be a multiple of the 64-feature
      group, fp8 a split dimension whose rank slice is a multiple of the
      128-feature block (so every rank holds whole groups or blocks, and a
      TP plan's weights equal a TP 1 plan's). A weight that cannot stays as
      stored.

    Weights stored as fp8 or EXL3 in the checkpoint are left alone.
  }];
  let options = [
    Option<"dense", "dense", "std::string", /*default=*/"\"bf16\"", "bf16 (as stored), q4 or fp8: every linear but the head">,
    Option<"head", "head", "std::string", /*default=*/"\"bf16\"", "bf16 (as stored), q4 or fp8: the head">,
  ];
  let dependentDialects = ["::glm::ir::GlmDialect"];
}

def GlmFuseExl3MoePass : Pass<"glm-fuse-exl3-moe", "mlir::ModuleOp"> {
  let summary = "marks MoE expert steps whose experts are EXL3 for the fused EXL3 MoE kernel";
  let description = [{
    A glm.moe_experts whose gate, up and down weights are all stored as EXL3
    gets `fuse_exl3`: its selected experts (gate and up, clamped SwiGLU, down,
    weighted sum) run as one launch per layer that decodes the trellis in
    registers. The math is unchanged; the attribute reaches the plan step as a
    parameter, where kernel selection reads it. Experts in other formats, or a
    mix, are left alone.
  }];
}

def GlmFuseSparseMlaPass : Pass<"glm-fuse-sparse-mla", "mlir::ModuleOp"> {
  let summary = "groups each DSA indexer with the sparse MLA that consumes its selection";
  let description = [{
    A glm.dsa_indexer whose selection is read only by glm.mla_sparse_attention
    ops is given a `fuse_group` number shared with them: the selection need not
    round-trip through memory, and one kernel can score, select and attend. The
    math is unchanged; groups are numbered in program order from 0 in each
    program.
  }];
}

def GlmFuseAllGatherPass : Pass<"glm-fuse-all-gather", "mlir::ModuleOp"> {
  let summary = "folds an all-gather into the linear that produces its input";
  let description = [{
    A glm.all_gather whose input is a glm.linear result used by nothing else
    shares a `fuse_group` number with that linear: each rank can write its
    columns straight into its slice of the gathered buffer, so the gather moves
    only the other ranks' pieces. The math is unchanged; groups are numbered in
    program order from 0 in each program.
  }];
}

def GlmToPlanPass : Pass<"glm-to-plan", "mlir::ModuleOp"> {
  let summary = "lowers partitioned glm programs to plan steps with a buffer per value";
  let description = [{
    Each func.func becomes a plan.program; each glm op a plan.step whose
    inputs and outputs are plan.alloc buffers (io slots for the program's
    token ids, logits and sampled ids), with the op's weights and states in
    contract order, its parameters, the kernel chosen for the target, and the
    bytes and FLOPs it moves. glm.weight and glm.state become plan.weight and
    plan.state with per-rank sizes in the storage format. The glm ops are
    erased.
  }];
  let options = [
    Option<"target", "target", "std::string", /*default=*/"\"cpu\"", "cpu, sm_90a or sm_121a">,
    Option<"precision", "precision", "std::string", /*default=*/"\"bf16\"", "f32 or bf16 activations">,
    Option<"kv", "kv", "std::string", /*default=*/"\"bf16\"", "bf16 or fp8 MLA latent cache">,
    Option<"maxSeqs", "max-seqs", "int64_t", /*default=*/"4", "sequences held at once">,
    Option<"maxContext", "max-context", "int64_t", /*default=*/"131072", "each request's window in tokens">,
    Option<"pageTokens", "page-tokens", "int64_t", /*default=*/"64", "tokens per page of the state pool">,
    Option<"exl3Bits", "exl3-bits", "int64_t", /*default=*/"4", "bits per weight of EXL3 tensors">,
  ];
  let dependentDialects = ["::glm::planir::PlanDialect"];
}

def PlanGroupLinearsPass : Pass<"plan-group-linears", "mlir::ModuleOp"> {
  let summary = "puts a decode program's independent quantized linears of one width in one linear_group step";
  let description = [{
    Where the plan's target runs a linear with the decode-quant kernel
    (kernels::linearJoinsGroup: a decode program, bf16 activations, Q4 or fp8
    weights, no bias; on the CPU any dense decode linear without a bias),
    linears of one encoding and one input width become one
    linear_group step at the first one's place, up to kLinearGroupMaxParts
    parts, each reading its own input or all one: one launch for a KDA
    layer's six projections, its f_b and g_b, or an MLP's gate and up. A
    linear joins only where it can move there without changing what any step
    reads (compiler/transforms/StepGroups.h). Runs after glm-to-plan, before
    plan-assign-arenas.
  }];
}

def PlanGroupShortConvsPass : Pass<"plan-group-short-convs", "mlir::ModuleOp"> {
  let summary = "puts short_convs of one step context and window in one short_conv step";
  let description = [{
    A KDA layer's q, k and v convs become one short_conv step of three parts
    (kernels/short_conv/short_conv_op.cpp), up to kShortConvMaxParts: one
    launch, each part's arithmetic its own, so the bits are the separate
    steps'. A conv joins only where it can move to the first one's place
    without changing what any step reads (compiler/transforms/StepGroups.h).
    Every program and target; runs after glm-to-plan, before
    plan-assign-arenas.
  }];
}

def PlanFuseMhcPass : Pass<"plan-fuse-mhc", "mlir::ModuleOp"> {
  let summary = "folds each mhc_post into the mhc_pre that reads its streams";
  let description = [{
    Where a program's mhc_post is followed at once by the mhc_pre of its
    result, the two become one mhc_pre step with mhc_post's operands and its
    result as a fourth (kernels/mhc_pre/mhc_pre_op.cpp): decode rows compute
    the streams inside the mixer's launch with mhc_post's arithmetic (the
    same bits), prefill rows run both kernels in the one step. Every target;
    runs after glm-to-plan, before plan-assign-arenas.
  }];
}

def PlanFuseMhcNormPass : Pass<"plan-fuse-mhc-norm", "mlir::ModuleOp"> {
  let summary = "folds each sub-block's input RMSNorm into the mhc_pre whose x it reads";
  let description = [{
    Where a program's mhc_pre (folded with its mhc_post or not) is followed at
    once by a weighted rms_norm of its x over whole rows, written to another
    buffer, the norm joins the mixer's step: its weight as weight 3, its eps
    as parameter input_norm_eps, its result as the step's last
    (kernels/mhc_pre/mhc_pre_op.cpp). Decode rows normalise inside the
    mixer's launch with rmsNormKernel's reduction (the same bits), prefill
    rows run rmsNormKernel after the mixer in the one step. Every target;
    runs after plan-fuse-mhc, before plan-assign-arenas.
  }];
}

def PlanFuseKdaNormPass : Pass<"plan-fuse-kda-norm", "mlir::ModuleOp"> {
  let summary = "folds KDA's gated output norm into the kda step whose result it reads";
  let description = [{
    Where a program's kda step is followed at once by a weighted gated_norm of
    its result in groups of its head_dim, written to a buffer that is neither
    that result nor the gate, the norm joins the kda step: its gate as
    operand 7, its weight as weight 2, its eps as parameter norm_eps, its
    result as result 1 (kernels/kda/kda_op.cpp). Decode rows normalise inside
    the recurrence's launch, a cluster of blocks a head, with
    gatedRmsNormKernel's row routine (the same bits), prefill rows run
    gatedRmsNormKernel after the recurrence in the one step. Every target;
    runs after glm-to-plan, before plan-assign-arenas.
  }];
}

def PlanFuseLinearAddPass : Pass<"plan-fuse-linear-add", "mlir::ModuleOp"> {
  let summary = "folds an add into the linear whose output it reads";
  let description = [{
    Where a program's linear is followed at once by an add of its output and
    another buffer (not in place), and no other step reads the linear's
    output, the linear takes the other buffer as its addend (operand 1) and
    the add's result as its own (kernels/linear/linear_op.cpp): its kernels
    add the addend to their rounded output with the add kernel's arithmetic,
    so the bits are the two steps'. Every target; runs after glm-to-plan,
    before plan-assign-arenas.
  }];
}

def PlanAssignArenasPass : Pass<"plan-assign-arenas", "mlir::ModuleOp"> {
  let summary = "gives every buffer, weight and state a slice of an arena";
  let description = [{
    Weights are laid out one after another in the weights arena; per-sequence
    states get max_seqs slots each and paged states share pages of the pool in
    the state arena; within each program, activation buffers get offsets by
    liveness (first fit, a buffer's bytes reused once its last reader ran), and
    all programs share one activations arena, sized for the largest, since
    they never run at once. Io buffers likewise share the io arena.
  }];
  let options = [
    Option<"alignment", "alignment", "int64_t", /*default=*/"256", "byte alignment of every slice">,
  ];
}

def PlanSizeStatePoolPass : Pass<"plan-size-state-pool", "mlir::ModuleOp"> {
  let summary = "sizes the page pool apart from the per-request window";
  let description = [{
    max_context is each request's window; the pool of pages all sequences
    share holds pool-tokens tokens when given, else as many pages as the
    target's memory holds after the host reserve and every other arena (up
    to max_sequences full windows), else (the CPU) one window. Runs after
    plan-select-kernels, which adds the workspace arena.
  }];
  let options = [
    Option<"poolTokens", "pool-tokens", "int64_t", /*default=*/"0",
           "tokens the pool holds; 0: as many as the target's memory allows">,
    Option<"hostReserve", "host-reserve", "int64_t", /*default=*/"0",
           "bytes of the target's memory left to the host and the server">,
  ];
}

def PlanSelectKernelsPass : Pass<"plan-select-kernels", "mlir::ModuleOp"> {
  let summary = "chooses each step's kernels, launch geometry and arguments for the GPU target";
  let description = [{
    For the plan's GPU target, each step that is not a collective asks its
    op's adapter (kernels/OpTable.h) for the kernel instances it launches, their
    grid, block and shared memory, and its argument structs, and records them as
    `launches`: every field of each struct, a constant or an address (an
    operand, result, weight, state or the workspace) by name and offset. The
    distinct instances form the module's plan.kernel table; the workspace arena
    is sized for the step that needs the most scratch. A step whose op or shape
    has no CUDA kernel yet gets `no_kernel` with the reason (and a warning). On
    every target, each step is first checked against its op's contract (the
    adapters' check, kernels/common/OpContract.h); the CPU target gets nothing
    else. Runs after plan-assign-arenas (arguments hold
    page sizes and offsets).
  }];
}

def PlanFormSegmentsPass : Pass<"plan-form-segments", "mlir::ModuleOp"> {
  let summary = "groups each program's steps into CUDA-graph segments";
  let description = [{
    Every step reads and writes planned slices and takes its per-step inputs
    from io slots, so a program needs the host only where a step must run on
    it: a collective, which the host runs through its communicator between
    graphs. Each segment ends after such a step (end "collective") or at the
    program's end ("program_end"), with the boundary's reason in words; the
    CUDA engine captures each segment's kernels as one graph and replays
    exactly these.
  }];
}

def PlanVerifyPass : Pass<"plan-verify", "mlir::ModuleOp"> {
  let summary = "checks a planned module before it is written";
  let description = [{
    Every buffer, weight and state has a slice inside its arena, live buffers
    never overlap, every program is covered by its segments, and the per-rank
    arenas fit the target's memory (an error gives the numbers). On GPU
    targets, every launch names a kernel of the table, its grid, block and
    shared memory are within the target's limits, its argument fields lie
    inside its struct and its addresses name what the step has; errors name
    the step.
  }];
}

def PlanCompileKernelsPass : Pass<"plan-compile-kernels", "mlir::ModuleOp"> {
  let summary = "compiles the kernel table with NVRTC for the plan's target";
  let description = [{
    Each plan.kernel without a cubin is compiled by NVRTC for the target
    (sm_90a, sm_121a), in parallel; the pass records its mangled entry, its
    cubin (a resource blob) and its source hash. The last pass before the plan
    file is written.
  }];
}

#endif // GLM_COMPILER_PASSES_TD
