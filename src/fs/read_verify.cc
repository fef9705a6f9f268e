#include "fs/read_verify.h"

#include <spdlog/spdlog.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <string>

#include "common/crc32c.h"

namespace kvfs::fs {

Status ReadVerifier::Check(uint64_t ino, const index::FileExtent& fe, const char* data) {
  const uint32_t actual = Crc32c(data, fe.ext.len);
  if (actual == fe.crc32c) return Status::OK();
  const std::string where = "inode " + std::to_string(ino) + ": extent at file offset " +
                            std::to_string(fe.file_off) + " (device " +
                            std::to_string(fe.ext.device) + ", byte " +
                            std::to_string(fe.ext.byte_off) + ", " + std::to_string(fe.ext.len) +
                            " bytes)";
  bool first;
  {
    std::lock_guard<std::mutex> l(mu_);
    first = logged_.insert(ino).second;
  }
  if (first) {
    char crcs[64];
    std::snprintf(crcs, sizeof crcs, "crc32c %08x, index says %08x", actual, fe.crc32c);
    spdlog::error("verify=on: {} fails its checksum ({}); reads of it get EIO (further "
                  "mismatches of this inode are not logged; fsck.kvfs --verify-data names the "
                  "file)",
                  where, crcs);
  }
  return Status::Error(EIO, where + " fails its crc32c (verify=on)");
}

void AddVerifiedChunkLoad(ReadVerifier& verifier, uint64_t ino, uint64_t chunk_start,
                          const std::vector<index::FileExtent>& extents,
                          std::shared_ptr<CachedChunk> entry, std::function<void()> done,
                          std::vector<device::IoRequest>* reqs) {
  struct Load {
    std::atomic<size_t> left{0};
    std::atomic<bool> ok{true};
    std::shared_ptr<CachedChunk> entry;
    std::function<void()> done;
  };
  auto load = std::make_shared<Load>();
  load->left = extents.size();
  load->entry = std::move(entry);
  load->done = std::move(done);
  for (const index::FileExtent& fe : extents) {
    char* buf = load->entry->data.get() + (fe.file_off - chunk_start);
    device::IoRequest r;
    r.op = device::IoOp::kRead;
    r.device = fe.ext.device;
    r.byte_off = fe.ext.byte_off;
    r.buf = buf;
    r.len = fe.ext.len;
    r.done = [&verifier, ino, fe, buf, load](Status st) {
      if (st.ok() && verifier.enabled()) st = verifier.Check(ino, fe, buf);
      if (!st.ok()) load->ok = false;
      if (load->left.fetch_sub(1) != 1) return;
      load->entry->Finish(load->ok.load());
      load->done();
    };
    reqs->push_back(std::move(r));
  }
}

}  // namespace kvfs::fs
