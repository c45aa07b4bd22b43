/*
 * The PEP's compiled relay core (PEP_RELAY_CORE=uring): transparent split-TCP relaying
 * with one io_uring per relay thread, loaded by the Python control plane (mec_pep/core.py).
 *
 * Why it exists: on this two-core machine the connection rate is the inverse of the CPU
 * per connection, and the Python relay's 25-45 us of user time per connection is what put
 * it behind HAProxy; the lab's io_uring relay measured 34 % below HAProxy's CPU per
 * connection (docs/pep.md, "The kernel's floor per connection").
 *
 * Per thread: a multishot accept on each of its listeners, the WAN connect with a linked
 * timeout, then per direction one recv and one send in flight (backpressure: nothing is
 * read while the other side has not taken the last chunk). Buffers come from a ring of
 * provided buffers, taken by the kernel only when bytes arrive, so an idle flow holds no
 * buffer (100,000 idle flows in ~0.3 KiB of user memory each). FIN is forwarded with
 * shutdown(2); an error on either leg resets both (SO_LINGER 0). Sockets are set up with
 * plain system calls: io_uring's shutdown and socket ops go to its worker threads.
 *
 * Bulk: once a flow has relayed cfg.splice_after bytes, each direction moves to splice(2)
 * socket -> pipe -> socket (no copy through user space), in this thread, with io_uring
 * polls for readiness. Not IORING_OP_SPLICE: the kernel runs every io_uring splice in a
 * worker thread (a hand-off per chunk, and with blocking sockets a worker waiting per idle
 * direction; testbed/relay-floor/uring_splice_check.c). Pipes, like buffers, are held only
 * while bytes are in them.
 */
#define _GNU_SOURCE
#include "pep_core.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <liburing.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define RING_ENTRIES 4096
#define SWEEP_NS 1000000000LL /* timeouts are checked once a second, as the Python relay */
#define STRIPES 256	      /* locks that keep a flow's fds open while Python reads them */
#define REQUESTS 1024	      /* pending resets per thread */
#define EVENTS 8192	      /* flow events per thread not yet read by Python (power of 2) */
#define BUFFER_GROUP 0
#define SPARE_PIPES 256	      /* empty pipes a thread keeps for the next busy direction */
#define SPLICE_ROUNDS 8	      /* a direction's splices per turn, then the others' turn */
/* A header's memory: the SOCKS5 greeting consumed (at most 257 bytes), then up to the
 * limit and one byte more (that tells a header that is too long). */
#define HEADER_BYTES (2 * (PEP_HANDSHAKE_LIMIT + 1))
/* SOCKS5 reply codes the relay sends itself (the parse's own are in pep_handshake.c) */
enum { SOCKS_SUCCEEDED = 0x00, SOCKS_NOT_ALLOWED = 0x02 };

/* 8 operations: the user_data's low 3 bits */
enum op { OP_ACCEPT, OP_CONNECT, OP_RECV, OP_SEND, OP_WAKE, OP_SWEEP, OP_IGNORE, OP_POLL };

struct pipe { int rd, wr; uint32_t size; };

struct flow;
struct pump { /* one direction of a flow */
	struct flow *flow;
	int src, dst;
	int bid;		/* the provided buffer holding bytes, -1 = none */
	uint32_t len, sent;	/* bytes in the buffer, bytes of them sent */
	uint8_t done, to_ue;	/* FIN forwarded; direction */
	uint8_t eof;		/* splice path: FIN read, bytes before it still in the pipe */
	uint32_t in_pipe;	/* bytes in the pipe */
	struct pipe pipe;	/* rd -1 = none held */
	struct pump *next_starved; /* waiting for a free buffer */
};

struct flow {
	struct pep_flow_record rec; /* what Python reads: first, copied as is */
	struct thread *owner;
	struct pump up, down; /* up: UE -> server */
	int inflight;	      /* operations submitted and not completed */
	uint8_t failed;
	uint8_t reset;	      /* failed: end with RST (else FIN: a SOCKS5 refusal after its reply) */
	uint16_t taken;	      /* explicit modes: bytes of `header` the handshake has consumed */
	uint8_t *header;      /* explicit modes: what the client sent until the destination was
			       * known (malloc'd at its first bytes: a silent client holds none) */
	uint32_t buffer_size; /* TLV BUFFER_SIZE granted: both legs' buffers; 0 = the settings' */
	struct flow *prev, *next; /* the thread's live flows, for the timeout sweep */
	struct pep_ue_total *ue_total; /* its UE's bytes from servers; NULL: table full */
	struct sockaddr_in6 dst; /* IPv4 or IPv6 (fits both); the connect op reads it */
};

struct request { uint32_t slot; uint64_t id; };

struct thread {
	uint32_t index;
	pthread_t id;
	struct io_uring ring;
	struct io_uring_buf_ring *buffers;
	char *memory; /* config.buffers x config.buffer_bytes */
	struct pump *starved;
	struct pipe spare_pipes[SPARE_PIPES];
	uint32_t spare;
	struct flow *live;
	int64_t now; /* CLOCK_MONOTONIC ns, once per batch of completions */
	struct __kernel_timespec sweep_every;
	int wake_fd; /* eventfd: requests from Python (in both descriptor tables) */
	int pidfd;   /* this thread, for pidfd_getfd: its sockets are in its own table (else -1) */
	uint8_t private_table;
	uint64_t wake_value;
	pthread_mutex_t requests_lock;
	struct request requests[REQUESTS];
	uint32_t pending;
	struct pep_flow_event events[EVENTS];
	uint32_t events_written, events_read; /* free-running; the core writes, Python reads */
	pthread_mutex_t events_read_lock; /* one Python reader at a time */
	uint8_t stopping;
	int setup_error; /* 0, or a negative errno from setting up the ring */
	int listeners[PEP_CORE_LISTENERS]; /* this thread's copies, -1 = none */
	uint16_t ports[PEP_CORE_LISTENERS]; /* their ports: a flow to one of them would loop */
	int32_t wanted[PEP_CORE_LISTENERS]; /* pep_core_listen: the caller's descriptors */
	uint32_t listen_pending;	     /* slots to replace (bits), under requests_lock */
	int listen_error;
	pthread_cond_t listened;	     /* listen_pending went to 0 */
	struct pep_core_counters counters;
};

static struct pep_core_config cfg;
static const struct pep_policy *_Atomic policy;
static struct thread *threads;
static struct flow *flows; /* cfg.max_flows slots */
static pthread_mutex_t stripes[STRIPES];
static uint64_t next_id = 1;
static char error_text[256];
static pthread_barrier_t set_up; /* the relay threads and pep_core_start */
static int process_pidfd = -1; /* Python's descriptor table: listeners opened at run time
				 * (private tables only) */

/* A copy of descriptor `fd` of the table behind `pidfd` in the caller's: pidfd_getfd if the
 * relay thread (`private`) has its own table, else a dup, since in the shared table the
 * number is the file. The caller keeps the number from being closed meanwhile. */
static int copy_fd(int private, int pidfd, int fd) {
	if (private) return (int)syscall(SYS_pidfd_getfd, pidfd, fd, 0);
	return fcntl(fd, F_DUPFD_CLOEXEC, 0);
}

/* The hooks' reader (pep_core_wait_events): 1 while it sleeps or is about to, a futex word.
 * A futex, not an eventfd: the relay threads' own descriptor tables need no copy of it. */
static uint32_t reader_sleeping;
static uint8_t reader_released; /* pep_core_release_events: the reader stops waiting */

/* ---- slots and the per-client cap (one global lock: taken once at accept, once at end) */

struct client { uint8_t address[16]; uint32_t flows; }; /* flows 0 = empty entry */
static pthread_mutex_t slots_lock = PTHREAD_MUTEX_INITIALIZER;
static uint32_t *free_slots, free_count, high_water;
static uint32_t flow_limit; /* flows at once: cfg.max_flows (the table's size) or fewer, set at
			     * run time (pep_core_set_limits); under slots_lock */
static struct client *clients;
static uint32_t clients_mask;

static uint32_t client_hash(const uint8_t *a) {
	uint64_t h = 1469598103934665603ULL; /* FNV-1a */
	for (int i = 0; i < 16; i++) h = (h ^ a[i]) * 1099511628211ULL;
	return (uint32_t)(h ^ h >> 32);
}

static struct client *client_entry(const uint8_t *address) {
	uint32_t i = client_hash(address) & clients_mask;
	while (clients[i].flows && memcmp(clients[i].address, address, 16))
		i = (i + 1) & clients_mask;
	return &clients[i];
}

/* Linear probing without tombstones: entries after a removed one move back into the gap
 * if their home position allows it. */
