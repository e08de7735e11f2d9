// linear_group's plan adapter: several linears of one input width, y_p = x_p W_pᵀ for each part p,
// as one step (what plan-group-linears makes of a decode program's independent linears).
//
//   operand 0   x [rows, in] read by every part, or operand p x_p [rows, in] (one per part)
//   weight p    W_p [out_p, in], dense, every part in one encoding (Q4 groups: in a multiple of 64)
//   result p    y_p [rows, out_p]
//
// No bias: the pass leaves linears with one alone. Each y_p is linear's result for (x_p, W_p): on
// the CPU the same reference, on the GPU the decode-quant kernel's body per part
// (linear_group_gpu.h).
#pragma once

#include "kernels/common/GpuLaunch.h"
#include "kernels/common/HostStep.h"
#include "kernels/common/OpStep.h"

namespace glm::kernels {

/// The kernel of the step's parts: bf16 activations and Q4 or fp8 weights only (Unimplemented
/// otherwise, which plan-group-linears never makes).
Expected<GpuStep> linearGroupGpu(const OpStep &step);
/// Runs each part with linear's CPU reference.
Status linearGroupCpu(const OpStep &step, const HostStep &host);
/// Checks a linear_group step against the contract above (kernels/common/OpContract.h).
Status linearGroupCheck(const OpStep &step);

/// Whether `linear`, a linear step of a decode program with no bias and a dense weight, may join a
/// group: on a GPU where it would run the decode-quant kernel unsplit or split (bf16 activations,
/// Q4 or fp8 weights), on the CPU always. The pass groups such steps of one input width and one
/// encoding.
bool linearJoinsGroup(const OpStep &linear);

} // namespace glm::kernels
