// quantize: the host quantizers (Q4 groups, fp8 blocks) and the direction ablation.
#include "kernels/quantize/quantize.h"

#include "kernels/common/FloatFormats.h"
#include "kernels/common/ParallelFor.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

namespace glm::kernels {

namespace {

Status checkSource(const WeightView &src, const char *format) {
  if (!src.present()) {
    return invalidArgument(format, " quantization: the source weight is missing");
  }
  if (src.rank != 2) {
    return invalidArgument(format, " quantization needs a 2-D [rows, cols] weight; this one has ",
                           src.rank, " dimensions");
  }
  return checkWeight(src, std::string(format) + " quantization source", {src.dim(0), src.dim(1)});
}

Status nonFinite(const char *format, int64_t rows, int64_t cols, int64_t row, int64_t col,
                 float value) {
  return invalidArgument(format, " quantization of a [", rows, ", ", cols, "] weight: ", value,
                         " at row ", row, ", column ", col,
                         "; a checkpoint's weights should be finite");
}

/// The first non-finite element of row[0, n), or -1.
int64_t firstNonFinite(const float *row, int64_t n) {
  for (int64_t c = 0; c < n; ++c) {
    if (!std::isfinite(row[c])) {
      return c;
    }
  }
  return -1;
}

/// Rows per parallelFor chunk: about 64K elements.
int64_t rowGrain(int64_t cols) {
  return std::max<int64_t>(1, (int64_t(1) << 16) / std::max<int64_t>(cols, 1));
}

} // namespace

Status quantizeQ4(const WeightView &src, uint8_t *dst, QuantizeStats *stats) {
  return quantizeQ4(src, Q4Search{}, dst, stats);
}

Status quantizeQ4(const WeightView &src, const Q4Search &search, uint8_t *dst,
                  QuantizeStats *stats) {
  GLM_RETURN_IF_ERROR(checkSource(src, "Q4"));
  const int64_t rows = src.dim(0), cols = src.dim(1);
  if (cols % kQ4Group != 0) {
    return invalidArgument("Q4 quantization of a [", rows, ", ", cols, "] weight: its ", cols,
                           " input features are not a multiple of the group size ", kQ4Group);
  }
  const int64_t groupsPerRow = cols / kQ4Group;
  const int64_t codeBytes = rows * (cols / 2);
  uint8_t *groupPlane = dst + q4GroupsOffset(1, rows, cols);
  std::memset(dst + codeBytes, 0, static_cast<size_t>(q4GroupsOffset(1, rows, cols) - codeBytes));

  // Per-row results, combined in row order afterwards: the same for any split into chunks.
  std::vector<double> rowError(rows, 0.0), rowSource(rows, 0.0);
  std::vector<int64_t> badColumn(rows, -1), badGroup(rows, -1);
  parallelFor(rows, rowGrain(cols), [&](int64_t begin, int64_t end) {
    std::vector<float> row(cols);
    for (int64_t r = begin; r < end; ++r) {
      src.loadRow(r, row.data());
      badColumn[r] = firstNonFinite(row.data(), cols);
      if (badColumn[r] >= 0) {
        continue;
      }
      uint8_t *rowCodes = dst + r * (cols / 2);
      double error = 0.0, source = 0.0;
      for (int64_t g = 0; g < groupsPerRow; ++g) {
        const float *w = row.data() + g * kQ4Group;
        const Q4GroupFit fit = q4FitGroup(w, search);
        if (!(fit.error < qInf())) {
          badGroup[r] = g;
          break;
        }
        const uint16_t pair[2] = {fit.scale, fit.minimum};
        std::memcpy(groupPlane + 4 * (r * groupsPerRow + g), pair, sizeof(pair));
        uint8_t *packed = rowCodes + g * (kQ4Group / 2);
        q4PackGroup(w, fit, packed);
        const float scale = qF16ToFloat(fit.scale), minimum = qF16ToFloat(fit.minimum);
        for (int64_t i = 0; i < kQ4Group; ++i) {
          const uint32_t q = (i & 1) != 0 ? packed[i / 2] >> 4 : packed[i / 2] & 0xFu;
          const double e =
              static_cast<double>(q4Value(scale, static_cast<float>(q), minimum)) - w[i];
          error += e * e;
          source += static_cast<double>(w[i]) * w[i];
        }
      }
      rowError[r] = error;
      rowSource[r] = source;
    }
  });
  for (int64_t r = 0; r < rows; ++r) {
    if (badColumn[r] >= 0) {
      std::vector<float> row(cols);
      src.loadRow(r, row.data());
      return nonFinite("Q4", rows, cols, r, badColumn[r], row[badColumn[r]]);
    }
    if (badGroup[r] >= 0) {
      return invalidArgument("Q4 quantization of a [", rows, ", ", cols, "] weight: row ", r,
                             ", columns ", badGroup[r] * kQ4Group, "..",
                             (badGroup[r] + 1) * kQ4Group - 1,
                             " hold values or a range beyond f16 (65504)");
    }
  }
  if (stats != nullptr) {
    stats->add(QuantizeStats::ofRows(rowError.data(), rowSource.data(), rows, rows * cols));
  }
  return Status::success();
}

Status quantizeFp8Blocks(const WeightView &src, uint8_t *dst, QuantizeStats *stats) {
  return quantizeFp8Blocks(src, Fp8Search{}, dst, stats);
}

Status quantizeFp8Blocks(const WeightView &src, const Fp8Search &search, uint8_t *dst,
                         QuantizeStats *stats) {
  GLM_RETURN_IF_ERROR(checkSource(src, "fp8"));
  const int64_t rows = src.dim(0), cols = src.dim(1);
  const int64_t rowBlocks = fp8BlocksOf(rows), colBlocks = fp8BlocksOf(cols);
  const int candidates = std::max(1, search.candidates);
  uint8_t *scalePlane = dst + fp8ScalesOffset(1, rows, cols);
  std::memset(dst + rows * cols, 0,
              static_cast<size_t>(fp8ScalesOffset(1, rows, cols) - rows * cols));
  static const std::vector<float> decode = [] {
    std::vector<float> t(256);
    for (int v = 0; v < 256; ++v) {
      t[v] = fp8E4m3ToFloat(static_cast<uint8_t>(v));
    }
    return t;
  }();

  std::vector<double> blockError(rowBlocks, 0.0), blockSource(rowBlocks, 0.0);
  std::vector<int64_t> badRow(rowBlocks, -1), badColumn(rowBlocks, -1);
  parallelFor(rowBlocks, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> block;
    for (int64_t rb = begin; rb < end; ++rb) {
      const int64_t r0 = rb * kFp8Block, r1 = std::min(rows, r0 + kFp8Block);
      block.resize(static_cast<size_t>((r1 - r0) * cols));
      for (int64_t r = r0; r < r1; ++r) {
        float *row = block.data() + (r - r0) * cols;
        src.loadRow(r, row);
        const int64_t c = firstNonFinite(row, cols);
        if (c >= 0) {
          badRow[rb] = r;
          badColumn[rb] = c;
          break;
        }
      }
      if (badRow[rb] >= 0) {
        continue;
      }
      // Σ (stored − w)² over the block for scaleInv, in double, row-major.
      auto blockErrorFor = [&](int64_t c0, int64_t c1, float scaleInv) {
        double e2 = 0.0;
        for (int64_t r = r0; r < r1; ++r) {
          const float *row = block.data() + (r - r0) * cols;
          for (int64_t c = c0; c < c1; ++c) {
            const double e =
                static_cast<double>(decode[qFloatToFp8E4m3(row[c] / scaleInv)] * scaleInv) - row[c];
            e2 += e * e;
          }
        }
        return e2;
      };
      double error = 0.0, source = 0.0;
      for (int64_t cb = 0; cb < colBlocks; ++cb) {
        const int64_t c0 = cb * kFp8Block, c1 = std::min(cols, c0 + kFp8Block);
        float amax = 0.0f;
        for (int64_t r = r0; r < r1; ++r) {
          const float *row = block.data() + (r - r0) * cols;
          for (int64_t c = c0; c < c1; ++c) {
            amax = std::max(amax, std::fabs(row[c]));
            source += static_cast<double>(row[c]) * row[c];
          }
        }
        float scaleInv = 1.0f;
        double best = 0.0;
        if (amax > 0.0f) {
          const float base = amax / 448.0f;
          for (int k = 0; k < candidates; ++k) {
            const float factor = 1.0f + static_cast<float>(k) / static_cast<float>(candidates);
            const float candidate = std::max(base * factor, 0x1p-126f);
            const double e = blockErrorFor(c0, c1, candidate);
            if (k == 0 || e < best) {
              best = e;
              scaleInv = candidate;
            }
          }
        } else {
          best = blockErrorFor(c0, c1, scaleInv);
        }
        error += best;
        std::memcpy(scalePlane + 4 * (rb * colBlocks + cb), &scaleInv, sizeof(float));
        for (int64_t r = r0; r < r1; ++r) {
          const float *row = block.data() + (r - r0) * cols;
          uint8_t *out = dst + r * cols;
          for (int64_t c = c0; c < c1; ++c) {
            out[c] = qFloatToFp8E4m3(row[c] / scaleInv);
          }
        }
      }
      blockError[rb] = error;
      blockSource[rb] = source;
    }
  });
  for (int64_t rb = 0; rb < rowBlocks; ++rb) {
    if (badRow[rb] >= 0) {
      std::vector<float> row(cols);
      src.loadRow(badRow[rb], row.data());
      return nonFinite("fp8", rows, cols, badRow[rb], badColumn[rb], row[badColumn[rb]]);
    }
  }
  if (stats != nullptr) {
    stats->add(
        QuantizeStats::ofRows(blockError.data(), blockSource.data(), rowBlocks, rows * cols));
  }
  return Status::success();
}

