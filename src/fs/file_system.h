// FileSystem: kvfs's POSIX semantics over a Volume, with no FUSE types.
//
// fuse/ decodes kernel requests, calls these methods and replies; tests drive
// them in-process. Inode numbers are the index's (kRootIno is the root).
//
// Write-behind, ordered (DESIGN.md "Semantics the connectors rely on"):
//   - Write() copies into a staging buffer from the volume's registered pool
//     and returns; full chunks go to the device at once, the rest at
//     Flush()/Fsync(). The pool is the bound on staged memory: a writer blocks
//     while it is exhausted (and staged chunks are pushed out meanwhile).
//   - New data always goes to free extents; live extents are never
//     overwritten. Every metadata change (create, a file's new extents and
//     size, rename, unlink, ...) is queued in the order the calls happened and
//     committed to the index in that order, each only after every data write
//     it depends on has completed and the devices have been flushed. So after
//     a crash a name never points at unwritten or half-written data, and what
//     is visible is a prefix of what happened.
//   - Fsync() returns after the file's data, the index (synced WAL) and the
//     device caches are durable, or with EIO if a background write of the file
//     failed. Flush() (close) returns an error already known for the file.
//   - An unlinked file that is still open stays usable through its handles;
//     its space is freed after the last Release().
//
// Permission checks: a mount with default_permissions leaves them to the
// kernel, and this layer checks only what the kernel cannot (name length,
// types, emptiness, loops). Without it the front end passes the caller as
// `const Caller* check` to every call that the kernel would have checked,
// and the call checks it (fs/access.h has the rules) in the same hold of
// its locks as the operation, before anything changes, with the kernel's
// errno and their order; null checks nothing. `check` must stay valid for
// the call. What each call checks is said beside it. The batch calls
// (LookupPath ... PrefetchFile) always check their `caller`.
//
// Per-call rules (which calls are refused with EROFS after a failed commit,
// which may wait for something slow and so must not run on a thread that
// must never wait, which metric records each): fs/calls.h, one table.
//
// Thread safety: every method may be called from any thread concurrently.
// Callbacks (`done`) run exactly once, on an engine or committer thread or
// inline before the method returns; they must not block on I/O.
#pragma once

#include <sys/types.h>

#include <array>
#include <atomic>
#include <chrono>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "fs/calls.h"
#include "fs/cache_stats.h"
#include "fs/eviction.h"
#include "fs/killpriv.h"
#include "io/lane.h"
#include "volume/volume.h"

