#include "common/crc32c.h"

#include <gtest/gtest.h>

#include <string>

namespace kvfs {
namespace {

TEST(Crc32c, MatchesStandardCheckValue) {
  EXPECT_EQ(Crc32c("123456789", 9), 0xE3069283u);
  EXPECT_EQ(Crc32c("", 0), 0u);
}

TEST(Crc32c, ExtendEqualsWhole) {
  std::string s(100000, 'x');
  for (size_t i = 0; i < s.size(); ++i) s[i] = static_cast<char>(i * 7 + 3);
  uint32_t whole = Crc32c(s.data(), s.size());
  uint32_t part = Crc32cExtend(Crc32c(s.data(), 12345), s.data() + 12345, s.size() - 12345);
  EXPECT_EQ(whole, part);
}

}  // namespace
}  // namespace kvfs
