#include "fsck/report.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "fsck/progress.h"

namespace kvfs::fsck {
namespace {

Finding Make(FindingKind k, bool fixable, bool repaired, Severity s = Severity::kError) {
  Finding f;
  f.kind = k;
  f.ino = 12;
  f.path = "/a/b";
  f.problem = "something is wrong";
  if (fixable) f.fix = "fix it";
  f.repaired = repaired;
  f.severity = s;
  return f;
}

TEST(ReportTest, ExitCodeFollowsFsck8) {
  Report r;
  EXPECT_EQ(r.ExitCode(), 0);
  r.findings.push_back(Make(FindingKind::kOrphan, true, false, Severity::kInfo));
  EXPECT_EQ(r.ExitCode(), 0);  // info does not count
  r.findings.push_back(Make(FindingKind::kNlink, true, true));
  EXPECT_EQ(r.ExitCode(), 1);
  r.findings.push_back(Make(FindingKind::kSuperblock, false, false));
  EXPECT_EQ(r.ExitCode(), 1 | 4);
  r.error = Status::Error(EIO, "disk");
  EXPECT_EQ(r.ExitCode(), 1 | 4 | 8);
}

TEST(ReportTest, FindingIsOneLineNamingPathAndInode) {
  EXPECT_EQ(Make(FindingKind::kDanglingEntry, true, false).ToLine(),
            "dangling_entry /a/b (inode 12): something is wrong (-y: fix it)");
  EXPECT_EQ(Make(FindingKind::kDanglingEntry, true, true).ToLine(),
            "dangling_entry /a/b (inode 12): something is wrong (repaired: fix it)");
  EXPECT_EQ(Make(FindingKind::kSuperblock, false, false).ToLine(),
            "superblock /a/b (inode 12): something is wrong (cannot be repaired)");
  Finding f = Make(FindingKind::kNlink, true, false);
  f.path = "<unlinked inode 12>";
  EXPECT_EQ(f.ToLine(), "nlink <unlinked inode 12>: something is wrong (-y: fix it)");
  f.problem = "two\nlines";
  EXPECT_EQ(f.ToLine().find('\n'), std::string::npos);
}

TEST(ReportTest, JsonCarriesEveryFindingAndSurvivesNonUtf8Names) {
  Report r;
  r.findings.push_back(Make(FindingKind::kBadChecksum, true, false));
  r.findings.back().path = std::string("/bad\xff\xfe", 6);
  auto j = nlohmann::json::parse(r.ToJson());
  EXPECT_EQ(j["exit_code"], 4);
  ASSERT_EQ(j["findings"].size(), 1u);
  EXPECT_EQ(j["findings"][0]["kind"], "bad_checksum");
  EXPECT_EQ(j["findings"][0]["ino"], 12);
  EXPECT_EQ(j["findings"][0]["severity"], "error");
  EXPECT_TRUE(j["error"].is_null());
}

TEST(ProgressTest, LineShowsPercentRateAndEta) {
  const std::string s =
      ProgressMeter::Format("verifying data", 1ull << 30, 4ull << 30, true, 2.0);
  EXPECT_NE(s.find("25.0%"), std::string::npos) << s;
  EXPECT_NE(s.find("537 MB/s"), std::string::npos) << s;
  EXPECT_NE(s.find("ETA 0:00:06"), std::string::npos) << s;
  const std::string rec = ProgressMeter::Format("inodes", 50000, 0, false, 0.5);
  EXPECT_NE(rec.find("100k/s"), std::string::npos) << rec;
  EXPECT_EQ(rec.find('%'), std::string::npos) << rec;  // total unknown
}

}  // namespace
}  // namespace kvfs::fsck
