/*
 * relay-floor: the lower bound of a compiled relay core, for `mts_lab.pep.bench floor`.
 *
 * NOT a product and not the PEP: transparent (TPROXY) split TCP only, with the PEP's
 * kernel work per connection (accept, original destination, a new WAN socket with
 * TCP_NODELAY and the same forced 16 MiB buffers, non-blocking connect, edge-triggered
 * epoll, splice through pooled pipes, half-close and RST forwarding) and none of its
 * features (no policy, limits, timeouts, flow table, hooks, SOCKS5/TLV, TCP_INFO).
 * What it measures: the connections/s and CPU per connection that a C (or Go/Rust) core
 * behind the PEP's control plane could reach at best on this machine.
 *
 *   relay-floor PORT THREADS [OPTION...]   (in the PEP namespace, under the PEP's TPROXY rules)
 *
 * Options, each a variant of the kernel work to measure against the plain floor (issue 16):
 *   sockmap       bytes move in the kernel: once the WAN leg is connected both legs go into
 *                 a sockhash whose stream verdict (relay_floor.bpf.c) redirects each leg's
 *                 bytes to the other leg; user space moves only what arrived before that
 *                 and forwards FIN/RST. Not split-TCP-exact: a FIN is forwarded on
 *                 EPOLLRDHUP without knowing that the kernel's backlog has sent every byte
 *                 before it (the benchmark's flows close only after their response).
 *   defer-accept  TCP_DEFER_ACCEPT on the listener: accept when the first bytes arrive.
 *   quickack      TCP_QUICKACK on both legs.
 *   tfo           TCP Fast Open on the WAN leg (TCP_FASTOPEN_CONNECT: the first bytes ride
 *                 on the SYN once the server's cookie is known; the server must allow it).
 *   cpu-affinity  relay thread i pinned to CPU i, and a SO_REUSEPORT selector (classic BPF:
 *                 the CPU the SYN is processed on) giving each connection to the thread of
 *                 that CPU, so a flow's softirq work and its relay share one core.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>
#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#include "floor_common.h"

#define PIPE_SIZE (1 << 20)

struct flow;
struct pump { int src, dst, pipe[2], fill, eof, shut; };
struct end { struct flow *flow; int side; }; /* epoll cookie per socket */
struct flow {
	int fd[2], connected, closed, in_kernel, shut[2];
	struct pump up, down;
	struct end end[2];
	struct flow *next_closed; /* freed after the epoll batch: later events may name it */
};

static int port, threads, sockmap_fd = -1, defer_accept, quickack, cpu_affinity, tfo;
static int listeners[64];

static __thread struct flow *closed_flows;
static __thread int pool[256][2], pooled; /* empty pipes kept for reuse, as the PEP does */

static int get_pipe(int p[2]) {
	if (pooled > 0) {
		pooled--;
		p[0] = pool[pooled][0], p[1] = pool[pooled][1];
		return 0;
	}
	if (pipe2(p, O_NONBLOCK | O_CLOEXEC)) return -1;
	fcntl(p[1], F_SETPIPE_SZ, PIPE_SIZE);
	return 0;
}

static void put_pipe(struct pump *pp) {
	if (pp->pipe[0] < 0) return;
	if (pp->fill == 0 && pooled < 256) {
		pool[pooled][0] = pp->pipe[0], pool[pooled][1] = pp->pipe[1];
		pooled++;
	} else {
		close(pp->pipe[0]);
		close(pp->pipe[1]);
	}
	pp->pipe[0] = pp->pipe[1] = -1;
}

static void end_flow(struct flow *f, int reset) {
	struct linger l = {1, 0};
	if (f->closed) return;
	f->closed = 1;
	struct pump *p[2] = {&f->up, &f->down};
	for (int i = 0; i < 2; i++) {
		if (reset) setsockopt(f->fd[i], SOL_SOCKET, SO_LINGER, &l, sizeof l);
		close(f->fd[i]);
		put_pipe(p[i]);
	}
	f->next_closed = closed_flows;
	closed_flows = f;
}

