// FileData: the owner of one regular file's data state ahead of the index,
// behind its inode's lock (InodeState::mu(), the one lock of this part,
// which clang's thread-safety analysis checks: suite tsa).
//
// What it owns:
//   - the file's chunks (kChunkBytes each, at chunk-aligned offsets): per
//     chunk a staged version (written by write(), not yet submitted), the
//     newest version being written, and the installed extents (written,
//     named by the index once a change captures them). The versions a load
//     of the file holds (Version, AtVersion) come from here, and the
//     halves of write-behind (Stage, CopyIn, Submit, Written, Truncate),
//     of the read path (PlanRead) and of the commits (Capture, TakeAll)
//     that touch them. A chunk's installed extents cover [chunk start,
//     chunk start + AlignUp(content, 4 KiB)); a chunk never shares an
//     extent with another.
//   - the served-open protocol: the file memory (fs/file_memory.h) opens
//     are served from, the opens served from it and those waiting for its
//     load, and whether a writer used it. The kernel's rule for FUSE
//     passthrough -- a file's opens are all served from its memory, or
//     none is -- is checked in one place (OthersServedFrom), and the file
//     memory cache learns which memories opens use from here alone
//     (FileMemory::serves_opens/awaited, published by this part).
//   - the device commands in flight on the file's behalf: reads of its
//     extents (extents freed meanwhile wait for them: KeepForReads), writes
//     of its chunks (changes that must capture them wait: Gate), the first
//     error of a write, and whether installed data waits for a change to
//     capture it. Eviction asks Quiescent() whether the file may go.
//   - the memory those commands read into and write from: a request made by
//     ReadInto or WriteFrom (LoadInto, write-behind's writes) holds its
//     target (a file memory, a cache entry, a chunk version) until its
//     completion has run, so memory a command uses cannot be released or
//     reused under it whatever happens to the file meanwhile (a drop of the
//     cache, an eviction, a newer version, a truncate).
//
// Every regular file's InodeState has one (a directory's stays empty). Its
// methods are narrow: each keeps the state consistent by itself, and the
// caller holds the inode's lock (REQUIRES(mu())), as the analysis checks.
// It calls nothing outside itself but the memory it holds: freeing space,
// queuing changes and submitting requests stay with the caller (they take
// locks after this one).
//
// Thread safety: every method REQUIRES mu() unless it says otherwise.
#pragma once

#include <sys/types.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "common/extent.h"
#include "common/mutex.h"
#include "common/status.h"
#include "device/block_io.h"
#include "device/buffer_pool.h"
#include "index/records.h"

