#include "index/index.h"

#include <sys/stat.h>
#include <sys/types.h>

#include <algorithm>
#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <limits>
#include <set>

#include <rocksdb/cache.h>
#include <rocksdb/convenience.h>
#include <rocksdb/db.h>
#include <rocksdb/env.h>
#include <rocksdb/filter_policy.h>
#include <rocksdb/merge_operator.h>
#include <rocksdb/options.h>
#include <rocksdb/slice_transform.h>
#include <rocksdb/table.h>
#include <rocksdb/write_batch.h>
#include <spdlog/spdlog.h>

#include "common/format.h"

namespace kvfs::index {
namespace {

// --- RocksDB status -> errno -------------------------------------------------

std::string_view View(const rocksdb::Slice& s) { return {s.data(), s.size()}; }

bool Contains(const std::string& haystack, const char* needle) {
  return haystack.find(needle) != std::string::npos;
}

// RocksDB's POSIX layer reports a failed syscall as IOError with strerror()
// in the message and no errno; recover the errno so it survives (EACCES,
// EROFS, ENOSPC... mean different things to an operator than "EIO").
int IoErrorErrno(const rocksdb::Status& s) {
  switch (s.subcode()) {
    case rocksdb::Status::kNoSpace:
    case rocksdb::Status::kSpaceLimit:
      return ENOSPC;
    case rocksdb::Status::kPathNotFound:
      return ENOENT;
    case rocksdb::Status::kMemoryLimit:
      return ENOMEM;
    default:
      break;
  }
  const std::string msg = s.ToString();
  for (int e : {EACCES, EPERM, EROFS, ENOSPC, EDQUOT, EMFILE, ENFILE, ENOMEM, ENOTDIR, EISDIR,
                ENOENT}) {
    if (Contains(msg, std::strerror(e))) return e;
  }
  return EIO;
}

// True if `s` says the RocksDB LOCK file is held: by another process
// ("While lock file: DIR/LOCK: Resource temporarily unavailable") or by
// another DB object of this process ("lock hold by current process").
bool IsLockHeld(const rocksdb::Status& s) {
  if (!s.IsIOError()) return false;
  const std::string msg = s.ToString();
  return Contains(msg, "lock hold by current process") || Contains(msg, "While lock file");
}

Status FromRocks(const rocksdb::Status& s, std::string_view context) {
  if (s.ok()) return Status::OK();
  int code = EIO;
  switch (s.code()) {
    case rocksdb::Status::kNotFound:
      code = ENOENT;
      break;
    case rocksdb::Status::kCorruption:
      code = EUCLEAN;
      break;
    case rocksdb::Status::kNotSupported:
      code = EOPNOTSUPP;
      break;
    case rocksdb::Status::kInvalidArgument:
      code = EINVAL;
      break;
    case rocksdb::Status::kIOError:
      code = IsLockHeld(s) ? EBUSY : IoErrorErrno(s);
      break;
    case rocksdb::Status::kBusy:
      code = EBUSY;
      break;
    case rocksdb::Status::kTimedOut:
      code = ETIMEDOUT;
      break;
    case rocksdb::Status::kAborted:
      code = ECANCELED;
      break;
    case rocksdb::Status::kShutdownInProgress:
      code = ESHUTDOWN;
      break;
    case rocksdb::Status::kIncomplete:
    case rocksdb::Status::kTryAgain:
      code = EAGAIN;
      break;
    default:
      code = EIO;
      break;
  }
  std::string c(context);
  c += ": ";
  c += s.ToString();
  return Status::Error(code, c);
}

// --- Options -----------------------------------------------------------------

// The inode counter is written by every Commit as a merge operand; merging
// keeps the largest. Two commits racing each other may reach the WAL in
// either order, so a plain Put could let the smaller value win and a later
// reopen hand out a number a committed batch already used.
class MaxNextInoOperator : public rocksdb::AssociativeMergeOperator {
 public:
  bool Merge(const rocksdb::Slice& /*key*/, const rocksdb::Slice* existing,
             const rocksdb::Slice& value, std::string* new_value,
             rocksdb::Logger* /*logger*/) const override {
    Result<uint64_t> v = DecodeNextIno(View(value));
    if (!v.ok()) return false;  // RocksDB reports Corruption
    uint64_t m = *v;
    if (existing != nullptr) {
      Result<uint64_t> e = DecodeNextIno(View(*existing));
      if (!e.ok()) return false;
      m = std::max(m, *e);
    }
    *new_value = EncodeNextIno(m);
    return true;
  }
  const char* Name() const override { return "kvfs.MaxNextIno"; }
};

// RocksDB's info log, through spdlog instead of a LOG file in the index
// directory: that file would share the disk the index can fill, and
// RocksDB's file logger aborts (an assertion, live in Debian's build) on an
// append after a failed one. A read-only (secondary) instance must write
// nothing into the directory either. Routine messages are debug level.
class SpdLogger : public rocksdb::Logger {
 public:
  SpdLogger() : rocksdb::Logger(rocksdb::InfoLogLevel::INFO_LEVEL) {}
  using rocksdb::Logger::Logv;
  void Logv(const char* format, va_list ap) override {
    Logv(rocksdb::InfoLogLevel::INFO_LEVEL, format, ap);
  }
  void Logv(const rocksdb::InfoLogLevel level, const char* format, va_list ap) override {
    spdlog::level::level_enum to = level >= rocksdb::InfoLogLevel::ERROR_LEVEL ? spdlog::level::err
                                   : level == rocksdb::InfoLogLevel::WARN_LEVEL ? spdlog::level::warn
                                                                                : spdlog::level::debug;
    if (!spdlog::should_log(to)) return;
    char line[1024];
    int n = std::vsnprintf(line, sizeof(line), format, ap);
    std::string_view text(line, n < 0 ? 0 : std::min<size_t>(n, sizeof(line) - 1));
    while (!text.empty() && text.back() == '\n') text.remove_suffix(1);
    spdlog::log(to, "rocksdb: {}", text);
  }
};

rocksdb::CompressionType PickCompression() {
  const std::vector<rocksdb::CompressionType> have = rocksdb::GetSupportedCompressions();
  for (rocksdb::CompressionType t : {rocksdb::kLZ4Compression, rocksdb::kSnappyCompression}) {
    if (std::find(have.begin(), have.end(), t) != have.end()) return t;
  }
  return rocksdb::kNoCompression;
}

rocksdb::DBOptions MakeDbOptions(bool create) {
  rocksdb::DBOptions o;
  o.create_if_missing = create;
  o.error_if_exists = create;
  o.create_missing_column_families = create;
  // A crash keeps a prefix of the committed batches, never part of one.
  o.wal_recovery_mode = rocksdb::WALRecoveryMode::kPointInTimeRecovery;
  // Keep every table file open: required for a secondary instance (the
  // primary may delete files it still reads) and saves an open per lookup.
  o.max_open_files = -1;
  o.max_background_jobs = 2;
  o.bytes_per_sync = 1 << 20;
  // Bound memtables across families and the WAL a crash would replay.
  o.db_write_buffer_size = 128 << 20;
  o.max_total_wal_size = 128 << 20;
  o.info_log = std::make_shared<SpdLogger>();
  return o;
}

std::vector<rocksdb::ColumnFamilyDescriptor> MakeCfDescriptors(size_t block_cache_bytes) {
  // One bounded cache shared by all families, holding data, index and filter
  // blocks, so the index's memory is what Options says.
  std::shared_ptr<rocksdb::Cache> cache = rocksdb::NewLRUCache(block_cache_bytes);
  std::shared_ptr<const rocksdb::FilterPolicy> bloom(rocksdb::NewBloomFilterPolicy(10));

  auto table = [&](bool with_filter) {
    rocksdb::BlockBasedTableOptions t;
    t.block_cache = cache;
    // Index and filter blocks live in the bounded cache too, partitioned
    // into ~4 KiB pieces under a small pinned top level. Unpartitioned, the
    // filter of a file of 1M entries is a 1.2 MiB block: larger than a cache
    // shard, so it was evicted and re-read from the file on every lookup
    // (measured: 6k lookups/s instead of several 100k).
    t.cache_index_and_filter_blocks = true;
    t.cache_index_and_filter_blocks_with_high_priority = true;
    t.pin_l0_filter_and_index_blocks_in_cache = true;
    t.index_type = rocksdb::BlockBasedTableOptions::kTwoLevelIndexSearch;
    t.partition_filters = true;
    t.metadata_block_size = 4096;
    t.pin_top_level_index_and_filter = true;
    if (with_filter) {
      // ~1% false positives: a miss (stat of a name that does not exist)
      // costs a filter probe per level instead of a data block read.
      t.filter_policy = bloom;
      t.whole_key_filtering = true;
      t.optimize_filters_for_memory = true;
    }
    // Hash index inside data blocks: a point lookup finds its key without a
    // binary search over the block's restart points.
    t.data_block_index_type = rocksdb::BlockBasedTableOptions::kDataBlockBinaryAndHash;
    return std::shared_ptr<rocksdb::TableFactory>(rocksdb::NewBlockBasedTableFactory(t));
  };
  const rocksdb::CompressionType compression = PickCompression();
  auto base = [&](size_t write_buffer_bytes, bool with_filter) {
    rocksdb::ColumnFamilyOptions o;
    o.write_buffer_size = write_buffer_bytes;
    o.max_write_buffer_number = 2;
    o.level_compaction_dynamic_level_bytes = true;
    o.compression = compression;
    o.bottommost_compression = compression;
    o.table_factory = table(with_filter);
    if (with_filter) {
      // A bloom filter over the memtable too, so misses do not walk its
      // skiplist; whole keys, since lookups are exact.
      o.memtable_prefix_bloom_size_ratio = 0.1;
      o.memtable_whole_key_filtering = true;
    }
    return o;
  };

  rocksdb::ColumnFamilyOptions def = base(4 << 20, false);
  def.merge_operator = std::make_shared<MaxNextInoOperator>();
  rocksdb::ColumnFamilyOptions inodes = base(32 << 20, true);
  rocksdb::ColumnFamilyOptions entries = base(32 << 20, true);
  // The 8-byte parent is the prefix: ListEntries/HasEntries seek within one
  // directory and skip files whose prefix filter rules that directory out.
  entries.prefix_extractor.reset(rocksdb::NewFixedPrefixTransform(8));
  rocksdb::ColumnFamilyOptions orphans = base(4 << 20, false);

  return {{rocksdb::kDefaultColumnFamilyName, def},
          {kInodesCf, inodes},
          {kEntriesCf, entries},
          {kOrphansCf, orphans}};
}

// Scans read every block once: do not evict the working set for them, and
// read ahead in large chunks.
rocksdb::ReadOptions ScanReadOptions() {
  rocksdb::ReadOptions ro;
  ro.fill_cache = false;
  ro.total_order_seek = true;
  ro.readahead_size = 2 << 20;
  return ro;
}

int64_t NowNs() {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

// OK if `path` exists, ENOENT if not, another errno if it cannot be told.
Status Exists(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return Status::FromErrno(path);
  return Status::OK();
}

}  // namespace

// --- WriteBatch --------------------------------------------------------------

WriteBatch::WriteBatch(Index* index)
    : index_(index), batch_(std::make_unique<rocksdb::WriteBatch>()) {}
WriteBatch::~WriteBatch() = default;
WriteBatch::WriteBatch(WriteBatch&&) noexcept = default;
WriteBatch& WriteBatch::operator=(WriteBatch&&) noexcept = default;

void WriteBatch::CheckName(std::string_view name) {
  if (!error_.ok()) return;
  if (name.empty() || name.size() > kMaxNameLen) {
    error_ = Status::Error(EINVAL, "entry name of " + std::to_string(name.size()) +
                                       " bytes in a batch (must be 1.." +
                                       std::to_string(kMaxNameLen) + ")");
  }
}

// rocksdb::WriteBatch::Put/Delete fail only when the batch exceeds its size
// limit, which kvfs does not set; keep the first failure for Commit anyway.
#define KVFS_BATCH_OP(expr)                                                   \
  do {                                                                        \
    rocksdb::Status kvfs_rs_ = (expr);                                        \
    if (!kvfs_rs_.ok() && error_.ok()) error_ = FromRocks(kvfs_rs_, "batch"); \
  } while (0)

void WriteBatch::PutInode(const Inode& inode) {
  KVFS_BATCH_OP(batch_->Put(index_->cf(Index::kInodes), InodeKey(inode.ino), inode.Encode()));
}
void WriteBatch::DeleteInode(uint64_t ino) {
  KVFS_BATCH_OP(batch_->Delete(index_->cf(Index::kInodes), InodeKey(ino)));
}
void WriteBatch::PutEntry(uint64_t parent, std::string_view name, uint64_t child) {
  CheckName(name);
  KVFS_BATCH_OP(batch_->Put(index_->cf(Index::kEntries), EntryKey(parent, name),
                            EncodeEntryValue(child)));
}
void WriteBatch::DeleteEntry(uint64_t parent, std::string_view name) {
  CheckName(name);
  KVFS_BATCH_OP(batch_->Delete(index_->cf(Index::kEntries), EntryKey(parent, name)));
}
void WriteBatch::PutOrphan(uint64_t ino) {
  KVFS_BATCH_OP(batch_->Put(index_->cf(Index::kOrphans), InodeKey(ino), EncodeOrphanValue()));
}
void WriteBatch::DeleteOrphan(uint64_t ino) {
  KVFS_BATCH_OP(batch_->Delete(index_->cf(Index::kOrphans), InodeKey(ino)));
}
#undef KVFS_BATCH_OP

bool WriteBatch::empty() const { return batch_->Count() == 0; }
size_t WriteBatch::count() const { return batch_->Count(); }

// --- Index: open and close ---------------------------------------------------

Result<std::unique_ptr<Index>> Index::OpenDb(const std::string& dir, const Options& options,
                                             bool create) {
  const bool read_only = options.read_only && !create;
  rocksdb::DBOptions dbo = MakeDbOptions(create);
  std::vector<rocksdb::ColumnFamilyDescriptor> cfds = MakeCfDescriptors(options.block_cache_bytes);
  const std::string what = "index " + dir;

  if (!create) {
    // A foreign RocksDB (or a future kvfs with other families) is refused
    // before RocksDB would complain about unopened families.
    std::vector<std::string> names;
    KVFS_RETURN_IF_ERROR(
        FromRocks(rocksdb::DB::ListColumnFamilies(dbo, dir, &names), what + ": reading MANIFEST"));
    std::set<std::string> want, have(names.begin(), names.end());
    for (const auto& d : cfds) want.insert(d.name);
    if (want != have) {
      std::string list;
      for (const auto& n : have) list += (list.empty() ? "" : ", ") + n;
      return Status::Error(EINVAL, what + ": not a kvfs index (column families: " + list + ")");
    }
  }

  std::unique_ptr<Index> idx(new Index());
  idx->dir_ = dir;
  idx->read_only_ = read_only;
  rocksdb::DB* raw = nullptr;
  rocksdb::Status s;
  if (read_only) {
    // The secondary path only holds the info log, which SpdLogger
    // replaces; nothing is written there.
    s = rocksdb::DB::OpenAsSecondary(dbo, dir, dir, cfds, &idx->cfs_, &raw);
  } else {
    s = rocksdb::DB::Open(dbo, dir, cfds, &idx->cfs_, &raw);
  }
  if (!s.ok()) {
    if (IsLockHeld(s)) {
      return Status::Error(EBUSY, what + " is in use (open read-write by another kvfs process "
                                         "or Index): " + s.ToString());
    }
    if (create && s.IsInvalidArgument() && Contains(s.ToString(), "exists")) {
      return Status::Error(EEXIST, what + " already exists: " + s.ToString());
    }
    return FromRocks(s, what + ": open");
  }
  idx->db_.reset(raw);
  if (idx->cfs_.size() != kNumCfs) {
    return Status::Error(EIO, what + ": RocksDB returned " + std::to_string(idx->cfs_.size()) +
                                  " column family handles");
  }
  return idx;
}

Result<std::unique_ptr<Index>> Index::Create(const std::string& dir, const VolumeRecord& volume,
                                             uint32_t root_uid, uint32_t root_gid) {
  if (::mkdir(dir.c_str(), 0755) != 0) {
    if (errno != EEXIST) return Status::FromErrno("creating index directory " + dir);
    struct stat st {};
    if (::stat(dir.c_str(), &st) != 0) return Status::FromErrno(dir);
    if (!S_ISDIR(st.st_mode)) return Status::Error(ENOTDIR, "index directory " + dir);
  }
  // RocksDB's own error_if_exists check is a backstop; this one gives the
  // clear errno and covers a half-created index (IDENTITY without CURRENT).
  for (const char* f : {"/CURRENT", "/IDENTITY"}) {
    Status st = Exists(dir + f);
    if (st.ok()) return Status::Error(EEXIST, dir + " already holds an index (" + (dir + f) + ")");
    if (st.code() != ENOENT) return st;
  }

  KVFS_ASSIGN_OR_RETURN(std::unique_ptr<Index> idx, OpenDb(dir, Options{}, /*create=*/true));
  idx->volume_ = volume;
  idx->next_ino_ = kRootIno + 1;

  Inode root;
  root.ino = kRootIno;
  root.mode = S_IFDIR | 0755;
  root.uid = root_uid;
  root.gid = root_gid;
  root.nlink = 2;
  root.atime_ns = root.mtime_ns = root.ctime_ns = NowNs();
  root.generation = 1;

  // One synced batch: the index either has all of it or (after a crash
  // here) no volume record, which Open refuses as "not a kvfs index".
  rocksdb::WriteBatch b;
  rocksdb::Status s = b.Put(idx->cf(kDefault), kVolumeKey, volume.Encode());
  if (s.ok()) s = b.Put(idx->cf(kDefault), kNextInoKey, EncodeNextIno(kRootIno + 1));
  if (s.ok()) s = b.Put(idx->cf(kInodes), InodeKey(kRootIno), root.Encode());
  rocksdb::WriteOptions wo;
  wo.sync = true;
  if (s.ok()) s = idx->db_->Write(wo, &b);
  KVFS_RETURN_IF_ERROR(FromRocks(s, "index " + dir + ": writing the volume record"));
  return idx;
}

Status Index::SetVolume(const VolumeRecord& volume) {
  if (volume.volume_uuid != volume_.volume_uuid || volume.index_uuid != volume_.index_uuid) {
    return Status::Error(EINVAL, "index " + dir_ + ": volume record of another volume");
  }
  rocksdb::WriteOptions wo;
  wo.sync = true;
  rocksdb::Status s = db_->Put(wo, cf(kDefault), kVolumeKey, volume.Encode());
  KVFS_RETURN_IF_ERROR(FromRocks(s, "index " + dir_ + ": writing the volume record"));
  volume_ = volume;
  return Status::OK();
}

Result<std::unique_ptr<Index>> Index::Open(const std::string& dir, const Options& options) {
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0) {
    return Status::FromErrno("index directory " + dir);
  }
  if (!S_ISDIR(st.st_mode)) return Status::Error(ENOTDIR, "index directory " + dir);
  if (Status e = Exists(dir + "/CURRENT"); !e.ok()) {
    if (e.code() == ENOENT) {
      return Status::Error(ENOENT, "no kvfs index in " + dir + " (no RocksDB CURRENT file)");
    }
    return e;
  }

