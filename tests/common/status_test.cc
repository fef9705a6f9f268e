#include "common/status.h"

#include <gtest/gtest.h>

#include "common/uuid.h"

namespace kvfs {
namespace {

Result<int> Half(int v) {
  if (v % 2) return Status::Error(EINVAL, "odd");
  return v / 2;
}

Status UseHalf(int v, int* out) {
  KVFS_ASSIGN_OR_RETURN(*out, Half(v));
  return Status::OK();
}

TEST(Status, KeepsErrnoAndContext) {
  Status st = Status::Error(ENOSPC, "device /dev/x").Annotate("write");
  EXPECT_FALSE(st.ok());
  EXPECT_EQ(st.code(), ENOSPC);
  EXPECT_EQ(st.context(), "write: device /dev/x");
  EXPECT_NE(st.ToString().find("No space left"), std::string::npos);
  EXPECT_TRUE(Status::OK().ok());
}

TEST(Result, ValueOrStatusPropagates) {
  int out = 0;
  EXPECT_TRUE(UseHalf(8, &out).ok());
  EXPECT_EQ(out, 4);
  Status st = UseHalf(3, &out);
  EXPECT_EQ(st.code(), EINVAL);
}

TEST(Result, OkStatusIsNotAValue) {
  Result<int> r{Status::OK()};
  EXPECT_FALSE(r.ok());
}

TEST(Uuid, RoundTripsThroughText) {
  Uuid a = Uuid::Random();
  Uuid b = Uuid::Random();
  EXPECT_NE(a, b);
  EXPECT_FALSE(a.IsNil());
  auto parsed = Uuid::Parse(a.ToString());
  ASSERT_TRUE(parsed.ok());
  EXPECT_EQ(*parsed, a);
  EXPECT_FALSE(Uuid::Parse("not-a-uuid").ok());
}

}  // namespace
}  // namespace kvfs
