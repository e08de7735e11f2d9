// Binding a checkpoint to a plan: each weight's rank slice copied into the weights arena.
#pragma once

#include "base/Progress.h"
#include "base/Status.h"
#include "kernels/common/DenseFormats.h"
#include "runtime/schema/plan_generated.h"
#include "runtime/weights/Exl3Tensors.h"
#include "runtime/weights/SafeTensors.h"

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace glm::kernels {
struct QuantizeStats;
} // namespace glm::kernels

namespace glm {

/// The refusal-direction ablation (--ablate): before quantization, each selected layer's
/// attention output projection W [hidden, in] becomes W - alpha · d̂ (d̂ᵀ W), d̂ = direction / |d|.
/// The layers are the builder's: binding `blk.<L>.attn.o_proj` is layer L's projection.
struct Ablation {
  std::vector<float> direction; // hidden_size values
  int64_t firstLayer = 15;      // the layers [firstLayer, lastLayer]
  int64_t lastLayer = 0;
  int64_t mtpLayer = -1; // the MTP layer's index (num_hidden_layers) when it is ablated too
  double alpha = 3.0;
};

/// A device that quantizes a binding's rank slice itself, straight into its own copy of the
/// weights arena (the CUDA engine), in place of the host quantizer (kernels/quantize/quantize.h).
/// What it writes must be the host quantizer's bytes, and the stats it adds its QuantizeStats.
class DeviceQuantizer {
public:
  struct Job {
    std::string_view name;           // the binding
    const uint8_t *source = nullptr; // the rank's part [rows, cols], contiguous, in host memory
    DType dtype = DType::BF16;       // BF16, F16 or F32
    int64_t rows = 0, cols = 0;
    kernels::DenseEncoding encoding = kernels::DenseEncoding::Q4; // Q4 or Fp8
    uint64_t arenaOffset = 0; // the binding's slice in the weights arena
    uint64_t bytes = 0;       // and its size: the device writes all of it (padding zero)
  };
  virtual ~DeviceQuantizer() = default;
  /// Quantizes `job` on the device and adds its error to `stats`: true when done (the host's
  /// window buffer then holds zeros for the slice, which its owner must not upload over the
  /// device's bytes), false when the host is to do it (the device cannot, or the source holds
  /// what the host quantizer refuses, which it then reports). `source` need not outlive the call.
  virtual bool quantize(const Job &job, kernels::QuantizeStats &stats) = 0;
};

/// A digest of the checkpoint bytes a rank's load reads (the rank's part of every tensor it binds,
/// as stored), computed by the load itself as it copies them, not in a pass of its own: what tells
/// two ranks' weights apart when their tensor tables agree (a tensor-parallel worker with other
/// files under the same names). Ranks read different parts, so each rank's digest is of its own
/// part; rank 0 also asks for the workers' (`ranks`), which reads their parts too, to check the
/// digests they present. A 64-bit fingerprint against mistakes, not a defence against forgery
/// (the tensor-parallel secret authenticates the worker). Thread-safe; windows may fill it in any
/// order, the digest does not depend on the windowing.
class WeightDigest {
public:
  /// Digests the loading rank's part and those of `ranks`.
  explicit WeightDigest(std::vector<uint32_t> ranks = {}) : ranks_(std::move(ranks)) {}
  /// Rank `rank`'s digest, 16 hex digits; "" when it was not computed.
  std::string hex(uint32_t rank) const;
  const std::vector<uint32_t> &ranks() const { return ranks_; }
  /// The load's part: binding `binding`'s hash for rank `rank`.
  void add(uint32_t rank, uint32_t binding, uint64_t hash);

private:
  std::vector<uint32_t> ranks_;
  mutable std::mutex mutex_;
  std::map<uint32_t, std::map<uint32_t, uint64_t>> bindings_; // rank -> binding -> hash
};

struct WeightLoadOptions {
  ProgressReporter *progress = nullptr; // counts the bytes of the slices filled
  const Ablation *ablation = nullptr;
  /// Quantizes Q4 and fp8 bindings on a device instead of on the host's cores (not owned).
  DeviceQuantizer *deviceQuantizer = nullptr;
  /// Filled with the digest of the bytes the load reads (not owned; used during the load only).
  WeightDigest *digest = nullptr;
};

/// What a load quantized: the linears a plan holds as Q4 or fp8 from a bf16/f16/f32 checkpoint
/// (kernels/common/DenseFormats.h), accumulated over the windows of one rank's load.
struct QuantizeReport {
  int64_t q4 = 0, fp8 = 0;  // linears quantized to each
  uint64_t bytesBefore = 0; // their rank slices as stored
  uint64_t bytesAfter = 0;  // and as held
  double sumError = 0;      // Σ relative RMS error, for the mean
  double worstError = 0;    // the largest relative RMS error of one linear
  std::string worstName;    // and its binding
  int64_t ablated = 0;      // projections the ablation changed
  int64_t onDevice = 0;     // linears the engine's DeviceQuantizer quantized
  /// One line: counts, bytes before and after, mean and worst relative RMS error.
  std::string line() const;
};

/// The checkpoint dtype of a plan element type.
Expected<DType> dtypeOfElement(plan::ElementType element);

/// Fills `arena` (the plan's weights arena, as many bytes as the plan says) with rank `rank`'s
/// slice of every weight binding. Each checkpoint tensor must have the binding's global shape
/// (per expert for stacked experts, whose `{e}` names expert ids) and be stored in the binding's
/// element type, or be the bf16/f16/f32 source of a Q4 or fp8 binding, which is quantized here
/// (an FP8 checkpoint's `weight_scale_inv` blocks come with their weight); errors name the
/// tensor and the file. Tensors are copied on all cores, and each quantized one is split over
/// them; `report` (optional) accumulates what was quantized.
Status loadPlanWeights(const plan::Plan &plan, const Checkpoint &checkpoint, uint32_t rank,
                       std::span<uint8_t> arena, const WeightLoadOptions &options = {},
                       QuantizeReport *report = nullptr);

/// The arena layout of an EXL3 binding: its matrices (the local experts of a stacked binding, else
/// one) of the rank shape's [out, in], at the K its slice size implies.
Expected<Exl3ArenaLayout> exl3BindingLayout(const plan::WeightBinding &binding);

/// A range of the weights arena that holds whole bindings.
struct WeightWindow {
  uint64_t offset = 0;
  uint64_t bytes = 0;
};

/// The weights arena cut at binding boundaries into windows of at most `maxBytes` (a binding
/// larger than that gets a window of its own), in arena order: a GPU engine loads its weights a
/// window at a time through a bounded host buffer instead of a copy of the whole arena.
std::vector<WeightWindow> planWeightWindows(const plan::Plan &plan, uint64_t maxBytes);

/// loadPlanWeights for the bindings that lie in arena bytes [windowOffset, windowOffset +
/// window.size()), which `window` holds; bytes between bindings are left as they are.
Status loadPlanWeightsWindow(const plan::Plan &plan, const Checkpoint &checkpoint, uint32_t rank,
                             uint64_t windowOffset, std::span<uint8_t> window,
                             const WeightLoadOptions &options = {},
                             QuantizeReport *report = nullptr);

/// One rank's load of a plan's weights, window by window, as the engines do it: a progress line
/// on stderr for loads of more than 1 GB, and the QuantizeReport logged once at the end when the
/// plan quantizes or ablates anything.
class RankWeightLoad {
public:
  RankWeightLoad(const plan::Plan &plan, const Checkpoint &checkpoint, uint32_t rank,
                 const WeightLoadOptions &options);
  ~RankWeightLoad();
  /// loadPlanWeightsWindow into `window`, arena bytes from `offset`.
  Status window(uint64_t offset, std::span<uint8_t> window);
  /// Ends the progress line and logs the report (after the last window); InvalidArgument when
  /// the ablation did not find every projection it names.
  Status finish();
  const QuantizeReport &report() const { return report_; }

private:
  const plan::Plan &plan_;
  const Checkpoint &checkpoint_;
  uint32_t rank_;
  WeightLoadOptions options_;
  std::unique_ptr<ProgressReporter> progress_;
  QuantizeReport report_;
};

} // namespace glm