  KVFS_ASSIGN_OR_RETURN(std::unique_ptr<Index> idx, OpenDb(dir, options, /*create=*/false));
  const std::string what = "index " + dir;
  std::string v;
  rocksdb::Status s = idx->db_->Get(rocksdb::ReadOptions(), idx->cf(kDefault), kVolumeKey, &v);
  if (s.IsNotFound()) {
    return Status::Error(EINVAL, what + ": not a kvfs index (no volume record)");
  }
  KVFS_RETURN_IF_ERROR(FromRocks(s, what + ": reading the volume record"));
  Result<VolumeRecord> vol = VolumeRecord::Decode(v);
  if (!vol.ok()) return vol.status().Annotate(what);
  if (vol->format_version > kFormatVersion) {
    return Status::Error(EINVAL, what + ": format version " + std::to_string(vol->format_version) +
                                     " is newer than this kvfs (" +
                                     std::to_string(kFormatVersion) + ")");
  }
  idx->volume_ = *vol;
  KVFS_RETURN_IF_ERROR(idx->LoadNextIno());
  return idx;
}

Status Index::LoadNextIno() {
  const std::string what = "index " + dir_;
  std::string v;
  rocksdb::Status s = db_->Get(rocksdb::ReadOptions(), cf(kDefault), kNextInoKey, &v);
  if (s.IsNotFound()) return Status::Error(EUCLEAN, what + ": no next_ino record");
  KVFS_RETURN_IF_ERROR(FromRocks(s, what + ": reading next_ino"));
  Result<uint64_t> next = DecodeNextIno(v);
  if (!next.ok()) return next.status().Annotate(what);
  uint64_t n = std::max<uint64_t>(*next, kRootIno + 1);
  // Belt and braces: never below the highest inode present (one seek).
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions(), cf(kInodes)));
  it->SeekToLast();
  if (it->Valid()) {
    Result<uint64_t> last = DecodeInodeKey(View(it->key()));
    if (!last.ok()) return last.status().Annotate(what + ": inodes family");
    if (*last != std::numeric_limits<uint64_t>::max()) n = std::max(n, *last + 1);
  }
  KVFS_RETURN_IF_ERROR(FromRocks(it->status(), what + ": finding the last inode"));
  next_ino_ = n;
  return Status::OK();
}

