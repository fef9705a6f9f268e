/* cycle_write: a write/read-back integrity reproducer in the spirit of
 * xfstests generic/451 (aio-dio-cycle-write), written for kvfs.
 *
 * usage: cycle_write [-m aio|sync|buffered] [-s seconds] [-r nreaders]
 *                    [-R hold|loop] FILE
 *
 * A writer loops: fill a 640 KiB buffer with a byte alternating 0xaa, 0x55,
 * ...; open FILE O_RDWR|O_CREAT (plus O_DIRECT in aio and sync modes); write
 * the buffer at offset 0 (aio: raw io_submit/io_getevents, no libaio; sync:
 * pwrite; buffered: pwrite without O_DIRECT); close; reopen read-only (again
 * O_DIRECT in aio/sync) and read it back (aio mode reads back through AIO
 * too) and check every byte. Meanwhile nreaders forked children read FILE
 * buffered, all the time: `hold` keeps one O_RDONLY fd and preads the whole
 * file over and over, `loop` opens, reads the whole file, closes, repeats.
 * Readers ignore the content but report any error other than ENOENT before
 * their first successful open.
 *
 * Fails (exit 1) on: a writer open/write/read error (e.g. EIO from
 * open(O_RDWR) while readers hold the file), a short write or read, a byte
 * that differs from the pattern, a reader error, or a reader that does not
 * exit within 10 s of being told to stop. Prints `cycles=N ok` on success.
 * Exit 2: usage or setup error.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <linux/aio_abi.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define BUF_SIZE (640 * 1024)
#define ALIGN 4096
#define MAX_READERS 64

enum mode { MODE_AIO, MODE_SYNC, MODE_BUFFERED };

struct shared {
	volatile int stop;
	volatile long reader_errors;
	volatile long reader_reads[MAX_READERS];
};

static struct shared *sh;
static const char *path;
static enum mode mode = MODE_AIO;
static aio_context_t aio_ctx;

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void usage(void)
{
	fprintf(stderr, "usage: cycle_write [-m aio|sync|buffered] [-s seconds] [-r nreaders] "
			"[-R hold|loop] FILE\n");
	exit(2);
}

/* ---- readers ---------------------------------------------------------- */

static void reader_error(int id, const char *what)
{
	int e = errno;
	long n = __atomic_add_fetch(&sh->reader_errors, 1, __ATOMIC_SEQ_CST);
	if (n <= 20)
		fprintf(stderr, "cycle_write: FAIL reader %d: %s %s: %s (errno %d)\n", id, what, path,
			strerror(e), e);
}

/* Reads the whole file from fd (pread from 0 to EOF). Returns 0 or -1. */
static int read_whole(int fd, char *buf)
{
	off_t off = 0;
	for (;;) {
		ssize_t r = pread(fd, buf, BUF_SIZE, off);
		if (r < 0) {
			if (errno == EINTR)
				continue;
			return -1;
		}
		if (r == 0)
			return 0;
		off += r;
	}
}

static void reader(int id, int hold)
{
	char *buf = malloc(BUF_SIZE);
	int opened_once = 0;
	int fd = -1;
	if (!buf)
		_exit(2);
	while (!sh->stop) {
		if (fd < 0) {
			fd = open(path, O_RDONLY);
			if (fd < 0) {
				if (errno == ENOENT && !opened_once) {
					usleep(1000);
					continue;
				}
				if (errno == EINTR)
					continue;
				reader_error(id, "open(O_RDONLY)");
				usleep(10000);
				continue;
			}
			opened_once = 1;
		}
		if (read_whole(fd, buf) < 0)
			reader_error(id, "pread");
		else
			sh->reader_reads[id]++;
		if (!hold) {
			if (close(fd) < 0)
				reader_error(id, "close");
			fd = -1;
		}
	}
	if (fd >= 0 && close(fd) < 0)
		reader_error(id, "close");
	_exit(0);
}

/* ---- writer ----------------------------------------------------------- */

static int aio_rw(int fd, int write, char *buf, size_t len, off_t off, long *res)
{
	struct iocb cb;
	struct iocb *cbs[1] = {&cb};
	struct io_event ev;
	memset(&cb, 0, sizeof(cb));
	cb.aio_fildes = fd;
	cb.aio_lio_opcode = write ? IOCB_CMD_PWRITE : IOCB_CMD_PREAD;
	cb.aio_buf = (uint64_t)(uintptr_t)buf;
	cb.aio_nbytes = len;
	cb.aio_offset = off;
	long r;
	do
		r = syscall(SYS_io_submit, aio_ctx, 1, cbs);
	while (r < 0 && errno == EINTR);
	if (r != 1) {
		if (r >= 0)
			errno = EIO;
		return -1;
	}
	do
		r = syscall(SYS_io_getevents, aio_ctx, 1, 1, &ev, NULL);
	while (r < 0 && errno == EINTR);
	if (r != 1) {
		if (r >= 0)
			errno = EIO;
		return -1;
	}
	*res = ev.res;
	return 0;
}

