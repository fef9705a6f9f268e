#include "fs/batch.h"

#include <pthread.h>
#include <signal.h>
#include <spdlog/spdlog.h>

#include <new>
#include <utility>

namespace kvfs::fs {

namespace {

// Entries a runner thread starts under one lock hold when they only touch
// the index.
constexpr size_t kIndexOnlyRun = 32;

bool IndexOnly(BatchOp op) {
  return op == BatchOp::kStat || op == BatchOp::kExists || op == BatchOp::kDelete;
}

}  // namespace

BatchRunner::BatchRunner(FileSystem& fs, const BatchLimits& limits) : fs_(fs), limits_(limits) {
  unsigned n = limits_.threads == 0 ? 1 : limits_.threads;
  threads_.reserve(n);
  for (unsigned i = 0; i < n; ++i) threads_.emplace_back([this] { Worker(); });
}

BatchRunner::~BatchRunner() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stop_ = true;
  }
  wake_.notify_all();
  for (std::thread& t : threads_) t.join();
}

void BatchRunner::Run(uint64_t dir, Caller caller, std::vector<BatchItem> items, Done done) {
  auto b = std::make_shared<Batch>();
  b->dir = dir;
  b->caller = std::move(caller);
  b->items = std::move(items);
  b->slots = std::vector<Slot>(b->items.size());
  for (size_t i = 0; i < b->slots.size(); ++i) {
    b->slots[i].batch = b.get();
    b->slots[i].index = i;
  }
  b->done = std::move(done);
  b->unfinished = b->items.size();
  if (b->items.empty()) {
    b->done(b->items);
    return;
  }
  {
    std::lock_guard<std::mutex> l(mu_);
    waiting_.push_back(b.get());  // may throw: nothing started, `b` is freed
    b->self = b;
  }
  wake_.notify_all();
}

bool BatchRunner::CanStartLocked() const {
  if (waiting_.empty()) return false;
  if (items_in_flight_ >= limits_.max_items_in_flight) return false;
  const Batch* b = waiting_.front();
  uint64_t need = b->items[b->next_to_start].budget_bytes;
  // An entry above the byte bound starts alone, when nothing else holds bytes.
  return bytes_in_flight_ == 0 || bytes_in_flight_ + need <= limits_.max_bytes_in_flight;
}

void BatchRunner::Worker() {
  // Runner threads touch the callers' memory; a fault there (SIGBUS from a
  // shrunk shared file) must reach the handler fuse/ installs, and a
  // synchronous signal that is blocked kills the process instead. The
  // thread that made the runner may have blocked them.
  sigset_t bus;
  sigemptyset(&bus);
  sigaddset(&bus, SIGBUS);
  sigaddset(&bus, SIGSEGV);
  pthread_sigmask(SIG_UNBLOCK, &bus, nullptr);
  std::unique_lock<std::mutex> l(mu_);
  for (;;) {
    if (finished_head_ != nullptr) {
      Slot* s = finished_head_;
      finished_head_ = s->next;
      l.unlock();
      Complete(s->batch, s->index);
      l.lock();
      continue;
    }
    if (CanStartLocked()) {
      Batch* b = waiting_.front();
      const size_t first = b->next_to_start;
      // Index-only entries (a stat storm of 10,000 names) start in runs, one
      // lock hold per run instead of per entry; they hold no bytes.
      size_t count = 1;
      while (count < kIndexOnlyRun && IndexOnly(b->items[first].op) &&
             first + count < b->items.size() && IndexOnly(b->items[first + count].op) &&
             items_in_flight_ + count < limits_.max_items_in_flight) {
        ++count;
      }
      b->next_to_start += count;
      if (b->next_to_start == b->items.size()) waiting_.pop_front();
      items_in_flight_ += count;
      bytes_in_flight_ += b->items[first].budget_bytes;  // the others are index-only
      l.unlock();
      // The last Start may finish the batch and free it: `b` is not used after.
      if (count == 1) {
        Start(b, first);
      } else {
        StartRun(b, first, count);
      }
      l.lock();
      continue;
    }
    if (stop_) return;
    wake_.wait(l);
  }
}

bool BatchRunner::Claim(Batch* b, size_t i) {
  return !b->slots[i].claimed.exchange(true, std::memory_order_acq_rel);
}

void BatchRunner::Finished(Batch* b, size_t i) {
  {
    std::lock_guard<std::mutex> l(mu_);
    Slot& s = b->slots[i];
    s.next = finished_head_;
    finished_head_ = &s;
  }
  wake_.notify_one();
}

