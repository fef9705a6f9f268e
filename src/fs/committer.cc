#include "fs/committer.h"

#include <pthread.h>
#include <spdlog/spdlog.h>

#include <chrono>

#include "common/kill_point.h"

namespace kvfs::fs {

namespace {
constexpr size_t kMaxGroup = 4096;
}

Committer::Committer(index::Index& index, BuildFn build, CommittedFn committed, FlushFn flush,
                     unsigned interval_ms)
    : index_(index),
      build_(std::move(build)),
      committed_(std::move(committed)),
      flush_(std::move(flush)),
      interval_ms_(interval_ms),
      thread_([this] { Run(); }) {}

Committer::~Committer() {
  {
    MutexLock l(mu_);
    stop_ = true;
  }
  cv_.NotifyAll();
  thread_.join();
}

void Committer::Enqueue(std::shared_ptr<Change> change) {
  bool wake;
  {
    MutexLock l(mu_);
    if (change->sync) urgent_ = true;
    queue_.push_back(std::move(change));
    wake = queue_.size() == 1 || urgent_;
  }
  if (wake) cv_.NotifyAll();
}

void Committer::OpenGate(const std::shared_ptr<Change>& change) {
  if (change->gates.fetch_sub(1, std::memory_order_acq_rel) == 1) {
    MutexLock l(mu_);
    cv_.NotifyAll();
  }
}

size_t Committer::queued() const {
  MutexLock l(mu_);
  return queue_.size();
}

Status Committer::Drain(bool sync) {
  auto marker = std::make_shared<Change>();
  marker->sync = sync;
  Mutex m;
  CondVar cv;
  bool done = false;
  Status result;
  marker->waiters.push_back([&](Status st) {
    MutexLock l(m);
    result = st;
    done = true;
    cv.NotifyAll();
  });
  {
    MutexLock l(mu_);
    urgent_ = true;
    queue_.push_back(marker);
  }
  cv_.NotifyAll();
  MutexLock l(m);
  while (!done) cv.Wait(l);
  return result;
}

void Committer::WaitStalled() {
  MutexLock l(mu_);
  while (!stalled_ || (!queue_.empty() && queue_.front()->gates.load() == 0)) {
    stalled_cv_.Wait(l);
  }
}

Status Committer::failure() const { return failed_.Get(); }

void Committer::Run() {
  pthread_setname_np(pthread_self(), "kvfs-commit");
  for (;;) {
    std::vector<std::shared_ptr<Change>> group;
    {
      MutexLock l(mu_);
      auto head_ready = [&]() REQUIRES(mu_) {
        return !queue_.empty() && queue_.front()->gates.load() == 0;
      };
      for (;;) {
        stalled_ = !stop_ && !head_ready();
        if (!stalled_) break;
        stalled_cv_.NotifyAll();
        cv_.Wait(l);
      }
      if (!head_ready()) {
        if (stop_) break;
        continue;
      }
      // Let more changes join the group unless someone waits.
      if (!urgent_ && !stop_ && interval_ms_ > 0) {
        const auto deadline =
            std::chrono::steady_clock::now() + std::chrono::milliseconds(interval_ms_);
        while (!urgent_ && !stop_ && cv_.WaitUntil(l, deadline)) {
        }
      }
      while (!queue_.empty() && queue_.front()->gates.load() == 0 && group.size() < kMaxGroup) {
        group.push_back(std::move(queue_.front()));
        queue_.pop_front();
      }
      if (queue_.empty()) urgent_ = false;
    }
    index::WriteBatch batch = index_.NewBatch();
    bool sync = false;
    for (auto& c : group) {
      build_(*c, batch);
      sync |= c->sync;
    }
    Status st = failed_.Get();  // sticky: after a failed device flush nothing more is committed
    if (st.ok() && data_written_.exchange(false, std::memory_order_acq_rel)) {
      st = flush_();
      if (!st.ok()) {
        spdlog::error("device flush failed, no further index commits: {}", st.ToString());
        failed_.Record(st).ignore();
      }
    }
    if (st.ok()) {
      // Data flushed, not yet named by the index: a crash must leave the
      // old versions.
      KVFS_KILL_POINT("Committer::BeforeIndexCommit");
      if (!batch.empty()) {
        st = index_.Commit(batch, sync);
        commits_.fetch_add(1, std::memory_order_relaxed);
      } else if (sync) {
        st = index_.SyncWal();
      }
      if (!st.ok()) spdlog::error("index commit failed: {}", st.ToString());
      // Committed, but no waiter told (an fsync has not returned) and the
      // replaced extents not freed yet.
      KVFS_KILL_POINT("Committer::AfterIndexCommit");
    }
    for (auto& c : group) {
      committed_(*c, st);
      for (auto& w : c->waiters) w(st);
    }
  }
}

}  // namespace kvfs::fs
