/* SPDX-License-Identifier: MIT */
/*
 * pep_preload.c: run an unmodified program through the PEP's explicit modes.
 *
 *   PEP_PRELOAD=tlv:10.20.0.1:8181 PEP_PRELOAD_NETS=10.10.0.0/24 \
 *       LD_PRELOAD=build/lib/libpep_preload.so iperf3 -c 10.10.0.2
 *
 * connect() of a TCP/IPv4 socket to an address in PEP_PRELOAD_NETS (comma-separated
 * CIDRs; default: every address outside 127.0.0.0/8) goes through the PEP instead:
 *   tlv:<ip>:<port>     the TFO opt-in TLV (pep_tlv.h)
 *   socks5:<ip>:<port>  SOCKS5, no authentication, CONNECT
 * The connect is done in blocking mode (the socket's O_NONBLOCK is restored after), so a
 * program that expected EINPROGRESS sees an immediate success instead. Other sockets and
 * addresses are untouched.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "pep_tlv.h"

#define MAX_NETS 16

enum pep_mode { MODE_OFF, MODE_TLV, MODE_SOCKS5 };

static struct {
	enum pep_mode mode;
	struct sockaddr_in pep;
	uint32_t net[MAX_NETS], mask[MAX_NETS]; /* host byte order */
	int nets;
} cfg;

static int (*real_connect)(int, const struct sockaddr *, socklen_t);
static pthread_once_t once = PTHREAD_ONCE_INIT;

static int parse_net(const char *text, uint32_t *net, uint32_t *mask)
{
	char buf[32];
	char *slash;
	struct in_addr a;
	long bits = 32;

	snprintf(buf, sizeof(buf), "%s", text);
	slash = strchr(buf, '/');
	if (slash) {
		*slash = '\0';
		bits = strtol(slash + 1, NULL, 10);
	}
	if (inet_pton(AF_INET, buf, &a) != 1 || bits < 0 || bits > 32)
		return -1;
	*mask = bits ? ~0u << (32 - bits) : 0;
	*net = ntohl(a.s_addr) & *mask;
	return 0;
}

static const char *next_item(const char *list)
{
	const char *comma = strchr(list, ',');

	return comma ? comma + 1 : NULL;
}

static void configure(void)
{
	const char *spec = getenv("PEP_PRELOAD");
	const char *nets = getenv("PEP_PRELOAD_NETS");
	char host[64];
	unsigned port;

	real_connect = (int (*)(int, const struct sockaddr *, socklen_t))dlsym(RTLD_NEXT, "connect");
	if (!spec)
		return;
	if (sscanf(spec, "tlv:%63[0-9.]:%u", host, &port) == 2)
		cfg.mode = MODE_TLV;
	else if (sscanf(spec, "socks5:%63[0-9.]:%u", host, &port) == 2)
		cfg.mode = MODE_SOCKS5;
	if (cfg.mode == MODE_OFF || port == 0 || port > 65535 ||
	    inet_pton(AF_INET, host, &cfg.pep.sin_addr) != 1) {
		fprintf(stderr, "pep_preload: PEP_PRELOAD=%s is not tlv|socks5:<ip>:<port>\n", spec);
		cfg.mode = MODE_OFF;
		return;
	}
	cfg.pep.sin_family = AF_INET;
	cfg.pep.sin_port = htons((uint16_t)port);
	if (!nets)
		return;
	for (const char *p = nets; p && *p && cfg.nets < MAX_NETS; p = next_item(p)) {
		if (parse_net(p, &cfg.net[cfg.nets], &cfg.mask[cfg.nets]) == 0)
			cfg.nets++;
		else
			fprintf(stderr, "pep_preload: bad network in PEP_PRELOAD_NETS: %s\n", p);
	}
}

static int wanted(int fd, const struct sockaddr *addr, socklen_t len)
{
	const struct sockaddr_in *in = (const struct sockaddr_in *)addr;
	uint32_t ip;
	int type = 0;
	socklen_t tlen = sizeof(type);

	if (cfg.mode == MODE_OFF || !addr || addr->sa_family != AF_INET || len < sizeof(*in))
		return 0;
	if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &tlen) < 0 || type != SOCK_STREAM)
		return 0;
	ip = ntohl(in->sin_addr.s_addr);
	if (in->sin_addr.s_addr == cfg.pep.sin_addr.s_addr && in->sin_port == cfg.pep.sin_port)
		return 0;
	if (!cfg.nets)
		return (ip >> 24) != 127;
	for (int i = 0; i < cfg.nets; i++)
		if ((ip & cfg.mask[i]) == cfg.net[i])
			return 1;
	return 0;
}

static int read_exact(int fd, uint8_t *buf, size_t len)
{
	while (len) {
		ssize_t n = recv(fd, buf, len, 0);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			if (n == 0)
				errno = ECONNRESET;
			return -1;
		}
		buf += n;
		len -= (size_t)n;
	}
	return 0;
}

static int socks5_connect(int fd, const struct sockaddr_in *dst)
{
	static const uint8_t hello[3] = { 5, 1, 0 };
	uint8_t req[10] = { 5, 1, 0, 1 };
	uint8_t reply[10];

	if (real_connect(fd, (const struct sockaddr *)&cfg.pep, sizeof(cfg.pep)) < 0)
		return -1;
	if (pep_send_all(fd, hello, sizeof(hello)) < 0 || read_exact(fd, reply, 2) < 0)
		return -1;
	if (reply[0] != 5 || reply[1] != 0) {
		errno = ECONNREFUSED;
		return -1;
	}
	memcpy(req + 4, &dst->sin_addr.s_addr, 4);
	memcpy(req + 8, &dst->sin_port, 2);
	if (pep_send_all(fd, req, sizeof(req)) < 0 || read_exact(fd, reply, sizeof(reply)) < 0)
		return -1;
	if (reply[1] != 0) {
		errno = reply[1] == 2 ? EACCES : reply[1] == 3 ? ENETUNREACH :
			reply[1] == 4 ? EHOSTUNREACH : ECONNREFUSED;
		return -1;
	}
	return 0;
}

int connect(int fd, const struct sockaddr *addr, socklen_t len)
{
	int flags, rc, saved;

	pthread_once(&once, configure);
	if (!wanted(fd, addr, len))
		return real_connect(fd, addr, len);
	flags = fcntl(fd, F_GETFL);
	if (flags >= 0 && (flags & O_NONBLOCK))
		fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
	if (cfg.mode == MODE_TLV)
		rc = pep_connect(fd, addr, len, &cfg.pep, 0);
	else
		rc = socks5_connect(fd, (const struct sockaddr_in *)addr);
	saved = errno;
	if (flags >= 0 && (flags & O_NONBLOCK))
		fcntl(fd, F_SETFL, flags);
	errno = saved;
	return rc;
}
