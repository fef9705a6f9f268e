#include "fs/eviction.h"

#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <spdlog/spdlog.h>

#include <algorithm>

namespace kvfs::fs {

Evictor::Evictor(const EvictionOptions& options, Hooks hooks)
    : options_(options), hooks_(std::move(hooks)) {
  thread_ = std::thread([this] { Loop(); });
  notify_thread_ = std::thread([this] { NotifyLoop(); });
}

void Evictor::NotifyLoop() {
  std::unique_lock<std::mutex> l(mu_);
  for (;;) {
    cv_.wait(l, [&] { return stop_ || !gone_.empty(); });
    if (gone_.empty()) {  // stop_, and everything told
      notify_done_ = true;
      cv_.notify_all();
      return;
    }
    Gone g = std::move(gone_.front());
    gone_.pop_front();
    l.unlock();
    if (hooks_.evicted) hooks_.evicted(g);
    l.lock();
  }
}

void Evictor::Stop() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  if (!notify_thread_.joinable()) return;
  bool done;
  {
    std::unique_lock<std::mutex> l(mu_);
    done = cv_.wait_for(l, kNotifyStopWait, [&] { return notify_done_; });
  }
  if (done) {
    notify_thread_.join();
  } else {
    // Blocked in the listener (a kernel notification behind a request
    // nobody serves any more, at teardown): the process is ending, and
    // its exit ends the call; waiting would hang it.
    spdlog::warn("eviction: a notification is still blocked at shutdown; not waiting for it");
    notify_thread_.detach();
  }
}

void Evictor::Allocated() {
  const Space sp = hooks_.space();
  if (sp.used < sp.total / 100 * options_.high_pct) return;
  {
    std::lock_guard<std::mutex> l(mu_);
    if (kicked_) return;
    kicked_ = true;
  }
  cv_.notify_all();
}

std::chrono::steady_clock::time_point Evictor::Now() const {
  return hooks_.now ? hooks_.now() : std::chrono::steady_clock::now();
}

void Evictor::Count(const Batch& b) {
  if (b.files == 0) return;
  files_.fetch_add(b.files, std::memory_order_relaxed);
  bytes_.fetch_add(b.bytes, std::memory_order_relaxed);
  last_age_ns_.store(b.last_age_ns, std::memory_order_relaxed);
}

bool Evictor::PassTo(uint64_t target, bool paced) {
  passes_.fetch_add(1, std::memory_order_relaxed);
  bool any = false;
  for (;;) {
    const Space sp = hooks_.space();
    if (sp.used <= target) break;
    std::vector<Gone> gone;
    const Batch b = hooks_.evict(kBatchFiles, sp.used - target, &gone);
    Count(b);
    if (b.files == 0) break;
    // Space comes back once the unlinks commit: measure after that.
    hooks_.commit();
    any = true;
    {
      std::lock_guard<std::mutex> l(mu_);
      for (Gone& g : gone) gone_.push_back(std::move(g));
      if (stop_) break;
    }
    cv_.notify_all();
    if (paced) std::this_thread::sleep_for(kPace);
  }
  passes_done_.fetch_add(1, std::memory_order_relaxed);
  return any;
}

uint64_t Evictor::RunPass(unsigned to_pct) {
  const uint64_t before = files_.load(std::memory_order_relaxed);
  const Space sp = hooks_.space();
  std::unique_lock<std::mutex> l(mu_);
  request_target_ = sp.total / 100 * to_pct;
  const uint64_t ticket = ++requests_asked_;
  kicked_ = true;
  cv_.notify_all();
  cv_.wait(l, [&] { return requests_served_ >= ticket || stop_; });
  return files_.load(std::memory_order_relaxed) - before;
}

