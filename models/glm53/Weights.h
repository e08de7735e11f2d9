// The GLM-5.3 checkpoint's tensor table: every weight's Hub name, shape, role and allowed dtypes.
#pragma once

#include "base/DType.h"
#include "models/glm53/Config.h"

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

namespace glm {
class Checkpoint;
} // namespace glm

namespace glm::glm53 {

/// What part of the model a weight belongs to; parameter counts are reported per component.
enum class Component {
  Embedding,     // embed_tokens
  Head,          // lm_head
  FinalNorm,     // the trunk's final RMSNorm
  LayerNorms,    // input_layernorm / post_attention_layernorm of every layer
  Mhc,           // hc_{attn,ffn}_{fn,base,scale}
  Kda,           // Kimi Delta Attention projections, conv, gate, norm
  MlaAttention,  // MLA projections and norms of sparse-attention layers
  Indexer,       // the lightning indexer of sparse-attention layers
  DenseMlp,      // dense MLP of the first layers
  Router,        // MoE router weight and correction bias
  SharedExpert,  // the shared expert(s) of MoE layers
  RoutedExpert,  // routed experts
  MtpProjection, // the MTP block's eh_proj and its extra norms
  Vision,        // the vision tower
};
std::string_view componentName(Component component);

/// How a tensor is used, which decides the dtypes a checkpoint may store it in.
enum class WeightRole {
  Linear, // a [out, in] matrix of a linear layer: bf16/f16/f32, or fp8 e4m3 with block scales
  Param,  // everything else (norms, biases, mHC mixers, conv kernels, gates): bf16/f16/f32
};

struct WeightInfo {
  std::string name;
  std::vector<int64_t> shape;
  Component component = Component::Embedding;
  WeightRole role = WeightRole::Param;
  /// The dtype the release stores: bf16, or f32 for the tensors HF keeps in fp32
  /// (A_log, dt_bias, the short-conv kernels, e_score_correction_bias).
  DType releaseDType = DType::BF16;
  /// Decoder layer, numHiddenLayers for the MTP layer, -1 for tensors outside the layers.
  int64_t layer = -1;
  /// Routed expert index, -1 otherwise.
  int64_t expert = -1;
  bool isMtp = false;

  /// The element count; INT64_MAX if it does not fit (never for a parsed config's table).
  int64_t numel() const;
};

/// Every tensor of a checkpoint with this config, text tower (model.language_model.*, lm_head),
/// MTP layer (layer index numHiddenLayers, when numNextnPredictLayers is 1) and vision tower
/// (model.visual.*), in a stable order: embedding, layers in order, norm, head, MTP, vision.
std::vector<WeightInfo> glm53Weights(const Glm53Config &config);

/// Whether a checkpoint may store a tensor of this role in this dtype.
bool isAllowedDType(WeightRole role, DType dtype);

/// The fp8 block size of `weight_scale_inv` companions (DeepSeek/GLM FP8: 128 x 128 blocks).
inline constexpr int64_t kFp8BlockSize = 128;

/// The result of checking a checkpoint's tensors against the table.
struct CheckpointCheck {
  int64_t expected = 0;                // tensors the table lists
  int64_t present = 0;                 // of those, found with the right shape and an allowed dtype
  int64_t exl3 = 0;                    // of those, linear weights stored as EXL3 layers
  std::vector<std::string> errors;     // missing, wrong shape, disallowed dtype, bad companions
  std::vector<std::string> unexpected; // tensors in the checkpoint that the table does not list
  /// Bytes of each table tensor as stored (fp8 scales included), indexed like glm53Weights().
  std::vector<uint64_t> storedBytes;

  bool ok() const { return errors.empty() && unexpected.empty(); }
};

/// A linear weight may be stored as an EXL3 layer instead (`<key>.trellis`, `.suh`, `.svh`, a
/// codebook marker; reference/exl3_format.md §1.1), whose padded shape must fit the table's.
CheckpointCheck checkCheckpoint(const std::vector<WeightInfo> &table, const Checkpoint &checkpoint);

/// `check` as the error of a command that needs the whole checkpoint to match its config
/// (compile, quantize, dequantize): success when it does, else the counts and the first few
/// problems, pointing at `glmc info MODEL_DIR` for the full report.
Status checkpointMismatch(const CheckpointCheck &check, const std::filesystem::path &modelDir);

/// Checks that config.json's quantization_config agrees with the tensors: a checkpoint with EXL3
/// layers must declare quant_method "exl3", and one that declares it must hold some. A codebook
/// that differs from the tensors' markers is only reported through `warnings` (the markers are
/// authoritative, §1.2).
Status checkQuantization(const Glm53Config &config, const std::vector<WeightInfo> &table,
                         const Checkpoint &checkpoint,
                         std::vector<std::string> *warnings = nullptr);

} // namespace glm::glm53
