// SPDX-License-Identifier: GPL-2.0
/*
 * The on-path observer of the spin and delay bits (research 001 used Spindump): a tc
 * ingress program on the MEC host's interfaces. Every RTT sample goes to user space
 * through the `obs_samples` ring buffer; mec_l4s.observer keeps the per-flow figures.
 *
 * Flows are created by a SYN only (a flow joined midway has no agreed technique) in an
 * LRU hash with a fixed cap: a SYN flood evicts the least recently seen flows and never
 * grows memory. The SYN's code ((run, loss, time) = 010 spin, 001 delay, 101 delay with
 * runs) must be repeated by the SYN-ACK, or EFM stays off for the flow (Spindump's
 * cross-check).
 *
 * Two modes measure the same packets side by side, each with its own trackers:
 * A delay sample is one marked packet, or with EFM_DELAY_RUN (code 101, not the
 * research's) the first packet of a run of marked packets of one super-packet (efm.h).
 *
 *   raw       Spindump's rules. Spin: per direction, the first value initialises, every
 *             later change is an edge; e2e = edge to edge in one direction, half = the
 *             other direction's latest edge not yet matched to this edge. Delay: e2e =
 *             sample to sample in one direction, half = the other direction's latest
 *             sample to this one, each only if below the cut-off (225 ms).
 *   filtered  the same, plus what the research lacked: a spin packet counts only if the
 *             endpoints' guard would follow it (efm_follows, without the "something new"
 *             condition: not old, not the first beyond a hole, so neither a reordered
 *             or resent segment nor one that overtook others flips the wave), and an edge or
 *             sample sooner than min_gap_pct of the flow's smoothed RTT after the
 *             previous one in that direction is set aside (duplicates, reordering).
 *
 * Truncated or malformed IPv4/TCP headers are counted and skipped. The program never
 * changes or drops a packet (TC_ACT_UNSPEC: the next program or the stack decides).
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>
#include "efm.h"
#include "efm_packet.h"

char _license[] SEC("license") = "GPL";

#define TC_ACT_UNSPEC (-1)
#define OBS_MAX_FLOWS 16384

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, OBS_MAX_FLOWS);
	__type(key, struct obs_key);
	__type(value, struct obs_flow);
} obs_flows SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1 << 20);	/* bytes: 32768 samples of 32 bytes */
} obs_samples SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct obs_config);
} obs_config SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, OBS_C_COUNT);
	__type(key, __u32);
	__type(value, __u64);
} obs_counters SEC(".maps");

/* ifindex -> 1 for interfaces without a link-layer header (TUN). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 64);
	__type(key, __u32);
	__type(value, __u32);
} obs_l3_ifaces SEC(".maps");

static __always_inline void count(__u32 counter)
{
	__u64 *c = bpf_map_lookup_elem(&obs_counters, &counter);

	if (c)
		*c += 1;
}

/* The flow's key, and the packet's direction in it (0: from endpoint a). */
static __always_inline __u32 flow_key(const struct tcp_seg *seg, struct obs_key *key)
{
	__u32 src = bpf_ntohl(seg->saddr), dst = bpf_ntohl(seg->daddr);
	__u16 sport = bpf_ntohs(seg->sport), dport = bpf_ntohs(seg->dport);
	bool src_first = src < dst || (src == dst && sport <= dport);

	key->addr_a = src_first ? seg->saddr : seg->daddr;
	key->addr_b = src_first ? seg->daddr : seg->saddr;
	key->port_a = src_first ? seg->sport : seg->dport;
	key->port_b = src_first ? seg->dport : seg->sport;
	return src_first ? 0 : 1;
}

static __always_inline void emit(const struct obs_key *key, const struct obs_flow *f,
				 __u64 now, __u64 rtt, __u32 kind, __u32 mode, __u32 dir)
{
	struct obs_sample *s;

	if (rtt == 0 || rtt > 0xffffffffULL)
		return;
	s = bpf_ringbuf_reserve(&obs_samples, sizeof(*s), 0);
	if (!s) {
		count(OBS_C_RING_FULL);
		return;
	}
	s->t_ns = now;
	s->key = *key;
	s->rtt_ns = rtt;
	s->kind = kind;
	s->mode = mode;
	s->dir = dir;
	s->client_dir = f->client_dir;
	bpf_ringbuf_submit(s, 0);
	count(OBS_C_SAMPLES);
}

/* The technique a handshake code names (efm.h), EFM_OFF for any other code. */
static __always_inline __u8 technique_of(__u8 code)
{
	switch (code) {
	case EFM_LOSS_BIT:
		return EFM_SPIN;
	case EFM_TIME_BIT:
		return EFM_DELAY;
	case EFM_RUN_BIT | EFM_TIME_BIT:
		return EFM_DELAY_RUN;
	default:
		return EFM_OFF;
	}
}

/* A SYN creates the flow (or restarts it); its SYN-ACK must carry the same code. */
static __always_inline void on_handshake(const struct obs_key *key, const struct tcp_seg *seg,
					 __u32 dir, __u64 now)
{
	__u8 code = seg->byte12 & EFM_CODE_BITS;
	struct obs_flow *f;

	if (!(seg->flags & TCP_FLAG_ACK)) {
		struct obs_flow fresh = {
			.created_ns = now,
			.last_ns = now,
			.syn_code = code,
			.client_dir = dir,
			.state = OBS_SYN_SEEN,
		};

		if (!bpf_map_lookup_elem(&obs_flows, key))
			count(OBS_C_FLOWS);
		bpf_map_update_elem(&obs_flows, key, &fresh, BPF_ANY);
		return;
	}
	f = bpf_map_lookup_elem(&obs_flows, key);
	if (!f || f->state != OBS_SYN_SEEN || dir == f->client_dir)
		return;
	f->technique = technique_of(code);
	if (code != f->syn_code || f->technique == EFM_OFF) {
		f->state = OBS_DISABLED;	/* no EFM, or delay+Q (not built) */
		if (code != f->syn_code)
			count(OBS_C_DISAGREED);
		return;
	}
	f->state = OBS_AGREED;
}

