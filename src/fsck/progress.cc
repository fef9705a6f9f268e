#include "fsck/progress.h"

#include <algorithm>

namespace kvfs::fsck {

namespace {

std::string HoursMinutesSeconds(double s) {
  if (s < 0) s = 0;
  const auto t = static_cast<unsigned long long>(s + 0.5);
  char buf[32];
  std::snprintf(buf, sizeof buf, "%llu:%02llu:%02llu", t / 3600, t / 60 % 60, t % 60);
  return buf;
}

}  // namespace

std::string ProgressMeter::Format(std::string_view phase, uint64_t done, uint64_t total,
                                  bool bytes, double elapsed_s) {
  std::string s(phase);
  char buf[128];
  const double rate = elapsed_s > 0 ? static_cast<double>(done) / elapsed_s : 0;
  if (total > 0) {
    const double pct = std::min(100.0, 100.0 * static_cast<double>(done) / total);
    std::snprintf(buf, sizeof buf, " %5.1f%%", pct);
    s += buf;
  }
  if (bytes) {
    std::snprintf(buf, sizeof buf, "  %.1f/%.1f GiB  %.0f MB/s",
                  static_cast<double>(done) / (1ull << 30),
                  static_cast<double>(total) / (1ull << 30), rate / 1e6);
  } else {
    std::snprintf(buf, sizeof buf, "  %llu records  %.0fk/s",
                  static_cast<unsigned long long>(done), rate / 1e3);
  }
  s += buf;
  if (total > 0 && rate > 0 && done < total) {
    s += "  ETA " + HoursMinutesSeconds(static_cast<double>(total - done) / rate);
  }
  return s;
}

void ProgressMeter::Begin(std::string_view phase, uint64_t total, bool bytes) {
  phase_ = phase;
  total_ = total;
  bytes_ = bytes;
  start_ = last_draw_ = Clock::now();
  Draw(0);
}

void ProgressMeter::Update(uint64_t done) {
  const auto now = Clock::now();
  if (now - last_draw_ < std::chrono::milliseconds(200)) return;
  last_draw_ = now;
  Draw(done);
}

void ProgressMeter::Draw(uint64_t done) {
  const double elapsed = std::chrono::duration<double>(Clock::now() - start_).count();
  std::string line = Format(phase_, done, total_, bytes_, elapsed);
  // Pad over the remains of a longer previous line.
  const size_t len = line.size();
  if (len < last_len_) line.append(last_len_ - len, ' ');
  last_len_ = len;
  std::fprintf(out_, "\r%s", line.c_str());
  std::fflush(out_);
}

void ProgressMeter::End() {
  std::fprintf(out_, "\r%s\r", std::string(last_len_, ' ').c_str());
  std::fflush(out_);
  last_len_ = 0;
}

}  // namespace kvfs::fsck
