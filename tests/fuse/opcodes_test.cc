// fuse/opcodes.h over fs/calls.h: every FUSE opcode kvfs handles has a
// row, every fs/ call is reached, and the request loop (both transports)
// runs each request where its call's rules say.
#include "fuse/opcodes.h"

#include <gtest/gtest.h>
#include <linux/fuse.h>
#include <sys/ioctl.h>

#include <cstring>
#include <set>
#include <vector>

#include "fuse/daemon.h"
#include "fuse/op_counters.h"
#include "fuse/request_loop.h"
#include "kvfs/ioctl.h"

namespace kvfs::fuse {
namespace {

// A request of `opcode` with a zeroed body, as the transports hand it over.
struct Request {
  alignas(8) char mem[sizeof(fuse_in_header) + 256] = {};
  fuse_buf buf{};
  explicit Request(uint32_t opcode) {
    auto* in = reinterpret_cast<fuse_in_header*>(mem);
    in->opcode = opcode;
    in->len = sizeof(mem);
    buf.mem = mem;
    buf.size = sizeof(mem);
  }
  template <typename Body>
  Body* body() {
    return reinterpret_cast<Body*>(mem + sizeof(fuse_in_header));
  }
};

// A loop that is never run: RunsInReceiver reads only the request.
struct Loop {
  RequestLoop loop{nullptr, 1, std::chrono::microseconds(0)};
};

TEST(OpcodesTest, EveryHandlerTheDaemonRegistersHasARow) {
  const fuse_lowlevel_ops op = Operations();
  // Each handler libfuse is given, with the opcodes that reach it.
  const std::vector<std::pair<bool, std::vector<uint32_t>>> served = {
      {op.init != nullptr, {FUSE_INIT}},
      {op.lookup != nullptr, {FUSE_LOOKUP}},
      {op.forget != nullptr, {FUSE_FORGET}},
      {op.forget_multi != nullptr, {FUSE_BATCH_FORGET}},
      {op.getattr != nullptr, {FUSE_GETATTR}},
      {op.setattr != nullptr, {FUSE_SETATTR}},
      {op.mkdir != nullptr, {FUSE_MKDIR}},
      {op.mknod != nullptr, {FUSE_MKNOD}},
      {op.rmdir != nullptr, {FUSE_RMDIR}},
      {op.unlink != nullptr, {FUSE_UNLINK}},
      {op.rename != nullptr, {FUSE_RENAME, FUSE_RENAME2}},
      {op.access != nullptr, {FUSE_ACCESS}},
      {op.link != nullptr, {FUSE_LINK}},
      {op.symlink != nullptr, {FUSE_SYMLINK}},
      {op.create != nullptr, {FUSE_CREATE, FUSE_TMPFILE}},
      {op.open != nullptr, {FUSE_OPEN}},
      {op.read != nullptr, {FUSE_READ}},
      {op.write != nullptr, {FUSE_WRITE}},
      {op.flush != nullptr, {FUSE_FLUSH}},
      {op.release != nullptr, {FUSE_RELEASE}},
      {op.fsync != nullptr, {FUSE_FSYNC}},
      {op.fallocate != nullptr, {FUSE_FALLOCATE}},
      {op.opendir != nullptr, {FUSE_OPENDIR}},
      {op.readdir != nullptr, {FUSE_READDIR}},
      {op.releasedir != nullptr, {FUSE_RELEASEDIR}},
      {op.fsyncdir != nullptr, {FUSE_FSYNCDIR}},
      {op.statfs != nullptr, {FUSE_STATFS}},
      {op.ioctl != nullptr, {FUSE_IOCTL}},
      {op.setxattr != nullptr, {FUSE_SETXATTR}},
      {op.getxattr != nullptr, {FUSE_GETXATTR}},
      {op.listxattr != nullptr, {FUSE_LISTXATTR}},
      {op.removexattr != nullptr, {FUSE_REMOVEXATTR}},
  };
  // libfuse itself answers these two; kvfs's loop still admits them.
  std::set<uint32_t> handled = {FUSE_DESTROY, FUSE_INTERRUPT};
  for (const auto& [set, opcodes] : served) {
    if (!set) continue;
    for (uint32_t o : opcodes) {
      handled.insert(o);
      EXPECT_NE(OpcodeRuleOf(o), nullptr) << RequestName(o) << " is served but has no row";
    }
  }
  for (const OpcodeRule& r : kOpcodes) {
    EXPECT_TRUE(handled.count(r.opcode)) << RequestName(r.opcode) << " has a row, no handler";
  }
  // Handlers kvfs does not register: no row, and libfuse answers ENOSYS.
  EXPECT_EQ(op.readlink, nullptr);
  EXPECT_EQ(op.readdirplus, nullptr);
  EXPECT_EQ(op.lseek, nullptr);
  EXPECT_EQ(OpcodeRuleOf(FUSE_READDIRPLUS), nullptr);
  EXPECT_EQ(OpcodeRuleOf(FUSE_LSEEK), nullptr);
}

TEST(OpcodesTest, EveryCallIsReachedByARequestTheBatchIoctlOrAControlFile) {
  std::set<fs::Call> reached;
  for (const OpcodeRule& r : kOpcodes) {
    if (r.call) reached.insert(*r.call);
  }
  // The batch ioctl's whole-file calls (fuse/batch_ioctl.cc through
  // fs/batch.h) and the control files' (fuse/control.h).
  for (fs::Call c : {fs::Call::kLookupPath, fs::Call::kExistsPath, fs::Call::kReadFile,
                     fs::Call::kWriteFile, fs::Call::kDeleteFile, fs::Call::kPrefetchFile,
                     fs::Call::kPrefetch, fs::Call::kDropCache}) {
    EXPECT_FALSE(reached.count(c)) << fs::RulesOf(c).name << ": listed twice";
    reached.insert(c);
  }
  for (const fs::CallRules& rules : fs::kCallRules) {
    EXPECT_TRUE(reached.count(rules.call)) << rules.name << " is reached by nothing";
  }
}

TEST(OpcodesTest, EachRequestRunsWhereItsCallsRuleSays) {
  Loop l;
  for (const OpcodeRule& r : kOpcodes) {
    if (r.admit != Admit::kByCall) continue;
    const fs::CallRules& rules = fs::RulesOf(*r.call);
    // A call that decides per request is tried there (and handed off by
    // its handler if it would wait: RequestLoop::HandOff).
    Request q(r.opcode);
    EXPECT_EQ(l.loop.RunsInReceiver(q.buf, false), rules.wait != fs::Wait::kMay)
        << RequestName(r.opcode) << " (" << rules.name << ")";
  }
}

// The table's answers for the requests that matter most, stated outright:
// a change to the table that moves one of them fails here.
TEST(OpcodesTest, TheReceiverRunsWhatNeverWaitsAndWorkersTheRest) {
  Loop l;
  for (uint32_t o : {FUSE_LOOKUP, FUSE_GETATTR, FUSE_OPEN, FUSE_CREATE, FUSE_RENAME, FUSE_UNLINK,
                     FUSE_MKDIR, FUSE_STATFS, FUSE_GETXATTR, FUSE_RELEASEDIR, FUSE_FORGET,
                     FUSE_INIT, FUSE_INTERRUPT, FUSE_SYMLINK, FUSE_RELEASE, FUSE_FLUSH}) {
    Request q(o);
    EXPECT_TRUE(l.loop.RunsInReceiver(q.buf, false)) << RequestName(o);
  }
  // A directory's listing grows with it; a truncate may read a chunk; the
  // prefetch hint loads a directory's files; fsyncdir waits for the index.
  for (uint32_t o : {FUSE_READDIR, FUSE_SETATTR, FUSE_SETXATTR, FUSE_REMOVEXATTR,
                     FUSE_FALLOCATE, FUSE_FSYNCDIR, FUSE_LSEEK, FUSE_READDIRPLUS}) {
    Request q(o);
    EXPECT_FALSE(l.loop.RunsInReceiver(q.buf, false)) << RequestName(o);
  }
}

TEST(OpcodesTest, ReadsAndWritesFollowTheCopyLimits) {
  Loop l;
  Request small(FUSE_READ);
  small.body<fuse_read_in>()->size = 256 << 10;
  EXPECT_TRUE(l.loop.RunsInReceiver(small.buf, false));
  Request large(FUSE_READ);
  large.body<fuse_read_in>()->size = (256 << 10) + 4096;
  EXPECT_FALSE(l.loop.RunsInReceiver(large.buf, false)) << "workers copy large reads";

  Request w(FUSE_WRITE);
  w.body<fuse_write_in>()->size = 1 << 20;
  EXPECT_TRUE(l.loop.RunsInReceiver(w.buf, false)) << "tried: most find staging memory free";
  EXPECT_FALSE(l.loop.RunsInReceiver(w.buf, true)) << "others waiting: copied in parallel";
}

TEST(OpcodesTest, KvfsIoctlsGoToAWorkerOthersAreAnsweredAtOnce) {
  Loop l;
  Request kvfs(FUSE_IOCTL);
  kvfs.body<fuse_ioctl_in>()->cmd = KVFS_IOC_REGISTER;
  EXPECT_FALSE(l.loop.RunsInReceiver(kvfs.buf, false));
  Request tty(FUSE_IOCTL);
  tty.body<fuse_ioctl_in>()->cmd = TCGETS;
  EXPECT_TRUE(l.loop.RunsInReceiver(tty.buf, false));
}

}  // namespace
}  // namespace kvfs::fuse