/* Writes or reads len bytes at offset 0; fails on an error or a short
 * transfer (after retrying the remainder once it stops making progress). */
static int xfer(int fd, int write, char *buf, size_t len, long iter, const char *what)
{
	size_t done = 0;
	while (done < len) {
		long r;
		if (mode == MODE_AIO) {
			if (aio_rw(fd, write, buf + done, len - done, done, &r) < 0) {
				fprintf(stderr, "cycle_write: FAIL iteration %ld: io_submit/io_getevents (%s): %s\n",
					iter, what, strerror(errno));
				return -1;
			}
			if (r < 0) {
				fprintf(stderr, "cycle_write: FAIL iteration %ld: aio %s at offset %zu: %s (errno %ld)\n",
					iter, what, done, strerror((int)-r), -r);
				return -1;
			}
		} else {
			r = write ? pwrite(fd, buf + done, len - done, done) : pread(fd, buf + done, len - done, done);
			if (r < 0) {
				if (errno == EINTR)
					continue;
				fprintf(stderr, "cycle_write: FAIL iteration %ld: %s at offset %zu: %s (errno %d)\n",
					iter, what, done, strerror(errno), errno);
				return -1;
			}
		}
		if (r == 0) {
			fprintf(stderr, "cycle_write: FAIL iteration %ld: %s: short transfer, %zu of %zu bytes\n",
				iter, what, done, len);
			return -1;
		}
		if (r != (long)(len - done))
			fprintf(stderr, "cycle_write: note iteration %ld: %s: partial %ld of %zu bytes at %zu\n",
				iter, what, r, len - done, done);
		done += r;
	}
	return 0;
}

static pid_t pids[MAX_READERS];
static int nreaders = 2;

/* Stops the readers; returns the number of failures (hung or bad exit). */
static int stop_readers(void)
{
	int failures = 0;
	sh->stop = 1;
	double deadline = now() + 10;
	int left = nreaders;
	int done[MAX_READERS] = {0};
	while (left > 0) {
		for (int i = 0; i < nreaders; i++) {
			if (done[i])
				continue;
			int st;
			pid_t r = waitpid(pids[i], &st, WNOHANG);
			if (r == pids[i]) {
				done[i] = 1;
				left--;
				if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
					fprintf(stderr, "cycle_write: FAIL reader %d (pid %d) ended with status 0x%x\n", i,
						pids[i], st);
					failures++;
				}
			}
		}
		if (left == 0)
			break;
		if (now() > deadline) {
			for (int i = 0; i < nreaders; i++) {
				if (done[i])
					continue;
				char p[64], line[256];
				fprintf(stderr, "cycle_write: FAIL reader %d (pid %d) HUNG: no exit 10 s after stop\n", i,
					pids[i]);
				snprintf(p, sizeof(p), "/proc/%d/wchan", pids[i]);
				FILE *f = fopen(p, "r");
				if (f) {
					if (fgets(line, sizeof(line), f))
						fprintf(stderr, "  wchan: %s\n", line);
					fclose(f);
				}
				snprintf(p, sizeof(p), "/proc/%d/stack", pids[i]);
				f = fopen(p, "r");
				if (f) {
					while (fgets(line, sizeof(line), f))
						fprintf(stderr, "  %s", line);
					fclose(f);
				}
				kill(pids[i], SIGKILL);
				waitpid(pids[i], NULL, 0);
				failures++;
			}
			break;
		}
		usleep(10000);
	}
	return failures;
}

