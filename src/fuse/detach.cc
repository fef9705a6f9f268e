#include "fuse/detach.h"

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>

namespace kvfs::fuse {

Result<Detacher> Detacher::Fork() {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return Status::FromErrno("pipe");
  pid_t pid = fork();
  if (pid < 0) {
    Status st = Status::FromErrno("fork");
    close(fds[0]);
    close(fds[1]);
    return st;
  }
  if (pid > 0) {
    // Parent: one byte means mounted; end of file means the child exited
    // first (it printed why).
    close(fds[1]);
    char c;
    ssize_t n;
    do {
      n = read(fds[0], &c, 1);
    } while (n < 0 && errno == EINTR);
    if (n == 1) _exit(0);
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    if (WIFEXITED(status)) _exit(WEXITSTATUS(status) != 0 ? WEXITSTATUS(status) : 1);
    _exit(1);
  }
  close(fds[0]);
  setsid();
  return Detacher(fds[1]);
}

Detacher::~Detacher() {
  if (ready_fd_ >= 0) close(ready_fd_);
}

void Detacher::Ready() {
  if (ready_fd_ < 0) return;
  int null = open("/dev/null", O_RDWR);
  if (null >= 0) {
    dup2(null, STDIN_FILENO);
    dup2(null, STDOUT_FILENO);
    dup2(null, STDERR_FILENO);
    if (null > STDERR_FILENO) close(null);
  }
  if (chdir("/") != 0) {
    // Nothing relies on the working directory (every path is absolute).
  }
  char c = 1;
  ssize_t n;
  do {
    n = write(ready_fd_, &c, 1);
  } while (n < 0 && errno == EINTR);
  close(ready_fd_);
  ready_fd_ = -1;
}

}  // namespace kvfs::fuse
