//===- Passes.td - glm dialect transformations ---------------*- tablegen -*-===//

#ifndef GLM_COMPILER_TRANSFORMS_PASSES_TD
#define GLM_COMPILER_TRANSFORMS_PASSES_TD

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

#endif // GLM_COMPILER_TRANSFORMS_PASSES_TD