void BatchRunner::StartRun(Batch* b, size_t first, size_t count) {
  thread_local std::vector<size_t> exists;
  thread_local std::vector<std::string_view> paths;
  thread_local std::vector<int> codes;
  exists.clear();
  paths.clear();
  try {  // the first run on a thread allocates; later ones reuse
    exists.reserve(count);
    paths.reserve(count);
    codes.reserve(count);
  } catch (const std::bad_alloc&) {
    // One by one, as Start does; the last Start may free the batch.
    for (size_t i = first; i < first + count; ++i) Start(b, i);
    return;
  }
  for (size_t i = first; i < first + count; ++i) {
    BatchItem& it = b->items[i];
    if (it.op == BatchOp::kExists && it.error == 0 && !it.prepare) {
      exists.push_back(i);
      paths.push_back(it.path);
    } else {
      // Frees the batch only as the run's last entry with no EXISTS left
      // open: then the loop ends and `exists` is empty.
      Start(b, i);
    }
  }
  if (exists.empty()) return;
  codes.assign(exists.size(), 0);
  try {
    fs_.ExistsPaths(b->dir, paths, b->caller, codes);
  } catch (const std::bad_alloc&) {
    codes.assign(exists.size(), ENOMEM);
  }
  // The last Complete may free the batch: `b` is not used after it.
  for (size_t k = 0; k < exists.size(); ++k) {
    const size_t i = exists[k];
    if (!Claim(b, i)) continue;
    b->items[i].error = codes[k];
    b->items[i].result = 0;
    Complete(b, i);
  }
}

void BatchRunner::Start(Batch* b, size_t i) {
  BatchItem& it = b->items[i];
  if (it.error != 0) {  // refused while decoding
    Claim(b, i);
    Complete(b, i);
    return;
  }
  // Finishes the entry on this thread with `code` (0: success).
  auto finish_here = [&](int code, uint64_t result) {
    if (!Claim(b, i)) return;
    it.error = code;
    it.result = code == 0 ? result : 0;
    Complete(b, i);
  };
  try {
    if (it.prepare) {
      Status st = it.prepare(it);
      if (!st.ok()) {
        finish_here(st.code(), 0);
        return;
      }
    }
    switch (it.op) {
      case BatchOp::kStat: {
        Result<Attr> r = fs_.LookupPath(b->dir, it.path, b->caller);
        finish_here(r.ok() ? 0 : r.status().code(), r.ok() ? r->size : 0);
        return;
      }
      case BatchOp::kExists: {
        Status st = fs_.ExistsPath(b->dir, it.path, b->caller);
        finish_here(st.code(), 0);
        return;
      }
      case BatchOp::kDelete: {
        Status st = fs_.DeleteFile(b->dir, it.path, b->caller);
        finish_here(st.code(), 0);
        return;
      }
      case BatchOp::kPrefetch: {
        Result<uint64_t> r = fs_.PrefetchFile(b->dir, it.path, b->caller);
        finish_here(r.ok() ? 0 : r.status().code(), r.ok() ? *r : 0);
        return;
      }
      case BatchOp::kRead:
        fs_.ReadFile(b->dir, it.path, it.file_off, it.data, b->caller,
                     [this, b, i](Result<size_t> r) {
                       if (!Claim(b, i)) return;
                       BatchItem& item = b->items[i];
                       item.error = r.ok() ? 0 : r.status().code();
                       item.result = r.ok() ? *r : 0;
                       Finished(b, i);
                     });
        return;
      case BatchOp::kWrite:
        fs_.WriteFile(b->dir, it.path, it.data, b->caller, [this, b, i](Status st) {
          if (!Claim(b, i)) return;
          BatchItem& item = b->items[i];
          item.error = st.code();
          item.result = st.ok() ? item.data.size() : 0;
          Finished(b, i);
        });
        return;
    }
    finish_here(EINVAL, 0);  // not a BatchOp: fuse/ decodes only valid ops
  } catch (const std::bad_alloc&) {
    // If the fs/ call threw after taking the callback, whichever of the two
    // claims the entry first finishes it.
    finish_here(ENOMEM, 0);
  }
}

void BatchRunner::Complete(Batch* b, size_t i) {
  BatchItem& it = b->items[i];
  if (it.error == 0 && it.finish) {
    Status st;
    try {
      st = it.finish(it);
    } catch (const std::bad_alloc&) {
      st = Status::Error(ENOMEM, "out of memory");
    }
    if (!st.ok()) it.error = st.code();
  }
  if (it.error != 0) it.result = 0;
  // The hooks may own the entry's bounce buffer: free it now, not with the
  // batch, so memory stays within the in-flight bound.
  it.prepare = nullptr;
  it.finish = nullptr;
  bool last = false;
  bool room = false;
  {
    std::lock_guard<std::mutex> l(mu_);
    room = items_in_flight_ >= limits_.max_items_in_flight || it.budget_bytes > 0;
    --items_in_flight_;
    bytes_in_flight_ -= it.budget_bytes;
    last = --b->unfinished == 0;
  }
  // Waiting runner threads wait for room to start entries (or for finished
  // ones, or a new batch, which notify themselves): a wake-up per index-only
  // entry would cost more than the entry.
  if (room) wake_.notify_all();
  if (!last) return;
  try {
    b->done(b->items);
  } catch (const std::bad_alloc&) {
    spdlog::error("batch: completion ran out of memory");
  }
  std::shared_ptr<Batch> self = std::move(b->self);  // frees the batch on return
}

}  // namespace kvfs::fs
