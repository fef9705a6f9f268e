#include "fs/stats.h"

namespace kvfs::fs {

const char* OpName(Op op) {
  switch (op) {
    case Op::kLookup: return "lookup";
    case Op::kRead: return "read";
    case Op::kWrite: return "write";
    case Op::kPrefetch: return "prefetch";
    case Op::kFsync: return "fsync";
    case Op::kGetattr: return "getattr";
    case Op::kCreate: return "create";
    case Op::kRename: return "rename";
    case Op::kUnlink: return "unlink";
    case Op::kOpen: return "open";
    case Op::kCount: break;
  }
  return "?";
}

void FsMetrics::Error(int code) {
  std::lock_guard<std::mutex> l(errors_mu_);
  errors_[code]++;
}

std::array<FsMetrics::OpSnapshot, static_cast<size_t>(Op::kCount)> FsMetrics::Snapshot() const {
  std::array<OpSnapshot, static_cast<size_t>(Op::kCount)> s;
  for (size_t i = 0; i < s.size(); ++i) {
    s[i].latency = ops_[i].latency.Snapshot();
    s[i].bytes = ops_[i].bytes.load(std::memory_order_relaxed);
  }
  return s;
}

std::map<int, uint64_t> FsMetrics::Errors() const {
  std::lock_guard<std::mutex> l(errors_mu_);
  return errors_;
}

}  // namespace kvfs::fs