Status Evictor::ReserveWaiting(const std::function<Status()>& reserve, uint64_t bytes) {
  const auto start = Now();
  const auto deadline = start + options_.writer_wait;
  waits_.fetch_add(1, std::memory_order_relaxed);
  Status st = Status::Error(ENOSPC, "volume full");
  bool kicked_local = false;
  for (;;) {
    // The pass thread may be in a batch: wait for it, bounded (what is left
    // of the wait on Now()'s clock, as time on the lock's).
    std::unique_lock<std::timed_mutex> p(pass_mu_, std::defer_lock);
    if (!p.try_lock_for(deadline - Now())) {
      st = reserve();  // the pass freed space while this writer waited
      break;
    }
    const Space sp = hooks_.space();
    const uint64_t free = sp.total - std::min(sp.used, sp.total);
    bool evicted = false;
    if (free < bytes) {  // else a pass freed space meanwhile: take it
      // What this write needs only (a batch or so): the background pass,
      // kicked here, goes on to the low watermark.
      evicted = PassTo(sp.used > bytes - free ? sp.used - (bytes - free) : 0, /*paced=*/false);
      kicked_local = true;
    }
    p.unlock();
    st = reserve();
    if (st.code() != ENOSPC) break;
    if (!evicted && free < bytes) break;  // nothing is evictable now
    if (Now() >= deadline) break;
    // The free space was not enough (the write needs more than `bytes`,
    // or it is fragmented): make more room next time round.
    if (!evicted) bytes = free + bytes;
  }
  if (kicked_local) Allocated();  // past the high watermark: the pass goes on
  wait_ns_.fetch_add(std::chrono::duration_cast<std::chrono::nanoseconds>(Now() - start).count(),
                     std::memory_order_relaxed);
  return st;
}

void Evictor::Loop() {
  // Linux's nice is per thread: this one only.
  setpriority(PRIO_PROCESS, static_cast<id_t>(syscall(SYS_gettid)), 10);
  std::chrono::steady_clock::time_point quiet_until{};
  for (bool looked = false;; looked = true) {
    uint64_t asked = 0, target = 0;
    {
      std::unique_lock<std::mutex> l(mu_);
      if (looked) {  // the round before this one is over (WaitIdle)
        ++looks_;
        cv_.notify_all();
      }
      cv_.wait_for(l, kPoll, [&] { return kicked_ || stop_; });
      if (stop_) {
        requests_served_ = requests_asked_;  // RunPass callers return
        cv_.notify_all();
        return;
      }
      kicked_ = false;
      asked = requests_asked_;
      target = request_target_;
    }
    if (asked > requests_served_) {  // only this thread writes it
      {
        std::lock_guard<std::timed_mutex> p(pass_mu_);
        PassTo(target, /*paced=*/true);
      }
      std::lock_guard<std::mutex> l(mu_);
      requests_served_ = asked;
      cv_.notify_all();
      continue;
    }
    const Space sp = hooks_.space();
    if (sp.total == 0 || sp.used < sp.total / 100 * options_.high_pct) continue;
    const auto now = Now();
    if (now < quiet_until) continue;
    std::lock_guard<std::timed_mutex> p(pass_mu_);
    if (!PassTo(sp.total / 100 * options_.low_pct, /*paced=*/true)) {
      quiet_until = now + kFruitlessBackoff;
    }
  }
}

void Evictor::WaitIdle() {
  std::unique_lock<std::mutex> l(mu_);
  // The round under way may have looked before the caller's change: wait
  // for the one after it, which starts at once (kicked_ means "look now";
  // a pass starts only if the space used calls for one).
  const uint64_t after = looks_ + 2;
  kicked_ = true;
  cv_.notify_all();
  cv_.wait(l, [&] {
    return stop_ || (looks_ >= after && requests_served_ >= requests_asked_);
  });
}

EvictionCounters Evictor::counters() const {
  EvictionCounters c;
  c.files = files_.load(std::memory_order_relaxed);
  c.bytes = bytes_.load(std::memory_order_relaxed);
  c.passes = passes_.load(std::memory_order_relaxed);
  c.passes_done = passes_done_.load(std::memory_order_relaxed);
  c.writer_waits = waits_.load(std::memory_order_relaxed);
  c.writer_wait_ns = wait_ns_.load(std::memory_order_relaxed);
  c.last_age_ns = last_age_ns_.load(std::memory_order_relaxed);
  return c;
}

}  // namespace kvfs::fs
