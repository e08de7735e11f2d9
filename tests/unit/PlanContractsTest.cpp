// Tests of the step half of plan validation (runtime/engine/PlanContracts.h): plans glmc compiled
// from the tiny fixture, each changed in one field as a hostile file would be and sealed again
// (a consistent file, not a damaged one), are refused by program, step and the broken rule.
#include "runtime/engine/PlanContracts.h"
#include "runtime/schema/PlanHash.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <unistd.h>

namespace glm::runtime {
namespace {

const std::filesystem::path kTiny = std::filesystem::path(GLM_FIXTURES_DIR) / "glm53-tiny";

/// The bytes of a tiny plan compiled for `target`, once per target for the whole suite.
const std::vector<uint8_t> &compiledPlan(const std::string &target) {
  static std::map<std::string, std::vector<uint8_t>> plans;
  auto it = plans.find(target);
  if (it != plans.end()) {
    return it->second;
  }
  const auto path = std::filesystem::temp_directory_path() /
                    ("plan_contracts_" + target + "_" + std::to_string(::getpid()) + ".glmp");
  const std::string command = std::string(GLM_GLMC_PATH) + " compile " + kTiny.string() + " -o " +
                              path.string() + " --target " + target + " 2>/dev/null";
  EXPECT_EQ(std::system(command.c_str()), 0) << command;
  std::ifstream in(path, std::ios::binary);
  std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)), {});
  std::filesystem::remove(path);
  return plans[target] = std::move(bytes);
}

/// The first step named `name` of the plan's first program, to be changed in place.
plan::Step *findStep(std::vector<uint8_t> &bytes, std::string_view name) {
  plan::Program *program =
      plan::GetMutablePlan(bytes.data())->mutable_programs()->GetMutableObject(0);
  for (uint32_t i = 0; i < program->steps()->size(); ++i) {
    plan::Step *step = program->mutable_steps()->GetMutableObject(i);
    if (step->name()->string_view() == name) {
      return step;
    }
  }
  ADD_FAILURE() << "no step " << name;
  return nullptr;
}

plan::Attribute *findAttribute(plan::Step *step, std::string_view key) {
  for (uint32_t i = 0; step != nullptr && i < step->attributes()->size(); ++i) {
    plan::Attribute *a = step->mutable_attributes()->GetMutableObject(i);
    if (a->key()->string_view() == key) {
      return a;
    }
  }
  ADD_FAILURE() << "no attribute " << key;
  return nullptr;
}

/// The status of validating the `target` plan after `edit`, the plan sealed again.
Status validateEdited(const std::string &target,
                      const std::function<void(std::vector<uint8_t> &)> &edit) {
  std::vector<uint8_t> bytes = compiledPlan(target);
  edit(bytes);
  EXPECT_TRUE(plan::sealPlanBuffer(bytes));
  Expected<std::unique_ptr<PlanFile>> file = PlanFile::fromBytes(bytes, "edited.glmp");
  if (!file.ok()) {
    return file.status();
  }
  return validatePlanSteps(**file);
}

void expectRefused(const Status &status, const std::string &expected) {
  ASSERT_FALSE(status.ok()) << "expected: " << expected;
  EXPECT_NE(status.message().find(expected), std::string::npos) << status.message();
  EXPECT_EQ(status.message().rfind("edited.glmp: program decode_b1_r1, step ", 0), 0u)
      << status.message();
}

TEST(PlanContracts, CompiledPlansHoldTheirContracts) {
  for (const char *target : {"cpu", "sm_90a", "sm_121a"}) {
    const Status status = validateEdited(target, [](std::vector<uint8_t> &) {});
    EXPECT_TRUE(status.ok()) << target << ": " << status.toString();
  }
}

TEST(PlanContracts, RefusesAStepWhoseOpWasChanged) {
  // linear and swiglu have names of one length: the step's bytes become a swiglu's.
  expectRefused(validateEdited("cpu",
                               [](std::vector<uint8_t> &bytes) {
                                 plan::Step *step = findStep(bytes, "blk.0.attn.o_proj");
                                 std::memcpy(step->mutable_op()->data(), "swiglu", 6);
                               }),
                "(blk.0.attn.o_proj): has 1 operands, its op reads 2");
}