Index::~Index() {
  if (db_ == nullptr) return;
  for (rocksdb::ColumnFamilyHandle* h : cfs_) {
    db_->DestroyColumnFamilyHandle(h).PermitUncheckedError();  // frees the handle; cannot fail
  }
  cfs_.clear();
  // Committed batches are already in the WAL (synced ones on disk); a Close
  // error only means a flush was not done, which reopening redoes.
  db_->Close().PermitUncheckedError();
  db_.reset();
}

rocksdb::ColumnFamilyHandle* Index::handle(std::string_view name) const {
  if (name == rocksdb::kDefaultColumnFamilyName) return cf(kDefault);
  if (name == kInodesCf) return cf(kInodes);
  if (name == kEntriesCf) return cf(kEntries);
  if (name == kOrphansCf) return cf(kOrphans);
  return nullptr;
}

// --- Index: reads ------------------------------------------------------------

Result<Inode> Index::GetInode(uint64_t ino) const {
  rocksdb::PinnableSlice v;
  rocksdb::Status s = db_->Get(rocksdb::ReadOptions(), cf(kInodes), InodeKey(ino), &v);
  if (s.IsNotFound()) return Status::Error(ENOENT, "inode " + std::to_string(ino));
  // Contexts are built only on failure: these run for every lookup.
  if (!s.ok()) return FromRocks(s, "index " + dir_ + ": reading inode " + std::to_string(ino));
  return Inode::Decode(ino, View(v));
}

