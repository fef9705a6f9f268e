// UringQueue: one CPU's queue of FUSE over io_uring (fuse/uring_transport.h).
//
// A thread pinned to the CPU owns an io_uring (SQE128, single issuer) with
// the queue's entries registered in the kernel. Each entry is a request
// header the kernel fills (fuse/uring_abi.h) and one buffer: 4 KiB of room,
// then the payload the kernel fills (a write's data, a lookup's name) and
// the reply's body goes to. On a request the thread copies the in-header
// and the opcode's argument in front of the payload, so libfuse sees one
// contiguous request as /dev/fuse gives it, and runs it inline (the
// requests that never wait: RequestLoop::RunsInReceiver, by fuse/opcodes.h)
// or on a request-loop worker.
//
// An entry goes back to the kernel (COMMIT_AND_FETCH: reply and wait for
// the next request in one command) once both its reply is written and
// libfuse is done with its request; whichever comes second queues it for
// the thread. A reply from another thread lands in the entry at once when
// the request carried no payload (READ, GETATTR, ...), else in a staging
// buffer copied by the thread; it wakes the thread through an eventfd only
// when the thread sleeps.
//
// Thread safety: Reply() from any thread; the rest from the transport.
#pragma once

#include <liburing.h>
#include <sys/uio.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <thread>
#include <vector>

#include "common/mutex.h"
#include "fuse/uring_abi.h"

namespace kvfs::fuse {


class UringTransport;
class UringQueue;

struct UringEntry {
  uring_abi::ReqHeader header;  // the kernel writes the request here
  iovec iov[2]{};               // {header, payload}, as registered
  char* buffer = nullptr;       // kHeadroom + payload_bytes
  UringQueue* queue = nullptr;

  // The request the entry holds (queue thread writes before Track()).
  uint64_t commit_id = 0;
  bool request_has_payload = false;

  // kProcessed: libfuse returned from the request (or it was copied to a
  // worker); kReplied: the reply is in the entry or staged.
  std::atomic<uint8_t> state{0};
  bool staged = false;
  std::vector<char> staging;  // a reply's body that waits for kProcessed
};

class UringQueue {
 public:
  static constexpr size_t kHeadroom = 4096;
  static constexpr uint8_t kProcessed = 1, kReplied = 2;

  UringQueue(UringTransport& transport, uint16_t qid, unsigned entries, uint32_t payload_bytes,
             std::chrono::microseconds spin);
  ~UringQueue();  // joins the thread
  UringQueue(const UringQueue&) = delete;
  UringQueue& operator=(const UringQueue&) = delete;

  // Starts the thread; it registers the entries. Returns once they are
  // registered (OK) or could not be (the error).
  int Start();
  // Ends the thread once every entry it took has been committed.
  void Stop();

  // Writes a reply (libfuse's iovecs: out header, body) into `e`.
  ssize_t Reply(UringEntry* e, const iovec* iov, int count);

  uint16_t qid() const { return qid_; }

 private:
  void Run();
  int SetUp();
  void Serve();
  // Submits the commands prepared since the last submission, if any.
  void Submit();
  void TakeRequest(UringEntry* e, bool backlog);
  // A worker finished running the request of `entry` (RequestLoop::Done).
  static void Processed(void* entry);
  // Both bits are set: finish the reply and queue the commit.
  void Commit(UringEntry* e);
  void PushReady(UringEntry* e);
  void DrainReady();
  void PrepCommand(UringEntry* e, uint32_t cmd, uint64_t commit_id);
  void ArmWakeup();
  io_uring_sqe* TakeSqe();
  char* Payload(UringEntry* e) const { return e->buffer + kHeadroom; }

  UringTransport& transport_;
  const uint16_t qid_;
  const unsigned nentries_;
  const uint32_t payload_bytes_;
  const std::chrono::microseconds spin_;

  std::thread thread_;
  io_uring ring_{};
  bool ring_ok_ = false;
  int wake_fd_ = -1;
  uint64_t wake_buf_ = 0;
  std::vector<std::unique_ptr<UringEntry>> entries_;
  void* buffers_ = nullptr;  // one mapping for every entry's buffer
  size_t buffers_len_ = 0;

  // Start(): the thread's set-up result.
  Mutex start_mu_;
  CondVar start_cv_;
  bool started_ GUARDED_BY(start_mu_) = false;
  int start_error_ GUARDED_BY(start_mu_) = 0;

  // Entries ready to commit, queued by other threads.
  Mutex ready_mu_;
  std::vector<UringEntry*> ready_ GUARDED_BY(ready_mu_);
  std::atomic<bool> has_ready_{false};
  std::atomic<bool> sleeping_{false};
  std::atomic<bool> stopping_{false};

  // Queue thread only.
  std::vector<UringEntry*> local_ready_;  // replied on this thread
  std::vector<UringEntry*> taken_;        // ready_, swapped out
  unsigned owed_ = 0;  // entries holding a request not yet committed
  unsigned dead_ = 0;  // entries the kernel gave back with an error
  bool dirty_ = false;  // SQEs prepared and not yet submitted
};

}  // namespace kvfs::fuse
