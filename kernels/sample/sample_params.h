// What the sampler reads per sequence and per row, and the two rules both backends must compute
// bit for bit: a logit's processing (mask, bias, penalties) and the draw's key. Host code and
// NVRTC compile this header alike, so the CPU reference and the kernel cannot drift apart.
#pragma once

#include "kernels/common/DeviceTypes.h"

#ifndef __CUDACC_RTC__
#include <math.h>
#endif

namespace glm::kernels {

/// The sampling_params io slot: one of these per sequence of the step ([batch, 16] words). All
/// zero is greedy with nothing else applied (what padding entries hold).
struct SampleWords {
  float temperature;       // <= 0: greedy
  float topP;              // < 1: keep the most likely tokens until their mass reaches it
  float minP;              // > 0: drop tokens below it times the most likely one's probability
  int32_t topK;            // 0: all
  uint32_t seedLo, seedHi; // the key of the draws
  float presence, frequency, repetition; // repetition 0 or 1: off
  int32_t promptTokens;                  // positions below it hold prompt tokens (count_tokens)
  int32_t logprobs;  // -1: none; k: the sampled token's logprob and the k most likely
  int32_t biasCount; // entries of the sequence's logit_bias row, sorted by id
  int32_t hasMask;   // the sequence's token_mask row applies
  // 1 + the token after the sequence's rows in this step where the host knows it (a prefill
  // chunk with more of the prompt after it: the MTP head embeds it, next_embedding.h); 0: none.
  int32_t following;
  int32_t reserved[2];
};
static_assert(sizeof(SampleWords) == 64, "the sampling_params io slot is 16 words a sequence");

inline constexpr int kSampleParamWords = 16;
/// Alternatives a row reports at most; ids and logprobs are [rows, 1 + kSampleTopLogprobs].
inline constexpr int kSampleTopLogprobs = 20;
/// logit_bias entries per sequence at most: [batch, 2 * kSampleBiasEntries] words of (id, bias).
inline constexpr int kSampleBiasEntries = 300;
/// The token_counts state: per sequence and token, the times it was generated (low 31 bits) and
/// whether the prompt holds it (the top bit).
inline constexpr uint32_t kPromptSeenBit = 0x80000000u;

/// Words of a token_mask row for `vocab` tokens: bit i % 32 of word i / 32 allows token i.
GLM_HOST_DEVICE inline int64_t maskWords(int64_t vocab) { return (vocab + 31) / 32; }

/// A logit after the penalties (vLLM's definitions, in its order): the repetition penalty for a
/// token the prompt or the output holds (divides a positive logit, multiplies the rest), then
/// OpenAI's frequency (per generated occurrence) and presence (once) penalties. Each operation
/// rounds on its own (no fused multiply-add), so host and device agree exactly.
GLM_HOST_DEVICE inline float penalizedLogit(float x, uint32_t count, const SampleWords &p) {
  if (count == 0u) {
    return x;
  }
  if (p.repetition != 0.0f && p.repetition != 1.0f) {
#ifdef __CUDACC_RTC__
    x = x > 0.0f ? __fdiv_rn(x, p.repetition) : __fmul_rn(x, p.repetition);
#else
    x = x > 0.0f ? x / p.repetition : x * p.repetition;
#endif
  }
  const uint32_t generated = count & ~kPromptSeenBit;
  if (generated > 0u) {
#ifdef __CUDACC_RTC__
    x = __fsub_rn(__fsub_rn(x, __fmul_rn(p.frequency, static_cast<float>(generated))), p.presence);
#else
    const float frequency = p.frequency * static_cast<float>(generated);
    x = (x - frequency) - p.presence;
#endif
  }
  return x;
}

/// Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC 2011): the
/// counter `ctr` encrypted in place under `key`.
GLM_HOST_DEVICE inline void philox4x32(uint32_t ctr[4], const uint32_t key[2]) {
  uint32_t k0 = key[0], k1 = key[1];
  for (int round = 0; round < 10; ++round) {
    const uint64_t p0 = static_cast<uint64_t>(0xD2511F53u) * ctr[0];
    const uint64_t p1 = static_cast<uint64_t>(0xCD9E8D57u) * ctr[2];
    const uint32_t n0 = static_cast<uint32_t>(p1 >> 32) ^ ctr[1] ^ k0;
    const uint32_t n2 = static_cast<uint32_t>(p0 >> 32) ^ ctr[3] ^ k1;
    ctr[1] = static_cast<uint32_t>(p1);
    ctr[3] = static_cast<uint32_t>(p0);
    ctr[0] = n0;
    ctr[2] = n2;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
}

/// The draw for the token at `position` under the key `seed`: the first 53 bits of Philox of the
/// counter (position, 0), a uniform u = bits / 2^53 in [0, 1). A function of the two alone,
/// whatever else the step holds.
GLM_HOST_DEVICE inline uint64_t philoxBits53(uint64_t seed, int64_t position) {
  uint32_t ctr[4] = {static_cast<uint32_t>(static_cast<uint64_t>(position)),
                     static_cast<uint32_t>(static_cast<uint64_t>(position) >> 32), 0u, 0u};
  const uint32_t key[2] = {static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)};
  philox4x32(ctr, key);
  return ((static_cast<uint64_t>(ctr[0]) << 32) | ctr[1]) >> 11;
}

/// floor(u · mass) for the draw's u = bits / 2^53: where in the kept mass the draw lands.
GLM_HOST_DEVICE inline uint64_t drawTarget(uint64_t bits53, uint64_t mass) {
#ifdef __CUDACC_RTC__
  return __umul64hi(bits53 << 11, mass);
#else
  return static_cast<uint64_t>((static_cast<unsigned __int128>(bits53 << 11) * mass) >> 64);
#endif
}

GLM_HOST_DEVICE inline uint32_t floatBits(float v) {
#ifdef __CUDACC_RTC__
  return __float_as_uint(v);
#else
  uint32_t u;
  __builtin_memcpy(&u, &v, sizeof u);
  return u;
#endif
}
GLM_HOST_DEVICE inline float bitsFloat(uint32_t u) {
#ifdef __CUDACC_RTC__
  return __uint_as_float(u);
#else
  float v;
  __builtin_memcpy(&v, &u, sizeof v);
  return v;
#endif
}

/// A 64-bit key whose descending order is the sampler's order: logit descending (-0 equal to +0,
/// NaNs below -inf), then id ascending. Every key of a row is distinct, and 0 is below all of
/// them.
GLM_HOST_DEVICE inline uint64_t orderKey(float v, int64_t i) {
  uint32_t u = floatBits(v);
  if ((u << 1) == 0u) {
    u = 0u;
  }
  uint32_t ordered = (u & 0x80000000u) ? ~u : (u | 0x80000000u);
  if (v != v) {
    ordered = 0u;
  }
  return (static_cast<uint64_t>(ordered) << 32) | (0xFFFFFFFFu - static_cast<uint32_t>(i));
}
/// The logit a key holds (a NaN for a NaN's).
GLM_HOST_DEVICE inline float keyValue(uint64_t key) {
  const uint32_t ordered = static_cast<uint32_t>(key >> 32);
  return bitsFloat((ordered & 0x80000000u) ? (ordered & 0x7FFFFFFFu) : ~ordered);
}
GLM_HOST_DEVICE inline int32_t keyId(uint64_t key) {
  return static_cast<int32_t>(0xFFFFFFFFu - static_cast<uint32_t>(key));
}

/// The sampler's exp for d <= 0 (a logit's distance below the row's top, over T): 2^(d log2 e)
/// as 2^k · P(f), P the degree-7 Taylor polynomial of 2^f on [0, 1), every operation rounded on
/// its own, so that host and device compute the same bits. Relative error under 4e-6 wherever a
/// weight is non-zero (d > -27.8); exp(0) = 1 exactly; below -87 (and for NaN) it is 0.
GLM_HOST_DEVICE inline float sampleExp(float d) {
  if (!(d > -87.0f)) {
    return 0.0f;
  }
#ifdef __CUDACC_RTC__
#define GLM_SAMPLE_MUL(a, b) __fmul_rn(a, b)
#define GLM_SAMPLE_ADD(a, b) __fadd_rn(a, b)
#else
#define GLM_SAMPLE_MUL(a, b) ((a) * (b))
#define GLM_SAMPLE_ADD(a, b) ((a) + (b))
#endif
  const float t = GLM_SAMPLE_MUL(d, 1.44269504f);
  const float k = floorf(t);
  const float f = GLM_SAMPLE_ADD(t, -k);
  // (f ln 2)^n / n!, n = 7 .. 1
  float p = 1.52527338e-5f;
  p = GLM_SAMPLE_ADD(GLM_SAMPLE_MUL(p, f), 1.54035304e-4f);
  p = GLM_SAMPLE_ADD(GLM_SAMPLE_MUL(p, f), 1.33335581e-3f);
  p = GLM_SAMPLE_ADD(GLM_SAMPLE_MUL(p, f), 9.61812911e-3f);
  p = GLM_SAMPLE_ADD(GLM_SAMPLE_MUL(p, f), 5.55041087e-2f);
  p = GLM_SAMPLE_ADD(GLM_SAMPLE_MUL(p, f), 2.40226507e-1f);
  p = GLM_SAMPLE_ADD(GLM_SAMPLE_MUL(p, f), 6.93147181e-1f);
  p = GLM_SAMPLE_ADD(GLM_SAMPLE_MUL(p, f), 1.0f);
  const float scale = bitsFloat(static_cast<uint32_t>(static_cast<int32_t>(k) + 127) << 23);
  return GLM_SAMPLE_MUL(p, scale);
#undef GLM_SAMPLE_MUL
#undef GLM_SAMPLE_ADD
}

/// The reciprocal of a temperature, in f32 (a multiply per token instead of a divide).
GLM_HOST_DEVICE inline float inverseTemperature(float temperature) {
#ifdef __CUDACC_RTC__
  return __fdiv_rn(1.0f, temperature);
#else
  return 1.0f / temperature;
#endif
}

/// A logit's distance below the row's top over the temperature, (x - top) · (1 / T) in f32: 0 for
/// the top itself (so an infinite top still weighs 1).
GLM_HOST_DEVICE inline float sampleDistance(float x, float top, float invTemperature) {
  if (x == top) {
    return 0.0f;
  }
#ifdef __CUDACC_RTC__
  return __fmul_rn(__fsub_rn(x, top), invTemperature);
#else
  return (x - top) * invTemperature;
#endif
}

/// Fixed-point bits of a token's weight: its exp scaled by 2^40 and truncated. Sums of weights are
/// integers, exact in any order, so that the CPU and the GPU cut and draw at the same tokens.
inline constexpr int kSampleWeightBits = 40;
GLM_HOST_DEVICE inline uint64_t sampleWeight(float e) {
  return static_cast<uint64_t>(e * 1099511627776.0f); // 2^40: exact scaling, then truncation
}

} // namespace glm::kernels
