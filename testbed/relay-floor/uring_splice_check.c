/*
 * uring-splice-check: does io_uring's IORING_OP_SPLICE move a TCP stream's bytes on this
 * kernel, and what does it cost against the alternatives? (issue 16, a measurement device,
 * not the PEP). One process: a sender thread writes BYTES into a loopback TCP connection, a
 * relay thread moves them to a second connection, a receiver thread reads and checks them.
 * The relay, per method:
 *
 *   uring-splice  IORING_OP_SPLICE socket -> pipe, then pipe -> socket (blocking sockets:
 *                 the kernel runs every splice in an io_uring worker thread)
 *   uring-splice-polled  the same with non-blocking sockets, each splice linked behind an
 *                 io_uring poll (no worker blocks waiting for bytes)
 *   poll-splice   io_uring poll for readiness, splice(2) socket -> pipe -> socket in the
 *                 relay thread (non-blocking sockets), as the PEP core's bulk path does
 *   copy          io_uring recv into a 128 KiB buffer, then send (the core's short-flow path)
 *
 * Prints: method, bytes, seconds, Gbit/s, CPU seconds of the process (every thread,
 * io_uring workers included) per Gbit, and the io_uring worker threads seen. Exit 1 if the
 * bytes arrive wrong or short.
 *
 *   uring-splice-check METHOD [MiB]
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <liburing.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define CHUNK (128 << 10)
#define PIPE_BYTES (1 << 20)

static uint64_t total;

/* The stream repeats a 251-byte pattern (prime: no power-of-two shift matches it); the
 * receiver checks every byte with memcmp, so checking costs little beside the relay. */
#define PERIOD 251
static unsigned char pattern[(1 << 16) + PERIOD];

static void die(const char *what) {
	perror(what);
	exit(2);
}

/* A connected pair over loopback: out[0] the connecting end, out[1] the accepted one. */
static void tcp_pair(int out[2]) {
	int l = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t len = sizeof a;
	if (l < 0 || bind(l, (void *)&a, sizeof a) || listen(l, 1) || getsockname(l, (void *)&a, &len))
		die("listen");
	out[0] = socket(AF_INET, SOCK_STREAM, 0);
	if (connect(out[0], (void *)&a, sizeof a)) die("connect");
	out[1] = accept(l, NULL, NULL);
	close(l);
}

static void *sender(void *arg) {
	int fd = *(int *)arg;
	for (uint64_t off = 0; off < total;) {
		size_t n = 1 << 16;
		if (n > total - off) n = total - off;
		ssize_t r = send(fd, pattern + off % PERIOD, n, 0);
		if (r <= 0) die("send");
		off += (uint64_t)r;
	}
	shutdown(fd, SHUT_WR);
	return NULL;
}

static void *receiver(void *arg) {
	int fd = *(int *)arg;
	static unsigned char buf[1 << 16];
	uint64_t off = 0, *bad = calloc(1, sizeof *bad);
	for (ssize_t r; (r = recv(fd, buf, sizeof buf, 0)) > 0; off += (uint64_t)r)
		*bad += memcmp(buf, pattern + off % PERIOD, (size_t)r) != 0;
	if (off != total) *bad += 1;
	return bad;
}

static struct io_uring ring;

static int wait_one(uint64_t *data) {
	struct io_uring_cqe *cqe;
	io_uring_submit_and_wait(&ring, 1);
	if (io_uring_peek_cqe(&ring, &cqe)) die("cqe");
	int res = cqe->res;
	if (data) *data = cqe->user_data;
	io_uring_cqe_seen(&ring, cqe);
	return res;
}

/* IORING_OP_SPLICE both ways; the socket -> pipe step is capped by the pipe's room. */
static int relay_uring_splice(int src, int dst) {
	int p[2];
	if (pipe2(p, O_CLOEXEC) || fcntl(p[1], F_SETPIPE_SZ, PIPE_BYTES) < 0) die("pipe");
	for (;;) {
		io_uring_prep_splice(io_uring_get_sqe(&ring), src, -1, p[1], -1, PIPE_BYTES, 0);
		int n = wait_one(NULL);
		if (n < 0) return n;
		if (n == 0) return shutdown(dst, SHUT_WR);
		while (n > 0) {
			io_uring_prep_splice(io_uring_get_sqe(&ring), p[0], -1, dst, -1, (unsigned)n, 0);
			int m = wait_one(NULL);
			if (m <= 0) return m ? m : -EIO;
			n -= m;
		}
	}
}

/* The same with non-blocking sockets, each splice linked behind an io_uring poll of its
 * socket: no worker waits for bytes, but every splice still runs in a worker. */
static int polled_splice(int in, int out, unsigned len, int sock, unsigned events) {
	struct io_uring_sqe *poll = io_uring_get_sqe(&ring);
	io_uring_prep_poll_add(poll, sock, events);
	poll->flags |= IOSQE_IO_LINK;
	io_uring_prep_splice(io_uring_get_sqe(&ring), in, -1, out, -1, len, SPLICE_F_NONBLOCK);
	int res = wait_one(NULL);
	return res < 0 ? res : wait_one(NULL);
}

static int relay_uring_splice_polled(int src, int dst) {
	int p[2];
	if (pipe2(p, O_CLOEXEC) || fcntl(p[1], F_SETPIPE_SZ, PIPE_BYTES) < 0) die("pipe");
	fcntl(src, F_SETFL, O_NONBLOCK);
	fcntl(dst, F_SETFL, O_NONBLOCK);
	for (;;) {
		int n = polled_splice(src, p[1], PIPE_BYTES, src, POLLIN);
		if (n == -EAGAIN) continue;
		if (n < 0) return n;
		if (n == 0) return shutdown(dst, SHUT_WR);
		while (n > 0) {
			int m = polled_splice(p[0], dst, (unsigned)n, dst, POLLOUT);
			if (m == -EAGAIN) continue;
			if (m <= 0) return m ? m : -EIO;
			n -= m;
		}
	}
}

