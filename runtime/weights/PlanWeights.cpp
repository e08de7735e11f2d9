// Rank slices of checkpoint tensors into the weights arena.
#include "runtime/weights/PlanWeights.h"

#include "base/Logging.h"
#include "kernels/common/DenseFormats.h"
#include "kernels/common/FloatFormats.h"
#include "kernels/common/WeightView.h"
#include "kernels/quantize/quantize.h"
#include "runtime/weights/Exl3Tensors.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace glm {
namespace {

/// The weights digest's hash of a byte stream: 8 bytes a step through a multiply-rotate chain (a
/// few GB/s on one core, so it keeps up with the copies it rides along), the length mixed in.
class ByteHash {
public:
  void add(const uint8_t *p, uint64_t n) {
    length_ += n;
    for (; n >= 8; p += 8, n -= 8) {
      uint64_t word;
      std::memcpy(&word, p, 8);
      step(word);
    }
    if (n > 0) {
      uint64_t word = 0;
      std::memcpy(&word, p, static_cast<size_t>(n));
      step(word ^ (uint64_t{0xA5} << 56));
    }
  }
  template <typename T> void addValue(const T &value) {
    add(reinterpret_cast<const uint8_t *>(&value), sizeof value);
  }
  uint64_t value() const {
    // MurmurHash3's finalizer over the state and the length.
    uint64_t h = state_ ^ (length_ * 0x9E3779B97F4A7C15ull);
    h ^= h >> 33;
    h *= 0xFF51AFD7ED558CCDull;
    h ^= h >> 33;
    h *= 0xC4CEB9FE1A85EC53ull;
    return h ^ (h >> 33);
  }

private:
  void step(uint64_t word) {
    state_ ^= word * 0x87C37B91114253D5ull;
    state_ = ((state_ << 31) | (state_ >> 33)) * 0x4CF5AD432745937Full + 0x52DCE729;
  }
  uint64_t state_ = 0x6A09E667F3BCC908ull;
  uint64_t length_ = 0;
};

/// Copies the slice [start, start + count) along `dim` of a dense row-major tensor of `shape`
/// (to `dst` when not null), and adds the bytes it reads to `hash` (when not null).
void copySlice(const uint8_t *src, uint8_t *dst, const std::vector<int64_t> &shape, size_t dim,
               int64_t start, int64_t count, size_t elementSize, ByteHash *hash = nullptr) {
  uint64_t outer = 1, inner = elementSize;
  for (size_t d = 0; d < dim; ++d) {
    outer *= static_cast<uint64_t>(shape[d]);
  }
  for (size_t d = dim + 1; d < shape.size(); ++d) {
    inner *= static_cast<uint64_t>(shape[d]);
  }
  const uint64_t run = static_cast<uint64_t>(count) * inner;
  for (uint64_t o = 0; o < outer; ++o) {
    const uint8_t *from =
        src + (o * static_cast<uint64_t>(shape[dim]) + static_cast<uint64_t>(start)) * inner;
    if (dst != nullptr) {
      std::memcpy(dst + o * run, from, run);
    }
    if (hash != nullptr) {
      hash->add(from, run); // just copied: in cache
    }
  }
}

/// One tensor to copy: where it comes from and where its slice goes.
struct CopyJob {
  uint32_t binding; // its index in the plan's weights
  const TensorView *tensor;
  std::vector<int64_t> shape; // the tensor's (global) shape
  size_t dim;                 // slicing dimension, ignored when count covers it all
  int64_t start, count;
  uint8_t *dst;
};

/// One matrix the loader transforms rather than copies: quantized to Q4 or fp8 blocks from a
/// wider checkpoint tensor, an FP8 checkpoint's values with their block scales, or a projection
/// the ablation changes. The rank's part is `count` features from `start` along `dim` of the
/// checkpoint tensor [rows, cols].
struct EncodeJob {
  uint32_t binding = 0; // its index in the plan's weights
  std::string name;     // the binding
  const TensorView *tensor;
  const TensorView *scaleInv; // an FP8 checkpoint's weight_scale_inv, else null
  size_t dim;
  int64_t start, count;
  kernels::DenseEncoding encoding;
  DType element; // a plain binding's element type (the ablation writes it back)
  bool ablate;
  uint8_t *dst;
  uint64_t bytes;       // of the binding's slice
  uint64_t arenaOffset; // and where it lies in the weights arena
};

/// The rank's part of a [rows, cols] tensor of `elementSize`-byte elements, contiguous: the
/// tensor itself when the part is whole rows, else a copy in `scratch`.
const uint8_t *rankPart(const EncodeJob &job, const TensorView &t, size_t elementSize,
                        std::vector<uint8_t> &scratch) {
  if (job.dim == 0 || job.count == t.shape[job.dim]) {
    const uint64_t rowBytes = static_cast<uint64_t>(t.shape[1]) * elementSize;
    return t.data + (job.dim == 0 ? static_cast<uint64_t>(job.start) * rowBytes : 0);
  }
  scratch.resize(static_cast<size_t>(t.shape[0] * job.count) * elementSize);
  copySlice(t.data, scratch.data(), t.shape, job.dim, job.start, job.count, elementSize);
  return scratch.data();
}

/// Runs one EncodeJob (each is split over all cores inside, or quantized on the device).
Status encode(const EncodeJob &job, const Ablation *ablation, DeviceQuantizer *device,
              QuantizeReport &report) {
  const TensorView &t = *job.tensor;
  const int64_t rows = job.dim == 0 ? job.count : t.shape[0];
  const int64_t cols = job.dim == 1 ? job.count : t.shape[1];
  std::vector<uint8_t> scratch;
  const uint8_t *part = rankPart(job, t, dtypeSize(t.dtype), scratch);

  if (job.scaleInv != nullptr) {
    // An FP8 checkpoint: the values as stored, and the blocks of the rank's part, which starts
    // on a block or lies inside one (glm-to-plan and encodeJob refuse other slices).
    std::memcpy(job.dst, part, static_cast<size_t>(rows * cols));
    EncodeJob blocks = job;
    blocks.start = job.start / kernels::kFp8Block;
    blocks.count = kernels::fp8BlocksOf(job.count);
    std::vector<uint8_t> scaleScratch;
    const uint8_t *scales = rankPart(blocks, *job.scaleInv, sizeof(float), scaleScratch);
    std::memcpy(job.dst + kernels::fp8ScalesOffset(1, rows, cols), scales,
                static_cast<size_t>(kernels::fp8BlocksOf(rows) * kernels::fp8BlocksOf(cols)) *
                    sizeof(float));
    return Status::success();
  }

  kernels::WeightView source = kernels::WeightView::raw(part, t.dtype, {rows, cols});
  std::vector<float> widened;
  if (job.ablate) {
    widened.resize(static_cast<size_t>(rows * cols));
    source.loadAll(widened.data());
    GLM_RETURN_IF_ERROR(
        kernels::ablateDirection(widened, rows, cols, ablation->direction, ablation->alpha)
            .withContext(strCat("weight ", job.name)));
    source = kernels::WeightView::f32(widened.data(), {rows, cols});
    ++report.ablated;
  }
  if (job.encoding == kernels::DenseEncoding::Plain) {
    // Only the ablation gets here: the changed projection, narrowed back to its element type.
    for (int64_t i = 0; i < rows * cols; ++i) {
      const float v = widened[static_cast<size_t>(i)];
      switch (job.element) {
      case DType::BF16: {
        const uint16_t b = kernels::floatToBf16(v);
        std::memcpy(job.dst + 2 * i, &b, 2);
        break;
      }
      case DType::F16: {
        const uint16_t h = kernels::doubleToF16(v);
        std::memcpy(job.dst + 2 * i, &h, 2);
        break;
      }
      default:
        std::memcpy(job.dst + 4 * i, &v, 4);
        break;
      }
    }
    return Status::success();
  }
  kernels::QuantizeStats stats;
  const bool q4 = job.encoding == kernels::DenseEncoding::Q4;
  DeviceQuantizer::Job onDevice;
  onDevice.name = job.name;
  onDevice.source = job.ablate ? reinterpret_cast<const uint8_t *>(widened.data()) : part;
  onDevice.dtype = job.ablate ? DType::F32 : t.dtype;
  onDevice.rows = rows;
  onDevice.cols = cols;
  onDevice.encoding = job.encoding;
  onDevice.arenaOffset = job.arenaOffset;
  onDevice.bytes = job.bytes;
  const bool sourceOk =
      onDevice.dtype == DType::BF16 || onDevice.dtype == DType::F16 || onDevice.dtype == DType::F32;
  if (device != nullptr && sourceOk && device->quantize(onDevice, stats)) {
    ++report.onDevice;
  } else {
    stats = {};
    GLM_RETURN_IF_ERROR((q4 ? kernels::quantizeQ4(source, job.dst, &stats)
                            : kernels::quantizeFp8Blocks(source, job.dst, &stats))
                            .withContext(strCat("weight ", job.name)));
  }
  const double error = stats.relativeRms();
  ++(q4 ? report.q4 : report.fp8);
  report.bytesBefore += static_cast<uint64_t>(rows * cols) * dtypeSize(t.dtype);
  report.bytesAfter += static_cast<uint64_t>(q4 ? kernels::q4Bytes(1, rows, cols)
                                                : kernels::fp8Bytes(1, rows, cols));
  report.sumError += error;
  if (error > report.worstError || report.worstName.empty()) {
    report.worstError = error;
    report.worstName = job.name;
  }
  return Status::success();
}

/// Whether binding `name` is a projection the ablation selects: `blk.<L>.attn.o_proj` (the
/// builder's name for every layer's attention output projection) with L in its range or its MTP
/// layer.
bool ablates(const Ablation *ablation, const std::string &name) {
  if (ablation == nullptr || name.rfind("blk.", 0) != 0) {
    return false;
  }
  const size_t dot = name.find('.', 4);
  if (dot == std::string::npos || dot == 4 ||
      name.compare(dot, std::string::npos, ".attn.o_proj") != 0) {
    return false;
  }
  int64_t layer = 0;
  for (size_t i = 4; i < dot; ++i) {
    if (name[i] < '0' || name[i] > '9') {
      return false;
    }
    layer = layer * 10 + (name[i] - '0');
    if (layer > (int64_t(1) << 32)) {
      return false;
    }
  }
  return layer == ablation->mtpLayer ||
         (layer >= ablation->firstLayer && layer <= ablation->lastLayer);
}

/// One EXL3 matrix to place: its checkpoint layer, the features this rank holds, and where in the
/// binding's slice it goes (Exl3ArenaLayout).
struct Exl3Job {
  uint32_t binding; // its index in the plan's weights
  Exl3Tensors layer;
  int64_t inStart, outStart; // first input / output feature of the rank's part (multiples of 128)
  uint8_t *slice;
  Exl3ArenaLayout layout;
  int64_t matrix;
};

/// Copies a rank's part of an EXL3 layer (reference/exl3_format.md §1.1's tensor-parallel split):
/// by outputs, the trellis tile columns and svh entries; by inputs, the tile rows and suh entries.
/// With `place` false it only hashes what it would copy (another rank's part, for the digest).
uint64_t placeExl3(const Exl3Job &job, bool place, ByteHash *hash) {
  const Exl3ArenaLayout &l = job.layout;
  const Exl3Tensors &g = job.layer;
  const uint64_t tileBytes = 32 * static_cast<uint64_t>(g.bits);
  const auto *trellis = g.trellis->data;
  uint8_t *dst = job.slice + static_cast<uint64_t>(job.matrix) * l.trellisStride();
  const uint64_t rowBytes = static_cast<uint64_t>(l.n / 16) * tileBytes;
  // Copies (when placing) and hashes (when asked) one run of the checkpoint.
  auto run = [&](uint8_t *to, const uint8_t *from, uint64_t bytes) {
    if (place) {
      std::memcpy(to, from, bytes);
    }
    if (hash != nullptr) {
      hash->add(from, bytes);
    }
  };
  for (int64_t kt = 0; kt < l.k / 16; ++kt) {
    const uint64_t srcRow =
        static_cast<uint64_t>(job.inStart / 16 + kt) * static_cast<uint64_t>(g.n / 16);
    run(dst + static_cast<uint64_t>(kt) * rowBytes,
        trellis + (srcRow + static_cast<uint64_t>(job.outStart / 16)) * tileBytes, rowBytes);
  }
  run(job.slice + l.suhOffset() + static_cast<uint64_t>(job.matrix * l.k) * 2,
      g.suh->data + static_cast<uint64_t>(job.inStart) * 2, static_cast<uint64_t>(l.k) * 2);
  run(job.slice + l.svhOffset() + static_cast<uint64_t>(job.matrix * l.n) * 2,
      g.svh->data + static_cast<uint64_t>(job.outStart) * 2, static_cast<uint64_t>(l.n) * 2);
  const uint32_t meta[2] = {static_cast<uint32_t>(g.bits), static_cast<uint32_t>(g.codebook)};
  run(job.slice + l.metaOffset() + static_cast<uint64_t>(job.matrix) * 8,
      reinterpret_cast<const uint8_t *>(meta), 8);
  return static_cast<uint64_t>(l.k / 16) * rowBytes + static_cast<uint64_t>(l.k + l.n) * 2;
}

/// The EXL3 matrices of one binding: each expert's (or the one) layer, checked against the global
/// shape and the K the plan reserved, and the part of it this rank holds.
Status planExl3(const plan::WeightBinding &w, uint32_t binding, const Checkpoint &checkpoint,
                uint32_t rank, uint8_t *slice, std::vector<Exl3Job> &jobs) {
  const std::string name = w.name()->str();
  const std::string pattern = w.checkpoint()->str();
  const std::vector<int64_t> global(w.global_shape()->begin(), w.global_shape()->end());
  const std::vector<int64_t> local(w.rank_shape()->begin(), w.rank_shape()->end());
  const bool stacked = w.experts() > 0;
  if (global.size() != (stacked ? 3u : 2u) || local.size() != global.size()) {
    return invalidArgument("weight ", name,
                           ": an EXL3 binding is [out, in] or [experts, out, in], ", "not ",
                           shapeText(global));
  }
  const size_t base = stacked ? 1 : 0;
  const int64_t matrices = stacked ? local[0] : 1;
  const int64_t out = local[base], in = local[base + 1];
  Expected<Exl3ArenaLayout> layout =
      Exl3ArenaLayout::fromSlice(matrices, out, in, w.slice()->size());
  if (!layout.ok()) {
    return layout.status().withContext(strCat("weight ", name));
  }
  // Which dimension this rank splits, as a feature range within each matrix.
  int64_t inStart = 0, outStart = 0, firstExpert = 0;
  const bool split = w.shard() != plan::ShardKind::Replicated;
  if (split && stacked && w.shard_dim() == 0) {
    firstExpert = static_cast<int64_t>(rank) * matrices;
  } else if (split && w.shard_dim() == base) {
    outStart = static_cast<int64_t>(rank) * out;
  } else if (split && w.shard_dim() == base + 1) {
    inStart = static_cast<int64_t>(rank) * in;
  }
  for (auto [count, total, what] :
       {std::tuple{out, global[base], "output"}, std::tuple{in, global[base + 1], "input"}}) {
    if (count != total && count % kExl3Block != 0) {
      return invalidArgument("weight ", name, ": EXL3 rank slices of ", count, " ", what,
                             " features (of ", total,
                             ") do not fall on the 128-feature Hadamard blocks");
    }
  }
  const size_t brace = pattern.find("{e}");
  if (stacked && brace == std::string::npos) {
    return invalidArgument("weight ", name, ": stacked experts need '{e}' in '", pattern, "'");
  }
  for (int64_t m = 0; m < matrices; ++m) {
    std::string tensorName = pattern;
    if (stacked) {
      tensorName.replace(brace, 3, std::to_string(firstExpert + m));
    }
    Expected<Exl3Tensors> layer =
        findExl3Tensors(checkpoint, exl3ModuleKey(tensorName), global[base + 1], global[base]);
    if (!layer.ok()) {
      return layer.status().withContext(strCat("weight ", name));
    }
    if (layer->bits > layout->slotBits) {
      return invalidArgument("weight ", name, ": tensor '", layer->trellis->name, "' in ",
                             layer->trellis->file->filename().string(), " holds K = ", layer->bits,
                             " bits per weight but the plan reserves ", layout->slotBits,
                             " (recompile the plan for this checkpoint)");
    }
    jobs.push_back({binding, std::move(layer).value(), inStart, outStart, slice, *layout, m});
  }
  return Status::success();
}

} // namespace

