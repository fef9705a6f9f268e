// The errno table of fs/path.h, row by row.
#include "fs/path.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "fs/countdown.h"

namespace kvfs::fs {
namespace {

int Split(std::string_view path, std::vector<std::string_view>* parts = nullptr) {
  std::vector<std::string_view> own;
  return SplitPath(path, parts ? parts : &own).code();
}

TEST(PathTest, SplitPathFollowsTheTable) {
  std::vector<std::string_view> parts;
  EXPECT_EQ(Split("a/b/c", &parts), 0);
  EXPECT_EQ(parts, (std::vector<std::string_view>{"a", "b", "c"}));
  EXPECT_EQ(Split(""), EINVAL);
  EXPECT_EQ(Split("/a"), EXDEV);
  EXPECT_EQ(Split("a//b"), EINVAL);
  EXPECT_EQ(Split("a/"), EINVAL);
  EXPECT_EQ(Split("."), EINVAL);
  EXPECT_EQ(Split("a/./b"), EINVAL);
  EXPECT_EQ(Split(".."), EXDEV);
  EXPECT_EQ(Split("a/../b"), EXDEV);
  EXPECT_EQ(Split(std::string_view("a\0b", 3)), EINVAL);
  EXPECT_EQ(Split(std::string(256, 'x')), ENAMETOOLONG);
  EXPECT_EQ(Split(std::string(255, 'x')), 0);
  std::string long_path;
  while (long_path.size() <= kMaxPathLen) long_path += "abcdefg/";
  long_path += "z";
  EXPECT_EQ(Split(long_path), ENAMETOOLONG);
}

TEST(PathTest, TheFirstBadComponentDecides) {
  EXPECT_EQ(Split("../" + std::string(300, 'x')), EXDEV);
  EXPECT_EQ(Split(std::string(300, 'x') + "/.."), ENAMETOOLONG);
  EXPECT_EQ(Split("a//../b"), EINVAL);
}

TEST(PathTest, CheckNameFollowsTheTable) {
  EXPECT_TRUE(CheckName("a").ok());
  EXPECT_TRUE(CheckName(".").ok()) << "each call answers '.' itself";
  EXPECT_EQ(CheckName("").code(), EINVAL);
  EXPECT_EQ(CheckName("a/b").code(), EINVAL);
  EXPECT_EQ(CheckName("/a").code(), EINVAL);
  EXPECT_EQ(CheckName(std::string_view("a\0", 2)).code(), EINVAL);
  EXPECT_EQ(CheckName(std::string(256, 'n')).code(), ENAMETOOLONG);
}

TEST(CountdownTest, TheLastPartFinishesWithTheFirstError) {
  Countdown c(3);
  EXPECT_FALSE(c.Finish(Status::OK()));
  EXPECT_FALSE(c.Finish(Status::Error(EIO, "first")));
  EXPECT_TRUE(c.Finish(Status::Error(ENOSPC, "second")));
  EXPECT_EQ(c.first().code(), EIO);
}

}  // namespace
}  // namespace kvfs::fs
