/* SPDX-License-Identifier: MIT */
/*
 * pep_tlv.h: client side of the PEP's TFO opt-in TLV (header only, IPv4).
 *
 *     #include "pep_tlv.h"
 *     int fd = socket(AF_INET, SOCK_STREAM, 0);
 *     if (pep_connect(fd, (struct sockaddr *)&server, sizeof(server), &pep, 0) < 0) ...
 *     send(fd, ...);   // as after connect()
 *
 * pep_connect() sends the TLV in the SYN with TCP Fast Open (0-RTT once the kernel holds
 * a TFO cookie for the PEP; the first connection sends it after the handshake).
 *
 * Wire format (every multi-byte field's byte order is fixed, whatever the host):
 *   header  4 bytes: version (1) | option count | magic 0xBEEF little-endian: 01 nn EF BE
 *   option  8 bytes: type | length (2 or 6) | value (2 bytes) | optional (4 bytes)
 *   CONNECT     0x0A length 6: value = port, big-endian; optional = IPv4, big-endian
 *   BUFFER_SIZE 0x0B length 6: value = 0; optional = socket buffer bytes, little-endian
 * Bytes after the TLV are the application's and are relayed to the server.
 */
#ifndef PEP_TLV_H
#define PEP_TLV_H

#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/types.h>

#ifndef MSG_FASTOPEN
#define MSG_FASTOPEN 0x20000000
#endif
#ifndef TCP_FASTOPEN_NO_COOKIE
#define TCP_FASTOPEN_NO_COOKIE 34
#endif

#define PEP_TLV_VERSION 1
#define PEP_TLV_MAGIC 0xBEEF
#define PEP_TLV_CONNECT 0x0A
#define PEP_TLV_BUFFER_SIZE 0x0B
#define PEP_TLV_HEADER_LEN 4
#define PEP_TLV_OPTION_LEN 8
#define PEP_TLV_MAX_LEN (PEP_TLV_HEADER_LEN + 2 * PEP_TLV_OPTION_LEN)

/* pep_connect() flags */
#define PEP_NO_COOKIE 0x1 /* send SYN data without a TFO cookie (PEP_TFO_NO_COOKIE on the PEP) */

/* Writes the TLV for dst (and a BUFFER_SIZE option if buffer_size > 0) into out, which
 * must hold PEP_TLV_MAX_LEN bytes. Returns its length. */
static inline size_t pep_tlv_encode(uint8_t *out, const struct sockaddr_in *dst,
				    uint32_t buffer_size)
{
	uint8_t *p = out + PEP_TLV_HEADER_LEN;
	uint8_t count = 1;

	p[0] = PEP_TLV_CONNECT;
	p[1] = 6;
	memcpy(p + 2, &dst->sin_port, 2);	 /* already big-endian */
	memcpy(p + 4, &dst->sin_addr.s_addr, 4); /* already big-endian */
	p += PEP_TLV_OPTION_LEN;
	if (buffer_size) {
		p[0] = PEP_TLV_BUFFER_SIZE;
		p[1] = 6;
		p[2] = p[3] = 0;
		for (int i = 0; i < 4; i++)
			p[4 + i] = (uint8_t)(buffer_size >> (8 * i)); /* little-endian */
		p += PEP_TLV_OPTION_LEN;
		count++;
	}
	out[0] = PEP_TLV_VERSION;
	out[1] = count;
	out[2] = PEP_TLV_MAGIC & 0xff;
	out[3] = PEP_TLV_MAGIC >> 8;
	return (size_t)(p - out);
}

/* Waits until fd is writable (the handshake finished) and reports its connect error. */
static inline int pep_wait_connected(int fd)
{
	struct pollfd pfd = { .fd = fd, .events = POLLOUT };
	int err = 0;
	socklen_t len = sizeof(err);

	while (poll(&pfd, 1, -1) < 0)
		if (errno != EINTR)
			return -1;
	if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) < 0)
		return -1;
	if (err) {
		errno = err;
		return -1;
	}
	return 0;
}

/* Sends all of buf on a connected or connecting socket (blocking or not). */
static inline int pep_send_all(int fd, const uint8_t *buf, size_t len)
{
	while (len) {
		ssize_t n = send(fd, buf, len, MSG_NOSIGNAL);

		if (n < 0) {
			if (errno == EINTR)
				continue;
			if ((errno == EAGAIN || errno == ENOTCONN) && pep_wait_connected(fd) == 0)
				continue;
			return -1;
		}
		buf += n;
		len -= (size_t)n;
	}
	return 0;
}

/* connect(2) through the PEP at pep: afterwards fd behaves as if connected to addr.
 * buffer_size > 0 asks the PEP for that socket buffer size on this flow.
 * Returns 0, or -1 with errno set. */
static inline int pep_connect_buffer(int fd, const struct sockaddr *addr, socklen_t addrlen,
				     const struct sockaddr_in *pep, uint32_t buffer_size,
				     int flags)
{
	uint8_t tlv[PEP_TLV_MAX_LEN];
	size_t len;
	ssize_t sent;
	int one = 1;

	if (addr->sa_family != AF_INET || addrlen < (socklen_t)sizeof(struct sockaddr_in)) {
		errno = EAFNOSUPPORT;
		return -1;
	}
	if ((flags & PEP_NO_COOKIE) &&
	    setsockopt(fd, IPPROTO_TCP, TCP_FASTOPEN_NO_COOKIE, &one, sizeof(one)) < 0)
		return -1;
	len = pep_tlv_encode(tlv, (const struct sockaddr_in *)addr, buffer_size);
	do
		sent = sendto(fd, tlv, len, MSG_FASTOPEN | MSG_NOSIGNAL,
			      (const struct sockaddr *)pep, sizeof(*pep));
	while (sent < 0 && errno == EINTR);
	if (sent < 0) {
		if (errno != EINPROGRESS)
			return -1;
		sent = 0; /* non-blocking without a cookie: plain SYN, TLV follows */
	}
	return pep_send_all(fd, tlv + sent, len - (size_t)sent);
}

static inline int pep_connect(int fd, const struct sockaddr *addr, socklen_t addrlen,
			      const struct sockaddr_in *pep, int flags)
{
	return pep_connect_buffer(fd, addr, addrlen, pep, 0, flags);
}

#endif /* PEP_TLV_H */