namespace kvfs::fs {

enum class Call : uint8_t;  // fs/calls.h
class FileMemory;           // fs/file_memory.h
struct FileMemoryCounters;

struct Caller {
  uint32_t uid = 0;
  uint32_t gid = 0;
  pid_t pid = 0;
  // Supplementary groups; only the batch path fills them.
  std::vector<uint32_t> groups;
  // Set instead of `groups` where reading them costs (fuse/ reads /proc):
  // whether the caller is in group `gid`, asked only when the answer
  // decides a permission check. Must stay valid for the call it is passed to.
  std::function<bool(uint32_t gid)> in_group;
};

struct Attr {
  uint64_t ino = 0;
  uint32_t mode = 0;
  uint32_t nlink = 0;
  uint32_t uid = 0;
  uint32_t gid = 0;
  uint64_t size = 0;
  uint64_t blocks = 0;  // 512-byte units allocated
  int64_t atime_ns = 0;
  int64_t mtime_ns = 0;
  int64_t ctime_ns = 0;
  uint64_t generation = 0;
};

struct SetAttrRequest {
  std::optional<uint32_t> mode;  // permission bits only
  std::optional<uint32_t> uid;
  std::optional<uint32_t> gid;
  std::optional<uint64_t> size;  // truncate (grow or shrink)
  std::optional<int64_t> atime_ns;
  std::optional<int64_t> mtime_ns;
  bool atime_now = false;
  bool mtime_now = false;
  // Clear S_ISUID, and S_ISGID if group-execute is set, of a regular file
  // (the kernel's FATTR_KILL_SUIDGID: truncate or chown by an unprivileged
  // caller).
  bool kill_suidgid = false;
  // The caller, when it is not root (null for root). A mode it sets keeps
  // S_ISGID only if it is in the file's group (the new one, with `gid`),
  // as the kernel's chmod rule says. This also completes the kernel's own
  // mode changes after an unprivileged write, truncate or fallocate: FUSE
  // sends them computed with the rule that keeps S_ISGID without
  // group-execute, not the group-membership rule a local filesystem
  // applies (setattr_should_drop_sgid).
  KillPriv* unprivileged = nullptr;
  // The request came through an open file (ftruncate, fchmod, ...): a
  // truncate then needs no write permission (the open checked it).
  bool with_handle = false;
};

struct FsStats {
  uint64_t block_size = 4096;
  uint64_t total_blocks = 0;
  uint64_t free_blocks = 0;
  uint64_t files = 0;       // inodes in use (approximate)
  uint64_t free_files = 0;  // inodes still available
  uint32_t name_max = 255;
};

enum class PrefetchMode {
  kOff,     // read only what is asked for
  kOpen,    // opening a file for reading starts reading all of it
  kLookup,  // kOpen, and a lookup of a file starts reading it too
};

// When a read moves a file's atime (fs/atime.h): -o relatime, strictatime,
// noatime.
enum class AtimeMode : uint8_t { kRelatime, kStrictatime, kNoatime };

struct FileSystemOptions {
  // Commit a group of changes at most this often when nothing waits for it
  // (fsync commits at once).
  unsigned commit_interval_ms = 5;
  // RAM cache of file data (the kernel page cache is not used for it).
  uint64_t cache_bytes = 1ull << 30;
  PrefetchMode prefetch = PrefetchMode::kLookup;
  // Files larger than this are not prefetched whole by open or lookup.
  uint64_t prefetch_file_max_bytes = 64ull << 20;
  // Speculative (prefetched, not yet read) bytes allowed in the cache.
  uint64_t prefetch_budget_bytes = 512ull << 20;
  // In-flight device commands of each lane, indexed by io::LaneIndex; 0
  // keeps the default derived from the engine (README "Lanes"). A lane's
  // byte bound becomes commands x the engine's command size. Write +
  // prefetch must stay below the device's commands, so that reads always
  // find room (Create() fails with EINVAL otherwise).
  std::array<uint32_t, io::kLaneCount> lane_commands{};
  // verify=on: data read from the device is checked against each extent's
  // crc32c before it is handed out; a mismatch fails the read with EIO
  // (fs/read_verify.h). Extents are then always read whole.
  bool verify_reads = false;
  AtimeMode atime = AtimeMode::kRelatime;
  // Moved atimes not carried by another commit are queued this often (a
  // crash loses at most this much of them), and at Shutdown().
  unsigned atime_flush_ms = 30000;
  // Capacity watermarks and LRU eviction (fs/eviction.h); off by default.
  EvictionOptions eviction;
  // A read-only mount (-o ro): the volume may be open read-only, every
  // call that changes something fails with EROFS, atimes do not move and
  // eviction is off, so nothing is ever written to the index or devices.
  bool read_only = false;
  // Whole files up to prefetch_file_max_bytes are cached as per-file memory
  // (fs/file_memory.h), which OpenServed() lets the kernel read itself.
  // It gets three quarters of cache_bytes, the chunk cache (larger files,
  // and what does not fit) the rest.
  bool file_memory = false;
  // The clock of timestamps (mtime, ctime, atime) and of uses for eviction,
  // ns since the epoch. Tests step one of their own; by default (unset)
  // the real-time clock.
  std::function<int64_t()> now_ns;
};

class FileSystem {
 public:
  // `volume` must outlive the FileSystem, and be open read-write unless
  // options.read_only (EROFS otherwise).
  static Result<std::unique_ptr<FileSystem>> Create(volume::Volume& volume,
                                                    const FileSystemOptions& options);
  // Writes out everything staged, commits it and syncs (as Shutdown()).
  ~FileSystem();
  // Writes out all staged data, commits every queued change with a synced
  // WAL and flushed devices. Returns the first error. Idempotent.
  Status Shutdown();

