// Progress of fsck's long phases (index scans, --verify-data).
//
// The checker calls Begin, then Update any number of times, then End, from
// the thread that runs the check, for each phase in turn. ProgressMeter draws
// a status line on a terminal: phase, percent, rate (MB/s for byte phases,
// records/s otherwise) and ETA, at most a few times a second. The CLI uses it
// only when stderr is a TTY, so logs and pipes get no progress noise.
//
// Thread safety: a Progress is used by one thread at a time.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>

namespace kvfs::fsck {

class Progress {
 public:
  virtual ~Progress() = default;
  // A phase begins: `total` units of work (0 if unknown); `bytes` says the
  // units are bytes (shown as MB/s) rather than records.
  virtual void Begin(std::string_view phase, uint64_t total, bool bytes) = 0;
  // `done` units so far; non-decreasing within a phase. May exceed `total`
  // (totals of index scans are estimates).
  virtual void Update(uint64_t done) = 0;
  virtual void End() = 0;
};

// Draws on `out` (normally stderr, a TTY) with carriage returns; End()
// clears the line. `out` must outlive the meter.
class ProgressMeter : public Progress {
 public:
  explicit ProgressMeter(std::FILE* out) : out_(out) {}
  void Begin(std::string_view phase, uint64_t total, bool bytes) override;
  void Update(uint64_t done) override;
  void End() override;

  // The status line for the given state (no carriage return), for tests.
  static std::string Format(std::string_view phase, uint64_t done, uint64_t total, bool bytes,
                            double elapsed_s);

 private:
  using Clock = std::chrono::steady_clock;
  void Draw(uint64_t done);

  std::FILE* out_;
  std::string phase_;
  uint64_t total_ = 0;
  bool bytes_ = false;
  Clock::time_point start_;
  Clock::time_point last_draw_;
  size_t last_len_ = 0;
};

}  // namespace kvfs::fsck
