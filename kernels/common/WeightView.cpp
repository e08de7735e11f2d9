// WeightView: per-element widening of bf16/f16/f32/fp8 weights, and weight shape checks.
#include "kernels/common/WeightView.h"

#include "kernels/common/FloatFormats.h"

#include <algorithm>
#include <array>
#include <cassert>
#include <cstring>
#include <sstream>
#include <vector>

namespace glm::kernels {

int64_t WeightView::numel() const {
  int64_t n = 1;
  for (int i = 0; i < rank; ++i) {
    n *= shape[i];
  }
  return n;
}

namespace {

/// Every e4m3 code's value: a table, since fp8E4m3ToFloat's ldexp costs ~15 ns a weight and the
/// CPU engine widens every fp8 weight of every step.
const std::array<float, 256> &fp8Values() {
  static const std::array<float, 256> table = [] {
    std::array<float, 256> t{};
    for (int code = 0; code < 256; ++code) {
      t[code] = fp8E4m3ToFloat(static_cast<uint8_t>(code));
    }
    return t;
  }();
  return table;
}

/// A Q4 weight from its code and group parameters: the product rounded, then the sum
/// (DenseFormats.h; this file is compiled without contraction into a fused multiply-add).
float q4Value(float scale, uint32_t code, float minimum) {
  const float product = scale * static_cast<float>(code);
  return product + minimum;
}

} // namespace

int64_t WeightView::cols() const {
  const int64_t r = rows();
  return r == 0 ? 0 : numel() / r;
}

float WeightView::load(int64_t i) const {
  switch (dtype) {
  case DType::F32:
    return static_cast<const float *>(data)[i];
  case DType::BF16:
    return bf16ToFloat(static_cast<const uint16_t *>(data)[i]);
  case DType::F16:
    return f16ToFloat(static_cast<const uint16_t *>(data)[i]);
  case DType::F8_E4M3: {
    const float v = fp8Values()[static_cast<const uint8_t *>(data)[i]];
    if (blockScaleInv == nullptr) {
      return v;
    }
    const int64_t c = cols();
    const int64_t blocksPerRow = (c + blockCols - 1) / blockCols;
    const int64_t r = i / c;
    return v * blockScaleInv[(r / blockRows) * blocksPerRow + (i % c) / blockCols];
  }
  case DType::U8: {
    assert(q4Groups != nullptr && "a U8 weight view is Q4 groups");
    const int64_t c = cols();
    const int64_t r = i / c, col = i % c;
    const uint16_t *g = q4Groups + 2 * (r * (c / kQ4Group) + col / kQ4Group);
    return q4Value(f16ToFloat(g[0]), q4Code(static_cast<const uint8_t *>(data), c, r, col),
                   f16ToFloat(g[1]));
  }
  default:
    assert(false && "checkWeight admits float dtypes only");
    return 0.0f;
  }
}

void WeightView::loadAll(float *out) const {
  for (int64_t r = 0, n = rows(); r < n; ++r) {
    loadRow(r, out + r * cols());
  }
}

void WeightView::loadRow(int64_t r, float *out) const {
  const int64_t c = cols();
  const int64_t base = r * c;
  switch (dtype) {
  case DType::F32:
    std::memcpy(out, static_cast<const float *>(data) + base, sizeof(float) * c);
    return;
  case DType::BF16: {
    const uint16_t *p = static_cast<const uint16_t *>(data) + base;
    for (int64_t j = 0; j < c; ++j) {
      out[j] = bf16ToFloat(p[j]);
    }
    return;
  }
  case DType::U8: {
    // Q4 groups: each group's parameters decoded once, not per weight (load()'s values).
    assert(q4Groups != nullptr && "a U8 weight view is Q4 groups");
    const uint8_t *codes = static_cast<const uint8_t *>(data) + r * (c / 2);
    const uint16_t *g = q4Groups + 2 * r * (c / kQ4Group);
    for (int64_t j0 = 0; j0 < c; j0 += kQ4Group, g += 2) {
      const float scale = f16ToFloat(g[0]), minimum = f16ToFloat(g[1]);
      for (int64_t j = j0; j < j0 + kQ4Group; j += 2) {
        const uint8_t byte = codes[j / 2];
        out[j] = q4Value(scale, byte & 0xFu, minimum);
        out[j + 1] = q4Value(scale, byte >> 4, minimum);
      }
    }
    return;
  }
  case DType::F8_E4M3: {
    // A block's scale looked up once per block of columns.
    const uint8_t *p = static_cast<const uint8_t *>(data) + base;
    const std::array<float, 256> &values = fp8Values();
    const int64_t blocksPerRow = (c + blockCols - 1) / blockCols;
    for (int64_t j0 = 0; j0 < c; j0 += blockCols) {
      const float scale = blockScaleInv == nullptr
                              ? 1.0f
                              : blockScaleInv[(r / blockRows) * blocksPerRow + j0 / blockCols];
      const int64_t end = std::min(c, j0 + blockCols);
      for (int64_t j = j0; j < end; ++j) {
        out[j] = blockScaleInv == nullptr ? values[p[j]] : values[p[j]] * scale;
      }
    }
    return;
  }
  default:
    for (int64_t j = 0; j < c; ++j) {
      out[j] = load(base + j);
    }
    return;
  }
}

namespace {

WeightView makeView(const void *data, DType dtype, std::initializer_list<int64_t> shape) {
  WeightView v;
  v.data = data;
  v.dtype = dtype;
  assert(shape.size() <= WeightView::kMaxRank);
  for (int64_t d : shape) {
    v.shape[v.rank++] = d;
  }
  return v;
}

std::vector<int64_t> squeezed(const int64_t *dims, size_t n) {
  std::vector<int64_t> out;
  for (size_t i = 0; i < n; ++i) {
    if (dims[i] != 1) {
      out.push_back(dims[i]);
    }
  }
  return out;
}

std::string shapeString(const int64_t *dims, size_t n) {
  std::ostringstream os;
  os << "[";
  for (size_t i = 0; i < n; ++i) {
    os << (i ? ", " : "") << dims[i];
  }
  os << "]";
  return os.str();
}

} // namespace

WeightView WeightView::f32(const float *data, std::initializer_list<int64_t> shape) {
  return makeView(data, DType::F32, shape);
}

WeightView WeightView::raw(const void *data, DType dtype, std::initializer_list<int64_t> shape) {
  return makeView(data, dtype, shape);
}

WeightView WeightView::encoded(const void *bytes, DenseEncoding encoding, DType plain, int64_t rows,
                               int64_t cols) {
  const auto *base = static_cast<const uint8_t *>(bytes);
  switch (encoding) {
  case DenseEncoding::Plain:
    break;
  case DenseEncoding::Q4: {
    WeightView v = makeView(bytes, DType::U8, {rows, cols});
    v.q4Groups = reinterpret_cast<const uint16_t *>(base + q4GroupsOffset(1, rows, cols));
    return v;
  }
  case DenseEncoding::Fp8: {
    WeightView v = makeView(bytes, DType::F8_E4M3, {rows, cols});
    v.blockScaleInv = reinterpret_cast<const float *>(base + fp8ScalesOffset(1, rows, cols));
    v.blockRows = v.blockCols = kFp8Block;
    return v;
  }
  }
  return makeView(bytes, plain, {rows, cols});
}

Status checkWeight(const WeightView &view, std::string_view what,
                   std::initializer_list<int64_t> expected) {
  if (!view.present()) {
    return invalidArgument(what, " is missing");
  }
  const bool q4 = view.dtype == DType::U8 && view.q4Groups != nullptr;
  if (view.dtype != DType::F32 && view.dtype != DType::BF16 && view.dtype != DType::F16 &&
      view.dtype != DType::F8_E4M3 && !q4) {
    return invalidArgument(what, " is ", dtypeName(view.dtype),
                           "; reference kernels read BF16, F16, F32, F8_E4M3 and Q4 weights");
  }
  if (q4 && (view.rank != 2 || view.shape[1] % kQ4Group != 0)) {
    return invalidArgument(what, " is Q4 groups, which need a [rows, cols] view with cols a ",
                           "multiple of ", kQ4Group);
  }
  const std::vector<int64_t> want(expected);
  if (squeezed(view.shape.data(), view.rank) != squeezed(want.data(), want.size())) {
    return invalidArgument(what, " has shape ", shapeString(view.shape.data(), view.rank),
                           ", expected ", shapeString(want.data(), want.size()));
  }
  return Status::success();
}

Status checkOptionalWeight(const WeightView &view, std::string_view what,
                           std::initializer_list<int64_t> expected) {
  return view.present() ? checkWeight(view, what, expected) : Status::success();
}

} // namespace glm::kernels
