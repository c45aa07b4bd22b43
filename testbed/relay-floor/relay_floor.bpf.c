// SPDX-License-Identifier: GPL-2.0
/*
 * relay-floor's in-kernel relay (option `sockmap`; a measurement device, not the PEP).
 * Both legs of a flow sit in one sockhash, each under the *other* leg's socket cookie, so
 * the stream verdict of a leg redirects its bytes to the other leg's egress without user
 * space: no splice per message. Redirected bytes are sent by the kernel's psock backlog
 * (a kworker), which is why the benchmark counts kernel threads' CPU too.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>

struct {
	__uint(type, BPF_MAP_TYPE_SOCKHASH);
	__uint(max_entries, 131072);
	__type(key, __u64);   /* the cookie of the leg whose bytes go to this socket */
	__type(value, __u32); /* the socket (a descriptor when written from user space) */
} peer_of SEC(".maps");

SEC("sk_skb/stream_verdict")
int relay_verdict(struct __sk_buff *skb)
{
	__u64 cookie = bpf_get_socket_cookie(skb);

	return bpf_sk_redirect_hash(skb, &peer_of, &cookie, 0); /* 0: the peer's egress */
}

char LICENSE[] SEC("license") = "GPL";
