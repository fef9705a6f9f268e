#include "common/status.h"

#include <cstring>

namespace kvfs {

std::string Status::ToString() const {
  if (ok()) return "OK";
  std::string s = context_;
  if (!s.empty()) s += ": ";
  s += std::strerror(code_);
  return s;
}

Status Status::Annotate(std::string_view prefix) const {
  if (ok()) return *this;
  std::string c(prefix);
  if (!context_.empty()) {
    c += ": ";
    c += context_;
  }
  return Status(code_, std::move(c));
}

}  // namespace kvfs