Expected<DType> dtypeOfElement(plan::ElementType element) {
  switch (element) {
  case plan::ElementType::F32:
    return DType::F32;
  case plan::ElementType::BF16:
    return DType::BF16;
  case plan::ElementType::F16:
    return DType::F16;
  case plan::ElementType::F8E4M3:
    return DType::F8_E4M3;
  case plan::ElementType::I32:
    return DType::I32;
  case plan::ElementType::I64:
    return DType::I64;
  case plan::ElementType::I16:
    return DType::I16;
  case plan::ElementType::U8:
    return DType::U8;
  }
  return invalidArgument("unknown plan element type");
}

Status loadPlanWeights(const plan::Plan &plan, const Checkpoint &checkpoint, uint32_t rank,
                       std::span<uint8_t> arena, const WeightLoadOptions &options,
                       QuantizeReport *report) {
  return loadPlanWeightsWindow(plan, checkpoint, rank, 0, arena, options, report);
}

std::string QuantizeReport::line() const {
  char text[512];
  const int64_t linears = q4 + fp8;
  std::snprintf(text, sizeof text,
                "quantized %lld linears (q4 %lld, fp8 %lld): %.3f GB -> %.3f GB, relative RMS "
                "error mean %.4f, worst %.4f (%s)",
                static_cast<long long>(linears), static_cast<long long>(q4),
                static_cast<long long>(fp8), static_cast<double>(bytesBefore) / 1e9,
                static_cast<double>(bytesAfter) / 1e9,
                linears > 0 ? sumError / static_cast<double>(linears) : 0.0, worstError,
                worstName.empty() ? "-" : worstName.c_str());
  std::string out = text;
  if (onDevice > 0) {
    out += strCat("; ", onDevice, " of them on the GPU");
  }
  if (ablated > 0) {
    out += strCat("; ablated ", ablated, " attention output projections");
  }
  return out;
}