/* Filtered mode: an edge this soon after the previous one is not believed. */
static __always_inline bool too_soon(const struct obs_flow *f, const struct obs_track *t,
				     __u64 now, const struct obs_config *cfg)
{
	__u64 srtt = f->srtt_ns[OBS_FILTERED];

	return srtt && t->last_ns && now - t->last_ns < srtt * cfg->min_gap_pct / 100;
}

static __always_inline void smooth(struct obs_flow *f, __u32 mode, __u64 rtt)
{
	f->srtt_ns[mode] = f->srtt_ns[mode] ? (7 * f->srtt_ns[mode] + rtt) / 8 : rtt;
}

/*
 * One mode's spin tracker for one packet of direction d. For the half RTT, the other
 * direction's latest edge counts if it came after this direction's previous edge (it is
 * the edge this one answers, Spindump's matching of outstanding flips).
 */
static __always_inline void spin_packet(const struct obs_key *key, struct obs_flow *f,
					__u32 mode, __u32 d, __u32 value, __u64 now,
					const struct obs_config *cfg)
{
	struct obs_track *t = &f->track[mode & 1][d & 1];
	struct obs_track *other = &f->track[mode & 1][(d ^ 1) & 1];
	__u64 prev = t->last_ns;

	if (!t->seen) {
		t->seen = 1;
		t->value = value;
		return;
	}
	if (value == t->value)
		return;
	if (mode == OBS_FILTERED && too_soon(f, t, now, cfg)) {
		count(OBS_C_TOO_SOON);
		return;		/* the wave keeps its value: a spurious flip is ignored */
	}
	t->value = value;
	t->last_ns = now;
	if (prev) {
		emit(key, f, now, now - prev, OBS_SPIN_E2E, mode, d);
		smooth(f, mode, now - prev);
	}
	if (other->last_ns && other->last_ns > prev)
		emit(key, f, now, now - other->last_ns, OBS_SPIN_HALF, mode, d);
}

/* One mode's delay tracker for one marked packet of direction d (Spindump's rules). */
static __always_inline void delay_packet(const struct obs_key *key, struct obs_flow *f,
					 __u32 mode, __u32 d, __u64 now,
					 const struct obs_config *cfg)
{
	struct obs_track *t = &f->track[mode & 1][d & 1];
	struct obs_track *other = &f->track[mode & 1][(d ^ 1) & 1];

	if (mode == OBS_FILTERED && too_soon(f, t, now, cfg)) {
		count(OBS_C_TOO_SOON);
		return;
	}
	if (t->last_ns && now - t->last_ns < cfg->delay_cutoff_ns) {
		emit(key, f, now, now - t->last_ns, OBS_DELAY_E2E, mode, d);
		smooth(f, mode, now - t->last_ns);
	}
	if (other->last_ns && now - other->last_ns < cfg->delay_cutoff_ns)
		emit(key, f, now, now - other->last_ns, OBS_DELAY_HALF, mode, d);
	t->last_ns = now;
}

SEC("tc")
int efm_observe(struct __sk_buff *skb)
{
	__u32 ifindex = skb->ifindex;	/* at ingress: the device it arrived on */
	__u32 l2 = bpf_map_lookup_elem(&obs_l3_ifaces, &ifindex) ? 0 : ETH_HLEN;
	struct obs_config *cfg;
	struct obs_flow *f;
	struct obs_key key;
	struct tcp_seg seg;
	__u64 now;
	__u32 d, zero = 0;
	bool time, newest;

	count(OBS_C_PACKETS);
	switch (parse_tcp(skb, l2, &seg)) {
	case PKT_TCP:
		break;
	case PKT_MALFORMED:
		count(OBS_C_MALFORMED);
		return TC_ACT_UNSPEC;
	default:
		return TC_ACT_UNSPEC;
	}
	count(OBS_C_TCP);
	cfg = bpf_map_lookup_elem(&obs_config, &zero);
	if (!cfg)
		return TC_ACT_UNSPEC;
	now = bpf_ktime_get_ns();
	d = flow_key(&seg, &key);
	if (seg.flags & TCP_FLAG_SYN) {
		on_handshake(&key, &seg, d, now);
		return TC_ACT_UNSPEC;
	}
	f = bpf_map_lookup_elem(&obs_flows, &key);
	if (!f) {
		count(OBS_C_NO_FLOW);
		return TC_ACT_UNSPEC;
	}
	f->last_ns = now;
	f->packets[d & 1] += 1;
	if (f->state != OBS_AGREED)
		return TC_ACT_UNSPEC;
	time = seg.byte12 & EFM_TIME_BIT;
	if (f->technique == EFM_SPIN) {
		newest = efm_follows(&f->order[d & 1], &seg, false);
		spin_packet(&key, f, OBS_RAW, d, time, now, cfg);
		if (newest)
			spin_packet(&key, f, OBS_FILTERED, d, time, now, cfg);
		else
			count(OBS_C_REORDERED);
	} else if (time) {
		/* with runs, a sample is a run's first segment, in both modes */
		if (f->technique == EFM_DELAY_RUN && !efm_run_starts(&f->run[d & 1], &seg)) {
			count(OBS_C_RUN_CONTINUED);
			return TC_ACT_UNSPEC;
		}
		delay_packet(&key, f, OBS_RAW, d, now, cfg);
		delay_packet(&key, f, OBS_FILTERED, d, now, cfg);
	}
	return TC_ACT_UNSPEC;
}
