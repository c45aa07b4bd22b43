/*
 * relay-floor-uring: relay-floor's kernel work driven by io_uring (a measurement device for
 * issue 16, not the PEP). Per thread one ring: a multishot accept on the listener, the WAN
 * connect, and per direction recv into a buffer then send of it (io_uring's splice always
 * goes to its blocking worker threads, so sockets are read and written with copies), FIN
 * forwarded with shutdown(2), RST by closing both legs with SO_LINGER 0. Submissions are
 * batched: one io_uring_enter per batch of completions. Socket set-up (original destination,
 * the WAN socket, TCP_NODELAY and the forced 16 MiB buffers) stays in system calls, as in
 * relay-floor, so that only the event and data path differs.
 *
 *   relay-floor-uring PORT THREADS [cpu-affinity]   (the option as relay-floor's)
 */
#define _GNU_SOURCE
#include <errno.h>
#include <liburing.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#include "floor_common.h"

#define CHUNK (32 << 10)
#define RING 4096

enum op { OP_ACCEPT, OP_CONNECT, OP_RECV, OP_SEND, OP_IGNORE };

struct flow;
struct pump {
	struct flow *flow;
	int src, dst, len, sent, done;
	char buf[CHUNK];
};
struct flow {
	int fd[2], inflight, failed;
	struct sockaddr_in dst; /* the connect op reads it when submitted */
	struct pump up, down;
	struct flow *next_free;
};

static int port, listeners[64], cpu_affinity;
static __thread struct flow *free_flows; /* reused: no allocator work per connection */

/* user_data: a pointer with the operation in its low 3 bits (structures are 8-aligned). */
static struct io_uring_sqe *sqe_for(struct io_uring *ring, void *p, enum op op) {
	struct io_uring_sqe *sqe = io_uring_get_sqe(ring);
	if (!sqe) {
		io_uring_submit(ring);
		sqe = io_uring_get_sqe(ring);
	}
	io_uring_sqe_set_data64(sqe, (uint64_t)(uintptr_t)p | op);
	return sqe;
}

static void arm_accept(struct io_uring *ring, int lfd) {
	io_uring_prep_multishot_accept(sqe_for(ring, NULL, OP_ACCEPT), lfd, NULL, NULL, 0);
}

static void recv_more(struct io_uring *ring, struct pump *p) {
	p->flow->inflight++;
	io_uring_prep_recv(sqe_for(ring, p, OP_RECV), p->src, p->buf, CHUNK, 0);
}

static void send_rest(struct io_uring *ring, struct pump *p) {
	p->flow->inflight++;
	io_uring_prep_send(sqe_for(ring, p, OP_SEND), p->dst, p->buf + p->sent, p->len - p->sent,
			   MSG_NOSIGNAL);
}

static void fail(struct io_uring *ring, struct flow *f) {
	if (f->failed) return;
	f->failed = 1;
	struct linger l = {1, 0};
	for (int i = 0; i < 2; i++) setsockopt(f->fd[i], SOL_SOCKET, SO_LINGER, &l, sizeof l);
	struct pump *p[2] = {&f->up, &f->down};
	for (int i = 0; i < 2; i++) /* wake whatever is pending on the flow */
		io_uring_prep_cancel64(sqe_for(ring, NULL, OP_IGNORE), (uint64_t)(uintptr_t)p[i] | OP_RECV, 0),
		io_uring_prep_cancel64(sqe_for(ring, NULL, OP_IGNORE), (uint64_t)(uintptr_t)p[i] | OP_SEND, 0);
}

/* The flow ends when nothing of it is in flight and either both directions are done
 * (FIN each way) or it failed (both legs closed with RST). */
static void maybe_end(struct flow *f) {
	if (f->inflight || !(f->failed || (f->up.done && f->down.done))) return;
	close(f->fd[0]);
	close(f->fd[1]);
	f->next_free = free_flows;
	free_flows = f;
}

