//===- GlmOps.td - glm dialect operations -------------------*- tablegen -*-===//
//
// One op per GLM-5.3 computation at the granularity of the Hugging Face modules
// (reference/glm53_arch.md §2). Shapes: N rows (tokens of the step), H hidden,
// S mHC streams. Activations are f32 or bf16; ops compute in f32.
//
//===----------------------------------------------------------------------===//

#ifndef GLM_IR_GLMOPS_TD
#define GLM_IR_GLMOPS_TD

include "ir/glm/GlmBase.td"
include "ir/glm/GlmInterfaces.td"
include "mlir/IR/SymbolInterfaces.td"
include "mlir/Interfaces/InferTypeOpInterface.td"
include "mlir/Interfaces/SideEffectInterfaces.td"

//===----------------------------------------------------------------------===//
// Module-level declarations
//===----------------------------------------------------------------------===//

def Glm_WeightOp : Glm_Op<"weight", [Symbol]> {
  let summary = "a checkpoint tensor the program reads";
  let description = [{
    Declares a weight by IR name, with its global (unsharded) type, the
    checkpoint tensor it comes from, its storage format and its TP shard spec.
    When `checkpoint` contains `{e}`, the weight stacks per-expert tensors along
    dimension 0 (`{e}` = 0 .. dim0-1), as the Hub stores routed experts.
    `encoding` (set by glm-choose-dense-formats; absent = as the format says)
    is how the weights arena holds a dense weight: `q4` and `fp8` are
    quantized from a bf16/f16/f32 checkpoint at load, and an fp8 checkpoint's
    weight is `fp8` as stored.

    ```mlir
    glm.weight @blk.0.attn.q_proj : tensor<8192x4096xbf16>
        {checkpoint = "model.language_model.layers.0.self_attn.q_proj.weight",
         format = #glm.format<bfloat16>, shard = #glm.shard<column, 0>}
    ```
  }];
  let arguments = (ins SymbolNameAttr:$sym_name, TypeAttrOf<AnyRankedTensor>:$type,
                       StrAttr:$checkpoint, Glm_WeightFormatAttr:$format,
                       Glm_ShardAttr:$shard, OptionalAttr<Glm_DenseEncodingAttr>:$encoding);
  let assemblyFormat = "$sym_name `:` $type attr-dict";
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    mlir::RankedTensorType getTensorType() {
      return mlir::cast<mlir::RankedTensorType>(getType());
    }
    /// Whether this weight stacks per-expert checkpoint tensors.
    bool isPerExpert() { return getCheckpoint().contains("{e}"); }
    /// How the weights arena holds it: the encoding set, else what the format implies.
    DenseEncoding arenaEncoding() {
      if (std::optional<DenseEncoding> e = getEncoding()) {
        return *e;
      }
      return getFormat() == WeightFormat::FP8 ? DenseEncoding::Fp8 : DenseEncoding::Plain;
    }
  }];
}

def Glm_StateOp : Glm_Op<"state", [Symbol]> {
  let summary = "per-sequence decode state that ops read and update";
  let description = [{
    Declares one layer's per-sequence state. For `kda_recurrent` and
    `conv_window` the type is one sequence's slot; for `mla_latent` and
    `index_keys` it is one token's row (or one pool's key), held in pages of the
    shared pool up to the plan's maximum context.

    ```mlir
    glm.state @blk.0.attn.kda_state : tensor<64x128x128xf32> {kind = #glm.state_kind<kda_recurrent>}
    ```
  }];
  let arguments = (ins SymbolNameAttr:$sym_name, TypeAttrOf<AnyRankedTensor>:$type,
                       Glm_StateKindAttr:$kind);
  let assemblyFormat = "$sym_name `:` $type attr-dict";
}

//===----------------------------------------------------------------------===//
// Embedding, norms, linear
//===----------------------------------------------------------------------===//

