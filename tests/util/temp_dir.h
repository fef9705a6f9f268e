// TempDir: a fresh directory under /var/tmp (a real disk, so O_DIRECT works;
// /tmp may be tmpfs), removed with its contents on destruction.
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <string>

namespace kvfs::testing {

class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/var/tmp/kvfs-test-XXXXXX";
    char* p = mkdtemp(tmpl);
    if (p == nullptr) ADD_FAILURE() << "mkdtemp: " << std::strerror(errno);
    path_ = p ? p : "";
  }
  ~TempDir() {
    std::error_code ec;
    if (!path_.empty()) std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const { return path_; }
  // A path inside the directory (not created).
  std::string Join(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

}  // namespace kvfs::testing
