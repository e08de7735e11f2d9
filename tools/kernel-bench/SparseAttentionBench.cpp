// The sparse_attention family: dsa_indexer (append, score, filter, select) and
// mla_sparse_attention (absorb, attend, output) at the model's dimensions, bf16 plans, with kv_b
// as stored (bf16), in Q4 groups or in fp8 blocks (kernels/common/DenseFormats.h); decode also per
// rank at TP 2 (half the heads).
#include "kernels/dsa_indexer/dsa_indexer_gpu.h"
#include "kernels/mla_sparse_attention/mla_sparse_attention_gpu.h"
#include "tools/kernel-bench/Bench.h"

#include "base/Random.h"
#include "kernels/common/DenseFormats.h"
#include "kernels/common/FloatFormats.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <numeric>
#include <utility>

namespace glm::bench {

namespace {

/// Tokens per page of the state pool: not a model value but the plan's, glm-to-plan's page-tokens
/// option (default 64, compiler/Passes.td). The runtime reads it from each plan and no C++ constant
/// outside the compiler names it, so the bench uses that default.
constexpr int64_t kPageTokens = 64;
constexpr double kL2Bytes = 60e6;

std::string human(int64_t tokens) {
  return tokens >= (1 << 20) ? std::to_string(tokens >> 20) + "M"
                             : std::to_string(tokens >> 10) + "K";
}

/// Paged state for `seqs` sequences of `context` tokens in `copies` disjoint page sets (the timed
/// calls rotate among them so that L2 does not serve state smaller than it), with one page table
/// per copy.
struct Paged {
  cuda::DeviceMemory pool;
  std::vector<cuda::DeviceMemory> tables;
  int64_t maxPages = 0, pageBytes = 0;
};

Expected<Paged> makePaged(Suite &suite, int64_t seqs, int64_t context, int64_t unitBytes,
                          int64_t unitsPerPage, int copies) {
  Paged p;
  p.maxPages = (context + kPageTokens - 1) / kPageTokens + 1;
  p.pageBytes = unitsPerPage * unitBytes;
  const int64_t pages = copies * seqs * p.maxPages;
  GLM_ASSIGN_OR_RETURN(p.pool, suite.random(static_cast<size_t>(pages * p.pageBytes / 2), true));
  for (int c = 0; c < copies; ++c) {
    std::vector<int32_t> table(static_cast<size_t>(seqs * p.maxPages));
    std::iota(table.begin(), table.end(), static_cast<int32_t>(c * seqs * p.maxPages));
    GLM_ASSIGN_OR_RETURN(cuda::DeviceMemory t, suite.ctx().allocate(table.size() * 4));
    GLM_RETURN_IF_ERROR(suite.ctx().upload(t.ptr(), table.data(), table.size() * 4));
    p.tables.push_back(std::move(t));
  }
  return p;
}

Expected<cuda::DeviceMemory> deviceInts(Suite &suite, const std::vector<int32_t> &v) {
  GLM_ASSIGN_OR_RETURN(cuda::DeviceMemory m,
                       suite.ctx().allocate(std::max<size_t>(v.size(), 1) * 4));
  GLM_RETURN_IF_ERROR(suite.ctx().upload(m.ptr(), v.data(), v.size() * 4));
  return m;
}

int copiesFor(double bytes) {
  return static_cast<int>(std::clamp(2.0 * kL2Bytes / bytes, 1.0, 8.0));
}

/// The indexer at `batch` sequences of `rowsPerSeq` rows, each sequence's last row at position
/// context - 1.
Status indexerRow(Suite &suite, cuda::Module &m, int64_t batch, int64_t rowsPerSeq,
                  int64_t context) {
  const glm53::Glm53Config &model = suite.model();
  const int64_t indexHeads = model.indexNHeads, indexDim = model.indexHeadDim,
                kpool = model.indexKpool, topk = model.indexTopk;
  const int64_t width = mlaSelectionWidth(model);
  const int64_t rows = batch * rowsPerSeq;
  const int64_t poolsPerPage = kPageTokens / kpool;
  const int64_t keyBytes = indexDim * 2;
  // Bytes a step must read: every candidate pool's key of each sequence once.
  const int64_t pools = context / kpool;
  const double stateBytes = static_cast<double>(batch * pools * keyBytes);
  const int copies = copiesFor(stateBytes);
  GLM_ASSIGN_OR_RETURN(Paged keys,
                       makePaged(suite, batch, context, keyBytes, poolsPerPage, copies));
  const int64_t maxPools = keys.maxPages * poolsPerPage;
  GLM_ASSIGN_OR_RETURN(cuda::DeviceMemory q, suite.random(rows * indexHeads * indexDim, true));
  GLM_ASSIGN_OR_RETURN(cuda::DeviceMemory k, suite.random(rows * indexDim, true));
  GLM_ASSIGN_OR_RETURN(cuda::DeviceMemory g, suite.random(rows * indexDim, true));
  GLM_ASSIGN_OR_RETURN(cuda::DeviceMemory w, suite.random(rows * indexHeads, true));
  GLM_ASSIGN_OR_RETURN(cuda::DeviceMemory ape, suite.random(kpool * indexDim, true, 0.5f));
  GLM_ASSIGN_OR_RETURN(cuda::DeviceMemory tail,
                       suite.random(batch * (kpool - 1) * 2 * indexDim, true));
  GLM_ASSIGN_OR_RETURN(cuda::DeviceMemory sel, suite.ctx().allocate(rows * width * 4));
  GLM_ASSIGN_OR_RETURN(cuda::DeviceMemory ws,
                       suite.ctx().allocate(kernels::dsaIndexerWorkspaceBytes(rows, maxPools)));
  std::vector<int32_t> positions(static_cast<size_t>(rows)), slots(static_cast<size_t>(batch));
  for (int64_t b = 0; b < batch; ++b) {
    slots[static_cast<size_t>(b)] = static_cast<int32_t>(b);
    for (int64_t i = 0; i < rowsPerSeq; ++i) {
      positions[static_cast<size_t>(b * rowsPerSeq + i)] =
          static_cast<int32_t>(context - rowsPerSeq + i);
    }
  }
  GLM_ASSIGN_OR_RETURN(cuda::DeviceMemory dpos, deviceInts(suite, positions));
  GLM_ASSIGN_OR_RETURN(cuda::DeviceMemory dslots, deviceInts(suite, slots));
  std::vector<kernels::DsaIndexerGpuArgs> args(static_cast<size_t>(copies));
  for (int c = 0; c < copies; ++c) {
    kernels::DsaIndexerGpuArgs &a = args[static_cast<size_t>(c)];
    a.q = reinterpret_cast<const void *>(q.ptr());
    a.k = reinterpret_cast<const void *>(k.ptr());
    a.gate = reinterpret_cast<const void *>(g.ptr());
    a.headWeights = reinterpret_cast<const void *>(w.ptr());
    a.ape = reinterpret_cast<const void *>(ape.ptr());
    a.selected = reinterpret_cast<int32_t *>(sel.ptr());
    a.workspace = reinterpret_cast<void *>(ws.ptr());
    a.ctx = {reinterpret_cast<const int32_t *>(dpos.ptr()),
             reinterpret_cast<const int32_t *>(dslots.ptr()),
             reinterpret_cast<const int32_t *>(keys.tables[static_cast<size_t>(c)].ptr()),
             static_cast<int32_t>(rowsPerSeq), static_cast<int32_t>(keys.maxPages)};
    a.keys = {reinterpret_cast<uint8_t *>(keys.pool.ptr()), keys.pageBytes, 0, keyBytes,
              static_cast<int32_t>(poolsPerPage)};
    a.tail = {reinterpret_cast<uint8_t *>(tail.ptr()), (kpool - 1) * 2 * indexDim * 2};
    a.rows = static_cast<int32_t>(rows);
    a.heads = indexHeads;
    a.headDim = indexDim;
    a.kpool = kpool;
    a.topk = topk;
    a.width = width;
    a.maxPools = static_cast<int32_t>(maxPools);
  }
  const kernels::LaunchDims append = kernels::dsaIndexerAppendLaunch(rows);
  const kernels::LaunchDims score =
      kernels::dsaIndexerScoreLaunch(rows, maxPools, indexHeads, indexDim);
  const kernels::LaunchDims filter = kernels::dsaIndexerFilterLaunch(rows, maxPools);
  const kernels::LaunchDims select = kernels::dsaIndexerSelectLaunch(rows);
  // Candidate pools scored, summed over rows (prefill rows see fewer).
  double scored = 0;
  for (int32_t t : positions) {
    scored += static_cast<double>((t + 1) / kpool);
  }
  const double flops = scored * indexHeads * indexDim * 2;
  const double inputBytes =
      static_cast<double>(rows) * (indexHeads + 2) * indexDim * 2 + rows * width * 4.0;
  const std::string shape = std::to_string(batch) + "x" + std::to_string(rowsPerSeq) + " rows, " +
                            human(context) + " ctx";
  int call = 0;
  auto launchAll = [&](bool scoreOnly) -> Status {
    const kernels::DsaIndexerGpuArgs &a = args[static_cast<size_t>(call++ % copies)];
    if (!scoreOnly) {
      GLM_RETURN_IF_ERROR(suite.ctx().launch(m.function(0), append.grid, append.block, 0, a));
    }
    GLM_RETURN_IF_ERROR(
        suite.ctx().launch(m.function(1), score.grid, score.block, score.sharedMemory, a));
    if (!scoreOnly) {
      GLM_RETURN_IF_ERROR(suite.ctx().launch(m.function(2), filter.grid, filter.block, 0, a));
      GLM_RETURN_IF_ERROR(suite.ctx().launch(m.function(3), select.grid, select.block, 0, a));
    }
    return Status::success();
  };
  const bool prefill = rowsPerSeq > 1;
  Row all{.kernel = "dsa_indexer<bf16> 4 kernels",
          .shape = shape,
          .bytes = stateBytes + inputBytes,
          .flops = flops,
          .bound = prefill ? "mma" : "bw",
          .note = "append+score+filter+select"};
  GLM_RETURN_IF_ERROR(suite.time([&] { return launchAll(false); }, all, prefill ? 10 : 100));
  suite.add(all);
  Row scoreRow{.kernel = "dsaIndexerScore<bf16,bf16>",
               .shape = shape,
               .bytes = stateBytes,
               .flops = flops,
               .bound = prefill ? "mma" : "bw",
               .note = "mma scores + histogram"};
  GLM_RETURN_IF_ERROR(suite.time([&] { return launchAll(true); }, scoreRow, prefill ? 10 : 100));
  suite.add(scoreRow);
  return Status::success();
}

/// How a bench row holds kv_b and the latents, and how many heads a rank has.
enum class KvB { Bf16, Q4, Fp8 };
struct MlaVariant {
  bool fp8Latents = false;
  KvB kvB = KvB::Bf16;
  int tp = 1; // heads per rank: the model's / tp
};

const char *kvBName(KvB w) { return w == KvB::Q4 ? "q4" : w == KvB::Fp8 ? "fp8" : "bf16"; }

/// The module's instances: per state (bf16, fp8) and kv_b (bf16, Q4, fp8), absorb, attend, output.
std::vector<std::string> mlaKernelNames() {
  const std::string b = "glm::kernels::Bf16", f8 = "glm::kernels::Fp8E4m3";
  std::vector<std::string> names;
  for (const std::string &state : {b, f8}) {
    names.push_back("glm::kernels::mlaAttendMmaKernel<" + b + ", " + state + ">");
    for (const std::string &w : {b, std::string("glm::kernels::MlaQ4Groups"), f8}) {
      names.push_back("glm::kernels::mlaAbsorbKernel<" + b + ", " + state + ", " + w + ">");
    }
  }
  for (const std::string &w : {b, std::string("glm::kernels::MlaQ4Groups"), f8}) {
    names.push_back("glm::kernels::mlaOutputKernel<" + b + ", " + w + ">");
  }
  return names;
}
int mlaFn(const std::string &name) {
  static const std::vector<std::string> names = mlaKernelNames();
  return static_cast<int>(std::find(names.begin(), names.end(), name) - names.begin());
}

/// kv_b [rows, cols] in `w`'s bytes: bf16 normals of std `spread`; Q4 codes of any nibble with
/// (scale, minimum) of that spread; fp8 values rounded from normals of std 32 with scaleInv
/// spread / 32.
std::vector<uint8_t> kvBBytes(KvB w, int64_t rows, int64_t cols, float spread) {
  SplitMix64 rng(static_cast<uint64_t>(rows * cols) + static_cast<uint64_t>(w));
  std::vector<uint8_t> bytes;
  if (w == KvB::Bf16) {
    bytes.resize(static_cast<size_t>(rows * cols * 2));
    for (int64_t i = 0; i < rows * cols; ++i) {
      const uint16_t v = kernels::floatToBf16(spread * rng.normal());
      std::memcpy(bytes.data() + 2 * i, &v, 2);
    }
  } else if (w == KvB::Q4) {
    bytes.assign(static_cast<size_t>(kernels::q4Bytes(1, rows, cols)), 0);
    for (int64_t i = 0; i < rows * cols / 2; ++i) {
      bytes[static_cast<size_t>(i)] = static_cast<uint8_t>(rng.next());
    }
    uint8_t *groups = bytes.data() + kernels::q4GroupsOffset(1, rows, cols);
    for (int64_t g = 0; g < rows * (cols / kernels::kQ4Group); ++g) {
      const double scale = spread / 4.6 * (0.5 + rng.uniform());
      const uint16_t pair[2] = {kernels::doubleToF16(scale), kernels::doubleToF16(-7.5 * scale)};
      std::memcpy(groups + 4 * g, pair, 4);
    }
  } else {
    bytes.assign(static_cast<size_t>(kernels::fp8Bytes(1, rows, cols)), 0);
    for (int64_t i = 0; i < rows * cols; ++i) {
      bytes[static_cast<size_t>(i)] = kernels::floatToFp8E4m3(32.0f * rng.normal());
    }
    uint8_t *scales = bytes.data() + kernels::fp8ScalesOffset(1, rows, cols);
    for (int64_t b = 0; b < kernels::fp8BlocksOf(rows) * kernels::fp8BlocksOf(cols); ++b) {
      const float scaleInv = spread / 32.0f;
      std::memcpy(scales + 4 * b, &scaleInv, 4);
    }
  }
  return bytes;
}

/// MLA over `width` selected tokens per row, `batch` sequences of `rowsPerSeq` rows at context.
Status mlaRow(Suite &suite, cuda::Module &m, const MlaVariant &v, int64_t batch, int64_t rowsPerSeq,
              int64_t context) {
  const glm53::Glm53Config &model = suite.model();
  const bool fp8 = v.fp8Latents;
  const int64_t heads = model.numAttentionHeads / v.tp, qkDim = model.qkHeadDim(),
                vDim = model.vHeadDim, rank = model.kvLoraRank;
  const int64_t width = mlaSelectionWidth(model);
  const int64_t rows = batch * rowsPerSeq;
  const int64_t unitBytes = rank * (fp8 ? 1 : 2);
  const int64_t kvRows = heads * (qkDim + vDim);
  // Made once per encoding and shape: the rows share them.
  static std::map<std::pair<int, int64_t>, std::vector<uint8_t>> made;
  std::vector<uint8_t> &kvHost = made[{static_cast<int>(v.kvB), kvRows}];
  if (kvHost.empty()) {
    kvHost = kvBBytes(v.kvB, kvRows, rank, 0.05f);
  }
  const double weightBytes = static_cast<double>(kvHost.size());
  const int copies = copiesFor(weightBytes);
  GLM_ASSIGN_OR_RETURN(Paged lat, makePaged(suite, batch, context, unitBytes, kPageTokens, 1));
  std::vector<cuda::DeviceMemory> kvB;
  for (int c = 0; c < copies; ++c) {
    GLM_ASSIGN_OR_RETURN(cuda::DeviceMemory w, suite.ctx().allocate(kvHost.size()));
    GLM_RETURN_IF_ERROR(suite.ctx().upload(w.ptr(), kvHost.data(), kvHost.size()));
    kvB.push_back(std::move(w));
  }
  GLM_ASSIGN_OR_RETURN(cuda::DeviceMemory q, suite.random(rows * heads * qkDim, true));
  GLM_ASSIGN_OR_RETURN(cuda::DeviceMemory latent, suite.random(rows * rank, true));
  GLM_ASSIGN_OR_RETURN(cuda::DeviceMemory out, suite.ctx().allocate(rows * heads * vDim * 2));
  const bool mma = kernels::mlaAttendUsesMma(true, fp8 ? 1 : 2, heads, rank);
  const int32_t chunks = kernels::mlaSparseAttentionChunks(rows, heads, width, mma);
  GLM_ASSIGN_OR_RETURN(cuda::DeviceMemory ws,
                       suite.ctx().allocate(static_cast<size_t>(
                           kernels::mlaSparseAttentionWorkspaceBytes(rows, heads, rank, chunks))));
  std::vector<int32_t> positions(static_cast<size_t>(rows)), slots(static_cast<size_t>(batch));
  for (int64_t b = 0; b < batch; ++b) {
    slots[static_cast<size_t>(b)] = static_cast<int32_t>(b);
    for (int64_t i = 0; i < rowsPerSeq; ++i) {
      positions[static_cast<size_t>(b * rowsPerSeq + i)] =
          static_cast<int32_t>(context - rowsPerSeq + i);
    }
  }
  GLM_ASSIGN_OR_RETURN(cuda::DeviceMemory dpos, deviceInts(suite, positions));
  GLM_ASSIGN_OR_RETURN(cuda::DeviceMemory dslots, deviceInts(suite, slots));
  std::vector<cuda::DeviceMemory> dsel;
  std::vector<kernels::MlaSparseAttentionGpuArgs> args(static_cast<size_t>(copies));
  for (int c = 0; c < copies; ++c) {
    // Distinct positions scattered over the context (61 is prime to the power-of-two span),
    // different in every copy so that L2 does not keep the selected rows either.
    std::vector<int32_t> selected(static_cast<size_t>(rows * width));
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t s = 0; s < width; ++s) {
        selected[static_cast<size_t>(r * width + s)] =
            static_cast<int32_t>((s * 61 + r + c * 4099) % (context - rowsPerSeq));
      }
    }
    GLM_ASSIGN_OR_RETURN(cuda::DeviceMemory d, deviceInts(suite, selected));
    dsel.push_back(std::move(d));
    kernels::MlaSparseAttentionGpuArgs &a = args[static_cast<size_t>(c)];
    const auto kv = kvB[static_cast<size_t>(c)].ptr();
    a.q = reinterpret_cast<const void *>(q.ptr());
    a.latent = reinterpret_cast<const void *>(latent.ptr());
    a.kvB = reinterpret_cast<const void *>(kv);
    // The sections after the codes, where the plan binds them.
    if (v.kvB == KvB::Q4) {
      a.kvBGroups = reinterpret_cast<const uint32_t *>(
          kv + static_cast<uint64_t>(kernels::q4GroupsOffset(1, kvRows, rank)));
    } else if (v.kvB == KvB::Fp8) {
      a.kvBScaleInv = reinterpret_cast<const float *>(
          kv + static_cast<uint64_t>(kernels::fp8ScalesOffset(1, kvRows, rank)));
    }
    a.selected = reinterpret_cast<const int32_t *>(dsel.back().ptr());
    a.out = reinterpret_cast<void *>(out.ptr());
    a.workspace = reinterpret_cast<void *>(ws.ptr());
    a.ctx = {reinterpret_cast<const int32_t *>(dpos.ptr()),
             reinterpret_cast<const int32_t *>(dslots.ptr()),
             reinterpret_cast<const int32_t *>(lat.tables[0].ptr()),
             static_cast<int32_t>(rowsPerSeq), static_cast<int32_t>(lat.maxPages)};
    a.latents = {reinterpret_cast<uint8_t *>(lat.pool.ptr()), lat.pageBytes, 0, unitBytes,
                 static_cast<int32_t>(kPageTokens)};
    a.rows = static_cast<int32_t>(rows);
    a.heads = static_cast<int32_t>(heads);
    a.qkHeadDim = qkDim;
    a.vHeadDim = vDim;
    a.rank = rank;
    a.width = width;
    a.chunks = chunks;
    a.scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(qkDim))); // qk_head_dim^-1/2
  }
  const kernels::LaunchDims absorb = kernels::mlaAbsorbLaunch(rows, heads, rank);
  const kernels::LaunchDims attend = kernels::mlaAttendLaunch(rows, heads, rank, chunks, mma);
  const kernels::LaunchDims output = kernels::mlaOutputLaunch(rows, heads, vDim);
  const std::string b = "glm::kernels::Bf16", f8 = "glm::kernels::Fp8E4m3";
  const std::string state = fp8 ? f8 : b;
  const std::string w = v.kvB == KvB::Q4 ? "glm::kernels::MlaQ4Groups" : v.kvB == KvB::Fp8 ? f8 : b;
  int call = 0;
  const int which[3] = {mlaFn("glm::kernels::mlaAbsorbKernel<" + b + ", " + state + ", " + w + ">"),
                        mlaFn("glm::kernels::mlaAttendMmaKernel<" + b + ", " + state + ">"),
                        mlaFn("glm::kernels::mlaOutputKernel<" + b + ", " + w + ">")};
  auto launch = [&](int only) -> Status {
    const kernels::MlaSparseAttentionGpuArgs &a = args[static_cast<size_t>(call++ % copies)];
    const kernels::LaunchDims *dims[3] = {&absorb, &attend, &output};
    for (int i = 0; i < 3; ++i) {
      if (only < 0 || only == i) {
        GLM_RETURN_IF_ERROR(suite.ctx().launch(m.function(which[i]), dims[i]->grid, dims[i]->block,
                                               dims[i]->sharedMemory, a));
      }
    }
    return Status::success();
  };
  // Per row: absorb 2 * heads * qk_head_dim * rank, output 2 * heads * v_head_dim * rank, scores
  // and mix 2 * heads * width * rank each.
  const double perRow =
      2.0 * heads * (static_cast<double>(qkDim + vDim) * rank + 2.0 * width * rank);
  const double latentBytes = static_cast<double>(rows) * width * unitBytes;
  const double ioBytes =
      static_cast<double>(rows) * (heads * (qkDim + vDim) * 2 + rank * 2 + width * 4);
  const bool prefill = rowsPerSeq > 1;
  const std::string name =
      std::string("mla_sparse<bf16,") + (fp8 ? "fp8" : "bf16") + ",kv_b " + kvBName(v.kvB) + ">";
  const std::string shape = std::to_string(batch) + "x" + std::to_string(rowsPerSeq) + " rows, " +
                            std::to_string(heads) + " heads" + (v.tp > 1 ? " (TP " : "") +
                            (v.tp > 1 ? std::to_string(v.tp) + ")" : "") + ", " +
                            std::to_string(width) + " sel, chunks " + std::to_string(chunks);
  Row all{.kernel = name + " 3 kernels",
          .shape = shape,
          .bytes = weightBytes + latentBytes + ioBytes,
          .flops = perRow * rows,
          .bound = prefill ? "mma" : "bw",
          .note = "absorb+attend+output"};
  GLM_RETURN_IF_ERROR(suite.time([&] { return launch(-1); }, all, prefill ? 5 : 100));
  suite.add(all);
  if (!prefill) {
    const char *names[3] = {"mlaAbsorb", "mlaAttendMma", "mlaOutput"};
    // Wk_h and Wv_h are each half of kv_b (qk_head_dim = v_head_dim).
    const double bytes[3] = {weightBytes / 2, latentBytes, weightBytes / 2};
    for (int i = 0; i < 3; ++i) {
      Row part{.kernel = std::string(names[i]) + "<" + (fp8 ? "fp8" : "bf16") +
                         (i == 1 ? "" : std::string(",kv_b ") + kvBName(v.kvB)) + ">",
               .shape = shape,
               .bytes = bytes[i],
               .flops = i == 1 ? 4.0 * heads * width * rank * rows
                               : 2.0 * heads * (i == 0 ? qkDim : vDim) * rank * rows,
               .bound = "bw"};
      GLM_RETURN_IF_ERROR(suite.time([&] { return launch(i); }, part, 100));
      suite.add(part);
    }
  }
  return Status::success();
}

} // namespace

