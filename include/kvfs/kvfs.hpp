// kvfs.hpp: a thin C++ wrapper over libkvfs (kvfs/kvfs.h).
//
// RAII owners for the C objects, nothing more: no exceptions (errors are
// the C API's negative errno values, [[nodiscard]]), no hidden allocation
// beyond the C calls, header only (link with libkvfs: `pkg-config kvfs`).
//
//   kvfs::client::Buffer buf;
//   kvfs::client::Table table;
//   if (int rc = kvfs::client::Buffer::Create(dir, 32 << 22, &buf); rc < 0) return rc;
//   if (int rc = kvfs::client::Table::Create(dir, 32, 4096, &table); rc < 0) return rc;
//   for (uint32_t i = 0; i < 32; i++)
//     if (int rc = table.AddRead(names[i], buf, uint64_t{i} << 22, 4 << 20); rc < 0) return rc;
//   int failed = table.Run(dir);  // entries that failed, or -errno for the call
//   for (uint32_t i = 0; i < table.count(); i++) use(table.status(i), table.result(i));
//
// Thread safety as in kvfs.h: a Buffer may serve many threads' batches; a
// Table is used by one thread at a time.
#ifndef KVFS_KVFS_HPP
#define KVFS_KVFS_HPP

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <utility>

#include <kvfs/kvfs.h>

namespace kvfs::client {

// kvfs_features: the daemon's ABI version and ops (`fd` on the mount).
// 0 (answered), 1 (a daemon that predates the call: the base ops), or -errno.
[[nodiscard]] inline int Features(int fd, kvfs_features_args* out) {
  return kvfs_features(fd, out);
}

// Owns a registered kvfs_buffer; move-only. Destruction unregisters.
class Buffer {
 public:
  Buffer() = default;
  ~Buffer() { (void)Reset(); }
  Buffer(Buffer&& o) noexcept : b_(std::exchange(o.b_, nullptr)) {}
  Buffer& operator=(Buffer&& o) noexcept {
    if (this != &o) {
      (void)Reset();
      b_ = std::exchange(o.b_, nullptr);
    }
    return *this;
  }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  // kvfs_buffer_create into *out (replacing what it held). 0 or -errno.
  [[nodiscard]] static int Create(int fd, size_t size, Buffer* out) {
    kvfs_buffer* b = nullptr;
    int rc = kvfs_buffer_create(fd, size, &b);
    if (rc == 0) *out = Buffer(b);
    return rc;
  }
  // Unregisters and frees now (kvfs_buffer_destroy's result); empty after.
  int Reset() { return kvfs_buffer_destroy(std::exchange(b_, nullptr)); }

  explicit operator bool() const { return b_ != nullptr; }
  // Valid only while non-empty.
  void* data() const { return kvfs_buffer_data(b_); }
  size_t size() const { return kvfs_buffer_size(b_); }
  uint64_t id() const { return kvfs_buffer_id(b_); }
  std::span<std::byte> bytes() const { return {static_cast<std::byte*>(data()), size()}; }
  const kvfs_buffer* get() const { return b_; }

 private:
  explicit Buffer(kvfs_buffer* b) : b_(b) {}
  kvfs_buffer* b_ = nullptr;
};

// Owns a kvfs_table (a batch being built in its own registered memory).
class Table {
 public:
  Table() = default;
  ~Table() { kvfs_table_destroy(t_); }
  Table(Table&& o) noexcept : t_(std::exchange(o.t_, nullptr)) {}
  Table& operator=(Table&& o) noexcept {
    if (this != &o) {
      kvfs_table_destroy(t_);
      t_ = std::exchange(o.t_, nullptr);
    }
    return *this;
  }
  Table(const Table&) = delete;
  Table& operator=(const Table&) = delete;

  // kvfs_table_create into *out. 0 or -errno.
  [[nodiscard]] static int Create(int fd, uint32_t max_entries, size_t name_bytes, Table* out) {
    kvfs_table* t = nullptr;
    int rc = kvfs_table_create(fd, max_entries, name_bytes, &t);
    if (rc == 0) *out = Table(t);
    return rc;
  }

  explicit operator bool() const { return t_ != nullptr; }
  kvfs_table* get() const { return t_; }
  void Clear() { kvfs_table_reset(t_); }
  // Whether the daemon runs `op` (kvfs_table_supports).
  bool Supports(uint32_t op) const { return kvfs_table_supports(t_, op) != 0; }
  uint32_t count() const { return kvfs_table_count(t_); }
  uint32_t capacity() const { return kvfs_table_capacity(t_); }

  // Each returns the entry's index or -errno (kvfs_table_add_*).
  [[nodiscard]] int AddRead(std::string_view name, const Buffer& buf, uint64_t buf_off,
                            uint64_t length, uint64_t file_off = 0) {
    return kvfs_table_add_read(t_, name.data(), name.size(), buf.get(), buf_off, length, file_off);
  }
  [[nodiscard]] int AddWrite(std::string_view name, const Buffer& buf, uint64_t buf_off,
                             uint64_t length) {
    return kvfs_table_add_write(t_, name.data(), name.size(), buf.get(), buf_off, length);
  }
  [[nodiscard]] int AddReadMem(std::string_view name, std::span<std::byte> dest,
                               uint64_t file_off = 0) {
    return kvfs_table_add_read_mem(t_, name.data(), name.size(), dest.data(), dest.size(),
                                   file_off);
  }
  [[nodiscard]] int AddWriteMem(std::string_view name, std::span<const std::byte> src) {
    return kvfs_table_add_write_mem(t_, name.data(), name.size(), src.data(), src.size());
  }
  [[nodiscard]] int AddStat(std::string_view name) {
    return kvfs_table_add_stat(t_, name.data(), name.size());
  }
  [[nodiscard]] int AddExists(std::string_view name) {
    return kvfs_table_add_exists(t_, name.data(), name.size());
  }
  [[nodiscard]] int AddPrefetch(std::string_view name) {
    return kvfs_table_add_prefetch(t_, name.data(), name.size());
  }
  [[nodiscard]] int AddDelete(std::string_view name) {
    return kvfs_table_add_delete(t_, name.data(), name.size());
  }
  [[nodiscard]] int Add(uint32_t op, std::string_view name, uint64_t buf_id, uint64_t buf_off,
                        uint64_t length, uint64_t file_off) {
    return kvfs_table_add(t_, op, name.data(), name.size(), buf_id, buf_off, length, file_off);
  }

  // kvfs_batch: entries that failed (0 = all succeeded), or -errno for the
  // call (then every entry's status is that -errno).
  [[nodiscard]] int Run(int dirfd, kvfs_batch_args* summary = nullptr) {
    return kvfs_batch(dirfd, t_, summary);
  }
  // Entry i: 0 or -errno; bytes read/written, size, or bytes queued.
  int status(uint32_t i) const { return kvfs_table_status(t_, i); }
  uint64_t result(uint32_t i) const { return kvfs_table_result(t_, i); }
  const kvfs_batch_entry& entry(uint32_t i) const { return *kvfs_table_entry(t_, i); }

 private:
  explicit Table(kvfs_table* t) : t_(t) {}
  kvfs_table* t_ = nullptr;
};

}  // namespace kvfs::client

#endif  // KVFS_KVFS_HPP