Result<uint64_t> Index::LookupEntry(uint64_t parent, std::string_view name) const {
  const std::string key = EntryKey(parent, name);
  rocksdb::PinnableSlice v;
  rocksdb::Status s = db_->Get(rocksdb::ReadOptions(), cf(kEntries), key, &v);
  // A missing name is the common answer of a stat storm: no formatted
  // message (it cost 5% of a batch EXISTS).
  if (s.IsNotFound()) return Status::Error(ENOENT, "no such entry");
  if (!s.ok()) return FromRocks(s, "index " + dir_ + ": looking up " + KeyToString(key));
  Result<uint64_t> child = DecodeEntryValue(View(v));
  if (!child.ok()) return child.status().Annotate("entry " + KeyToString(key));
  return child;
}

Status Index::ListEntries(uint64_t parent, std::string_view after,
                          const std::function<bool(std::string_view, uint64_t)>& fn) const {
  const std::string prefix = EntryPrefix(parent);
  std::string start = prefix;
  start.append(after);
  // The upper bound ends the scan at the directory's last entry; the prefix
  // extractor lets the seek skip files that hold no entry of `parent`.
  std::string upper;
  rocksdb::Slice upper_slice;
  rocksdb::ReadOptions ro;
  ro.prefix_same_as_start = true;
  if (parent != std::numeric_limits<uint64_t>::max()) {
    upper = EntryPrefix(parent + 1);
    upper_slice = upper;
    ro.iterate_upper_bound = &upper_slice;
  }
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(ro, cf(kEntries)));
  for (it->Seek(start); it->Valid(); it->Next()) {
    const std::string_view key = View(it->key());
    if (key.substr(0, 8) != prefix) break;
    if (!after.empty() && key == start) continue;  // strictly after `after`
    Result<EntryKeyParts> k = DecodeEntryKey(key);
    if (!k.ok()) return k.status().Annotate("index " + dir_);
    Result<uint64_t> child = DecodeEntryValue(View(it->value()));
    if (!child.ok()) return child.status().Annotate("index " + dir_ + ": " + KeyToString(key));
    if (!fn(k->name, *child)) return Status::OK();
  }
  if (it->status().ok()) return Status::OK();
  return FromRocks(it->status(), "index " + dir_ + ": listing directory " + std::to_string(parent));
}

