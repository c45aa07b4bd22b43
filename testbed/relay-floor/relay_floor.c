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
 *   relay-floor PORT THREADS        (in the PEP namespace, under the PEP's TPROXY rules)
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#define BUF (16 << 20)
#define PIPE_SIZE (1 << 20)

struct flow;
struct pump { int src, dst, pipe[2], fill, eof, shut; };
struct end { struct flow *flow; int side; }; /* epoll cookie per socket */
struct flow {
	int fd[2], connected, closed;
	struct pump up, down;
	struct end end[2];
	struct flow *next_closed; /* freed after the epoll batch: later events may name it */
};

static int port;

static void set_int(int fd, int level, int opt, int value) {
	setsockopt(fd, level, opt, &value, sizeof value);
}

static int listener(void) {
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
	set_int(fd, SOL_SOCKET, SO_REUSEADDR, 1);
	set_int(fd, SOL_SOCKET, SO_REUSEPORT, 1);
	set_int(fd, SOL_IP, IP_TRANSPARENT, 1);
	set_int(fd, IPPROTO_TCP, TCP_NODELAY, 1);
	set_int(fd, SOL_SOCKET, SO_RCVBUFFORCE, BUF);
	set_int(fd, SOL_SOCKET, SO_SNDBUFFORCE, BUF);
	if (bind(fd, (struct sockaddr *)&a, sizeof a) || listen(fd, SOMAXCONN)) {
		perror("listen");
		exit(1);
	}
	return fd;
}

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

static void accept_all(int lfd, int ep) {
	for (;;) {
		struct sockaddr_in dst;
		socklen_t len = sizeof dst;
		int ran = accept4(lfd, NULL, NULL, SOCK_NONBLOCK);
		if (ran < 0) return;
		getsockname(ran, (struct sockaddr *)&dst, &len); /* TPROXY: the original destination */
		int wan = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
		set_int(wan, IPPROTO_TCP, TCP_NODELAY, 1);
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

static void *relay(void *unused) {
	(void)unused;
	int lfd = listener(), ep = epoll_create1(EPOLL_CLOEXEC);
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
			if (!f->connected) {
				if (e->side == 0 || !(events[i].events & EPOLLOUT)) continue;
				f->connected = 1; /* first writable on the WAN leg: pump both once */
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

int main(int argc, char **argv) {
	if (argc != 3) {
		fprintf(stderr, "usage: relay-floor PORT THREADS\n");
		return 2;
	}
	port = atoi(argv[1]);
	int threads = atoi(argv[2]);
	pthread_t t;
	for (int i = 1; i < threads; i++) pthread_create(&t, NULL, relay, NULL);
	printf("ready\n");
	fflush(stdout);
	relay(NULL);
}
