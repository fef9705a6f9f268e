// kvfs_read_batch & co.: n names in, n statuses out, in as many batches as
// the scratch table's room needs.
#include <errno.h>

#include <cstring>
#include <new>

#include "kvfs/kvfs.h"

namespace {

struct Ops {
  uint32_t op;
  const kvfs_buffer* buf;  // READ/WRITE: nullptr means addresses (buf_id 0)
  const uint64_t* offs;    // READ/WRITE only
  const uint64_t* lens;    // READ/WRITE only
};

bool HasData(uint32_t op) { return op == KVFS_OP_READ || op == KVFS_OP_WRITE; }

int Add(kvfs_table* t, const Ops& o, const char* name, size_t i) {
  size_t len = std::strlen(name);
  if (!HasData(o.op)) return kvfs_table_add(t, o.op, name, len, 0, 0, 0, 0);
  uint64_t id = o.buf != nullptr ? kvfs_buffer_id(o.buf) : 0;
  return kvfs_table_add(t, o.op, name, len, id, o.offs[i], o.lens[i], 0);
}

void Fail(int* statuses, uint64_t* results, size_t i, int err) {
  statuses[i] = err;
  if (results != nullptr) results[i] = 0;
}

int Run(int dirfd, kvfs_table* scratch, size_t n, const char* const names[], const Ops& asked,
        int* statuses, uint64_t* results) {
  if (n == 0) return 0;
  if (names == nullptr || statuses == nullptr) return -EINVAL;
  if (HasData(asked.op) && (asked.offs == nullptr || asked.lens == nullptr)) return -EINVAL;
  for (size_t i = 0; i < n; i++) {
    if (names[i] == nullptr) return -EINVAL;
  }
  kvfs_table* t = scratch;
  if (t == nullptr) {
    // Room for the first table-full; later names fit or run in more calls.
    uint32_t cap = n < KVFS_BATCH_MAX_ENTRIES ? static_cast<uint32_t>(n) : KVFS_BATCH_MAX_ENTRIES;
    size_t name_bytes = 1;
    for (uint32_t i = 0; i < cap; i++) name_bytes += std::strlen(names[i]);
    int rc = kvfs_table_create(dirfd, cap, name_bytes, &t);
    if (rc != 0) {
      for (size_t i = 0; i < n; i++) Fail(statuses, results, i, rc);
      return rc;
    }
  }
  Ops o = asked;
  if (o.op == KVFS_OP_EXISTS && !kvfs_table_supports(t, KVFS_OP_EXISTS)) {
    o.op = KVFS_OP_STAT;  // the same answer from a daemon without EXISTS
  }
  // Input index of each table entry (entries whose add failed are skipped).
  auto* index = new (std::nothrow) size_t[kvfs_table_capacity(t)];
  if (index == nullptr) {
    if (t != scratch) kvfs_table_destroy(t);
    return -ENOMEM;
  }
  int failed = 0;
  int call_error = 0;
  size_t i = 0;
  while (i < n && call_error == 0) {
    kvfs_table_reset(t);
    while (i < n) {
      int rc = Add(t, o, names[i], i);
      if (rc >= 0) {
        index[rc] = i++;
        continue;
      }
      if (rc == -ENOSPC && kvfs_table_count(t) != 0) break;  // run, then go on
      // This entry cannot be laid out (too long, or too long for this
      // table's name room): it fails alone.
      Fail(statuses, results, i++, rc);
      failed++;
    }
    int rc = kvfs_batch(dirfd, t, nullptr);
    if (rc < 0) {
      call_error = rc;
      break;
    }
    for (uint32_t k = 0; k < kvfs_table_count(t); k++) {
      int st = kvfs_table_status(t, k);
      statuses[index[k]] = st;
      if (results != nullptr) results[index[k]] = st == 0 ? kvfs_table_result(t, k) : 0;
    }
    failed += rc;
  }
  if (call_error != 0) {
    // The failed call's entries and everything after them.
    for (uint32_t k = 0; k < kvfs_table_count(t); k++)
      Fail(statuses, results, index[k], call_error);
    for (; i < n; i++) Fail(statuses, results, i, call_error);
  }
  delete[] index;
  if (t != scratch) kvfs_table_destroy(t);
  return call_error != 0 ? call_error : failed;
}

}  // namespace

extern "C" {

int kvfs_read_batch(int dirfd, kvfs_table* scratch, size_t n, const char* const names[],
                    const kvfs_buffer* buf, const uint64_t buf_offs[], const uint64_t lengths[],
                    int statuses[], uint64_t bytes_read[]) {
  return Run(dirfd, scratch, n, names, Ops{KVFS_OP_READ, buf, buf_offs, lengths}, statuses,
             bytes_read);
}

int kvfs_write_batch(int dirfd, kvfs_table* scratch, size_t n, const char* const names[],
                     const kvfs_buffer* buf, const uint64_t buf_offs[], const uint64_t lengths[],
                     int statuses[], uint64_t bytes_written[]) {
  return Run(dirfd, scratch, n, names, Ops{KVFS_OP_WRITE, buf, buf_offs, lengths}, statuses,
             bytes_written);
}

int kvfs_stat_batch(int dirfd, kvfs_table* scratch, size_t n, const char* const names[],
                    int statuses[], uint64_t sizes[]) {
  return Run(dirfd, scratch, n, names, Ops{KVFS_OP_STAT, nullptr, nullptr, nullptr}, statuses,
             sizes);
}

int kvfs_exists_batch(int dirfd, kvfs_table* scratch, size_t n, const char* const names[],
                      int statuses[]) {
  return Run(dirfd, scratch, n, names, Ops{KVFS_OP_EXISTS, nullptr, nullptr, nullptr}, statuses,
             nullptr);
}

int kvfs_prefetch_batch(int dirfd, kvfs_table* scratch, size_t n, const char* const names[],
                        int statuses[], uint64_t queued[]) {
  return Run(dirfd, scratch, n, names, Ops{KVFS_OP_PREFETCH, nullptr, nullptr, nullptr}, statuses,
             queued);
}

int kvfs_delete_batch(int dirfd, kvfs_table* scratch, size_t n, const char* const names[],
                      int statuses[]) {
  return Run(dirfd, scratch, n, names, Ops{KVFS_OP_DELETE, nullptr, nullptr, nullptr}, statuses,
             nullptr);
}

}  // extern "C"