namespace {

/// The EncodeJob of a binding the loader transforms (Q4, fp8, or ablated), its checkpoint tensors
/// checked.
Expected<EncodeJob> encodeJob(const plan::WeightBinding &w, uint32_t binding,
                              const Checkpoint &checkpoint, uint32_t rank, bool ablate,
                              uint8_t *dst) {
  const std::string name = w.name()->str();
  const std::string pattern = w.checkpoint()->str();
  const std::vector<int64_t> global(w.global_shape()->begin(), w.global_shape()->end());
  const std::vector<int64_t> local(w.rank_shape()->begin(), w.rank_shape()->end());
  const auto encoding = static_cast<kernels::DenseEncoding>(w.encoding());
  if (w.experts() != 0 || global.size() != 2 || local.size() != 2) {
    if (w.format() == plan::WeightFormat::FP8) {
      return unimplemented("weight ", name, " (", pattern,
                           "): FP8 routed experts (the plan holds fp8 linears one matrix at a "
                           "time; experts run as bf16 or EXL3)");
    }
    return unimplemented("weight ", name, ": ",
                         encoding == kernels::DenseEncoding::Plain ? "ablating" : "quantizing",
                         " a binding other than one [out, in] matrix");
  }
  const TensorView *t = checkpoint.find(pattern);
  if (t == nullptr) {
    return notFound("weight ", name, ": checkpoint tensor '", pattern, "' is missing");
  }
  const std::string where =
      strCat("weight ", name, ": tensor '", pattern, "' in ", t->file->filename().string());
  if (t->shape != global) {
    return invalidArgument(where, " has shape ", shapeText(t->shape), ", the plan expects ",
                           shapeText(global));
  }
  const bool fp8Checkpoint = w.format() == plan::WeightFormat::FP8;
  if (fp8Checkpoint != (t->dtype == DType::F8_E4M3) ||
      (!fp8Checkpoint && !isFloatingPoint(t->dtype))) {
    return invalidArgument(where, " is ", dtypeName(t->dtype), ", the plan expects ",
                           fp8Checkpoint ? "F8_E4M3" : "BF16, F16 or F32",
                           " (recompile the plan for this checkpoint)");
  }
  const bool split = w.shard() != plan::ShardKind::Replicated;
  EncodeJob job;
  job.binding = binding;
  job.name = name;
  job.tensor = t;
  job.scaleInv = nullptr;
  job.dim = split ? w.shard_dim() : 0;
  job.count = local[job.dim];
  job.start = split ? static_cast<int64_t>(rank) * job.count : 0;
  job.encoding = encoding;
  job.element = DType::F32;
  job.ablate = ablate;
  job.dst = dst;
  job.bytes = w.slice()->size();
  job.arenaOffset = w.slice()->offset();
  if (encoding == kernels::DenseEncoding::Plain) {
    GLM_ASSIGN_OR_RETURN(job.element, dtypeOfElement(w.element()));
  }
  if (fp8Checkpoint) {
    if (ablate) {
      return unimplemented("weight ", name,
                           ": ablating an FP8 checkpoint's projection (it would be requantized)");
    }
    const std::string scaleName = pattern + "_scale_inv";
    job.scaleInv = checkpoint.find(scaleName);
    const std::vector<int64_t> blocks = {kernels::fp8BlocksOf(global[0]),
                                         kernels::fp8BlocksOf(global[1])};
    if (job.scaleInv == nullptr) {
      return notFound("weight ", name, ": the FP8 tensor '", pattern, "' has no '", scaleName,
                      "' block scales");
    }
    if (job.scaleInv->dtype != DType::F32 || job.scaleInv->shape != blocks) {
      return invalidArgument("weight ", name, ": block scales '", scaleName, "' in ",
                             job.scaleInv->file->filename().string(), " are ",
                             dtypeName(job.scaleInv->dtype), " ", shapeText(job.scaleInv->shape),
                             ", expected F32 ", shapeText(blocks), " (one per 128 x 128 block)");
    }
    // A rank's part starts on a block, or lies inside one (glm-to-plan admits no other split).
    if (!kernels::fp8SliceKeepsBlocks(job.count, global[job.dim], /*asStored=*/true)) {
      return invalidArgument("weight ", name, ": rank ", rank, "'s ", job.count, " features from ",
                             job.start, " cut a 128 x 128 block");
    }
  }
  return job;
}

} // namespace

