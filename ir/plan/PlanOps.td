//===- PlanOps.td - the plan dialect ------------------------*- tablegen -*-===//
//
// The execution-level dialect: one op per entry of runtime/schema/plan.fbs.
// glm-to-plan produces it with a buffer per value; plan-assign-arenas gives
// every buffer a slice of an arena; plan-form-segments groups steps into CUDA
// graphs; the emitter writes the flatbuffer field by field.
//
//===----------------------------------------------------------------------===//

#ifndef GLM_IR_PLANOPS_TD
#define GLM_IR_PLANOPS_TD

include "mlir/IR/OpBase.td"
include "mlir/IR/AttrTypeBase.td"
include "mlir/IR/SymbolInterfaces.td"

def Plan_Dialect : Dialect {
  let name = "plan";
  let cppNamespace = "::glm::planir";
  let summary = "allocated kernel launches and collectives, one to one with the plan file";
  let useDefaultTypePrinterParser = 1;
  let useDefaultAttributePrinterParser = 1;
}

class Plan_Op<string mnemonic, list<Trait> traits = []> : Op<Plan_Dialect, mnemonic, traits>;

def Plan_BufferType : TypeDef<Plan_Dialect, "Buffer"> {
  let mnemonic = "buffer";
  let summary = "a dense row-major tensor in an arena";
  let parameters = (ins ArrayRefParameter<"int64_t">:$shape, "mlir::Type":$elementType);
  let assemblyFormat = "`<` `[` $shape `]` `,` $elementType `>`";
  let extraClassDeclaration = [{
    /// Bytes the buffer occupies (element width rounded up to a byte).
    uint64_t getByteSize() const;
  }];
}

//===----------------------------------------------------------------------===//
// Kernel launches: what plan-select-kernels decides for each step of a GPU plan
//===----------------------------------------------------------------------===//

class Plan_Attr<string name, string attrMnemonic> : AttrDef<Plan_Dialect, name> {
  let mnemonic = attrMnemonic;
}

def Plan_ArgFieldAttr : Plan_Attr<"ArgField", "field"> {
  let summary = "a constant field of a launch's argument struct";
  let description = [{
    `value` (an integer of the field's width, or f32/f64) at byte `offset`,
    under the field's name in the op's <op>_gpu.h struct.
  }];
  let parameters = (ins StringRefParameter<>:$name, "int64_t":$offset, "mlir::Attribute":$value);
  let assemblyFormat = "`<` $name `at` $offset `=` $value `>`";
}

def Plan_ArgBindAttr : Plan_Attr<"ArgBind", "bind"> {
  let summary = "an address field of a launch's argument struct, filled in by the engine";
  let description = [{
    The device address of the step's `source` number `index` (operand, result,
    weight, state) or of the workspace arena, plus `add` bytes, written at byte
    `offset` when the plan is loaded; `rank_times` writes the int32 rank · add.
  }];
  let parameters = (ins StringRefParameter<>:$name, "int64_t":$offset,
                        StringRefParameter<>:$source, "int64_t":$index, "int64_t":$add);
  let assemblyFormat = "`<` $name `at` $offset `=` $source $index `+` $add `>`";
}

def Plan_LaunchAttr : Plan_Attr<"Launch", "launch"> {
  let summary = "one kernel launch of a step";
  let description = [{
    `kernel` names a plan.kernel of the module; `grid` and `block` have three
    entries; `smem` is the dynamic shared memory in bytes. The argument struct
    is `args_size` bytes: its `fields` (plan.field constants and plan.bind
    addresses), zero elsewhere.
  }];
  let parameters = (ins "mlir::FlatSymbolRefAttr":$kernel, ArrayRefParameter<"int64_t">:$grid,
                        ArrayRefParameter<"int64_t">:$block, "int64_t":$smem,
                        "int64_t":$argsSize, "mlir::ArrayAttr":$fields);
  let assemblyFormat = [{
    `<` $kernel `grid` `[` $grid `]` `block` `[` $block `]` `smem` $smem `args` $argsSize
    $fields `>`
  }];
}

