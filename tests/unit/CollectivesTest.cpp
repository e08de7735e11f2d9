// Reading collective steps (runtime/plan/Collectives.h): what each collective moves, and which
// inconsistent steps are refused. (Where programs split at them is plan-form-segments', tested in
// tests/lit/compiler/form-segments.mlir.)
#include "runtime/plan/Collectives.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace glm::runtime {
namespace {

namespace fb = flatbuffers;

/// A step of `op` from a tensor of `in` shape to one of `out` shape; a gather's `axis`.
struct StepSpec {
  std::string op = "linear";
  std::vector<int64_t> in = {4, 8}, out = {4, 8};
  plan::ElementType inElement = plan::ElementType::F32, outElement = plan::ElementType::F32;
  uint32_t axis = 1;
};

/// A flatbuffer holding one program of `steps`; `program()` reads it.
class ProgramBuffer {
public:
  explicit ProgramBuffer(const std::vector<StepSpec> &steps) {
    std::vector<fb::Offset<plan::Step>> offsets;
    for (size_t i = 0; i < steps.size(); ++i) {
      const StepSpec &s = steps[i];
      const plan::Slice slice(1, 0, 4096);
      std::vector<fb::Offset<plan::TensorRef>> in = {
          plan::CreateTensorRefDirect(b_, "in", s.inElement, &s.in, &slice)};
      std::vector<fb::Offset<plan::TensorRef>> out = {
          plan::CreateTensorRefDirect(b_, "out", s.outElement, &s.out, &slice)};
      const bool collective = s.op == "all_reduce" || s.op == "all_gather";
      const std::string name = "step" + std::to_string(i);
      offsets.push_back(plan::CreateStepDirect(
          b_, s.op.c_str(), name.c_str(), &in, &out, nullptr, nullptr, nullptr, nullptr, nullptr,
          collective
              ? plan::CreateCollective(b_,
                                       s.op == "all_reduce" ? plan::CollectiveKind::AllReduce
                                                            : plan::CollectiveKind::AllGather,
                                       s.axis, 2)
              : 0));
    }
    b_.Finish(plan::CreateProgramDirect(b_, "decode_b1_r1", plan::ProgramKind::Decode, 1, 1, false,
                                        nullptr, &offsets));
  }
  const plan::Program &program() const {
    return *fb::GetRoot<plan::Program>(b_.GetBufferPointer());
  }
  const plan::Step &step(uint32_t i) const { return *program().steps()->Get(i); }

private:
  fb::FlatBufferBuilder b_;
};

const std::string kLinear = "linear", kReduce = "all_reduce", kGather = "all_gather";

TEST(Collectives, ShapesAreReadFromTheOperand) {
  ProgramBuffer p({{.op = kReduce, .in = {4, 2, 8}, .out = {4, 2, 8}},
                   {.op = kGather,
                    .in = {3, 512},
                    .out = {3, 1024},
                    .inElement = plan::ElementType::BF16,
                    .outElement = plan::ElementType::BF16,
                    .axis = 1},
                   {.op = kGather, .in = {3, 5}, .out = {6, 5}, .axis = 0}});
  Expected<CollectiveShape> reduce = collectiveShape(p.step(0), 2);
  ASSERT_TRUE(reduce.ok()) << reduce.status().toString();
  EXPECT_EQ(reduce->kind, plan::CollectiveKind::AllReduce);
  EXPECT_EQ(reduce->rows, 4);
  EXPECT_EQ(reduce->width, 16); // the dimensions after the first, flattened
  EXPECT_EQ(reduce->element, plan::ElementType::F32);

  Expected<CollectiveShape> columns = collectiveShape(p.step(1), 2);
  ASSERT_TRUE(columns.ok()) << columns.status().toString();
  EXPECT_EQ(columns->kind, plan::CollectiveKind::AllGather);
  EXPECT_EQ(columns->rows, 3);
  EXPECT_EQ(columns->width, 512);
  EXPECT_EQ(columns->axis, 1);
  EXPECT_EQ(columns->element, plan::ElementType::BF16);

  Expected<CollectiveShape> rows = collectiveShape(p.step(2), 2);
  ASSERT_TRUE(rows.ok()) << rows.status().toString();
  EXPECT_EQ(rows->axis, 0);
}

TEST(Collectives, InconsistentStepsAreRefusedByName) {
  ProgramBuffer p({{.op = kReduce, .in = {4, 8}, .out = {4, 16}},
                   {.op = kReduce, .outElement = plan::ElementType::BF16},
                   {.op = kGather, .in = {4, 8}, .out = {4, 24}, .axis = 1},
                   {.op = kGather, .in = {4, 8}, .out = {2, 32}, .axis = 1},
                   {.op = kGather, .in = {4, 8}, .out = {4, 16}, .axis = 2},
                   {.op = kLinear}});
  const std::vector<std::string> expected = {
      "AllReduce of [4, 8] into [4, 16]",
      "AllReduce from F32 to BF16",
      "AllGather of [4, 8] along axis 1 over 2 ranks into [4, 24]",
      "AllGather of [4, 8] along axis 1 over 2 ranks into [2, 32]",
      "AllGather along axis 2",
      "step step5 (linear) is not a collective",
  };
  for (uint32_t i = 0; i < expected.size(); ++i) {
    Expected<CollectiveShape> shape = collectiveShape(p.step(i), 2);
    ASSERT_FALSE(shape.ok()) << "step " << i;
    EXPECT_EQ(shape.status().code(), StatusCode::InvalidArgument);
    EXPECT_NE(shape.status().message().find(expected[i]), std::string::npos)
        << shape.status().message();
  }
}

} // namespace
} // namespace glm::runtime