  // --- Namespace. Lookup, Create and MkDir add one to the kernel lookup
  // count of the inode they return; Forget() subtracts.
  //
  // `*everyone_searches` (if non-null) is set to whether all three x bits
  // of the directory the name is in are set (fs/access.h
  // EveryoneSearches): whether the kernel may cache the name.
  //
  // Lookup checks search permission on `parent` (EACCES) first, before the
  // name's own errors, as the kernel's walk does; *everyone_searches is set
  // also when the name is missing.
  Result<Attr> Lookup(uint64_t parent, std::string_view name, const Caller* check = nullptr,
                      bool* everyone_searches = nullptr);
  void Forget(uint64_t ino, uint64_t nlookup);
  Result<Attr> GetAttr(uint64_t ino);
  // access(2): `want` of kMayRead, kMayWrite, kMayExec (fs/access.h; R_OK,
  // W_OK, X_OK have the same values) on `ino` for `check`, EACCES; ENOENT
  // for an unknown inode. Nothing else happens (no use for eviction, no
  // prefetch). *everyone_searches as above, for `ino` itself.
  Status Access(uint64_t ino, int want, const Caller* check,
                bool* everyone_searches = nullptr);
  // `check`: CheckSetAttr's rules (fs/access.h), before anything is
  // changed; a mode it sets loses S_ISGID as they say. *narrowed (if
  // non-null): a directory that everyone could search no longer is.
  Result<Attr> SetAttr(uint64_t ino, const SetAttrRequest& req, const Caller* check = nullptr,
                       bool* narrowed = nullptr);
  // `check`: write and search permission on `parent` (EACCES), after
  // ENOTDIR and before EEXIST, as the kernel's may_create().
  Result<Attr> MkDir(uint64_t parent, std::string_view name, uint32_t mode, const Caller& caller,
                     const Caller* check = nullptr, bool* everyone_searches = nullptr);
  // `check`, after ENOTDIR, as the kernel's may_delete(): search
  // permission on `parent` (EACCES); ENOENT for a missing name; write
  // permission on `parent` (EACCES); the sticky rule (EPERM). Then the
  // call's own errors (ENOTDIR, ENOTEMPTY; EISDIR).
  Status RmDir(uint64_t parent, std::string_view name, const Caller* check = nullptr);
  Status Unlink(uint64_t parent, std::string_view name, const Caller* check = nullptr);
  // flags: 0 or RENAME_NOREPLACE; RENAME_EXCHANGE/WHITEOUT -> EINVAL.
  // `check`, after ENOTDIR: search permission on both parents (EACCES);
  // ENOENT for a missing source; Unlink's rules for the source; write
  // permission on `new_parent` (EACCES) and, if the target exists, the
  // sticky rule for it (EPERM); a directory moved to another parent needs
  // write permission on itself (its ".." changes). Then the call's own
  // errors, flags first. *drop_names (if non-null): the name moves from a
  // directory that everyone may search into one that not everyone may.
  Status Rename(uint64_t parent, std::string_view name, uint64_t new_parent,
                std::string_view new_name, unsigned flags, const Caller* check = nullptr,
                bool* drop_names = nullptr);

