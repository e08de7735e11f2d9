// RUN: glm-opt %s --split-input-file --plan-verify --verify-diagnostics

// Two buffers live at once that share bytes.
module {
  plan.arena @weights "weights" {alignment = 64 : i64, size = 0 : i64}
  plan.arena @activations "activations" {alignment = 64 : i64, size = 128 : i64}
  plan.arena @state "state" {alignment = 64 : i64, size = 0 : i64}
  plan.arena @io "io" {alignment = 64 : i64, size = 0 : i64}
  plan.target "cpu" {bandwidth_bytes_per_s = 0.0 : f64, memory_bytes = 0 : i64, precision = "f32", shared_memory_per_block = 0 : i64, sm_count = 0 : i64, tp = 1 : i64}
  plan.program @p attributes {batch = 1 : i64, kind = "decode", rows = 1 : i64, segments = array<i64: 0, 1>} {
    %x = plan.alloc "x" {offset = 0 : i64} : <[16], f32>
    // expected-error @+1 {{shares bytes with x while both are live}}
    %y = plan.alloc "y" {offset = 32 : i64} : <[16], f32>
    plan.step "add" "y"(%x, %x : !plan.buffer<[16], f32>, !plan.buffer<[16], f32>) -> (%y : !plan.buffer<[16], f32>) {bytes_read = 0 : i64, bytes_written = 0 : i64, flops = 0 : i64, kernel = "k", params = {}, states = [], weights = []}
  }
}

// -----

// A buffer outside its arena.
module {
  plan.arena @weights "weights" {alignment = 64 : i64, size = 0 : i64}
  plan.arena @activations "activations" {alignment = 64 : i64, size = 32 : i64}
  plan.arena @state "state" {alignment = 64 : i64, size = 0 : i64}
  plan.arena @io "io" {alignment = 64 : i64, size = 0 : i64}
  plan.target "cpu" {bandwidth_bytes_per_s = 0.0 : f64, memory_bytes = 0 : i64, precision = "f32", shared_memory_per_block = 0 : i64, sm_count = 0 : i64, tp = 1 : i64}
  plan.program @p attributes {batch = 1 : i64, kind = "decode", rows = 1 : i64, segments = array<i64>} {
    // expected-error @+1 {{slice [0, +64) overruns the activations arena of 32 bytes}}
    %x = plan.alloc "x" {offset = 0 : i64} : <[16], f32>
  }
}

// -----

// Steps outside every segment.
module {
  plan.arena @weights "weights" {alignment = 64 : i64, size = 0 : i64}
  plan.arena @activations "activations" {alignment = 64 : i64, size = 64 : i64}
  plan.arena @state "state" {alignment = 64 : i64, size = 0 : i64}
  plan.arena @io "io" {alignment = 64 : i64, size = 0 : i64}
  plan.target "cpu" {bandwidth_bytes_per_s = 0.0 : f64, memory_bytes = 0 : i64, precision = "f32", shared_memory_per_block = 0 : i64, sm_count = 0 : i64, tp = 1 : i64}
  // expected-error @+1 {{segments cover 0 of 1 steps}}
  plan.program @p attributes {batch = 1 : i64, kind = "decode", rows = 1 : i64, segments = array<i64>} {
    %x = plan.alloc "x" {offset = 0 : i64} : <[16], f32>
    plan.step "add" "x"(%x, %x : !plan.buffer<[16], f32>, !plan.buffer<[16], f32>) -> (%x : !plan.buffer<[16], f32>) {bytes_read = 0 : i64, bytes_written = 0 : i64, flops = 0 : i64, kernel = "k", params = {}, states = [], weights = []}
  }
}

// -----

// More memory than the target has: the error gives the numbers.
// expected-error @+1 {{the plan needs 5.00 GB per rank but sm_121a has 4.00 GB: weights 5.00 GB, state 0.00 GB, activations 0.00 GB, io 0.00 GB}}
module {
  plan.arena @weights "weights" {alignment = 64 : i64, size = 5000000000 : i64}
  plan.arena @activations "activations" {alignment = 64 : i64, size = 0 : i64}
  plan.arena @state "state" {alignment = 64 : i64, size = 0 : i64}
  plan.arena @io "io" {alignment = 64 : i64, size = 0 : i64}
  plan.target "sm_121a" {bandwidth_bytes_per_s = 2.73e11 : f64, memory_bytes = 4000000000 : i64, precision = "bf16", shared_memory_per_block = 101376 : i64, sm_count = 48 : i64, tp = 2 : i64}
}
