#include "fs/file_data.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

#include "fs/committer.h"
#include "fs/file_memory.h"

namespace kvfs::fs {

FileData::~FileData() = default;

// ------------------------------------------------------------ served opens

std::shared_ptr<FileMemory> FileData::served() const { return opens_ > 0 ? served_ : nullptr; }

int FileData::UsersOf(const FileMemory* m) const {
  if (m == nullptr) return 0;
  return (served_.get() == m ? opens_ : 0) + (awaited_.get() == m ? pending_ : 0);
}

bool FileData::OthersServedFrom(const FileMemory* m, int other_opens) const {
  return RuleHolds(m, other_opens, /*self=*/0);
}

bool FileData::RuleHolds(const FileMemory* m, int other_opens, int self) const {
  // The passthrough invariant, the one place it is checked: the opens the
  // inode table counts beside the asking one are exactly those served
  // from `m` or waiting for it (the asking one, if counted here, aside).
  return UsersOf(m) - self == other_opens;
}

void FileData::Publish(FileMemory& m) {
  // Served first: a memory that goes from awaited to served is never seen
  // unused by the cache, which reads the two without this lock.
  m.serves_opens_.store(served_.get() == &m && opens_ > 0, std::memory_order_release);
  m.awaited_.store(awaited_.get() == &m && pending_ > 0, std::memory_order_release);
}

void FileData::AddPending(std::shared_ptr<FileMemory> m) {
  if (pending_ == 0) awaited_ = std::move(m);
  // OthersServedFrom let it wait: no open waits for another memory.
  ++pending_;
  Publish(*awaited_);
}

bool FileData::EndPending(const std::shared_ptr<FileMemory>& m, bool may, bool current,
                          int file_opens, bool writable) {
  // The rule for the file's other opens: this one still waits for `m`,
  // counted among the file's opens and in UsersOf.
  const bool waiting = awaited_ == m && pending_ > 0;
  const bool serve = may && waiting && ((served_ == m && opens_ > 0) || current) &&
                     RuleHolds(m.get(), file_opens - 1, /*self=*/1);
  if (serve) {
    if (opens_ == 0) {
      served_ = m;
      written_ = false;
    }
    ++opens_;
    if (writable) written_ = true;
    Publish(*m);
  }
  if (awaited_ == m && pending_ > 0 && --pending_ == 0) {
    Publish(*m);
    awaited_.reset();
  }
  return serve;
}

void FileData::AddServed(bool writable) {
  // served(): every open of the file is served from it.
  ++opens_;
  if (writable) written_ = true;
}

bool FileData::ReleaseServed(const FileMemory& m) {
  if (served_.get() != &m || opens_ == 0) return false;
  if (--opens_ > 0) return false;
  const bool drop = written_;
  std::shared_ptr<FileMemory> was = std::move(served_);
  written_ = false;
  Publish(*was);
  return drop;
}

bool FileData::ServedAttrsOf(ServedAttrs* out) const {
  if (opens_ == 0 || !written_) return false;
  struct stat st;
  if (fstat(served_->fd(), &st) != 0) return false;
  out->size = static_cast<uint64_t>(st.st_size);
  out->mtime_ns = st.st_mtim.tv_sec * 1000000000LL + st.st_mtim.tv_nsec;
  return true;
}

Status FileData::ResizeServed(uint64_t size, bool grow_only) {
  if (opens_ == 0 || served_->state() != FileMemory::State::kReady) return Status::OK();
  struct stat st;
  if (fstat(served_->fd(), &st) != 0) return Status::Error(errno, "file memory");
  if (grow_only && static_cast<uint64_t>(st.st_size) >= size) return Status::OK();
  if (ftruncate(served_->fd(), static_cast<off_t>(size)) != 0) {
    return Status::Error(errno, "resizing file memory");
  }
  return Status::OK();
}

// ------------------------------------------------ device commands in flight

void FileData::BeginRead() { ++reads_in_flight_; }

std::vector<Extent> FileData::EndRead() {
  std::vector<Extent> frees;
  if (--reads_in_flight_ == 0) frees.swap(free_after_reads_);
  return frees;
}

bool FileData::KeepForReads(const std::vector<Extent>& extents) {
  if (reads_in_flight_ == 0) return false;
  free_after_reads_.insert(free_after_reads_.end(), extents.begin(), extents.end());
  return true;
}

void FileData::BeginWrite() { ++writes_in_flight_; }

std::vector<std::shared_ptr<Change>> FileData::EndWrite() {
  std::vector<std::shared_ptr<Change>> gates;
  if (--writes_in_flight_ == 0) gates.swap(gated_);
  return gates;
}

bool FileData::Gate(const std::shared_ptr<Change>& c) {
  if (writes_in_flight_ == 0) return false;
  c->gates = 1;
  gated_.push_back(c);
  return true;
}

bool FileData::NoteWriteError(int code) {
  if (write_error_ != 0) return false;
  write_error_ = code != 0 ? code : EIO;
  return true;
}

bool FileData::NoteInstalled() {
  if (change_queued_) return false;
  change_queued_ = true;
  return true;
}

bool FileData::Quiescent() const {
  return writes_in_flight_ == 0 && !change_queued_ && gated_.empty();
}

// -------------------------------------------------- memory of the commands

device::IoRequest FileData::ReadInto(std::shared_ptr<const void> owner, char* at,
                                     uint32_t device, uint64_t byte_off, uint64_t len,
                                     std::function<void(Status)> done, const void* group) {
  device::IoRequest r;
  r.op = device::IoOp::kRead;
  r.device = device;
  r.byte_off = byte_off;
  r.buf = at;
  r.len = len;
  r.group = group;
  // The memory goes (if this was its last holder) after done has run.
  r.done = [owner = std::move(owner), done = std::move(done)](Status st) { done(st); };
  return r;
}

device::IoRequest FileData::WriteFrom(std::shared_ptr<const void> owner, const char* from,
                                      uint32_t device, uint64_t byte_off, uint64_t len,
                                      std::function<void(Status)> done) {
  device::IoRequest r;
  r.op = device::IoOp::kWrite;
  r.device = device;
  r.byte_off = byte_off;
  r.buf = const_cast<char*>(from);  // only read by a write
  r.len = len;
  r.done = [owner = std::move(owner), done = std::move(done)](Status st) { done(st); };
  return r;
}

}  // namespace kvfs::fs
