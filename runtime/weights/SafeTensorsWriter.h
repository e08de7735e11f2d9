// Writes safetensors files tensor by tensor, so a checkpoint larger than memory can be produced.
#pragma once

#include "base/DType.h"
#include "base/Status.h"

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <span>
#include <string>
#include <vector>

namespace glm {

/// A tensor to be written: its bytes come from `fill`, called once with a buffer of exactly
/// numel * dtypeSize bytes, in declaration order.
struct TensorSpec {
  std::string name;
  DType dtype = DType::BF16;
  std::vector<int64_t> shape;
  std::function<void(std::span<uint8_t>)> fill;

  uint64_t byteSize() const;
};

/// Writes one safetensors file: header (tensors in the given order, data 8-byte aligned as the
/// format recommends), then the data. The file is written to `path`.tmp and renamed at the end so
/// an interrupted write never leaves a truncated file under the real name.
Status writeSafeTensors(const std::filesystem::path &path, const std::vector<TensorSpec> &tensors,
                        const std::map<std::string, std::string> &metadata = {});

/// Writes `tensors` into `dir` as the Hub lays checkpoints out: a single model.safetensors when
/// the total is at most `maxShardBytes`, else model-00001-of-0000N.safetensors shards (tensors kept
/// in order, a new shard started when the next tensor would overflow) plus
/// model.safetensors.index.json with metadata.total_size and the weight_map. `onTensorWritten`
/// (may be empty) is called with each tensor's byte size after it is written, for progress.
Status writeCheckpointShards(const std::filesystem::path &dir,
                             const std::vector<TensorSpec> &tensors, uint64_t maxShardBytes,
                             const std::function<void(uint64_t)> &onTensorWritten = {});

/// Copies a checkpoint directory's files other than its weights to `to`: tokenizer, chat template,
/// generation config and the like. The safetensors files, their index, config.json and
/// exllamav3's quantization_config.json are left out: a command that rewrites the weights writes
/// those itself.
Status copyCheckpointCompanions(const std::filesystem::path &from, const std::filesystem::path &to);

} // namespace glm
