// The data read path shared by read(2) (Impl::Read) and the batch ioctl's
// READ (Impl::ReadFile): where each wanted byte comes from, and getting it
// there. Staged (not yet written) data is copied, holes are zeros, cached
// chunks are copied when they are (or as they become) ready, and the rest
// is read from the device: straight into the destination when it lands
// there aligned and whole, else through a bounce buffer.
#include <algorithm>
#include <cstdlib>
#include <cstring>

#include <unistd.h>

#include "common/format.h"
#include "fs/countdown.h"
#include "fs/file_memory.h"
#include "fs/file_system_impl.h"

namespace kvfs::fs {

// REQUIRES: off + len <= the file's size.
void FileSystem::Impl::PlanRead(const InodeRef& i, uint64_t off, uint64_t len, char* dst,
                                uint64_t room, ReadPlan* plan) {
  const uint64_t end = off + len;
  // The file's memory, once loaded, holds every byte (staged ones too
  // while opens are served from it: the kernel wrote them there).
  if (std::shared_ptr<FileMemory> m = HeldMemory(i);
      m && m->state() == FileMemory::State::kReady) {
    if (m == i->data.served()) {
      if (pread(m->fd(), dst, len, static_cast<off_t>(off)) == static_cast<ssize_t>(len)) return;
    } else if (end <= m->mapped()) {
      std::memcpy(dst, m->data() + off, len);
      ram_->memory()->MarkUsed(*m);
      return;
    }
  }
  // Bytes in memory here (staged, being written) and holes are done by
  // the file's data; each chunk's installed bytes come from the cache or
  // the device, as planned below.
  int verified_loads = 0;  // verify=on chunk loads started: device reads in flight
  Status st = i->data.PlanRead(off, len, dst, [&](uint64_t pos, uint64_t hi, uint64_t ci,
                                                  uint64_t seq,
                                                  const std::vector<index::FileExtent>& extents) {
    const uint64_t cstart = ci * kChunkBytes;
    std::shared_ptr<CachedChunk> cached = ram_->chunks().Get(i->token, ci, seq);
    if (cached && cached->state() == CachedChunk::State::kFailed) cached.reset();
    if (!cached && verifier_.enabled()) {
      // verify=on: load the whole chunk once, checked (fs/read_verify.h).
      cached = StartChunkLoad(i, ci, seq, extents, false);
      if (cached) {
        ++verified_loads;
        SharedPin pin = Share(table_.Pin(i));  // until the load completes
        AddVerifiedChunkLoad(verifier_, i->ino, cstart, extents, cached,
                             [this, pin] { FinishDeviceRead(std::move(*pin)); }, &plan->loads);
      }
    }
    if (cached) {
      // Served from RAM, now or when its load lands.
      const uint64_t avail_end = std::max(pos, std::min(hi, cstart + cached->capacity));
      if (avail_end > pos) plan->waits.push_back({cached, pos - cstart, pos - off, avail_end - pos});
      std::memset(dst + (avail_end - off), 0, hi - avail_end);  // past the cached bytes: a hole
      return;
    }
    // Only the gaps between extents are zeroed here: zeroing all of `dst`
    // first cost a pass over every byte read (36% of the daemon's CPU in a
    // batch READ).
    uint64_t zeroed_to = pos;  // bytes [pos, zeroed_to) are accounted for
    for (const index::FileExtent& fe : extents) {
      const uint64_t a = std::max(pos, fe.file_off);
      const uint64_t b = std::min(hi, fe.file_off + fe.ext.len);
      if (a >= b) continue;
      if (a > zeroed_to) std::memset(dst + (zeroed_to - off), 0, a - zeroed_to);
      zeroed_to = std::max(zeroed_to, b);
      ReadPlan::Piece p;
      p.device = fe.ext.device;
      const uint64_t rel = a - fe.file_off;
      p.out_off = a - off;
      p.len = b - a;
      if (verifier_.enabled()) {
        // Its crc32c covers the whole extent: read all of it.
        p.dev_off = fe.ext.byte_off;
        p.skip = rel;
        p.dev_len = fe.ext.len;
        p.verify = fe;
      } else {
        p.dev_off = fe.ext.byte_off + AlignDown(rel, kBlockSize);
        p.skip = rel - AlignDown(rel, kBlockSize);
        p.dev_len = AlignUp(p.skip + p.len, kBlockSize);
      }
      // Direct only if the device range lands in `dst` aligned and whole: a
      // file's last partial block needs room for 4 KiB.
      const bool aligned = p.skip == 0 && IsBlockAligned(dst + p.out_off);
      if (aligned && p.out_off + p.dev_len <= room) {
        p.direct = dst + p.out_off;
      } else if (aligned && !p.verify && p.len >= kBlockSize) {
        // The whole blocks in place, the partial last one bounced.
        ReadPlan::Piece tail = p;
        const uint64_t head = AlignDown(p.len, kBlockSize);
        p.dev_len = head;
        p.len = head;
        p.direct = dst + p.out_off;
        tail.dev_off += head;
        tail.dev_len -= head;
        tail.out_off += head;
        tail.len -= head;
        plan->pieces.push_back(p);
        p = tail;
      }
      plan->pieces.push_back(p);
    }
    if (hi > zeroed_to) std::memset(dst + (zeroed_to - off), 0, hi - zeroed_to);
  });
  // Each load started is a device read of the file in flight, ended by its
  // FinishDeviceRead (the caller submits plan->loads in any case).
  for (int k = 0; k < verified_loads; ++k) i->data.BeginRead();
  if (!st.ok()) {
    // Never hand out bytes that did not reach the device.
    plan->fail = st.Annotate("inode " + std::to_string(i->ino));
    return;
  }
  if (!plan->pieces.empty() || !plan->waits.empty()) {
    i->data.BeginRead();  // extents stay allocated until ExecuteRead is done
  }
}

void FileSystem::Impl::ExecuteRead(InodePin pin, ReadPlan plan, char* dst, CancelFlag cancel,
                                   std::function<void(Status)> done) {
  // Loads started are always submitted: readers may be waiting for them.
  if (!plan.loads.empty()) sched_->Submit(io::Lane::kRead, plan.loads);
  struct ReadState {
    InodePin pin;
    char* dst;
    std::vector<ReadPlan::Piece> pieces;
    std::vector<LargeBuffer> bounce;
    Countdown parts;
    std::atomic<uint64_t> zero_copy{0};
    std::function<void(Status)> done;
  };
  auto rs = std::make_shared<ReadState>();
  const uint64_t ino = pin->ino;
  rs->pin = std::move(pin);
  rs->dst = dst;
  rs->pieces = std::move(plan.pieces);
  rs->bounce.resize(rs->pieces.size());
  // No part of its own for the setup: the last completion is then a device
  // read's (engine thread) whenever there is one, never the caller's thread.
  rs->parts.Reset(rs->pieces.size() + plan.waits.size());
  rs->done = std::move(done);
  auto note = [rs](Status st) { rs->parts.Note(st); };
  auto finish_one = [this, rs] {
    if (!rs->parts.Finish(Status::OK())) return;
    FinishDeviceRead(std::move(rs->pin));
    Status fin = rs->parts.first();
    if (fin.ok()) metrics_.ZeroCopy(rs->zero_copy.load());
    rs->done(fin);
  };
  for (ReadPlan::Wait& w : plan.waits) {
    auto copy = [rs, w, note, finish_one](bool ok) {
      if (ok) {
        std::memcpy(rs->dst + w.out_off, w.chunk->data.get() + w.chunk_off, w.len);
      } else {
        note(Status::Error(EIO, "reading the data into the cache failed"));
      }
      finish_one();
    };
    WhenLoaded(w.chunk, std::move(copy));
  }
  std::vector<device::IoRequest> reqs;
  for (size_t k = 0; k < rs->pieces.size(); ++k) {
    ReadPlan::Piece& p = rs->pieces[k];
    char* target = p.direct;
    if (!target) {
      rs->bounce[k] = LargeBuffer::Allocate(p.dev_len);
      target = rs->bounce[k].get();
      if (!target) note(Status::Error(ENOMEM, "read bounce buffer"));
    }
    device::IoRequest r;
    r.op = device::IoOp::kRead;
    r.device = p.device;
    r.byte_off = p.dev_off;
    r.buf = target;
    r.len = target ? p.dev_len : 0;
    r.done = [this, rs, k, ino, note, finish_one](Status st) {
      const ReadPlan::Piece& piece = rs->pieces[k];
      const char* got = piece.direct ? piece.direct : rs->bounce[k].get();
      if (st.ok() && got && piece.verify) st = verifier_.Check(ino, *piece.verify, got);
      if (st.ok() && got) {
        if (piece.direct) {
          rs->zero_copy.fetch_add(piece.len, std::memory_order_relaxed);
        } else {
          std::memcpy(rs->dst + piece.out_off, got + piece.skip, piece.len);
        }
      }
      if (!st.ok()) note(st);
      rs->bounce[k] = LargeBuffer();
      finish_one();
    };
    reqs.push_back(std::move(r));
  }
  if (!reqs.empty()) sched_->Submit(io::Lane::kRead, reqs, cancel);
}

}  // namespace kvfs::fs
