#include "daemon/daemon_log.h"

#include <gtest/gtest.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

namespace kvfs::daemon {
namespace {

TEST(DaemonLog, DestinationsAreSyslogStderrOrAnAbsolutePath) {
  EXPECT_EQ(*CheckLogDestination("syslog"), "syslog");
  EXPECT_EQ(*CheckLogDestination("stderr"), "stderr");
  EXPECT_EQ(*CheckLogDestination("/var/log/kvfs.log"), "/var/log/kvfs.log");
  char cwd[4096];
  ASSERT_NE(getcwd(cwd, sizeof(cwd)), nullptr);
  EXPECT_EQ(*CheckLogDestination("a/../kvfs.log"), std::string(cwd) + "/kvfs.log");
  EXPECT_EQ(CheckLogDestination("").status().code(), EINVAL);
}

TEST(DaemonLog, AFileGetsEveryLineAtOnce) {
  char dir[] = "/tmp/daemon_log_test.XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const std::string path = std::string(dir) + "/kvfs.log";
  LogOptions o;
  o.destination = path;
  auto log = DaemonLog::Start(o);
  ASSERT_TRUE(log.ok()) << log.status().ToString();
  spdlog::info("an info line");
  spdlog::debug("a debug line");  // below the level
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_NE(text.str().find("an info line"), std::string::npos) << text.str();
  EXPECT_EQ(text.str().find("a debug line"), std::string::npos) << text.str();
  std::remove(path.c_str());
  rmdir(dir);
}

TEST(DaemonLog, AFileThatCannotBeWrittenFailsTheStart) {
  LogOptions o;
  o.destination = "/proc/no/such/dir/kvfs.log";
  auto log = DaemonLog::Start(o);
  ASSERT_FALSE(log.ok());
  EXPECT_NE(log.status().context().find("/proc/no/such/dir/kvfs.log"), std::string::npos);
}

}  // namespace
}  // namespace kvfs::daemon
