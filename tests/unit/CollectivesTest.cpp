// Reading collective steps (runtime/plan/Collectives.h): how programs split at them into the runs
// the CUDA engine captures as one graph each, and what each collective moves.
#include "runtime/plan/Collectives.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace glm::runtime {
namespace {

namespace fb = flatbuffers;

/// A step of `op` from a tensor of `in` shape to one of `out` shape; `axis` < 0 leaves the axis
/// attribute out.
struct StepSpec {
  plan::OpKind op = plan::OpKind::Linear;
  std::vector<int64_t> in = {4, 8}, out = {4, 8};
  plan::ElementType inElement = plan::ElementType::F32, outElement = plan::ElementType::F32;
  int64_t axis = -1;
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
      std::vector<fb::Offset<plan::Attribute>> attributes;
      if (s.axis >= 0) {
        attributes.push_back(plan::CreateAttributeDirect(b_, "axis", s.axis));
      }
      const bool collective = s.op == plan::OpKind::AllReduce || s.op == plan::OpKind::AllGather;
      const std::string name = "step" + std::to_string(i);
      offsets.push_back(plan::CreateStepDirect(
          b_, s.op, name.c_str(), &in, &out, nullptr, nullptr, &attributes, nullptr,
          collective ? plan::CreateCollective(b_,
                                              s.op == plan::OpKind::AllReduce
                                                  ? plan::CollectiveKind::AllReduce
                                                  : plan::CollectiveKind::AllGather,
                                              0, 2)
                     : 0));
    }
    b_.Finish(plan::CreateProgramDirect(b_, "decode_b1_r1", plan::ProgramKind::Decode, 1, 1,
                                        nullptr, &offsets));
  }
  const plan::Program &program() const {
    return *fb::GetRoot<plan::Program>(b_.GetBufferPointer());
  }
  const plan::Step &step(uint32_t i) const { return *program().steps()->Get(i); }

private:
  fb::FlatBufferBuilder b_;
};

constexpr plan::OpKind kLinear = plan::OpKind::Linear, kReduce = plan::OpKind::AllReduce,
                       kGather = plan::OpKind::AllGather;

std::vector<StepSpec> ops(std::initializer_list<plan::OpKind> kinds) {
  std::vector<StepSpec> steps;
  for (plan::OpKind k : kinds) {
    steps.push_back({.op = k});
  }
  return steps;
}

TEST(Collectives, AProgramWithoutCollectivesIsOneRun) {
  ProgramBuffer p(ops({kLinear, kLinear, kLinear}));
  EXPECT_EQ(splitAtCollectives(p.program()), (std::vector<StepRun>{{0, 3, -1}}));
  ProgramBuffer empty({});
  EXPECT_EQ(splitAtCollectives(empty.program()), (std::vector<StepRun>{{0, 0, -1}}));
}

TEST(Collectives, EachCollectiveEndsARun) {
  ProgramBuffer p(ops({kLinear, kLinear, kReduce, kLinear, kGather, kLinear}));
  EXPECT_EQ(splitAtCollectives(p.program()),
            (std::vector<StepRun>{{0, 2, 2}, {3, 1, 4}, {5, 1, -1}}));
}

TEST(Collectives, CollectivesAtTheEdgesLeaveEmptyRunsBeforeThemAndNoneAfter) {
  ProgramBuffer p(ops({kReduce, kReduce, kLinear, kGather}));
  EXPECT_EQ(splitAtCollectives(p.program()),
            (std::vector<StepRun>{{0, 0, 0}, {1, 0, 1}, {2, 1, 3}}));
}

TEST(Collectives, ShapesAreReadFromTheOperand) {
  ProgramBuffer p({{.op = kReduce, .in = {4, 2, 8}, .out = {4, 2, 8}},
                   {.op = kGather,
                    .in = {3, 512},
                    .out = {3, 1024},
                    .inElement = plan::ElementType::BF16,
                    .outElement = plan::ElementType::BF16,
                    .axis = 1},
                   {.op = kGather, .in = {3, 5}, .out = {6, 5}, .axis = 0},
                   {.op = kGather, .in = {1, 5}, .out = {1, 10}}});
  Expected<CollectiveShape> reduce = collectiveShape(p.step(0), 2);
  ASSERT_TRUE(reduce.ok()) << reduce.status().toString();
  EXPECT_EQ(reduce->op, kReduce);
  EXPECT_EQ(reduce->rows, 4);
  EXPECT_EQ(reduce->width, 16); // the dimensions after the first, flattened
  EXPECT_EQ(reduce->element, plan::ElementType::F32);

  Expected<CollectiveShape> columns = collectiveShape(p.step(1), 2);
  ASSERT_TRUE(columns.ok()) << columns.status().toString();
  EXPECT_EQ(columns->op, kGather);
  EXPECT_EQ(columns->rows, 3);
  EXPECT_EQ(columns->width, 512);
  EXPECT_EQ(columns->axis, 1);
  EXPECT_EQ(columns->element, plan::ElementType::BF16);

  Expected<CollectiveShape> rows = collectiveShape(p.step(2), 2);
  ASSERT_TRUE(rows.ok()) << rows.status().toString();
  EXPECT_EQ(rows->axis, 0);

  // Without the attribute, a gather concatenates columns (as the CPU backend always read it).
  Expected<CollectiveShape> unsaid = collectiveShape(p.step(3), 2);
  ASSERT_TRUE(unsaid.ok()) << unsaid.status().toString();
  EXPECT_EQ(unsaid->axis, 1);
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
      "a collective step of op Linear",
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
