#include "common/uuid.h"

#include <sys/random.h>

#include <cstdio>

namespace kvfs {

Uuid Uuid::Random() {
  Uuid u;
  size_t got = 0;
  while (got < u.bytes.size()) {
    ssize_t n = getrandom(u.bytes.data() + got, u.bytes.size() - got, 0);
    if (n > 0) got += static_cast<size_t>(n);
  }
  u.bytes[6] = static_cast<uint8_t>((u.bytes[6] & 0x0f) | 0x40);
  u.bytes[8] = static_cast<uint8_t>((u.bytes[8] & 0x3f) | 0x80);
  return u;
}

Result<Uuid> Uuid::Parse(const std::string& text) {
  Uuid u;
  size_t i = 0;
  for (char c : text) {
    if (c == '-') continue;
    int v;
    if (c >= '0' && c <= '9') v = c - '0';
    else if (c >= 'a' && c <= 'f') v = c - 'a' + 10;
    else if (c >= 'A' && c <= 'F') v = c - 'A' + 10;
    else return Status::Error(EINVAL, "bad UUID '" + text + "'");
    if (i >= 32) return Status::Error(EINVAL, "bad UUID '" + text + "'");
    u.bytes[i / 2] = static_cast<uint8_t>(u.bytes[i / 2] | (i % 2 ? v : v << 4));
    ++i;
  }
  if (i != 32) return Status::Error(EINVAL, "bad UUID '" + text + "'");
  return u;
}

std::string Uuid::ToString() const {
  char buf[37];
  const uint8_t* b = bytes.data();
  std::snprintf(buf, sizeof(buf),
                "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0],
                b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13],
                b[14], b[15]);
  return buf;
}

bool Uuid::IsNil() const {
  for (uint8_t b : bytes)
    if (b) return false;
  return true;
}

}  // namespace kvfs