Expected<Exl3ArenaLayout> exl3BindingLayout(const plan::WeightBinding &binding) {
  const std::vector<int64_t> shape(binding.rank_shape()->begin(), binding.rank_shape()->end());
  return Exl3ArenaLayout::ofBinding(binding.name()->str(), shape, binding.experts() > 0,
                                    binding.slice()->size());
}

std::vector<WeightWindow> planWeightWindows(const plan::Plan &plan, uint64_t maxBytes) {
  std::vector<std::pair<uint64_t, uint64_t>> ranges; // [begin, end) of each binding
  if (plan.weights() != nullptr) {
    for (const plan::WeightBinding *w : *plan.weights()) {
      ranges.push_back({w->slice()->offset(), w->slice()->offset() + w->slice()->size()});
    }
  }
  std::sort(ranges.begin(), ranges.end());
  std::vector<WeightWindow> windows;
  for (auto [begin, end] : ranges) {
    if (!windows.empty() && end - windows.back().offset <= maxBytes) {
      windows.back().bytes = std::max(windows.back().bytes, end - windows.back().offset);
    } else {
      windows.push_back({begin, end - begin});
    }
  }
  return windows;
}

namespace {

/// The jobs of one rank's load of one window, each kind in the plan's order of bindings.
struct WindowJobs {
  std::vector<CopyJob> copies;
  std::vector<Exl3Job> exl3;
  std::vector<EncodeJob> encodes;
};

/// Rank `rank`'s jobs for the bindings whose slices start in [windowOffset, windowOffset +
/// window.size()), their checkpoint tensors checked.
Status planWindow(const plan::Plan &plan, const Checkpoint &checkpoint, uint32_t rank,
                  uint64_t windowOffset, std::span<uint8_t> window, const Ablation *ablation,
                  WindowJobs &out) {
  uint32_t index = 0;
  for (const plan::WeightBinding *w : *plan.weights()) {
    const uint32_t binding = index++;
    const std::string name = w->name()->str();
    const std::string pattern = w->checkpoint()->str();
    const plan::Slice *slice = w->slice();
    if (slice->offset() < windowOffset || slice->offset() - windowOffset >= window.size()) {
      continue; // another window's binding
    }
    if (slice->size() > window.size() - (slice->offset() - windowOffset)) {
      return invalidArgument("weight ", name, ": slice overruns the weights arena");
    }
    uint8_t *dst = window.data() + (slice->offset() - windowOffset);
    if (w->format() == plan::WeightFormat::EXL3) {
      GLM_RETURN_IF_ERROR(planExl3(*w, binding, checkpoint, rank, dst, out.exl3));
      continue;
    }
    const bool ablate = ablates(ablation, name);
    if (w->encoding() != plan::DenseEncoding::Plain || ablate ||
        w->format() == plan::WeightFormat::FP8) {
      GLM_ASSIGN_OR_RETURN(EncodeJob job, encodeJob(*w, binding, checkpoint, rank, ablate, dst));
      out.encodes.push_back(std::move(job));
      continue;
    }
    GLM_ASSIGN_OR_RETURN(DType dtype, dtypeOfElement(w->element()));
    std::vector<int64_t> global(w->global_shape()->begin(), w->global_shape()->end());
    std::vector<int64_t> local(w->rank_shape()->begin(), w->rank_shape()->end());
    if (global.empty() || local.size() != global.size()) {
      return invalidArgument("weight ", name, ": needs matching, non-empty global and rank shapes");
    }
    const size_t dim = w->shard() == plan::ShardKind::Replicated ? 0 : w->shard_dim();
    const int64_t count = local[dim];
    const int64_t start =
        static_cast<int64_t>(rank) * (w->shard() == plan::ShardKind::Replicated ? 0 : count);

    auto find = [&](const std::string &tensorName,
                    const std::vector<int64_t> &shape) -> Expected<const TensorView *> {
      const TensorView *t = checkpoint.find(tensorName);
      if (t == nullptr) {
        return notFound("weight ", name, ": checkpoint tensor '", tensorName, "' is missing");
      }
      if (t->shape != shape) {
        return invalidArgument("weight ", name, ": tensor '", tensorName, "' in ",
                               t->file->filename().string(), " has shape ", shapeText(t->shape),
                               ", the plan expects ", shapeText(shape));
      }
      if (t->dtype != dtype) {
        return invalidArgument("weight ", name, ": tensor '", tensorName, "' in ",
                               t->file->filename().string(), " is ", dtypeName(t->dtype),
                               ", the plan expects ", dtypeName(dtype),
                               " (recompile the plan for this checkpoint)");
      }
      return t;
    };

    if (w->experts() == 0) {
      GLM_ASSIGN_OR_RETURN(const TensorView *t, find(pattern, global));
      out.copies.push_back({binding, t, global, dim, start, count, dst});
      continue;
    }
    // Stacked experts: dimension 0 of the binding counts experts, each its own tensor.
    const size_t brace = pattern.find("{e}");
    if (brace == std::string::npos || global.size() < 2) {
      return invalidArgument("weight ", name, ": stacked experts need '{e}' in '", pattern, "'");
    }
    const std::vector<int64_t> perExpert(global.begin() + 1, global.end());
    uint64_t expertBytes = dtypeSize(dtype);
    for (int64_t d : perExpert) {
      expertBytes *= static_cast<uint64_t>(d);
    }
    const bool splitByExpert = w->shard() == plan::ShardKind::Expert;
    const int64_t first = splitByExpert ? start : 0;
    const int64_t experts = splitByExpert ? count : global[0];
    for (int64_t e = 0; e < experts; ++e) {
      std::string tensorName = pattern;
      tensorName.replace(brace, 3, std::to_string(first + e));
      GLM_ASSIGN_OR_RETURN(const TensorView *t, find(tensorName, perExpert));
      // Within an expert, a split other than by expert slices dimension dim - 1.
      const size_t innerDim = splitByExpert || dim == 0 ? 0 : dim - 1;
      const int64_t innerCount =
          splitByExpert || w->shard() == plan::ShardKind::Replicated ? perExpert[0] : count;
      const int64_t innerStart =
          splitByExpert || w->shard() == plan::ShardKind::Replicated ? 0 : start;
      const uint64_t localBytes = expertBytes / static_cast<uint64_t>(perExpert[innerDim]) *
                                  static_cast<uint64_t>(innerCount);
      out.copies.push_back({binding, t, perExpert, innerDim, innerStart, innerCount,
                            dst + static_cast<uint64_t>(e) * localBytes});
    }
  }

  return Status::success();
}

/// The hash of what an EncodeJob reads: the rank's part of its tensor (and of its block scales).
uint64_t hashEncodeSource(const EncodeJob &job) {
  ByteHash hash;
  const TensorView &t = *job.tensor;
  copySlice(t.data, nullptr, t.shape, job.dim, job.start, job.count, dtypeSize(t.dtype), &hash);
  if (job.scaleInv != nullptr) {
    copySlice(job.scaleInv->data, nullptr, job.scaleInv->shape, job.dim,
              job.start / kernels::kFp8Block, kernels::fp8BlocksOf(job.count), sizeof(float),
              &hash);
  }
  return hash.value();
}

/// One rank's jobs of a window and the hash of each, for the digest (the loading rank's own, or
/// another rank's that are only hashed).
struct RankJobs {
  uint32_t rank = 0;
  bool own = false;
  WindowJobs jobs;
  std::vector<uint64_t> copyHash, exl3Hash, encodeHash;
};

/// Adds each binding's hash of `r` to the digest: its jobs' hashes in order.
void addToDigest(const RankJobs &r, WeightDigest &digest) {
  std::map<uint32_t, ByteHash> bindings;
  for (size_t i = 0; i < r.jobs.copies.size(); ++i) {
    bindings[r.jobs.copies[i].binding].addValue(r.copyHash[i]);
  }
  for (size_t i = 0; i < r.jobs.exl3.size(); ++i) {
    bindings[r.jobs.exl3[i].binding].addValue(r.exl3Hash[i]);
  }
  for (size_t i = 0; i < r.jobs.encodes.size(); ++i) {
    bindings[r.jobs.encodes[i].binding].addValue(r.encodeHash[i]);
  }
  for (const auto &[binding, hash] : bindings) {
    digest.add(r.rank, binding, hash.value());
  }
}

} // namespace

