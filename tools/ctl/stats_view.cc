#include "ctl/stats_view.h"

#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <initializer_list>
#include <vector>

namespace kvfs::ctl {

namespace {

using nlohmann::json;

std::string Fmt(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
std::string Fmt(const char* fmt, ...) {
  char buf[512];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(buf, sizeof(buf), fmt, ap);
  va_end(ap);
  return buf;
}

// The member at `path` of nested objects, or null when any step is missing.
const json* At(const json& j, std::initializer_list<std::string_view> path) {
  const json* cur = &j;
  for (std::string_view key : path) {
    if (!cur->is_object()) return nullptr;
    auto it = cur->find(key);
    if (it == cur->end()) return nullptr;
    cur = &*it;
  }
  return cur;
}
uint64_t U(const json* j) { return j != nullptr && j->is_number() ? j->get<uint64_t>() : 0; }
double D(const json* j) { return j != nullptr && j->is_number() ? j->get<double>() : 0.0; }
uint64_t U(const json& j, std::initializer_list<std::string_view> path) { return U(At(j, path)); }

// The members of object `j`, the names in `order` first (in that order),
// then any others (a newer daemon's) in the document's order.
std::vector<std::string> Keys(const json* j, std::initializer_list<std::string_view> order) {
  std::vector<std::string> keys;
  if (j == nullptr || !j->is_object()) return keys;
  for (std::string_view k : order) {
    if (j->contains(k)) keys.emplace_back(k);
  }
  for (auto it = j->begin(); it != j->end(); ++it) {
    bool known = false;
    for (std::string_view k : order) known = known || it.key() == k;
    if (!known) keys.push_back(it.key());
  }
  return keys;
}

// Per-second rate of a counter between two documents; "-" without a
// previous one or across a counter reset (a remount).
class Rates {
 public:
  Rates(const json* prev, double interval_s) : prev_(prev), interval_s_(interval_s) {}
  bool on() const { return prev_ != nullptr && interval_s_ > 0; }
  // NaN when there is no rate.
  double Of(const json& now, std::initializer_list<std::string_view> path) const {
    if (!on()) return NAN;
    const json* a = At(*prev_, path);
    const json* b = At(now, path);
    if (a == nullptr || b == nullptr || U(b) < U(a)) return NAN;
    return static_cast<double>(U(b) - U(a)) / interval_s_;
  }
  // The same for member `key` of element `i` of array `array` (a device of
  // "devices"), when both documents have that element.
  double OfElement(const json& now, std::string_view array, size_t i, std::string_view key) const {
    if (!on()) return NAN;
    const json* a = Element(*prev_, array, i);
    const json* b = Element(now, array, i);
    if (a == nullptr || b == nullptr) return NAN;
    const json* x = At(*a, {key});
    const json* y = At(*b, {key});
    if (x == nullptr || y == nullptr || U(y) < U(x)) return NAN;
    return static_cast<double>(U(y) - U(x)) / interval_s_;
  }
  static const json* Element(const json& doc, std::string_view array, size_t i) {
    const json* arr = At(doc, {array});
    if (arr == nullptr || !arr->is_array() || i >= arr->size() || !(*arr)[i].is_object()) {
      return nullptr;
    }
    return &(*arr)[i];
  }

 private:
  const json* prev_;
  double interval_s_;
};

std::string Count(double per_s) {
  if (std::isnan(per_s)) return "-";
  if (per_s == 0) return "0";
  return per_s < 10 ? Fmt("%.1f", per_s) : Fmt("%.0f", per_s);
}
std::string BytesRate(double per_s) {
  if (std::isnan(per_s)) return "-";
  return HumanBytes(static_cast<uint64_t>(per_s));
}
std::string Latency(const json* lat, std::string_view key) {
  if (U(At(*lat, {"count"})) == 0) return "-";
  return HumanMicros(D(At(*lat, {key})));
}

}  // namespace

std::string HumanBytes(uint64_t bytes) {
  static constexpr char kSuffix[] = "KMGTPE";
  if (bytes < 1024) return std::to_string(bytes);
  double v = static_cast<double>(bytes);
  size_t unit = 0;
  v /= 1024;
  while (v >= 1024 && unit + 1 < sizeof(kSuffix) - 1) {
    v /= 1024;
    ++unit;
  }
  // Rounded up, as df -h does: never shows less than there is.
  if (v < 10) {
    const double r = std::ceil(v * 10) / 10;
    if (r < 10) return Fmt("%.1f%c", r, kSuffix[unit]);
    v = r;
  }
  double r = std::ceil(v);
  if (r >= 1024 && unit + 1 < sizeof(kSuffix) - 1) return Fmt("1.0%c", kSuffix[unit + 1]);
  return Fmt("%.0f%c", r, kSuffix[unit]);
}

std::string HumanMicros(double us) {
  if (us < 1) return Fmt("%.0fns", us * 1000);
  if (us < 10) return Fmt("%.2fus", us);
  if (us < 1000) return Fmt("%.1fus", us);
  if (us < 10'000) return Fmt("%.2fms", us / 1000);
  if (us < 1'000'000) return Fmt("%.1fms", us / 1000);
  return Fmt("%.2fs", us / 1e6);
}

std::string RenderStats(const json& now, const json* prev, double interval_s,
                        std::string_view header) {
  const Rates rate(prev, interval_s);
  std::string o(header);
  o += "\n\n";

  // Operations of the filesystem (latency from the fs/ call to its reply).
  const json* ops = At(now, {"ops"});
  if (rate.on()) {
    o += Fmt("%-9s %10s %8s %8s %8s %8s %8s %8s %8s %8s\n", "OP", "COUNT", "OPS/S", "BYTES",
             "BYTES/S", "P50", "P90", "P99", "P99.9", "MAX");
  } else {
    o += Fmt("%-9s %10s %8s %8s %8s %8s %8s %8s\n", "OP", "COUNT", "BYTES", "P50", "P90", "P99",
             "P99.9", "MAX");
  }
  for (const std::string& name : Keys(ops, {"lookup", "getattr", "create", "open", "read", "write",
                                            "rename", "unlink", "prefetch", "fsync"})) {
    const json* lat = At(*ops, {name, "latency"});
    static const json kEmpty = json::object();
    if (lat == nullptr) lat = &kEmpty;
    const uint64_t bytes = U(*ops, {name, "bytes"});
    // Calls that move no data show "-".
    const bool moves_data = name == "read" || name == "write" || name == "prefetch";
    const std::string bytes_s = bytes || moves_data ? HumanBytes(bytes) : "-";
    std::string lats = Fmt("%8s %8s %8s %8s %8s", Latency(lat, "p50_us").c_str(),
                           Latency(lat, "p90_us").c_str(), Latency(lat, "p99_us").c_str(),
                           Latency(lat, "p999_us").c_str(), Latency(lat, "max_us").c_str());
    const unsigned long long count = U(*lat, {"count"});
    if (rate.on()) {
      o += Fmt("%-9s %10llu %8s %8s %8s %s\n", name.c_str(), count,
               Count(rate.Of(now, {"ops", name, "latency", "count"})).c_str(), bytes_s.c_str(),
               BytesRate(rate.Of(now, {"ops", name, "bytes"})).c_str(), lats.c_str());
    } else {
      o += Fmt("%-9s %10llu %8s %s\n", name.c_str(), count, bytes_s.c_str(), lats.c_str());
    }
  }

  // Device lanes (io/ scheduler): commands, not filesystem calls.
  const json* lanes = At(now, {"lanes"});
  o += "\n";
  if (rate.on()) {
    o += Fmt("%-9s %10s %8s %8s %8s %9s %7s %7s %8s %8s\n", "LANE", "OPS", "OPS/S", "BYTES",
             "BYTES/S", "IN-FLIGHT", "QUEUED", "ERRORS", "P50", "P99");
  } else {
    o += Fmt("%-9s %10s %8s %9s %7s %7s %8s %8s\n", "LANE", "OPS", "BYTES", "IN-FLIGHT", "QUEUED",
             "ERRORS", "P50", "P99");
  }
  for (const std::string& name : Keys(lanes, {"meta", "read", "prefetch", "write", "delete"})) {
    const json& l = (*lanes)[name];
    static const json kEmpty = json::object();
    const json* lat = At(l, {"latency"});
    if (lat == nullptr) lat = &kEmpty;
    const unsigned long long n = U(l, {"ops"});
    const std::string bytes = HumanBytes(U(l, {"bytes"}));
    const unsigned long long inflight = U(l, {"inflight"}), queued = U(l, {"queued"}),
                             errors = U(l, {"errors"});
    if (rate.on()) {
      o += Fmt("%-9s %10llu %8s %8s %8s %9llu %7llu %7llu %8s %8s\n", name.c_str(), n,
               Count(rate.Of(now, {"lanes", name, "ops"})).c_str(), bytes.c_str(),
               BytesRate(rate.Of(now, {"lanes", name, "bytes"})).c_str(), inflight, queued, errors,
               Latency(lat, "p50_us").c_str(), Latency(lat, "p99_us").c_str());
    } else {
      o += Fmt("%-9s %10llu %8s %9llu %7llu %7llu %8s %8s\n", name.c_str(), n, bytes.c_str(),
               inflight, queued, errors, Latency(lat, "p50_us").c_str(),
               Latency(lat, "p99_us").c_str());
    }
  }

  // Devices of the volume (every lane's commands to each), when it has any.
  const json* devices = At(now, {"devices"});
  if (devices != nullptr && devices->is_array() && !devices->empty()) {
    o += "\n";
    if (rate.on()) {
      o += Fmt("%-6s %10s %8s %8s %8s %9s %7s %7s %8s %8s  %s\n", "DEVICE", "OPS", "OPS/S",
               "BYTES", "BYTES/S", "IN-FLIGHT", "QUEUED", "ERRORS", "P50", "P99", "PATH");
    } else {
      o += Fmt("%-6s %10s %8s %9s %7s %7s %8s %8s  %s\n", "DEVICE", "OPS", "BYTES", "IN-FLIGHT",
               "QUEUED", "ERRORS", "P50", "P99", "PATH");
    }
    for (size_t i = 0; i < devices->size(); ++i) {
      static const json kEmpty = json::object();
      const json* d = Rates::Element(now, "devices", i);
      if (d == nullptr) d = &kEmpty;
      const json* lat = At(*d, {"latency"});
      if (lat == nullptr) lat = &kEmpty;
      const json* path = At(*d, {"path"});
      const std::string path_s =
          path != nullptr && path->is_string() ? path->get<std::string>() : "-";
      const json* index = At(*d, {"device"});
      const unsigned long long dev = index != nullptr && index->is_number() ? U(index) : i;
      const unsigned long long n = U(*d, {"ops"}), inflight = U(*d, {"inflight_commands"}),
                               queued = U(*d, {"queued"}), errors = U(*d, {"errors"});
      const std::string bytes = HumanBytes(U(*d, {"bytes"}));
      if (rate.on()) {
        o += Fmt("%-6llu %10llu %8s %8s %8s %9llu %7llu %7llu %8s %8s", dev, n,
                 Count(rate.OfElement(now, "devices", i, "ops")).c_str(), bytes.c_str(),
                 BytesRate(rate.OfElement(now, "devices", i, "bytes")).c_str(), inflight, queued,
                 errors, Latency(lat, "p50_us").c_str(), Latency(lat, "p99_us").c_str());
      } else {
        o += Fmt("%-6llu %10llu %8s %9llu %7llu %7llu %8s %8s", dev, n, bytes.c_str(), inflight,
                 queued, errors, Latency(lat, "p50_us").c_str(), Latency(lat, "p99_us").c_str());
      }
      o += "  " + path_s + "\n";  // last, and outside Fmt's buffer: paths can be long
    }
  }

  // Cache, prefetch, staging, space, errors: one line each.
  o += "\n";
  const unsigned long long hits = U(now, {"cache", "hits"}), misses = U(now, {"cache", "misses"});
  o += Fmt("%-9s hits %llu, misses %llu, hit rate %s", "cache", hits, misses,
           hits + misses ? Fmt("%.1f%%", 100.0 * hits / (hits + misses)).c_str() : "-");
  if (rate.on()) {
    const double h = rate.Of(now, {"cache", "hits"}), m = rate.Of(now, {"cache", "misses"});
    o += Fmt(" (now %s hits/s, %s misses/s)", Count(h).c_str(), Count(m).c_str());
  }
  o += Fmt("; holds %s of %s in %llu entries\n", HumanBytes(U(now, {"cache", "bytes"})).c_str(),
           HumanBytes(U(now, {"cache", "budget"})).c_str(),
           static_cast<unsigned long long>(U(now, {"cache", "entries"})));
  const uint64_t used = U(now, {"cache", "prefetch_used_bytes"}),
                 wasted = U(now, {"cache", "prefetch_wasted_bytes"});
  o += Fmt("%-9s read %s, used %s, wasted %s", "prefetch",
           HumanBytes(U(now, {"cache", "prefetched_bytes"})).c_str(), HumanBytes(used).c_str(),
           HumanBytes(wasted).c_str());
  if (used + wasted) o += Fmt(" (%.1f%% of settled bytes used)", 100.0 * used / (used + wasted));
  o += "\n";
  o += Fmt("%-9s %s staged (dirty) of %s; %llu index changes queued\n", "staging",
           HumanBytes(U(now, {"staging", "staged_bytes"})).c_str(),
           HumanBytes(U(now, {"staging", "bound_bytes"})).c_str(),
           static_cast<unsigned long long>(U(now, {"commits", "queued"})));
  o += Fmt("%-9s %s total, %s free, largest free extent %s (%llu free extents)\n", "space",
           HumanBytes(U(now, {"space", "total_bytes"})).c_str(),
           HumanBytes(U(now, {"space", "free_bytes"})).c_str(),
           HumanBytes(U(now, {"space", "largest_free_bytes"})).c_str(),
           static_cast<unsigned long long>(U(now, {"space", "free_extents"})));
  // Eviction (-o evict=lru): shown only when it is on.
  const json* evict_on = At(now, {"eviction", "on"});
  if (evict_on != nullptr && evict_on->is_boolean() && evict_on->get<bool>()) {
    const json* scope = At(now, {"eviction", "scope"});
    o += Fmt("%-9s lru %llu%% -> %llu%% of data space, min age %.0fs, scope %s; %llu files (%s) "
             "in %llu passes, last aged %.1fs; %llu writer waits (%.2fs)\n",
             "eviction", static_cast<unsigned long long>(U(now, {"eviction", "high_pct"})),
             static_cast<unsigned long long>(U(now, {"eviction", "low_pct"})),
             D(At(now, {"eviction", "min_age_s"})),
             scope != nullptr && scope->is_string() ? scope->get_ref<const std::string&>().c_str()
                                                    : "-",
             static_cast<unsigned long long>(U(now, {"eviction", "files"})),
             HumanBytes(U(now, {"eviction", "bytes"})).c_str(),
             static_cast<unsigned long long>(U(now, {"eviction", "passes"})),
             D(At(now, {"eviction", "last_age_s"})),
             static_cast<unsigned long long>(U(now, {"eviction", "writer_waits"})),
             D(At(now, {"eviction", "writer_wait_s"})));
  }
  // How requests reach the daemon (/dev/fuse or FUSE over io_uring).
  const json* transport = At(now, {"transport"});
  o += Fmt("%-9s %s\n", "transport",
           transport != nullptr && transport->is_string()
               ? transport->get_ref<const std::string&>().c_str()
               : "-");
  // FUSE requests by opcode (every request the kernel sent, counted once).
  const json* requests = At(now, {"requests"});
  std::string reqs;
  uint64_t total = 0;
  for (const std::string& k : Keys(requests, {"lookup", "getattr", "create", "open", "read",
                                              "write", "flush", "release", "rename", "unlink"})) {
    const unsigned long long n = U(*requests, {k});
    if (n == 0) continue;
    total += n;
    if (!reqs.empty()) reqs += ", ";
    reqs += Fmt("%s %llu", k.c_str(), n);
    if (rate.on()) reqs += Fmt(" (%s/s)", Count(rate.Of(now, {"requests", k})).c_str());
  }
  o += Fmt("%-9s %llu", "requests", static_cast<unsigned long long>(total));
  if (!reqs.empty()) o += ": " + reqs;
  o += "\n";
  std::string errs;
  const json* errors = At(now, {"errors"});
  for (const std::string& k : Keys(errors, {})) {
    if (!errs.empty()) errs += ", ";
    errs += Fmt("%s %llu", k.c_str(), static_cast<unsigned long long>(U(*errors, {k})));
  }
  o += Fmt("%-9s %s\n", "errors", errs.empty() ? "none" : errs.c_str());
  return o;
}

}  // namespace kvfs::ctl
