// Tests of Status, Expected and the error-propagation macros.
#include "base/Status.h"

#include <gtest/gtest.h>

#include <memory>

namespace glm {
namespace {

Expected<int> half(int x) {
  if (x % 2 != 0) {
    return invalidArgument("odd value ", x);
  }
  return x / 2;
}

Expected<int> quarter(int x) {
  GLM_ASSIGN_OR_RETURN(int h, half(x));
  GLM_ASSIGN_OR_RETURN(int q, half(h));
  return q;
}

Status checkPositive(int x) {
  if (x <= 0) {
    return invalidArgument("not positive: ", x);
  }
  return Status::success();
}

Status checkBoth(int a, int b) {
  GLM_RETURN_IF_ERROR(checkPositive(a));
  GLM_RETURN_IF_ERROR(checkPositive(b));
  return Status::success();
}

TEST(Status, DefaultIsOk) {
  Status s;
  EXPECT_TRUE(s.ok());
  EXPECT_EQ(s.toString(), "ok");
}

TEST(Status, CarriesCodeMessageAndContext) {
  Status s = formatError("bad header");
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::FormatError);
  EXPECT_EQ(s.withContext("x.safetensors").message(), "x.safetensors: bad header");
  EXPECT_EQ(s.toString(), "format error: bad header");
  EXPECT_TRUE(Status::success().withContext("ignored").ok());
}

TEST(Expected, ValueAndErrorPropagate) {
  EXPECT_EQ(*quarter(12), 3);
  Expected<int> e = quarter(6);
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.status().message(), "odd value 3");
  EXPECT_EQ(e.status().code(), StatusCode::InvalidArgument);
}

TEST(Expected, HoldsMoveOnlyValues) {
  Expected<std::unique_ptr<int>> e = std::make_unique<int>(7);
  ASSERT_TRUE(e.ok());
  std::unique_ptr<int> p = std::move(e).value();
  EXPECT_EQ(*p, 7);
}

TEST(Status, ReturnIfErrorStopsAtTheFirstFailure) {
  EXPECT_TRUE(checkBoth(1, 2).ok());
  EXPECT_EQ(checkBoth(-1, -2).message(), "not positive: -1");
  EXPECT_EQ(checkBoth(1, -2).message(), "not positive: -2");
}

} // namespace
} // namespace glm
