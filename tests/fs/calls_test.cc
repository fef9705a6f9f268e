// fs/calls.h: one row per call, named once; a metric's answer only where
// there is a metric. (Where each request runs: tests/fuse/opcodes_test.cc.)
#include "fs/calls.h"

#include <gtest/gtest.h>

#include <set>
#include <string_view>

namespace kvfs::fs {
namespace {

TEST(CallsTest, EveryCallHasOneNamedRow) {
  std::set<std::string_view> names;
  for (size_t i = 0; i < static_cast<size_t>(Call::kCount); ++i) {
    const CallRules& r = RulesOf(static_cast<Call>(i));
    EXPECT_EQ(static_cast<size_t>(r.call), i);
    EXPECT_FALSE(r.name.empty()) << "call " << i;
    EXPECT_TRUE(names.insert(r.name).second) << r.name << " named twice";
    if (!r.metric) {
      EXPECT_EQ(r.answer, 0) << r.name << ": an answer with no metric";
    }
  }
}

TEST(CallsTest, OpenChangesOnlyWhenItMayWriteOrTruncates) {
  EXPECT_FALSE(OpenChanges(O_RDONLY));
  EXPECT_TRUE(OpenChanges(O_RDONLY | O_TRUNC));
  EXPECT_TRUE(OpenChanges(O_WRONLY));
  EXPECT_TRUE(OpenChanges(O_RDWR));
}

}  // namespace
}  // namespace kvfs::fs
