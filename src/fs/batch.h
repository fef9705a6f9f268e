// BatchRunner: runs the entries of a batch (the batch ioctl's READ, WRITE,
// STAT, PREFETCH, DELETE) through the FileSystem's whole-file calls,
// concurrently, within a bound on entries and bytes in flight.
//
//   std::vector<BatchItem> items = ...;  // decoded by fuse/, spans resolved
//   runner.Run(dir_ino, caller, std::move(items), [](std::vector<BatchItem>& items) {
//     // items[i].error / items[i].result, in input order
//   });
//
// Bounded waves: the runner as a whole (all batches of all callers) keeps at
// most `max_items_in_flight` entries and `max_bytes_in_flight` data bytes
// started and not finished; an entry larger than the byte bound starts alone.
// Entries start in input order, batches in the order Run() was called, so no
// batch starves; within a run of up to 32 index-only entries, the EXISTS
// ones are answered together after the others start. Entries of one batch
// run concurrently: two entries naming the same file (duplicates are not
// merged) have no defined order between them.
//
// Threads: a few runner threads start entries and finish them. They run the
// index-only calls (LookupPath, DeleteFile, PrefetchFile) themselves but
// never wait for device I/O: ReadFile/WriteFile complete through callbacks,
// which only queue the entry back to a runner thread (so engine threads never
// run the caller's hooks or `done`).
//
// No FUSE types here: memory is spans the caller resolved (registered
// shared memory, or a bounce buffer that `prepare`/`finish` fill and drain).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "common/status.h"
#include "fs/file_system.h"

namespace kvfs::fs {

enum class BatchOp : uint8_t { kRead, kWrite, kStat, kExists, kPrefetch, kDelete };

struct BatchItem {
  BatchOp op = BatchOp::kStat;
  std::string path;        // relative to the batch's directory (LookupPath rules)
  uint64_t file_off = 0;   // kRead: first byte of the file to read
  std::span<char> data;    // kRead: destination; kWrite: the new contents
  // Bytes of daemon memory this entry holds while in flight, counted
  // against the byte bound: the caller says what it allocates (a bounce
  // buffer's size; registered memory costs nothing extra).
  uint64_t budget_bytes = 0;
  // Optional, run on a runner thread: `prepare` just before the entry
  // starts (e.g. allocate a bounce buffer, copy the caller's data in, set
  // `data`); `finish` after it succeeded (e.g. copy a READ's bytes out, free
  // the buffer). An error from either becomes the entry's error. Both must
  // not block on device I/O.
  std::function<Status(BatchItem&)> prepare;
  std::function<Status(BatchItem&)> finish;

  // In/out: a positive errno. Set before Run() to refuse an entry without
  // running it (decoding errors); its `finish` then does not run.
  int error = 0;
  // Out: bytes read/written (kRead/kWrite), file size (kStat), bytes queued
  // (kPrefetch); 0 on error.
  uint64_t result = 0;
};

struct BatchLimits {
  size_t max_items_in_flight = 256;
  uint64_t max_bytes_in_flight = 512ull << 20;
  unsigned threads = 2;
};

class BatchRunner {
 public:
  // `fs` must outlive the runner. Starts the runner threads.
  BatchRunner(FileSystem& fs, const BatchLimits& limits);
  // Joins the runner threads. REQUIRES: every batch's `done` has run.
  ~BatchRunner();
  BatchRunner(const BatchRunner&) = delete;
  BatchRunner& operator=(const BatchRunner&) = delete;

  using Done = std::function<void(std::vector<BatchItem>& items)>;
  // Runs `items` under directory inode `dir` as `caller`. `done` runs
  // exactly once, on a runner thread (inline for an empty batch), after
  // every entry finished; it gets the items back in input order, each with
  // `error` and `result` set. Memory the items' spans point to must stay
  // valid until `done`. May throw std::bad_alloc before anything started
  // (then `done` never runs); never after.
  void Run(uint64_t dir, Caller caller, std::vector<BatchItem> items, Done done);

  // Implementation details follow.
 private:
  struct Batch;
  // One finished entry waiting for a runner thread (intrusive: completing
  // an entry on an engine thread allocates nothing).
  struct Slot {
    Batch* batch = nullptr;
    size_t index = 0;
    Slot* next = nullptr;  // GUARDED_BY(runner mu_)
    // Set by whoever finishes the entry first (its callback, or the runner
    // thread when the fs/ call threw): the entry finishes once.
    std::atomic<bool> claimed{false};
  };
  struct Batch {
    uint64_t dir = 0;
    Caller caller;
    std::vector<BatchItem> items;
    std::vector<Slot> slots;
    Done done;
    size_t next_to_start = 0;  // GUARDED_BY(runner mu_)
    size_t unfinished = 0;     // GUARDED_BY(runner mu_)
    // The batch keeps itself alive until `done` ran: completions on engine
    // threads hold only a raw pointer.
    std::shared_ptr<Batch> self;
  };

  void Worker();
  // Starts entry `i` of `b` (on a runner thread, mu_ not held).
  void Start(Batch* b, size_t i);
  // Starts entries [first, first + count) of `b`: its EXISTS entries in one
  // fs call (ExistsPaths), the others one by one. `b` may be freed when it
  // returns.
  void StartRun(Batch* b, size_t first, size_t count);
  // True exactly once per entry: the caller then sets its error/result
  // and calls Finished().
  static bool Claim(Batch* b, size_t i);
  // Queues a finished entry for a runner thread. Any thread; allocates nothing.
  void Finished(Batch* b, size_t i);
  // Runs `finish`, releases the entry's budget, and calls done after the
  // last entry (runner thread, mu_ not held).
  void Complete(Batch* b, size_t i);
  // REQUIRES: mu_ held. True when the head batch's next entry fits the bounds.
  bool CanStartLocked() const;

  FileSystem& fs_;
  const BatchLimits limits_;
  std::mutex mu_;
  std::condition_variable wake_;
  // Batches with entries not started yet, in Run() order.
  std::deque<Batch*> waiting_;                   // GUARDED_BY(mu_)
  Slot* finished_head_ = nullptr;                // GUARDED_BY(mu_); LIFO is fine: order is per index
  size_t items_in_flight_ = 0;                   // GUARDED_BY(mu_)
  uint64_t bytes_in_flight_ = 0;                 // GUARDED_BY(mu_)
  bool stop_ = false;                            // GUARDED_BY(mu_)
  std::vector<std::thread> threads_;
};

}  // namespace kvfs::fs
