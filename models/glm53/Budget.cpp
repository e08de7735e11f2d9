// Parameter counts, decode weight bytes and state sizes, all derived from the tensor table.
#include "models/glm53/Budget.h"

namespace glm::glm53 {

ParameterCounts countParameters(const Glm53Config &config, const std::vector<WeightInfo> &table) {
  ParameterCounts p;
  for (const WeightInfo &w : table) {
    const int64_t n = w.numel();
    if (w.component == Component::Vision) {
      p.vision += n;
    } else if (w.isMtp) {
      p.mtp += n;
      if (w.component == Component::RoutedExpert) {
        p.mtpRouted += n;
      }
    } else {
      p.trunk += n;
      p.trunkByComponent[w.component] += n;
      if (w.component == Component::RoutedExpert) {
        p.trunkRouted += n;
      }
    }
  }
  p.total = p.trunk + p.mtp + p.vision;
  const int64_t moeLayers = config.countLayers(MlpKind::Sparse);
  const int64_t perExpert = 3 * config.hiddenSize * config.moeIntermediateSize;
  p.activePerToken = p.trunk - p.trunkRouted + moeLayers * config.numExpertsPerTok * perExpert;
  return p;
}

DecodeWeightBytes decodeWeightBytes(const Glm53Config &config, const std::vector<WeightInfo> &table,
                                    const std::vector<uint64_t> *storedBytes) {
  // Bytes are accumulated in doubles: the expert share is a fraction (top-k of n) of a layer's
  // expert bytes, and the embedding row a 1/vocab share of the table.
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
    const double bytes =
        storedBytes != nullptr
            ? static_cast<double>((*storedBytes)[i])
            : static_cast<double>(w.numel()) * static_cast<double>(dtypeSize(w.releaseDType));
    double read = bytes;
    double read4 = bytes;
    if (w.component == Component::Embedding) {
      read = read4 = bytes / static_cast<double>(config.vocabSize);
    } else if (w.component == Component::RoutedExpert) {
      read = bytes * expertShare;
      read4 = static_cast<double>(w.numel()) * 0.5 * expertShare;
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
  DecodeWeightBytes b;
  b.asStored = static_cast<uint64_t>(stored + 0.5);
  b.with4BitExperts = static_cast<uint64_t>(fourBit + 0.5);
  if (config.hasMtp()) {
    // A draft step runs the MTP layer and the shared lm_head again.
    b.mtpAsStored = static_cast<uint64_t>(mtpStored + headStored + 0.5);
    b.mtpWith4BitExperts = static_cast<uint64_t>(mtpFourBit + headStored + 0.5);
  }
  return b;
}

StateBytes stateBytes(const Glm53Config &c) {
  StateBytes s;
  const auto kdaLayers = static_cast<uint64_t>(c.countLayers(AttentionKind::Linear));
  const auto dsaLayers = static_cast<uint64_t>(c.countLayers(AttentionKind::Sparse));
  const auto heads = static_cast<uint64_t>(c.linearNumHeads);
  const auto dk = static_cast<uint64_t>(c.linearHeadDim);
  const auto proj = static_cast<uint64_t>(c.kdaProjDim());
  const auto convPast = static_cast<uint64_t>(c.linearConvKernelDim - 1);
  s.kdaPerSequence = kdaLayers * (heads * dk * dk * 4 + 3 * proj * convPast * 2);
  // Latent row (kv_lora_rank bf16) per token; one pooled key (index_head_dim bf16) per kpool
  // tokens.
  const uint64_t latent = static_cast<uint64_t>(c.kvLoraRank) * 2;
  const uint64_t pooledKeyBytes = static_cast<uint64_t>(c.indexHeadDim) * 2;
  const auto kpool = static_cast<uint64_t>(c.indexKpool);
  s.dsaPerToken = dsaLayers * (latent + pooledKeyBytes / kpool);
  s.dsaTailPerSequence = dsaLayers * (kpool - 1) * 2 * pooledKeyBytes;
  if (c.hasMtp()) {
    s.mtpPerToken = latent + pooledKeyBytes / kpool;
  }
  return s;
}

} // namespace glm::glm53