namespace kvfs::fs {

class FileMemory;
struct Change;

// A version of a file, as a file memory holds it: its size and, by chunk
// index, each chunk's installed (or being written) version.
struct MemoryVersion {
  uint64_t size = 0;
  std::vector<std::pair<uint64_t, uint64_t>> chunks;
  bool operator==(const MemoryVersion&) const = default;
};

inline constexpr uint64_t kChunkBytes = 1 << 20;

// One version of a chunk's content in a pool buffer. Immutable once it is
// in flight; bytes past `valid` are zero.
struct ChunkBuf {
  device::PoolBuffer buf;
  uint64_t valid = 0;          // content bytes from the chunk start
  // Bytes [0, clean) hold content or zeros; [clean, end) may hold garbage
  // from the buffer's last use. Zeroing lazily (ZeroTo) instead of the whole
  // 1 MiB buffer when it is staged saves a memset of 1 MiB per stored key.
  uint64_t clean = 0;
  // Zeroes [clean, hi) if needed, so that [0, hi) holds content or zeros.
  void ZeroTo(uint64_t hi) {
    if (hi <= clean) return;
    std::memset(buf.data() + clean, 0, hi - clean);
    clean = hi;
  }
  // Copies chunk bytes [lo, hi) to `dst`; past `clean` (a truncate grew the
  // file) they read as zeros.
  void CopyOut(uint64_t lo, uint64_t hi, char* dst) const {
    const uint64_t have = std::clamp(clean, lo, hi);
    std::memcpy(dst, buf.data() + lo, have - lo);
    std::memset(dst + (have - lo), 0, hi - have);
  }
  std::vector<Extent> alloc;   // space reserved for this version
  uint64_t seq = 0;            // orders versions of one chunk
  uint64_t trunc_epoch = 0;    // a truncate since then makes it obsolete
};

struct ChunkState {
  std::shared_ptr<ChunkBuf> staged;    // written by write(), not yet submitted
  std::shared_ptr<ChunkBuf> inflight;  // newest version being written
  std::vector<index::FileExtent> extents;  // installed (written) version
  uint64_t installed_seq = 0;
  // Content bytes of the installed version from the chunk start (0: none):
  // a capture that cannot name a newer version yet names this one, and
  // needs to know how far it reaches (its extents end at a block).
  uint64_t installed_valid = 0;
  // FileData's count of changes at the chunk's last change: a truncate
  // that wrote the chunk's head with the lock let go of checks it.
  uint64_t gen = 0;
  // Its newest write failed: reads of it fail with EIO, and the committed
  // size stays below it, until a later version is written.
  bool failed = false;
  bool empty() const { return !staged && !inflight && extents.empty() && !failed; }
};

// A chunk's installed version, as a load or a read from the device needs
// it: nothing staged or being written over it.
struct InstalledChunk {
  uint64_t ci = 0;
  uint64_t seq = 0;
  std::vector<index::FileExtent> extents;
};

// What the completion of a chunk version's writes changed (FileData::Written).
struct WrittenOutcome {
  std::vector<Extent> free_now;  // never indexed: the caller frees them
  bool installed = false;        // the chunk's cached bytes are an older version's
  bool queue_change = false;     // a change must capture it (none is queued)
  bool first_error = false;      // the file's first write error
  // Changes that waited for the writes in flight (none is left): to open.
  std::vector<std::shared_ptr<Change>> gates;
};

// What opens served from a file's memory changed in its attributes: the
// size (and a newer mtime) are in the memory until the bytes are written out.
struct ServedAttrs {
  uint64_t size = 0;
  int64_t mtime_ns = 0;
};

class FileData {
 public:
  // `mu`: the lock of the inode that holds it, which outlives it.
  explicit FileData(Mutex& mu) : mu_(mu) {}
  ~FileData();
  FileData(const FileData&) = delete;
  FileData& operator=(const FileData&) = delete;

  Mutex& mu() const RETURN_CAPABILITY(mu_) { return mu_; }

  // ---------------------------------------------------------------- chunks
  // The extents of the file's record (at load from the index; the file
  // `size` bytes), installed. False (and nothing kept) if one crosses a
  // chunk's end.
  bool Load(const std::vector<index::FileExtent>& extents, uint64_t size) REQUIRES(mu_);
  // Installs a chunk written whole for a file no one else sees yet
  // (WriteFile's new inode): extents `alloc` laid out from the chunk's
  // start, with checksums `crcs`, holding `valid` content bytes.
  void Install(uint64_t ci, const std::vector<Extent>& alloc, const std::vector<uint32_t>& crcs,
               uint64_t valid) REQUIRES(mu_);
  size_t chunk_count() const REQUIRES(mu_) { return chunks_.size(); }

  // Versions. A file of `size` has a version a memory may hold when no
  // chunk is staged (its bytes may still change) and none lost its data to
  // a failed write; a chunk being written is at that version's number.
  bool HasVersion() const REQUIRES(mu_);
  std::optional<MemoryVersion> Version(uint64_t size) const REQUIRES(mu_);
  // Whether the file (of `size`) is at version `v` now, with no copy made.
  bool AtVersion(const MemoryVersion& v, uint64_t size) const REQUIRES(mu_);

