#include "fsck/checker.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <map>

#include "common/format.h"
#include "fsck/extent_check.h"
#include "fsck/model.h"
#include "fsck/namespace_check.h"
#include "fsck/repair.h"
#include "fsck/volume_access.h"

namespace kvfs::fsck {

namespace {

using Clock = std::chrono::steady_clock;

double Since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

std::string Offsets(const std::vector<uint64_t>& offs) {
  std::string s;
  for (size_t i = 0; i < offs.size() && i < 8; ++i) s += (i ? ", " : "") + std::to_string(offs[i]);
  if (offs.size() > 8) s += ", ... (" + std::to_string(offs.size()) + " in all)";
  return s;
}

// Reads every extent not in a shared cluster, and turns mismatches and read
// errors into findings and planned fixes.
Status VerifyData(const CheckOptions& o, Model& m, const OpenedVolume& v, const ExtentMap& map,
                  Report* report) {
  std::vector<VerifyItem> items;
  std::vector<size_t> span_of;
  for (size_t k = 0; k < map.spans.size(); ++k) {
    if (map.shared[k]) continue;  // ResolveSharedBlocks reads those
    const Span& s = map.spans[k];
    items.push_back(VerifyItem{s.device, s.off, s.end - s.off, s.crc32c, 0, 0});
    span_of.push_back(k);
  }
  std::vector<const device::BlockDevice*> devs;
  for (const auto& d : v.devices) devs.push_back(d.get());
  KVFS_ASSIGN_OR_RETURN(VerifyStats vs, VerifyExtents(devs, &items, o.verify, o.progress));
  report->stats.verified_bytes = vs.bytes_read;
  report->stats.verify_seconds = vs.seconds;

  // Per file, in inode order: the extents that fail.
  struct Bad {
    std::vector<size_t> crc, io;  // indexes into items
  };
  std::map<uint32_t, Bad> bad;
  for (size_t k = 0; k < items.size(); ++k) {
    if (items[k].ok()) continue;
    Bad& b = bad[map.spans[span_of[k]].inode];
    (items[k].error ? b.io : b.crc).push_back(k);
  }
  for (auto& [inode, b] : bad) {
    std::vector<ExtentRec> list = m.FinalExtents(inode);
    for (int pass = 0; pass < 2; ++pass) {
      const std::vector<size_t>& which = pass == 0 ? b.crc : b.io;
      if (which.empty()) continue;
      std::vector<uint64_t> offs;
      for (size_t k : which) {
        const Span& s = map.spans[span_of[k]];
        offs.push_back(s.file_off);
        if (pass == 0) {
          list[s.slot].crc32c = items[k].actual_crc;  // keep the bytes, inspectable
        } else {
          list[s.slot].ext.len = 0;  // dropped at CompactExtents
        }
      }
      Finding f;
      f.ino = m.inodes[inode].ino;
      f.path = m.PathOf(inode);
      std::string fix;
      if (pass == 0) {
        f.kind = FindingKind::kBadChecksum;
        f.problem = std::to_string(which.size()) + " of " + std::to_string(list.size()) +
                    " extent(s) fail their crc32c (file offsets " + Offsets(offs) + ")";
        fix = "keep the damaged bytes (checksums rewritten to match)";
      } else {
        f.kind = FindingKind::kReadError;
        f.problem = std::to_string(which.size()) + " extent(s) cannot be read: " +
                    std::string(std::strerror(items[which[0]].error)) + " (file offsets " +
                    Offsets(offs) + ")";
        fix = "drop the unreadable extents (those bytes read as zeros)";
      }
      auto to = m.MoveToLostFound(inode);
      if (to.ok()) {
        f.fix = fix + "; move the file to " + *to;
      } else {
        f.problem += "; " + to.status().context();
      }
      report->findings.push_back(std::move(f));
    }
    m.SetExtents(inode, std::move(list));
  }
  return Status::OK();
}

void CountStats(const Model& m, const ExtentMap& map, Stats* s) {
  s->entries = 0;
  for (const EntryRec& e : m.entries) s->entries += !(e.flags & entry_flags::kAdded);
  s->directories = s->files = s->orphans = 0;
  for (const InodeRec& r : m.inodes) {
    if (r.flags & inode_flags::kCreated) continue;
    if (r.flags & inode_flags::kReclaim) ++s->orphans;
    if (r.is_dir()) ++s->directories;
    else ++s->files;
  }
  s->inodes = s->directories + s->files;
  s->extents = map.spans.size();
  s->data_bytes = map.bytes;
  // Spans are sorted by device: count each file once per device.
  s->device_bytes.clear();
  s->device_files.clear();
  std::vector<std::pair<uint32_t, uint32_t>> seen;  // (device, inode)
  for (const Span& sp : map.spans) {
    if (sp.device >= s->device_bytes.size()) {
      s->device_bytes.resize(sp.device + 1);
      s->device_files.resize(sp.device + 1);
    }
    s->device_bytes[sp.device] += sp.end - sp.off;
    seen.emplace_back(sp.device, sp.inode);
  }
  std::sort(seen.begin(), seen.end());
  seen.erase(std::unique(seen.begin(), seen.end()), seen.end());
  for (const auto& [d, ino] : seen) ++s->device_files[d];
}

// Loads and runs the metadata checks (no data reads beyond the few extents
// the extent checks need). Findings go to `out`.
Status CheckMetadata(OpenedVolume& v, Model& m, bool mounted, Progress* progress,
                     std::vector<Finding>* out, ExtentMap* map, double* load_seconds) {
  const auto t = Clock::now();
  KVFS_RETURN_IF_ERROR(m.Load(*v.index, progress, out));
  if (load_seconds) *load_seconds = Since(t);
  CheckNamespace(m, mounted, out);
  CheckFileExtents(m, v, out);
  *map = FindSharedBlocks(m);
  return Status::OK();
}

}  // namespace

Report Check(const CheckOptions& o) {
  const auto start = Clock::now();
  Report report;
  report.repair = o.repair;
  report.devices = o.devices;

  OpenOptions oo;
  oo.devices = o.devices;
  oo.index_dir = o.index_dir;
  oo.repair = o.repair;
  oo.index_cache_bytes = o.index_cache_bytes;
  const size_t before = report.findings.size();
  auto opened = OpenForCheck(oo, &report.findings);
  if (!opened.ok()) {
    if (!(opened.status().code() == EUCLEAN && report.findings.size() > before)) {
      report.error = opened.status();
    }
    return report;
  }
  OpenedVolume& v = **opened;
  report.mounted = v.mounted;
  report.volume_uuid = v.superblocks[0].volume_uuid.ToString();
  report.index_dir = v.index_dir;
  if (v.mounted) {
    report.notes.push_back(
        "the volume is in use (mounted, or being repaired): checking read-only against the "
        "index as of now; "
        "orphans are files still open" +
        std::string(o.verify_data ? "; files rewritten during the check may show as damaged"
                                  : ""));
  }

  Model m;
  ExtentMap map;
  report.stats.open_seconds = Since(start);
  Status st = CheckMetadata(v, m, v.mounted, o.progress, &report.findings, &map,
                            &report.stats.load_seconds);
  if (!st.ok()) {
    report.error = st.Annotate("reading the index");
    return report;
  }
  CountStats(m, map, &report.stats);
  report.stats.device_bytes.resize(std::max(report.stats.device_bytes.size(), v.devices.size()));
  report.stats.device_files.resize(report.stats.device_bytes.size());
  report.stats.metadata_seconds = Since(start);

  if (o.verify_data) {
    st = VerifyData(o, m, v, map, &report);
    if (!st.ok()) {
      report.error = st.Annotate("--verify-data");
      return report;
    }
  }
  ResolveSharedBlocks(m, v, map, &report.findings);
  m.CompactExtents();

  if (!o.repair) return report;
  bool any = false;
  for (const Finding& f : report.findings) {
    any |= f.severity == Severity::kError && f.repairable();
  }
  if (!any) return report;
  const auto rstart = Clock::now();
  st = ApplyRepairs(m, v);
  report.stats.repair_seconds = Since(rstart);
  if (!st.ok()) {
    report.error = st.Annotate("repair");
    return report;
  }
  for (Finding& f : report.findings) {
    if (f.severity == Severity::kError && f.repairable()) f.repaired = true;
  }

  // The repaired index must pass the metadata checks; what does not is
  // reported as not repaired.
  Model again;
  ExtentMap map2;
  std::vector<Finding> left;
  st = CheckMetadata(v, again, false, nullptr, &left, &map2, nullptr);
  if (!st.ok()) {
    report.error = st.Annotate("re-checking after repair");
    return report;
  }
  ResolveSharedBlocks(again, v, map2, &left);
  for (Finding& f : left) {
    f.problem += " (still present after repair)";
    f.fix.clear();
    report.findings.push_back(std::move(f));
  }
  return report;
}

}  // namespace kvfs::fsck
