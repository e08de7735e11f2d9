// glm-quant-quality: the relative RMS error of the dense load-time formats (kernels/quantize) and
// of their round-to-nearest baselines, on a checkpoint's linear weights and on synthetic
// heavy-tailed weights, with the quantizer's speed. docs/quantization.md reports its output.
//
//   glm-quant-quality [--model FILE.safetensors|DIR]... [--synthetic] [--size N] [--per-matrix]
//
// Formats (bits per weight with their parameters):
//   q4-search   4.5   Q4 groups, the quantizer's search (kernels/quantize/quantize_search.h)
//   q4-minmax   4.5   Q4 groups, plain min-max round-to-nearest: same bytes layout, no search
//   q4-sym-rtn  4.25  scale only, q in -8..7, scale = amax/7 (f16), round to nearest
//   q4-sym-srch 4.25  scale only, q in -8..7, the same kind of search (a grid of clipped scales of
//                     either sign, then least-squares refits): what the minimum is measured against
//   fp8 (ours)  8.002 fp8 e4m3, an f32 scale per 128 x 128 block, the quantizer's 8-scale search
//   fp8 plain   8.002 the same with scaleInv = amax/448 (the release checkpoints' quantizer)
//   fp8 32      8.002 a 32-scale search, to show what more candidates would buy
// The symmetric formats exist in this tool alone (measurement, not a stored format).
#include "base/Random.h"
#include "kernels/common/FloatFormats.h"
#include "kernels/common/ParallelFor.h"
#include "kernels/common/WeightView.h"
#include "kernels/quantize/quantize.h"
#include "runtime/weights/SafeTensors.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

using namespace glm;
using namespace glm::kernels;

namespace {

enum Format { Q4Ours, Q4MinMax, Q4SymRtn, Q4SymSearch, Fp8Ours, Fp8Plain, Fp8Dense, kFormats };
const char *kNames[kFormats] = {"q4 search (ours)",
                                "q4 min-max RTN",
                                "q4 symmetric absmax RTN",
                                "q4 symmetric searched",
                                "fp8 blocks, 8-scale search (ours)",
                                "fp8 blocks, amax/448",
                                "fp8 blocks, 32-scale search"};
const char *kBits[kFormats] = {"4.5", "4.5", "4.25", "4.25", "8.002", "8.002", "8.002"};

struct Row {
  QuantizeStats stats[kFormats];
  double q4Seconds = 0.0, fp8Seconds = 0.0;
  double sourceBytes = 0.0;
  int64_t matrices = 0;
};

double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// --- the symmetric (no minimum) 4-bit baselines --------------------------------------------------

/// Σ (f32(s)·q − w)² with q = clamp(rne(w/s), −8, 7); fills the sums for a least-squares refit.
double symError(const float *w, float scale, double *sqw, double *sqq) {
  double e2 = 0.0, a = 0.0, b = 0.0;
  const float inverse = 1.0f / scale;
  for (int i = 0; i < kQ4Group; ++i) {
    const float q = std::min(7.0f, std::max(-8.0f, std::nearbyint(w[i] * inverse)));
    const volatile float v = scale * q;
    const double e = static_cast<double>(v) - w[i];
    e2 += e * e;
    a += static_cast<double>(q) * w[i];
    b += static_cast<double>(q) * q;
  }
  *sqw = a;
  *sqq = b;
  return e2;
}

void symGroup(const float *w, bool search, double *error, double *source) {
  float amax = 0.0f, signedMax = 0.0f;
  for (int i = 0; i < kQ4Group; ++i) {
    *source += static_cast<double>(w[i]) * w[i];
    if (std::fabs(w[i]) > amax) {
      amax = std::fabs(w[i]);
      signedMax = w[i];
    }
  }
  if (amax == 0.0f) {
    return;
  }
  double sqw, sqq;
  if (!search) {
    const float scale = f16ToFloat(doubleToF16(amax / 7.0f));
    *error += symError(w, scale, &sqw, &sqq);
    return;
  }
  // Grid: the largest magnitude mapped to ±t for t in 6.5..8.5 (either sign of scale, so the
  // extreme can use code −8), then least-squares refits of the best.
  double best = INFINITY;
  float bestScale = 0.0f;
  for (int sign = 0; sign < 2; ++sign) {
    for (int k = 0; k <= 16; ++k) {
      const float t = 6.5f + 0.125f * static_cast<float>(k);
      const float scale = f16ToFloat(doubleToF16((sign ? -signedMax : signedMax) / t));
      if (scale == 0.0f) {
        continue;
      }
      const double e = symError(w, scale, &sqw, &sqq);
      if (e < best) {
        best = e;
        bestScale = scale;
      }
    }
  }
  float scale = bestScale;
  for (int round = 0; round < 3; ++round) {
    symError(w, scale, &sqw, &sqq);
    if (sqq == 0.0) {
      break;
    }
    const float next = f16ToFloat(doubleToF16(sqw / sqq));
    if (next == 0.0f) {
      break;
    }
    const double e = symError(w, next, &sqw, &sqq);
    if (!(e < best)) {
      break;
    }
    best = e;
    scale = next;
  }
  *error += best;
}

QuantizeStats symmetric(const float *w, int64_t rows, int64_t cols, bool search) {
  std::vector<double> e(rows, 0.0), s(rows, 0.0);
  parallelFor(rows, 16, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      for (int64_t g = 0; g < cols / kQ4Group; ++g) {
        symGroup(w + r * cols + g * kQ4Group, search, &e[r], &s[r]);
      }
    }
  });
  return QuantizeStats::ofRows(e.data(), s.data(), rows, rows * cols);
}

