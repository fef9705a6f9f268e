// The built fsck.kvfs binary (path in FSCK_KVFS_BIN, set by meson): exit
// codes, one line per finding, --json, refusal on a mounted volume, and no
// progress output when stderr is not a TTY.
#include <sys/wait.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "fsck/fsck_fixture.h"

namespace kvfs::fsck {
namespace {

struct CliResult {
  int exit = -1;
  std::string out;
  std::string err;
};

std::string Slurp(const std::string& path) {
  std::ifstream f(path);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

class FsckCliTest : public FsckTest {
 protected:
  CliResult Cli(const std::string& args) {
    const char* bin = std::getenv("FSCK_KVFS_BIN");
    if (bin == nullptr) {
      ADD_FAILURE() << "FSCK_KVFS_BIN is not set (run through meson test)";
      return {};
    }
    const std::string out = dir_.Join("out"), err = dir_.Join("err");
    const std::string cmd =
        std::string(bin) + " " + args + " >" + out + " 2>" + err + " </dev/null";
    const int st = std::system(cmd.c_str());
    CliResult r;
    r.exit = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    r.out = Slurp(out);
    r.err = Slurp(err);
    return r;
  }
};

TEST_F(FsckCliTest, UsageErrorsExit16) {
  EXPECT_EQ(Cli("").exit, kExitUsage);
  EXPECT_EQ(Cli("-n -y " + img_).exit, kExitUsage);
  EXPECT_EQ(Cli("--no-such-option " + img_).exit, kExitUsage);
  CliResult help = Cli("--help");
  EXPECT_EQ(help.exit, 0);
  EXPECT_NE(help.out.find("--verify-data"), std::string::npos) << help.out;
}

TEST_F(FsckCliTest, CleanVolumeExits0WithoutProgressNoiseOffATerminal) {
  Populate();
  CliResult r = Cli("-n --verify-data " + img_);
  EXPECT_EQ(r.exit, kExitClean) << r.out << r.err;
  EXPECT_EQ(r.err, "");  // stderr is a file: no progress lines
  EXPECT_NE(r.out.find("0 error(s)"), std::string::npos) << r.out;
}

TEST_F(FsckCliTest, FindingsExit4ThenRepairExits1ThenClean) {
  Populate();
  {
    auto idx = OpenIndex();
    auto b = idx->NewBatch();
    b.DeleteInode(k2_);
    ASSERT_TRUE(idx->Commit(b, true).ok());
  }
  CliResult n = Cli(img_);  // neither -n nor -y: check only
  EXPECT_EQ(n.exit, kExitUncorrected) << n.out << n.err;
  EXPECT_NE(n.out.find("dangling_entry /a/k2: names inode " + std::to_string(k2_)),
            std::string::npos)
      << n.out;
  EXPECT_NE(n.out.find("run with -y to repair"), std::string::npos) << n.out;

  CliResult j = Cli("-n --json " + img_);
  EXPECT_EQ(j.exit, kExitUncorrected);
  auto doc = nlohmann::json::parse(j.out, nullptr, false);
  ASSERT_FALSE(doc.is_discarded()) << j.out;
  EXPECT_EQ(doc["exit_code"], kExitUncorrected);
  ASSERT_EQ(doc["findings"].size(), 1u) << j.out;
  EXPECT_EQ(doc["findings"][0]["kind"], "dangling_entry");
  EXPECT_EQ(doc["findings"][0]["path"], "/a/k2");
  EXPECT_EQ(doc["findings"][0]["repaired"], false);

  CliResult y = Cli("-y --json " + img_);
  EXPECT_EQ(y.exit, kExitCorrected) << y.out << y.err;
  auto ydoc = nlohmann::json::parse(y.out, nullptr, false);
  ASSERT_FALSE(ydoc.is_discarded()) << y.out;
  EXPECT_EQ(ydoc["findings"][0]["repaired"], true);

  EXPECT_EQ(Cli("-n " + img_).exit, kExitClean);
}

TEST_F(FsckCliTest, MountedVolumeIsRefusedForRepairAndCheckedWithN) {
  Populate();
  Mount();  // holds the devices' exclusive lock and the index, like the daemon
  CliResult y = Cli("-y " + img_);
  EXPECT_EQ(y.exit, kExitOperational) << y.out << y.err;
  EXPECT_NE(y.err.find("in use"), std::string::npos) << y.err;
  EXPECT_NE(y.err.find("-n"), std::string::npos) << y.err;
  CliResult n = Cli("-n " + img_);
  EXPECT_EQ(n.exit, kExitClean) << n.out << n.err;
  EXPECT_NE(n.out.find("mounted"), std::string::npos) << n.out;
  Unmount();
}

TEST_F(FsckCliTest, MissingDeviceExits8) {
  CliResult r = Cli(dir_.Join("nope.img"));
  EXPECT_EQ(r.exit, kExitOperational);
  EXPECT_NE(r.err.find("nope.img"), std::string::npos) << r.err;
}

TEST_F(FsckCliTest, DamagedSuperblockExits4WithAClearMessage) {
  FlipByte(64);
  CliResult r = Cli("-n " + img_);
  EXPECT_EQ(r.exit, kExitUncorrected);
  EXPECT_NE(r.out.find("superblock " + img_ + ": damaged superblock"), std::string::npos)
      << r.out;
}

}  // namespace
}  // namespace kvfs::fsck
