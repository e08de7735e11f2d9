// RUN: glm-opt %s --split-input-file --plan-select-kernels 2>&1 | FileCheck %s

// Each step's kernels, launch geometry and argument struct come from its op's adapter, for the
// plan's target, and every argument is a named field: a constant or an address. A decode linear
// streams its weight on tensor cores, its blocks sized to the target's SMs; a prefill linear runs
// wgmma tiles on sm_90a. An op or shape without a CUDA kernel is recorded (no_kernel) with a
// warning; collectives get no launches.

// CHECK: warning: 1 steps have no CUDA kernel yet and launch nothing (the plan cannot run on a GPU until they do); the first: step blk.0.cat: concat of 5 inputs (the kernel takes 4)
// CHECK: plan.arena @workspace "workspace" {alignment = 256 : i64, size = 0 : i64}
// CHECK: plan.kernel @"linearDecodeMmaKernel<Bf16, Bf16>" "glm::kernels::linearDecodeMmaKernel<glm::kernels::Bf16, glm::kernels::Bf16>" from "kernels/linear/linear.cuh"
// CHECK: plan.kernel @"linearPrefillWgmmaKernel<Bf16, Bf16>"
// CHECK: plan.kernel @"rmsNormKernel<Bf16, Bf16>"
// CHECK: plan.program @decode_b1_r1
// CHECK: plan.step "linear" "blk.0.q"
// CHECK-SAME: launches = [#plan.launch<@"linearDecodeMmaKernel<Bf16, Bf16>" grid[128, 1, 1] block[512, 1, 1] smem 32768 args 88 [#plan.bind<"x" at 0 = "operand" 0 + 0>, #plan.bind<"weight" at 8 = "weight" 0 + 0>, #plan.bind<"y" at 32 = "result" 0 + 0>, #plan.field<"rows" at 40 = 1 : i64>, #plan.field<"inFeatures" at 48 = 64 : i64>, #plan.field<"outFeatures" at 56 = 4096 : i64>, #plan.field<"biasBf16" at 64 = 0 : i32>]>]
// CHECK-SAME: workspace = 0 : i64
// CHECK: plan.step "all_reduce"
// CHECK-NOT: launches
// CHECK-SAME: weights = []}
// An fp8 weight's kernel reads the block scales that follow its values in the slice (its 64
// outputs split K over a cluster of 4 blocks, to cover more SMs).
// CHECK: plan.step "linear" "blk.0.fp8"
// CHECK-SAME: #plan.launch<@"linearDecodeQuantSplitKernel<Bf16, Fp8E4m3, 2, 4>"
// CHECK-SAME: #plan.bind<"weightScaleInv" at 16 = "weight" 0 + 262144>
// CHECK: plan.step "concat" "blk.0.cat"
// CHECK-SAME: no_kernel = "step blk.0.cat: concat of 5 inputs (the kernel takes 4)"
// CHECK: plan.program @prefill_c512
// CHECK: plan.step "linear" "blk.0.q"
// CHECK-SAME: launches = [#plan.launch<@"linearPrefillWgmmaKernel<Bf16, Bf16>" grid[4, 16, 1] block[256, 1, 1] smem 197632
// CHECK-SAME: #plan.field<"rows" at 40 = 512 : i64>
// CHECK: plan.step "rms_norm" "blk.0.norm"
// CHECK-SAME: launches = [#plan.launch<@"rmsNormKernel<Bf16, Bf16>" grid[512, 1, 1] block[256, 1, 1] smem 0 args 48 [#plan.bind<"x" at 0 = "operand" 0 + 0>, #plan.bind<"out" at 16 = "result" 0 + 0>, #plan.field<"rows" at 24 = 512 : i64>, #plan.field<"dim" at 32 = 4096 : i64>, #plan.field<"eps" at 40 = 9.99999974E-6 : f32>]>]

