#include "common/kill_point.h"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <random>
#include <string_view>
#include <vector>

namespace kvfs {

namespace {

struct Config {
  std::mutex mu;
  std::vector<std::string> prefixes;  // GUARDED_BY(mu); empty: every point
  uint64_t skip = 0;                  // GUARDED_BY(mu): matching reaches left to pass
  std::atomic<uint32_t> odds{0};
  std::atomic<bool> stall{false};     // the next kill stops its thread instead
};

std::vector<std::string> SplitPrefixes(const std::string& text) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find(',', start);
    if (end == std::string::npos) end = text.size();
    if (end > start) out.push_back(text.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

Config& Conf() {
  // Never destroyed: points may be reached until exit. The environment is
  // read here, once, before any point can be reached.
  static Config* c = [] {
    auto* conf = new Config;
    if (const char* odds = std::getenv("KVFS_KILL_ODDS")) {
      conf->odds.store(static_cast<uint32_t>(std::strtoul(odds, nullptr, 10)));
    }
    if (const char* points = std::getenv("KVFS_KILL_POINTS")) {
      conf->prefixes = SplitPrefixes(points);
    }
    if (const char* skip = std::getenv("KVFS_KILL_SKIP")) {
      conf->skip = std::strtoull(skip, nullptr, 10);
    }
    if (const char* stall = std::getenv("KVFS_KILL_STALL")) conf->stall.store(*stall == '1');
    return conf;
  }();
  return *c;
}

// Whether `name` may kill at this reach: named by the prefixes, and past
// the reaches to skip.
bool Armed(Config& c, std::string_view name) {
  std::lock_guard<std::mutex> l(c.mu);
  bool named = c.prefixes.empty();
  for (const std::string& p : c.prefixes) named = named || name.substr(0, p.size()) == p;
  if (!named) return false;
  if (c.skip == 0) return true;
  --c.skip;
  return false;
}

}  // namespace

void KillPoints::Set(uint32_t odds, const std::string& prefixes, uint64_t skip) {
  Config& c = Conf();
  std::lock_guard<std::mutex> l(c.mu);
  c.prefixes = SplitPrefixes(prefixes);
  c.skip = skip;
  c.odds.store(odds, std::memory_order_relaxed);
}

bool KillPoints::Enabled() { return Conf().odds.load(std::memory_order_relaxed) != 0; }

void KillPoints::Reach(const char* name) {
  Config& c = Conf();
  const uint32_t odds = c.odds.load(std::memory_order_relaxed);
  if (odds == 0 || !Armed(c, name)) return;
  thread_local std::minstd_rand rng(std::random_device{}());
  if (odds > 1 && rng() % odds != 0) return;
  if (c.stall.exchange(false)) {
    std::string line = std::string("kvfs: kill point ") + name + ": stalled\n";
    ssize_t n = ::write(STDERR_FILENO, line.data(), line.size());
    (void)n;
    for (;;) ::pause();
  }
  // write(2), not a logger: nothing buffered may be lost to the kill.
  std::string line = std::string("kvfs: kill point ") + name + ": SIGKILL\n";
  ssize_t n = ::write(STDERR_FILENO, line.data(), line.size());
  (void)n;  // the kill follows either way
  ::kill(::getpid(), SIGKILL);
  for (;;) ::pause();
}

}  // namespace kvfs
