// SPDX-License-Identifier: GPL-2.0
/*
 * Spin bit and delay bit over TCP at an endpoint, without a kernel patch (research 001
 * patched __tcp_transmit_skb and tcp_rcv_established; here two tc programs do it).
 *
 *   efm_out  tc egress:  writes the time bit into byte 12 of each outgoing segment of a
 *                        managed socket (and the handshake code into SYN / SYN-ACK),
 *                        fixing the TCP checksum
 *   efm_in   tc ingress: reads the time bit of each incoming segment into the state of
 *                        the socket it belongs to (found with bpf_sk_lookup_tcp)
 *
 * State lives in the socket (socket storage), so it goes away with the socket.
 *
 * Roles, from the handshake as in the research's tcp_set_state() rule: a socket that
 * sends a SYN (SYN_SENT) is the client; a socket met before it sent anything but a
 * first segment that is not a SYN came out of SYN_RECV (accept) and is the server. A
 * socket already running when the program was attached (neither) is never marked.
 *
 * The rules are the research's, in its order (§2.1, §3.2):
 *   spin:  receive: spin = time bit of every segment (no ordering guard, as TCP has no
 *          packet number; with the optional spin_guard, efm_follows: QUIC's rule with
 *          TCP's numbers, only a segment that brings something new, is not old and is
 *          not the first beyond a hole, and a new value no sooner than 7/8 of the base
 *          RTT after the endpoint's own last edge: spin_follows); send: the server
 *          echoes it, the client inverts it.
 *   delay: receive: a marked segment makes a sample pending; send: SYN -> handshake
 *          code; a segment carrying SACK is never marked (the sample stays pending);
 *          a pending sample marks the next segment (the client stamps ds_time); the
 *          client injects a new sample when nothing came back for T_max (100 ms, or
 *          max(100 ms, 2 SRTT) with dynamic_t_max).
 *
 * GSO/TSO: tc egress sees a GSO skb before segmentation, and every segment inherits
 * its header: right for the spin bit, wrong for the research's delay bit (one sample
 * would become many). Two ways (efm.h): EFM_DELAY, the research's rule, with GSO off on
 * the marking interfaces (mec_l4s.efm does it, as the research did with ethtool;
 * EFM_C_GSO_MARKED counts any sample that still met a GSO skb); or EFM_DELAY_RUN, not the
 * research's, with GSO kept: the sample marks the whole skb (with its parity) and the
 * receiving side takes a run of marked segments of one super-packet as one sample
 * (efm_run_starts).
 * In both delay techniques an unmarked segment needs nothing at ingress, so it is passed
 * before the socket lookup (the state of a socket is then created by its first marked
 * segment in or its first segment out, with the same roles).
 *
 * IPv4 only. The interface's link-layer header length comes from `efm_l3_ifaces`
 * (absent: Ethernet, 14 bytes; present: a TUN, 0 bytes).
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>
#include "efm.h"
#include "efm_packet.h"

char _license[] SEC("license") = "GPL";

#define TC_ACT_OK 0
#define TCP_LISTEN 10
#define TCPOPT_EOL 0
#define TCPOPT_NOP 1
#define TCPOPT_SACK 5
#define TCP_OPTIONS_MAX 40
#define NSEC_PER_USEC 1000ULL

struct {
	__uint(type, BPF_MAP_TYPE_SK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct efm_sock);
} efm_sock SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct efm_config);
} efm_config SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, EFM_C_COUNT);
	__type(key, __u32);
	__type(value, __u64);
} efm_counters SEC(".maps");

/* ifindex -> 1 for interfaces without a link-layer header (TUN). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 64);
	__type(key, __u32);
	__type(value, __u32);
} efm_l3_ifaces SEC(".maps");

static __always_inline void count(__u32 counter)
{
	__u64 *c = bpf_map_lookup_elem(&efm_counters, &counter);

	if (c)
		*c += 1;	/* per-CPU: no atomic needed */
}

/* Reads the headers; false for anything but an IPv4 TCP packet (malformed ones counted). */
static __always_inline bool parse(struct __sk_buff *skb, __u32 ifindex, struct tcp_seg *seg)
{
	__u32 l2 = bpf_map_lookup_elem(&efm_l3_ifaces, &ifindex) ? 0 : ETH_HLEN;
	enum parse_result r = parse_tcp(skb, l2, seg);

	if (r == PKT_MALFORMED)
		count(EFM_C_UNPARSED);
	return r == PKT_TCP;
}

