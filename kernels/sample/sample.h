// sample: the launch contract of the on-device sampler (the plan's `sample` op). Its CPU reference
// is runtime/engine/Sampler.cpp's sampleToken; the kernel (sample.cuh, launch rule in
// sample_gpu.h) must pick the token sampleToken picks.
//
//   logits   f32 [rows, vocab]   the Logits io slot
//   params   i32 [batch, 8]      the SamplingParams io slot, per sequence: temperature, top_p,
//                                min_p (f32 bits), top_k, seed low, seed high (u32), 0, 0
//   positions                    StepContext: row r's absolute position, the key of its draw;
//                                row r uses sequence r / rowsPerSequence's parameters
//   out      i32 [rows]          the SampledIds io slot
//
//   out[r] = sampleToken(logits[r], params[r / rowsPerSequence], positions[r])
// i.e. greedy (the op's `greedy` attribute, or temperature <= 0): the lowest id of the largest
// logit. Otherwise, in the order logit desc, id asc: keep top_k (0: all), p_i = exp(l_i / T - l_0 /
// T) / Σ_kept in double, keep while the running mass is below top_p, drop tokens below min_p · p_0,
// and pick the first token whose running mass exceeds u · mass, u the first SplitMix64 draw of
// seed ^ position · 0xD1B54A32D192ED03 (53 bits). Padding rows (negative positions) get 0.
//
// Agreement. The order, the filters and every running sum are sampleToken's, in double, in its
// sequence, so ties and exact boundaries resolve identically. Two quantities can differ in their
// last bits: exp (CUDA's double exp and the C library's may differ by an ulp) and, when more than
// kSampleChunk tokens survive top-k, the normaliser Σ_kept (a fixed-order parallel sum over the
// vocabulary instead of a sequential one; likewise the draw's mass is taken as 1 when no top-p or
// min-p cut applies). Either can change the pick only when u · mass lies within ~1e-13 (relative)
// of a cumulative boundary. NaN logits are not expected (sampleToken's sort is undefined for
// them); greedy follows sampleToken there too (NaNs never win, id 0 when logits[0] is NaN).
#pragma once
