#include "fsck/data_verifier.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <memory>
#include <mutex>

#include "common/crc32c.h"
#include "common/format.h"
#include "device/io_engine.h"

namespace kvfs::fsck {

namespace {

// A group of items read by one request.
struct Run {
  uint32_t device = 0;
  uint64_t byte_off = 0;
  uint64_t len = 0;
  size_t first = 0;  // items [first, last)
  size_t last = 0;
};

std::vector<Run> MakeRuns(const std::vector<VerifyItem>& items, const VerifyOptions& o) {
  std::vector<Run> runs;
  for (size_t i = 0; i < items.size(); ++i) {
    const VerifyItem& it = items[i];
    if (!runs.empty()) {
      Run& r = runs.back();
      const uint64_t end = r.byte_off + r.len;
      if (r.device == it.device && it.byte_off >= end && it.byte_off - end <= o.max_gap_bytes &&
          it.byte_off + it.len - r.byte_off <= o.read_bytes) {
        r.len = it.byte_off + it.len - r.byte_off;
        r.last = i + 1;
        continue;
      }
    }
    runs.push_back(Run{it.device, it.byte_off, it.len, i, i + 1});
  }
  return runs;
}

void CheckRun(const Run& run, const char* data, std::vector<VerifyItem>* items) {
  for (size_t i = run.first; i < run.last; ++i) {
    VerifyItem& it = (*items)[i];
    it.actual_crc = Crc32c(data + (it.byte_off - run.byte_off), it.len);
    it.error = 0;
  }
}

struct FreeDeleter {
  void operator()(char* p) const { std::free(p); }
};

}  // namespace

Result<VerifyStats> VerifyExtents(const std::vector<const device::BlockDevice*>& devices,
                                  std::vector<VerifyItem>* items, const VerifyOptions& options,
                                  Progress* progress) {
  VerifyOptions o = options;
  o.read_bytes = std::max<size_t>(AlignUp(o.read_bytes, kBlockSize), kBlockSize);
  o.command_bytes = std::min(std::max<size_t>(AlignUp(o.command_bytes, kBlockSize), kBlockSize),
                             o.read_bytes);
  o.inflight_reads = std::max(1u, o.inflight_reads);
  const auto start = std::chrono::steady_clock::now();
  VerifyStats stats;
  const std::vector<Run> runs = MakeRuns(*items, o);
  uint64_t total = 0;
  for (const Run& r : runs) total += r.len;

  // The registered pool is populated up front: size it to the work, so a
  // small volume does not pay for 128 MiB of buffers.
  uint64_t longest = kBlockSize;
  for (const Run& r : runs) longest = std::max(longest, r.len);
  const size_t slot = std::min<size_t>(o.read_bytes, longest);
  const size_t slots = std::max<size_t>(1, std::min<size_t>(o.inflight_reads, runs.size()));
  device::IoEngineOptions eo;
  eo.rings = o.rings;
  eo.queue_depth = o.queue_depth;
  eo.max_command_bytes = std::min(o.command_bytes, slot);
  eo.staging_slot_bytes = slot;
  eo.staging_pool_bytes = slot * slots;
  KVFS_ASSIGN_OR_RETURN(std::unique_ptr<device::IoEngine> engine,
                        device::IoEngine::Create(devices, eo));
  device::BufferPool& pool = engine->buffers();
  std::unique_ptr<device::BlockIo> wrapper;
  if (o.wrap_io) wrapper = o.wrap_io(*engine);
  device::BlockIo& io = wrapper ? *wrapper : *engine;

  std::mutex mu;
  std::condition_variable cv;
  uint64_t outstanding = 0;  // GUARDED_BY(mu)
  std::atomic<uint64_t> done_bytes{0};
  std::vector<size_t> failed_runs;  // GUARDED_BY(mu)
  Status setup_error;

  if (progress) progress->Begin("verifying data", total, true);
  for (size_t ri = 0; ri < runs.size(); ++ri) {
    const Run& run = runs[ri];
    // A run longer than a slot is a single extent larger than read_bytes:
    // read it into its own buffer.
    auto slot = std::make_shared<device::PoolBuffer>();
    std::shared_ptr<char> own;
    char* buf = nullptr;
    if (run.len <= pool.slot_bytes()) {
      *slot = pool.Acquire();  // blocks while `inflight_reads` are out
      buf = slot->data();
    } else {
      own.reset(static_cast<char*>(std::aligned_alloc(kBlockSize, run.len)), FreeDeleter());
      if (!own) {
        // Not a return: requests in flight use this frame; wait for them.
        setup_error = Status::Error(ENOMEM, "verify buffer of " + std::to_string(run.len));
        break;
      }
      buf = own.get();
    }
    {
      std::lock_guard<std::mutex> l(mu);
      ++outstanding;
    }
    device::IoRequest req;
    req.op = device::IoOp::kRead;
    req.device = run.device;
    req.byte_off = run.byte_off;
    req.buf = buf;
    req.len = run.len;
    req.done = [&, ri, buf, slot, own](Status st) mutable {
      const Run& r = runs[ri];
      if (st.ok()) CheckRun(r, buf, items);
      slot.reset();  // the slot goes back to the pool before we are counted done
      own.reset();
      done_bytes.fetch_add(r.len, std::memory_order_relaxed);
      std::lock_guard<std::mutex> l(mu);
      if (!st.ok()) failed_runs.push_back(ri);
      if (--outstanding == 0) cv.notify_all();
    };
    slot.reset();
    own.reset();
    io.Submit(std::span(&req, 1));
    stats.requests++;
    if (progress) progress->Update(done_bytes.load(std::memory_order_relaxed));
  }
  {
    std::unique_lock<std::mutex> l(mu);
    while (outstanding > 0) {
      cv.wait_for(l, std::chrono::milliseconds(200));
      if (progress) {
        l.unlock();
        progress->Update(done_bytes.load(std::memory_order_relaxed));
        l.lock();
      }
    }
  }
  if (progress) progress->End();
  KVFS_RETURN_IF_ERROR(setup_error);
  stats.bytes_read = total;

  // Narrow failed requests down to the extents that cannot be read.
  for (size_t ri : failed_runs) {
    const Run& r = runs[ri];
    for (size_t i = r.first; i < r.last; ++i) {
      VerifyItem& it = (*items)[i];
      std::unique_ptr<char, FreeDeleter> b(
          static_cast<char*>(std::aligned_alloc(kBlockSize, it.len)));
      if (!b) return Status::Error(ENOMEM, "verify retry buffer");
      Status st = io.ReadSync(it.device, it.byte_off, b.get(), it.len);
      if (st.ok()) {
        it.actual_crc = Crc32c(b.get(), it.len);
        it.error = 0;
      } else {
        it.error = st.code();
      }
    }
  }
  wrapper.reset();
  engine.reset();
  stats.seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return stats;
}

}  // namespace kvfs::fsck