module {
  plan.target "sm_90a" {bandwidth_bytes_per_s = 4.8e12 : f64, memory_bytes = 0 : i64, precision = "bf16", shared_memory_per_block = 232448 : i64, sm_count = 132 : i64, tp = 1 : i64}
  plan.arena @weights "weights" {alignment = 256 : i64, size = 786560 : i64}
  plan.arena @activations "activations" {alignment = 256 : i64, size = 8454144 : i64}
  plan.arena @state "state" {alignment = 256 : i64, size = 0 : i64}
  plan.arena @io "io" {alignment = 256 : i64, size = 0 : i64}
  plan.state_pool {max_context = 256 : i64, max_sequences = 1 : i64, page_tokens = 64 : i64, page_bytes = 0 : i64, page_count = 0 : i64, pool_offset = 0 : i64}
  plan.weight @w {checkpoint = "w", element = bf16, experts = 0 : i64, format = "bfloat16", global_shape = array<i64: 4096, 64>, rank_shape = array<i64: 4096, 64>, shard = "replicated", shard_dim = 0 : i64, size = 524288 : i64, offset = 0 : i64}
  plan.weight @w8 {checkpoint = "w8", element = f8E4M3FN, encoding = "fp8", experts = 0 : i64, format = "fp8_e4m3", global_shape = array<i64: 64, 4096>, rank_shape = array<i64: 64, 4096>, shard = "replicated", shard_dim = 0 : i64, size = 262272 : i64, offset = 524288 : i64}
  plan.program @decode_b1_r1 attributes {batch = 1 : i64, kind = "decode", rows = 1 : i64} {
    %x = plan.alloc "x" {offset = 0 : i64} : <[1, 64], bf16>
    %y = plan.alloc "y" {offset = 256 : i64} : <[1, 4096], bf16>
    %u = plan.alloc "u" {offset = 8448 : i64} : <[1, 100], bf16>
    %v = plan.alloc "v" {offset = 8704 : i64} : <[1, 500], bf16>
    plan.step "linear" "blk.0.q"(%x : !plan.buffer<[1, 64], bf16>) -> (%y : !plan.buffer<[1, 4096], bf16>) {bytes_read = 0 : i64, bytes_written = 0 : i64, flops = 0 : i64, params = {}, states = [], weights = [@w]}
    plan.step "all_reduce" "blk.0.q.all_reduce"(%y : !plan.buffer<[1, 4096], bf16>) -> (%y : !plan.buffer<[1, 4096], bf16>) {bytes_read = 0 : i64, bytes_written = 0 : i64, flops = 0 : i64, params = {world = 2 : i64}, states = [], weights = []}
    plan.step "linear" "blk.0.fp8"(%y : !plan.buffer<[1, 4096], bf16>) -> (%x : !plan.buffer<[1, 64], bf16>) {bytes_read = 0 : i64, bytes_written = 0 : i64, flops = 0 : i64, params = {}, states = [], weights = [@w8]}
    plan.step "concat" "blk.0.cat"(%u, %u, %u, %u, %u : !plan.buffer<[1, 100], bf16>, !plan.buffer<[1, 100], bf16>, !plan.buffer<[1, 100], bf16>, !plan.buffer<[1, 100], bf16>, !plan.buffer<[1, 100], bf16>) -> (%v : !plan.buffer<[1, 500], bf16>) {bytes_read = 0 : i64, bytes_written = 0 : i64, flops = 0 : i64, params = {}, states = [], weights = []}
  }
  plan.program @prefill_c512 attributes {batch = 1 : i64, kind = "prefill", rows = 512 : i64} {
    %x = plan.alloc "x" {offset = 0 : i64} : <[512, 64], bf16>
    %y = plan.alloc "y" {offset = 65536 : i64} : <[512, 4096], bf16>
    %z = plan.alloc "z" {offset = 4259840 : i64} : <[512, 4096], bf16>
    plan.step "linear" "blk.0.q"(%x : !plan.buffer<[512, 64], bf16>) -> (%y : !plan.buffer<[512, 4096], bf16>) {bytes_read = 0 : i64, bytes_written = 0 : i64, flops = 0 : i64, params = {}, states = [], weights = [@w]}
    plan.step "rms_norm" "blk.0.norm"(%y : !plan.buffer<[512, 4096], bf16>) -> (%z : !plan.buffer<[512, 4096], bf16>) {bytes_read = 0 : i64, bytes_written = 0 : i64, flops = 0 : i64, params = {eps = 1.0e-05 : f64}, states = [], weights = []}
  }
}

// -----