Result<bool> Index::HasEntries(uint64_t parent) const {
  bool any = false;
  KVFS_RETURN_IF_ERROR(ListEntries(parent, "", [&](std::string_view, uint64_t) {
    any = true;
    return false;
  }));
  return any;
}

namespace {

// Drives one full scan of `it`: decode(key, value) turns a record into a
// call of the caller's fn (returning whether to go on) or a Status.
template <typename Decode>
Status Scan(rocksdb::Iterator* it, const std::string& what, const Index::BadRecordFn& on_bad,
            Decode decode) {
  for (it->SeekToFirst(); it->Valid(); it->Next()) {
    const std::string_view key = View(it->key());
    Result<bool> more = decode(key, View(it->value()));
    if (!more.ok()) {
      Status bad = more.status().Annotate(what + ", key " + KeyToString(key));
      if (!on_bad) return bad;
      if (!on_bad(bad)) return Status::OK();
      continue;
    }
    if (!*more) return Status::OK();
  }
  return FromRocks(it->status(), what + ": scan");
}

}  // namespace

Status Index::WarmCache(uint64_t max_bytes) const {
  rocksdb::ReadOptions ro = ScanReadOptions();
  ro.fill_cache = true;
  uint64_t read = 0;
  for (Cf which : {kEntries, kInodes}) {
    std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(ro, cf(which)));
    for (it->SeekToFirst(); it->Valid() && read < max_bytes; it->Next()) {
      read += it->key().size() + it->value().size();
    }
    if (!it->status().ok()) return FromRocks(it->status(), "index " + dir_ + ": warming the cache");
  }
  return Status::OK();
}