static void client_remove(struct client *gap) {
	uint32_t i = (uint32_t)(gap - clients), j = i;
	clients[i].flows = 0;
	for (;;) {
		j = (j + 1) & clients_mask;
		if (!clients[j].flows) return;
		uint32_t home = client_hash(clients[j].address) & clients_mask;
		if (((j - home) & clients_mask) >= ((j - i) & clients_mask)) {
			clients[i] = clients[j];
			clients[j].flows = 0;
			i = j;
		}
	}
}

/* ---- per-UE bytes from servers (the backlog feed's arrival count) ---------------------- */

/* Dense, in order of first sight, so Python copies ue_count entries and no empty ones; the
 * index (open addressing, entry + 1, 0 = empty) has the client table's size and stays at
 * most half full: beyond max_flows UEs since the start, new UEs are not counted. Entries are
 * never removed: the count covers ended flows, as the Python relay's read_for_ue does. */
static struct pep_ue_total *ue_totals;
static uint32_t *ue_index, ue_mask, ue_count;

/* Under slots_lock. */
static struct pep_ue_total *ue_total_of(int family, const uint8_t *ue) {
	uint32_t i = client_hash(ue) & ue_mask;
	for (uint32_t k; (k = ue_index[i]); i = (i + 1) & ue_mask) {
		struct pep_ue_total *u = &ue_totals[k - 1];
		if (u->family == family && !memcmp(u->address, ue, 16)) return u;
	}
	if (ue_count >= cfg.max_flows) return NULL;
	struct pep_ue_total *u = &ue_totals[ue_count];
	u->family = (uint8_t)family;
	memcpy(u->address, ue, 16);
	ue_index[i] = ue_count + 1;
	__atomic_store_n(&ue_count, ue_count + 1, __ATOMIC_RELEASE); /* after the entry: Python */
	return u;
}

/* Per slot: the core read bytes toward the flow's UE since the backlog feed last looked. */
static uint8_t *toward_ue_marks;

/* A free slot for a client's new flow (with its UE's total), or NULL with the reason. */
static struct flow *take_slot(int family, const uint8_t *ue, enum pep_reason *why) {
	struct flow *f = NULL;
	pthread_mutex_lock(&slots_lock);
	struct client *c = client_entry(ue);
	if (!free_count || cfg.max_flows - free_count >= flow_limit) *why = PEP_FLOW_LIMIT;
	else if (c->flows >= cfg.max_flows_per_client) *why = PEP_PER_CLIENT_LIMIT;
	else {
		memcpy(c->address, ue, 16);
		c->flows++;
		uint32_t slot = free_slots[--free_count];
		f = &flows[slot];
		f->rec.slot = slot; /* written here, not at start: an unused slot's page stays untouched */
		if (slot + 1 > high_water) high_water = slot + 1;
		f->ue_total = ue_total_of(family, ue);
	}
	pthread_mutex_unlock(&slots_lock);
	return f;
}

static void give_slot(struct flow *f) {
	pthread_mutex_lock(&slots_lock);
	struct client *c = client_entry(f->rec.ue);
	if (c->flows && !--c->flows) client_remove(c);
	free_slots[free_count++] = f->rec.slot;
	pthread_mutex_unlock(&slots_lock);
}

/* ---- access policy (policy.py's rules, from the table Python writes) ----------------- */

static int in_ranges(const struct pep_range *r, uint32_t n, int family, const uint8_t *a) {
	for (uint32_t i = 0; i < n; i++, r++) {
		if (r->family != family) continue;
		int len = family == AF_INET ? 4 : 16, match = 1;
		for (int k = 0; k < len && match; k++) match = (a[k] & r->mask[k]) == r->network[k];
		if (match) return 1;
	}
	return 0;
}

static int is_loopback(int family, const uint8_t *a) {
	static const uint8_t one6[16] = {[15] = 1};
	return family == AF_INET ? a[0] == 127 : !memcmp(a, one6, 16);
}

static int client_allowed(int family, const uint8_t *a) {
	const struct pep_policy *p = policy;
	return in_ranges(p->range, p->clients, family, a);
}

static int destination_allowed(int family, const uint8_t *a) {
	const struct pep_policy *p = policy;
	const struct pep_range *dst = p->range + p->clients, *lo = dst + p->destinations;
	if (is_loopback(family, a)) return in_ranges(lo, p->loopback, family, a);
	return in_ranges(dst, p->destinations, family, a);
}

/* ---- submissions ----------------------------------------------------------------------- */

/* user_data: a pointer with the operation in its low 3 bits (structures are 8-aligned). */
static struct io_uring_sqe *sqe_for(struct thread *t, void *p, enum op op) {
	struct io_uring_sqe *sqe = io_uring_get_sqe(&t->ring);
	if (!sqe) {
		io_uring_submit(&t->ring);
		sqe = io_uring_get_sqe(&t->ring);
	}
	io_uring_sqe_set_data64(sqe, (uint64_t)(uintptr_t)p | op);
	return sqe;
}

static void arm_accept(struct thread *t, int listener) {
	/* the listener's index rides in the pointer bits: it is never dereferenced */
	void *tag = (void *)(uintptr_t)((uintptr_t)listener << 3);
	io_uring_prep_multishot_accept(sqe_for(t, tag, OP_ACCEPT), t->listeners[listener], NULL, NULL,
				       SOCK_CLOEXEC);
}

static void arm_sweep(struct thread *t) {
	io_uring_prep_timeout(sqe_for(t, NULL, OP_SWEEP), &t->sweep_every, 0, 0);
}

static void arm_wake(struct thread *t) {
	io_uring_prep_read(sqe_for(t, NULL, OP_WAKE), t->wake_fd, &t->wake_value,
			   sizeof t->wake_value, 0);
}

static int in_handshake(const struct flow *f) {
	return f->rec.stage >= PEP_SOCKS_GREETING;
}

/* A recv whose buffer the kernel picks when bytes arrive (none is held while idle); a
 * handshake reads at most what a header may take (handshake.Handshake.room). */
static void recv_more(struct thread *t, struct pump *p) {
	struct io_uring_sqe *sqe = sqe_for(t, p, OP_RECV);
	uint32_t n = in_handshake(p->flow) ? PEP_HANDSHAKE_LIMIT + 1 : cfg.buffer_bytes;
	io_uring_prep_recv(sqe, p->src, NULL, n, 0);
	sqe->flags |= IOSQE_BUFFER_SELECT;
	sqe->buf_group = BUFFER_GROUP;
	p->flow->inflight++;
}

static char *buffer_at(struct thread *t, int bid) {
	return t->memory + (size_t)bid * cfg.buffer_bytes;
}

/* A direction's bytes: in a provided buffer, or (the client's bytes behind its header)
 * in the flow's header memory. */
static char *bytes_of(struct thread *t, struct pump *p) {
	return p->bid >= 0 ? buffer_at(t, p->bid) : (char *)p->flow->header;
}

static void set_buffered(struct pump *p, uint32_t n) {
	struct flow *f = p->flow;
	__atomic_store_n(p->to_ue ? &f->rec.buffered_to_ue : &f->rec.buffered_to_server, n,
			 __ATOMIC_RELAXED);
}

static void send_rest(struct thread *t, struct pump *p) {
	io_uring_prep_send(sqe_for(t, p, OP_SEND), p->dst, bytes_of(t, p) + p->sent, p->len - p->sent,
			   MSG_NOSIGNAL);
	p->flow->inflight++;
}

/* A buffer back to the kernel's ring; a direction that found none gets to read again. */
static void give_buffer(struct thread *t, int bid) {
	io_uring_buf_ring_add(t->buffers, buffer_at(t, bid), cfg.buffer_bytes, (unsigned short)bid,
			      io_uring_buf_ring_mask(cfg.buffers), 0);
	io_uring_buf_ring_advance(t->buffers, 1);
	struct pump *p = t->starved; /* never a failed flow's: fail() takes those out */
	if (!p) return;
	t->starved = p->next_starved;
	p->flow->inflight--; /* the starved recv counted as in flight */
	recv_more(t, p);
}

/* A failed flow's directions stop waiting for buffers (their recv is not in the kernel,
 * so no cancel reaches it). */
static void unstarve(struct thread *t, struct flow *f) {
	for (struct pump **p = &t->starved; *p;) {
		if ((*p)->flow != f) {
			p = &(*p)->next_starved;
			continue;
		}
		*p = (*p)->next_starved;
		f->inflight--;
	}
}

/* A pipe for a direction about to splice: a spare one, else a new one of cfg.pipe_bytes
 * (or what the kernel grants: above fs.pipe-max-size it refuses without CAP_SYS_RESOURCE). */
