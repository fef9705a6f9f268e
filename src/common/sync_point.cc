#include "common/sync_point.h"

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <shared_mutex>

namespace kvfs {

namespace {

struct Table {
  std::shared_mutex mu;  // shared while a callback runs; ClearAll takes it whole
  std::map<std::string, std::shared_ptr<std::function<void(void*)>>, std::less<>> points;
  std::atomic<bool> any{false};
};

Table& Points() {
  static Table* t = new Table;  // never destroyed: points may be reached until exit
  return *t;
}

}  // namespace

void SyncPoints::Set(const std::string& name, std::function<void(void* arg)> fn) {
  Table& t = Points();
  std::unique_lock<std::shared_mutex> l(t.mu);
  t.points[name] = std::make_shared<std::function<void(void*)>>(std::move(fn));
  t.any.store(true, std::memory_order_release);
}

void SyncPoints::ClearAll() {
  Table& t = Points();
  std::unique_lock<std::shared_mutex> l(t.mu);
  t.points.clear();
  t.any.store(false, std::memory_order_release);
}

bool SyncPoints::Enabled() { return Points().any.load(std::memory_order_relaxed); }

void SyncPoints::Reach(const char* name, void* arg) {
  Table& t = Points();
  std::shared_lock<std::shared_mutex> l(t.mu);
  auto it = t.points.find(std::string_view(name));
  if (it == t.points.end()) return;
  std::shared_ptr<std::function<void(void*)>> fn = it->second;
  (*fn)(arg);
}

}  // namespace kvfs
