// Parameter counts, decode weight bytes and state sizes, all derived from the tensor table.
#include "models/glm53/Budget.h"

namespace glm::glm53 {

namespace {

/// Counts that are exact or report the first quantity that left int64 (or uint64). A parsed
/// config's field ranges keep every count far inside both (Config.cpp proves it), so this only
/// fires for a config built by hand beyond them; it keeps the answer an error, not a wrapped
/// number or undefined behaviour.
class CheckedCount {
public:
  template <typename T> T mul(T a, T b, std::string_view what) {
    T r = 0;
    if (__builtin_mul_overflow(a, b, &r)) {
      overflow(what);
    }
    return r;
  }
  template <typename T> T add(T a, T b, std::string_view what) {
    T r = 0;
    if (__builtin_add_overflow(a, b, &r)) {
      overflow(what);
    }
    return r;
  }
  /// A tensor's element count.
  int64_t numel(const WeightInfo &w) {
    int64_t n = 1;
    for (int64_t d : w.shape) {
      if (__builtin_mul_overflow(n, d, &n)) {
        overflow(strCat("element count of tensor '", w.name, "'"));
      }
    }
    return n;
  }
  /// Bytes held in a double (the budget's fractional shares), as an integer.
  uint64_t bytes(double value, std::string_view what) {
    // 2^64 is exact in a double; anything at or above it (or NaN) does not convert.
    if (!(value >= 0 && value < 18446744073709551616.0)) {
      overflow(what);
      return 0;
    }
    return static_cast<uint64_t>(value);
  }
  Status status(const Glm53Config &config) const {
    if (first_.empty()) {
      return Status::success();
    }
    return invalidArgument("the ", first_, " of this config (hidden ", config.hiddenSize, ", ",
                           config.numHiddenLayers, " layers, ", config.nRoutedExperts,
                           " experts) overflows 64 bits");
  }

private:
  void overflow(std::string_view what) {
    if (first_.empty()) {
      first_ = std::string(what);
    }
  }
  std::string first_;
};

} // namespace

Expected<ParameterCounts> countParameters(const Glm53Config &config,
                                          const std::vector<WeightInfo> &table) {
  CheckedCount k;
  ParameterCounts p;
  constexpr std::string_view kCount = "parameter count";
  for (const WeightInfo &w : table) {
    const int64_t n = k.numel(w);
    if (w.component == Component::Vision) {
      p.vision = k.add(p.vision, n, kCount);
    } else if (w.isMtp) {
      p.mtp = k.add(p.mtp, n, kCount);
      if (w.component == Component::RoutedExpert) {
        p.mtpRouted = k.add(p.mtpRouted, n, kCount);
      }
    } else {
      p.trunk = k.add(p.trunk, n, kCount);
      p.trunkByComponent[w.component] = k.add(p.trunkByComponent[w.component], n, kCount);
      if (w.component == Component::RoutedExpert) {
        p.trunkRouted = k.add(p.trunkRouted, n, kCount);
      }
    }
  }
  p.total = k.add(k.add(p.trunk, p.mtp, kCount), p.vision, kCount);
  const int64_t moeLayers = config.countLayers(MlpKind::Sparse);
  constexpr std::string_view kActive = "active parameter count";
  const int64_t perExpert =
      k.mul(k.mul(int64_t(3), config.hiddenSize, kActive), config.moeIntermediateSize, kActive);
  p.activePerToken =
      k.add(p.trunk - p.trunkRouted,
            k.mul(k.mul(moeLayers, config.numExpertsPerTok, kActive), perExpert, kActive), kActive);
  GLM_RETURN_IF_ERROR(k.status(config));
  return p;
}

Expected<DecodeWeightBytes> decodeWeightBytes(const Glm53Config &config,
                                              const std::vector<WeightInfo> &table,
                                              const std::vector<uint64_t> *storedBytes) {
  // Bytes are accumulated in doubles: the expert share is a fraction (top-k of n) of a layer's
  // expert bytes, and the embedding row a 1/vocab share of the table.
  CheckedCount k;
  double stored = 0;
  double fourBit = 0;
  double mtpStored = 0;
  double mtpFourBit = 0;
  double headStored = 0;
  const double expertShare =
      static_cast<double>(config.numExpertsPerTok) / static_cast<double>(config.nRoutedExperts);
  for (size_t i = 0; i < table.size(); ++i) {
    const WeightInfo &w = table[i];
    if (w.component == Component::Vision) {
      continue;
    }
    const double numel = static_cast<double>(k.numel(w));
    const double bytes = storedBytes != nullptr
                             ? static_cast<double>((*storedBytes)[i])
                             : numel * static_cast<double>(dtypeSize(w.releaseDType));
    double read = bytes;
    double read4 = bytes;
    if (w.component == Component::Embedding) {
      read = read4 = bytes / static_cast<double>(config.vocabSize);
    } else if (w.component == Component::RoutedExpert) {
      read = bytes * expertShare;
      read4 = numel * 0.5 * expertShare;
    }
    if (w.component == Component::Head) {
      headStored = bytes;
    }
    if (w.isMtp) {
      mtpStored += read;
      mtpFourBit += read4;
    } else {
      stored += read;
      fourBit += read4;
    }
  }
  constexpr std::string_view kBytes = "weight bytes per decoded token";
  DecodeWeightBytes b;
  b.asStored = k.bytes(stored + 0.5, kBytes);
  b.with4BitExperts = k.bytes(fourBit + 0.5, kBytes);
  if (config.hasMtp()) {
    // A draft step runs the MTP layer and the shared lm_head again.
    b.mtpAsStored = k.bytes(mtpStored + headStored + 0.5, kBytes);
    b.mtpWith4BitExperts = k.bytes(mtpFourBit + headStored + 0.5, kBytes);
  }
  GLM_RETURN_IF_ERROR(k.status(config));
  return b;
}

Expected<StateBytes> stateBytes(const Glm53Config &c) {
  CheckedCount k;
  StateBytes s;
  const auto kdaLayers = static_cast<uint64_t>(c.countLayers(AttentionKind::Linear));
  const auto dsaLayers = static_cast<uint64_t>(c.countLayers(AttentionKind::Sparse));
  const auto heads = static_cast<uint64_t>(c.linearNumHeads);
  const auto dk = static_cast<uint64_t>(c.linearHeadDim);
  const auto proj = static_cast<uint64_t>(c.kdaProjDim());
  const auto convPast = static_cast<uint64_t>(c.linearConvKernelDim - 1);
  constexpr std::string_view kKda = "KDA state size";
  const uint64_t recurrent = k.mul(k.mul(k.mul(heads, dk, kKda), dk, kKda), uint64_t(4), kKda);
  const uint64_t window = k.mul(k.mul(uint64_t(6), proj, kKda), convPast, kKda);
  s.kdaPerSequence = k.mul(kdaLayers, k.add(recurrent, window, kKda), kKda);
  // Latent row (kv_lora_rank bf16) per token; one pooled key (index_head_dim bf16) per kpool
  // tokens.
  constexpr std::string_view kDsa = "sparse-attention state size";
  const uint64_t latent = k.mul(static_cast<uint64_t>(c.kvLoraRank), uint64_t(2), kDsa);
  const uint64_t pooledKeyBytes = k.mul(static_cast<uint64_t>(c.indexHeadDim), uint64_t(2), kDsa);
  const auto kpool = static_cast<uint64_t>(c.indexKpool);
  s.dsaPerToken = k.mul(dsaLayers, k.add(latent, pooledKeyBytes / kpool, kDsa), kDsa);
  s.dsaTailPerSequence = k.mul(k.mul(dsaLayers, (kpool - 1) * 2, kDsa), pooledKeyBytes, kDsa);
  if (c.hasMtp()) {
    s.mtpPerToken = latent + pooledKeyBytes / kpool;
  }
  // The longest sequence the model describes must be countable too (perSequence() multiplies).
  k.mul(s.dsaPerToken, static_cast<uint64_t>(c.maxPositionEmbeddings), kDsa);
  GLM_RETURN_IF_ERROR(k.status(c));
  return s;
}

} // namespace glm::glm53