/* True if the segment carries a SACK option (the research never marks those). */
static __always_inline bool has_sack(struct __sk_buff *skb, const struct tcp_seg *seg)
{
	__u8 opt[TCP_OPTIONS_MAX] = {};
	__u32 len = seg->options_len;
	__u32 i = 0;

	if (len == 0)
		return false;
	if (len > TCP_OPTIONS_MAX)
		len = TCP_OPTIONS_MAX;
	if (bpf_skb_load_bytes(skb, seg->tcp_off + TCP_HLEN, opt, len))
		return false;
	for (int n = 0; n < TCP_OPTIONS_MAX; n++) {
		__u8 kind;

		if (i >= len || i + 1 >= TCP_OPTIONS_MAX)
			return false;
		kind = opt[i];
		if (kind == TCPOPT_EOL)
			return false;
		if (kind == TCPOPT_NOP) {
			i++;
			continue;
		}
		if (kind == TCPOPT_SACK)
			return true;
		if (opt[i + 1] < 2)
			return false;	/* malformed length: stop */
		i += opt[i + 1];
	}
	return false;
}

static __always_inline struct efm_config *get_config(void)
{
	__u32 zero = 0;

	return bpf_map_lookup_elem(&efm_config, &zero);
}

/* The handshake code of the technique, as (loss, time) bits. */
static __always_inline __u8 handshake_code(__u32 technique)
{
	if (technique == EFM_SPIN)
		return EFM_LOSS_BIT;
	return technique == EFM_DELAY_RUN ? EFM_RUN_BIT | EFM_TIME_BIT : EFM_TIME_BIT;
}

/*
 * The socket's state, created the first time one of our programs meets the socket:
 * a SYN out makes a client; a socket that has sent nothing but this segment (or, at
 * ingress, nothing at all) came out of SYN_RECV by accept and is the server; any other
 * socket was running before the program was attached and stays unmanaged.
 */
static __always_inline struct efm_sock *state_of(struct bpf_sock *sk, bool syn_out,
						 __u32 segs_sent_now)
{
	struct bpf_tcp_sock *tp;
	struct efm_sock *s;

	s = bpf_sk_storage_get(&efm_sock, sk, NULL, 0);
	if (s)
		return s;
	tp = bpf_tcp_sock(sk);
	if (!tp)
		return NULL;
	s = bpf_sk_storage_get(&efm_sock, sk, NULL, BPF_SK_STORAGE_GET_F_CREATE);
	if (!s)
		return NULL;
	if (syn_out)
		s->role = EFM_ROLE_CLIENT;
	else if (tp->segs_out <= segs_sent_now)
		s->role = EFM_ROLE_SERVER;
	return s;
}

/* The state of the socket sending this skb (NULL: a request or time-wait socket). */
static __always_inline struct efm_sock *egress_state(struct __sk_buff *skb,
						     const struct tcp_seg *seg)
{
	struct bpf_sock *sk = skb->sk;

	if (!sk)
		return NULL;
	sk = bpf_sk_fullsock(sk);
	if (!sk)
		return NULL;
	/* tcp_transmit_skb counted this skb's segments in segs_out before tc runs */
	return state_of(sk, (seg->flags & (TCP_FLAG_SYN | TCP_FLAG_ACK)) == TCP_FLAG_SYN,
			skb->gso_segs ? skb->gso_segs : 1);
}

static __always_inline __u64 t_max_ns(struct __sk_buff *skb, const struct efm_config *cfg)
{
	__u64 t_max = (__u64)cfg->t_max_us * NSEC_PER_USEC;
	struct bpf_sock *sk = skb->sk;
	struct bpf_tcp_sock *tp;

	if (!cfg->dynamic_t_max || !sk)
		return t_max;
	sk = bpf_sk_fullsock(sk);
	tp = sk ? bpf_tcp_sock(sk) : NULL;
	/* srtt_us is 8 x the smoothed RTT in µs: 2 SRTT = srtt_us / 4 */
	if (tp && (__u64)tp->srtt_us / 4 * NSEC_PER_USEC > t_max)
		t_max = (__u64)tp->srtt_us / 4 * NSEC_PER_USEC;
	return t_max;
}

