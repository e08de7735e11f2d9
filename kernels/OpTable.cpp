// The op table: one line per op.
#include "kernels/OpTable.h"

#include "kernels/add/add_op.h"
#include "kernels/concat/concat_op.h"
#include "kernels/convert/convert_op.h"
#include "kernels/count_tokens/count_tokens_op.h"
#include "kernels/dsa_indexer/dsa_indexer_op.h"
#include "kernels/embedding/embedding_op.h"
#include "kernels/expand_streams/expand_streams_op.h"
#include "kernels/gated_rms_norm/gated_rms_norm_op.h"
#include "kernels/kda/kda_op.h"
#include "kernels/last_rows/last_rows_op.h"
#include "kernels/layer_norm/layer_norm_op.h"
#include "kernels/linear/linear_op.h"
#include "kernels/linear_group/linear_group_op.h"
#include "kernels/mhc_post/mhc_post_op.h"
#include "kernels/mhc_pre/mhc_pre_op.h"
#include "kernels/mla_sparse_attention/mla_sparse_attention_op.h"
#include "kernels/moe_experts/moe_experts_op.h"
#include "kernels/moe_router/moe_router_op.h"
#include "kernels/next_embedding/next_embedding_op.h"
#include "kernels/rms_norm/rms_norm_op.h"
#include "kernels/sample/sample_op.h"
#include "kernels/short_conv/short_conv_op.h"
#include "kernels/stream_mean/stream_mean_op.h"
#include "kernels/swiglu/swiglu_op.h"

namespace glm::kernels {
namespace {

constexpr OpAdapters kOps[] = {
    {"add", addCheck, addGpu, addCpu},
    {"concat", concatCheck, concatGpu, concatCpu},
    {"convert", convertCheck, convertGpu, convertCpu},
    {"count_tokens", countTokensCheck, countTokensGpu, countTokensCpu},
    {"dsa_indexer", dsaIndexerCheck, dsaIndexerGpu, dsaIndexerCpu},
    {"embedding", embeddingCheck, embeddingGpu, embeddingCpu},
    {"expand_streams", expandStreamsCheck, expandStreamsGpu, expandStreamsCpu},
    {"gated_norm", gatedNormCheck, gatedNormGpu, gatedNormCpu},
    {"kda", kdaCheck, kdaGpu, kdaCpu},
    {"last_rows", lastRowsCheck, lastRowsGpu, lastRowsCpu},
    {"layer_norm", layerNormCheck, layerNormGpu, layerNormCpu},
    {"linear", linearCheck, linearGpu, linearCpu, /*takesExl3=*/true, kQ4AndFp8},
    {"linear_group", linearGroupCheck, linearGroupGpu, linearGroupCpu, /*takesExl3=*/false,
     kQ4AndFp8},
    {"mhc_post", mhcPostCheck, mhcPostGpu, mhcPostCpu},
    {"mhc_pre", mhcPreCheck, mhcPreGpu, mhcPreCpu},
    {"mla_sparse_attention", mlaSparseAttentionCheck, mlaSparseAttentionGpu, mlaSparseAttentionCpu,
     /*takesExl3=*/false, kQ4AndFp8},
    {"moe_experts", moeExpertsCheck, moeExpertsGpu, moeExpertsCpu, /*takesExl3=*/true},
    {"moe_router", moeRouterCheck, moeRouterGpu, moeRouterCpu, /*takesExl3=*/false,
     encodingBit(DenseEncoding::Fp8)},
    {"next_embedding", nextEmbeddingCheck, nextEmbeddingGpu, nextEmbeddingCpu},
    {"rms_norm", rmsNormCheck, rmsNormGpu, rmsNormCpu},
    {"sample", sampleCheck, sampleGpu, sampleCpu},
    {"short_conv", shortConvCheck, shortConvGpu, shortConvCpu},
    {"stream_mean", streamMeanCheck, streamMeanGpu, streamMeanCpu},
    {"swiglu", swigluCheck, swigluGpu, swigluCpu},
};

} // namespace

const OpAdapters *findOp(std::string_view mnemonic) {
  for (const OpAdapters &op : kOps) {
    if (op.mnemonic == mnemonic) {
      return &op;
    }
  }
  return nullptr;
}

Status checkWeightFormats(const OpAdapters &op, const OpStep &step, bool gpu) {
  for (size_t i = 0; i < step.weightCount(); ++i) {
    const WeightInfo w = step.weight(i);
    if (w.exl3 && !op.takesExl3) {
      return step.error(StatusCode::Unimplemented, op.mnemonic, " reads EXL3 weight ", w.name,
                        ": only linear and routed-expert steps take EXL3 weights");
    }
    // An FP8 checkpoint holds more than linears in fp8 (the router, kv_b): refused by name
    // where a kernel would read the bytes as another type.
    if (gpu && w.encoding != DenseEncoding::Plain &&
        (op.gpuEncodings & encodingBit(w.encoding)) == 0) {
      return step.error(StatusCode::Unimplemented, op.mnemonic, " reads weight ", w.name, " in ",
                        w.encoding == DenseEncoding::Q4 ? "Q4 groups" : "fp8 blocks",
                        ", which its CUDA kernels do not read yet");
    }
  }
  return Status::success();
}

} // namespace glm::kernels
