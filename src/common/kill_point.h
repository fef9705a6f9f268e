// Kill points: named places where a crash matters (between a data write
// and the index commit that names it, between a commit and the frees that
// follow it...). A debug build's daemon started with KVFS_KILL_ODDS=N kills
// itself with SIGKILL at each point it reaches with odds 1 in N, so a crash
// test (kvfs-stress --kill-points) lands kills exactly there instead of
// wherever a timer happens to fall.
//
//   KVFS_KILL_POINT("Committer::AfterIndexCommit");   // in the code
//
// Environment, read once at the first point reached:
//   KVFS_KILL_ODDS=N      1 in N reaches kill the process (unset or 0: never)
//   KVFS_KILL_POINTS=P,Q  only points whose name starts with P or Q
//   KVFS_KILL_SKIP=K      the first K reaches of those points never kill (a
//                         test that kills at the K+1th batch of a pass)
//   KVFS_KILL_STALL=1     the first reach that would kill stops its thread
//                         for good instead, and later reaches pass (a test
//                         that needs a request the daemon never answers)
// Before the kill, one line "kvfs: kill point NAME: SIGKILL" is written to
// standard error (so a test can count kills per point); before a stall,
// "kvfs: kill point NAME: stalled".
//
// Builds with NDEBUG (release) compile the points out; with nothing set a
// point costs one relaxed atomic load.
//
// Thread safety: every function may be called from any thread.
#pragma once

#include <cstdint>
#include <string>

namespace kvfs {

class KillPoints {
 public:
  // Replaces what the environment said: 1 in `odds` reaches of a point whose
  // name starts with one of the comma-separated `prefixes` (empty: every
  // point) kill the process, after the first `skip` reaches of those
  // points; `odds` 0 disables. For tests.
  static void Set(uint32_t odds, const std::string& prefixes = "", uint64_t skip = 0);
  // Called by KVFS_KILL_POINT: may not return.
  static void Reach(const char* name);
  static bool Enabled();
};

}  // namespace kvfs

#ifdef NDEBUG
#define KVFS_KILL_POINT(name) ((void)0)
#else
#define KVFS_KILL_POINT(name)                                     \
  do {                                                            \
    if (::kvfs::KillPoints::Enabled()) ::kvfs::KillPoints::Reach(name); \
  } while (0)
#endif
