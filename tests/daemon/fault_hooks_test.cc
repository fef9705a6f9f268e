#include "daemon/fault_hooks.h"

#include <gtest/gtest.h>

namespace kvfs::daemon {
namespace {

TEST(FaultRules, ParsesEachRule) {
  auto rules = ParseFaultRules("read:20971520:4096/write:0x2000:1048576:1/flush:0:0", 2);
  ASSERT_TRUE(rules.ok()) << rules.status().ToString();
  ASSERT_EQ(rules->size(), 3u);
  EXPECT_EQ((*rules)[0].op, device::IoOp::kRead);
  EXPECT_EQ((*rules)[0].byte_off, 20971520u);
  EXPECT_EQ((*rules)[0].device, 0u);
  EXPECT_EQ((*rules)[1].op, device::IoOp::kWrite);
  EXPECT_EQ((*rules)[1].byte_off, 0x2000u);
  EXPECT_EQ((*rules)[1].device, 1u);
  EXPECT_EQ((*rules)[2].op, device::IoOp::kFlush);
}

TEST(FaultRules, RefusesBadRulesNamingThem) {
  for (const char* spec : {"trim:0:1", "read:0", "read:x:1", "read:0:0", "read:0:1:2",
                           "read:-1:1", "read:0:1/write"}) {
    auto rules = ParseFaultRules(spec, 2);
    ASSERT_FALSE(rules.ok()) << spec;
    EXPECT_EQ(rules.status().code(), EINVAL);
    EXPECT_EQ(rules.status().context().rfind("fault_eio: rule '", 0), 0u)
        << rules.status().context();
  }
}

TEST(FaultHooks, InstallsOnlyWhatIsAsked) {
  auto none = FaultHooks::Create(FaultOptions{}, 1);
  ASSERT_TRUE(none.ok());
  volume::VolumeOptions v;
  (*none)->Install(v);
  EXPECT_FALSE(v.wrap_io);
  EXPECT_TRUE(v.shapes.empty());

  FaultOptions f;
  f.eio = "read:0:4096";
  f.shape = "80:2000/800:200:1";
  auto some = FaultHooks::Create(f, 2);
  ASSERT_TRUE(some.ok()) << some.status().ToString();
  (*some)->Install(v);
  EXPECT_TRUE(v.wrap_io);
  ASSERT_EQ(v.shapes.size(), 2u);
  EXPECT_EQ(v.shapes[1].latency_ns, 800'000u);

  f.shape = "80:2000:5";
  EXPECT_EQ(FaultHooks::Create(f, 2).status().code(), EINVAL);
}

}  // namespace
}  // namespace kvfs::daemon
