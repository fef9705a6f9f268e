// RequestLoop: reads FUSE requests from the session's device and runs them.
//
// Why not fuse_session_loop_mt: there, every request wakes a worker thread
// blocked in read(2) on /dev/fuse, and a connector's serial loop pays that
// wake-up on each of its round trips per key (nine to store, three to load;
// 25-50 us apiece on a virtual machine, where a sleeping CPU is woken by an
// interrupt).
//
// Here one receiver thread reads requests. After each one it keeps polling
// the device (non-blocking reads) for `spin` before it sleeps in poll(2),
// so the next request of a serial loop is picked up without a wake-up. It
// runs the requests that never wait itself (fs/ queues their device work
// and replies from the completion) and hands the rest to a pool of up to
// `max_workers` threads, started as they are needed; which are which is
// one table, fuse/opcodes.h over fs/calls.h (RunsInReceiver). A request
// whose call decides per request (writes, flushes, releases, fsyncs) is
// tried here without waiting; its handler hands it off (HandOff) when the
// call says it would wait, and a worker runs it again. The queue
// holds copies of small requests and at most 16 large
// ones (writes); beyond that the receiver runs a write itself, so queued
// requests add at most ~16 MiB to the daemon's memory.
//
// The receiver yields its CPU on every poll, so a runnable thread (an I/O
// completion, a worker) is not held up by its spinning. With spin zero it
// sleeps as soon as the device is empty.
//
// Thread safety: one thread calls Run().
#pragma once

#include <fuse_lowlevel.h>
#include <signal.h>

#include <atomic>
#include <chrono>
#include <deque>
#include <thread>
#include <vector>

#include "common/mutex.h"

namespace kvfs::fuse {

class RequestLoop {
 public:
  RequestLoop(fuse_session* se, unsigned max_workers, std::chrono::microseconds spin);
  ~RequestLoop();
  RequestLoop(const RequestLoop&) = delete;
  RequestLoop& operator=(const RequestLoop&) = delete;

  // Serves requests until the session ends (unmount: returns 0) or one of
  // `signals` arrives (returns its number); every request handed to a
  // worker has been run when it returns. The signals must be blocked in
  // every thread (they are taken with a signalfd). -errno if the loop
  // could not start, the device failed or the kernel's INIT was refused
  // (-EPROTO).
  int Run(const sigset_t& signals);

  // True on a thread that reads requests from the kernel (this loop's
  // receiver, an io_uring queue): a handler there must not wait, or every
  // other caller waits with it.
  static bool OnReceiver();
  // Marks the calling thread as one that reads requests (see OnReceiver).
  static void ServeAsReceiver();
  // Whether the running handler may wait: false on a receiving thread,
  // which tries the calls that decide per request without waiting
  // (fs/calls.h, Wait::kAsk) and hands off (HandOff) the ones that would;
  // true on a worker, and on a receiver that runs a handed-off request
  // itself because no worker could take it.
  static bool MayWait();
  // Called by a handler that may not wait instead of replying: frees `req`
  // unanswered, and the receiver gives the same request to a worker, whose
  // handler runs it again (and may wait).
  static void HandOff(fuse_req_t req);
  // Runs `buf` on this receiving thread; false if its handler handed it
  // off (nothing was answered: the caller gives it to a worker, or runs it
  // with RunWaiting).
  static bool RunHere(fuse_session* se, fuse_buf& buf);
  // Runs `buf` here, where its handler may wait.
  static void RunWaiting(fuse_session* se, fuse_buf& buf);

  // Whether a receiving thread runs `buf` itself rather than handing it to
  // a worker, by fuse/opcodes.h. `backlog`: the request was already waiting
  // when the one before it was done (several callers are active). Any
  // thread: the io_uring queues ask it too.
  bool RunsInReceiver(const fuse_buf& buf, bool backlog) const;
  // Hands `buf` to a worker, which runs it in place (no copy) and then
  // calls done(ctx); `buf` must stay valid until then. `received_ns`: when
  // the request was taken from the kernel (RequestClockNs, for its times).
  // False if no worker can take it (the loop is ending, no thread): the
  // caller runs it. Any thread (an io_uring queue, whose entry holds the
  // request until its reply).
  using Done = void (*)(void* ctx);
  bool Offload(const fuse_buf& buf, uint64_t received_ns, Done done, void* ctx);
  // Ends Run() with `error` (a transport that cannot serve). Any thread.
  void Fail(int error);

 private:
  void Receive();
  void Work();
  struct Queued {
    fuse_buf buf{};
    bool large = false;  // a receive buffer (else a copy of a small request)
    Done done = nullptr;  // set: `buf` is the offloader's, handed back here
    void* ctx = nullptr;
    uint64_t received_ns = 0;  // RequestClockNs when taken from the kernel
  };
  // Runs a request on a worker, or here if it cannot be queued.
  void Dispatch(fuse_buf& buf, uint64_t received_ns);
  // Queues a request for a worker, starting one if none is idle; false if
  // it cannot. Small requests are copied; a large one's buffer moves to the
  // queue and `buf` gets another (or none: libfuse allocates one).
  bool Enqueue(fuse_buf& buf, uint64_t received_ns);
  // Starts a worker if every one is busy; false if there is none at all.
  bool HaveWorker() REQUIRES(mu_);
  void Recycle(Queued& q);
  void Stop();

  fuse_session* const se_;
  const unsigned max_workers_;
  const std::chrono::microseconds spin_;
  int fd_ = -1;       // the session's /dev/fuse descriptor (made non-blocking)
  int stop_fd_ = -1;  // eventfd: readable once the loop is ending
  std::atomic<int> error_{0};  // the first error that ended the loop

  Mutex mu_;
  CondVar work_cv_;
  std::deque<Queued> queue_ GUARDED_BY(mu_);  // requests for the workers
  size_t queued_large_ GUARDED_BY(mu_) = 0;
  std::vector<fuse_buf> spare_ GUARDED_BY(mu_);  // receive buffers to reuse
  size_t idle_workers_ GUARDED_BY(mu_) = 0;
  bool stopping_ GUARDED_BY(mu_) = false;
  std::vector<std::thread> workers_ GUARDED_BY(mu_);
};

}  // namespace kvfs::fuse
