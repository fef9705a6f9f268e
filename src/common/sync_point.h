// Sync points: named places in the code where a test can run code of its
// own, to force an interleaving (another thread's step between two of this
// thread's) instead of hoping load or timing produce it.
//
//   KVFS_SYNC_POINT("FileSystem::OpenServed:Loaded");   // in the code
//
//   SyncPoints::Set("FileSystem::OpenServed:Loaded", [&](void*) { fs->DropCaches(); });
//   ...                                                   // in a test
//   SyncPoints::ClearAll();
//
// A point with nothing set costs one relaxed atomic load. Builds with
// NDEBUG (release) compile the points out. Callbacks run on the thread
// that reaches the point, with whatever locks it holds there (the comment
// at each point says which), so they must not take those locks again.
//
// Thread safety: every function may be called from any thread.
#pragma once

#include <functional>
#include <string>

namespace kvfs {

class SyncPoints {
 public:
  // Runs `fn(arg)` whenever a thread reaches the point `name`. Replaces
  // what was set for it.
  static void Set(const std::string& name, std::function<void(void* arg)> fn);
  // Removes every callback; returns once none is running.
  static void ClearAll();
  // Called by KVFS_SYNC_POINT.
  static void Reach(const char* name, void* arg);
  static bool Enabled();
};

}  // namespace kvfs

#ifdef NDEBUG
#define KVFS_SYNC_POINT(name) ((void)0)
#define KVFS_SYNC_POINT_ARG(name, arg) ((void)0)
#else
#define KVFS_SYNC_POINT(name) KVFS_SYNC_POINT_ARG(name, nullptr)
#define KVFS_SYNC_POINT_ARG(name, arg)                                          \
  do {                                                                          \
    if (::kvfs::SyncPoints::Enabled()) ::kvfs::SyncPoints::Reach(name, (arg));  \
  } while (0)
#endif
