/* What relay-floor and relay-floor-uring share: the listener the PEP's relay opens, and
 * the cpu-affinity option (measurement devices for issue 16, not the PEP). */
#ifndef FLOOR_COMMON_H
#define FLOOR_COMMON_H

#include <linux/filter.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>

#define BUF (16 << 20) /* the PEP's forced socket buffers */

static inline void set_int(int fd, int level, int opt, int value) {
	setsockopt(fd, level, opt, &value, sizeof value);
}

/* A transparent listener as the PEP's: SO_REUSEPORT (one per relay thread), TCP_NODELAY and
 * the forced buffers that accepted sockets inherit. */
static inline int floor_listener(int port, int type_flags, int defer_accept) {
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | type_flags, 0);
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
	set_int(fd, SOL_SOCKET, SO_REUSEADDR, 1);
	set_int(fd, SOL_SOCKET, SO_REUSEPORT, 1);
	set_int(fd, SOL_IP, IP_TRANSPARENT, 1);
	set_int(fd, IPPROTO_TCP, TCP_NODELAY, 1);
	set_int(fd, SOL_SOCKET, SO_RCVBUFFORCE, BUF);
	set_int(fd, SOL_SOCKET, SO_SNDBUFFORCE, BUF);
	if (defer_accept) set_int(fd, IPPROTO_TCP, TCP_DEFER_ACCEPT, 1);
	if (bind(fd, (struct sockaddr *)&a, sizeof a) || listen(fd, SOMAXCONN)) {
		perror("listen");
		exit(1);
	}
	return fd;
}

/* cpu-affinity: relay thread i runs on CPU i only ... */
static inline void pin_to_cpu(int index) {
	cpu_set_t cpus;
	CPU_ZERO(&cpus);
	CPU_SET(index, &cpus);
	pthread_setaffinity_np(pthread_self(), sizeof cpus, &cpus);
}

/* ... and the reuseport group's selector (classic BPF) returns the CPU processing the SYN,
 * which picks the listener of that index: listeners must join the group in thread order. */
static inline void select_listener_by_cpu(int fd) {
	struct sock_filter code[] = {
		{BPF_LD | BPF_W | BPF_ABS, 0, 0, SKF_AD_OFF + SKF_AD_CPU},
		{BPF_RET | BPF_A, 0, 0, 0},
	};
	struct sock_fprog prog = {2, code};
	if (setsockopt(fd, SOL_SOCKET, SO_ATTACH_REUSEPORT_CBPF, &prog, sizeof prog)) {
		perror("SO_ATTACH_REUSEPORT_CBPF");
		exit(1);
	}
}

/* Listeners in thread order (a reuseport group indexes its sockets in join order), then
 * relay((void *)i) in thread i, the caller's thread being thread 0; "ready" once listening. */
static inline void run_relays(int threads, int *listeners, int port, int type_flags,
			      int defer_accept, int cpu_affinity, void *(*relay)(void *)) {
	for (int i = 0; i < threads; i++)
		listeners[i] = floor_listener(port, type_flags, defer_accept);
	if (cpu_affinity) select_listener_by_cpu(listeners[0]);
	pthread_t t;
	for (long i = 1; i < threads; i++) pthread_create(&t, NULL, relay, (void *)i);
	printf("ready\n");
	fflush(stdout);
	relay(NULL);
}

#endif
