"""The batch ioctl ABI of include/kvfs/ioctl.h (version 1), in Python.

Constants and struct layouts mirror the C header field for field; the tests
compare them with the values a C compiler computes from the header. Layouts
use the native byte order with standard sizes and no implicit padding (the
C structs have none either).
"""
import struct

ABI_VERSION = 1

NAME_MAX = 255                    # bytes of one path component
PATH_MAX = 4096                   # bytes of an entry's name
BATCH_MAX_ENTRIES = 4096          # entries per KVFS_IOC_BATCH
ENTRY_MAX_BYTES = 1 << 31         # data bytes of one entry
MAX_REGISTRATIONS = 64            # live registrations per process
REGISTER_MAX_BYTES = 1 << 40      # bytes of one registration

OP_READ = 1
OP_WRITE = 2
OP_STAT = 3
OP_PREFETCH = 4
OP_DELETE = 5
OP_EXISTS = 6


def op_bit(op):
    """KVFS_OP_BIT: the bit of `op` in FEATURES_ARGS' ops."""
    return 1 << op


# KVFS_OPS_BASE: what every daemon of version 1 runs, also one that
# predates KVFS_IOC_FEATURES.
OPS_BASE = op_bit(OP_READ) | op_bit(OP_WRITE) | op_bit(OP_STAT) | op_bit(OP_PREFETCH) | \
    op_bit(OP_DELETE)

# struct kvfs_batch_entry (64 bytes): op, name_len, name_off, buf_id, buf_off,
# length, file_off, status, flags, result.
ENTRY = struct.Struct("=IIQQQQQiIQ")
# The outputs of an entry: status, flags (skipped) and result.
ENTRY_OUT = struct.Struct("=48xiIQ")
# struct kvfs_register_args: version, fd, length, flags, buf_id.
REGISTER_ARGS = struct.Struct("=IiQQQ")
# struct kvfs_unregister_args: version, reserved, buf_id.
UNREGISTER_ARGS = struct.Struct("=IIQ")
# struct kvfs_batch_args: version, count, table_id, table_off, flags,
# completed, failed, bytes.
BATCH_ARGS = struct.Struct("=IIQQQIIQ")
# struct kvfs_features_args: version, reserved, flags, ops, spare[5].
FEATURES_ARGS = struct.Struct("=IIQQ40x")

assert ENTRY.size == 64 and ENTRY_OUT.size == 64
assert REGISTER_ARGS.size == 32 and UNREGISTER_ARGS.size == 16 and BATCH_ARGS.size == 48
assert FEATURES_ARGS.size == 64

# <asm-generic/ioctl.h> encoding (x86-64, arm64, riscv64, s390x): direction
# in bits 30-31, argument size in bits 16-29, type in 8-15, number in 0-7.
_IOC_WRITE = 1
_IOC_READ = 2


def _ioc(direction, type_, nr, size):
    return (direction << 30) | (size << 16) | (type_ << 8) | nr


IOC_MAGIC = 0xB7
IOC_REGISTER = _ioc(_IOC_READ | _IOC_WRITE, IOC_MAGIC, 1, REGISTER_ARGS.size)
IOC_UNREGISTER = _ioc(_IOC_WRITE, IOC_MAGIC, 2, UNREGISTER_ARGS.size)
IOC_BATCH = _ioc(_IOC_READ | _IOC_WRITE, IOC_MAGIC, 3, BATCH_ARGS.size)
IOC_FEATURES = _ioc(_IOC_READ | _IOC_WRITE, IOC_MAGIC, 4, FEATURES_ARGS.size)