static void wait_ready(int fd, unsigned events) {
	io_uring_prep_poll_add(io_uring_get_sqe(&ring), fd, events);
	wait_one(NULL);
}

/* Readiness from io_uring, the bytes moved by splice(2) in this thread. */
static int relay_poll_splice(int src, int dst) {
	int p[2];
	if (pipe2(p, O_CLOEXEC | O_NONBLOCK) || fcntl(p[1], F_SETPIPE_SZ, PIPE_BYTES) < 0) die("pipe");
	fcntl(src, F_SETFL, O_NONBLOCK);
	fcntl(dst, F_SETFL, O_NONBLOCK);
	size_t in_pipe = 0;
	int eof = 0;
	for (;;) {
		ssize_t n = 0;
		if (!eof && in_pipe < PIPE_BYTES) {
			n = splice(src, NULL, p[1], NULL, PIPE_BYTES - in_pipe, SPLICE_F_NONBLOCK | SPLICE_F_MOVE);
			if (n == 0) eof = 1;
			else if (n > 0) in_pipe += (size_t)n;
			else if (errno != EAGAIN) return -errno;
		}
		ssize_t m = 0;
		if (in_pipe) {
			m = splice(p[0], NULL, dst, NULL, in_pipe, SPLICE_F_NONBLOCK | SPLICE_F_MOVE);
			if (m > 0) in_pipe -= (size_t)m;
			else if (m < 0 && errno != EAGAIN) return -errno;
		}
		if (eof && !in_pipe) return shutdown(dst, SHUT_WR);
		if (n > 0 || m > 0) continue;
		wait_ready(in_pipe ? dst : src, in_pipe ? POLLOUT : POLLIN);
	}
}

static int relay_copy(int src, int dst) {
	static char buf[CHUNK];
	for (;;) {
		io_uring_prep_recv(io_uring_get_sqe(&ring), src, buf, CHUNK, 0);
		int n = wait_one(NULL);
		if (n < 0) return n;
		if (n == 0) return shutdown(dst, SHUT_WR);
		for (int sent = 0; sent < n;) {
			io_uring_prep_send(io_uring_get_sqe(&ring), dst, buf + sent, (size_t)(n - sent), MSG_NOSIGNAL);
			int m = wait_one(NULL);
			if (m <= 0) return m ? m : -EIO;
			sent += m;
		}
	}
}

/* io_uring worker threads of this process ("iou-wrk-*"), counted at the end. */
static int uring_workers(void) {
	DIR *d = opendir("/proc/self/task");
	struct dirent *e;
	int n = 0;
	char path[300], name[32];
	while (d && (e = readdir(d))) {
		snprintf(path, sizeof path, "/proc/self/task/%s/comm", e->d_name);
		FILE *f = fopen(path, "r");
		if (f && fgets(name, sizeof name, f) && !strncmp(name, "iou-wrk", 7)) n++;
		if (f) fclose(f);
	}
	if (d) closedir(d);
	return n;
}

static double seconds(const struct timeval *tv) { return (double)tv->tv_sec + tv->tv_usec / 1e6; }

int main(int argc, char **argv) {
	if (argc < 2) {
		fprintf(stderr, "usage: %s uring-splice|uring-splice-polled|poll-splice|copy [MiB]\n", argv[0]);
		return 2;
	}
	total = (uint64_t)(argc > 2 ? atoll(argv[2]) : 2048) << 20;
	for (size_t i = 0; i < sizeof pattern; i++) pattern[i] = (unsigned char)(i % PERIOD * 97 + 1);
	int a[2], b[2]; /* a: sender -> relay, b: relay -> receiver */
	tcp_pair(a);
	tcp_pair(b);
	if (io_uring_queue_init(64, &ring, IORING_SETUP_SINGLE_ISSUER)) die("io_uring");
	pthread_t s, r;
	pthread_create(&s, NULL, sender, &a[0]);
	pthread_create(&r, NULL, receiver, &b[1]);
	struct timespec t0, t1;
	struct rusage u0, u1;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	getrusage(RUSAGE_SELF, &u0);
	int res = !strcmp(argv[1], "uring-splice") ? relay_uring_splice(a[1], b[0])
		  : !strcmp(argv[1], "uring-splice-polled") ? relay_uring_splice_polled(a[1], b[0])
		  : !strcmp(argv[1], "poll-splice") ? relay_poll_splice(a[1], b[0])
						     : relay_copy(a[1], b[0]);
	int workers = uring_workers();
	void *bad;
	pthread_join(s, NULL);
	pthread_join(r, &bad);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	getrusage(RUSAGE_SELF, &u1);
	double wall = (double)(t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) / 1e9;
	double cpu = seconds(&u1.ru_utime) - seconds(&u0.ru_utime) + seconds(&u1.ru_stime) -
		     seconds(&u0.ru_stime);
	double gbit = (double)total * 8 / 1e9;
	printf("%s bytes=%llu s=%.3f gbit_s=%.2f cpu_s_per_gbit=%.4f uring_workers=%d relay=%d bad=%llu\n",
	       argv[1], (unsigned long long)total, wall, gbit / wall, cpu / gbit, workers, res,
	       (unsigned long long)*(uint64_t *)bad);
	return res < 0 || *(uint64_t *)bad ? 1 : 0;
}
