// SPDX-License-Identifier: GPL-2.0
/*
 * The lab's truth for the L4S observer (issue 14): each TCP sender's own RTT samples,
 * taken where TCP takes them. Lab only (mts_lab.l4s.truth loads and reads it).
 *
 * sender_sockops runs on one cgroup (the experiment creates its listeners in it; accepted
 * sockets inherit the listener's cgroup). On ESTABLISHED it turns BPF_SOCK_OPS_RTT_CB on
 * for the socket; on RTT_CB it records args[0] = mrtt, the sample TCP's estimator takes
 * (µs: the oldest newly acked segment's send-to-ACK time, or the timestamp echo's), and
 * args[1] = srtt after the update (<< 3). tcp_rtt_estimator calls it only when snd_una
 * has passed rtt_seq, so this is ONE SAMPLE PER ROUND TRIP, not per ACK (measured in
 * docs/l4s.md). What a per-ACK truth would need is not open here: fentry/fexit programs
 * (on tcp_ack_update_rtt, or on tcp_rcv_established) are refused by this machine's
 * kernel with EPERM before verification, as root with CAP_BPF and CAP_PERFMON; and
 * recovering each ACK's sample from srtt's change in the parse-all-headers callback
 * fails because that callback does not run on every segment (measured; docs/l4s.md).
 *
 * sender_ack_in (tc ingress on the sender's interface) notes when each ACK number first
 * arrives, so each record also tells how long after its ACK reached the interface TCP
 * took the sample: the part of mrtt inside the sender, which an observer on the path
 * cannot see (and the EFM marker, reading marks at tc ingress too, does not wait for).
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>
#include "efm_packet.h"

char _license[] SEC("license") = "GPL";

#define AF_INET 2
#define TC_ACT_UNSPEC (-1)
#define ACK_WAIT_UNKNOWN 0xffffffff

struct rtt_record {
	__u64 t_ns;		/* bpf_ktime_get_ns: the observer's clock too */
	__u32 local_addr;	/* network order */
	__u32 remote_addr;
	__u16 local_port;	/* host order */
	__u16 remote_port;
	__u32 mrtt_us;		/* the sample TCP's estimator took */
	__u32 srtt_us;		/* srtt after the update */
	__u32 ack_wait_us;	/* the ACK's arrival at the interface to TCP's sample (or ~0) */
};

/* an ACK number of a connection, as the sender's socket names it */
struct ack_key {
	__u32 local_addr;
	__u32 remote_addr;
	__u16 local_port;	/* host order */
	__u16 remote_port;
	__u32 ack;		/* host order */
};

enum rtt_counter {
	RTT_C_SOCKETS = 0,	/* sockets whose RTT callback was turned on */
	RTT_C_SAMPLES,
	RTT_C_RING_FULL,
	RTT_C_COUNT,
};

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1 << 20);	/* bytes: 26,000 records of 40 bytes */
} rtt_samples SEC(".maps");

/* when each ACK number first arrived at the sender's interface (sender_ack_in) */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 65536);
	__type(key, struct ack_key);
	__type(value, __u64);
} ack_arrival SEC(".maps");

/* interfaces without a link-layer header (TUN), by ifindex: filled by EfmObject.attach */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 64);
	__type(key, __u32);
	__type(value, __u32);
} efm_l3_ifaces SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, RTT_C_COUNT);
	__type(key, __u32);
	__type(value, __u64);
} rtt_counters SEC(".maps");

static __always_inline void count(__u32 which)
{
	__u64 *c = bpf_map_lookup_elem(&rtt_counters, &which);

	if (c)
		(*c)++;
}

static __always_inline void record(const struct bpf_sock_ops *ops)
{
	struct ack_key key = {
		.local_addr = ops->local_ip4,
		.remote_addr = ops->remote_ip4,
		.local_port = ops->local_port,
		/* remote_port holds the be16 port in its upper half */
		.remote_port = bpf_ntohl(ops->remote_port) & 0xffff,
		.ack = ops->snd_una,	/* tcp_ack has moved snd_una to this ACK's number */
	};
	struct rtt_record *r = bpf_ringbuf_reserve(&rtt_samples, sizeof(*r), 0);
	__u64 now = bpf_ktime_get_ns();
	__u64 *arrived;

	if (!r) {
		count(RTT_C_RING_FULL);
		return;
	}
	arrived = bpf_map_lookup_elem(&ack_arrival, &key);
	r->ack_wait_us = arrived && *arrived <= now ? (now - *arrived) / 1000 : ACK_WAIT_UNKNOWN;
	r->t_ns = now;
	r->local_addr = key.local_addr;
	r->remote_addr = key.remote_addr;
	r->local_port = key.local_port;
	r->remote_port = key.remote_port;
	r->mrtt_us = ops->args[0];
	r->srtt_us = ops->args[1] >> 3;
	bpf_ringbuf_submit(r, 0);
	count(RTT_C_SAMPLES);
}

SEC("sockops")
int sender_sockops(struct bpf_sock_ops *ops)
{
	if (ops->family != AF_INET)
		return 1;
	switch (ops->op) {
	case BPF_SOCK_OPS_ACTIVE_ESTABLISHED_CB:
	case BPF_SOCK_OPS_PASSIVE_ESTABLISHED_CB:
		bpf_sock_ops_cb_flags_set(ops, ops->bpf_sock_ops_cb_flags | BPF_SOCK_OPS_RTT_CB_FLAG);
		count(RTT_C_SOCKETS);
		break;
	case BPF_SOCK_OPS_RTT_CB:
		record(ops);
		break;
	}
	return 1;
}

/*
 * tc ingress on the sender's interface: the time each ACK number first arrives on the
 * wire side, so that record() can tell how long TCP took to take the sample after the ACK
 * arrived (a socket owned by the application holds incoming segments in its backlog).
 */
SEC("tc")
int sender_ack_in(struct __sk_buff *skb)
{
	__u32 ifindex = skb->ifindex;
	__u32 l2 = bpf_map_lookup_elem(&efm_l3_ifaces, &ifindex) ? 0 : ETH_HLEN;
	struct tcp_seg seg = {};
	struct ack_key key;
	__u64 now;

	if (parse_tcp(skb, l2, &seg) != PKT_TCP || !(seg.flags & TCP_FLAG_ACK))
		return TC_ACT_UNSPEC;
	key.local_addr = seg.daddr;
	key.remote_addr = seg.saddr;
	key.local_port = bpf_ntohs(seg.dport);
	key.remote_port = bpf_ntohs(seg.sport);
	key.ack = seg.ack;
	now = bpf_ktime_get_ns();
	bpf_map_update_elem(&ack_arrival, &key, &now, BPF_NOEXIST);
	return TC_ACT_UNSPEC;
}