  // --- Regular files. Handles are opaque non-zero numbers.
  struct Created {
    Attr attr;
    uint64_t fh = 0;
  };
  // open(O_CREAT) of a new name: EEXIST if it exists (the kernel sends
  // Lookup+Open for an existing one). `check` as MkDir's (mknod of a
  // regular file comes here too).
  Result<Created> Create(uint64_t parent, std::string_view name, uint32_t mode, int flags,
                         const Caller& caller, const Caller* check = nullptr,
                         bool* everyone_searches = nullptr);
  // open(O_TMPFILE) in directory `parent`: a new regular file with no name
  // (nlink 0), returned open as Create() returns one, with one kernel
  // lookup. The index records it at once as an orphan, exactly as a file
  // unlinked while open: its last Release() without a Link() deletes it,
  // and after a crash the next mount (or fsck.kvfs) reclaims it. Unless
  // `flags` has O_EXCL, one Link() may name it. ENOTDIR; ENOENT for a
  // removed directory; EPERM for a type other than a regular file.
  // `check`: write and search permission on `parent` (EACCES), after
  // ENOTDIR.
  Result<Created> CreateUnnamed(uint64_t parent, uint32_t mode, int flags, const Caller& caller,
                                const Caller* check = nullptr,
                                bool* everyone_searches = nullptr);
  // link(2) of inode `ino` as `new_name` in `new_parent`. Only the one link
  // that names a file of CreateUnnamed() (the O_TMPFILE + linkat publish)
  // is supported: any other file, one already named by a Link() included,
  // gets EPERM (kvfs has no hard links). ENOENT if the unnamed file's last
  // handle is gone or `new_parent` was removed; EEXIST, ENOTDIR,
  // ENAMETOOLONG. Like a rename, the name reaches the index only after
  // every data write of the file made before the call has completed (and
  // the devices were flushed), and the orphan record goes in the same
  // commit: after a crash the name holds all of that data, or there is no
  // name and the file is reclaimed. Adds one kernel lookup (the kernel
  // counts the entry it gets back). `check`: write and search permission
  // on `new_parent` (EACCES), after its ENOENT and ENOTDIR and before
  // anything about `ino`, as the kernel's vfs_link() checks it first.
  Result<Attr> Link(uint64_t ino, uint64_t new_parent, std::string_view new_name,
                    const Caller* check = nullptr, bool* everyone_searches = nullptr);
  // O_TRUNC truncates to 0. EISDIR for a directory. `kill` (non-null)
  // with O_TRUNC: the opener is unprivileged, so the truncate clears
  // S_ISUID and S_ISGID as fs/killpriv.h says, as on every Linux
  // filesystem (kill->mode_changed tells whether it did).
  // `check` (non-null): the caller whose permission to open as `flags` ask
  // (fs::WantOfOpen) is checked first, EACCES; valid for the call.
  Result<uint64_t> Open(uint64_t ino, int flags, KillPriv* kill = nullptr,
                        const Caller* check = nullptr);
  // An open that the kernel may serve itself, from the file's memory
  // (options.file_memory). `memory` set: every read and write of this open
  // is the kernel's, on memory->fd(); fs/ writes what lands there out to
  // the file at Flush(), Fsync() and Release(). Null: a handle like
  // Open()'s. The rule the kernel imposes: once an open is served from a
  // file's memory, every open of that file is (until all are released),
  // whatever its flags; and one is served only when no other is open. A
  // read-only open of a file that fits waits for its load. `can_serve`
  // (called with no lock of fs/ held, before the decision) makes the
  // memory usable by the kernel, or says it cannot be: the open is then
  // like Open()'s. done runs once,
  // inline or on an engine thread. `kill` as Open()'s; it must stay valid
  // until done runs. `check` as Open()'s; it is used only before
  // OpenServed returns.
  struct Opened {
    uint64_t fh = 0;
    std::shared_ptr<FileMemory> memory;
  };
  void OpenServed(uint64_t ino, int flags, KillPriv* kill,
                  std::function<bool(FileMemory&)> can_serve,
                  std::function<void(Result<Opened>)> done, const Caller* check = nullptr);
  // `data` is valid only during the callback; shorter than `size` at EOF.
  // Setting *cancel (the caller gave up: FUSE INTERRUPT) drops the parts of
  // the read not yet sent to the device; done then gets ECANCELED.
  using ReadDone = std::function<void(Status, std::span<const char> data)>;
  using CancelFlag = std::shared_ptr<std::atomic<bool>>;
  void Read(uint64_t fh, uint64_t off, size_t size, ReadDone done, CancelFlag cancel = nullptr);
  // Sets *cancel and drops at once the device reads queued under it (they
  // never start; their reads get ECANCELED), so a caller that gave up
  // leaves no work in the queues. Reads already at the device run out.
  void CancelReads(const CancelFlag& cancel);
  // Copies `data` into staging. Returns bytes accepted (all of them) or an
  // error (ENOSPC when the volume is full, EIO after a failed write-behind,
  // EBADF for a read-only handle). `kill` (non-null): the writer is
  // unprivileged (no CAP_FSETID): the write clears S_ISUID and S_ISGID as
  // fs/killpriv.h says, as file_remove_privs() does on a local filesystem
  // (kill->mode_changed tells whether it did).
  //
  // Write, Flush, Release and Fsync take `may_wait` (fs/calls.h, Wait::kAsk):
  // false, from a thread that must not wait, makes them refuse (kWouldWait,
  // or false) instead of waiting (for staging memory or space, for a device read of
  // a partly overwritten chunk, for the write-out of a file the kernel
  // wrote through served memory), with nothing changed that running the
  // call again would not redo the same; the caller runs it again where it
  // may wait.
  Result<size_t> Write(uint64_t fh, uint64_t off, std::span<const char> data,
                       KillPriv* kill = nullptr, bool may_wait = true);
  // close(2) of one descriptor: starts writing out the file's staged data
  // and returns the first background error known for the file.
  Status Flush(uint64_t fh, bool may_wait = true);
  // Last close of a handle. False: refused for waiting, nothing done.
  bool Release(uint64_t fh, bool may_wait = true);
  // Calls `done` once the file's data and name are durable. False: refused
  // for waiting, `done` not called.
  bool Fsync(uint64_t fh, bool datasync, std::function<void(Status)> done, bool may_wait = true);
  // mode 0 only (EOPNOTSUPP otherwise): extends the file to off+len.
  // `kill` (non-null): the caller is unprivileged; S_ISUID and S_ISGID go
  // as for Write (the kernel drops only what FUSE's own rule says first).
  Status Fallocate(uint64_t fh, int mode, uint64_t off, uint64_t len, KillPriv* kill = nullptr);

