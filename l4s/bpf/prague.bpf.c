// SPDX-License-Identifier: GPL-2.0
/*
 * TCP Prague as a BPF struct_ops congestion control (issue 14; research 001 used the
 * out-of-tree L4STeam module). DCTCP-derived, after the kernel's selftest bpf_dctcp.c:
 *
 *   alpha   once per round trip (snd_una passes the round's end):
 *           alpha <- (1 - g) alpha + g F, g = 1/16, F = the fraction of delivered
 *           segments that came back CE-marked (tp->delivered_ce / tp->delivered deltas:
 *           exact with AccECN, one ECE'd ACK's worth with classic ECN);
 *   ECN     on ECE the kernel enters CWR once per round trip and asks ssthresh():
 *           cwnd (1 - alpha/2);
 *   loss    Reno halving (on entering Recovery; RTO: the kernel's loss handling);
 *   growth  Reno (slow start, +1 segment per round trip); after 500 rounds (the
 *           RTT-independence rule) a flow whose RTT is below rtt_virt = 25 ms grows
 *           (srtt/rtt_virt)^2 times slower per round trip, i.e. as fast per second as
 *           a 25 ms flow; above 25 ms nothing changes;
 *   pacing  sk_pacing_status = SK_PACING_NEEDED: the kernel paces from cwnd/srtt
 *           (sk_pacing_rate; no fq qdisc needed);
 *   ECN use flags TCP_CONG_NEEDS_ECN | TCP_CONG_NEEDS_ACCECN | TCP_CONG_ECT_1_NEGOTIATION:
 *           the connection asks for (and, as a listener, accepts) Accurate ECN whatever
 *           net.ipv4.tcp_ecn says (6.18's sysctl refuses AccECN, the CCA flag does not), so
 *           the kernel counts tp->delivered_ce exactly from the ACE field; a peer without
 *           AccECN gets classic ECN (one ECE'd round per CWR: F ~ 1 whenever a round had a
 *           mark, which starves Prague beside CUBIC under DualPI2's coupled marking,
 *           docs/l4s.md). The kernel puts ECT(0) on the data after the handshake (a BPF CCA
 *           cannot set ECT(1)); the endpoint's efm_out turns it into ECT(1)
 *           (Marker.configure(ect1=True)).
 *   trace   prague_trace (socket storage, read with the socket's fd): alpha, rounds,
 *           reductions, rounds with a CE mark, for the lab's diagnosis.
 *
 * alpha is a fixed-point fraction scaled by 2^ALPHA_SHIFT (1.0 = ALPHA_MAX), as DCTCP.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>
#include <bpf/bpf_tracing.h>
#include "cca.h"

char _license[] SEC("license") = "GPL";

#define ALPHA_SHIFT 20
#define ALPHA_MAX (1U << ALPHA_SHIFT)
#define G_SHIFT 4			/* g = 1/16 */
#define RTT_INDEPENDENCE_ROUNDS 500	/* D: the first rounds are Reno-like */
#define RTT_VIRT_US 25000		/* 25 ms */
/* include/net/tcp.h (6.18): not in vmlinux.h (defines) */
#define TCP_CONG_NEEDS_ACCECN 0x4	/* ask for / accept Accurate ECN */
#define TCP_CONG_ECT_1_NEGOTIATION 0x8	/* ECT(1) on SYN / SYN-ACK */

/* Per-connection state in icsk_ca_priv (at most 104 bytes). */
struct prague {
	__u32 alpha;		/* 2^20 = 1.0 */
	__u32 round_end;	/* snd_nxt when the round began: it ends when snd_una passes */
	__u32 delivered;	/* tp->delivered at the round's start (segments) */
	__u32 delivered_ce;	/* tp->delivered_ce at the round's start (segments) */
	__u32 rounds;		/* round trips since the start */
	__u32 loss_cwnd;	/* cwnd before the last reduction (undo) */
};

/* What a socket's Prague did so far, for the lab (mec_l4s.prague.PragueTrace). */
struct prague_trace {
	__u32 alpha;		/* after the last round, 2^20 = 1.0 */
	__u32 rounds;		/* round trips */
	__u32 marked_rounds;	/* rounds with at least one CE-marked delivered segment */
	__u32 reductions;	/* ssthresh() calls: ECN reductions (CWR) and losses */
};

struct {
	__uint(type, BPF_MAP_TYPE_SK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct prague_trace);
} prague_trace SEC(".maps");

/* Input and output of the `prague_alpha` test program (BPF_PROG_TEST_RUN). */
struct alpha_args {
	__u32 alpha;		/* in, and out: the new alpha */
	__u32 delivered;	/* segments delivered in the round */
	__u32 delivered_ce;	/* ... of which CE-marked */
	__u32 pad;
};

static __always_inline struct prague *ca_of(const struct sock *sk)
{
	return (struct prague *)((struct inet_connection_sock *)sk)->icsk_ca_priv;
}

static __always_inline bool before(__u32 seq1, __u32 seq2)
{
	return (__s32)(seq1 - seq2) < 0;
}

/* The one owner of the alpha update: alpha <- (1 - g) alpha + g F. */
static __always_inline __u32 alpha_step(__u32 alpha, __u32 delivered, __u32 delivered_ce)
{
	__u64 f = 0;

	if (delivered)
		f = ((__u64)(delivered_ce < delivered ? delivered_ce : delivered) << ALPHA_SHIFT)
		    / delivered;
	alpha = alpha - (alpha >> G_SHIFT) + (__u32)(f >> G_SHIFT);
	return alpha > ALPHA_MAX ? ALPHA_MAX : alpha;
}

