#include "common/crc32c.h"

#include <isa-l/crc.h>

#include <climits>

namespace kvfs {

uint32_t Crc32cExtend(uint32_t crc, const void* data, size_t len) {
  // ISA-L neither pre- nor post-inverts; the standard crc32c does both.
  uint32_t c = ~crc;
  auto* p = static_cast<unsigned char*>(const_cast<void*>(data));
  while (len > 0) {
    // crc32_iscsi takes an int length.
    int n = len > (size_t{1} << 30) ? (1 << 30) : static_cast<int>(len);
    c = crc32_iscsi(p, n, c);
    p += n;
    len -= static_cast<size_t>(n);
  }
  return ~c;
}

}  // namespace kvfs
