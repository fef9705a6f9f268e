#include "device/block_io.h"

#include <future>
#include <utility>

namespace kvfs::device {

namespace {

// Submits one request and waits for its `done`. Must not be called from an
// engine callback: the completion thread would wait for itself.
Status SubmitAndWait(BlockIo& io, IoRequest req) {
  std::promise<Status> promise;
  std::future<Status> result = promise.get_future();
  req.done = [&promise](Status st) { promise.set_value(std::move(st)); };
  io.Submit(std::span<IoRequest>(&req, 1));
  return result.get();
}

}  // namespace

Status BlockIo::ReadSync(uint32_t device, uint64_t byte_off, void* buf, size_t len) {
  IoRequest req;
  req.op = IoOp::kRead;
  req.device = device;
  req.byte_off = byte_off;
  req.buf = buf;
  req.len = len;
  return SubmitAndWait(*this, std::move(req));
}

Status BlockIo::WriteSync(uint32_t device, uint64_t byte_off, const void* buf, size_t len) {
  IoRequest req;
  req.op = IoOp::kWrite;
  req.device = device;
  req.byte_off = byte_off;
  // The engine never writes into the buffer of a kWrite.
  req.buf = const_cast<void*>(buf);
  req.len = len;
  return SubmitAndWait(*this, std::move(req));
}

Status BlockIo::FlushSync(uint32_t device) {
  IoRequest req;
  req.op = IoOp::kFlush;
  req.device = device;
  return SubmitAndWait(*this, std::move(req));
}

}  // namespace kvfs::device
