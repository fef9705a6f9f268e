#include "fs/retained_pins.h"

#include <utility>

namespace kvfs::fs {

void RetainedPins::Retain(InodePin pin) {
  InodePin oldest;  // released after mu_
  MutexLock l(mu_);
  pins_.push_back(std::move(pin));
  if (pins_.size() > max_) {
    oldest = std::move(pins_.front());
    pins_.pop_front();
  }
}

void RetainedPins::Clear() {
  std::deque<InodePin> released;  // after mu_
  MutexLock l(mu_);
  released.swap(pins_);
}

size_t RetainedPins::size() const {
  MutexLock l(mu_);
  return pins_.size();
}

}  // namespace kvfs::fs