int main(int argc, char **argv)
{
	double seconds = 10;
	int hold = 1;
	int c;
	while ((c = getopt(argc, argv, "m:s:r:R:h")) != -1) {
		switch (c) {
		case 'm':
			if (!strcmp(optarg, "aio"))
				mode = MODE_AIO;
			else if (!strcmp(optarg, "sync"))
				mode = MODE_SYNC;
			else if (!strcmp(optarg, "buffered"))
				mode = MODE_BUFFERED;
			else
				usage();
			break;
		case 's':
			seconds = atof(optarg);
			break;
		case 'r':
			nreaders = atoi(optarg);
			if (nreaders < 0 || nreaders > MAX_READERS)
				usage();
			break;
		case 'R':
			if (!strcmp(optarg, "hold"))
				hold = 1;
			else if (!strcmp(optarg, "loop"))
				hold = 0;
			else
				usage();
			break;
		default:
			usage();
		}
	}
	if (optind != argc - 1)
		usage();
	path = argv[optind];
	setvbuf(stdout, NULL, _IOLBF, 0);

	sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (sh == MAP_FAILED) {
		perror("mmap");
		return 2;
	}
	char *wbuf, *rbuf;
	if (posix_memalign((void **)&wbuf, ALIGN, BUF_SIZE) || posix_memalign((void **)&rbuf, ALIGN, BUF_SIZE)) {
		fprintf(stderr, "cycle_write: out of memory\n");
		return 2;
	}
	if (mode == MODE_AIO && syscall(SYS_io_setup, 1, &aio_ctx) < 0) {
		perror("io_setup");
		return 2;
	}
	const char *mname = mode == MODE_AIO ? "aio" : mode == MODE_SYNC ? "sync" : "buffered";
	printf("cycle_write: %s mode=%s seconds=%g readers=%d (%s)\n", path, mname, seconds, nreaders,
	       hold ? "hold" : "loop");

	for (int i = 0; i < nreaders; i++) {
		pid_t p = fork();
		if (p < 0) {
			perror("fork");
			sh->stop = 1;
			return 2;
		}
		if (p == 0)
			reader(i, hold);
		pids[i] = p;
	}

	int direct = mode != MODE_BUFFERED ? O_DIRECT : 0;
	long iter = 0;
	int failed = 0;
	double end = now() + seconds;
	unsigned char pattern = 0xaa;
	while (now() < end && !failed) {
		memset(wbuf, pattern, BUF_SIZE);
		int fd = open(path, O_RDWR | O_CREAT | direct, 0644);
		if (fd < 0) {
			fprintf(stderr, "cycle_write: FAIL iteration %ld: writer open(O_RDWR|O_CREAT%s) %s: %s (errno %d)\n",
				iter, direct ? "|O_DIRECT" : "", path, strerror(errno), errno);
			failed = 1;
			break;
		}
		if (xfer(fd, 1, wbuf, BUF_SIZE, iter, "write") < 0) {
			close(fd);
			failed = 1;
			break;
		}
		if (close(fd) < 0) {
			fprintf(stderr, "cycle_write: FAIL iteration %ld: close after write: %s\n", iter, strerror(errno));
			failed = 1;
			break;
		}
		fd = open(path, O_RDONLY | direct);
		if (fd < 0) {
			fprintf(stderr, "cycle_write: FAIL iteration %ld: reopen(O_RDONLY%s) %s: %s (errno %d)\n", iter,
				direct ? "|O_DIRECT" : "", path, strerror(errno), errno);
			failed = 1;
			break;
		}
		memset(rbuf, 0, BUF_SIZE);
		if (xfer(fd, 0, rbuf, BUF_SIZE, iter, "read back") < 0) {
			close(fd);
			failed = 1;
			break;
		}
		close(fd);
		long bad = 0, first = -1;
		unsigned char seen = 0;
		for (long i = 0; i < BUF_SIZE; i++) {
			if ((unsigned char)rbuf[i] != pattern) {
				if (first < 0) {
					first = i;
					seen = rbuf[i];
				}
				bad++;
			}
		}
		if (bad) {
			fprintf(stderr, "cycle_write: FAIL iteration %ld: data mismatch: first bad offset %ld (0x%lx), "
				"%ld bad bytes of %d, saw 0x%02x expected 0x%02x\n",
				iter, first, first, bad, BUF_SIZE, seen, pattern);
			failed = 1;
			break;
		}
		pattern = pattern == 0xaa ? 0x55 : 0xaa;
		iter++;
	}

	int rfail = stop_readers();
	long rreads = 0;
	for (int i = 0; i < nreaders; i++)
		rreads += sh->reader_reads[i];
	if (sh->reader_errors) {
		fprintf(stderr, "cycle_write: FAIL %ld reader errors\n", sh->reader_errors);
		rfail++;
	}
	if (failed || rfail) {
		printf("cycles=%ld FAILED (writer %s, reader failures %d, reader errors %ld, reader passes %ld)\n", iter,
		       failed ? "failed" : "ok", rfail, sh->reader_errors, rreads);
		return 1;
	}
	printf("cycles=%ld ok (reader passes %ld)\n", iter, rreads);
	return 0;
}
