// The libfuse low-level handlers of kvfs, by op family. Each decodes the
// request, calls fs::FileSystem, and ends in exactly one fuse_reply_*
// (for Read and Fsync: from the fs/ completion callback, on whichever thread
// finishes the work). Handlers run on libfuse worker threads, concurrently.
//
// Implementation detail of fuse/route.cc, which puts them in the op table
// behind the control directory's routing: they never see a control inode
// (fuse/control.h).
#pragma once

#include <fuse_lowlevel.h>

namespace kvfs::fuse::ops {

// ops_entry.cc: names and attributes.
void Lookup(fuse_req_t req, fuse_ino_t parent, const char* name);
void Forget(fuse_req_t req, fuse_ino_t ino, uint64_t nlookup);
void ForgetMulti(fuse_req_t req, size_t count, fuse_forget_data* forgets);
void GetAttr(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi);
void SetAttr(fuse_req_t req, fuse_ino_t ino, struct stat* attr, int to_set, fuse_file_info* fi);
void MkDir(fuse_req_t req, fuse_ino_t parent, const char* name, mode_t mode);
void MkNod(fuse_req_t req, fuse_ino_t parent, const char* name, mode_t mode, dev_t rdev);
void RmDir(fuse_req_t req, fuse_ino_t parent, const char* name);
void Unlink(fuse_req_t req, fuse_ino_t parent, const char* name);
void Rename(fuse_req_t req, fuse_ino_t parent, const char* name, fuse_ino_t newparent,
            const char* newname, unsigned int flags);
// access(2), chdir(2): only sent without default_permissions.
void Access(fuse_req_t req, fuse_ino_t ino, int mask);
void Link(fuse_req_t req, fuse_ino_t ino, fuse_ino_t newparent, const char* newname);
void Symlink(fuse_req_t req, const char* link, fuse_ino_t parent, const char* name);

// ops_file.cc: regular files.
void Create(fuse_req_t req, fuse_ino_t parent, const char* name, mode_t mode, fuse_file_info* fi);
void Open(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi);
void Read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, fuse_file_info* fi);
void Write(fuse_req_t req, fuse_ino_t ino, const char* buf, size_t size, off_t off,
           fuse_file_info* fi);
void Flush(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi);
void Release(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi);
void Fsync(fuse_req_t req, fuse_ino_t ino, int datasync, fuse_file_info* fi);
void Fallocate(fuse_req_t req, fuse_ino_t ino, int mode, off_t offset, off_t length,
               fuse_file_info* fi);

// ops_dir.cc: directories and the volume.
void OpenDir(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi);
void ReadDir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, fuse_file_info* fi);
void ReleaseDir(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi);
void FsyncDir(fuse_req_t req, fuse_ino_t ino, int datasync, fuse_file_info* fi);
void StatFs(fuse_req_t req, fuse_ino_t ino);

// ops_misc.cc: ioctl.
void Ioctl(fuse_req_t req, fuse_ino_t ino, unsigned int cmd, void* arg, fuse_file_info* fi,
           unsigned flags, const void* in_buf, size_t in_bufsz, size_t out_bufsz);

// ops_xattr.cc: extended attributes.
void SetXattr(fuse_req_t req, fuse_ino_t ino, const char* name, const char* value, size_t size,
              int flags);
void GetXattr(fuse_req_t req, fuse_ino_t ino, const char* name, size_t size);
void ListXattr(fuse_req_t req, fuse_ino_t ino, size_t size);
void RemoveXattr(fuse_req_t req, fuse_ino_t ino, const char* name);

// batch_ioctl.cc: KVFS_IOC_REGISTER, KVFS_IOC_UNREGISTER, KVFS_IOC_BATCH
// and KVFS_IOC_FEATURES (include/kvfs/ioctl.h); Ioctl() routes every command of kvfs's ioctl
// magic here. BATCH replies from the batch's completion, on a runner thread.
void KvfsIoctl(fuse_req_t req, fuse_ino_t ino, unsigned int cmd, fuse_file_info* fi,
               unsigned flags, const void* in_buf, size_t in_bufsz, size_t out_bufsz);

}  // namespace kvfs::fuse::ops
