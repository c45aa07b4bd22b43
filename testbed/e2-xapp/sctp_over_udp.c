/*
 * sctp_over_udp.so: a test harness (LD_PRELOAD) that lets FlexRIC's nearRT-RIC, its E2
 * agents and xApps run on a Linux kernel without SCTP (CONFIG_IP_SCTP unset), for a live
 * check on loopback. It is not a product part and never used with a real RAN.
 *
 * FlexRIC's E2 and E42 endpoints use one-to-many SCTP sockets (SOCK_SEQPACKET) addressed
 * per message: sctp_sendmsg(to) and sctp_recvmsg(from), no connect or accept. On loopback
 * that is what a UDP socket does, so:
 *   socket(AF_INET, SOCK_SEQPACKET, IPPROTO_SCTP) -> a UDP socket (4 MB buffers)
 *   setsockopt/getsockopt(IPPROTO_SCTP, ...), listen() on such a socket -> accepted, no effect
 *   sctp_sendmsg -> sendto; sctp_recvmsg -> recvfrom, MSG_EOR set, no notifications
 * Every E2AP/E42 message is still FlexRIC's own ASN.1 APER encoding; what is lost is SCTP's
 * association handling (no COMM_UP/SHUTDOWN notifications) and its reliability, which loopback
 * UDP gives unless a receive buffer overflows. Messages must fit one datagram (64 kB).
 *
 *   LD_PRELOAD=build/lib/sctp_over_udp.so nearRT-RIC ...
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <netinet/in.h>
#include <netinet/sctp.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>

#define MAX_FD 65536
static uint8_t shimmed[MAX_FD]; /* 1: this fd is an SCTP socket turned into UDP */

static int is_shimmed(int fd) { return fd >= 0 && fd < MAX_FD && shimmed[fd]; }

int socket(int domain, int type, int protocol)
{
  static int (*real_socket)(int, int, int);
  if (real_socket == NULL)
    real_socket = (int (*)(int, int, int))dlsym(RTLD_NEXT, "socket");
  if (protocol != IPPROTO_SCTP || (type & 0xf) != SOCK_SEQPACKET || (domain != AF_INET && domain != AF_INET6))
    return real_socket(domain, type, protocol);
  int fd = real_socket(domain, SOCK_DGRAM | (type & ~0xf), 0);
  if (fd >= 0 && fd < MAX_FD) {
    shimmed[fd] = 1;
    int size = 4 << 20;
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &size, sizeof size);
    setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &size, sizeof size);
  }
  return fd;
}

int close(int fd)
{
  static int (*real_close)(int);
  if (real_close == NULL)
    real_close = (int (*)(int))dlsym(RTLD_NEXT, "close");
  if (fd >= 0 && fd < MAX_FD)
    shimmed[fd] = 0;
  return real_close(fd);
}

int setsockopt(int fd, int level, int name, const void* val, socklen_t len)
{
  static int (*real)(int, int, int, const void*, socklen_t);
  if (real == NULL)
    real = (int (*)(int, int, int, const void*, socklen_t))dlsym(RTLD_NEXT, "setsockopt");
  if (level == IPPROTO_SCTP && is_shimmed(fd))
    return 0;
  return real(fd, level, name, val, len);
}

int getsockopt(int fd, int level, int name, void* val, socklen_t* len)
{
  static int (*real)(int, int, int, void*, socklen_t*);
  if (real == NULL)
    real = (int (*)(int, int, int, void*, socklen_t*))dlsym(RTLD_NEXT, "getsockopt");
  if (level == IPPROTO_SCTP && is_shimmed(fd)) {
    memset(val, 0, *len);
    return 0;
  }
  return real(fd, level, name, val, len);
}

int listen(int fd, int backlog)
{
  static int (*real)(int, int);
  if (real == NULL)
    real = (int (*)(int, int))dlsym(RTLD_NEXT, "listen");
  return is_shimmed(fd) ? 0 : real(fd, backlog);
}

int sctp_sendmsg(int fd, const void* msg, size_t len, struct sockaddr* to, socklen_t tolen, uint32_t ppid,
                 uint32_t flags, uint16_t stream, uint32_t ttl, uint32_t context)
{
  (void)ppid, (void)flags, (void)stream, (void)ttl, (void)context;
  return (int)sendto(fd, msg, len, 0, to, tolen);
}

int sctp_recvmsg(int fd, void* msg, size_t len, struct sockaddr* from, socklen_t* fromlen,
                 struct sctp_sndrcvinfo* sinfo, int* msg_flags)
{
  int n = (int)recvfrom(fd, msg, len, 0, from, fromlen);
  if (sinfo != NULL)
    memset(sinfo, 0, sizeof *sinfo);
  if (msg_flags != NULL)
    *msg_flags = MSG_EOR;
  return n;
}