  // --- Directories. Offsets are positions in a listing taken when the
  // handle is read from offset 0 (so they are stable while entries change;
  // a read from 0 again, as after rewinddir, lists afresh); "." and ".."
  // come first.
  // `check` (non-null): the caller whose permission to open as `flags` ask
  // is checked first, EACCES; valid for the call.
  Result<uint64_t> OpenDir(uint64_t ino, int flags = 0, const Caller* check = nullptr);
  // Calls fn(name, ino, mode, next_off) from `off` until fn returns false.
  Status ReadDir(uint64_t dh, uint64_t off,
                 const std::function<bool(std::string_view, uint64_t, uint32_t, uint64_t)>& fn);
  void ReleaseDir(uint64_t dh);

  FsStats StatFs();

  // --- Extended attributes (rules and errno: fs/xattr.h). They are part of
  // the inode's record: a set or remove is committed in order with the
  // inode's other changes, a rename keeps them, the inode's removal drops
  // them. A caller with uid 0 may use trusted.*. Get and List of an inode
  // in memory read no index; security.* and system.* are answered from the
  // name alone. `check` (Set, Get, Remove): CheckXattr's rules
  // (fs/access.h) for a user.* name, before the call's own errors.
  Status SetXattr(uint64_t ino, std::string_view name, std::string_view value, int flags,
                  const Caller& caller, const Caller* check = nullptr);
  Result<std::string> GetXattr(uint64_t ino, std::string_view name, const Caller& caller,
                               const Caller* check = nullptr);
  // Each visible name followed by a NUL.
  Result<std::string> ListXattr(uint64_t ino, const Caller& caller);
  Status RemoveXattr(uint64_t ino, std::string_view name, const Caller& caller,
                     const Caller* check = nullptr);