// --- one matrix ----------------------------------------------------------------------------------

bool measure(const std::string &name, const WeightView &src, double sourceBytes, Row &row,
             bool perMatrix) {
  const int64_t rows = src.dim(0), cols = src.dim(1);
  std::vector<float> w(rows * cols);
  src.loadAll(w.data());
  QuantizeStats m[kFormats];
  std::vector<uint8_t> q4(q4Bytes(1, rows, cols)), f8(fp8Bytes(1, rows, cols));
  double t0 = now();
  Status s = quantizeQ4(src, q4.data(), &m[Q4Ours]);
  const double q4Time = now() - t0;
  if (s.ok()) {
    s = quantizeQ4(src, q4MinMax(), q4.data(), &m[Q4MinMax]);
  }
  t0 = now();
  if (s.ok()) {
    s = quantizeFp8Blocks(src, f8.data(), &m[Fp8Ours]);
  }
  const double fp8Time = now() - t0;
  if (s.ok()) {
    s = quantizeFp8Blocks(src, Fp8Search{1}, f8.data(), &m[Fp8Plain]);
  }
  if (s.ok()) {
    s = quantizeFp8Blocks(src, Fp8Search{32}, f8.data(), &m[Fp8Dense]);
  }
  if (!s.ok()) {
    std::fprintf(stderr, "%s: %s\n", name.c_str(), s.toString().c_str());
    return false;
  }
  m[Q4SymRtn] = symmetric(w.data(), rows, cols, false);
  m[Q4SymSearch] = symmetric(w.data(), rows, cols, true);
  for (int f = 0; f < kFormats; ++f) {
    row.stats[f].add(m[f]);
  }
  row.q4Seconds += q4Time;
  row.fp8Seconds += fp8Time;
  row.sourceBytes += sourceBytes;
  ++row.matrices;
  if (perMatrix) {
    std::printf("  %-48s [%5lld, %5lld]", name.c_str(), static_cast<long long>(rows),
                static_cast<long long>(cols));
    for (int f = 0; f < kFormats; ++f) {
      std::printf(" %.5f", m[f].relativeRms());
    }
    std::printf("\n");
  }
  return true;
}

void report(const std::string &title, const Row &row) {
  std::printf("\n### %s (%lld matrices, %.1f M weights)\n\n", title.c_str(),
              static_cast<long long>(row.matrices),
              static_cast<double>(row.stats[0].elements) / 1e6);
  std::printf(
      "| format | bits/weight | relative RMS error | vs q4 min-max RTN |\n|---|---|---|---|\n");
  const double base = row.stats[Q4MinMax].relativeRms();
  for (int f = 0; f < kFormats; ++f) {
    const double e = row.stats[f].relativeRms();
    std::printf("| %s | %s | %.5f | %+.1f%% |\n", kNames[f], kBits[f], e, 100.0 * (e / base - 1.0));
  }
  const double gb = row.sourceBytes / 1e9;
  std::printf("\nq4 search: %.2f s for %.3f GB of bf16 source (%.1f s/GB); fp8 blocks: %.2f s "
              "(%.1f s/GB); %d threads\n",
              row.q4Seconds, gb, row.q4Seconds / gb, row.fp8Seconds, row.fp8Seconds / gb,
              parallelThreads());
}