  // A load of the whole file (of `size`) into `m`, made for Version(size):
  // the bytes `m` maps at least (extents cover whole blocks, maybe past the
  // size), and the device reads the load needs (one per installed extent;
  // a version being written is copied from its buffer instead).
  uint64_t MemoryBytes(uint64_t size) const REQUIRES(mu_);
  size_t LoadReads() const REQUIRES(mu_);
  // Fills `m` with what is in memory here (versions being written; holes
  // zeroed unless `m` is zeroed already) and appends to `reqs` the
  // LoadReads() device reads of the rest, each holding `m` (ReadInto),
  // calling `done` when it completes, promoted with `m`.
  void LoadInto(const std::shared_ptr<FileMemory>& m, uint64_t size,
                const std::function<void(Status)>& done, std::vector<device::IoRequest>* reqs)
      REQUIRES(mu_);
  // The chunks in [first, end) that are installed only (nothing staged or
  // being written over them), for a load into the chunk cache.
  std::vector<InstalledChunk> InstalledChunks(uint64_t first, uint64_t end) const REQUIRES(mu_);
  // Chunk `ci` if it is installed only and not lost.
  std::optional<InstalledChunk> Installed(uint64_t ci) const REQUIRES(mu_);

  // Plans a read of file bytes [off, off + len) into `dst`: bytes in
  // memory here (staged, being written) are copied and holes zeroed now;
  // for the installed bytes of each chunk, [pos, hi) at `dst + (pos -
  // off)`, `device(pos, hi, ci, seq, extents)` is called (still under the
  // lock) to read them from the cache or the device. EIO (nothing planned) for
  // bytes a failed write lost. REQUIRES: off + len <= the file's size.
  using ReadInstalled = std::function<void(uint64_t pos, uint64_t hi, uint64_t ci, uint64_t seq,
                                           const std::vector<index::FileExtent>& extents)>;
  Status PlanRead(uint64_t off, uint64_t len, char* dst, const ReadInstalled& device) const
      REQUIRES(mu_);

  // A reader of a file too large to load whole read [off, off + len) of
  // `size` bytes: if it continues the last read, the range to keep loading
  // ahead of it within `window` bytes (ReadAheadTo once started); else
  // nullopt.
  std::optional<std::pair<uint64_t, uint64_t>> NextReadAhead(uint64_t off, uint64_t len,
                                                             uint64_t size, uint64_t window)
      REQUIRES(mu_);
  void ReadAheadTo(uint64_t to) REQUIRES(mu_) { read_ahead_to_ = to; }