def Glm_EmbeddingOp : Glm_Op<"embedding", [Glm_SymbolContract, Pure, DeclareOpInterfaceMethods<SymbolUserOpInterface>]> {
  let summary = "gathers embedding rows";
  let description = [{
    `y[n] = W[ids[n]]` for W: [V, H]. Ids outside [0, V) are a runtime error the
    host checks before the step.
  }];
  let arguments = (ins Glm_TokenIds:$ids, FlatSymbolRefAttr:$weight);
  let results = (outs Glm_Rows:$result);
  let assemblyFormat = "$ids `,` $weight attr-dict `:` type($ids) `->` type($result)";
  let extraClassDeclaration = Glm_ContractOf<["weight"]>.decl;
}

def Glm_NextEmbeddingOp : Glm_Op<"next_embedding", [Glm_SymbolContract, Glm_ReadsStepContext,
    Pure, DeclareOpInterfaceMethods<SymbolUserOpInterface>]> {
  let summary = "embeds the token that follows each row (the MTP head's input)";
  let description = [{
    Row n of a sequence gets `W[next]`, next the token that follows its own:
    with `follow_input`, the next row's input token while one of the same
    sequence follows (a prefill chunk's prompt) and then the token the host
    says follows the step (its sampling parameters' `following` word), else
    the token its sampler drew after it, the first id of its `sampled` row. `sampled` holds every
    row's draw [N, 1 + K] or, after a last_rows head, each sequence's [B, 1 + K]
    (then only `follow_input` programs may read it: only their last row does).
    A row at absolute position 0 gets zeros (vLLM's MTP convention,
    glm53_arch.md §6.14); padding rows get zeros. W: [V, H].
  }];
  let arguments = (ins Glm_TokenIds:$ids, Glm_IndexTensor:$sampled, FlatSymbolRefAttr:$weight,
                       BoolAttr:$follow_input);
  let results = (outs Glm_Rows:$result);
  let assemblyFormat = [{
    $ids `,` $sampled `,` $weight attr-dict `:` type($ids) `,` type($sampled) `->` type($result)
  }];
  let hasVerifier = 1;
  let extraClassDeclaration = Glm_ContractOf<["weight"]>.decl #
      Glm_StepContextOf<["positions", "sampling_params"]>.decl;
}

def Glm_ExpandStreamsOp : Glm_Op<"expand_streams", [Pure]> {
  let summary = "copies each row into S identical residual streams";
  let description = [{ `X[n, s, :] = x[n, :]` for s in [0, S): [N, H] -> [N, S, H]. }];
  let arguments = (ins Glm_Rows:$input);
  let results = (outs Glm_Streams:$result);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($result)";
  let hasVerifier = 1;
}

def Glm_StreamMeanOp : Glm_Op<"stream_mean", [Pure]> {
  let summary = "collapses the residual streams by their unweighted mean";
  let description = [{ `h[n, :] = (1/S) Σ_s X[n, s, :]`: [N, S, H] -> [N, H]. }];
  let arguments = (ins Glm_Streams:$input);
  let results = (outs Glm_Rows:$result);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($result)";
  let hasVerifier = 1;
}

def Glm_RmsNormOp : Glm_Op<"rms_norm", [Glm_SymbolContract, Pure, SameOperandsAndResultType,
    DeclareOpInterfaceMethods<SymbolUserOpInterface>]> {
  let summary = "RMSNorm over the last dimension, weighted or not";
  let description = [{
    `y = x * rsqrt(mean(x^2, last dim) + eps)`, then `* w` when `weight` is
    given (w: [D]). Without a weight this is mHC's unweighted norm. `group`
    (default: the whole last dimension) normalises each group of that many
    channels separately, as the KDA output norm does per head.
  }];
  let arguments = (ins Glm_Activation:$input, OptionalAttr<FlatSymbolRefAttr>:$weight,
                       F64Attr:$eps, OptionalAttr<I64Attr>:$group);
  let results = (outs Glm_Activation:$result);
  let assemblyFormat = "$input (`,` $weight^)? attr-dict `:` type($result)";
  let hasVerifier = 1;
  let extraClassDeclaration = Glm_ContractOf<["weight"]>.decl;
}

def Glm_LayerNormOp : Glm_Op<"layer_norm", [Glm_SymbolContract, Pure, SameOperandsAndResultType,
    DeclareOpInterfaceMethods<SymbolUserOpInterface>]> {
  let summary = "LayerNorm with weight and bias over the last dimension";
  let description = [{ `y = (x - mean) * rsqrt(var + eps) * w + b`, biased variance. }];
  let arguments = (ins Glm_Rows:$input, FlatSymbolRefAttr:$weight, FlatSymbolRefAttr:$bias,
                       F64Attr:$eps);
  let results = (outs Glm_Rows:$result);
  let assemblyFormat = "$input `,` $weight `,` $bias attr-dict `:` type($result)";
  let extraClassDeclaration = Glm_ContractOf<["weight", "bias"]>.decl;
}

def Glm_LinearOp : Glm_Op<"linear", [Glm_SymbolContract, Pure, DeclareOpInterfaceMethods<SymbolUserOpInterface>]> {
  let summary = "y = x W^T (+ b), W stored [out, in] in its checkpoint format";
  let description = [{
    x: [N, in], W: [out, in] (bf16, f16, f32, fp8 with block scales, or EXL3,
    as the weight's `format` says), y: [N, out]. The lm_head is a linear op on
    the final hidden state.
  }];
  let arguments = (ins Glm_Rows:$input, FlatSymbolRefAttr:$weight,
                       OptionalAttr<FlatSymbolRefAttr>:$bias);
  let results = (outs Glm_Rows:$result);
  let assemblyFormat = "$input `,` $weight (`bias` $bias^)? attr-dict `:` type($input) `->` type($result)";
  let extraClassDeclaration = Glm_ContractOf<["weight", "bias"]>.decl;
}

//===----------------------------------------------------------------------===//
// mHC residual streams
//===----------------------------------------------------------------------===//

def Glm_MhcPreOp : Glm_Op<"mhc_pre", [Glm_SymbolContract, Pure, DeclareOpInterfaceMethods<SymbolUserOpInterface>]> {
  let summary = "mHC mixer: mixing weights from the streams, and the collapsed input";
  let description = [{
    For each row: `a = flatten(X)` ([S*H]), `a = a * rsqrt(mean(a^2) + norm_eps)`,
    `m = a fn^T` ([(2+S)*S]); `pre = sigmoid(m[0:S]*scale[0] + base[0:S]) + hc_eps`,
    `post = 2 sigmoid(m[S:2S]*scale[1] + base[S:2S])`, `C = m[2S:]*scale[2] + base[2S:]`
    viewed [S, S] row-major, `C = softmax(C, rows) + hc_eps`, one column
    normalisation, then `sinkhorn_iters - 1` times (row, column) normalisation,
    each dividing by (sum + hc_eps). Results: `x = Σ_s pre[s] X[s]` [N, H],
    `post` [N, S], `comb = C` [N, S, S].
  }];
  let arguments = (ins Glm_Streams:$streams, FlatSymbolRefAttr:$fn, FlatSymbolRefAttr:$base,
                       FlatSymbolRefAttr:$scale, F64Attr:$norm_eps, F64Attr:$hc_eps,
                       I64Attr:$sinkhorn_iters);
  let results = (outs Glm_Rows:$input, Glm_Rows:$post, Glm_Streams:$comb);
  let assemblyFormat = [{
    $streams `,` $fn `,` $base `,` $scale attr-dict `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
  let extraClassDeclaration = Glm_ContractOf<["fn", "base", "scale"]>.decl;
}

def Glm_MhcPostOp : Glm_Op<"mhc_post", [Pure]> {
  let summary = "mHC residual update: X'[j] = post[j] y + Σ_i comb[i][j] R[i]";
  let description = [{
    y: [N, H] (the block's output), post: [N, S], comb: [N, S, S],
    residual R: [N, S, H]. Note the transpose: stream j receives column j of comb.
  }];
  let arguments = (ins Glm_Rows:$output, Glm_Rows:$post, Glm_Streams:$comb,
                       Glm_Streams:$residual);
  let results = (outs Glm_Streams:$result);
  let assemblyFormat = [{
    $output `,` $post `,` $comb `,` $residual attr-dict `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Kimi Delta Attention
//===----------------------------------------------------------------------===//

def Glm_ShortConvOp : Glm_Op<"short_conv", [Glm_SymbolContract, Glm_ReadsStepContext, SameOperandsAndResultType,
    DeclareOpInterfaceMethods<SymbolUserOpInterface>]> {
  let summary = "causal depthwise convolution with carried state, then SiLU";
  let description = [{
    `z_t[c] = silu(Σ_{j<K} w[c][j] u_{t-K+1+j}[c])` over each sequence's rows in
    order, reading the K-1 previous inputs from `state` (zeros at sequence start)
    and writing the last K-1 back. w: [C, 1, K], u: [N, C].
  }];
  let arguments = (ins Glm_Rows:$input, FlatSymbolRefAttr:$weight, FlatSymbolRefAttr:$state);
  let results = (outs Glm_Rows:$result);
  let assemblyFormat = "$input `,` $weight `,` `state` $state attr-dict `:` type($result)";
  let extraClassDeclaration = Glm_ContractOf<["weight", "state"]>.decl #
      Glm_StepContextOf<["positions", "sequence_slots"]>.decl;
}

def Glm_KdaOp : Glm_Op<"kda", [Glm_SymbolContract, Glm_ReadsStepContext, DeclareOpInterfaceMethods<SymbolUserOpInterface>]> {
  let summary = "Kimi Delta Attention: gated delta rule over the recurrent state";
  let description = [{
    Per head h (H heads of width d), per row t in order:
    `g = lower_bound * sigmoid(exp(A_log[h]) * (f_t + dt_bias))` (a log decay),
    `beta = sigmoid(b_t[h])`, q and k L2-normalised (eps 1e-6 inside the sqrt),
    q scaled by d^-1/2; `S = diag(exp(g)) S; S += k ⊗ beta (v - S^T k); o = S^T q`.
    q, k, v, f: [N, H*d]; b: [N, H]; result o: [N, H*d]; S: `state`, [H, d, d].
  }];
  let arguments = (ins Glm_Rows:$q, Glm_Rows:$k, Glm_Rows:$v, Glm_Rows:$f, Glm_Rows:$b,
                       FlatSymbolRefAttr:$a_log, FlatSymbolRefAttr:$dt_bias,
                       FlatSymbolRefAttr:$state, I64Attr:$num_heads, I64Attr:$head_dim,
                       F64Attr:$lower_bound);
  let results = (outs Glm_Rows:$result);
  let assemblyFormat = [{
    $q `,` $k `,` $v `,` $f `,` $b `,` $a_log `,` $dt_bias `,` `state` $state attr-dict `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
  let extraClassDeclaration = Glm_ContractOf<["a_log", "dt_bias", "state"]>.decl #
      Glm_StepContextOf<["positions", "sequence_slots"]>.decl;
}

def Glm_GatedNormOp : Glm_Op<"gated_norm", [Glm_SymbolContract, Pure, DeclareOpInterfaceMethods<SymbolUserOpInterface>]> {
  let summary = "per-head RMSNorm gated by sigmoid: KDA's output norm";
  let description = [{
    For each group of `group` channels: `y = x rsqrt(mean(x^2) + eps) w sigmoid(gate)`,
    w: [group]. x, gate, y: [N, C].
  }];
  let arguments = (ins Glm_Rows:$input, Glm_Rows:$gate, FlatSymbolRefAttr:$weight,
                       F64Attr:$eps, I64Attr:$group);
  let results = (outs Glm_Rows:$result);
  let assemblyFormat = "$input `,` $gate `,` $weight attr-dict `:` functional-type(operands, results)";
  let extraClassDeclaration = Glm_ContractOf<["weight"]>.decl;
}

//===----------------------------------------------------------------------===//
// Sparse MLA and the KPool indexer
//===----------------------------------------------------------------------===//

def Glm_DsaIndexerOp : Glm_Op<"dsa_indexer", [Glm_SymbolContract, Glm_ReadsStepContext, DeclareOpInterfaceMethods<SymbolUserOpInterface>]> {
  let summary = "KPool lightning indexer: which past tokens each row attends to";
  let description = [{
    Appends this step's indexer keys kI and gates gI ([N, d]) to the sequence's
    `state`; a pool of `kpool` tokens closes when complete and keeps
    `Kp[c] = Σ_r softmax_r(gI[r][c] + ape[r][c]) kI[r][c]`. For row t with
    queries qI [heads, d] and head weights w [heads]:
    `I[p] = Σ_h w[h] heads^-1/2 relu(qI[h]·Kp[p] d^-1/2)` over complete pools with last
    token ≤ t; the top `topk / kpool` pools (ties to the lower index) plus the
    open pool's tokens `4⌊(t+1)/kpool⌋ .. t` form the result: absolute token
    positions, -1 padded, [N, topk + kpool - 1]. Which sequence a row belongs
    to and its absolute position come from the program's step context (its io
    slots), as for every op that names a state.
  }];
  let arguments = (ins Glm_Rows:$queries, Glm_Rows:$keys, Glm_Rows:$gates,
                       Glm_Rows:$head_weights, FlatSymbolRefAttr:$ape,
                       FlatSymbolRefAttr:$state, I64Attr:$num_heads, I64Attr:$head_dim,
                       I64Attr:$kpool, I64Attr:$topk);
  let results = (outs Glm_IndexTensor:$result);
  let assemblyFormat = [{
    $queries `,` $keys `,` $gates `,` $head_weights `,` $ape `,` `state` $state attr-dict `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
  let extraClassDeclaration = Glm_ContractOf<["ape", "state"]>.decl #
      Glm_StepContextOf<["positions", "sequence_slots", "page_table"]>.decl;
}

def Glm_MlaSparseAttentionOp : Glm_Op<"mla_sparse_attention",
    [Glm_SymbolContract, Glm_ReadsStepContext, DeclareOpInterfaceMethods<SymbolUserOpInterface>]> {
  let summary = "NoPE multi-head latent attention over the indexer's token set";
  let description = [{
    Appends this step's latent rows c ([N, r]) to `state`. Per head h, with
    K_h = c Wk_h^T and V_h = c Wv_h^T from kv_b ([heads*(dk+dv), r], each head's
    dk key rows then dv value rows):
    `o[t, h] = Σ_{j∈Sel(t)} softmax_j(q[t,h]·K_h[j] scale) V_h[j]`.
    q: [N, heads*dk], selection: [N, K] (-1 = none), result: [N, heads*dv].
  }];
  let arguments = (ins Glm_Rows:$queries, Glm_Rows:$latent, Glm_IndexTensor:$selection,
                       FlatSymbolRefAttr:$kv_b, FlatSymbolRefAttr:$state, I64Attr:$num_heads,
                       I64Attr:$qk_head_dim, I64Attr:$v_head_dim, F64Attr:$scale);
  let results = (outs Glm_Rows:$result);
  let assemblyFormat = [{
    $queries `,` $latent `,` $selection `,` $kv_b `,` `state` $state attr-dict `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
  let extraClassDeclaration = Glm_ContractOf<["kv_b", "state"]>.decl #
      Glm_StepContextOf<["positions", "sequence_slots", "page_table"]>.decl;
}

//===----------------------------------------------------------------------===//
// MLPs and MoE
//===----------------------------------------------------------------------===//

def Glm_SwiGluOp : Glm_Op<"swiglu", [Pure, SameOperandsAndResultType]> {
  let summary = "clamped SwiGLU: silu(min(gate, limit)) * clamp(up, -limit, limit)";
  let arguments = (ins Glm_Rows:$gate, Glm_Rows:$up, F64Attr:$limit);
  let results = (outs Glm_Rows:$result);
  let assemblyFormat = "$gate `,` $up attr-dict `:` type($result)";
}

def Glm_MoeRouterOp : Glm_Op<"moe_router", [Glm_SymbolContract, Pure, DeclareOpInterfaceMethods<SymbolUserOpInterface>]> {
  let summary = "sigmoid router with bias-corrected top-k selection";
  let description = [{
    `s = sigmoid(x W^T)` in f32 (W: [E, H]); experts chosen by top-k of
    `s + bias` (group-limited when n_group > 1; ties to the lower index);
    weights `s[e] / (Σ_sel s + 1e-20) * scaling` (or `s[e] * scaling` without
    norm_topk). Results: ids [N, k] i32, weights [N, k] f32.
  }];
  let arguments = (ins Glm_Rows:$input, FlatSymbolRefAttr:$weight,
                       FlatSymbolRefAttr:$bias, I64Attr:$top_k, I64Attr:$n_group,
                       I64Attr:$topk_group, BoolAttr:$norm_topk_prob, F64Attr:$scaling);
  let results = (outs Glm_IndexTensor:$experts, Glm_Rows:$weights);
  let assemblyFormat = "$input `,` $weight `,` $bias attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
  let extraClassDeclaration = Glm_ContractOf<["weight", "bias"]>.decl;
}

def Glm_MoeExpertsOp : Glm_Op<"moe_experts", [Glm_SymbolContract, Pure, DeclareOpInterfaceMethods<SymbolUserOpInterface>]> {
  let summary = "the selected routed experts, weighted and summed";
  let description = [{
    `y[n] = Σ_k w[n,k] Expert_{e[n,k]}(x[n])`, each expert a clamped SwiGLU MLP
    with stacked weights gate/up [E, I, H] and down [E, H, I]. The shared expert
    is a separate dense MLP added by the caller. With `expert_shards` = P > 1
    the weights hold E/P experts of one rank, rank r owning expert ids
    [r E/P, (r+1) E/P): the result is that rank's partial sum over its own
    experts (selections elsewhere contribute zero).
  }];
  let arguments = (ins Glm_Rows:$input, Glm_IndexTensor:$experts, Glm_Rows:$weights,
                       FlatSymbolRefAttr:$gate, FlatSymbolRefAttr:$up, FlatSymbolRefAttr:$down,
                       F64Attr:$limit, DefaultValuedAttr<I64Attr, "1">:$expert_shards);
  let results = (outs Glm_Rows:$result);
  let assemblyFormat = [{
    $input `,` $experts `,` $weights `,` $gate `,` $up `,` $down attr-dict `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
  let extraClassDeclaration = Glm_ContractOf<["gate", "up", "down"]>.decl;
}

def Glm_AddOp : Glm_Op<"add", [Pure, SameOperandsAndResultType, Commutative]> {
  let summary = "elementwise sum (plain residuals: the MTP block, the shared expert)";
  let arguments = (ins Glm_Activation:$lhs, Glm_Activation:$rhs);
  let results = (outs Glm_Activation:$result);
  let assemblyFormat = "$lhs `,` $rhs attr-dict `:` type($result)";
}

def Glm_ConcatOp : Glm_Op<"concat", [Pure]> {
  let summary = "concatenates rows along the last dimension (MTP's [e, h])";
  let arguments = (ins Variadic<Glm_Rows>:$inputs);
  let results = (outs Glm_Rows:$result);
  let assemblyFormat = "$inputs attr-dict `:` type($inputs) `->` type($result)";
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// The head, sampling and collectives
//===----------------------------------------------------------------------===//

def Glm_LastRowsOp : Glm_Op<"last_rows", [Glm_ReadsStepContext, Pure]> {
  let summary = "each sequence's last row of the step";
  let description = [{
    x: [B R, D] -> [B, D]: row b is the last row of sequence b's rows
    [b R, (b + 1) R) that holds a token (padding rows, which the step context
    marks, hold none). A prefill chunk that serves reads only its last row's
    logits, so the head runs on that row alone.
  }];
  let arguments = (ins Glm_Rows:$input);
  let results = (outs Glm_Rows:$result);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($result)";
  let hasVerifier = 1;
  // The positions say which rows hold tokens; the head after it runs on the picked rows.
  let extraClassDeclaration = Glm_StepContextOf<["positions"], /*picks=*/1>.decl;
}

def Glm_CountTokensOp : Glm_Op<"count_tokens", [Glm_SymbolContract, Glm_ReadsStepContext,
    DeclareOpInterfaceMethods<SymbolUserOpInterface>]> {
  let summary = "counts each sequence's tokens for the sampler's penalties";
  let description = [{
    For each row holding token t of the sequence in slot s: `counts[s][t]` gets
    its prompt bit when the row's position is below the sequence's prompt
    length (its sampling parameters), and one more generated occurrence
    otherwise (kernels/count_tokens/count_tokens.h). Every input token of every
    program passes through it, so the counts are always those of the tokens
    the sequence holds. ids: [N]; `counts`: [V] a sequence.
  }];
  let arguments = (ins Glm_TokenIds:$ids, FlatSymbolRefAttr:$counts);
  let assemblyFormat = "$ids `,` `counts` $counts attr-dict `:` type($ids)";
  let extraClassDeclaration = Glm_ContractOf<["counts"]>.decl #
      Glm_StepContextOf<["positions", "sequence_slots", "sampling_params"]>.decl;
}

def Glm_SampleOp : Glm_Op<"sample", [Glm_SymbolContract, Glm_ReadsStepContext,
    DeclareOpInterfaceMethods<SymbolUserOpInterface>]> {
  let summary = "picks the next token of each row";
  let description = [{
    The sampler of kernels/sample/sample.h: each row's logits masked, biased
    and penalized (by the sequence's `counts`) as its sequence's sampling
    parameters say, then greedy (argmax, ties to the lower id) when `greedy` or
    at temperature 0, else temperature / top-k / top-p / min-p with the draw
    keyed by (seed, position), so a reply does not depend on batching.
    logits: [N, V] -> ids [N, 1 + K] (the token, then the K most likely) and
    their logprobs [N, 1 + K], K = 20.
  }];
  let arguments = (ins Glm_Rows:$logits, FlatSymbolRefAttr:$counts, UnitAttr:$greedy);
  let results = (outs 2DTensorOf<[I32]>:$ids, 2DTensorOf<[F32]>:$logprobs);
  let assemblyFormat = [{
    $logits `,` `counts` $counts attr-dict `:` type($logits) `->` type($ids) `,` type($logprobs)
  }];
  let hasVerifier = 1;
  let extraClassDeclaration = Glm_ContractOf<["counts"]>.decl #
      Glm_StepContextOf<["positions", "sequence_slots", "sampling_params", "logit_bias",
                         "token_mask"]>.decl;
}

def Glm_AllGatherOp : Glm_Op<"all_gather", [Pure]> {
  let summary = "concatenates every rank's piece along `axis`";
  let arguments = (ins Glm_Activation:$input, I64Attr:$axis, I64Attr:$world);
  let results = (outs Glm_Activation:$result);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($result)";
  let hasVerifier = 1;
}

def Glm_AllReduceOp : Glm_Op<"all_reduce", [Pure, SameOperandsAndResultType]> {
  let summary = "sums every rank's partial value";
  let arguments = (ins Glm_Activation:$input, I64Attr:$world);
  let results = (outs Glm_Activation:$result);
  let assemblyFormat = "$input attr-dict `:` type($result)";
}

#endif // GLM_IR_GLMOPS_TD
