// What the exl3_moe GPU tests share (Exl3MoeLayer.h).
#include "tests/gpu/support/Exl3MoeLayer.h"
#include "runtime/weights/KernelViews.h"

#include <cmath>
#include <cstring>
#include <string>

namespace glm::testing::exl3_moe_test {

Shape flashShape(int64_t experts) {
  const glm53::Glm53Config &c = flashConfig();
  return {c.hiddenSize, c.moeIntermediateSize, experts, c.numExpertsPerTok};
}

Shape tinyShape() {
  const glm53::Glm53Config &c = tinyConfig();
  return {c.hiddenSize, c.moeIntermediateSize, c.nRoutedExperts, c.numExpertsPerTok};
}

float swigluLimit() { return static_cast<float>(flashConfig().swigluLimit); }

uint16_t *suhOf(Binding &b, int64_t m) {
  return reinterpret_cast<uint16_t *>(b.bytes.data() + b.layout.suhOffset()) + m * b.layout.k;
}
uint16_t *svhOf(Binding &b, int64_t m) {
  return reinterpret_cast<uint16_t *>(b.bytes.data() + b.layout.svhOffset()) + m * b.layout.n;
}

void fillMatrix(Binding &b, int64_t m, int bits, Exl3Codebook codebook, double outScale,
                SplitMix64 &rng) {
  const Exl3ArenaLayout &l = b.layout;
  uint8_t *trellis = b.bytes.data() + m * l.trellisStride();
  const uint64_t used = static_cast<uint64_t>(l.k * l.n * bits / 8);
  for (uint64_t i = 0; i < l.trellisStride(); i += 8) {
    const uint64_t r = i < used ? rng.next() : 0;
    std::memcpy(trellis + i, &r, 8);
  }
  const double sigma = codebook == Exl3Codebook::Mul1 ? 1.0 : 1.2437;
  const double inScale = 1.0 / (sigma * std::sqrt(static_cast<double>(l.in)));
  auto draw = [&](double scale) {
    const double v = scale * (0.5 + rng.uniform());
    return kernels::doubleToF16(rng.chance(50) ? v : -v);
  };
  for (int64_t i = 0; i < l.k; ++i) {
    suhOf(b, m)[i] = draw(inScale);
  }
  for (int64_t o = 0; o < l.n; ++o) {
    svhOf(b, m)[o] = draw(outScale);
  }
  auto *meta = reinterpret_cast<uint32_t *>(b.bytes.data() + l.metaOffset()) + 2 * m;
  meta[0] = static_cast<uint32_t>(bits);
  meta[1] = static_cast<uint32_t>(codebook);
}

Layer uniformLayer(const Shape &d, int bits, Exl3Codebook codebook, uint64_t seed) {
  return makeLayer(
      d, [bits](int64_t) { return bits; }, [codebook](int64_t) { return codebook; }, seed);
}

Layer mixedLayer(const Shape &d, bool mixCodebooks, uint64_t seed) {
  return makeLayer(
      d, [](int64_t i) { return static_cast<int>(2 + (i * 7 % 3)); },
      [mixCodebooks](int64_t i) {
        return mixCodebooks ? static_cast<Exl3Codebook>(i * 5 % 3) : Exl3Codebook::Mcg;
      },
      seed);
}

std::vector<float> randomX(SplitMix64 &rng, int64_t tokens, int64_t hidden) {
  std::vector<float> x(tokens * hidden);
  for (float &v : x) {
    v = kernels::roundToBf16(rng.normal());
  }
  return x;
}

std::vector<float> reference(const Layer &l, const Shape &d, const std::vector<float> &x,
                             const Routing &r, int64_t tokens, int32_t firstExpert, float limit,
                             int64_t *clamped) {
  std::vector<double> acc(tokens * d.hidden, 0.0);
  for (int64_t e = 0; e < d.experts; ++e) {
    std::vector<int64_t> slots;
    for (int64_t s = 0; s < tokens * d.topK; ++s) {
      if (r.ids[s] - firstExpert == e) {
        slots.push_back(s);
      }
    }
    if (slots.empty()) {
      continue;
    }
    const int64_t n = static_cast<int64_t>(slots.size());
    std::vector<float> xs(n * d.hidden), g(n * d.inter), u(n * d.inter), h(n * d.inter),
        y(n * d.hidden);
    for (int64_t i = 0; i < n; ++i) {
      const int64_t t = slots[i] / d.topK;
      std::copy(x.begin() + t * d.hidden, x.begin() + (t + 1) * d.hidden,
                xs.begin() + i * d.hidden);
    }
    auto linear = [&](const float *in, const kernels::Exl3MatrixView &w, float *out) {
      const Status s = kernels::exl3LinearRef({.x = in, .weight = w, .y = out, .rows = n});
      EXPECT_TRUE(s.ok()) << s.toString();
    };
    linear(xs.data(), l.gate.view(e), g.data());
    linear(xs.data(), l.up.view(e), u.data());
    for (int64_t i = 0; i < n * d.inter; ++i) {
      const double a = std::min<double>(g[i], limit);
      const double b = std::clamp<double>(u[i], -limit, limit);
      if (clamped != nullptr) {
        *clamped += (g[i] > limit) + (std::fabs(u[i]) > limit);
      }
      h[i] = static_cast<float>(a / (1.0 + std::exp(-a)) * b);
    }
    linear(h.data(), l.down.view(e), y.data());
    for (int64_t i = 0; i < n; ++i) {
      const int64_t t = slots[i] / d.topK;
      for (int64_t c = 0; c < d.hidden; ++c) {
        acc[t * d.hidden + c] += static_cast<double>(r.weights[slots[i]]) * y[i * d.hidden + c];
      }
    }
  }
  return std::vector<float>(acc.begin(), acc.end());
}

Case drawCase(const Layer &l, const Shape &d, int64_t tokens, int64_t globalExperts,
              int32_t firstExpert, SplitMix64 &rng) {
  Case c;
  c.x = randomX(rng, tokens, d.hidden);
  c.r = randomRouting(rng, tokens, d.topK, globalExperts);
  c.ref = reference(l, d, c.x, c.r, tokens, firstExpert, swigluLimit(), &c.clamped);
  return c;
}

std::string describe(const std::string &what, const Shape &d, int64_t tokens, int64_t clamped) {
  return what + ": " + std::to_string(tokens) + " tokens, [" + std::to_string(d.hidden) + ", " +
         std::to_string(d.inter) + "], " + std::to_string(clamped) + " clamped";
}

Routing routingWithoutExperts01(SplitMix64 &rng, int64_t tokens, const Shape &d) {
  Routing r = randomRouting(rng, tokens, d.topK, d.experts - 2);
  for (int32_t &id : r.ids) {
    id += 2;
  }
  return r;
}

void scribbleOnUnusedData(Layer &l, const Shape &d) {
  SplitMix64 other(42);
  for (int64_t e : {0, 1}) {
    fillMatrix(l.gate, e, 4, Exl3Codebook::Mcg, 100.0, other);
    fillMatrix(l.down, e, 4, Exl3Codebook::Mcg, 100.0, other);
  }
  for (int64_t e = 2; e < d.experts; ++e) {
    for (int64_t i = d.hidden; i < l.gate.layout.k; ++i) {
      suhOf(l.gate, e)[i] = suhOf(l.up, e)[i] = 0x5BFF; // 255.875
    }
    for (int64_t o = d.hidden; o < l.down.layout.n; ++o) {
      svhOf(l.down, e)[o] = 0xDBFF;
    }
    for (int64_t f = d.inter; f < l.gate.layout.n; ++f) {
      svhOf(l.gate, e)[f] = svhOf(l.up, e)[f] = suhOf(l.down, e)[f] = 0x5BFF;
    }
  }
}

Expected<DeviceStep> uploadStep(const Layer &l, const Shape &d, const std::vector<float> &x,
                                const Routing &r, int64_t tokens, int32_t firstExpert,
                                float limit) {
  DeviceStep s;
  GLM_ASSIGN_OR_RETURN(s.x, toDevice(toBf16(x)));
  GLM_ASSIGN_OR_RETURN(s.ids, toDevice(r.ids));
  GLM_ASSIGN_OR_RETURN(s.weights, toDevice(toBf16(r.weights)));
  GLM_ASSIGN_OR_RETURN(s.gate, toDevice(l.gate.bytes));
  GLM_ASSIGN_OR_RETURN(s.up, toDevice(l.up.bytes));
  GLM_ASSIGN_OR_RETURN(s.down, toDevice(l.down.bytes));
  GLM_ASSIGN_OR_RETURN(s.out, poisoned(tokens * d.hidden * 2));
  s.args = kernels::Exl3MoeGpuArgs{
      s.x.as<const kernels::Bf16>(),
      s.ids.as<const int32_t>(),
      s.weights.as<const kernels::Bf16>(),
      exl3GpuWeights(reinterpret_cast<const void *>(s.gate.ptr()), l.gate.layout),
      exl3GpuWeights(reinterpret_cast<const void *>(s.up.ptr()), l.up.layout),
      exl3GpuWeights(reinterpret_cast<const void *>(s.down.ptr()), l.down.layout),
      s.out.as<kernels::Bf16>(),
      nullptr,
      tokens,
      d.hidden,
      d.inter,
      d.experts,
      d.topK,
      firstExpert,
      limit};
  return s;
}

} // namespace glm::testing::exl3_moe_test