TEST(PlanContracts, RefusesALinearGroupThatIsNot) {
  // count_tokens and linear_group have names of one length: a CPU plan's count_tokens step (no
  // result: it counts into its state) read as a group of linears.
  expectRefused(validateEdited("cpu",
                               [](std::vector<uint8_t> &bytes) {
                                 plan::Step *step = findStep(bytes, "embed.count_tokens");
                                 std::memcpy(step->mutable_op()->data(), "linear_group", 12);
                               }),
                "(embed.count_tokens): has 0 results, its op writes 2 to 8");
}

TEST(PlanContracts, RefusesParametersOutOfRange) {
  expectRefused(validateEdited("cpu",
                               [](std::vector<uint8_t> &bytes) {
                                 findAttribute(findStep(bytes, "blk.0.attn_hc+attn_norm"),
                                               "sinkhorn_iters")
                                     ->mutate_int_value(1000000000);
                               }),
                "parameter sinkhorn_iters is 1000000000, outside [1, 10000]");
  expectRefused(validateEdited("cpu",
                               [](std::vector<uint8_t> &bytes) {
                                 findAttribute(findStep(bytes, "blk.0.attn.kda+o_norm"), "norm_eps")
                                     ->mutate_float_value(2.0);
                               }),
                "parameter norm_eps is 2, outside [0, 1]");
}

TEST(PlanContracts, RefusesACountTokensStepWithoutItsState) {
  // Found by the plan_engine fuzzer (09dc899): the check read the step's state before its count
  // held, a null vector in `glmc generate`. The states vector's length is set to 0 in place.
  expectRefused(
      validateEdited(
          "cpu",
          [](std::vector<uint8_t> &bytes) {
            plan::Program *program =
                plan::GetMutablePlan(bytes.data())->mutable_programs()->GetMutableObject(0);
            for (uint32_t i = 0; i < program->steps()->size(); ++i) {
              plan::Step *step = program->mutable_steps()->GetMutableObject(i);
              if (step->op()->string_view() == "count_tokens") {
                auto *length =
                    const_cast<uint32_t *>(reinterpret_cast<const uint32_t *>(step->states()));
                *length = 0;
                return;
              }
            }
            ADD_FAILURE() << "no count_tokens step";
          }),
      "(embed.count_tokens): has 0 states, its op reads 1");
}

TEST(PlanContracts, RefusesAStepWithoutAName) {
  // Found by the plan_engine fuzzer: a step with no name reached the CPU engine, which names
  // every step in its errors and dumps (a null string's str()). The name is emptied in place.
  expectRefused(validateEdited("cpu",
                               [](std::vector<uint8_t> &bytes) {
                                 plan::Step *step = findStep(bytes, "blk.0.attn.o_proj");
                                 auto *name = const_cast<flatbuffers::String *>(step->name());
                                 auto *length = reinterpret_cast<uint32_t *>(name);
                                 *length = 0;
                                 name->data()[0] = '\0'; // the empty string's terminator
                               }),
                ", step 8 (): has no name");
}

TEST(PlanContracts, RefusesAShapeWhoseLongsAreMisaligned) {
  // Found by the plan_engine fuzzer: the flatbuffers verifier checks a vector's 4-byte length
  // word, not that 8-byte elements are 8-byte aligned, and a mutant's [long] read through
  // misaligned loads. A result's shape is moved 4 bytes back, onto zero padding: an empty vector,
  // verifiable, whose elements would start at 4 mod 8.
  std::string moved;
  Status s = validateEdited("cpu", [&](std::vector<uint8_t> &bytes) {
    plan::Program *program =
        plan::GetMutablePlan(bytes.data())->mutable_programs()->GetMutableObject(0);
    for (uint32_t i = 0; i < program->steps()->size() && moved.empty(); ++i) {
      plan::Step *step = program->mutable_steps()->GetMutableObject(i);
      for (uint32_t r = 0; r < step->results()->size() && moved.empty(); ++r) {
        plan::TensorRef *t = step->mutable_results()->GetMutableObject(r);
        const auto *shape = reinterpret_cast<const uint8_t *>(t->shape());
        uint32_t before = 1;
        std::memcpy(&before, shape - 4, 4);
        if (before != 0) {
          continue;
        }
        auto *field =
            const_cast<uint8_t *>(reinterpret_cast<const flatbuffers::Table *>(t)->GetAddressOf(
                plan::TensorRef::VT_SHAPE));
        uint32_t offset = 0;
        std::memcpy(&offset, field, 4);
        offset -= 4;
        std::memcpy(field, &offset, 4);
        moved = t->name()->str();
      }
    }
    ASSERT_FALSE(moved.empty()) << "no shape after zero padding";
  });
  expectRefused(s, "tensor " + moved + ": its shape is not 8-byte aligned");
}

