// Status and Result<T>: the one error type of kvfs.
//
// A Status is an errno value plus a human-readable context ("superblock of
// /dev/nvme0n1: bad checksum"). errno goes in at the bottom (device/ turns a
// syscall or cqe->res into a Status) and comes out at the top (fuse/ replies
// with status.code()); it is never folded into a generic "I/O error" on the
// way. No exception crosses a part: code that can fail returns Status or
// Result<T>.
//
//   kvfs::Result<Superblock> sb = Superblock::Decode(buf, path);
//   if (!sb.ok()) return sb.status();
//   use(sb.value());
//
// Ignoring a Status is explicit: `st.ignore();  // why`.
//
// Thread safety: values; safe to copy between threads.
#pragma once

#include <cerrno>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace kvfs {

class [[nodiscard]] Status {
 public:
  // OK.
  Status() = default;

  static Status OK() { return Status(); }
  // `code` is a positive errno value (EIO, ENOSPC, ...). 0 means OK.
  static Status Error(int code, std::string_view context) {
    return Status(code, std::string(context));
  }
  // errno of a failed syscall, with context.
  static Status FromErrno(std::string_view context) { return Error(errno, context); }

  bool ok() const { return code_ == 0; }
  // Positive errno; 0 when ok().
  int code() const { return code_; }
  const std::string& context() const { return context_; }
  // "context: strerror(code)", or "OK".
  std::string ToString() const;

  // Marks a deliberately dropped error. Say why at the call site.
  void ignore() const {}

  // Returns a copy with `prefix: ` put before the context.
  Status Annotate(std::string_view prefix) const;

  bool operator==(const Status& o) const { return code_ == o.code_; }

 private:
  Status(int code, std::string context) : code_(code), context_(std::move(context)) {}
  int code_ = 0;
  std::string context_;
};

// A value of type T or a non-OK Status.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}  // NOLINT: implicit by design
  Result(Status status) : v_(std::move(status)) {  // NOLINT
    if (std::get<Status>(v_).ok()) {
      v_ = Status::Error(EINVAL, "Result constructed from OK status");
    }
  }

  bool ok() const { return std::holds_alternative<T>(v_); }
  // OK status when ok().
  Status status() const { return ok() ? Status::OK() : std::get<Status>(v_); }
  // REQUIRES: ok().
  T& value() & { return std::get<T>(v_); }
  const T& value() const& { return std::get<T>(v_); }
  T&& value() && { return std::get<T>(std::move(v_)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

 private:
  std::variant<T, Status> v_;
};

}  // namespace kvfs

#define KVFS_CONCAT_INNER_(a, b) a##b
#define KVFS_CONCAT_(a, b) KVFS_CONCAT_INNER_(a, b)

// Returns the Status from the enclosing function if `expr` is not OK.
#define KVFS_RETURN_IF_ERROR(expr)          \
  do {                                      \
    ::kvfs::Status kvfs_st_ = (expr);       \
    if (!kvfs_st_.ok()) return kvfs_st_;    \
  } while (0)

// `lhs` = value of the Result `rexpr`, or returns its Status.
#define KVFS_ASSIGN_OR_RETURN(lhs, rexpr) \
  KVFS_ASSIGN_OR_RETURN_IMPL_(KVFS_CONCAT_(kvfs_res_, __LINE__), lhs, rexpr)
#define KVFS_ASSIGN_OR_RETURN_IMPL_(res, lhs, rexpr) \
  auto res = (rexpr);                                \
  if (!res.ok()) return res.status();                \
  lhs = std::move(res).value()
