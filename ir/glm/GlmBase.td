//===- GlmBase.td - the glm dialect and its attributes ------*- tablegen -*-===//
//
// The glm dialect: GLM-5.3's computation as a value-semantics graph, one op per
// Hugging Face module, with weights and decode state as module-level symbols.
//
//===----------------------------------------------------------------------===//

#ifndef GLM_IR_GLMBASE_TD
#define GLM_IR_GLMBASE_TD

include "mlir/IR/OpBase.td"
include "mlir/IR/AttrTypeBase.td"
include "mlir/IR/EnumAttr.td"

def Glm_Dialect : Dialect {
  let name = "glm";
  let cppNamespace = "::glm::ir";
  let summary = "GLM-5.3 model computations at the granularity of the reference modules";
  let description = [{
    A program (one `func.func` per prefill chunk size or decode batch shape) is a
    graph of glm ops over ranked f32 tensors of activations. Tokens are flattened:
    N = B * R rows for decode, N = C for a prefill chunk. Weights are `glm.weight`
    symbols that name checkpoint tensors; the per-sequence decode state (KDA
    recurrent and conv state, DSA latent rows and pooled index keys) are
    `glm.state` symbols that ops read and update. Every op's location is a NameLoc
    `blk.<layer>.<block>.<name>`, the name the plan and tensor dumps use.
  }];
  let useDefaultAttributePrinterParser = 1;
}

class Glm_Op<string mnemonic, list<Trait> traits = []>
    : Op<Glm_Dialect, mnemonic, traits>;

class Glm_Attr<string name, string attrMnemonic, list<Trait> traits = []>
    : AttrDef<Glm_Dialect, name, traits> {
  let mnemonic = attrMnemonic;
}

//===----------------------------------------------------------------------===//
// Enums
//===----------------------------------------------------------------------===//

def Glm_WeightFormat : I32EnumAttr<"WeightFormat", "how a checkpoint stores a weight", [
    I32EnumAttrCase<"BF16", 0, "bfloat16">,
    I32EnumAttrCase<"F16", 1, "float16">,
    I32EnumAttrCase<"F32", 2, "float32">,
    I32EnumAttrCase<"FP8", 3, "fp8_e4m3">,
    I32EnumAttrCase<"EXL3", 4, "exl3">,
  ]> {
  let genSpecializedAttr = 0;
  let cppNamespace = "::glm::ir";
}
def Glm_WeightFormatAttr : EnumAttr<Glm_Dialect, Glm_WeightFormat, "format"> {
  let assemblyFormat = "`<` $value `>`";
}

def Glm_DenseEncoding : I32EnumAttr<"DenseEncoding",
    "how a dense weight is held in the weights arena (kernels/common/DenseFormats.h)", [
    I32EnumAttrCase<"Plain", 0, "plain">,
    I32EnumAttrCase<"Q4", 1, "q4">,
    I32EnumAttrCase<"Fp8", 2, "fp8">,
  ]> {
  let genSpecializedAttr = 0;
  let cppNamespace = "::glm::ir";
}
def Glm_DenseEncodingAttr : EnumAttr<Glm_Dialect, Glm_DenseEncoding, "encoding"> {
  let assemblyFormat = "`<` $value `>`";
}

def Glm_ShardKind : I32EnumAttr<"ShardKind", "how a tensor is split across TP ranks", [
    I32EnumAttrCase<"Replicated", 0, "replicated">,
    I32EnumAttrCase<"Column", 1, "column">,
    I32EnumAttrCase<"Row", 2, "row">,
    I32EnumAttrCase<"Expert", 3, "expert">,
    I32EnumAttrCase<"Head", 4, "head">,
  ]> {
  let genSpecializedAttr = 0;
  let cppNamespace = "::glm::ir";
}

def Glm_ShardAttr : Glm_Attr<"Shard", "shard"> {
  let summary = "how a value or weight is split across tensor-parallel ranks";
  let description = [{
    `#glm.shard<replicated>`: every rank holds all of it. `#glm.shard<column, 0>`:
    split along dimension `dim` (a linear weight's output rows, a head axis, ...).
    `#glm.shard<row, 1>`: split along the contraction dimension, so partial sums
    need an all-reduce. `#glm.shard<expert, 0>`: whole experts per rank.
    `#glm.shard<head, 1>`: split by attention heads along `dim`.
  }];
  let parameters = (ins EnumParameter<Glm_ShardKind>:$kind, DefaultValuedParameter<"int64_t", "0">:$dim);
  let assemblyFormat = "`<` $kind (`,` $dim^)? `>`";
}

def Glm_StateKind : I32EnumAttr<"StateKind", "what a per-sequence state holds", [
    I32EnumAttrCase<"KdaRecurrent", 0, "kda_recurrent">,
    I32EnumAttrCase<"ConvWindow", 1, "conv_window">,
    I32EnumAttrCase<"MlaLatent", 2, "mla_latent">,
    I32EnumAttrCase<"IndexKeys", 3, "index_keys">,
    I32EnumAttrCase<"TokenCounts", 4, "token_counts">,
  ]> {
  let genSpecializedAttr = 0;
  let cppNamespace = "::glm::ir";
}
def Glm_StateKindAttr : EnumAttr<Glm_Dialect, Glm_StateKind, "state_kind"> {
  let assemblyFormat = "`<` $value `>`";
}

//===----------------------------------------------------------------------===//
// Type constraints
//===----------------------------------------------------------------------===//

def Glm_Activation : RankedTensorOf<[F32, BF16]>;
def Glm_Rows : 2DTensorOf<[F32, BF16]>;     // [N, D]
def Glm_Streams : 3DTensorOf<[F32, BF16]>;  // [N, S, H]
def Glm_TokenIds : 1DTensorOf<[I32]>;       // [N]
def Glm_IndexTensor : 2DTensorOf<[I32]>;    // [N, K]

#endif // GLM_IR_GLMBASE_TD