static int take_pipe(struct thread *t, struct pump *p) {
	if (t->spare) {
		p->pipe = t->spare_pipes[--t->spare];
	} else {
		int fd[2];
		if (pipe2(fd, O_NONBLOCK | O_CLOEXEC)) return -1;
		int size = fcntl(fd[1], F_SETPIPE_SZ, cfg.pipe_bytes);
		p->pipe = (struct pipe){fd[0], fd[1], (uint32_t)(size > 0 ? size : fcntl(fd[1], F_GETPIPE_SZ))};
	}
	t->counters.pipes_in_use++;
	return 0;
}

/* The pipe back to the spares once empty; one with bytes in it (a failed flow's) is closed. */
static void give_pipe(struct thread *t, struct pump *p) {
	if (p->pipe.rd < 0) return;
	if (!p->in_pipe && t->spare < SPARE_PIPES) {
		t->spare_pipes[t->spare++] = p->pipe;
	} else {
		close(p->pipe.rd);
		close(p->pipe.wr);
	}
	p->pipe.rd = -1, p->in_pipe = 0;
	t->counters.pipes_in_use--;
}

/* ---- events for Python's hooks (a single-producer, single-consumer ring) ---------------- */

static void futex(uint32_t *word, int op, uint32_t value) {
	syscall(SYS_futex, word, op, value, NULL, NULL, 0);
}

/* The hooks' reader woken if it said it sleeps: while it is busy reading, events cost no
 * system call. The fence orders the event's store before the flag's load; the reader orders
 * its flag's store before its look at the rings (pep_core_wait_events): one of the two sees
 * the other's, so no event is left unheard. */
static void wake_reader(struct thread *t) {
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
	if (__atomic_load_n(&reader_sleeping, __ATOMIC_RELAXED) &&
	    __atomic_exchange_n(&reader_sleeping, 0, __ATOMIC_RELAXED)) {
		futex(&reader_sleeping, FUTEX_WAKE_PRIVATE, 1);
		t->counters.reader_wakes++;
	}
}

static void queue_event(struct thread *t, struct flow *f, enum pep_event_kind kind) {
	if (!cfg.events) return;
	uint32_t written = t->events_written;
	if (written - __atomic_load_n(&t->events_read, __ATOMIC_ACQUIRE) >= EVENTS) {
		t->counters.events_lost++;
		return;
	}
	t->events[written & (EVENTS - 1)] = (struct pep_flow_event){f->rec.id, f->rec.slot, kind};
	__atomic_store_n(&t->events_written, written + 1, __ATOMIC_RELEASE);
	wake_reader(t);
}

/* ---- a flow's life -------------------------------------------------------------------- */

static void set_int(int fd, int level, int opt, int value) {
	setsockopt(fd, level, opt, &value, sizeof value);
}

static void unlink_live(struct flow *f) {
	struct thread *t = f->owner;
	if (f->prev) f->prev->next = f->next;
	else t->live = f->next;
	if (f->next) f->next->prev = f->prev;
}

/* A socket closed with the ring's next submission, not a system call of its own (a
 * socket's close runs inline in io_uring); at stop, when no submission follows, at once.
 * Its number is not reused before the close ran, so readers (pep_core_hold) that check the
 * flow's id under the stripe lock never reach another flow's socket. */
static void close_later(struct thread *t, int fd) {
	if (__atomic_load_n(&t->stopping, __ATOMIC_ACQUIRE)) {
		close(fd);
		return;
	}
	struct io_uring_sqe *sqe = sqe_for(t, NULL, OP_IGNORE);
	io_uring_prep_close(sqe, fd);
	sqe->flags |= IOSQE_CQE_SKIP_SUCCESS;
}

/* Close both legs (RST if `reset`) and free the slot; the stripe lock makes a reader
 * holding the flow (pep_core_hold) finish before its fds can be reused. */
static void end_flow(struct flow *f, int reset) {
	struct thread *t = f->owner;
	struct linger rst = {1, 0};
	pthread_mutex_t *stripe = &stripes[f->rec.slot % STRIPES];
	unlink_live(f);
	pthread_mutex_lock(stripe);
	__atomic_store_n(&f->rec.id, 0, __ATOMIC_RELEASE);
	for (int i = 0; i < 2; i++) {
		int fd = i ? f->rec.wan_fd : f->rec.ran_fd;
		if (fd < 0) continue;
		if (reset) setsockopt(fd, SOL_SOCKET, SO_LINGER, &rst, sizeof rst);
		close_later(t, fd);
	}
	pthread_mutex_unlock(stripe);
	free(f->header);
	f->header = NULL;
	give_slot(f);
}

/* End the flow once nothing of it is in flight (maybe_end), counted as refused (never
 * established) or aborted; `reset`: RST on both legs, else FIN. */
static void finish(struct thread *t, struct flow *f, enum pep_reason why, int refused, int reset) {
	if (f->failed) return;
	f->failed = 1, f->reset = (uint8_t)reset;
	if (refused) t->counters.refused[why]++;
	else t->counters.aborted[why]++;
	f->rec.stage = PEP_CLOSING;
	unstarve(t, f);
	for (int i = 0; i < 2; i++) /* wake whatever is pending on either leg */
		if ((i ? f->rec.wan_fd : f->rec.ran_fd) >= 0)
			io_uring_prep_cancel_fd(sqe_for(t, NULL, OP_IGNORE),
						i ? f->rec.wan_fd : f->rec.ran_fd,
						IORING_ASYNC_CANCEL_ALL);
}

/* RST on both legs, counted as aborted (relay.loop._abort); refusals: finish(). */
static void fail(struct thread *t, struct flow *f, enum pep_reason why) {
	finish(t, f, why, 0, 1);
}

/* The flow ends when nothing of it is in flight and either both directions forwarded
 * their FIN or it failed. */
static void maybe_end(struct thread *t, struct flow *f) {
	if (f->inflight || !(f->failed || (f->up.done && f->down.done))) return;
	for (int i = 0; i < 2; i++) {
		struct pump *p = i ? &f->down : &f->up;
		if (p->bid >= 0) give_buffer(t, p->bid), p->bid = -1;
		give_pipe(t, p);
	}
	if (!f->failed) t->counters.closed++;
	if (f->rec.established_ns) queue_event(t, f, PEP_EVENT_CLOSED);
	end_flow(f, f->failed && f->reset);
}

static void address_of(const struct sockaddr_storage *s, uint8_t *out, uint16_t *port) {
	memset(out, 0, 16);
	if (s->ss_family == AF_INET6) {
		const struct sockaddr_in6 *a = (const void *)s;
		memcpy(out, &a->sin6_addr, 16);
		*port = ntohs(a->sin6_port);
	} else {
		const struct sockaddr_in *a = (const void *)s;
		memcpy(out, &a->sin_addr, 4);
		*port = ntohs(a->sin_port);
	}
}

/* The socket address of `address` (IPv4 in its first 4 bytes): its length. */
static socklen_t sockaddr_of(struct sockaddr_in6 *out, int family, const uint8_t *address,
			     uint16_t port) {
	memset(out, 0, sizeof *out);
	if (family == AF_INET6) {
		out->sin6_family = AF_INET6, out->sin6_port = htons(port);
		memcpy(&out->sin6_addr, address, 16);
		return sizeof *out;
	}
	struct sockaddr_in *v4 = (struct sockaddr_in *)out;
	v4->sin_family = AF_INET, v4->sin_port = htons(port);
	memcpy(&v4->sin_addr, address, 4);
	return sizeof *v4;
}

/* sockets.apply_buffers: forced sizes (CAP_NET_ADMIN), else the kernel clamps them. */
static void set_buffers(int fd, int rcvbuf, int sndbuf) {
	int plain = !cfg.force_buffers;
	if (rcvbuf > 0 && (plain || setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &rcvbuf, sizeof(int))))
		set_int(fd, SOL_SOCKET, SO_RCVBUF, rcvbuf);
	if (sndbuf > 0 && (plain || setsockopt(fd, SOL_SOCKET, SO_SNDBUFFORCE, &sndbuf, sizeof(int))))
		set_int(fd, SOL_SOCKET, SO_SNDBUF, sndbuf);
}

/* The WAN leg as legs.wan_socket makes it: a TLV's granted buffer size, else the settings';
 * in transparent mode bound to the UE's address if configured. */