  // ------------------------------------------------------------ write-behind
  bool Staged(uint64_t ci) const REQUIRES(mu_);
  // The chunks staged now, in order.
  std::vector<uint64_t> StagedChunks() const REQUIRES(mu_);
  enum class Staging {
    kStaged,          // `cb` is the chunk's staged version now
    kStagedMeanwhile,  // another writer staged the chunk: `cb` is not used
    kReadOldBytes,    // read *old into cb's buffer, then StageRead
  };
  // Makes `cb` (a pool buffer with space reserved) chunk `ci`'s staged
  // version holding its current content, for a write of chunk bytes [lo,
  // hi) into a file of `size`: copied from the version being written, or
  // zeros (a hole, a full overwrite). A partial overwrite of installed data
  // needs its old bytes: kReadOldBytes, with the installed version to read
  // into cb's buffer (whose holes are zeroed) in *old.
  Staging Stage(uint64_t ci, const std::shared_ptr<ChunkBuf>& cb, uint64_t size, uint64_t lo,
                uint64_t hi, InstalledChunk* old) REQUIRES(mu_);
  // The old bytes `old` were read into cb (the lock let go of meanwhile,
  // the file then `size_then` bytes): staged (kStaged), or the chunk or the
  // size changed meanwhile (Stage again: its answer is returned).
  Staging StageRead(uint64_t ci, const std::shared_ptr<ChunkBuf>& cb, const InstalledChunk& old,
                    uint64_t size_then, uint64_t size_now, uint64_t lo, uint64_t hi,
                    InstalledChunk* again) REQUIRES(mu_);
  // The space a write up to chunk byte `hi` of staged chunk `ci` needs
  // beyond what its staged version reserved (0: enough).
  uint64_t ReservationShort(uint64_t ci, uint64_t hi) const REQUIRES(mu_);
  // The staged version of `ci` now (an identity to compare, never read).
  const void* StagedId(uint64_t ci) const REQUIRES(mu_);
  // Adds `more` to the reservation of `ci`'s staged version if it is still
  // `id` (false: the caller frees `more`).
  bool GrowReservation(uint64_t ci, const void* id, const std::vector<Extent>& more)
      REQUIRES(mu_);
  // Copies `src` into staged chunk `ci` at chunk bytes [lo, hi).
  void CopyIn(uint64_t ci, uint64_t lo, uint64_t hi, const char* src) REQUIRES(mu_);
  // Submits staged chunk `ci`: its version becomes the one being written
  // (BeginWrite counted), returned with exactly the space its bytes take
  // reserved; the rest of its reservation goes to *spare for the caller to
  // free. Null when nothing is left in the chunk (a truncate to its start:
  // its old extents are freed after the next capture).
  std::shared_ptr<ChunkBuf> Submit(uint64_t ci, std::vector<Extent>* spare) REQUIRES(mu_);
  // The writes of version `cb` of chunk `ci` completed with `st`:
  // installed if still current; see WrittenOutcome. `taken`: the file's
  // delete was built (TakeAll took its extents), so nothing is installed
  // any more. A file only deleted in memory still installs: changes queued
  // before its delete may capture its record, and while the index names
  // the file (until the delete commits) that record must name its data.
  // Ends the write (EndWrite).
  WrittenOutcome Written(uint64_t ci, const std::shared_ptr<ChunkBuf>& cb, const Status& st,
                         bool taken) REQUIRES(mu_);
  // A truncate of a file of `old_size` to `new_size`: whether the cut falls
  // inside a chunk that holds data (staged, being written, written), whose
  // head must then be written before the cut takes effect (TakeHead,
  // HeadCurrent, Truncate with the head). A cut that took effect before
  // its head is written would leave captures nothing to name but the new
  // size over the old chunk's extents or over none: after a crash, a size
  // the file never had or its bytes gone.
  bool TruncateWritesHead(uint64_t new_size, uint64_t old_size) const REQUIRES(mu_);
  // The head of the chunk a cut at `new_size` falls in, as it is now:
  // bytes [0, new_size % kChunkBytes) of it. What is in memory (staged,
  // being written) is copied into `buf` now (zeros past it); else the
  // installed extents to read into `buf` (zeroed, holes stay zeros) are in
  // `read`. REQUIRES: TruncateWritesHead.
  struct Head {
    uint64_t ci = 0;
    uint64_t gen = 0;  // the chunk's state it was taken from
    std::vector<index::FileExtent> read;
  };
  Head TakeHead(uint64_t new_size, char* buf) const REQUIRES(mu_);
  // Whether the chunk is still as TakeHead found it (the lock was let go
  // of while the head was read and written).
  bool HeadCurrent(const Head& h) const REQUIRES(mu_);
  // The head, written: its extents (laid out from the chunk's start, with
  // checksums) and content bytes.
  struct WrittenHead {
    uint64_t ci = 0;
    std::vector<Extent> alloc;
    std::vector<uint32_t> crcs;
    uint64_t valid = 0;
  };
  // The truncate itself: chunks past the new size are dropped (their
  // extents freed after the next capture; their staged space to
  // *free_now, their indexes to *dropped), versions being written of them
  // made obsolete. `head` (TruncateWritesHead: required, HeadCurrent) is
  // installed as its chunk's version, replacing what was staged (its
  // space to *free_now), written (obsolete) or installed there.
  void Truncate(uint64_t new_size, uint64_t old_size, std::vector<Extent>* free_now,
                std::vector<uint64_t>* dropped, const WrittenHead* head = nullptr) REQUIRES(mu_);

  // ---------------------------------------------------------------- commits
  // The data half of capturing the record of a file of `size` whose last
  // captured size is `durable`: the size the record may have, the extents
  // it names, and the replaced extents to free once it commits (*frees).
  // Captured() too. A chunk whose newest version is not written yet is
  // named at its installed (older, complete) version while that holds all
  // the bytes the file has in it; else the size is held back to where that
  // version ends (or to the captured size, or to the chunk's start), so a
  // crash never shows a grown file with a hole where unwritten data should
  // be, nor a file cut below data already written.
  uint64_t Capture(uint64_t size, uint64_t durable, std::vector<index::FileExtent>* extents,
                   std::vector<Extent>* frees) REQUIRES(mu_);
  // The file's record is deleted: every extent it has or had, to *frees.
  void TakeAll(std::vector<Extent>* frees) REQUIRES(mu_);

