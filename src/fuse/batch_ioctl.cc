// The batch ioctl (include/kvfs/ioctl.h): KVFS_IOC_REGISTER,
// KVFS_IOC_UNREGISTER, KVFS_IOC_BATCH, KVFS_IOC_FEATURES.
//
// libfuse gives a normal filesystem the "restricted" ioctl: the kernel copies
// in and out exactly the struct the command's size encodes, so in_buf and
// out_bufsz are fixed and the reply is fuse_reply_ioctl with that struct.
//
// BATCH: the entry table and the names are copied into daemon memory first
// (the client may change shared memory under us; we act on one snapshot),
// every entry is decoded into an fs::BatchItem (a refused entry keeps its
// errno and is not run), then fs::BatchRunner runs them; the completion
// writes each status and result back into the table and replies. Entries'
// data stay in registered memory (the device reads/writes it directly) or,
// for buf_id 0, go through a bounce buffer filled/drained with
// process_vm_readv/writev while the entry is in flight.
#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/uio.h>

#include <algorithm>
#include <climits>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "fs/batch.h"
#include "fuse/batch_decode.h"
#include "fuse/buffer_registry.h"
#include "fuse/ops.h"
#include "fuse/reply.h"
#include "kvfs/ioctl.h"

namespace kvfs::fuse::ops {

namespace {

constexpr size_t kEntryBytes = sizeof(kvfs_batch_entry);
// process_vm_readv/writev take at most this many iovecs per call.
constexpr size_t kMaxIov = 1024;
constexpr uint64_t kPageBytes = 4096;

int ErrnoOfRemote(int err) {
  // The kernel refusing access to the caller's memory is the documented
  // EPERM; a bad address is EFAULT.
  if (err == EPERM || err == ESRCH || err == EACCES) return EPERM;
  if (err == ENOMEM) return ENOMEM;
  return EFAULT;
}

// Copies `len` bytes between daemon memory and the caller's address
// `remote`. Returns 0 or a positive errno (EPERM, EFAULT, ...).
int RemoteCopy(pid_t pid, char* local, uint64_t remote, uint64_t len, bool to_caller) {
  uint64_t done = 0;
  while (done < len) {
    size_t n = static_cast<size_t>(std::min<uint64_t>(len - done, 1ull << 30));
    iovec l{local + done, n};
    iovec r{reinterpret_cast<void*>(remote + done), n};
    ssize_t rc = to_caller ? process_vm_writev(pid, &l, 1, &r, 1, 0)
                           : process_vm_readv(pid, &l, 1, &r, 1, 0);
    if (rc < 0) return ErrnoOfRemote(errno);
    if (rc == 0) return EFAULT;
    done += static_cast<uint64_t>(rc);
  }
  return 0;
}

// `off`..`off+len` inside a region of `size` bytes (overflow-safe).
// The caller's process: every registration is looked up by it.
Result<pid_t> CallerTgid(fuse_req_t req) { return TgidOf(fuse_req_ctx(req)->pid); }

// Copies the call's args; replies EINVAL when they are not an Args.
template <typename Args>
bool CopyArgs(fuse_req_t req, const void* in_buf, size_t in_bufsz, Args* args, const char* op) {
  if (in_buf == nullptr || in_bufsz != sizeof(Args)) {
    ReplyStatus(req, Status::Error(EINVAL, "bad argument size"), op);
    return false;
  }
  std::memcpy(args, in_buf, sizeof(Args));
  return true;
}

// CopyArgs, and EPROTO for a version other than this daemon's.
template <typename Args>
bool ArgsOk(fuse_req_t req, const void* in_buf, size_t in_bufsz, Args* args, const char* op) {
  if (!CopyArgs(req, in_buf, in_bufsz, args, op)) return false;
  if (args->version != KVFS_ABI_VERSION) {
    ReplyStatus(req,
                Status::Error(EPROTO, "ABI version " + std::to_string(args->version) +
                                          ", this daemon speaks " +
                                          std::to_string(KVFS_ABI_VERSION)),
                op);
    return false;
  }
  return true;
}

void Register(fuse_req_t req, fuse_file_info* fi, bool dir, const void* in_buf,
              size_t in_bufsz, size_t out_bufsz) {
  kvfs_register_args args;
  if (!ArgsOk(req, in_buf, in_bufsz, &args, "register")) return;
  if (out_bufsz < sizeof(args)) {
    ReplyStatus(req, Status::Error(EINVAL, "register: no room for the reply"), "register");
    return;
  }
  if (args.flags != 0) {
    ReplyStatus(req, Status::Error(EINVAL, "register: flags must be 0"), "register");
    return;
  }
  SessionState& s = StateOf(req);
  Result<uint64_t> id = NoThrow([&]() -> Result<uint64_t> {
    KVFS_ASSIGN_OR_RETURN(pid_t tgid, CallerTgid(req));
    return s.registry.Register(Registrant{tgid, fuse_req_ctx(req)->uid}, args.fd, args.length,
                               OwnerFile{fi->fh, dir});
  });
  if (!id.ok()) {
    ReplyStatus(req, id.status(), "register");
    return;
  }
  args.buf_id = *id;
  spdlog::debug("register: buffer {} ({} bytes) for pid {}", *id, args.length,
                fuse_req_ctx(req)->pid);
  fuse_reply_ioctl(req, 0, &args, sizeof(args));
}

void Unregister(fuse_req_t req, const void* in_buf, size_t in_bufsz) {
  kvfs_unregister_args args;
  if (!ArgsOk(req, in_buf, in_bufsz, &args, "unregister")) return;
  if (args.reserved != 0) {
    ReplyStatus(req, Status::Error(EINVAL, "unregister: reserved must be 0"), "unregister");
    return;
  }
  SessionState& s = StateOf(req);
  Status st = NoThrow([&]() -> Status {
    KVFS_ASSIGN_OR_RETURN(pid_t tgid, CallerTgid(req));
    return s.registry.Unregister(tgid, args.buf_id);
  });
  if (!st.ok()) {
    ReplyStatus(req, st, "unregister");
    return;
  }
  fuse_reply_ioctl(req, 0, nullptr, 0);
}

void Features(fuse_req_t req, const void* in_buf, size_t in_bufsz, size_t out_bufsz) {
  kvfs_features_args in;  // any version: this call is how a client learns ours
  if (!CopyArgs(req, in_buf, in_bufsz, &in, "features")) return;
  kvfs_features_args out;
  if (Refusal r = AnswerFeatures(in, out_bufsz, &out); r.error != 0) {
    ReplyStatus(req, Status::Error(r.error, "features: " + r.why), "features");
    return;
  }
  fuse_reply_ioctl(req, 0, &out, sizeof(out));
}

// A bounce buffer for caller memory (buf_id 0), owned by the entry's hooks
// and so freed when the entry finishes.
struct Bounce {
  char* data = nullptr;
  ~Bounce() { std::free(data); }
};

// Everything one BATCH call holds until it replies.
struct BatchCall {
  std::shared_ptr<AsyncReply> reply;
  kvfs_batch_args args{};
  pid_t tgid = 0;
  std::shared_ptr<MappedBuffer> table;  // null when the table is caller memory
  std::vector<kvfs_batch_entry> entries;
  // The registrations the entries use: mapped until the reply.
  std::map<uint64_t, std::shared_ptr<MappedBuffer>> buffers;
  // A call with READ entries reads until it replies: other callers' POSIX
  // writes wait for it (fuse/read_priority.h). After `reply`, so that it
  // ends first.
  std::unique_ptr<ReadPriority::Reading> reading;
};

// Reads the entry table into call->entries. 0 or the call's errno.
int ReadTable(BatchCall* call, BufferRegistry& registry) {
  const kvfs_batch_args& a = call->args;
  uint64_t bytes = uint64_t{a.count} * kEntryBytes;
  call->entries.resize(a.count);
  if (a.table_id == 0) {
    return RemoteCopy(call->tgid, reinterpret_cast<char*>(call->entries.data()), a.table_off,
                      bytes, /*to_caller=*/false);
  }
  Result<std::shared_ptr<MappedBuffer>> t = registry.Find(call->tgid, a.table_id);
  if (!t.ok()) return EBADF;
  if (!Inside(a.table_off, bytes, (*t)->size())) return EFAULT;
  call->table = *t;
  std::memcpy(call->entries.data(), call->table->data() + a.table_off, bytes);
  return 0;
}

// Reads the names of the entries not refused yet. Caller memory is read in
// runs of up to kMaxIov names per syscall; a name the kernel cannot read
// fails only its entry (EFAULT, or EPERM when access is refused).
void ReadNames(BatchCall* call, std::vector<fs::BatchItem>& items) {
  if (call->table) {
    for (size_t i = 0; i < items.size(); ++i) {
      if (items[i].error != 0) continue;
      const kvfs_batch_entry& e = call->entries[i];
      if ((items[i].error = CheckNameInTable(e, call->table->size())) != 0) continue;
      items[i].path.assign(call->table->data() + e.name_off, e.name_len);
    }
    return;
  }
  std::vector<size_t> todo;
  for (size_t i = 0; i < items.size(); ++i) {
    if (items[i].error != 0) continue;
    items[i].path.resize(call->entries[i].name_len);
    todo.push_back(i);
  }
  std::vector<iovec> local, remote;
  size_t pos = 0;
  while (pos < todo.size()) {
    size_t n = std::min(kMaxIov, todo.size() - pos);
    local.clear();
    remote.clear();
    for (size_t k = 0; k < n; ++k) {
      size_t i = todo[pos + k];
      local.push_back({items[i].path.data(), items[i].path.size()});
      remote.push_back({reinterpret_cast<void*>(call->entries[i].name_off), items[i].path.size()});
    }
    ssize_t rc = process_vm_readv(call->tgid, local.data(), n, remote.data(), n, 0);
    if (rc < 0) {
      // Nothing was read: the first name of this run is the bad one.
      items[todo[pos]].error = ErrnoOfRemote(errno);
      ++pos;
      continue;
    }
    // The kernel stops at the first name it cannot read in full.
    uint64_t got = static_cast<uint64_t>(rc);
    size_t k = 0;
    while (k < n && got >= local[k].iov_len) {
      got -= local[k].iov_len;
      ++k;
    }
    if (k < n) items[todo[pos + k]].error = EFAULT;
    pos += k + 1;
  }
}

// The kernel caches names (entry and negative timeouts): a WRITE or DELETE
// of the batch changed one behind its back, so the cached entry must go.
// Runs on a runner thread, never in a FUSE request's path (which the
// kernel's invalidation could wait on).
void InvalidateName(SessionState& s, uint64_t dir, const std::string& path,
                    const fs::Caller& caller) {
  if (s.session == nullptr) return;
  size_t slash = path.rfind('/');
  uint64_t parent = dir;
  std::string_view name = path;
  if (slash != std::string::npos) {
    Result<fs::Attr> p = s.fs->LookupPath(dir, std::string_view(path).substr(0, slash), caller);
    if (!p.ok()) return;  // the directory went meanwhile: nothing of it is cached
    parent = p->ino;
    name = std::string_view(path).substr(slash + 1);
  }
  int rc = fuse_lowlevel_notify_inval_entry(s.session, parent, name.data(), name.size());
  if (rc != 0 && rc != -ENOENT) {
    spdlog::debug("batch: invalidating {} in the kernel: {}", path, std::strerror(-rc));
  }
}

// Decodes entry i (its name is read already) into items[i]; sets
// items[i].error when it is refused.
void DecodeEntry(BatchCall* call, SessionState& s, const std::shared_ptr<const fs::Caller>& caller,
                 uint64_t dir, size_t i, fs::BatchItem& it) {
  BufferRegistry& registry = s.registry;
  const kvfs_batch_entry& e = call->entries[i];
  if (it.error != 0) return;
  const DecodedEntry d = fuse::DecodeEntry(e, it.path);
  if ((it.error = d.error) != 0) return;
  it.op = d.op;
  it.file_off = d.file_off;
  if (d.changes_name) {
    SessionState* state = &s;
    it.finish = [state, caller, dir](fs::BatchItem& item) -> Status {
      InvalidateName(*state, dir, item.path, *caller);
      return Status::OK();
    };
  }
  if (!d.needs_memory) return;
  if (e.buf_id != 0) {
    auto found = call->buffers.find(e.buf_id);
    if (found == call->buffers.end()) {
      Result<std::shared_ptr<MappedBuffer>> b = registry.Find(call->tgid, e.buf_id);
      found = call->buffers.emplace(e.buf_id, b.ok() ? *b : nullptr).first;
    }
    const std::shared_ptr<MappedBuffer>& buf = found->second;
    if (!buf) {
      it.error = EBADF;
      return;
    }
    if ((it.error = CheckRegisteredRange(e, buf->size())) != 0) return;
    it.data = std::span<char>(buf->data() + e.buf_off, e.length);
    // Unaligned entries go through fs/'s own bounce buffers: count them
    // against the bound (aligned ones move device <-> this memory).
    it.budget_bytes = MovesInPlace(e, it.data.data(), kPageBytes) ? 0 : e.length;
    return;
  }
  // Caller memory at address buf_off, through a bounce buffer that lives
  // only while the entry is in flight (so it counts against the bound).
  if ((it.error = CheckCallerRange(e)) != 0) return;
  uint64_t len = e.length;
  uint64_t addr = e.buf_off;
  pid_t tgid = call->tgid;
  bool is_write = d.op == fs::BatchOp::kWrite;
  auto bounce = std::make_shared<Bounce>();
  it.budget_bytes = len;
  it.prepare = [bounce, len, addr, tgid, is_write](fs::BatchItem& item) -> Status {
    uint64_t alloc = (len + kPageBytes - 1) / kPageBytes * kPageBytes;
    bounce->data = static_cast<char*>(std::aligned_alloc(kPageBytes, alloc));
    if (bounce->data == nullptr) return Status::Error(ENOMEM, "batch: bounce buffer");
    if (is_write) {
      int err = RemoteCopy(tgid, bounce->data, addr, len, /*to_caller=*/false);
      if (err != 0) return Status::Error(err, "batch: reading the caller's memory");
    }
    item.data = std::span<char>(bounce->data, len);
    return Status::OK();
  };
  if (!is_write) {
    it.finish = [bounce, addr, tgid](fs::BatchItem& item) -> Status {
      int err = RemoteCopy(tgid, bounce->data, addr, item.result, /*to_caller=*/true);
      if (err != 0) return Status::Error(err, "batch: writing the caller's memory");
      return Status::OK();
    };
  }
}

// Writes status/result of every entry back into the table. 0 or an errno.
int WriteBack(BatchCall* call) {
  const uint64_t base = call->args.table_off;
  constexpr size_t kTail = offsetof(kvfs_batch_entry, status);
  static_assert(offsetof(kvfs_batch_entry, result) + sizeof(uint64_t) == kEntryBytes);
  if (call->table) {
    char* t = call->table->data() + base;
    for (size_t i = 0; i < call->entries.size(); ++i) {
      char* e = t + i * kEntryBytes;
      std::memcpy(e + offsetof(kvfs_batch_entry, status), &call->entries[i].status,
                  sizeof(int32_t));
      std::memcpy(e + offsetof(kvfs_batch_entry, result), &call->entries[i].result,
                  sizeof(uint64_t));
    }
    return 0;
  }
  // Caller memory: the 16-byte tail (status, flags as read, result) of each
  // entry, kMaxIov entries per syscall.
  std::vector<iovec> local, remote;
  for (size_t pos = 0; pos < call->entries.size(); pos += kMaxIov) {
    size_t n = std::min(kMaxIov, call->entries.size() - pos);
    local.clear();
    remote.clear();
    for (size_t k = 0; k < n; ++k) {
      local.push_back({reinterpret_cast<char*>(&call->entries[pos + k]) + kTail, kEntryBytes - kTail});
      remote.push_back(
          {reinterpret_cast<void*>(base + (pos + k) * kEntryBytes + kTail), kEntryBytes - kTail});
    }
    ssize_t rc = process_vm_writev(call->tgid, local.data(), n, remote.data(), n, 0);
    if (rc < 0) return ErrnoOfRemote(errno);
    if (static_cast<uint64_t>(rc) != n * (kEntryBytes - kTail)) return EFAULT;
  }
  return 0;
}

void Finish(const std::shared_ptr<BatchCall>& call, std::vector<fs::BatchItem>& items) {
  kvfs_batch_args out = call->args;
  out.completed = 0;
  out.failed = 0;
  out.bytes = 0;
  for (size_t i = 0; i < items.size(); ++i) {
    kvfs_batch_entry& e = call->entries[i];
    e.status = items[i].error;
    e.result = items[i].error == 0 ? items[i].result : 0;
    if (e.status == 0) {
      ++out.completed;
      const OpRule* rule = FindOp(e.op);  // known: the entry ran
      if (rule != nullptr && rule->moves_data) out.bytes += e.result;
    } else {
      ++out.failed;
    }
  }
  int err = WriteBack(call.get());
  if (call->reading) call->reading->End();
  if (!call->reply->Claim()) return;
  if (err != 0) {
    ReplyStatus(call->reply->req(), Status::Error(err, "batch: writing the results back"), "batch");
    return;
  }
  fuse_reply_ioctl(call->reply->req(), 0, &out, sizeof(out));
}

fs::BatchRunner& RunnerOf(SessionState& s) {
  std::call_once(s.batch_once, [&] {
    s.batch = std::make_unique<fs::BatchRunner>(*s.fs, fs::BatchLimits{});
  });
  return *s.batch;
}

void Batch(fuse_req_t req, fuse_ino_t ino, bool dir, const void* in_buf, size_t in_bufsz,
           size_t out_bufsz) {
  kvfs_batch_args args;
  if (!ArgsOk(req, in_buf, in_bufsz, &args, "batch")) return;
  auto refuse = [&](int code, const std::string& why) {
    ReplyStatus(req, Status::Error(code, "batch: " + why), "batch");
  };
  if (Refusal r = CheckBatchArgs(args, out_bufsz, dir); r.error != 0) return refuse(r.error, r.why);

  SessionState& s = StateOf(req);
  std::shared_ptr<BatchCall> call;
  std::vector<fs::BatchItem> items;
  fs::Caller caller;
  try {
    Result<pid_t> tgid = CallerTgid(req);
    if (!tgid.ok()) return refuse(tgid.status().code(), tgid.status().ToString());
    call = std::make_shared<BatchCall>();
    call->args = args;
    call->tgid = *tgid;
    if (int err = ReadTable(call.get(), s.registry); err != 0) {
      return refuse(err, err == EBADF ? "table_id is not a registration of this process"
                                      : "cannot read the entry table");
    }
    items.resize(args.count);
    for (size_t i = 0; i < items.size(); ++i) items[i].error = CheckEntryHeader(call->entries[i]);
    ReadNames(call.get(), items);
    caller = CallerOf(req, /*with_groups=*/true);
    auto shared_caller = std::make_shared<const fs::Caller>(caller);
    for (size_t i = 0; i < items.size(); ++i) {
      DecodeEntry(call.get(), s, shared_caller, ino, i, items[i]);
    }
    call->reply = AsyncReply::Start(req, "batch");
    for (const fs::BatchItem& it : items) {
      if (it.op == fs::BatchOp::kRead && it.error == 0) {
        call->reading = std::make_unique<ReadPriority::Reading>(s.read_priority,
                                                                     fuse_req_ctx(req)->pid);
        break;
      }
    }
  } catch (const std::bad_alloc&) {
    return refuse(ENOMEM, "out of memory");
  }
  // From here the reply is owed by the completion (or by AsyncReply's
  // destructor if Run() throws before starting).
  try {
    RunnerOf(s).Run(ino, std::move(caller), std::move(items),
                    [call](std::vector<fs::BatchItem>& done) { Finish(call, done); });
  } catch (const std::bad_alloc&) {
    if (call->reply->Claim()) fuse_reply_err(req, ENOMEM);
  } catch (const std::system_error& e) {  // the runner's threads could not start
    spdlog::error("batch: {}", e.what());
    if (call->reply->Claim()) fuse_reply_err(req, EAGAIN);
  }
}

}  // namespace

void KvfsIoctl(fuse_req_t req, fuse_ino_t ino, unsigned int cmd, fuse_file_info* fi,
               unsigned flags, const void* in_buf, size_t in_bufsz, size_t out_bufsz) {
  bool dir = (flags & FUSE_IOCTL_DIR) != 0;
  UnblockFaultSignals();  // this thread copies the table out of registered memory
  switch (cmd) {
    case KVFS_IOC_REGISTER:
      Register(req, fi, dir, in_buf, in_bufsz, out_bufsz);
      return;
    case KVFS_IOC_UNREGISTER:
      Unregister(req, in_buf, in_bufsz);
      return;
    case KVFS_IOC_BATCH:
      Batch(req, ino, dir, in_buf, in_bufsz, out_bufsz);
      return;
    case KVFS_IOC_FEATURES:
      Features(req, in_buf, in_bufsz, out_bufsz);
      return;
    default:
      fuse_reply_err(req, ENOTTY);
  }
}

}  // namespace kvfs::fuse::ops
