// Committer: the ordered queue of index changes and the thread that commits
// them.
//
// Changes are committed in the order they were enqueued. A change with
// closed gates (data writes it depends on, still in flight) holds back
// itself and every change behind it. Ready changes at the head are committed
// together in one RocksDB batch (group commit). Before a group that follows
// completed data writes is committed, every device is flushed, so the index
// never names data that is still only in a device's volatile cache. A group
// containing a `sync` change is committed with a synced WAL.
//
// Thread safety: Enqueue/OpenGate from any thread. Callbacks `build` and
// `committed` run on the committer thread, in queue order, exactly once per
// change.
#pragma once

#include <atomic>
#include <deque>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "common/extent.h"
#include "common/mutex.h"
#include "common/status.h"
#include "common/sticky_error.h"
#include "fs/inode_table.h"
#include "index/index.h"

namespace kvfs::fs {

struct InodeState;

struct EntryOp {
  uint64_t parent = 0;
  std::string name;
  uint64_t child = 0;  // 0: delete the entry
};

struct Change {
  std::vector<EntryOp> entry_ops;  // fixed when enqueued
  // Inodes whose live record is captured when the change is built.
  std::vector<std::shared_ptr<InodeState>> inodes;
  // Inodes whose record (and, once committed, data) this change removes.
  std::vector<std::shared_ptr<InodeState>> deletes;
  // Entry-count and link-count changes this change makes, applied to the
  // inodes' durable values when it is built (in queue order).
  struct Delta {
    std::shared_ptr<InodeState> inode;
    int64_t size = 0;
    int32_t nlink = 0;
  };
  std::vector<Delta> deltas;
  std::vector<uint64_t> orphan_puts;
  std::vector<uint64_t> orphan_deletes;
  bool sync = false;
  std::vector<std::function<void(Status)>> waiters;  // after commit
  // Filled while building: extents to free once the batch is committed.
  std::vector<std::pair<std::shared_ptr<InodeState>, std::vector<Extent>>> frees;
  std::atomic<int> gates{0};
  // Keep `inodes` and `deletes` in the inode table until the change is
  // committed (taken by FileSystem::Impl::Enqueue).
  std::vector<InodePin> pins;
};

class Committer {
 public:
  using BuildFn = std::function<void(Change&, index::WriteBatch&)>;
  using CommittedFn = std::function<void(Change&, Status)>;
  using FlushFn = std::function<Status()>;

  Committer(index::Index& index, BuildFn build, CommittedFn committed, FlushFn flush,
            unsigned interval_ms);
  ~Committer();  // commits what is ready, then stops; REQUIRES: no gates left closed

  // `change->gates` must be set before; call OpenGate() for each.
  void Enqueue(std::shared_ptr<Change> change);
  void OpenGate(const std::shared_ptr<Change>& change);
  // Data writes completed since the last flush: the next group flushes first.
  void NoteDataWritten() { data_written_.store(true, std::memory_order_release); }
  // Blocks until every change enqueued before the call is committed; with
  // `sync`, also until the WAL is synced.
  Status Drain(bool sync = false);
  size_t queued() const;
  // Index batches written so far (each group with something to write).
  uint64_t commits() const { return commits_.load(std::memory_order_relaxed); }
  // Test hook: returns once the committer thread waits with nothing it can
  // commit (the queue is empty or its head has a closed gate), so a test
  // can say "however long the committer has" without sleeping.
  void WaitStalled();
  // OK, or the device flush that failed: after it nothing more is
  // committed (every later change fails with it).
  Status failure() const;

 private:
  void Run();

  index::Index& index_;
  BuildFn build_;
  CommittedFn committed_;
  FlushFn flush_;
  const unsigned interval_ms_;
  std::atomic<bool> data_written_{false};
  std::atomic<uint64_t> commits_{0};

  mutable Mutex mu_;
  CondVar cv_;
  std::deque<std::shared_ptr<Change>> queue_ GUARDED_BY(mu_);
  bool stop_ GUARDED_BY(mu_) = false;
  bool urgent_ GUARDED_BY(mu_) = false;
  bool stalled_ GUARDED_BY(mu_) = false;  // the thread waits with nothing ready
  CondVar stalled_cv_;
  StickyError failed_;  // a failed device flush
  std::thread thread_;
};

}  // namespace kvfs::fs
