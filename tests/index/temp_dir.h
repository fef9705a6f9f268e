// A scratch directory under /var/tmp for one test, removed with everything
// in it when the test ends.
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <string>

namespace kvfs::index::testing {

class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/var/tmp/kvfs-test-XXXXXX";
    char* p = mkdtemp(tmpl);
    EXPECT_NE(p, nullptr) << "mkdtemp failed";
    if (p != nullptr) path_ = p;
  }
  ~TempDir() {
    std::error_code ec;
    if (!path_.empty()) std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const { return path_; }
  // A path inside the directory (not created).
  std::string sub(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

}  // namespace kvfs::index::testing