/* The delay bit of one non-SYN segment (research §3.2, in its order). */
static __always_inline bool delay_out(struct __sk_buff *skb, const struct tcp_seg *seg,
				      struct efm_sock *s, const struct efm_config *cfg)
{
	bool client = s->role == EFM_ROLE_CLIENT;
	__u64 now = bpf_ktime_get_ns();
	bool due = s->sample_pending ||
		   (client && now - s->ds_time_ns > t_max_ns(skb, cfg));

	if (!due)
		return false;
	if (has_sack(skb, seg)) {
		count(EFM_C_SACK_HELD);
		return false;
	}
	/* the ingress program may set it meanwhile on another CPU: take it atomically */
	if (__sync_val_compare_and_swap(&s->sample_pending, 1, 0) == 1)
		count(EFM_C_SAMPLES_REFLECTED);
	else if (client && now - s->ds_time_ns > t_max_ns(skb, cfg))
		count(EFM_C_SAMPLES_GENERATED);
	else
		return false;
	if (client)
		s->ds_time_ns = now;
	if (skb->gso_segs > 1)
		count(EFM_C_GSO_MARKED);	/* EFM_DELAY: a fault; EFM_DELAY_RUN: by design */
	return true;
}

/* Rewrites byte 12 (and the checksum: the 16-bit word at 12 changed). */
static __always_inline void write_byte12(struct __sk_buff *skb, const struct tcp_seg *seg,
					 __u8 byte12)
{
	__u16 old_word = ((__u16)seg->byte12 << 8) | seg->flags;
	__u16 new_word = ((__u16)byte12 << 8) | seg->flags;

	bpf_l4_csum_replace(skb, seg->tcp_off + TCP_CHECK, bpf_htons(old_word),
			    bpf_htons(new_word), sizeof(__u16));
	bpf_skb_store_bytes(skb, seg->tcp_off + TCP_BYTE12, &byte12, 1, 0);
}

/* ECT(0) -> ECT(1) in the IP header (and its checksum: the word at 0 holds the DS field). */
static __always_inline void make_ect1(struct __sk_buff *skb, const struct tcp_seg *seg)
{
	__u32 l3 = seg->tcp_off - seg->ip_hlen;
	__u8 tos = (seg->tos & ~3) | 1;
	__u16 old_word = ((__u16)seg->ver_ihl << 8) | seg->tos;
	__u16 new_word = ((__u16)seg->ver_ihl << 8) | tos;

	bpf_l3_csum_replace(skb, l3 + 10, bpf_htons(old_word), bpf_htons(new_word), 2);
	bpf_skb_store_bytes(skb, l3 + 1, &tos, 1, 0);
	count(EFM_C_ECT1);
}

SEC("tc")
int efm_out(struct __sk_buff *skb)
{
	struct efm_config *cfg = get_config();
	struct tcp_seg seg;
	struct efm_sock *s;
	__u8 byte12;
	bool time;

	if (!cfg || !parse(skb, skb->ifindex, &seg))
		return TC_ACT_OK;
	if (cfg->ect1 && (seg.tos & 3) == 2)
		make_ect1(skb, &seg);
	if (!cfg->technique || cfg->technique >= EFM_TECHNIQUE_COUNT)
		return TC_ACT_OK;
	count(EFM_C_SEGMENTS_OUT);
	byte12 = seg.byte12 & ~EFM_CODE_BITS;
	if (seg.flags & TCP_FLAG_SYN) {
		egress_state(skb, &seg);	/* a SYN names the client */
		byte12 |= handshake_code(cfg->technique);
		count(EFM_C_HANDSHAKE);
	} else {
		s = egress_state(skb, &seg);
		if (!s || s->role == EFM_ROLE_UNMANAGED)
			return TC_ACT_OK;
		if (cfg->technique == EFM_SPIN)
			time = s->spin ^ (s->role == EFM_ROLE_CLIENT);
		else
			time = delay_out(skb, &seg, s, cfg);
		if (time)
			byte12 |= EFM_TIME_BIT;
		if (time && cfg->technique == EFM_DELAY_RUN) {
			/* the sample's parity: two marked skbs in a row stay two samples */
			if (s->parity_out)
				byte12 |= EFM_RUN_BIT;
			s->parity_out ^= 1;
		}
		if (time && cfg->technique == EFM_SPIN)
			count(EFM_C_SPIN_SET);
	}
	if (byte12 != seg.byte12)
		write_byte12(skb, &seg, byte12);
	return TC_ACT_OK;
}