/* Move what can be moved; -1 on error. A pump holds a pipe only while bytes are in it. */
static int pump(struct pump *p) {
	for (;;) {
		while (p->fill > 0) {
			ssize_t n = splice(p->pipe[0], NULL, p->dst, NULL, p->fill,
					   SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
			if (n < 0) return errno == EAGAIN ? 0 : -1;
			p->fill -= n;
		}
		if (p->eof) {
			put_pipe(p);
			if (!p->shut) { p->shut = 1; shutdown(p->dst, SHUT_WR); }
			return 0;
		}
		if (p->pipe[0] < 0 && get_pipe(p->pipe)) return -1;
		ssize_t n = splice(p->src, NULL, p->pipe[1], NULL, PIPE_SIZE,
				   SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
		if (n < 0) {
			if (errno != EAGAIN) return -1;
			put_pipe(p); /* nothing in flight: an idle flow holds no pipe */
			return 0;
		}
		if (n == 0) p->eof = 1;
		p->fill = n;
	}
}

/* sockmap: both legs into the sockhash, each under the other's cookie; then move in user
 * space what arrived before (the verdict only sees bytes that arrive from now on). */
static int hand_to_kernel(struct flow *f) {
	__u64 cookie[2];
	socklen_t len = sizeof cookie[0];
	for (int i = 0; i < 2; i++)
		if (getsockopt(f->fd[i], SOL_SOCKET, SO_COOKIE, &cookie[i], &len)) return -1;
	for (int i = 0; i < 2; i++) {
		__u32 peer = f->fd[1 - i];
		if (bpf_map_update_elem(sockmap_fd, &cookie[i], &peer, BPF_ANY)) return -1;
	}
	f->in_kernel = 1;
	return pump(&f->up) < 0 || pump(&f->down) < 0 ? -1 : 0;
}

/* sockmap: user space only forwards a FIN (EPOLLRDHUP) and ends the flow. */
static void kernel_flow_event(struct flow *f, int side, unsigned events) {
	if (!(events & (EPOLLRDHUP | EPOLLHUP)) || f->shut[side]) return;
	f->shut[side] = 1;
	shutdown(f->fd[1 - side], SHUT_WR);
	if (f->shut[0] && f->shut[1]) end_flow(f, 0);
}

static void accept_all(int lfd, int ep) {
	for (;;) {
		struct sockaddr_in dst;
		socklen_t len = sizeof dst;
		int ran = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (ran < 0) return;
		getsockname(ran, (struct sockaddr *)&dst, &len); /* TPROXY: the original destination */
		int wan = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
		set_int(wan, IPPROTO_TCP, TCP_NODELAY, 1);
		if (tfo) set_int(wan, IPPROTO_TCP, TCP_FASTOPEN_CONNECT, 1);
		if (quickack) {
			set_int(ran, IPPROTO_TCP, TCP_QUICKACK, 1);
			set_int(wan, IPPROTO_TCP, TCP_QUICKACK, 1);
		}
		set_int(wan, SOL_SOCKET, SO_RCVBUFFORCE, BUF);
		set_int(wan, SOL_SOCKET, SO_SNDBUFFORCE, BUF);
		struct flow *f = calloc(1, sizeof *f);
		f->fd[0] = ran, f->fd[1] = wan;
		f->up = (struct pump){ran, wan, {-1, -1}, 0, 0, 0};
		f->down = (struct pump){wan, ran, {-1, -1}, 0, 0, 0};
		if (connect(wan, (struct sockaddr *)&dst, len) && errno != EINPROGRESS) {
			end_flow(f, 1);
			continue;
		}
		for (int i = 0; i < 2; i++) {
			f->end[i] = (struct end){f, i};
			struct epoll_event ev = {EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET, {.ptr = &f->end[i]}};
			epoll_ctl(ep, EPOLL_CTL_ADD, f->fd[i], &ev);
		}
	}
}

static void *relay(void *arg) {
	int index = (int)(long)arg, lfd = listeners[index], ep = epoll_create1(EPOLL_CLOEXEC);
	if (cpu_affinity) pin_to_cpu(index);
	struct epoll_event ev = {EPOLLIN, {.ptr = NULL}}, events[256];
	epoll_ctl(ep, EPOLL_CTL_ADD, lfd, &ev);
	for (;;) {
		int n = epoll_wait(ep, events, 256, -1);
		for (int i = 0; i < n; i++) {
			struct end *e = events[i].data.ptr;
			if (e == NULL) { accept_all(lfd, ep); continue; }
			struct flow *f = e->flow;
			if (f->closed) continue;
			if (events[i].events & EPOLLERR) { end_flow(f, 1); continue; }
			if (f->in_kernel) { kernel_flow_event(f, e->side, events[i].events); continue; }
			if (!f->connected) {
				if (e->side == 0 || !(events[i].events & EPOLLOUT)) continue;
				f->connected = 1; /* first writable on the WAN leg: pump both once */
				if (sockmap_fd >= 0) {
					if (hand_to_kernel(f) < 0) end_flow(f, 1);
					continue;
				}
			}
			if (pump(&f->up) < 0 || pump(&f->down) < 0) { end_flow(f, 1); continue; }
			if (f->up.shut && f->down.shut) end_flow(f, 0);
		}
		while (closed_flows) {
			struct flow *f = closed_flows;
			closed_flows = f->next_closed;
			free(f);
		}
	}
	return NULL;
}

/* The stream verdict program, loaded from build/bpf/ beside this binary's build/bin/. */
static int load_sockmap(const char *exe) {
	char path[4096];
	snprintf(path, sizeof path, "%s", exe);
	char *slash = strrchr(path, '/');
	snprintf(slash ? slash + 1 : path, sizeof path - (slash ? slash + 1 - path : 0),
		 "../bpf/relay_floor.bpf.o");
	struct bpf_object *obj = bpf_object__open_file(path, NULL);
	if (!obj || bpf_object__load(obj)) {
		fprintf(stderr, "relay-floor: cannot load %s\n", path);
		exit(1);
	}
	int map = bpf_object__find_map_fd_by_name(obj, "peer_of");
	int prog = bpf_program__fd(bpf_object__find_program_by_name(obj, "relay_verdict"));
	if (bpf_prog_attach(prog, map, BPF_SK_SKB_STREAM_VERDICT, 0)) {
		perror("relay-floor: attach the stream verdict");
		exit(1);
	}
	return map;
}

int main(int argc, char **argv) {
	if (argc < 3) {
		fprintf(stderr, "usage: relay-floor PORT THREADS [sockmap|defer-accept|quickack|"
				"cpu-affinity|tfo ...]\n");
		return 2;
	}
	port = atoi(argv[1]);
	threads = atoi(argv[2]);
	if (threads < 1 || threads > 64) return 2;
	for (int i = 3; i < argc; i++) {
		if (!strcmp(argv[i], "sockmap")) sockmap_fd = load_sockmap(argv[0]);
		else if (!strcmp(argv[i], "defer-accept")) defer_accept = 1;
		else if (!strcmp(argv[i], "quickack")) quickack = 1;
		else if (!strcmp(argv[i], "cpu-affinity")) cpu_affinity = 1;
		else if (!strcmp(argv[i], "tfo")) tfo = 1;
		else {
			fprintf(stderr, "relay-floor: unknown option %s\n", argv[i]);
			return 2;
		}
	}
	run_relays(threads, listeners, port, SOCK_NONBLOCK, defer_accept, cpu_affinity, relay);
}
