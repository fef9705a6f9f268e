// FileData: the owner of one regular file's data state ahead of the index,
// behind its inode's lock (InodeState::mu(), the one lock of this part,
// which clang's thread-safety analysis checks: suite tsa).
//
// What it owns:
//   - the served-open protocol: the file memory (fs/file_memory.h) opens
//     are served from, the opens served from it and those waiting for its
//     load, and whether a writer used it. The kernel's rule for FUSE
//     passthrough -- a file's opens are all served from its memory, or
//     none is -- is checked in one place (OthersServedFrom), and the file
//     memory cache learns which memories opens use from here alone
//     (FileMemory::served/awaited, published by this part).
//   - the device commands in flight on the file's behalf: reads of its
//     extents (extents freed meanwhile wait for them: KeepForReads), writes
//     of its chunks (changes that must capture them wait: Gate), the first
//     error of a write, and whether installed data waits for a change to
//     capture it. Eviction asks Quiescent() whether the file may go.
//   - the memory those commands read into and write from: a request made by
//     ReadInto holds its target (a file memory, a cache entry) until its
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

#include <cstdint>
#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "common/extent.h"
#include "common/mutex.h"
#include "common/status.h"
#include "device/block_io.h"

namespace kvfs::fs {

class FileMemory;
struct Change;

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
  // no write in flight, no change waiting to capture written data. Eviction
  // lets only such a file go (with its own rules: fs/eviction_rules.h);
  // staged chunks are the inode's (InodeState::chunks) and checked there.
  bool Quiescent() const REQUIRES(mu_);

  // ------------------------------------------------- memory of the commands
  // A device read of `len` bytes at `byte_off` of `device` into `at`,
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