#define RTT_MIN_UNSET 0xffffffffU	/* tcp_sock's rtt_min before its first sample */

/*
 * How long after this endpoint's own edge a new value is held back: 7/8 of the path's base
 * RTT, taken as TCP's rtt_min the first time it is read here (the handshake's sample), or
 * of the smoothed RTT if that is lower (the path got faster). Not rtt_min as it goes on:
 * Linux feeds it the newest segment an ACK or SACK covers, so the first segment that
 * overtakes others lowers it to about one way of the path for the rest of the connection.
 * 7/8, not all of it: an on-time edge can come within the handshake's sample (measured: a
 * hold of the whole base delayed Prague's server edges by 0.6 ms on average), and a
 * segment that overtook others and still arrives in the last eighth is early by at most
 * that eighth.
 */
static __always_inline __u64 hold_ns(struct efm_sock *s, struct bpf_sock *sk)
{
	struct bpf_tcp_sock *tp = bpf_tcp_sock(sk);
	__u32 hold;

	if (!tp)
		return 0;
	if (!s->base_rtt_us && tp->rtt_min != RTT_MIN_UNSET)
		s->base_rtt_us = tp->rtt_min;
	hold = s->base_rtt_us;
	if (tp->srtt_us && tp->srtt_us / 8 < hold)
		hold = tp->srtt_us / 8;	/* srtt_us is 8 x the smoothed RTT in µs */
	return (__u64)hold * 7 / 8 * NSEC_PER_USEC;
}

/*
 * The spin guard (spin_guard): may this segment set the spin value? A new value no sooner
 * than hold_ns after this endpoint's own last edge (the peer cannot answer an edge sooner
 * than a round trip after it; a segment that does skipped part of the path by overtaking
 * others, and a pure ACK that overtook leaves no hole for efm_follows to see), and then
 * efm_follows (efm_packet.h). A value held back this way leaves the ordering state as it
 * was, so the overtaken segments are still followed and bring the edge at its own time.
 */
static __always_inline bool spin_follows(struct efm_sock *s, struct bpf_sock *sk,
					 const struct tcp_seg *seg, bool time)
{
	__u64 now = bpf_ktime_get_ns();

	if (time != s->spin && now - s->edge_ns < hold_ns(s, sk))
		return false;
	if (!efm_follows(&s->order, seg, true))
		return false;
	if (time != s->spin)
		s->edge_ns = now;
	return true;
}

SEC("tc")
int efm_in(struct __sk_buff *skb)
{
	struct efm_config *cfg = get_config();
	struct bpf_sock_tuple tuple = {};
	struct efm_sock *s;
	struct bpf_sock *sk;
	struct tcp_seg seg;
	bool time;

	if (!cfg || !cfg->technique || cfg->technique >= EFM_TECHNIQUE_COUNT)
		return TC_ACT_OK;
	if (!parse(skb, skb->ifindex, &seg) || (seg.flags & TCP_FLAG_SYN))
		return TC_ACT_OK;
	time = seg.byte12 & EFM_TIME_BIT;
	if (cfg->technique != EFM_SPIN && !time)
		return TC_ACT_OK;	/* delay: only a mark changes the state */
	tuple.ipv4.saddr = seg.saddr;
	tuple.ipv4.daddr = seg.daddr;
	tuple.ipv4.sport = seg.sport;
	tuple.ipv4.dport = seg.dport;
	sk = bpf_sk_lookup_tcp(skb, &tuple, sizeof(tuple.ipv4), BPF_F_CURRENT_NETNS, 0);
	if (!sk)
		return TC_ACT_OK;
	if (sk->state == TCP_LISTEN)
		goto out;
	s = state_of(sk, false, 0);
	if (!s || s->role == EFM_ROLE_UNMANAGED)
		goto out;
	if (cfg->technique == EFM_SPIN) {
		if (cfg->spin_guard && !spin_follows(s, sk, &seg, time))
			count(EFM_C_SPIN_GUARDED);
		else
			s->spin = time;
	} else if (cfg->technique == EFM_DELAY_RUN && !efm_run_starts(&s->run_in, &seg)) {
		count(EFM_C_RUN_CONTINUED);
	} else {
		s->sample_pending = 1;
		count(EFM_C_SAMPLES_IN);
	}
out:
	bpf_sk_release(sk);
	return TC_ACT_OK;
}