static void accepted(struct io_uring *ring, int ran) {
	struct flow *f = free_flows;
	if (f) free_flows = f->next_free;
	else if (!(f = malloc(sizeof *f))) { close(ran); return; }
	socklen_t len = sizeof f->dst;
	getsockname(ran, (struct sockaddr *)&f->dst, &len); /* TPROXY: the original destination */
	int wan = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	set_int(wan, IPPROTO_TCP, TCP_NODELAY, 1);
	set_int(wan, SOL_SOCKET, SO_RCVBUFFORCE, BUF);
	set_int(wan, SOL_SOCKET, SO_SNDBUFFORCE, BUF);
	f->fd[0] = ran, f->fd[1] = wan;
	f->inflight = 1, f->failed = 0;
	f->up = (struct pump){.flow = f, .src = ran, .dst = wan};
	f->down = (struct pump){.flow = f, .src = wan, .dst = ran};
	io_uring_prep_connect(sqe_for(ring, f, OP_CONNECT), wan, (struct sockaddr *)&f->dst, len);
}

static void completed(struct io_uring *ring, uint64_t data, int res, unsigned flags, int lfd) {
	enum op op = data & 7;
	void *ptr = (void *)(uintptr_t)(data & ~(uint64_t)7);
	if (op == OP_IGNORE) return;
	if (op == OP_ACCEPT) {
		if (res >= 0) accepted(ring, res);
		if (!(flags & IORING_CQE_F_MORE)) arm_accept(ring, lfd);
		return;
	}
	struct flow *f = op == OP_CONNECT ? ptr : ((struct pump *)ptr)->flow;
	struct pump *p = ptr;
	f->inflight--;
	if (res < 0) fail(ring, f);
	if (f->failed) return maybe_end(f);
	switch (op) {
	case OP_CONNECT:
		recv_more(ring, &f->up);
		recv_more(ring, &f->down);
		break;
	case OP_RECV:
		if (res == 0) { /* FIN: forward it (a system call: io_uring's shutdown op always
				 * goes to its worker threads, measured as a context switch each) */
			shutdown(p->dst, SHUT_WR);
			p->done = 1;
			break;
		}
		p->len = res, p->sent = 0;
		send_rest(ring, p);
		break;
	case OP_SEND:
		p->sent += res;
		if (p->sent < p->len) send_rest(ring, p);
		else recv_more(ring, p);
		break;
	default:
		break;
	}
	maybe_end(f);
}

static void *relay(void *arg) {
	int lfd = listeners[(long)arg];
	if (cpu_affinity) pin_to_cpu((int)(long)arg);
	struct io_uring ring;
	/* One ring per thread, used only by it: task work runs when it waits for completions. */
	struct io_uring_params params = {
		.flags = IORING_SETUP_SUBMIT_ALL | IORING_SETUP_SINGLE_ISSUER |
			 IORING_SETUP_DEFER_TASKRUN | IORING_SETUP_CQSIZE,
		.cq_entries = 8 * RING,
	};
	int err = io_uring_queue_init_params(RING, &ring, &params);
	if (err) {
		fprintf(stderr, "io_uring_queue_init: %s\n", strerror(-err));
		exit(1);
	}
	arm_accept(&ring, lfd);
	for (;;) {
		io_uring_submit_and_wait(&ring, 1);
		struct io_uring_cqe *cqe;
		unsigned head, seen = 0;
		io_uring_for_each_cqe(&ring, head, cqe) {
			completed(&ring, cqe->user_data, cqe->res, cqe->flags, lfd);
			seen++;
		}
		io_uring_cq_advance(&ring, seen);
	}
	return NULL;
}

int main(int argc, char **argv) {
	if (argc < 3 || argc > 4 || (argc == 4 && strcmp(argv[3], "cpu-affinity"))) {
		fprintf(stderr, "usage: relay-floor-uring PORT THREADS [cpu-affinity]\n");
		return 2;
	}
	cpu_affinity = argc == 4;
	port = atoi(argv[1]);
	int threads = atoi(argv[2]);
	if (threads < 1 || threads > 64) return 2;
	run_relays(threads, listeners, port, 0, 0, cpu_affinity, relay);
}
