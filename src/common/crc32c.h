// crc32c (Castagnoli) of a byte range, computed with ISA-L's crc32_iscsi
// (SSE4.2 / PCLMUL). Standard parameters: Crc32c("123456789") == 0xE3069283.
// Extend(Crc32c(a), b) == Crc32c(a + b), so large ranges may be done in pieces.
//
// Thread safety: pure functions.
#pragma once

#include <cstddef>
#include <cstdint>

namespace kvfs {

uint32_t Crc32cExtend(uint32_t crc, const void* data, size_t len);
inline uint32_t Crc32c(const void* data, size_t len) { return Crc32cExtend(0, data, len); }

}  // namespace kvfs
