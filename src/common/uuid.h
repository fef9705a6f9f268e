// A 16-byte random identifier (RFC 4122 version 4) for volumes and indexes.
#pragma once

#include <array>
#include <cstdint>
#include <string>

#include "common/status.h"

namespace kvfs {

struct Uuid {
  std::array<uint8_t, 16> bytes{};

  // A fresh random UUID from getrandom(2).
  static Uuid Random();
  // Parses "xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx"; EINVAL otherwise.
  static Result<Uuid> Parse(const std::string& text);
  std::string ToString() const;
  bool IsNil() const;
  bool operator==(const Uuid&) const = default;
};

}  // namespace kvfs