// A GB10 (sm_121a, 48 SMs): the decode linear takes blocks of 64 outputs, which still number more
// than one a wave there, at 8 warps each; prefill runs the mma.sync tiles, whose 64 KB of stages
// fit its 99 KB.
// CHECK-LABEL: plan.target "sm_121a"
// CHECK: plan.step "linear" "blk.0.q"
// CHECK-SAME: #plan.launch<@"linearDecodeMmaKernel<Bf16, Bf16, 4, 1>" grid[64, 1, 1] block[256, 1, 1] smem 32768
// CHECK: plan.program @prefill_c512
// CHECK: plan.step "linear" "blk.0.q"
// CHECK-SAME: #plan.launch<@"linearPrefillMmaKernel<Bf16, Bf16>" grid[4, 32, 1] block[128, 1, 1] smem 65536

module {
  plan.target "sm_121a" {bandwidth_bytes_per_s = 2.73e11 : f64, memory_bytes = 0 : i64, precision = "bf16", shared_memory_per_block = 101376 : i64, sm_count = 48 : i64, tp = 1 : i64}
  plan.arena @weights "weights" {alignment = 256 : i64, size = 786560 : i64}
  plan.arena @activations "activations" {alignment = 256 : i64, size = 8454144 : i64}
  plan.arena @state "state" {alignment = 256 : i64, size = 0 : i64}
  plan.arena @io "io" {alignment = 256 : i64, size = 0 : i64}
  plan.state_pool {max_context = 256 : i64, max_sequences = 1 : i64, page_tokens = 64 : i64, page_bytes = 0 : i64, page_count = 0 : i64, pool_offset = 0 : i64}
  plan.weight @w {checkpoint = "w", element = bf16, experts = 0 : i64, format = "bfloat16", global_shape = array<i64: 4096, 64>, rank_shape = array<i64: 4096, 64>, shard = "replicated", shard_dim = 0 : i64, size = 524288 : i64, offset = 0 : i64}
  plan.weight @w8 {checkpoint = "w8", element = f8E4M3FN, experts = 0 : i64, format = "fp8_e4m3", global_shape = array<i64: 64, 4096>, rank_shape = array<i64: 64, 4096>, shard = "replicated", shard_dim = 0 : i64, size = 262272 : i64, offset = 524288 : i64}
  plan.program @decode_b1_r1 attributes {batch = 1 : i64, kind = "decode", rows = 1 : i64} {
    %x = plan.alloc "x" {offset = 0 : i64} : <[1, 64], bf16>
    %y = plan.alloc "y" {offset = 256 : i64} : <[1, 4096], bf16>
    plan.step "linear" "blk.0.q"(%x : !plan.buffer<[1, 64], bf16>) -> (%y : !plan.buffer<[1, 4096], bf16>) {bytes_read = 0 : i64, bytes_written = 0 : i64, flops = 0 : i64, params = {}, states = [], weights = [@w]}
    plan.step "all_reduce" "blk.0.q.all_reduce"(%y : !plan.buffer<[1, 4096], bf16>) -> (%y : !plan.buffer<[1, 4096], bf16>) {bytes_read = 0 : i64, bytes_written = 0 : i64, flops = 0 : i64, params = {world = 2 : i64}, states = [], weights = []}
    plan.step "linear" "blk.0.fp8"(%y : !plan.buffer<[1, 4096], bf16>) -> (%x : !plan.buffer<[1, 64], bf16>) {bytes_read = 0 : i64, bytes_written = 0 : i64, flops = 0 : i64, params = {}, states = [], weights = [@w8]}
  }
  plan.program @prefill_c512 attributes {batch = 1 : i64, kind = "prefill", rows = 512 : i64} {
    %x = plan.alloc "x" {offset = 0 : i64} : <[512, 64], bf16>
    %y = plan.alloc "y" {offset = 65536 : i64} : <[512, 4096], bf16>
    %z = plan.alloc "z" {offset = 4259840 : i64} : <[512, 4096], bf16>
    plan.step "linear" "blk.0.q"(%x : !plan.buffer<[512, 64], bf16>) -> (%y : !plan.buffer<[512, 4096], bf16>) {bytes_read = 0 : i64, bytes_written = 0 : i64, flops = 0 : i64, params = {}, states = [], weights = [@w]}
    plan.step "rms_norm" "blk.0.norm"(%y : !plan.buffer<[512, 4096], bf16>) -> (%z : !plan.buffer<[512, 4096], bf16>) {bytes_read = 0 : i64, bytes_written = 0 : i64, flops = 0 : i64, params = {eps = 1.0e-05 : f64}, states = [], weights = []}
  }
}

