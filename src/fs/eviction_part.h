// Eviction: FileSystem::Impl's eviction part with -o evict=lru. It owns the
// victim order (fs/victim_order.h), the Evictor with its pass thread
// (fs/eviction.h) and the listener told of each name a pass removed (the
// front end's notify_delete). With eviction off it holds nothing: order()
// and evictor() are null.
//
// Contract: Start runs once, at construction, before any other thread can
// reach the part; after it, order() and evictor() never change until
// ResetEvictor (the owner's destructor, after Stop). Tell runs on the
// Evictor's notify thread, SetListener on any.
//
// Lock order: listener_mu_ is taken alone (nothing is taken under it but
// the listener's own locks). The victim order's lock is taken last, after
// any lock of fs/.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string_view>
#include <utility>

#include "common/mutex.h"
#include "fs/eviction.h"
#include "fs/victim_order.h"

namespace kvfs::fs {

class Eviction {
 public:
  using Listener = std::function<void(uint64_t parent, std::string_view name, uint64_t ino)>;

  // Takes the rebuilt order and starts the Evictor; its `evicted` hook
  // tells the listener.
  void Start(std::unique_ptr<VictimOrder> order, const EvictionOptions& options,
             Evictor::Hooks hooks) {
    victims_ = std::move(order);
    hooks.evicted = [this](const Evictor::Gone& g) { Tell(g); };
    evictor_ = std::make_unique<Evictor>(options, std::move(hooks));
  }
  // Null with eviction off.
  VictimOrder* order() const { return victims_.get(); }
  Evictor* evictor() const { return evictor_.get(); }

  void SetListener(Listener fn) EXCLUDES(listener_mu_) {
    MutexLock l(listener_mu_);
    listener_ = std::move(fn);
  }
  // Stops passes (no unlink after it); idempotent.
  void Stop() {
    if (evictor_) evictor_->Stop();
  }
  // Destroys the Evictor, before what its hooks use goes. REQUIRES: Stop().
  void ResetEvictor() { evictor_.reset(); }

 private:
  void Tell(const Evictor::Gone& g) EXCLUDES(listener_mu_) {
    MutexLock l(listener_mu_);
    if (listener_) listener_(g.parent, g.name, g.ino);
  }

  std::unique_ptr<VictimOrder> victims_;
  std::unique_ptr<Evictor> evictor_;
  Mutex listener_mu_;
  Listener listener_ GUARDED_BY(listener_mu_);
};

}  // namespace kvfs::fs