  // Writes out all staged data and commits (not synced).
  Status FlushAll();
  // FlushAll(), then makes everything durable: devices flushed, WAL synced
  // (fsync of a directory, syncfs).
  Status Sync();

  // --- RAM cache and prefetch hints.
  // Starts reading a whole file (or, for a directory, each file in it) into
  // the RAM cache on the prefetch lane, within the cache and prefetch
  // budgets. Returns at once. `check`: the hint came as a setxattr of a
  // user.* name (fuse/'s user.kvfs.prefetch), so the caller needs what
  // setting one on `ino` needs (CheckXattr).
  Status Prefetch(uint64_t ino, const Caller* check = nullptr);
  // The inode of `path`, relative to the root ("a/b/c"); ENOENT etc.
  Result<uint64_t> ResolvePath(std::string_view path);
  // FlushAll(), then empties the RAM cache: the next reads come from the
  // device (for fair cold-load measurements).
  Status DropCache();
  CacheStats cache_stats();
  // fs/'s part of what MOUNT/.kvfs/stats and /metrics show (fs/stats.h;
  // the front end renders it).
  struct StatsSnapshot Stats();

  // --- Eviction (fs/eviction.h), with options.eviction.enabled.
  // `fn(parent, name, ino)` is told of each file evicted, once its unlink
  // is committed, on a thread of fs/'s own that holds no fs/ lock (it may
  // block). Replaces the previous listener; null removes it.
  void SetEvictionListener(std::function<void(uint64_t parent, std::string_view name,
                                              uint64_t ino)> fn);
  // Evicts now until at most `to_percent` of the data space is used (or
  // nothing more is evictable). Returns the files evicted; EINVAL with
  // eviction off or a percent over 100.
  Result<uint64_t> Evict(unsigned to_percent);