Status Index::ForEachInode(const std::function<bool(const Inode&)>& fn,
                           const BadRecordFn& on_bad) const {
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(ScanReadOptions(), cf(kInodes)));
  return Scan(it.get(), "index " + dir_ + ": inodes", on_bad,
              [&](std::string_view key, std::string_view value) -> Result<bool> {
                KVFS_ASSIGN_OR_RETURN(uint64_t ino, DecodeInodeKey(key));
                KVFS_ASSIGN_OR_RETURN(Inode inode, Inode::Decode(ino, value));
                return fn(inode);
              });
}

Status Index::ForEachEntry(
    const std::function<bool(uint64_t parent, std::string_view name, uint64_t child)>& fn,
    const BadRecordFn& on_bad) const {
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(ScanReadOptions(), cf(kEntries)));
  return Scan(it.get(), "index " + dir_ + ": entries", on_bad,
              [&](std::string_view key, std::string_view value) -> Result<bool> {
                KVFS_ASSIGN_OR_RETURN(EntryKeyParts k, DecodeEntryKey(key));
                KVFS_ASSIGN_OR_RETURN(uint64_t child, DecodeEntryValue(value));
                return fn(k.parent, k.name, child);
              });
}

Status Index::ForEachOrphan(const std::function<bool(uint64_t ino)>& fn,
                            const BadRecordFn& on_bad) const {
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(ScanReadOptions(), cf(kOrphans)));
  return Scan(it.get(), "index " + dir_ + ": orphans", on_bad,
              [&](std::string_view key, std::string_view value) -> Result<bool> {
                KVFS_ASSIGN_OR_RETURN(uint64_t ino, DecodeInodeKey(key));
                KVFS_RETURN_IF_ERROR(DecodeOrphanValue(value));
                return fn(ino);
              });
}