TEST(PlanContracts, RefusesShapesTheKernelsWouldOverrun) {
  // The input norm's weight (folded into the mixer's step, its weight 3) said to be half as wide:
  // its slice still holds the bytes the shape claims, so only the op's contract sees that the
  // kernel reads twice as many.
  expectRefused(validateEdited("cpu",
                               [](std::vector<uint8_t> &bytes) {
                                 plan::Plan *p = plan::GetMutablePlan(bytes.data());
                                 const plan::Step *step =
                                     findStep(bytes, "blk.0.attn_hc+attn_norm");
                                 plan::WeightBinding *w = p->mutable_weights()->GetMutableObject(
                                     step->weights()->Get(3));
                                 w->mutable_rank_shape()->Mutate(0, 64);
                               }),
                "weight 3 (blk.0.attn_norm) is [64], its op reads 128 values");
  // A result's rows cut short.
  expectRefused(
      validateEdited("cpu",
                     [](std::vector<uint8_t> &bytes) {
                       plan::Step *step = findStep(bytes, "blk.0.attn.o_proj");
                       step->mutable_results()->GetMutableObject(0)->mutable_shape()->Mutate(1, 32);
                     }),
      "result 0 is [1, 32], its op reads [1, ");
}

TEST(PlanContracts, RefusesShortConvPartsOfTwoWindows) {
  // A KDA layer's convs are one step of three parts, which share one window: the k conv's kernel
  // said to be 2 taps wide (its slice still holds them) is refused, not run with weight 0's 4.
  expectRefused(validateEdited("cpu",
                               [](std::vector<uint8_t> &bytes) {
                                 plan::Plan *p = plan::GetMutablePlan(bytes.data());
                                 const plan::Step *step =
                                     findStep(bytes, "blk.0.attn.q_conv1d+k_conv1d+v_conv1d");
                                 ASSERT_NE(step, nullptr);
                                 plan::WeightBinding *w = p->mutable_weights()->GetMutableObject(
                                     step->weights()->Get(1));
                                 w->mutable_rank_shape()->Mutate(2, 2);
                               }),
                "weight 1's kernel is 2, weight 0's 4: a step's parts share one window");
}

TEST(PlanContracts, RefusesAGpuPlanFromOtherKernelSources) {
  // A plan compiled by a glmc whose kernels differ (its argument structs, its cubins) is refused
  // by name before any launch is compared; a CPU plan records no such hash. One hex digit changed
  // in place.
  const Status status = validateEdited("sm_90a", [](std::vector<uint8_t> &bytes) {
    plan::Plan *p = plan::GetMutablePlan(bytes.data());
    ASSERT_NE(p->kernel_sources_hash(), nullptr);
    char *digit = const_cast<char *>(p->kernel_sources_hash()->c_str());
    *digit = *digit == '0' ? '1' : '0';
  });
  ASSERT_FALSE(status.ok());
  EXPECT_NE(
      status.message().find("edited.glmp: compiled from other kernel sources than this glmc's ("),
      std::string::npos)
      << status.message();
  EXPECT_NE(status.message().find("recompile the plan with this glmc"), std::string::npos);
  std::vector<uint8_t> cpu = compiledPlan("cpu");
  EXPECT_EQ(plan::GetPlan(cpu.data())->kernel_sources_hash(), nullptr);
}

TEST(PlanContracts, RefusesGpuLaunchesOtherThanTheAdaptersGive) {
  expectRefused(
      validateEdited("sm_90a",
                     [](std::vector<uint8_t> &bytes) {
                       plan::KernelLaunch *l =
                           findStep(bytes, "head.norm")->mutable_launches()->GetMutableObject(0);
                       l->mutable_grid()->Mutate(0, l->grid()->Get(0) * 2);
                     }),
      "launch 0 (glm::kernels::rmsNormKernel");
  expectRefused(
      validateEdited("sm_90a",
                     [](std::vector<uint8_t> &bytes) {
                       plan::KernelLaunch *l =
                           findStep(bytes, "head.norm")->mutable_launches()->GetMutableObject(0);
                       // The struct's last byte: a constant, never an address.
                       const uint32_t last = l->args()->size() - 1;
                       l->mutable_args()->Mutate(last, l->args()->Get(last) ^ 0x40);
                     }),
      "has other argument bytes than its op gives");
}

} // namespace
} // namespace glm::runtime