def Plan_SegmentAttr : Plan_Attr<"Segment", "segment"> {
  let summary = "a run of a program's steps replayed as one CUDA graph";
  let description = [{
    Steps [first, first + count); `end` is "program_end" or "collective" (the
    last step is a collective the host runs after the graph), `reason` says why
    in words.
  }];
  let parameters = (ins "int64_t":$first, "int64_t":$count, StringRefParameter<>:$end,
                        StringRefParameter<>:$reason);
  let assemblyFormat = "`<` $first `+` $count `,` $end `,` $reason `>`";
}

//===----------------------------------------------------------------------===//
// Module-level entries
//===----------------------------------------------------------------------===//

def Plan_TargetOp : Plan_Op<"target"> {
  let summary = "the machine the plan is compiled for";
  let arguments = (ins StrAttr:$name, I64Attr:$sm_count, I64Attr:$shared_memory_per_block,
                       I64Attr:$memory_bytes, F64Attr:$bandwidth_bytes_per_s, I64Attr:$tp,
                       StrAttr:$precision);
  let assemblyFormat = "$name attr-dict";
}

def Plan_ArenaOp : Plan_Op<"arena", [Symbol]> {
  let summary = "one allocation per rank";
  let description = [{ `kind` is weights, activations, state, io or workspace. }];
  let arguments = (ins SymbolNameAttr:$sym_name, StrAttr:$kind, I64Attr:$size,
                       I64Attr:$alignment);
  let assemblyFormat = "$sym_name $kind attr-dict";
}

def Plan_WeightOp : Plan_Op<"weight", [Symbol]> {
  let summary = "a checkpoint tensor bound into the weights arena";
  let description = [{
    `rank_shape` is this rank's slice of `global_shape` along `shard_dim`.
    `encoding` is how the arena holds it (plain, q4, fp8:
    kernels/common/DenseFormats.h); `element` is then u8 or f8E4M3FN.
    `offset` and `size` locate it in the weights arena once assigned.
  }];
  let arguments = (ins SymbolNameAttr:$sym_name, StrAttr:$checkpoint, I64Attr:$experts,
                       StrAttr:$format, DefaultValuedStrAttr<StrAttr, "plain">:$encoding,
                       DenseI64ArrayAttr:$global_shape,
                       StrAttr:$shard, I64Attr:$shard_dim, DenseI64ArrayAttr:$rank_shape,
                       TypeAttr:$element, I64Attr:$size, OptionalAttr<I64Attr>:$offset);
  let assemblyFormat = "$sym_name attr-dict";
}

def Plan_StateOp : Plan_Op<"state", [Symbol]> {
  let summary = "per-sequence slots or per-token rows in the page pool";
  let arguments = (ins SymbolNameAttr:$sym_name, StrAttr:$kind, DenseI64ArrayAttr:$unit_shape,
                       TypeAttr:$element, BoolAttr:$paged, OptionalAttr<I64Attr>:$offset,
                       OptionalAttr<I64Attr>:$size, OptionalAttr<I64Attr>:$offset_in_page);
  let assemblyFormat = "$sym_name attr-dict";
}

def Plan_StatePoolOp : Plan_Op<"state_pool"> {
  let summary = "sizes of the state arena: slots and the DSA page pool";
  let arguments = (ins I64Attr:$max_sequences, I64Attr:$max_context, I64Attr:$page_tokens,
                       OptionalAttr<I64Attr>:$page_bytes, OptionalAttr<I64Attr>:$page_count,
                       OptionalAttr<I64Attr>:$pool_offset);
  let assemblyFormat = "attr-dict";
}