static __always_inline void new_round(struct prague *ca, const struct tcp_sock *tp)
{
	ca->round_end = tp->snd_nxt;
	ca->delivered = tp->delivered;
	ca->delivered_ce = tp->delivered_ce;
}

SEC("struct_ops")
void BPF_PROG(prague_init, struct sock *sk)
{
	struct prague *ca = ca_of(sk);

	ca->alpha = ALPHA_MAX;		/* as DCTCP: cautious until the first round */
	ca->rounds = 0;
	ca->loss_cwnd = 0;
	new_round(ca, tcp_sk(sk));
	sk->sk_pacing_status = SK_PACING_NEEDED;
}

/* Once per round trip: the alpha update and the round count. */
SEC("struct_ops")
void BPF_PROG(prague_in_ack_event, struct sock *sk, __u32 flags)
{
	struct tcp_sock *tp = tcp_sk(sk);
	struct prague *ca = ca_of(sk);

	struct prague_trace *t;

	if (before(tp->snd_una, ca->round_end))
		return;
	ca->alpha = alpha_step(ca->alpha, tp->delivered - ca->delivered,
			       tp->delivered_ce - ca->delivered_ce);
	ca->rounds++;
	t = bpf_sk_storage_get(&prague_trace, sk, NULL, BPF_SK_STORAGE_GET_F_CREATE);
	if (t) {
		t->alpha = ca->alpha;
		t->rounds = ca->rounds;
		t->marked_rounds += tp->delivered_ce != ca->delivered_ce;
	}
	new_round(ca, tp);
}

/* ECE: the kernel calls this once per round trip (CWR). cwnd (1 - alpha / 2). */
SEC("struct_ops")
__u32 BPF_PROG(prague_ssthresh, struct sock *sk)
{
	struct tcp_sock *tp = tcp_sk(sk);
	struct prague *ca = ca_of(sk);
	__u32 cwnd = tp->snd_cwnd;
	__u32 reduced = cwnd - (__u32)(((__u64)cwnd * ca->alpha) >> (ALPHA_SHIFT + 1));
	struct prague_trace *t;

	t = bpf_sk_storage_get(&prague_trace, sk, NULL, BPF_SK_STORAGE_GET_F_CREATE);
	if (t)
		t->reductions++;
	ca->loss_cwnd = cwnd;
	return reduced > 2 ? reduced : 2;
}

/* Loss: Reno halving when Recovery begins (the research's "Reno-like on loss"). */
SEC("struct_ops")
void BPF_PROG(prague_set_state, struct sock *sk, __u8 new_state)
{
	struct tcp_sock *tp = tcp_sk(sk);
	struct prague *ca = ca_of(sk);

	if (new_state == TCP_CA_Recovery &&
	    new_state != ((struct inet_connection_sock *)sk)->icsk_ca_state) {
		ca->loss_cwnd = tp->snd_cwnd;
		tp->snd_ssthresh = tp->snd_cwnd / 2 > 2 ? tp->snd_cwnd / 2 : 2;
	}
}

SEC("struct_ops")
void BPF_PROG(prague_cong_avoid, struct sock *sk, __u32 ack, __u32 acked)
{
	struct tcp_sock *tp = tcp_sk(sk);
	struct prague *ca = ca_of(sk);
	__u32 srtt_us = tp->srtt_us >> 3, w;

	if (ca->rounds < RTT_INDEPENDENCE_ROUNDS || !srtt_us || srtt_us >= RTT_VIRT_US) {
		tcp_reno_cong_avoid(sk, ack, acked);
		return;
	}
	if (tp->snd_cwnd < tp->snd_ssthresh) {
		acked = tcp_slow_start(tp, acked);
		if (!acked)
			return;
	}
	/* +1 segment per (rtt_virt / srtt)^2 round trips: w = cwnd (rtt_virt / srtt)^2 */
	w = (__u32)((__u64)tp->snd_cwnd * RTT_VIRT_US / srtt_us * RTT_VIRT_US / srtt_us);
	tcp_cong_avoid_ai(tp, w ? w : 1, acked);
}

SEC("struct_ops")
__u32 BPF_PROG(prague_undo_cwnd, struct sock *sk)
{
	struct tcp_sock *tp = tcp_sk(sk);
	__u32 loss_cwnd = ca_of(sk)->loss_cwnd;

	return tp->snd_cwnd > loss_cwnd ? tp->snd_cwnd : loss_cwnd;
}

SEC("struct_ops")
void BPF_PROG(prague_cwnd_event, struct sock *sk, enum tcp_ca_event ev)
{
	if (ev == CA_EVENT_LOSS)
		ca_of(sk)->loss_cwnd = tcp_sk(sk)->snd_cwnd;
}

SEC(".struct_ops")
struct tcp_congestion_ops prague = {
	.init		= (void *)prague_init,
	.in_ack_event	= (void *)prague_in_ack_event,
	.ssthresh	= (void *)prague_ssthresh,
	.set_state	= (void *)prague_set_state,
	.cong_avoid	= (void *)prague_cong_avoid,
	.undo_cwnd	= (void *)prague_undo_cwnd,
	.cwnd_event	= (void *)prague_cwnd_event,
	.flags		= TCP_CONG_NEEDS_ECN | TCP_CONG_NEEDS_ACCECN | TCP_CONG_ECT_1_NEGOTIATION,
	.name		= "prague",
};

/* ---- the alpha update alone, for tests (BPF_PROG_TEST_RUN) ----------------------- */

SEC("syscall")
int prague_alpha(struct alpha_args *args)
{
	args->alpha = alpha_step(args->alpha, args->delivered, args->delivered_ce);
	return 0;
}