static int wan_socket(struct flow *f) {
	int family = f->rec.destination_family;
	int fd = socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0) return -1;
	set_int(fd, IPPROTO_TCP, TCP_NODELAY, 1);
	if (cfg.wan_cc[0] && setsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, cfg.wan_cc, strlen(cfg.wan_cc)))
		goto fail;
	int size = (int)f->buffer_size;
	set_buffers(fd, size ? size : cfg.wan_rcvbuf, size ? size : cfg.wan_sndbuf);
	if (cfg.keep_ue_source && f->rec.mode == PEP_MODE_TRANSPARENT) {
		struct sockaddr_in6 ue;
		socklen_t len = sockaddr_of(&ue, family, f->rec.ue, 0);
		if (family == AF_INET6) set_int(fd, IPPROTO_IPV6, IPV6_TRANSPARENT, 1);
		else set_int(fd, SOL_IP, IP_TRANSPARENT, 1);
		if (bind(fd, (struct sockaddr *)&ue, len)) goto fail;
	}
	return fd;
fail:
	close(fd);
	return -1;
}

static int64_t clock_ns(clockid_t clock) {
	struct timespec ts;
	clock_gettime(clock, &ts);
	return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void init_flow(struct thread *t, struct flow *f, int ran, struct sockaddr_storage *ue) {
	uint32_t slot = f->rec.slot;
	struct pep_ue_total *total = f->ue_total; /* take_slot's */
	memset(f, 0, sizeof *f);
	f->rec.slot = slot, f->rec.thread = t->index;
	f->ue_total = total;
	if (!total) t->counters.ues_uncounted++;
	__atomic_store_n(&toward_ue_marks[slot], 0, __ATOMIC_RELAXED); /* not the last flow's */
	f->rec.family = (uint8_t)ue->ss_family;
	f->rec.ran_fd = ran, f->rec.wan_fd = -1;
	f->rec.created_ns = clock_ns(CLOCK_REALTIME);
	f->rec.last_active_ns = t->now;
	f->owner = t;
	f->up = (struct pump){.flow = f, .src = ran, .bid = -1, .pipe.rd = -1};
	f->down = (struct pump){.flow = f, .dst = ran, .bid = -1, .pipe.rd = -1, .to_ue = 1};
	f->next = t->live;
	if (t->live) t->live->prev = f;
	t->live = f;
}

/* ---- the destination: an explicit mode's handshake, then the WAN connect ---------------- */

/* A SOCKS5 reply; < 0 if the client is gone. */
static ssize_t send_reply(struct flow *f, uint8_t code, int family, const uint8_t *address,
			  uint16_t port) {
	uint8_t reply[22];
	uint32_t n = pep_core_socks5_reply(reply, code, family, address, port);
	return send(f->rec.ran_fd, reply, n, MSG_NOSIGNAL | MSG_DONTWAIT);
}

/* A SOCKS5 client hears why there is no connection (a reply code), then a FIN; the other
 * modes' clients an RST (relay.loop._connect and _connect_failed). */
static void refuse_connect(struct thread *t, struct flow *f, enum pep_reason why, uint8_t code) {
	static const uint8_t unbound[4];
	int socks = f->rec.mode == PEP_MODE_SOCKS5;
	if (f->failed) return;
	if (socks) send_reply(f, code, AF_INET, unbound, 0);
	finish(t, f, why, 1, !socks);
}

/* socks5.reply_for_errno */
static uint8_t reply_for_errno(int err) {
	switch (err) {
	case ECONNREFUSED: return 0x05;
	case ENETUNREACH: return 0x03;
	case EHOSTUNREACH: return 0x04;
	case ETIMEDOUT: return 0x06;
	default: return 0x01;
	}
}

/* A connection to one of the PEP's own listeners on this host would loop through it
 * (relay.loop._is_own_listener): a listener's port, and an address a socket can bind. */
static int own_listener(struct thread *t, const struct flow *f) {
	int port_is_ours = 0;
	for (int i = 0; i < PEP_CORE_LISTENERS; i++)
		port_is_ours |= t->listeners[i] >= 0 && t->ports[i] == f->rec.destination_port;
	if (!port_is_ours) return 0;
	struct sockaddr_in6 a;
	socklen_t len = sockaddr_of(&a, f->rec.destination_family, f->rec.destination, 0);
	int probe = socket(f->rec.destination_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
	int local = probe >= 0 && !bind(probe, (struct sockaddr *)&a, len);
	if (probe >= 0) close(probe);
	return local;
}

/* The WAN connect to the flow's destination, if the policy allows it. No timer per
 * connection: the sweep refuses a connect older than the timeout. */
static void connect_wan(struct thread *t, struct flow *f) {
	if (!destination_allowed(f->rec.destination_family, f->rec.destination) || own_listener(t, f))
		return refuse_connect(t, f, PEP_DESTINATION_NOT_ALLOWED, SOCKS_NOT_ALLOWED);
	if ((f->rec.wan_fd = wan_socket(f)) < 0) return finish(t, f, PEP_WAN_SETUP_FAILED, 1, 1);
	f->up.dst = f->down.src = f->rec.wan_fd;
	f->rec.stage = PEP_CONNECTING;
	f->rec.last_active_ns = t->now; /* the connect's timeout counts from here */
	socklen_t len = sockaddr_of(&f->dst, f->rec.destination_family, f->rec.destination,
				    f->rec.destination_port);
	io_uring_prep_connect(sqe_for(t, f, OP_CONNECT), f->rec.wan_fd, (struct sockaddr *)&f->dst, len);
	f->inflight++;
}

/* The rest of a header the client sends in pieces, read into the flow's header memory. */
static void recv_header(struct thread *t, struct flow *f) {
	uint32_t room = PEP_HANDSHAKE_LIMIT + 1 - (f->up.len - f->taken);
	io_uring_prep_recv(sqe_for(t, &f->up, OP_RECV), f->up.src, f->header + f->up.len, room, 0);
	f->inflight++;
}

/* The header so far through pep_core_handshake: answer the client, then read more, refuse
 * (relay.loop._handshake_refused) or connect (a TLV's BUFFER_SIZE first: _client_buffers). */
static void parse_header(struct thread *t, struct flow *f) {
	struct pep_handshake h = {.stage = f->rec.stage, .taken = f->taken};
	int parsed = pep_core_handshake(&h, f->header, f->up.len);
	f->rec.stage = h.stage, f->taken = h.taken;
	int answered = !h.answer_len || send(f->rec.ran_fd, h.answer, h.answer_len,
					     MSG_NOSIGNAL | MSG_DONTWAIT) >= 0;
	if (parsed == PEP_PARSE_REFUSED) return finish(t, f, PEP_BAD_HANDSHAKE, 1, h.reset);
	if (!answered) return fail(t, f, PEP_RESET_IN_HANDSHAKE);
	if (parsed == PEP_PARSE_MORE) return recv_header(t, f);
	f->rec.destination_family = h.family, f->rec.destination_port = h.port;
	memcpy(f->rec.destination, h.address, 16);
	f->buffer_size = h.buffer_size < cfg.tlv_max_buffer ? h.buffer_size : cfg.tlv_max_buffer;
	if (f->buffer_size) set_buffers(f->rec.ran_fd, (int)f->buffer_size, (int)f->buffer_size);
	connect_wan(t, f);
}

/* A handshake's bytes: copied out of the provided buffer (back to the ring at once), or
 * read into the header memory directly; then parsed. */
static void header_read(struct thread *t, struct flow *f, int res, int bid) {
	if (bid >= 0) {
		if (res > 0 && !f->failed && (f->header || (f->header = malloc(HEADER_BYTES))))
			memcpy(f->header + f->up.len, buffer_at(t, bid), (size_t)res);
		else if (res > 0 && !f->failed)
			res = -ENOMEM; /* counted as the client's reset: no memory is rarer */
		give_buffer(t, bid);
	}
	if (f->failed) return;
	if (res < 0) return fail(t, f, PEP_RESET_IN_HANDSHAKE);
	if (res == 0) return finish(t, f, PEP_CLOSED_IN_HANDSHAKE, 1, 1);
	f->up.len += (uint32_t)res;
	parse_header(t, f);
}

/* What an accepted socket does not inherit from its listener (legs.prepare_ran_leg). */
static int prepare_ran_leg(int ran) {
	if (cfg.ran_cc[0] && setsockopt(ran, IPPROTO_TCP, TCP_CONGESTION, cfg.ran_cc, strlen(cfg.ran_cc)))
		return -1;
	if (cfg.ran_nodelay) set_int(ran, IPPROTO_TCP, TCP_NODELAY, 1);
	return 0;
}

/* A connection the kernel handed over on listener slot `listener`: admit it (then its
 * destination: TPROXY's, or the handshake's), or refuse it. */
static void accepted(struct thread *t, int ran, int listener) {
	struct sockaddr_storage ue, local;
	socklen_t len = sizeof ue, local_len = sizeof local;
	uint8_t ue_address[16];
	uint16_t ue_port;
	enum pep_reason why = PEP_CLIENT_NOT_ALLOWED;
	struct linger rst = {1, 0};
	t->counters.accepted++;
	if (getpeername(ran, (struct sockaddr *)&ue, &len) ||
	    getsockname(ran, (struct sockaddr *)&local, &local_len)) {
		close(ran);
		return;
	}
	address_of(&ue, ue_address, &ue_port);
	struct flow *f = client_allowed(ue.ss_family, ue_address) ? take_slot(ue.ss_family, ue_address, &why)
								  : NULL;
	if (!f) {
		t->counters.refused[why]++;
		setsockopt(ran, SOL_SOCKET, SO_LINGER, &rst, sizeof rst);
		close(ran);
		return;
	}
	init_flow(t, f, ran, &ue);
	f->rec.mode = cfg.modes[listener];
	memcpy(f->rec.ue, ue_address, 16), f->rec.ue_port = ue_port;
	address_of(&local, f->rec.ran_local, &f->rec.ran_port);
	__atomic_store_n(&f->rec.id, __atomic_fetch_add(&next_id, 1, __ATOMIC_RELAXED), __ATOMIC_RELEASE);
	if (prepare_ran_leg(ran)) {
		finish(t, f, PEP_WAN_SETUP_FAILED, 1, 1);
	} else if (f->rec.mode == PEP_MODE_TRANSPARENT) { /* TPROXY: the original destination */
		f->rec.destination_family = f->rec.family, f->rec.destination_port = f->rec.ran_port;
		memcpy(f->rec.destination, f->rec.ran_local, 16);
		connect_wan(t, f);
	} else { /* the handshake's first bytes: no memory is held before they come */
		f->rec.stage = f->rec.mode == PEP_MODE_SOCKS5 ? PEP_SOCKS_GREETING : PEP_TLV_HEADER;
		recv_more(t, &f->up);
	}
	maybe_end(t, f); /* refused at once */
}

/* After the connect (and a SOCKS5 client's reply): the client's bytes behind its header go
 * to the server first. */
static void start_relaying(struct thread *t, struct flow *f) {
	struct pump *up = &f->up;
	f->rec.stage = PEP_RELAYING;
	f->rec.established_ns = clock_ns(CLOCK_REALTIME);
	t->counters.established++;
	queue_event(t, f, PEP_EVENT_ESTABLISHED);
	recv_more(t, &f->down);
	if (up->len > f->taken) {
		up->sent = f->taken;
		set_buffered(up, up->len - up->sent);
		return send_rest(t, up);
	}
	free(f->header);
	f->header = NULL, up->len = 0;
	recv_more(t, up);
}

static void connected(struct thread *t, struct flow *f, int res) {
	if (f->failed) return;
	if (res < 0) return refuse_connect(t, f, PEP_CONNECT_FAILED, reply_for_errno(-res));
	struct sockaddr_storage local;
	socklen_t len = sizeof local;
	if (!getsockname(f->rec.wan_fd, (struct sockaddr *)&local, &len))
		address_of(&local, f->rec.wan_local, &f->rec.wan_port);
	if (f->rec.mode == PEP_MODE_SOCKS5 &&
	    send_reply(f, SOCKS_SUCCEEDED, f->rec.destination_family, f->rec.wan_local,
		       f->rec.wan_port) < 0)
		return finish(t, f, PEP_RESET_IN_HANDSHAKE, 0, 1);
	start_relaying(t, f);
}

/* ---- a direction's bytes: counted, and in the record for Python ------------------------ */

static void relayed(struct thread *t, struct pump *p, uint64_t n) {
	struct flow *f = p->flow;
	uint64_t *bytes = p->to_ue ? &f->rec.bytes_to_ue : &f->rec.bytes_from_ue;
	__atomic_store_n(bytes, *bytes + n, __ATOMIC_RELAXED);
	*(p->to_ue ? &t->counters.bytes_to_ue : &t->counters.bytes_from_ue) += n;
}

/* Bytes read from the server: counted for the UE, and the flow marked for the backlog feed. */
static void took_for_ue(struct flow *f, uint64_t n) {
	if (f->ue_total) __atomic_fetch_add(&f->ue_total->received, n, __ATOMIC_RELAXED);
	__atomic_store_n(&toward_ue_marks[f->rec.slot], 1, __ATOMIC_RELAXED);
}

static void saw_fin(struct flow *f, struct pump *p) {
	*(p->to_ue ? &f->rec.server_eof : &f->rec.ue_eof) = 1;
}

/* Everything before the FIN is relayed: forward it (a system call: io_uring's shutdown op
 * goes to a worker thread, measured as a context switch each). */
static void forward_fin(struct flow *f, struct pump *p) {
	shutdown(p->dst, SHUT_WR);
	p->done = 1;
	saw_fin(f, p);
}

/* ---- the bulk path: splice(2) through a pipe, io_uring polls for readiness --------------- */

static void poll_side(struct thread *t, struct pump *p, int fd, unsigned events) {
	io_uring_prep_poll_add(sqe_for(t, p, OP_POLL), fd, events);
	p->flow->inflight++;
}

/* Move what the sockets allow now, a few rounds at most; then wait for the side that
 * blocks: the receiver's room while the pipe holds bytes (backpressure: nothing more is
 * read), else the sender's next bytes. An empty pipe goes back to the thread's spares. */
static void splice_some(struct thread *t, struct pump *p) {
	struct flow *f = p->flow;
	for (int round = 0; round < SPLICE_ROUNDS; round++) {
		int moved = 0;
		if (!p->eof && p->pipe.rd < 0 && take_pipe(t, p))
			return recv_more(t, p); /* no pipe (descriptors?): buffers, as before */
		if (!p->eof && p->in_pipe < p->pipe.size) {
			ssize_t n = splice(p->src, NULL, p->pipe.wr, NULL, p->pipe.size - p->in_pipe,
					   SPLICE_F_NONBLOCK | SPLICE_F_MOVE);
			if (n > 0) {
				p->in_pipe += (uint32_t)n, moved = 1;
				if (p->to_ue) took_for_ue(f, (uint64_t)n);
			}
			else if (n == 0) p->eof = 1, saw_fin(f, p);
			else if (errno != EAGAIN) return fail(t, f, PEP_RESET_BY_PEER);
		}
		if (p->in_pipe) {
			ssize_t n = splice(p->pipe.rd, NULL, p->dst, NULL, p->in_pipe,
					   SPLICE_F_NONBLOCK | SPLICE_F_MOVE);
			if (n > 0) p->in_pipe -= (uint32_t)n, moved = 1, relayed(t, p, (uint64_t)n);
			else if (n < 0 && errno != EAGAIN) return fail(t, f, PEP_RESET_BY_PEER);
		}
		set_buffered(p, p->in_pipe);
		if (p->eof && !p->in_pipe) {
			give_pipe(t, p);
			return forward_fin(f, p);
		}
		if (!moved) break;
	}
	if (!p->in_pipe) give_pipe(t, p);
	if (p->in_pipe) poll_side(t, p, p->dst, POLLOUT);
	else poll_side(t, p, p->src, POLLIN);
}

/* A direction that has relayed enough moves to the splice path (its buffer is back). */
static void start_splicing(struct thread *t, struct pump *p) {
	int on = 1; /* splice(2) waits on a blocking socket whatever its flags say; io_uring's
		     * recv/send of the other direction poll on a non-blocking one as before */
	if (ioctl(p->src, FIONBIO, &on) || ioctl(p->dst, FIONBIO, &on)) return recv_more(t, p);
	t->counters.spliced++;
	splice_some(t, p);
}

static void polled(struct thread *t, struct pump *p, int res) {
	if (p->flow->failed) return;
	if (res < 0) return fail(t, p->flow, PEP_RESET_BY_PEER);
	splice_some(t, p);
}

static void received(struct thread *t, struct pump *p, int res, unsigned flags) {
	struct flow *f = p->flow;
	int bid = flags & IORING_CQE_F_BUFFER ? (int)(flags >> IORING_CQE_BUFFER_SHIFT) : -1;
	if (res == -ENOBUFS && !f->failed) { /* every buffer is in use: read when one is back */
		p->next_starved = t->starved;
		t->starved = p;
		f->inflight++;
		return;
	}
	if (in_handshake(f)) return header_read(t, f, res, bid);
	if ((res <= 0 || f->failed) && bid >= 0) give_buffer(t, bid);
	if (res < 0) return fail(t, f, PEP_RESET_BY_PEER);
	if (f->failed) return;
	if (res == 0) return forward_fin(f, p);
	p->bid = bid, p->len = (uint32_t)res, p->sent = 0;
	if (p->to_ue) took_for_ue(f, (uint64_t)res);
	set_buffered(p, p->len);
	send_rest(t, p);
}

static void sent(struct thread *t, struct pump *p, int res) {
	struct flow *f = p->flow;
	if (res < 0) return fail(t, f, PEP_RESET_BY_PEER);
	if (f->failed) return;
	p->sent += (uint32_t)res;
	relayed(t, p, (uint64_t)res);
	set_buffered(p, p->len - p->sent);
	if (p->sent < p->len) return send_rest(t, p);
	if (p->bid >= 0) {
		give_buffer(t, p->bid);
		p->bid = -1;
	} else { /* the client's bytes behind its header, sent */
		free(f->header);
		f->header = NULL;
	}
	if (cfg.splice_after && f->rec.bytes_to_ue + f->rec.bytes_from_ue >= cfg.splice_after)
		return start_splicing(t, p);
	recv_more(t, p);
}

/* ---- timeouts and requests from Python --------------------------------------------------- */

static void sweep(struct thread *t) {
	for (struct flow *f = t->live, *next; f; f = next) {
		next = f->next;
		/* last_active_ns: the accept during a handshake, then the connect's start */
		int late = (uint64_t)(t->now - f->rec.last_active_ns) > cfg.connect_timeout_ms * 1000000ULL;
		if (late && in_handshake(f)) finish(t, f, PEP_HANDSHAKE_TIMEOUT, 1, 1);
		if (late && f->rec.stage == PEP_CONNECTING)
			refuse_connect(t, f, PEP_CONNECT_FAILED, reply_for_errno(ETIMEDOUT));
		if (f->rec.stage != PEP_RELAYING) continue;
		int half_open = f->up.done || f->down.done;
		uint64_t limit_ms = half_open ? cfg.half_open_timeout_ms : cfg.idle_timeout_ms;
		if ((uint64_t)(t->now - f->rec.last_active_ns) > limit_ms * 1000000ULL)
			fail(t, f, half_open ? PEP_HALF_OPEN_TIMEOUT : PEP_IDLE_TIMEOUT);
	}
	arm_sweep(t);
}

/* A listener of this thread's own (its descriptor), accepting. */
static void take_listener(struct thread *t, int i, int fd) {
	struct sockaddr_storage a;
	socklen_t len = sizeof a;
	uint8_t ignored[16];
	t->listeners[i] = fd;
	if (!getsockname(fd, (struct sockaddr *)&a, &len)) address_of(&a, ignored, &t->ports[i]);
	arm_accept(t, i);
}

/* pep_core_listen's slots: the old listener's multishot accept is cancelled first (while it
 * is pending the socket keeps listening), then the new one is copied from Python's table
 * (its number stays open: the caller waits for this). */
static void replace_listeners(struct thread *t) {
	io_uring_submit(&t->ring); /* an accept re-armed in this batch is cancelled too */
	for (int i = 0; i < PEP_CORE_LISTENERS; i++) {
		if (!(t->listen_pending & 1u << i)) continue;
		if (t->listeners[i] >= 0) {
			struct io_uring_sync_cancel_reg cancel = {
				.fd = t->listeners[i],
				.flags = IORING_ASYNC_CANCEL_FD | IORING_ASYNC_CANCEL_ALL,
				.timeout = {-1, -1}};
			io_uring_register_sync_cancel(&t->ring, &cancel);
			close(t->listeners[i]);
			t->listeners[i] = -1;
		}
		if (t->wanted[i] < 0) continue;
		int fd = copy_fd(t->private_table, process_pidfd, t->wanted[i]);
		if (fd < 0) t->listen_error = -errno;
		else take_listener(t, i, fd);
	}
	t->listen_pending = 0;
	pthread_cond_broadcast(&t->listened);
}

static void serve_requests(struct thread *t) {
	pthread_mutex_lock(&t->requests_lock);
	for (uint32_t i = 0; i < t->pending; i++) {
		struct flow *f = &flows[t->requests[i].slot];
		if (f->rec.id == t->requests[i].id && f->owner == t) fail(t, f, PEP_RESET_BY_API);
	}
	t->pending = 0;
	if (t->listen_pending) replace_listeners(t);
	pthread_mutex_unlock(&t->requests_lock);
	arm_wake(t);
}

/* ---- the loop ------------------------------------------------------------------------ */

static void completed(struct thread *t, struct io_uring_cqe *cqe) {
	enum op op = cqe->user_data & 7;
	void *ptr = (void *)(uintptr_t)(cqe->user_data & ~(uint64_t)7);
	if (op == OP_ACCEPT) {
		int listener = (int)((uintptr_t)ptr >> 3);
		if (cqe->res >= 0) accepted(t, cqe->res, listener);
		if (!(cqe->flags & IORING_CQE_F_MORE) && !t->stopping && cqe->res != -ECANCELED &&
		    t->listeners[listener] >= 0) /* not one replace_listeners cancelled */
			arm_accept(t, listener);
		return;
	}
	if (op == OP_SWEEP) return sweep(t);
	if (op == OP_WAKE) return serve_requests(t);
	if (op == OP_IGNORE) return;
	struct flow *f = op == OP_CONNECT ? ptr : ((struct pump *)ptr)->flow;
	f->inflight--;
	if (!in_handshake(f)) f->rec.last_active_ns = t->now; /* a handshake's time counts from
								 * the accept (loop.Conn.deadline) */
	if (op == OP_CONNECT) connected(t, f, cqe->res);
	else if (op == OP_RECV) received(t, ptr, cqe->res, cqe->flags);
	else if (op == OP_POLL) polled(t, ptr, cqe->res);
	else sent(t, ptr, cqe->res);
	maybe_end(t, f);
}

static int setup_buffers(struct thread *t) {
	size_t ring_bytes = cfg.buffers * sizeof(struct io_uring_buf);
	t->buffers = mmap(NULL, ring_bytes, PROT_READ | PROT_WRITE, MAP_ANONYMOUS | MAP_PRIVATE, -1, 0);
	t->memory = malloc((size_t)cfg.buffers * cfg.buffer_bytes);
	if (t->buffers == MAP_FAILED || !t->memory) return -ENOMEM;
	io_uring_buf_ring_init(t->buffers);
	struct io_uring_buf_reg reg = {
		.ring_addr = (uint64_t)(uintptr_t)t->buffers, .ring_entries = cfg.buffers, .bgid = BUFFER_GROUP};
	int err = io_uring_register_buf_ring(&t->ring, &reg, 0);
	if (err) return err;
	for (uint32_t i = 0; i < cfg.buffers; i++)
		io_uring_buf_ring_add(t->buffers, buffer_at(t, (int)i), cfg.buffer_bytes, (unsigned short)i,
				      io_uring_buf_ring_mask(cfg.buffers), (int)i);
	io_uring_buf_ring_advance(t->buffers, (int)cfg.buffers);
	return 0;
}

static int compare_ints(const void *a, const void *b) {
	return *(const int *)a - *(const int *)b;
}

/* The thread's own descriptor table, as each Python relay thread has (relay/descriptors.py):
 * one table holds RLIMIT_NOFILE descriptors (20,000 here, not raisable without
 * CAP_SYS_RESOURCE) and a flow needs two, so more threads hold more flows. Of the copied
 * table only its listeners and its eventfd stay: other copies would keep the process's
 * sockets open. Python reaches the sockets in it by pidfd_getfd; where that is refused
 * (cfg.shared_table) or unshare is (a container's seccomp profile), the process's table is
 * shared, which is correct, only smaller. 0, or a negative errno. */
static int own_descriptor_table(struct thread *t) {
	t->pidfd = -1;
	if (cfg.shared_table) return 0;
	/* in the process's table, before the copy: Python's threads use this number there */
	t->pidfd = (int)syscall(SYS_pidfd_open, syscall(SYS_gettid), O_EXCL /* PIDFD_THREAD */);
	if (t->pidfd < 0) return -errno;
	if (unshare(CLONE_FILES)) {
		close(t->pidfd);
		t->pidfd = -1;
		return 0;
	}
	t->private_table = 1;
	int keep[PEP_CORE_LISTENERS + 4] = {2, t->wake_fd, process_pidfd}, n = 3;
	for (int i = 0; i < PEP_CORE_LISTENERS; i++)
		if (cfg.listeners[t->index][i] >= 0) keep[n++] = cfg.listeners[t->index][i];
	qsort(keep, (size_t)n, sizeof *keep, compare_ints);
	for (int i = 0; i < n; i++) /* close the gaps between the kept ones, and above */
		syscall(SYS_close_range, keep[i] + 1, i + 1 < n ? (unsigned)keep[i + 1] - 1 : ~0U, 0);
	return 0;
}

/* In the relay thread: IORING_SETUP_SINGLE_ISSUER gives the ring to the thread that
 * creates it, and only that thread may register buffers or submit. */
static int setup_thread(struct thread *t) {
	/* One ring per thread, used only by it: task work runs when it waits for completions. */
	struct io_uring_params params = {
		.flags = IORING_SETUP_SUBMIT_ALL | IORING_SETUP_SINGLE_ISSUER |
			 IORING_SETUP_DEFER_TASKRUN | IORING_SETUP_CQSIZE,
		.cq_entries = 8 * RING_ENTRIES,
	};
	int err = io_uring_queue_init_params(RING_ENTRIES, &t->ring, &params);
	if (err) return err;
	if ((err = setup_buffers(t))) return err;
	pthread_mutex_init(&t->requests_lock, NULL);
	pthread_cond_init(&t->listened, NULL);
	t->sweep_every.tv_sec = SWEEP_NS / 1000000000LL;
	return 0;
}

/* At stop: every flow reset ("shutdown"), as the Python relay does. */
static void reset_all(struct thread *t) {
	while (t->live) {
		struct flow *f = t->live;
		if (!f->failed) t->counters.aborted[PEP_SHUTDOWN]++;
		end_flow(f, 1);
	}
}

static void *relay(void *arg) {
	struct thread *t = arg;
	t->setup_error = own_descriptor_table(t);
	if (!t->setup_error) t->setup_error = setup_thread(t);
	pthread_barrier_wait(&set_up);
	if (t->setup_error) return NULL;
	if (cfg.cpus[t->index] >= 0) {
		cpu_set_t cpus;
		CPU_ZERO(&cpus);
		CPU_SET(cfg.cpus[t->index], &cpus);
		pthread_setaffinity_np(pthread_self(), sizeof cpus, &cpus);
	}
	t->now = clock_ns(CLOCK_MONOTONIC);
	for (int i = 0; i < PEP_CORE_LISTENERS; i++) { /* its own copies (a shared table: dups) */
		int fd = cfg.listeners[t->index][i];
		t->listeners[i] = -1;
		if (fd >= 0) take_listener(t, i, t->private_table ? fd : fcntl(fd, F_DUPFD_CLOEXEC, 0));
	}
	arm_sweep(t);
	arm_wake(t);
	while (!__atomic_load_n(&t->stopping, __ATOMIC_ACQUIRE)) {
		io_uring_submit_and_wait(&t->ring, 1);
		t->now = clock_ns(CLOCK_MONOTONIC);
		struct io_uring_cqe *cqe;
		unsigned head, seen = 0;
		io_uring_for_each_cqe(&t->ring, head, cqe) {
			completed(t, cqe);
			seen++;
		}
		io_uring_cq_advance(&t->ring, seen);
	}
	io_uring_submit(&t->ring); /* the closes queued last */
	/* Every pending operation cancelled and finished before the flows' memory is freed
	 * (a header's recv writes into its flow's malloc'd header area). */
	struct io_uring_sync_cancel_reg all = {.flags = IORING_ASYNC_CANCEL_ANY, .timeout = {-1, -1}};
	io_uring_register_sync_cancel(&t->ring, &all);
	reset_all(t);
	io_uring_queue_exit(&t->ring);
	while (t->spare) {
		struct pipe *spare = &t->spare_pipes[--t->spare];
		close(spare->rd);
		close(spare->wr);
	}
	for (int i = 0; i < PEP_CORE_LISTENERS; i++)
		if (t->listeners[i] >= 0) close(t->listeners[i]);
	return NULL;
}

/* ---- the interface to Python ------------------------------------------------------------ */

static int failed_with(int err, const char *what) {
	snprintf(error_text, sizeof error_text, "%s: %s", what, strerror(-err));
	return err;
}

static int allocate_tables(void) {
	uint32_t n = cfg.max_flows;
	flows = calloc(n, sizeof *flows); /* pages are touched only when slots are used */
	free_slots = malloc(n * sizeof *free_slots);
	for (clients_mask = 1; clients_mask < 2 * n; clients_mask <<= 1) {}
	clients = calloc(clients_mask, sizeof *clients);
	ue_index = calloc(clients_mask, sizeof *ue_index);
	clients_mask--;
	ue_mask = clients_mask, ue_count = 0;
	ue_totals = calloc(n, sizeof *ue_totals);
	toward_ue_marks = calloc(n, 1);
	threads = calloc(cfg.threads, sizeof *threads);
	if (!flows || !free_slots || !clients || !ue_index || !ue_totals || !toward_ue_marks || !threads)
		return -ENOMEM;
	for (uint32_t i = 0; i < n; i++) free_slots[i] = n - 1 - i; /* low slots first: reused while warm */
	free_count = n, flow_limit = n;
	for (int i = 0; i < STRIPES; i++) pthread_mutex_init(&stripes[i], NULL);
	return 0;
}

const uint32_t pep_core_abi[8] = {sizeof(struct pep_core_config), sizeof(struct pep_range),
				  sizeof(struct pep_policy), sizeof(struct pep_flow_record),
				  sizeof(struct pep_core_counters), sizeof(struct pep_flow_event),
				  sizeof(struct pep_ue_total), sizeof(struct pep_handshake)};

int pep_core_start(const struct pep_core_config *config, const struct pep_policy *first) {
	cfg = *config;
	if (!cfg.threads || cfg.threads > PEP_CORE_MAX_THREADS || !cfg.max_flows ||
	    cfg.buffers & (cfg.buffers - 1) || cfg.buffers > 32768 || !cfg.buffer_bytes)
		return failed_with(-EINVAL, "core settings");
	pep_core_set_policy(first);
	int err = allocate_tables();
	if (err) return failed_with(err, "tables");
	reader_released = 0, reader_sleeping = 0;
	if (!cfg.shared_table) { /* before the threads copy the table */
		process_pidfd = (int)syscall(SYS_pidfd_open, getpid(), 0);
		if (process_pidfd < 0) return failed_with(-errno, "pidfd_open");
	}
	pthread_barrier_init(&set_up, NULL, cfg.threads + 1);
	for (uint32_t i = 0; i < cfg.threads; i++) {
		threads[i].index = i;
		pthread_mutex_init(&threads[i].events_read_lock, NULL);
		threads[i].wake_fd = eventfd(0, EFD_CLOEXEC); /* before the thread copies the table */
		if (threads[i].wake_fd < 0) abort();
		if (pthread_create(&threads[i].id, NULL, relay, &threads[i])) abort(); /* no way back
			* from here: the barrier waits for every thread */
	}
	pthread_barrier_wait(&set_up);
	for (uint32_t i = 0; i < cfg.threads; i++)
		if (threads[i].setup_error) err = threads[i].setup_error;
	if (err) {
		pep_core_stop();
		return failed_with(err, "io_uring set-up (needs Linux >= 6.1)");
	}
	return 0;
}

const char *pep_core_error(void) { return error_text; }

static void wake(struct thread *t) {
	uint64_t one = 1;
	if (t->wake_fd >= 0 && write(t->wake_fd, &one, sizeof one) < 0) perror("pep core: wake");
}

static void post(struct thread *t, uint32_t slot, uint64_t id) {
	pthread_mutex_lock(&t->requests_lock);
	if (t->pending < REQUESTS) t->requests[t->pending++] = (struct request){slot, id};
	pthread_mutex_unlock(&t->requests_lock);
	wake(t);
}

void pep_core_stop(void) {
	for (uint32_t i = 0; threads && i < cfg.threads; i++) {
		__atomic_store_n(&threads[i].stopping, 1, __ATOMIC_RELEASE);
		wake(&threads[i]);
	}
	for (uint32_t i = 0; threads && i < cfg.threads; i++) {
		pthread_join(threads[i].id, NULL);
		close(threads[i].wake_fd);
		if (threads[i].pidfd >= 0) close(threads[i].pidfd);
	}
	if (process_pidfd >= 0) close(process_pidfd);
	process_pidfd = -1;
}

int pep_core_listen(uint32_t listener, const int32_t *fds) {
	int err = 0;
	if (!threads || listener >= PEP_CORE_LISTENERS) return -EINVAL;
	for (uint32_t i = 0; i < cfg.threads; i++) {
		struct thread *t = &threads[i];
		pthread_mutex_lock(&t->requests_lock);
		t->wanted[listener] = fds[i];
		t->listen_pending |= 1u << listener;
		pthread_mutex_unlock(&t->requests_lock);
		wake(t);
	}
	for (uint32_t i = 0; i < cfg.threads; i++) { /* the caller may close its copies after */
		struct thread *t = &threads[i];
		pthread_mutex_lock(&t->requests_lock);
		while (t->listen_pending) pthread_cond_wait(&t->listened, &t->requests_lock);
		if (t->listen_error) err = t->listen_error, t->listen_error = 0;
		pthread_mutex_unlock(&t->requests_lock);
	}
	return err ? failed_with(err, "a listener's copy") : 0;
}

/* The settings PATCH /pep/v1/config changes at run time (service.reconfigure), for new flows
 * and, for the timeouts, at the next sweep. The flow table keeps the size it was given at
 * start: max_flows may go up to that, not beyond. The relay threads read these fields
 * without a lock: each is an aligned scalar stored whole, so they see the old or the new one. */
int pep_core_set_limits(const struct pep_core_config *next) {
	if (!threads) return -EINVAL;
	if (!next->max_flows || next->max_flows > cfg.max_flows) return -ERANGE;
	pthread_mutex_lock(&slots_lock);
	flow_limit = next->max_flows;
	cfg.max_flows_per_client = next->max_flows_per_client;
	pthread_mutex_unlock(&slots_lock);
	__atomic_store_n(&cfg.connect_timeout_ms, next->connect_timeout_ms, __ATOMIC_RELAXED);
	__atomic_store_n(&cfg.idle_timeout_ms, next->idle_timeout_ms, __ATOMIC_RELAXED);
	__atomic_store_n(&cfg.half_open_timeout_ms, next->half_open_timeout_ms, __ATOMIC_RELAXED);
	__atomic_store_n(&cfg.wan_rcvbuf, next->wan_rcvbuf, __ATOMIC_RELAXED);
	__atomic_store_n(&cfg.wan_sndbuf, next->wan_sndbuf, __ATOMIC_RELAXED);
	__atomic_store_n(&cfg.force_buffers, next->force_buffers, __ATOMIC_RELAXED);
	__atomic_store_n(&cfg.tlv_max_buffer, next->tlv_max_buffer, __ATOMIC_RELAXED);
	return 0;
}

/* The relay threads may still read the previous table: it is kept (policies change
 * rarely, by REST; each is ~8 KiB). */
void pep_core_set_policy(const struct pep_policy *next) {
	struct pep_policy *copy = malloc(sizeof *copy);
	if (!copy) return;
	*copy = *next;
	policy = copy;
}

const struct pep_core_counters *pep_core_counters(uint32_t thread) {
	return thread < cfg.threads ? &threads[thread].counters : NULL;
}

uint32_t pep_core_live(void) {
	return flows ? cfg.max_flows - __atomic_load_n(&free_count, __ATOMIC_RELAXED) : 0;
}

uint32_t pep_core_snapshot(struct pep_flow_record *out, uint32_t room) {
	uint32_t n = 0, end = __atomic_load_n(&high_water, __ATOMIC_ACQUIRE);
	for (uint32_t i = 0; i < end && n < room; i++) {
		if (!__atomic_load_n(&flows[i].rec.id, __ATOMIC_ACQUIRE)) continue;
		pthread_mutex_t *stripe = &stripes[i % STRIPES];
		pthread_mutex_lock(stripe); /* not a record half re-used by the next flow */
		if (flows[i].rec.id) out[n++] = flows[i].rec;
		pthread_mutex_unlock(stripe);
	}
	return n;
}

/* Copies come from the relay thread's table (copy_fd); the stripe lock keeps the numbers
 * from being reused by another flow meanwhile. */
int pep_core_hold(uint32_t slot, uint64_t id, int32_t fds[2]) {
	if (slot >= cfg.max_flows || !id) return -1;
	struct flow *f = &flows[slot];
	pthread_mutex_lock(&stripes[slot % STRIPES]);
	int live = f->rec.id == id, copied = live;
	for (int i = 0; i < 2 && live; i++) {
		int fd = i ? f->rec.wan_fd : f->rec.ran_fd;
		fds[i] = fd < 0 ? -1 : copy_fd(f->owner->private_table, f->owner->pidfd, fd);
		if (fd >= 0 && fds[i] < 0) copied = 0; /* here: after the lock the slot may be reused */
	}
	pthread_mutex_unlock(&stripes[slot % STRIPES]);
	if (live && !copied) { /* no copy (e.g. EMFILE): no half answer */
		for (int i = 0; i < 2; i++)
			if (fds[i] >= 0) close(fds[i]), fds[i] = -1;
	}
	return copied ? 0 : -1;
}

int pep_core_private_tables(void) {
	int all = 1;
	for (uint32_t i = 0; i < cfg.threads; i++) all &= threads[i].private_table;
	return all;
}

uint32_t pep_core_events(struct pep_flow_event *out, uint32_t room) {
	uint32_t n = 0;
	for (uint32_t i = 0; i < cfg.threads; i++) {
		struct thread *t = &threads[i];
		pthread_mutex_lock(&t->events_read_lock);
		uint32_t read = t->events_read, written = __atomic_load_n(&t->events_written, __ATOMIC_ACQUIRE);
		for (; read != written && n < room; read++) out[n++] = t->events[read & (EVENTS - 1)];
		__atomic_store_n(&t->events_read, read, __ATOMIC_RELEASE);
		pthread_mutex_unlock(&t->events_read_lock);
	}
	return n;
}

static int events_queued(void) {
	for (uint32_t i = 0; i < cfg.threads; i++)
		if (__atomic_load_n(&threads[i].events_written, __ATOMIC_ACQUIRE) !=
		    __atomic_load_n(&threads[i].events_read, __ATOMIC_RELAXED))
			return 1;
	return 0;
}

uint32_t pep_core_wait_events(struct pep_flow_event *out, uint32_t room) {
	uint32_t n = threads ? pep_core_events(out, room) : 0;
	if (n || !threads) return n; /* busy: no flag, no system call */
	__atomic_store_n(&reader_sleeping, 1, __ATOMIC_RELAXED);
	__atomic_thread_fence(__ATOMIC_SEQ_CST); /* the flag before the look at the rings */
	while (__atomic_load_n(&reader_sleeping, __ATOMIC_RELAXED) && !events_queued() &&
	       !__atomic_load_n(&reader_released, __ATOMIC_RELAXED))
		futex(&reader_sleeping, FUTEX_WAIT_PRIVATE, 1); /* returns at once if no longer 1 */
	__atomic_store_n(&reader_sleeping, 0, __ATOMIC_RELAXED);
	return pep_core_events(out, room);
}

void pep_core_release_events(void) {
	__atomic_store_n(&reader_released, 1, __ATOMIC_RELAXED);
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
	if (__atomic_exchange_n(&reader_sleeping, 0, __ATOMIC_RELAXED))
		futex(&reader_sleeping, FUTEX_WAKE_PRIVATE, 1);
}

int pep_core_record(uint32_t slot, uint64_t id, struct pep_flow_record *out) {
	if (slot >= cfg.max_flows || !id) return -1;
	pthread_mutex_lock(&stripes[slot % STRIPES]);
	int live = flows[slot].rec.id == id;
	if (live) *out = flows[slot].rec;
	pthread_mutex_unlock(&stripes[slot % STRIPES]);
	return live ? 0 : -1;
}

int pep_core_reset(uint32_t slot, uint64_t id) {
	if (slot >= cfg.max_flows || !id || flows[slot].rec.id != id) return -1;
	post(&threads[flows[slot].rec.thread], slot, id);
	return 0;
}

uint32_t pep_core_toward_ue(uint32_t *cursor, struct pep_flow_record *out, uint32_t room) {
	uint32_t n = 0, i = *cursor, end = flows ? __atomic_load_n(&high_water, __ATOMIC_ACQUIRE) : 0;
	for (; i < end && n < room; i++) {
		if (!__atomic_load_n(&toward_ue_marks[i], __ATOMIC_RELAXED) ||
		    !__atomic_exchange_n(&toward_ue_marks[i], 0, __ATOMIC_ACQ_REL))
			continue; /* cleared before the sockets are read: bytes read meanwhile mark again */
		pthread_mutex_lock(&stripes[i % STRIPES]);
		if (flows[i].rec.id) out[n++] = flows[i].rec;
		pthread_mutex_unlock(&stripes[i % STRIPES]);
	}
	*cursor = i;
	return n;
}

void pep_core_mark_toward_ue(uint32_t slot, uint64_t id) {
	if (flows && slot < cfg.max_flows && id && flows[slot].rec.id == id)
		__atomic_store_n(&toward_ue_marks[slot], 1, __ATOMIC_RELAXED);
}

uint32_t pep_core_ue_totals(struct pep_ue_total *out, uint32_t room) {
	uint32_t n = flows ? __atomic_load_n(&ue_count, __ATOMIC_ACQUIRE) : 0;
	if (n > room) n = room;
	for (uint32_t i = 0; i < n; i++) {
		out[i] = ue_totals[i];
		out[i].received = __atomic_load_n(&ue_totals[i].received, __ATOMIC_RELAXED);
	}
	return n;
}