  // --- Whole-file operations for the batch ioctl (fs/batch.h drives them).
  // Unlike the calls above (which check only a `check` they are given),
  // these always check permissions, for `caller` (uid, gid, groups; uid 0
  // passes as root does), as open(2), unlink(2) and path lookup would.
  //
  // Path rules (every call below): `path` is "a/b/c" relative to directory
  // `dir`, like openat(2). EXDEV for a leading '/' or a ".." component (they
  // escape); EINVAL for an empty path, empty components ("a//b", "a/"), "."
  // or NUL; ENAMETOOLONG for a component over 255 bytes or a path over 4096;
  // ENOTDIR when a component before the last is not a directory; ENOENT;
  // EACCES without search permission on `dir` or a directory walked.
  // Inodes these calls touch hold no kernel lookup count.
  //
  // The attributes of `path` (stat: no permission on the file itself).
  // Does not start a lookup-driven prefetch (a batch reads into its own
  // memory; a cache copy would only cost).
  Result<Attr> LookupPath(uint64_t dir, std::string_view path, const Caller& caller);
  // OK when `path` names a file or directory, else LookupPath's errors. Only
  // the name is looked up, not the inode it names: a batched "contains" of
  // many keys costs one index read per key.
  Status ExistsPath(uint64_t dir, std::string_view path, const Caller& caller);
  // ExistsPath of each of `paths`: codes[i] = 0 or the errno for paths[i]
  // (codes.size() == paths.size()). A run of names in one directory is
  // walked once, so a batched "contains" of many keys costs a lock round
  // trip per run, not five per key.
  void ExistsPaths(uint64_t dir, std::span<const std::string_view> paths, const Caller& caller,
                   std::span<int> codes);
  // Reads file bytes [off, off + dest.size()) of `path` into `dest` (read
  // permission needed; EISDIR for a directory). done(bytes read, fewer at
  // EOF, 0 at or past it; or an error: EIO, ...) runs exactly once: on an
  // engine thread after device reads, or inline on the calling thread when
  // nothing is read from the device. Never blocks on device I/O. Data staged
  // by the POSIX path or in the RAM cache is copied; data on the device goes
  // straight into `dest` (no copy) where its 4 KiB blocks land 4 KiB aligned
  // in `dest` (dest.data() and `off` aligned); the file's last partial block
  // goes direct only if `dest` has room for the whole block, else through a
  // bounce buffer, as does everything unaligned. Bytes of `dest` past the
  // result may be overwritten (with zeros). `dest` must stay valid until done.
  void ReadFile(uint64_t dir, std::string_view path, uint64_t off, std::span<char> dest,
                const Caller& caller, std::function<void(Result<size_t>)> done);
  // Creates or atomically replaces file `path` with `data`, as a temp file
  // renamed over it would, with no temp name ever visible: write and search
  // permission on its directory, the sticky rule (EPERM), EISDIR if a
  // directory has the name. Space is reserved first (ENOSPC, the old file
  // untouched). The new inode gets mode 0644, the caller's uid and gid
  // (the directory's group in a setgid directory). The
  // name switches to it after all its data writes completed, in a change
  // committed after a device flush, so a crash leaves the old file or the
  // whole new one; handles open on the old file keep reading it (as after
  // rename-over). done runs exactly once, on an engine thread (inline for
  // early errors and empty data), once the switch is queued (visible to
  // every later call, not yet durable; Sync() makes it so), or with the
  // error (EIO from a data write: nothing changed). Never blocks on device
  // I/O, except that a full volume first waits for queued commits (unlinks)
  // to free space. 4 KiB aligned `data` goes to the device from the caller's
  // memory (no copy) but for a partial last block; unaligned data through
  // bounce buffers. `data` must stay valid and unchanged until done.
  void WriteFile(uint64_t dir, std::string_view path, std::span<const char> data,
                 const Caller& caller, std::function<void(Status)> done);
  // unlink(2) of `path`: ENOENT, then write and search permission on its
  // directory (EACCES), the sticky rule (EPERM), EISDIR for a directory.
  Status DeleteFile(uint64_t dir, std::string_view path, const Caller& caller);
  // Starts loading the file `path` into the RAM cache (read permission
  // needed; EISDIR for a directory) and returns at once: the bytes the
  // prefetch will read (0 if cached already, or over the file-size or
  // prefetch budgets). The newest 4096 prefetched inodes are kept loaded
  // for a later ReadFile, which then copies from the cache.
  Result<uint64_t> PrefetchFile(uint64_t dir, std::string_view path, const Caller& caller);

  // --- Test hooks (races made deterministic, instead of sleeps).
  // Returns once the prefetch thread has worked everything queued before
  // the call (lookup-driven prefetch and readahead have started their loads).
  void WaitPrefetchIdle();
  // Returns once the committer waits with nothing it may commit (every
  // queued change is committed or held back by a data write in flight).
  void WaitCommitsStalled();
  // Returns once the eviction pass thread has looked at the space used
  // after the call and run what that called for (Evictor::WaitIdle); at
  // once with eviction off.
  void WaitEvictorIdle();
  // Returns once every atime moved before the call has been flushed by the
  // atime log (its change queued; AtimeLog::WaitFlushed).
  void WaitAtimesFlushed();

  // Implementation details follow.
  class Impl;

 private:
  explicit FileSystem(std::unique_ptr<Impl> impl);
  // The rules of fs/calls.h, applied to a call (file_system.cc).
  template <typename Fn>
  auto Run(Call c, Fn&& fn) -> decltype(fn());
  template <typename Fn>
  auto Run(Call c, bool changes, Fn&& fn) -> decltype(fn());
  void Record(Call c, std::chrono::steady_clock::time_point start, int code, uint64_t bytes);
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvfs::fs
