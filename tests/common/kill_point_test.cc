// Kill points (common/kill_point.h): a point reached with odds 1 in 1 kills
// the process with SIGKILL and names itself on standard error; points the
// prefixes leave out, and a disabled table, do nothing.
#include "common/kill_point.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <cstdio>

namespace kvfs {
namespace {

#ifdef NDEBUG
#define SKIP_IN_RELEASE() GTEST_SKIP() << "kill points are compiled out (NDEBUG)"
#else
#define SKIP_IN_RELEASE() (void)0
#endif

TEST(KillPointDeathTest, APointWithOddsOneKillsTheProcessAndNamesItself) {
  SKIP_IN_RELEASE();
  EXPECT_EXIT(
      {
        KillPoints::Set(1);
        KVFS_KILL_POINT("Test::Here");
        _exit(0);
      },
      ::testing::KilledBySignal(SIGKILL), "kvfs: kill point Test::Here: SIGKILL");
}

TEST(KillPointDeathTest, OnlyPointsNamedByThePrefixesKill) {
  SKIP_IN_RELEASE();
  EXPECT_EXIT(
      {
        KillPoints::Set(1, "Other::,Test::There");
        KVFS_KILL_POINT("Test::Here");
        _exit(3);
      },
      ::testing::ExitedWithCode(3), "");
  EXPECT_EXIT(
      {
        KillPoints::Set(1, "Other::,Test::There");
        KVFS_KILL_POINT("Test::There:Late");
        _exit(3);
      },
      ::testing::KilledBySignal(SIGKILL), "kill point Test::There:Late");
}

TEST(KillPointDeathTest, TheFirstSkippedReachesNeverKill) {
  SKIP_IN_RELEASE();
  EXPECT_EXIT(
      {
        KillPoints::Set(1, "Test::", 3);
        for (int i = 0; i < 3; ++i) KVFS_KILL_POINT("Test::Here");
        KVFS_KILL_POINT("Other::Here");  // not named: not counted
        fprintf(stderr, "survived three\n");
        KVFS_KILL_POINT("Test::Here");
        _exit(0);
      },
      ::testing::KilledBySignal(SIGKILL), "survived three\nkvfs: kill point Test::Here");
}

TEST(KillPointTest, DisabledPointsDoNothing) {
  KillPoints::Set(0);
  EXPECT_FALSE(KillPoints::Enabled());
  for (int i = 0; i < 1000; ++i) KVFS_KILL_POINT("Test::Here");
}

}  // namespace
}  // namespace kvfs