// --- Index: writes -----------------------------------------------------------

uint64_t Index::AllocateIno() { return next_ino_.fetch_add(1); }

WriteBatch Index::NewBatch() { return WriteBatch(this); }

Status Index::Commit(WriteBatch& batch, bool sync) {
  if (read_only_) return Status::Error(EROFS, "index " + dir_ + " is open read-only");
  KVFS_RETURN_IF_ERROR(batch.error_);
  if (batch.empty()) return sync ? SyncWal() : Status::OK();
  KVFS_RETURN_IF_ERROR(failure());
  // Every inode number this batch uses was allocated before this load, so
  // the persisted counter is past all of them when the batch is.
  rocksdb::WriteBatch& b = *batch.batch_;
  b.SetSavePoint();
  rocksdb::Status s = b.Merge(cf(kDefault), kNextInoKey, EncodeNextIno(next_ino_.load()));
  if (s.ok()) {
    rocksdb::WriteOptions wo;
    wo.sync = sync;
    s = db_->Write(wo, &b);
  }
  if (!s.ok()) {
    b.RollbackToSavePoint().PermitUncheckedError();  // drops only our Merge
    return failure_.Record(
        FromRocks(s, "index " + dir_ + ": commit of " + std::to_string(batch.count()) + " ops"));
  }
  b.Clear();
  return Status::OK();
}

Status Index::SyncWal() {
  if (read_only_) return Status::OK();
  KVFS_RETURN_IF_ERROR(failure());
  rocksdb::Status s = db_->SyncWAL();
  if (s.ok()) return Status::OK();
  return failure_.Record(FromRocks(s, "index " + dir_ + ": syncing the WAL"));
}

Status Index::failure() const { return failure_.Get(); }

}  // namespace kvfs::index
