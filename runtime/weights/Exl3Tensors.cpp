// Finding and checking the tensors of EXL3 linear layers; the arena layout of EXL3 bindings.
#include "runtime/weights/Exl3Tensors.h"

#include <cstring>

namespace glm {

namespace {

std::string where(const TensorView &t) {
  return strCat("tensor '", t.name, "' in ", t.file != nullptr ? t.file->filename().string() : "?");
}

} // namespace

std::string_view exl3CodebookName(Exl3Codebook codebook) {
  switch (codebook) {
  case Exl3Codebook::Inst3:
    return "3inst";
  case Exl3Codebook::Mcg:
    return "mcg";
  case Exl3Codebook::Mul1:
    return "mul1";
  }
  return "?";
}

std::optional<Exl3Codebook> parseExl3Codebook(std::string_view name) {
  for (Exl3Codebook c : {Exl3Codebook::Inst3, Exl3Codebook::Mcg, Exl3Codebook::Mul1}) {
    if (name == exl3CodebookName(c)) {
      return c;
    }
  }
  return std::nullopt;
}

std::string exl3ModuleKey(std::string_view weightName) {
  constexpr std::string_view kSuffix = ".weight";
  if (weightName.size() > kSuffix.size() &&
      weightName.substr(weightName.size() - kSuffix.size()) == kSuffix) {
    weightName.remove_suffix(kSuffix.size());
  }
  return std::string(weightName);
}

uint64_t Exl3Tensors::storedBytes() const {
  uint64_t bytes = 0;
  for (const TensorView *t : {trellis, suh, svh, bias, marker}) {
    if (t != nullptr) {
      bytes += t->byteSize;
    }
  }
  return bytes;
}

std::vector<std::string> Exl3Tensors::tensorNames() const {
  std::vector<std::string> names;
  for (const TensorView *t : {trellis, suh, svh, bias, marker}) {
    if (t != nullptr) {
      names.push_back(t->name);
    }
  }
  return names;
}

bool hasExl3Tensors(const Checkpoint &checkpoint, std::string_view key) {
  const std::string k(key);
  return checkpoint.find(k + ".trellis") != nullptr ||
         checkpoint.find(k + ".rank0.trellis") != nullptr;
}

Expected<Exl3Tensors> findExl3Tensors(const Checkpoint &checkpoint, std::string_view key,
                                      std::optional<int64_t> inFeatures,
                                      std::optional<int64_t> outFeatures) {
  Exl3Tensors g;
  g.key = std::string(key);
  const std::string &p = g.key;
  g.trellis = checkpoint.find(p + ".trellis");
  if (g.trellis == nullptr) {
    // The "shared_h_v1" community variant (§1.4) pre-slices experts per TP rank and shares suh/svh
    // across a layer; it is not the exllamav3 layout.
    if (const TensorView *sliced = checkpoint.find(p + ".rank0.trellis")) {
      return invalidArgument(where(*sliced),
                             ": per-rank pre-sliced EXL3 (the \"shared_h_v1\" layout) is not "
                             "supported; use a checkpoint in exllamav3's own layout");
    }
    return notFound("checkpoint tensor '", p, ".trellis' is missing");
  }
  const TensorView &t = *g.trellis;
  if (t.dtype != DType::I16) {
    return invalidArgument(where(t), " is ", dtypeName(t.dtype), "; an EXL3 trellis is I16");
  }
  if (t.shape.size() != 3 || t.shape[0] < 1 || t.shape[1] < 1 || t.shape[2] % 16 != 0 ||
      t.shape[2] / 16 < kExl3MinBits || t.shape[2] / 16 > kExl3MaxBits) {
    return invalidArgument(where(t), " has shape ", shapeText(t.shape),
                           "; an EXL3 trellis is [k/16, n/16, 16*K] with K in 1..8");
  }
  g.bits = static_cast<int>(t.shape[2] / 16);
  g.k = t.shape[0] * 16;
  g.n = t.shape[1] * 16;
  if (g.k % kExl3Block != 0 || g.n % kExl3Block != 0) {
    return invalidArgument(where(t), " has shape ", shapeText(t.shape), ": ", g.k, " x ", g.n,
                           " features are not padded to multiples of 128");
  }
  if (inFeatures && exl3Padded(*inFeatures) != g.k) {
    return invalidArgument(where(t), " has shape ", shapeText(t.shape), ": ", g.k,
                           " input features, but the layer has ", *inFeatures, " (padded ",
                           exl3Padded(*inFeatures), ")");
  }
  if (outFeatures && exl3Padded(*outFeatures) != g.n) {
    return invalidArgument(where(t), " has shape ", shapeText(t.shape), ": ", g.n,
                           " output features, but the layer has ", *outFeatures, " (padded ",
                           exl3Padded(*outFeatures), ")");
  }

  // Legacy checkpoints (before exllamav3's first release) store packed sign bits instead.
  for (const char *legacy : {".su", ".sv"}) {
    if (const TensorView *old = checkpoint.find(p + legacy)) {
      return invalidArgument(where(*old),
                             ": legacy EXL3 packed-sign tensor (pre-release exllamav3); only "
                             "suh/svh scale vectors are supported, re-quantize the model");
    }
  }
  auto vector = [&](const char *part, int64_t length, const TensorView *&out) -> Status {
    out = checkpoint.find(p + part);
    if (out == nullptr) {
      return notFound("checkpoint tensor '", p, part, "' is missing (EXL3 layer '", p,
                      "' has a trellis)");
    }
    if (out->dtype != DType::F16 || out->shape != std::vector<int64_t>{length}) {
      return invalidArgument(where(*out), " is ", dtypeName(out->dtype), " ", shapeText(out->shape),
                             ", expected F16 [", length, "]");
    }
    return Status::success();
  };
  GLM_RETURN_IF_ERROR(vector(".suh", g.k, g.suh));
  GLM_RETURN_IF_ERROR(vector(".svh", g.n, g.svh));

  if ((g.bias = checkpoint.find(p + ".bias")) != nullptr) {
    if ((g.bias->dtype != DType::F16 && g.bias->dtype != DType::F32) ||
        g.bias->shape != std::vector<int64_t>{g.n}) {
      return invalidArgument(where(*g.bias), " is ", dtypeName(g.bias->dtype), " ",
                             shapeText(g.bias->shape), ", expected F16 or F32 [", g.n, "]");
    }
  }

  const TensorView *mcg = checkpoint.find(p + ".mcg");
  const TensorView *mul1 = checkpoint.find(p + ".mul1");
  if (mcg != nullptr && mul1 != nullptr) {
    return invalidArgument("EXL3 layer '", p, "' has both codebook markers '", mcg->name, "' and '",
                           mul1->name, "'");
  }
  g.marker = mcg != nullptr ? mcg : mul1;
  g.codebook = mcg != nullptr    ? Exl3Codebook::Mcg
               : mul1 != nullptr ? Exl3Codebook::Mul1
                                 : Exl3Codebook::Inst3;
  if (g.marker != nullptr &&
      (g.marker->dtype != DType::I32 ||
       !(g.marker->shape.empty() || g.marker->shape == std::vector<int64_t>{1}))) {
    return invalidArgument(where(*g.marker), " is ", dtypeName(g.marker->dtype), " ",
                           shapeText(g.marker->shape),
                           "; an EXL3 codebook marker is an I32 scalar");
  }
  return g;
}

Expected<Exl3ArenaLayout> Exl3ArenaLayout::fromSlice(int64_t matrices, int64_t out, int64_t in,
                                                     uint64_t sliceBytes) {
  if (matrices < 1 || out < 1 || in < 1) {
    return invalidArgument("an EXL3 slice needs positive matrices and features");
  }
  // The shapes come from a plan file, so are untrusted: bytes() must not wrap. 2^28 features and
  // 2^58 padded weights in all are far beyond any model.
  constexpr int64_t kMaxFeatures = int64_t(1) << 28;
  uint64_t weights = 0;
  if (out > kMaxFeatures || in > kMaxFeatures ||
      __builtin_mul_overflow(static_cast<uint64_t>(exl3Padded(in)) *
                                 static_cast<uint64_t>(exl3Padded(out)),
                             static_cast<uint64_t>(matrices), &weights) ||
      weights > (uint64_t(1) << 58)) {
    return invalidArgument("an EXL3 slice of ", matrices, " [", out, ", ", in,
                           "] matrices is too large to lay out");
  }
  for (int bits = kExl3MinBits; bits <= kExl3MaxBits; ++bits) {
    if (bytesFor(matrices, out, in, bits) == sliceBytes) {
      return Exl3ArenaLayout{matrices, in, out, exl3Padded(in), exl3Padded(out), bits};
    }
  }
  return invalidArgument("a slice of ", sliceBytes, " bytes is not the EXL3 layout of ", matrices,
                         " [", out, ", ", in, "] matrices at any K in 1..8");
}

Expected<Exl3ArenaLayout> Exl3ArenaLayout::ofBinding(std::string_view name,
                                                     std::span<const int64_t> rankShape,
                                                     bool stacked, uint64_t sliceBytes) {
  const size_t base = stacked ? 1 : 0;
  if (rankShape.size() != base + 2) {
    return invalidArgument("EXL3 weight ", name, " has rank ", rankShape.size(), ", not ",
                           base + 2);
  }
  return fromSlice(stacked ? rankShape[0] : 1, rankShape[base], rankShape[base + 1], sliceBytes);
}

} // namespace glm