Status addSparseAttentionBenches(Suite &suite) {
  if (kPageTokens % suite.model().indexKpool != 0) {
    // The indexer pages whole pools of keys (CpuEngine refuses such pages too).
    return invalidArgument("pages of ", kPageTokens,
                           " tokens do not hold whole pools of index_kpool ",
                           suite.model().indexKpool);
  }
  const std::string b = "glm::kernels::Bf16";
  GLM_ASSIGN_OR_RETURN(
      std::unique_ptr<cuda::Module> indexer,
      suite.compile(R"(#include "kernels/dsa_indexer/dsa_indexer.cuh")",
                    {"glm::kernels::dsaIndexerAppendKernel<" + b + ", " + b + ", " + b + ">",
                     "glm::kernels::dsaIndexerScoreKernel<" + b + ", " + b + ">",
                     "glm::kernels::dsaIndexerFilterKernel",
                     "glm::kernels::dsaIndexerSelectKernel"}));
  // 4K: the 8-layer synthetic bench's context, where the step's fixed costs show.
  for (int64_t context : {int64_t{4} << 10, int64_t{128} << 10, int64_t{1} << 20}) {
    for (int64_t batch : {1, 4}) {
      GLM_RETURN_IF_ERROR(indexerRow(suite, *indexer, batch, 1, context));
    }
  }
  GLM_RETURN_IF_ERROR(indexerRow(suite, *indexer, 1, 2048, int64_t{16} << 10));

  GLM_ASSIGN_OR_RETURN(
      std::unique_ptr<cuda::Module> mla,
      suite.compile(R"(#include "kernels/mla_sparse_attention/mla_sparse_attention.cuh")",
                    mlaKernelNames()));
  const int64_t context = int64_t{128} << 10;
  for (KvB w : {KvB::Bf16, KvB::Q4, KvB::Fp8}) {
    for (int64_t batch : {1, 4}) {
      GLM_RETURN_IF_ERROR(mlaRow(suite, *mla, {.kvB = w}, batch, 1, context));
    }
    // Per rank at TP 2 (GLM-5.3-Flash: 32 heads, kv_b 16384 x 512).
    GLM_RETURN_IF_ERROR(mlaRow(suite, *mla, {.kvB = w, .tp = 2}, 1, 1, context));
  }
  for (KvB w : {KvB::Bf16, KvB::Q4}) {
    GLM_RETURN_IF_ERROR(mlaRow(suite, *mla, {.fp8Latents = true, .kvB = w}, 1, 1, context));
    GLM_RETURN_IF_ERROR(
        mlaRow(suite, *mla, {.fp8Latents = true, .kvB = w, .tp = 2}, 1, 1, context));
  }
  for (KvB w : {KvB::Bf16, KvB::Q4, KvB::Fp8}) {
    GLM_RETURN_IF_ERROR(mlaRow(suite, *mla, {.kvB = w}, 1, 2048, int64_t{16} << 10));
  }
  return Status::success();
}

} // namespace glm::bench