bool selected(const TensorView &t) {
  if (t.shape.size() != 2 || t.shape[1] % kQ4Group != 0 || !isFloatingPoint(t.dtype)) {
    return false;
  }
  const std::string &n = t.name;
  const auto endsWith = [&](std::string_view s) {
    return n.size() >= s.size() && n.compare(n.size() - s.size(), s.size(), s) == 0;
  };
  return endsWith("proj.weight") || n == "lm_head.weight" || endsWith(".lm_head.weight");
}

/// Student-t (nu) [rows, cols] with 1% of the input columns scaled x10, rounded to bf16.
std::vector<uint16_t> synthetic(int64_t rows, int64_t cols, int nu, uint64_t seed) {
  std::vector<uint16_t> out(rows * cols);
  std::vector<float> columnScale(cols, 1.0f);
  SplitMix64 pick(seed ^ 0x5DEECE66Dull);
  for (int64_t k = 0; k < cols / 100; ++k) {
    columnScale[pick.below(cols)] = 10.0f;
  }
  parallelFor(rows, 64, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      SplitMix64 rng(seed * 1000003 + r);
      auto uniform = [&] { return (static_cast<double>(rng.next() >> 11) + 0.5) * 0x1p-53; };
      auto normal = [&] {
        return std::sqrt(-2.0 * std::log(uniform())) * std::cos(6.283185307179586 * uniform());
      };
      for (int64_t c = 0; c < cols; ++c) {
        double chi2 = 0.0;
        for (int k = 0; k < nu; ++k) {
          const double y = normal();
          chi2 += y * y;
        }
        const double t = normal() / std::sqrt(chi2 / nu);
        out[r * cols + c] = floatToBf16(static_cast<float>(0.02 * t * columnScale[c]));
      }
    }
  });
  return out;
}

} // namespace

int main(int argc, char **argv) {
  std::vector<std::string> models;
  bool synth = false, perMatrix = false;
  int64_t size = 4096;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--model" && i + 1 < argc) {
      models.push_back(argv[++i]);
    } else if (a == "--synthetic") {
      synth = true;
    } else if (a == "--per-matrix") {
      perMatrix = true;
    } else if (a == "--size" && i + 1 < argc) {
      size = std::stoll(argv[++i]);
    } else {
      std::fprintf(stderr,
                   "usage: glm-quant-quality [--model FILE.safetensors|DIR]... [--synthetic] "
                   "[--size N] [--per-matrix]\n");
      return 2;
    }
  }
  if (models.empty() && !synth) {
    synth = true;
  }
  if (perMatrix) {
    std::printf("per matrix, relative RMS error:");
    for (int f = 0; f < kFormats; ++f) {
      std::printf(" | %s", kNames[f]);
    }
    std::printf("\n");
  }
  for (const std::string &path : models) {
    Row row;
    std::vector<std::unique_ptr<SafeTensorsFile>> files;
    std::vector<const TensorView *> tensors;
    std::unique_ptr<Checkpoint> checkpoint;
    if (std::filesystem::is_directory(path)) {
      auto opened = Checkpoint::open(path);
      if (!opened.ok()) {
        std::fprintf(stderr, "%s\n", opened.status().toString().c_str());
        return 1;
      }
      checkpoint = std::move(opened).value();
      tensors = checkpoint->tensors();
    } else {
      auto opened = SafeTensorsFile::open(path);
      if (!opened.ok()) {
        std::fprintf(stderr, "%s\n", opened.status().toString().c_str());
        return 1;
      }
      files.push_back(std::move(opened).value());
      for (const TensorView &t : files.back()->tensors()) {
        tensors.push_back(&t);
      }
    }
    for (const TensorView *t : tensors) {
      if (!selected(*t)) {
        continue;
      }
      const WeightView view = WeightView::raw(t->data, t->dtype, {t->shape[0], t->shape[1]});
      if (!measure(t->name, view, static_cast<double>(t->numel()) * 2.0, row, perMatrix)) {
        return 1;
      }
    }
    report(path, row);
  }
  if (synth) {
    for (int nu : {3, 5}) {
      Row row;
      const std::vector<uint16_t> w = synthetic(size, size, nu, 1000 + nu);
      measure("student-t", WeightView::raw(w.data(), DType::BF16, {size, size}),
              static_cast<double>(w.size()) * 2.0, row, perMatrix);
      report("Student-t nu = " + std::to_string(nu) + ", " + std::to_string(size) + " x " +
                 std::to_string(size) + ", 1% of input columns x10, bf16",
             row);
    }
  }
  return 0;
}
