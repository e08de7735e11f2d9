// RUN: glm-opt %s --plan-form-segments | FileCheck %s

// The host must act only at a collective, which it runs through its communicator between graphs:
// each segment ends after one, or at the program's end, and says why.
// CHECK-LABEL: plan.program @tp
// CHECK-SAME: segments = [#plan.segment<0 + 2, "collective", "all_reduce blk.0.attn.o_proj.reduce: the host runs collectives through its communicator, between graphs">, #plan.segment<2 + 2, "collective", "all_gather blk.1.ffn.gather: the host runs collectives through its communicator, between graphs">, #plan.segment<4 + 1, "program_end", "the program's end">]
// A collective at the start is a segment of its own; none follows one that ends the program.
// CHECK-LABEL: plan.program @edges
// CHECK-SAME: segments = [#plan.segment<0 + 1, "collective", {{.*}}>, #plan.segment<1 + 2, "collective", {{.*}}>]
// Without collectives a program is one segment: one CUDA graph.
// CHECK-LABEL: plan.program @one
// CHECK-SAME: segments = [#plan.segment<0 + 2, "program_end", "the program's end">]
// CHECK-LABEL: plan.program @empty
// CHECK-SAME: segments = []
module {
  plan.program @tp attributes {batch = 1 : i64, kind = "decode", rows = 1 : i64} {
    %x = plan.alloc "x" : <[4], f32>
    plan.step "add" "a"(%x, %x : !plan.buffer<[4], f32>, !plan.buffer<[4], f32>) -> (%x : !plan.buffer<[4], f32>) {bytes_read = 0 : i64, bytes_written = 0 : i64, flops = 0 : i64, params = {}, states = [], weights = []}
    plan.step "all_reduce" "blk.0.attn.o_proj.reduce"(%x : !plan.buffer<[4], f32>) -> (%x : !plan.buffer<[4], f32>) {bytes_read = 0 : i64, bytes_written = 0 : i64, flops = 0 : i64, params = {world = 2 : i64}, states = [], weights = []}
    plan.step "add" "b"(%x, %x : !plan.buffer<[4], f32>, !plan.buffer<[4], f32>) -> (%x : !plan.buffer<[4], f32>) {bytes_read = 0 : i64, bytes_written = 0 : i64, flops = 0 : i64, params = {}, states = [], weights = []}
    plan.step "all_gather" "blk.1.ffn.gather"(%x : !plan.buffer<[4], f32>) -> (%x : !plan.buffer<[4], f32>) {bytes_read = 0 : i64, bytes_written = 0 : i64, flops = 0 : i64, params = {axis = 1 : i64, world = 2 : i64}, states = [], weights = []}
    plan.step "add" "c"(%x, %x : !plan.buffer<[4], f32>, !plan.buffer<[4], f32>) -> (%x : !plan.buffer<[4], f32>) {bytes_read = 0 : i64, bytes_written = 0 : i64, flops = 0 : i64, params = {}, states = [], weights = []}
  }
  plan.program @edges attributes {batch = 1 : i64, kind = "decode", rows = 1 : i64} {
    %x = plan.alloc "x" : <[4], f32>
    plan.step "all_reduce" "r0"(%x : !plan.buffer<[4], f32>) -> (%x : !plan.buffer<[4], f32>) {bytes_read = 0 : i64, bytes_written = 0 : i64, flops = 0 : i64, params = {world = 2 : i64}, states = [], weights = []}
    plan.step "add" "a"(%x, %x : !plan.buffer<[4], f32>, !plan.buffer<[4], f32>) -> (%x : !plan.buffer<[4], f32>) {bytes_read = 0 : i64, bytes_written = 0 : i64, flops = 0 : i64, params = {}, states = [], weights = []}
    plan.step "all_reduce" "r1"(%x : !plan.buffer<[4], f32>) -> (%x : !plan.buffer<[4], f32>) {bytes_read = 0 : i64, bytes_written = 0 : i64, flops = 0 : i64, params = {world = 2 : i64}, states = [], weights = []}
  }
  plan.program @one attributes {batch = 1 : i64, kind = "decode", rows = 1 : i64} {
    %x = plan.alloc "x" : <[4], f32>
    plan.step "add" "a"(%x, %x : !plan.buffer<[4], f32>, !plan.buffer<[4], f32>) -> (%x : !plan.buffer<[4], f32>) {bytes_read = 0 : i64, bytes_written = 0 : i64, flops = 0 : i64, params = {}, states = [], weights = []}
    plan.step "add" "b"(%x, %x : !plan.buffer<[4], f32>, !plan.buffer<[4], f32>) -> (%x : !plan.buffer<[4], f32>) {bytes_read = 0 : i64, bytes_written = 0 : i64, flops = 0 : i64, params = {}, states = [], weights = []}
  }
  plan.program @empty attributes {batch = 1 : i64, kind = "decode", rows = 1 : i64} {
  }
}
