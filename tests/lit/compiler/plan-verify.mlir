// RUN: glm-opt %s --split-input-file --plan-verify --verify-diagnostics

// Two buffers live at once that share bytes.
module {
  plan.arena @weights "weights" {alignment = 64 : i64, size = 0 : i64}
  plan.arena @activations "activations" {alignment = 64 : i64, size = 128 : i64}
  plan.arena @state "state" {alignment = 64 : i64, size = 0 : i64}
  plan.arena @io "io" {alignment = 64 : i64, size = 0 : i64}
  plan.target "cpu" {bandwidth_bytes_per_s = 0.0 : f64, memory_bytes = 0 : i64, precision = "f32", shared_memory_per_block = 0 : i64, sm_count = 0 : i64, tp = 1 : i64}
  plan.program @p attributes {batch = 1 : i64, kind = "decode", rows = 1 : i64, segments = [#plan.segment<0 + 1, "program_end", "end">]} {
    %x = plan.alloc "x" {offset = 0 : i64} : <[16], f32>
    // expected-error @+1 {{shares bytes with x while both are live}}
    %y = plan.alloc "y" {offset = 32 : i64} : <[16], f32>
    plan.step "add" "y"(%x, %x : !plan.buffer<[16], f32>, !plan.buffer<[16], f32>) -> (%y : !plan.buffer<[16], f32>) {bytes_read = 0 : i64, bytes_written = 0 : i64, flops = 0 : i64, params = {}, states = [], weights = []}
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
  plan.program @p attributes {batch = 1 : i64, kind = "decode", rows = 1 : i64, segments = []} {
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
  plan.program @p attributes {batch = 1 : i64, kind = "decode", rows = 1 : i64, segments = []} {
    %x = plan.alloc "x" {offset = 0 : i64} : <[16], f32>
    plan.step "add" "x"(%x, %x : !plan.buffer<[16], f32>, !plan.buffer<[16], f32>) -> (%x : !plan.buffer<[16], f32>) {bytes_read = 0 : i64, bytes_written = 0 : i64, flops = 0 : i64, params = {}, states = [], weights = []}
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

// -----

// A collective inside a segment: the host runs it between graphs, so it must end one.
module {
  plan.arena @weights "weights" {alignment = 64 : i64, size = 0 : i64}
  plan.arena @activations "activations" {alignment = 64 : i64, size = 64 : i64}
  plan.arena @state "state" {alignment = 64 : i64, size = 0 : i64}
  plan.arena @io "io" {alignment = 64 : i64, size = 0 : i64}
  plan.target "cpu" {bandwidth_bytes_per_s = 0.0 : f64, memory_bytes = 0 : i64, precision = "f32", shared_memory_per_block = 0 : i64, sm_count = 0 : i64, tp = 2 : i64}
  // expected-error @+1 {{collective r is inside a segment: the host runs collectives between graphs}}
  plan.program @p attributes {batch = 1 : i64, kind = "decode", rows = 1 : i64, segments = [#plan.segment<0 + 2, "program_end", "end">]} {
    %x = plan.alloc "x" {offset = 0 : i64} : <[16], f32>
    plan.step "all_reduce" "r"(%x : !plan.buffer<[16], f32>) -> (%x : !plan.buffer<[16], f32>) {bytes_read = 0 : i64, bytes_written = 0 : i64, flops = 0 : i64, params = {world = 2 : i64}, states = [], weights = []}
    plan.step "add" "y"(%x, %x : !plan.buffer<[16], f32>, !plan.buffer<[16], f32>) -> (%x : !plan.buffer<[16], f32>) {bytes_read = 0 : i64, bytes_written = 0 : i64, flops = 0 : i64, params = {}, states = [], weights = []}
  }
}

// -----

// A segment that says it ends at a collective where its last step is none.
module {
  plan.arena @weights "weights" {alignment = 64 : i64, size = 0 : i64}
  plan.arena @activations "activations" {alignment = 64 : i64, size = 64 : i64}
  plan.arena @state "state" {alignment = 64 : i64, size = 0 : i64}
  plan.arena @io "io" {alignment = 64 : i64, size = 0 : i64}
  plan.target "cpu" {bandwidth_bytes_per_s = 0.0 : f64, memory_bytes = 0 : i64, precision = "f32", shared_memory_per_block = 0 : i64, sm_count = 0 : i64, tp = 1 : i64}
  // expected-error @+1 {{segment [0, +1) ends at step y but says it ends at a collective}}
  plan.program @p attributes {batch = 1 : i64, kind = "decode", rows = 1 : i64, segments = [#plan.segment<0 + 1, "collective", "r">]} {
    %x = plan.alloc "x" {offset = 0 : i64} : <[16], f32>
    plan.step "add" "y"(%x, %x : !plan.buffer<[16], f32>, !plan.buffer<[16], f32>) -> (%x : !plan.buffer<[16], f32>) {bytes_read = 0 : i64, bytes_written = 0 : i64, flops = 0 : i64, params = {}, states = [], weights = []}
  }
}

// -----

// GPU plans: a launch of a kernel the table lacks is refused with the step's IR name.
module {
  plan.arena @weights "weights" {alignment = 64 : i64, size = 0 : i64}
  plan.arena @activations "activations" {alignment = 64 : i64, size = 64 : i64}
  plan.arena @state "state" {alignment = 64 : i64, size = 0 : i64}
  plan.arena @io "io" {alignment = 64 : i64, size = 0 : i64}
  plan.arena @workspace "workspace" {alignment = 256 : i64, size = 0 : i64}
  plan.target "sm_90a" {bandwidth_bytes_per_s = 4.8e12 : f64, memory_bytes = 0 : i64, precision = "bf16", shared_memory_per_block = 232448 : i64, sm_count = 132 : i64, tp = 1 : i64}
  plan.kernel @"addKernel<Bf16>" "glm::kernels::addKernel<glm::kernels::Bf16>" from "kernels/add/add.cuh"
  plan.program @p attributes {batch = 1 : i64, kind = "decode", rows = 1 : i64, segments = [#plan.segment<0 + 1, "program_end", "end">]} {
    %x = plan.alloc "x" {offset = 0 : i64} : <[16], bf16>
    // expected-error @+1 {{'plan.step' op (blk.0.add): launches kernel @rmsNormKernel, which is not in the kernel table}}
    plan.step "add" "blk.0.add"(%x, %x : !plan.buffer<[16], bf16>, !plan.buffer<[16], bf16>) -> (%x : !plan.buffer<[16], bf16>) {bytes_read = 0 : i64, bytes_written = 0 : i64, flops = 0 : i64, launches = [#plan.launch<@rmsNormKernel grid [1, 1, 1] block [256, 1, 1] smem 0 args 32 [#plan.bind<"a" at 0 = "operand" 0 + 0>]>], params = {}, states = [], weights = []}
  }
}

// -----

// A grid outside CUDA's limits.
module {
  plan.arena @weights "weights" {alignment = 64 : i64, size = 0 : i64}
  plan.arena @activations "activations" {alignment = 64 : i64, size = 64 : i64}
  plan.arena @state "state" {alignment = 64 : i64, size = 0 : i64}
  plan.arena @io "io" {alignment = 64 : i64, size = 0 : i64}
  plan.arena @workspace "workspace" {alignment = 256 : i64, size = 0 : i64}
  plan.target "sm_90a" {bandwidth_bytes_per_s = 4.8e12 : f64, memory_bytes = 0 : i64, precision = "bf16", shared_memory_per_block = 232448 : i64, sm_count = 132 : i64, tp = 1 : i64}
  plan.kernel @"addKernel<Bf16>" "glm::kernels::addKernel<glm::kernels::Bf16>" from "kernels/add/add.cuh"
  plan.program @p attributes {batch = 1 : i64, kind = "decode", rows = 1 : i64, segments = [#plan.segment<0 + 1, "program_end", "end">]} {
    %x = plan.alloc "x" {offset = 0 : i64} : <[16], bf16>
    // expected-error @+1 {{(blk.0.add): launch of @addKernel<Bf16> has grid [1, 70000, 1] and block [256, 1, 1], outside CUDA's limits}}
    plan.step "add" "blk.0.add"(%x, %x : !plan.buffer<[16], bf16>, !plan.buffer<[16], bf16>) -> (%x : !plan.buffer<[16], bf16>) {bytes_read = 0 : i64, bytes_written = 0 : i64, flops = 0 : i64, launches = [#plan.launch<@"addKernel<Bf16>" grid [1, 70000, 1] block [256, 1, 1] smem 0 args 32 []>], params = {}, states = [], weights = []}
  }
}

// -----

// More threads a block than CUDA launches.
module {
  plan.arena @weights "weights" {alignment = 64 : i64, size = 0 : i64}
  plan.arena @activations "activations" {alignment = 64 : i64, size = 64 : i64}
  plan.arena @state "state" {alignment = 64 : i64, size = 0 : i64}
  plan.arena @io "io" {alignment = 64 : i64, size = 0 : i64}
  plan.arena @workspace "workspace" {alignment = 256 : i64, size = 0 : i64}
  plan.target "sm_90a" {bandwidth_bytes_per_s = 4.8e12 : f64, memory_bytes = 0 : i64, precision = "bf16", shared_memory_per_block = 232448 : i64, sm_count = 132 : i64, tp = 1 : i64}
  plan.kernel @"addKernel<Bf16>" "glm::kernels::addKernel<glm::kernels::Bf16>" from "kernels/add/add.cuh"
  plan.program @p attributes {batch = 1 : i64, kind = "decode", rows = 1 : i64, segments = [#plan.segment<0 + 1, "program_end", "end">]} {
    %x = plan.alloc "x" {offset = 0 : i64} : <[16], bf16>
    // expected-error @+1 {{(blk.0.add): launch of @addKernel<Bf16> has 2048 threads a block (at most 1024)}}
    plan.step "add" "blk.0.add"(%x, %x : !plan.buffer<[16], bf16>, !plan.buffer<[16], bf16>) -> (%x : !plan.buffer<[16], bf16>) {bytes_read = 0 : i64, bytes_written = 0 : i64, flops = 0 : i64, launches = [#plan.launch<@"addKernel<Bf16>" grid [1, 1, 1] block [1024, 2, 1] smem 0 args 32 []>], params = {}, states = [], weights = []}
  }
}

// -----

// More shared memory than the target has a block (a GB10's 99 KB).
module {
  plan.arena @weights "weights" {alignment = 64 : i64, size = 0 : i64}
  plan.arena @activations "activations" {alignment = 64 : i64, size = 64 : i64}
  plan.arena @state "state" {alignment = 64 : i64, size = 0 : i64}
  plan.arena @io "io" {alignment = 64 : i64, size = 0 : i64}
  plan.arena @workspace "workspace" {alignment = 256 : i64, size = 0 : i64}
  plan.target "sm_121a" {bandwidth_bytes_per_s = 2.73e11 : f64, memory_bytes = 0 : i64, precision = "bf16", shared_memory_per_block = 101376 : i64, sm_count = 48 : i64, tp = 1 : i64}
  plan.kernel @"addKernel<Bf16>" "glm::kernels::addKernel<glm::kernels::Bf16>" from "kernels/add/add.cuh"
  plan.program @p attributes {batch = 1 : i64, kind = "decode", rows = 1 : i64, segments = [#plan.segment<0 + 1, "program_end", "end">]} {
    %x = plan.alloc "x" {offset = 0 : i64} : <[16], bf16>
    // expected-error @+1 {{(blk.0.add): launch of @addKernel<Bf16> needs 131072 bytes of shared memory a block; sm_121a has 101376}}
    plan.step "add" "blk.0.add"(%x, %x : !plan.buffer<[16], bf16>, !plan.buffer<[16], bf16>) -> (%x : !plan.buffer<[16], bf16>) {bytes_read = 0 : i64, bytes_written = 0 : i64, flops = 0 : i64, launches = [#plan.launch<@"addKernel<Bf16>" grid [1, 1, 1] block [256, 1, 1] smem 131072 args 32 []>], params = {}, states = [], weights = []}
  }
}

// -----

// An argument address that names an operand the step does not have.
module {
  plan.arena @weights "weights" {alignment = 64 : i64, size = 0 : i64}
  plan.arena @activations "activations" {alignment = 64 : i64, size = 64 : i64}
  plan.arena @state "state" {alignment = 64 : i64, size = 0 : i64}
  plan.arena @io "io" {alignment = 64 : i64, size = 0 : i64}
  plan.arena @workspace "workspace" {alignment = 256 : i64, size = 0 : i64}
  plan.target "sm_90a" {bandwidth_bytes_per_s = 4.8e12 : f64, memory_bytes = 0 : i64, precision = "bf16", shared_memory_per_block = 232448 : i64, sm_count = 132 : i64, tp = 1 : i64}
  plan.kernel @"addKernel<Bf16>" "glm::kernels::addKernel<glm::kernels::Bf16>" from "kernels/add/add.cuh"
  plan.program @p attributes {batch = 1 : i64, kind = "decode", rows = 1 : i64, segments = [#plan.segment<0 + 1, "program_end", "end">]} {
    %x = plan.alloc "x" {offset = 0 : i64} : <[16], bf16>
    // expected-error @+1 {{(blk.0.add): argument b of @addKernel<Bf16> points at operand 2, which the step does not have}}
    plan.step "add" "blk.0.add"(%x, %x : !plan.buffer<[16], bf16>, !plan.buffer<[16], bf16>) -> (%x : !plan.buffer<[16], bf16>) {bytes_read = 0 : i64, bytes_written = 0 : i64, flops = 0 : i64, launches = [#plan.launch<@"addKernel<Bf16>" grid [1, 1, 1] block [256, 1, 1] smem 0 args 32 [#plan.bind<"a" at 0 = "operand" 0 + 0>, #plan.bind<"b" at 8 = "operand" 2 + 0>]>], params = {}, states = [], weights = []}
  }
}

// -----

// An argument that lies outside its struct.
module {
  plan.arena @weights "weights" {alignment = 64 : i64, size = 0 : i64}
  plan.arena @activations "activations" {alignment = 64 : i64, size = 64 : i64}
  plan.arena @state "state" {alignment = 64 : i64, size = 0 : i64}
  plan.arena @io "io" {alignment = 64 : i64, size = 0 : i64}
  plan.arena @workspace "workspace" {alignment = 256 : i64, size = 0 : i64}
  plan.target "sm_90a" {bandwidth_bytes_per_s = 4.8e12 : f64, memory_bytes = 0 : i64, precision = "bf16", shared_memory_per_block = 232448 : i64, sm_count = 132 : i64, tp = 1 : i64}
  plan.kernel @"addKernel<Bf16>" "glm::kernels::addKernel<glm::kernels::Bf16>" from "kernels/add/add.cuh"
  plan.program @p attributes {batch = 1 : i64, kind = "decode", rows = 1 : i64, segments = [#plan.segment<0 + 1, "program_end", "end">]} {
    %x = plan.alloc "x" {offset = 0 : i64} : <[16], bf16>
    // expected-error @+1 {{(blk.0.add): argument count of @addKernel<Bf16> lies outside its 32-byte struct}}
    plan.step "add" "blk.0.add"(%x, %x : !plan.buffer<[16], bf16>, !plan.buffer<[16], bf16>) -> (%x : !plan.buffer<[16], bf16>) {bytes_read = 0 : i64, bytes_written = 0 : i64, flops = 0 : i64, launches = [#plan.launch<@"addKernel<Bf16>" grid [1, 1, 1] block [256, 1, 1] smem 0 args 32 [#plan.field<"count" at 28 = 16 : i64>]>], params = {}, states = [], weights = []}
  }
}
