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
 * fails because that callback misses the segments TCP takes on its fast path (about
 * half of the ACKs, measured; docs/l4s.md).
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

char _license[] SEC("license") = "GPL";

#define AF_INET 2

struct rtt_record {
	__u64 t_ns;		/* bpf_ktime_get_ns: the observer's clock too */
	__u32 local_addr;	/* network order */
	__u32 remote_addr;
	__u16 local_port;	/* host order */
	__u16 remote_port;
	__u32 mrtt_us;		/* the sample TCP's estimator took */
	__u32 srtt_us;		/* srtt after the update */
	__u32 pad;
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
	struct rtt_record *r = bpf_ringbuf_reserve(&rtt_samples, sizeof(*r), 0);

	if (!r) {
		count(RTT_C_RING_FULL);
		return;
	}
	r->t_ns = bpf_ktime_get_ns();
	r->local_addr = ops->local_ip4;
	r->remote_addr = ops->remote_ip4;
	r->local_port = ops->local_port;
	/* remote_port holds the be16 port in its upper half */
	r->remote_port = bpf_ntohl(ops->remote_port) & 0xffff;
	r->mrtt_us = ops->args[0];
	r->srtt_us = ops->args[1] >> 3;
	r->pad = 0;
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