  // ---------------------------------------------------------- served opens
  // The memory the file's opens are served from (while any is), or null.
  // While it is set it is the file's authority: writes through those opens
  // land in it, and reads that fs/ answers read it.
  std::shared_ptr<FileMemory> served() const REQUIRES(mu_);
  // The kernel's rule, in this one place: an open may be served from `m`
  // (null: a memory not made yet, which no open uses) only when each of
  // the file's `other_opens` other opens (counted by the inode table) is
  // served from `m` or waits for its load. Not counted here, an open of the
  // file (a handle like Open()'s) would read and write through fs/ while
  // the served ones use the memory.
  bool OthersServedFrom(const FileMemory* m, int other_opens) const REQUIRES(mu_);
  // An open waits for `m` to load, to be served from it then (counted now:
  // the cache keeps `m` while it waits, and OthersServedFrom counts it).
  // At most one memory is waited for at a time (OthersServedFrom lets no
  // open wait for another one meanwhile).
  void AddPending(std::shared_ptr<FileMemory> m) REQUIRES(mu_);
  // An open that waited for `m` stops waiting, and is served from it when
  // `may` (its load succeeded, it is still the file's memory and the
  // kernel can read it), it holds the file's bytes (opens are served from
  // it already, or `current`: it holds the version the file is at) and the
  // rule above holds for the file's `file_opens` opens (this one among
  // them). Counted as served before it stops counting as waiting: the
  // cache never sees `m` unused while it may still be served. Returns
  // whether it is served.
  bool EndPending(const std::shared_ptr<FileMemory>& m, bool may, bool current, int file_opens,
                  bool writable) REQUIRES(mu_);
  // An open is served from served() (which serves opens already: every
  // open of the file is). `writable`: a writer, whose bytes land in the
  // memory; after the last served open the memory is then dropped.
  void AddServed(bool writable) REQUIRES(mu_);
  // A served open of `m` is released. True when it was the last and a
  // writer used `m`: its bytes are the file's now (written out), and the
  // caller drops `m` from the cache so that the next load reads them back.
  bool ReleaseServed(const FileMemory& m) REQUIRES(mu_);
  // With opens served from memory a writer used: true, and the size and
  // mtime the memory has (the kernel wrote there) in *out.
  bool ServedAttrsOf(ServedAttrs* out) const REQUIRES(mu_);
  // Sets the size of the served memory, if any (truncate, O_TRUNC,
  // fallocate; with `grow_only`, never shrinks). Served opens are counted
  // only on a loaded memory: one still loading is the target of device
  // reads, and is never resized under them.
  Status ResizeServed(uint64_t size, bool grow_only) REQUIRES(mu_);

  // ----------------------------------------------- device commands in flight
  // A device read of the file's extents starts: extents the index stops
  // naming meanwhile stay allocated until it ends (EndRead).
  void BeginRead() REQUIRES(mu_);
  // A read begun with BeginRead ended. Returns the extents that waited
  // for the last one, for the caller to free.
  [[nodiscard]] std::vector<Extent> EndRead() REQUIRES(mu_);
  // Extents the index stopped naming: kept (true) while reads are in
  // flight, to be returned by the last EndRead; false: nothing reads them,
  // the caller frees them now.
  bool KeepForReads(const std::vector<Extent>& extents) REQUIRES(mu_);
  int reads_in_flight() const REQUIRES(mu_) { return reads_in_flight_; }

  // A chunk version's device writes start.
  void BeginWrite() REQUIRES(mu_);
  // They completed. Returns the changes that waited for the writes in
  // flight (Gate) once none is left, for the caller to open.
  [[nodiscard]] std::vector<std::shared_ptr<Change>> EndWrite() REQUIRES(mu_);
  // `c` must capture the data being written now: with writes in flight it
  // waits for them (c->gates is set; EndWrite hands it back) and Gate
  // returns true; with none, false.
  bool Gate(const std::shared_ptr<Change>& c) REQUIRES(mu_);
  int writes_in_flight() const REQUIRES(mu_) { return writes_in_flight_; }
  // A write of the file's data failed with `code`: kept if it is the first
  // (returned true), and reported by flush, fsync and close from then on.
  bool NoteWriteError(int code) REQUIRES(mu_);
  int write_error() const REQUIRES(mu_) { return write_error_; }