def Plan_KernelOp : Plan_Op<"kernel", [Symbol]> {
  let summary = "an instance of a kernel template that the plan's steps launch";
  let description = [{
    `instance` is the NVRTC name expression, `header` the source defining it.
    plan-compile-kernels adds `entry` (the mangled symbol), `cubin` (the image
    for the target) and `source_hash`. The symbol is the instance without its
    glm::kernels:: qualifications.
  }];
  let arguments = (ins SymbolNameAttr:$sym_name, StrAttr:$instance, StrAttr:$header,
                       OptionalAttr<StrAttr>:$entry, OptionalAttr<ElementsAttr>:$cubin,
                       OptionalAttr<StrAttr>:$source_hash);
  let assemblyFormat = "$sym_name $instance `from` $header attr-dict";
}

def Plan_ProgramOp : Plan_Op<"program", [Symbol, SingleBlock, NoTerminator]> {
  let summary = "one static-shape program: a prefill chunk or a decode step";
  let description = [{
    `last_row_logits`: the logits io slot holds each sequence's last row only,
    [batch, vocab] (else every row's, [batch · rows, vocab]).
  }];
  let arguments = (ins SymbolNameAttr:$sym_name, StrAttr:$kind, I64Attr:$batch, I64Attr:$rows,
                       UnitAttr:$last_row_logits,
                       OptionalAttr<TypedArrayAttrBase<Plan_SegmentAttr, "segments">>:$segments);
  let regions = (region SizedRegion<1>:$body);
  let assemblyFormat = "$sym_name attr-dict-with-keyword $body";
}

//===----------------------------------------------------------------------===//
// Program contents
//===----------------------------------------------------------------------===//

def Plan_AllocOp : Plan_Op<"alloc"> {
  let summary = "a buffer for one value: activations, or an io slot the host reads or writes";
  let description = [{
    `io` names the io slot kind (token_ids, logits, sampled_ids, ...) for
    buffers in the io arena; others live in the activations arena. `offset`
    is set by plan-assign-arenas.
  }];
  let arguments = (ins StrAttr:$name, OptionalAttr<StrAttr>:$io, OptionalAttr<I64Attr>:$offset);
  let results = (outs Plan_BufferType:$buffer);
  let assemblyFormat = "$name attr-dict `:` type($buffer)";
}

def Plan_StepOp : Plan_Op<"step", [AttrSizedOperandSegments]> {
  let summary = "one op of the model: a kernel launch, or a collective";
  let description = [{
    `op` is the glm op (linear, kda, all_reduce, ...: kernels/OpTable.h); `inputs`
    are read, the `outputs` buffers written. `weights` and `states` name the
    plan.weight and plan.state entries it uses, in the op's contract order;
    `params` carry the op's parameters (eps, head counts, ...). On GPU targets
    plan-select-kernels adds `launches` (the kernels it runs, in order) and
    `workspace` (the scratch bytes they need), or `no_kernel` (why there is no
    CUDA kernel for it yet).
  }];
  let arguments = (ins StrAttr:$op, StrAttr:$name, Variadic<Plan_BufferType>:$inputs,
                       Variadic<Plan_BufferType>:$outputs, SymbolRefArrayAttr:$weights,
                       SymbolRefArrayAttr:$states, DictionaryAttr:$params,
                       I64Attr:$bytes_read, I64Attr:$bytes_written, I64Attr:$flops,
                       OptionalAttr<TypedArrayAttrBase<Plan_LaunchAttr, "launches">>:$launches,
                       OptionalAttr<I64Attr>:$workspace, OptionalAttr<StrAttr>:$no_kernel);
  let assemblyFormat = [{
    $op $name `(` ($inputs^ `:` type($inputs))? `)` `->` `(` ($outputs^ `:` type($outputs))? `)`
    attr-dict
  }];
  let extraClassDeclaration = [{
    /// A cross-rank collective: it runs no kernel of its own and ends a segment.
    bool isCollective() { return getOp() == "all_reduce" || getOp() == "all_gather"; }
  }];
}

#endif // GLM_IR_PLANOPS_TD