Status ablateDirection(std::span<float> weight, int64_t out, int64_t in,
                       std::span<const float> direction, double alpha) {
  if (static_cast<int64_t>(direction.size()) != out) {
    return invalidArgument("direction ablation: the direction has ", direction.size(),
                           " elements but the weight [", out, ", ", in, "] writes ", out,
                           " outputs; they must be equal");
  }
  if (out < 0 || in < 0 || static_cast<int64_t>(weight.size()) != out * in) {
    return invalidArgument("direction ablation: the weight holds ", weight.size(),
                           " elements, not ", out, " x ", in);
  }
  double norm2 = 0.0;
  for (float d : direction) {
    norm2 += static_cast<double>(d) * d;
  }
  if (!(norm2 > 0.0) || !std::isfinite(norm2)) {
    return invalidArgument(
        "direction ablation: the direction must be finite and non-zero (|d|² = ", norm2, ")");
  }
  const double norm = std::sqrt(norm2);
  std::vector<double> unit(out);
  for (int64_t o = 0; o < out; ++o) {
    unit[o] = direction[o] / norm;
  }
  // p = d̂ᵀ W, each column summed over the rows in order (chunks of columns: any thread count
  // gives the same sums).
  std::vector<double> projection(in, 0.0);
  constexpr int64_t kColumnGrain = 256;
  parallelFor(in, kColumnGrain, [&](int64_t begin, int64_t end) {
    for (int64_t o = 0; o < out; ++o) {
      const float *row = weight.data() + o * in;
      for (int64_t j = begin; j < end; ++j) {
        projection[j] += unit[o] * row[j];
      }
    }
  });
  parallelFor(out, rowGrain(in), [&](int64_t begin, int64_t end) {
    for (int64_t o = begin; o < end; ++o) {
      float *row = weight.data() + o * in;
      const double k = alpha * unit[o];
      for (int64_t j = 0; j < in; ++j) {
        row[j] = static_cast<float>(static_cast<double>(row[j]) - k * projection[j]);
      }
    }
  });
  return Status::success();
}

} // namespace glm::kernels