void WeightDigest::add(uint32_t rank, uint32_t binding, uint64_t hash) {
  std::lock_guard<std::mutex> lock(mutex_);
  bindings_[rank][binding] = hash;
}

std::string WeightDigest::hex(uint32_t rank) const {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = bindings_.find(rank);
  if (it == bindings_.end()) {
    return "";
  }
  ByteHash all;
  for (const auto &[binding, hash] : it->second) {
    all.addValue(binding);
    all.addValue(hash);
  }
  char text[17];
  std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(all.value()));
  return text;
}

Status loadPlanWeightsWindow(const plan::Plan &plan, const Checkpoint &checkpoint, uint32_t rank,
                             uint64_t windowOffset, std::span<uint8_t> window,
                             const WeightLoadOptions &options, QuantizeReport *report) {
  if (rank >= plan.tp()) {
    return invalidArgument("rank ", rank, " of a TP ", plan.tp(), " plan");
  }
  if (plan.weights() == nullptr) {
    return Status::success();
  }
  std::vector<RankJobs> ranks(1);
  ranks[0].rank = rank;
  ranks[0].own = true;
  GLM_RETURN_IF_ERROR(
      planWindow(plan, checkpoint, rank, windowOffset, window, options.ablation, ranks[0].jobs));
  if (options.digest != nullptr) {
    // Other ranks' parts are planned the same way (their jobs' destinations are never written)
    // and only hashed.
    for (uint32_t other : options.digest->ranks()) {
      if (other == rank || other >= plan.tp()) {
        continue;
      }
      RankJobs &r = ranks.emplace_back();
      r.rank = other;
      GLM_RETURN_IF_ERROR(
          planWindow(plan, checkpoint, other, windowOffset, window, options.ablation, r.jobs));
    }
  }
  const bool digest = options.digest != nullptr;
  for (RankJobs &r : ranks) {
    r.copyHash.assign(r.jobs.copies.size(), 0);
    r.exl3Hash.assign(r.jobs.exl3.size(), 0);
    r.encodeHash.assign(r.jobs.encodes.size(), 0);
  }
  // What runs on all cores: every copy and EXL3 placement of this rank (hashed as it copies when
  // there is a digest), and the hashing of the other ranks' parts.
  struct Task {
    RankJobs *rank;
    int kind; // 0 copy, 1 EXL3, 2 encode (another rank's only: this rank's run below)
    size_t index;
  };
  std::vector<Task> tasks;
  for (RankJobs &r : ranks) {
    for (size_t i = 0; i < r.jobs.copies.size(); ++i) {
      tasks.push_back({&r, 0, i});
    }
    for (size_t i = 0; i < r.jobs.exl3.size(); ++i) {
      tasks.push_back({&r, 1, i});
    }
    for (size_t i = 0; !r.own && i < r.jobs.encodes.size(); ++i) {
      tasks.push_back({&r, 2, i});
    }
  }
  std::atomic<size_t> next{0};
  auto worker = [&] {
    for (size_t i = next++; i < tasks.size(); i = next++) {
      const Task &task = tasks[i];
      RankJobs &r = *task.rank;
      if (task.kind == 2) {
        r.encodeHash[task.index] = hashEncodeSource(r.jobs.encodes[task.index]);
        continue;
      }
      ByteHash hash;
      if (task.kind == 1) {
        const uint64_t bytes = placeExl3(r.jobs.exl3[task.index], r.own, digest ? &hash : nullptr);
        r.exl3Hash[task.index] = hash.value();
        if (r.own && options.progress != nullptr) {
          options.progress->advance(bytes);
        }
        continue;
      }
      const CopyJob &job = r.jobs.copies[task.index];
      copySlice(job.tensor->data, r.own ? job.dst : nullptr, job.shape, job.dim, job.start,
                job.count, dtypeSize(job.tensor->dtype), digest ? &hash : nullptr);
      r.copyHash[task.index] = hash.value();
      if (r.own && options.progress != nullptr) {
        const uint64_t full = static_cast<uint64_t>(job.shape.empty() ? 1 : job.shape[job.dim]);
        options.progress->advance(job.tensor->byteSize / std::max<uint64_t>(full, 1) *
                                  static_cast<uint64_t>(job.count));
      }
    }
  };
  const size_t workers =
      std::min<size_t>(tasks.size(), std::max(1u, std::thread::hardware_concurrency()));
  std::vector<std::thread> threads;
  for (size_t t = 1; t < workers; ++t) {
    threads.emplace_back(worker);
  }
  worker();
  for (std::thread &t : threads) {
    t.join();
  }
  // Each transformed matrix is split over every core in turn (the largest, the head, would
  // otherwise hold one core long after the others are done).
  QuantizeReport local;
  RankJobs &own = ranks[0];
  for (size_t i = 0; i < own.jobs.encodes.size(); ++i) {
    const EncodeJob &job = own.jobs.encodes[i];
    GLM_RETURN_IF_ERROR(encode(job, options.ablation, options.deviceQuantizer,
                               report != nullptr ? *report : local));
    if (digest) {
      own.encodeHash[i] = hashEncodeSource(job); // what encode() just read
    }
    if (options.progress != nullptr) {
      options.progress->advance(job.bytes);
    }
  }
  if (digest) {
    for (const RankJobs &r : ranks) {
      addToDigest(r, *options.digest);
    }
  }
  return Status::success();
}

