// kvfs_table: a batch being built in registered memory, and kvfs_batch().
//
// Layout of the table's buffer (one registration): `capacity` entries of
// 64 bytes from offset 0, then the names, packed, each at its name_off.
// name_off is an offset into the same registration, as the ABI says for a
// table with a non-zero table_id.
#include <errno.h>

#include <cstring>
#include <new>

#include "kvfs/kvfs.h"

struct kvfs_table {
  kvfs_buffer* mem = nullptr;
  uint32_t capacity = 0;
  uint32_t count = 0;
  size_t name_base = 0;  // offset of the first name byte
  size_t name_room = 0;  // bytes for names
  size_t name_used = 0;
  uint64_t ops = KVFS_OPS_BASE;  // what the daemon runs (kvfs_features)
};

namespace {

kvfs_batch_entry* Entries(const kvfs_table* t) {
  return static_cast<kvfs_batch_entry*>(kvfs_buffer_data(t->mem));
}

}  // namespace

extern "C" {

int kvfs_table_create(int fd, uint32_t max_entries, size_t name_bytes, kvfs_table** out) {
  if (out == nullptr || max_entries == 0 || max_entries > KVFS_BATCH_MAX_ENTRIES) return -EINVAL;
  if (name_bytes == 0) name_bytes = size_t{256} * max_entries;
  // Cap the names as the registration is capped (and keep the sum finite).
  if (name_bytes > KVFS_REGISTER_MAX_BYTES / 2) return -EINVAL;
  auto* t = new (std::nothrow) kvfs_table;
  if (t == nullptr) return -ENOMEM;
  t->capacity = max_entries;
  t->name_base = sizeof(kvfs_batch_entry) * max_entries;
  // The buffer is rounded up to whole pages; the names get all of the rest.
  int rc = kvfs_buffer_create(fd, t->name_base + name_bytes, &t->mem);
  if (rc != 0) {
    delete t;
    return rc;
  }
  t->name_room = kvfs_buffer_size(t->mem) - t->name_base;
  kvfs_features_args f;
  rc = kvfs_features(fd, &f);
  if (rc < 0) {
    kvfs_table_destroy(t);
    return rc;
  }
  t->ops = f.ops;
  *out = t;
  return 0;
}

void kvfs_table_destroy(kvfs_table* t) {
  if (t == nullptr) return;
  // An unregister failure leaves the registration to die with the fd the
  // buffer closes; nothing else can be done here.
  (void)kvfs_buffer_destroy(t->mem);
  delete t;
}

void kvfs_table_reset(kvfs_table* t) {
  t->count = 0;
  t->name_used = 0;
}

int kvfs_table_supports(const kvfs_table* t, uint32_t op) {
  return op < 64 && (t->ops & KVFS_OP_BIT(op)) != 0;
}

uint32_t kvfs_table_count(const kvfs_table* t) { return t->count; }
uint32_t kvfs_table_capacity(const kvfs_table* t) { return t->capacity; }

int kvfs_table_add(kvfs_table* t, uint32_t op, const char* name, size_t name_len, uint64_t buf_id,
                   uint64_t buf_off, uint64_t length, uint64_t file_off) {
  if (name == nullptr && name_len != 0) return -EINVAL;
  if (name_len > KVFS_PATH_MAX) return -ENAMETOOLONG;
  if (t->count == t->capacity || t->name_room - t->name_used < name_len) return -ENOSPC;
  char* base = static_cast<char*>(kvfs_buffer_data(t->mem));
  size_t name_off = t->name_base + t->name_used;
  if (name_len != 0) std::memcpy(base + name_off, name, name_len);
  t->name_used += name_len;
  kvfs_batch_entry& e = Entries(t)[t->count];
  std::memset(&e, 0, sizeof e);
  e.op = op;
  e.name_len = static_cast<uint32_t>(name_len);
  e.name_off = name_off;
  e.buf_id = buf_id;
  e.buf_off = buf_off;
  e.length = length;
  e.file_off = file_off;
  return static_cast<int>(t->count++);
}

int kvfs_table_add_read(kvfs_table* t, const char* name, size_t name_len, const kvfs_buffer* buf,
                        uint64_t buf_off, uint64_t length, uint64_t file_off) {
  if (buf == nullptr) return -EINVAL;
  return kvfs_table_add(t, KVFS_OP_READ, name, name_len, kvfs_buffer_id(buf), buf_off, length,
                        file_off);
}

int kvfs_table_add_write(kvfs_table* t, const char* name, size_t name_len, const kvfs_buffer* buf,
                         uint64_t buf_off, uint64_t length) {
  if (buf == nullptr) return -EINVAL;
  return kvfs_table_add(t, KVFS_OP_WRITE, name, name_len, kvfs_buffer_id(buf), buf_off, length, 0);
}

int kvfs_table_add_read_mem(kvfs_table* t, const char* name, size_t name_len, void* dest,
                            uint64_t length, uint64_t file_off) {
  return kvfs_table_add(t, KVFS_OP_READ, name, name_len, 0, reinterpret_cast<uintptr_t>(dest),
                        length, file_off);
}

int kvfs_table_add_write_mem(kvfs_table* t, const char* name, size_t name_len, const void* src,
                             uint64_t length) {
  return kvfs_table_add(t, KVFS_OP_WRITE, name, name_len, 0, reinterpret_cast<uintptr_t>(src),
                        length, 0);
}

int kvfs_table_add_stat(kvfs_table* t, const char* name, size_t name_len) {
  return kvfs_table_add(t, KVFS_OP_STAT, name, name_len, 0, 0, 0, 0);
}

int kvfs_table_add_exists(kvfs_table* t, const char* name, size_t name_len) {
  return kvfs_table_add(t, KVFS_OP_EXISTS, name, name_len, 0, 0, 0, 0);
}

int kvfs_table_add_prefetch(kvfs_table* t, const char* name, size_t name_len) {
  return kvfs_table_add(t, KVFS_OP_PREFETCH, name, name_len, 0, 0, 0, 0);
}

int kvfs_table_add_delete(kvfs_table* t, const char* name, size_t name_len) {
  return kvfs_table_add(t, KVFS_OP_DELETE, name, name_len, 0, 0, 0, 0);
}

int kvfs_batch(int dirfd, kvfs_table* t, kvfs_batch_args* summary) {
  kvfs_batch_args args;
  std::memset(&args, 0, sizeof args);
  kvfs_batch_entry* e = Entries(t);
  int rc = 0;
  if (t->count != 0) rc = kvfs_batch_raw(dirfd, kvfs_buffer_id(t->mem), 0, t->count, &args);
  if (rc < 0) {
    // The daemon wrote no entry; give each one the call's error so a caller
    // that only looks at entries cannot mistake them for successes.
    std::memset(&args, 0, sizeof args);
    for (uint32_t i = 0; i < t->count; i++) {
      e[i].status = -rc;
      e[i].result = 0;
    }
  }
  if (summary != nullptr) *summary = args;
  if (rc < 0) return rc;
  int failed = 0;
  for (uint32_t i = 0; i < t->count; i++) failed += e[i].status != 0;
  return failed;
}

int kvfs_table_status(const kvfs_table* t, uint32_t i) { return -Entries(t)[i].status; }
uint64_t kvfs_table_result(const kvfs_table* t, uint32_t i) { return Entries(t)[i].result; }
const kvfs_batch_entry* kvfs_table_entry(const kvfs_table* t, uint32_t i) { return &Entries(t)[i]; }

}  // extern "C"