  // A written version was installed: true if a change must be queued to
  // capture it (none is queued yet).
  bool NoteInstalled() REQUIRES(mu_);
  // A change captured the installed data (the record names it now).
  void Captured() REQUIRES(mu_) { change_queued_ = false; }
  bool change_queued() const REQUIRES(mu_) { return change_queued_; }

  // Nothing of the file's data is on its way to the device or the index:
  // nothing staged, no write in flight, no change waiting to capture written
  // data. Eviction lets only such a file go (with its own rules:
  // fs/eviction_rules.h).
  bool Quiescent() const REQUIRES(mu_);

  // ------------------------------------------------- memory of the commands
  // (Static: from any thread, no lock.) A device read of `len` bytes at `byte_off` of `device` into `at`,
  // inside the memory `owner` holds: the request keeps `owner` until done
  // has run, however the file's memory changes meanwhile. `group`: what a
  // reader that waits for it promotes (io::Scheduler::Promote).
  static device::IoRequest ReadInto(std::shared_ptr<const void> owner, char* at, uint32_t device,
                                    uint64_t byte_off, uint64_t len,
                                    std::function<void(Status)> done, const void* group);
  // A device write from `from`, inside the memory `owner` holds, as ReadInto.
  static device::IoRequest WriteFrom(std::shared_ptr<const void> owner, const char* from,
                                     uint32_t device, uint64_t byte_off, uint64_t len,
                                     std::function<void(Status)> done);

 private:
  // The opens served from `m` or waiting for it.
  int UsersOf(const FileMemory* m) const REQUIRES(mu_);
  // OthersServedFrom's rule, `self` of UsersOf(m) being the asking open.
  bool RuleHolds(const FileMemory* m, int other_opens, int self) const REQUIRES(mu_);
  // Tells the cache which memories opens use (FileMemory::serves_opens,
  // awaited): on `m`, after a change of the counts of `m`.
  void Publish(FileMemory& m) REQUIRES(mu_);

  Mutex& mu_;
  // By chunk index.
  std::map<uint64_t, ChunkState> chunks_ GUARDED_BY(mu_);
  uint64_t chunk_seq_ GUARDED_BY(mu_) = 0;
  uint64_t trunc_epoch_ GUARDED_BY(mu_) = 0;
  // Counts changes of chunks (ChunkState::gen).
  uint64_t gen_ GUARDED_BY(mu_) = 0;
  // The lowest size a truncate cut the file to since the last capture:
  // what the last captured size covered past it is gone.
  uint64_t cut_since_capture_ GUARDED_BY(mu_) = UINT64_MAX;
  // Replaced extents, freed after the next capture commits.
  std::vector<Extent> free_pending_ GUARDED_BY(mu_);
  // Reads of a file too large to load whole: where the last one ended, and
  // how far its chunks are being read ahead of the reader.
  uint64_t read_end_ GUARDED_BY(mu_) = 0;
  uint64_t read_ahead_to_ GUARDED_BY(mu_) = 0;
  // Served opens: while opens_ > 0, the memory they use.
  std::shared_ptr<FileMemory> served_ GUARDED_BY(mu_);
  int opens_ GUARDED_BY(mu_) = 0;
  bool written_ GUARDED_BY(mu_) = false;
  // Opens waiting for a load: while pending_ > 0, the memory they wait for.
  std::shared_ptr<FileMemory> awaited_ GUARDED_BY(mu_);
  int pending_ GUARDED_BY(mu_) = 0;

  int reads_in_flight_ GUARDED_BY(mu_) = 0;
  std::vector<Extent> free_after_reads_ GUARDED_BY(mu_);
  int writes_in_flight_ GUARDED_BY(mu_) = 0;
  std::vector<std::shared_ptr<Change>> gated_ GUARDED_BY(mu_);
  int write_error_ GUARDED_BY(mu_) = 0;
  bool change_queued_ GUARDED_BY(mu_) = false;
};

}  // namespace kvfs::fs