RankWeightLoad::RankWeightLoad(const plan::Plan &plan, const Checkpoint &checkpoint, uint32_t rank,
                               const WeightLoadOptions &options)
    : plan_(plan), checkpoint_(checkpoint), rank_(rank), options_(options) {
  uint64_t total = 0;
  if (plan.weights() != nullptr) {
    for (const plan::WeightBinding *w : *plan.weights()) {
      total += w->slice()->size();
    }
  }
  if (options_.progress == nullptr && total > (uint64_t(1) << 30)) {
    ProgressReporter::Options bar;
    bar.label = strCat("rank ", rank, ": weights");
    bar.total = total;
    bar.unit = ProgressReporter::Unit::Bytes;
    progress_ = std::make_unique<ProgressReporter>(std::move(bar));
    options_.progress = progress_.get();
  }
}

RankWeightLoad::~RankWeightLoad() = default;

Status RankWeightLoad::window(uint64_t offset, std::span<uint8_t> window) {
  return loadPlanWeightsWindow(plan_, checkpoint_, rank_, offset, window, options_, &report_);
}

Status RankWeightLoad::finish() {
  if (progress_ != nullptr) {
    progress_->finish();
  }
  if (report_.q4 + report_.fp8 + report_.ablated > 0) {
    logInfo("rank ", rank_, ": ", report_.line());
  }
  // The ablation finds its projections by the builder's binding names: a layer the plan does not
  // hold (the MTP layer of a plan built without it) is refused, not skipped in silence.
  if (const Ablation *a = options_.ablation) {
    const int64_t asked = a->lastLayer - a->firstLayer + 1 + (a->mtpLayer >= 0 ? 1 : 0);
    if (report_.ablated != asked) {
      return invalidArgument(
          "--ablate: the plan holds ", report_.ablated, " of the ", asked,
          " attention output projections asked for (layers ", a->firstLayer, "-", a->lastLayer,
          a->mtpLayer >= 0 ? strCat(" and the MTP layer ", a->mtpLayer) : std::string(), ")");
    }
  }
  return Status::success();
}

} // namespace glm