// -----

// The CPU plan: the reference kernels by op, no launches, no workspace.
// CHECK-LABEL: plan.target "cpu"
// CHECK-NOT: launches
// CHECK-NOT: plan.kernel
// CHECK-NOT: workspace

module {
  plan.target "cpu" {bandwidth_bytes_per_s = 0.0 : f64, memory_bytes = 0 : i64, precision = "bf16", shared_memory_per_block = 0 : i64, sm_count = 0 : i64, tp = 1 : i64}
  plan.arena @weights "weights" {alignment = 256 : i64, size = 786560 : i64}
  plan.arena @activations "activations" {alignment = 256 : i64, size = 8454144 : i64}
  plan.arena @state "state" {alignment = 256 : i64, size = 0 : i64}
  plan.arena @io "io" {alignment = 256 : i64, size = 0 : i64}
  plan.state_pool {max_context = 256 : i64, max_sequences = 1 : i64, page_tokens = 64 : i64, page_bytes = 0 : i64, page_count = 0 : i64, pool_offset = 0 : i64}
  plan.weight @w {checkpoint = "w", element = bf16, experts = 0 : i64, format = "bfloat16", global_shape = array<i64: 4096, 64>, rank_shape = array<i64: 4096, 64>, shard = "replicated", shard_dim = 0 : i64, size = 524288 : i64, offset = 0 : i64}
  plan.weight @w8 {checkpoint = "w8", element = f8E4M3FN, experts = 0 : i64, format = "fp8_e4m3", global_shape = array<i64: 64, 4096>, rank_shape = array<i64: 64, 4096>, shard = "replicated", shard_dim = 0 : i64, size = 262272 : i64, offset = 524288 : i64}
  plan.program @decode_b1_r1 attributes {batch = 1 : i64, kind = "decode", rows = 1 : i64} {
    %x = plan.alloc "x" {offset = 0 : i64} : <[1, 64], bf16>
    %y = plan.alloc "y" {offset = 256 : i64} : <[1, 4096], bf16>
    plan.step "linear" "blk.0.q"(%x : !plan.buffer<[1, 64], bf16>) -> (%y : !plan.buffer<[1, 4096], bf16>) {bytes_read = 0 : i64, bytes_written = 0 : i64, flops = 0 : i64, params = {}, states = [], weights = [@w]}
    plan.step "all_reduce" "blk.0.q.all_reduce"(%y : !plan.buffer<[1, 4096], bf16>) -> (%y : !plan.buffer<[1, 4096], bf16>) {bytes_read = 0 : i64, bytes_written = 0 : i64, flops = 0 : i64, params = {world = 2 : i64}, states = [], weights = []}
    plan.step "linear" "blk.0.fp8"(%y : !plan.buffer<[1, 4096], bf16>) -> (%x : !plan.buffer<[1, 64], bf16>) {bytes_read = 0 : i64, bytes_written = 0 : i64, flops = 0 : i64, params = {}, states = [], weights = [@w8]}
  }
  plan.program @prefill_c512 attributes {batch = 1 : i64, kind = "prefill", rows = 512 : i64} {
    %x = plan.alloc "x" {offset = 0 : i64} : <[512, 64], bf16>
    %y = plan.alloc "y" {offset = 65536 : i64} : <[512, 4096], bf16>
    %z = plan.alloc "z" {offset = 4259840 : i64} : <[512, 4096], bf16>
    plan.step "linear" "blk.0.q"(%x : !plan.buffer<[512, 64], bf16>) -> (%y : !plan.buffer<[512, 4096], bf16>) {bytes_read = 0 : i64, bytes_written = 0 : i64, flops = 0 : i64, params = {}, states = [], weights = [@w]}
    plan.step "rms_norm" "blk.0.norm"(%y : !plan.buffer<[512, 4096], bf16>) -> (%z : !plan.buffer<[512, 4096], bf16>) {bytes_read = 0 : i64, bytes_written = 0 : i64, flops = 0 : i64, params = {eps = 1.0e-05 : f64}, states = [], weights = []}
  }
}
