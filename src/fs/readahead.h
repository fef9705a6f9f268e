// ReadaheadDetector: guesses which files a serial load loop opens next.
//
// Connectors load a request's keys in the order they stored them, one key
// at a time, and files stored one after another get consecutive inode
// numbers. So when files are opened for reading in ascending inode order
// (gaps of up to kMaxGap allowed: directories made between keys), the
// next kFiles inodes are worth reading ahead: the device then works kFiles
// keys ahead of the loop. Up to kStreams such loops (requests in flight)
// are followed at once; a new one replaces the least recently used.
//
// A pure state machine: no I/O, no locks. Not thread-safe; the owner
// serializes calls (fs/prefetcher.h holds its mutex).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

namespace kvfs::fs {

class ReadaheadDetector {
 public:
  static constexpr uint64_t kFiles = 8;
  static constexpr uint64_t kMaxGap = 4;
  static constexpr size_t kStreams = 16;

  // Inode numbers [first, end) to read ahead; empty when first >= end.
  struct Range {
    uint64_t first = 0;
    uint64_t end = 0;
    bool empty() const { return first >= end; }
  };

  // Notes an open for reading of `ino`. Returns the inodes not handed out
  // before that follow it in a stream it continues (none for the first
  // file of a stream or a file opened again). With `room` false (the
  // caller's queue is full) the stream follows `ino` but hands out nothing,
  // and a later open of the stream hands those inodes out.
  Range NoteOpen(uint64_t ino, bool room = true) {
    const uint64_t now = ++clock_;
    Stream* s = nullptr;
    Stream* oldest = &streams_[0];
    for (Stream& r : streams_) {
      if (r.last_ino == ino) {  // the same file again
        r.used = now;
        return {};
      }
      if (r.last_ino != 0 && ino > r.last_ino && ino - r.last_ino <= kMaxGap) s = &r;
      if (r.used < oldest->used) oldest = &r;
    }
    if (s == nullptr) {  // not the next file of a stream: maybe the first of one
      *oldest = Stream{ino, ino + 1, now};
      return {};
    }
    s->last_ino = ino;
    s->used = now;
    if (!room) return {};
    const uint64_t end = ino + 1 + kFiles;
    Range r{s->next_ino > ino + 1 ? s->next_ino : ino + 1, end};
    if (end > s->next_ino) s->next_ino = end;
    return r;
  }

  // Forgets every stream.
  void Clear() { streams_ = {}; }

 private:
  struct Stream {
    uint64_t last_ino = 0;  // last inode this stream opened
    uint64_t next_ino = 0;  // first inode not handed out yet
    uint64_t used = 0;      // NoteOpen count when last matched (LRU)
  };
  std::array<Stream, kStreams> streams_{};
  uint64_t clock_ = 0;
};

}  // namespace kvfs::fs
