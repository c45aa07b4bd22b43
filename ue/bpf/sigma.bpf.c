// SPDX-License-Identifier: GPL-2.0
/*
 * SIGMA (research 002 §2, "Algorithm 1"): uplink congestion control on the UE, from
 * the uplink grants its modem decodes every TTI.
 *
 *   P_max   = P_cell / N + P_unused               (3.7)   fair share + idle PRBs
 *   TBS_max = TBS(P_max, MCS)                             3GPP tables (map sigma_tbs)
 *   C_max   = TBS_max / TTI                       (3.8)
 *   W_max   = C_max * RTT_min                     (3.9)   the uplink BDP
 *
 *   Max Start            cwnd = IW = W_max at the handshake, paced at IW / RTT_min, until
 *                        IW / MSS segments are ACKed; then pacing off
 *   Proportional Adj.    RTT_last >= 2 RTT_min:  cwnd = W_max * RTT_min / RTT_last  (3.10)
 *   Safe Increase        otherwise, per segment ACKed:
 *                        Utz = P_current / P_max (3.11),  cwnd += MSS * (1 - Utz)   (3.12)
 *
 * The digest's ⚠ on numbering: 3.7 is P_max (the thesis's Perspectives call it "3.8").
 * W_max is computed on every ACK from the latest grant in the map, which the modem
 * driver rewrites every TTI: the research's "recomputed every TTI".
 *
 * Two struct_ops are registered from this object and share every map:
 *   sigma_reno   with the kernel's Reno  (tcp_reno_* kfuncs) when SIGMA cannot decide
 *   sigma_cubic  with the kernel's CUBIC (cubictcp_* kfuncs)
 * SIGMA cannot decide when the UE has no grant entry, a stale one (older than
 * stale_ns: the modem driver stopped) or one out of range; then the growth function
 * of the kernel's Reno/CUBIC runs on that ACK and the reason is counted per UE. A
 * grant that becomes fresh again hands the connection back to SIGMA (Proportional
 * Adjustment / Safe Increase). Max Start runs at the handshake and again whenever new
 * data leaves with nothing outstanding: after any pause in which all data was ACKed (after
 * one longer than the RTO the kernel would restart slow start at its initial window:
 * SIGMA replaces slow start there too).
 *
 * Departures, for the reasons in docs/sigma.md: N counts this UE when the grant has
 * none of its PRBs (a UE about to send is a user of the cell); Max Start's pacing rate
 * is IW / RTT_min until the first ACK, the kernel's own pacing rate (1.2 cwnd / sRTT)
 * after it until Max Start ends; at a loss SIGMA keeps cwnd (its window is the grant's
 * BDP, not a probe), the fallback halves it as Reno/CUBIC do; Safe Increase grows cwnd
 * only while the window is full (no growth on an application-limited flow).
 *
 * Every quantity is integer: PRBs, bytes, segments, µs, ns. No division has a divisor
 * that can be 0, and every product fits in 64 bits for any value the map can hold
 * (TBS is capped at SIGMA_TBS_CAP, RTT at 2^32 µs): tested with extreme grants.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>
#include <bpf/bpf_tracing.h>
#include "cca.h"
#include "sigma.h"

char _license[] SEC("license") = "GPL";

#define MILLI 1000
#define DEFAULT_STALE_NS (20 * 1000 * 1000ULL)
#define DEFAULT_MIN_CWND 2
#define SIGMA_TBS_CAP (1U << 20)	/* bytes per TTI; NR's largest TB is ~160 kB */
#define TTI_MIN_NS 1000ULL		/* 1 µs: below, the grant is out of range */
#define TTI_MAX_NS (10 * 1000 * 1000ULL)	/* 10 ms */

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32);
	__type(value, struct sigma_grant);
} sigma_grant SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, SIGMA_TBS_ENTRIES);
	__type(key, __u32);
	__type(value, __u32);
} sigma_tbs SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct sigma_config);
} sigma_config SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32);
	__type(value, struct sigma_counters);
} sigma_counters SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_SK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct sigma_flow);
} sigma_flow SEC(".maps");

/* The UE is this socket's local end; a v4-mapped IPv6 address counts as IPv4. */
static __always_inline __u32 ue_key(const struct sock *sk)
{
	return sk_ipv4(sk, false);
}

static __always_inline __u64 stale_ns(void)
{
	__u32 zero = 0;
	struct sigma_config *cfg = bpf_map_lookup_elem(&sigma_config, &zero);

	return cfg && cfg->stale_ns ? cfg->stale_ns : DEFAULT_STALE_NS;
}

static __always_inline __u32 min_cwnd(void)
{
	__u32 zero = 0;
	struct sigma_config *cfg = bpf_map_lookup_elem(&sigma_config, &zero);

	return cfg && cfg->min_cwnd ? cfg->min_cwnd : DEFAULT_MIN_CWND;
}

/* ---- capacity: Eqs. 3.7-3.9 ---------------------------------------------------- */

struct capacity {
	__u32 p_max;		/* PRBs */
	__u32 tbs_bytes;	/* TBS(P_max, MCS), bytes per TTI */
	__u64 c_max_Bps;	/* C_max, bytes/s */
	__u64 w_max_bytes;	/* W_max, bytes */
};

/* P_max (3.7), from a grant whose P_cell is in 1..SIGMA_PRB_MAX. */
static __always_inline __u32 p_max_of(const struct sigma_grant *g)
{
	__u64 n = (__u64)g->n_users + (g->p_current == 0);	/* >= 1: this UE counts */
	__u64 unused = g->p_unused < g->p_cell ? g->p_unused : g->p_cell;
	__u64 p = g->p_cell / n + unused;

	if (p > g->p_cell)
		p = g->p_cell;
	return p ? p : 1;	/* N > P_cell: still one PRB in some TTIs */
}

static __always_inline enum sigma_verdict capacity_of(const struct sigma_grant *g, __u64 now,
						      __u64 stale, __u32 rtt_min_us,
						      struct capacity *c)
{
	__u32 idx, *tbs;

	if (!g)
		return GRANT_NONE;
	/* A grant from the future (clock step) is as unusable as an old one. */
	if (now < g->tti_start_ns || now - g->tti_start_ns > stale)
		return GRANT_STALE;
	if (g->p_cell == 0 || g->p_cell > SIGMA_PRB_MAX || g->mcs > SIGMA_MCS_MAX ||
	    g->rat > SIGMA_RAT_NR || g->tti_ns < TTI_MIN_NS || g->tti_ns > TTI_MAX_NS)
		return GRANT_INVALID;
	c->p_max = p_max_of(g);
	idx = SIGMA_TBS_INDEX(g->rat, g->mcs, c->p_max);
	tbs = bpf_map_lookup_elem(&sigma_tbs, &idx);
	if (!tbs || *tbs == 0)
		return GRANT_INVALID;
	c->tbs_bytes = *tbs < SIGMA_TBS_CAP ? *tbs : SIGMA_TBS_CAP;
	c->c_max_Bps = (__u64)c->tbs_bytes * NSEC_PER_SEC / g->tti_ns;			/* (3.8) */
	if (!rtt_min_us)
		return GRANT_NO_RTT;
	/* (3.9) as TBS * RTT_min / TTI: < 2^20 * 2^42, and no rounding of C_max first */
	c->w_max_bytes = (__u64)c->tbs_bytes * ((__u64)rtt_min_us * NSEC_PER_USEC) / g->tti_ns;
	return GRANT_OK;
}

/* Bytes to segments, within [min_cwnd, cwnd_clamp]. */
static __always_inline __u32 to_segs(__u64 bytes, const struct tcp_sock *tp)
{
	__u32 mss = tp->mss_cache ? tp->mss_cache : 1;
	__u64 segs = bytes / mss;
	__u32 floor = min_cwnd();

	if (segs > tp->snd_cwnd_clamp)
		segs = tp->snd_cwnd_clamp;
	return segs < floor ? floor : segs;
}

/* ---- per-UE counters ------------------------------------------------------------ */

static __always_inline struct sigma_counters *counters_of(__u32 ue)
{
	struct sigma_counters *c = bpf_map_lookup_elem(&sigma_counters, &ue);

	if (c)
		return c;
	struct sigma_counters zero = {};

	bpf_map_update_elem(&sigma_counters, &ue, &zero, BPF_NOEXIST);
	return bpf_map_lookup_elem(&sigma_counters, &ue);
}

static __always_inline void count_fallback(struct sigma_counters *c, enum sigma_verdict v)
{
	__sync_fetch_and_add(&c->fallback_acks, 1);
	if (v == GRANT_NONE)
		__sync_fetch_and_add(&c->no_grant, 1);
	else if (v == GRANT_STALE)
		__sync_fetch_and_add(&c->stale, 1);
	else if (v == GRANT_INVALID)
		__sync_fetch_and_add(&c->invalid, 1);
}

/* ---- the connection ------------------------------------------------------------- */

static __always_inline struct sigma_flow *flow_of(struct sock *sk)
{
	return bpf_sk_storage_get(&sigma_flow, sk, NULL, BPF_SK_STORAGE_GET_F_CREATE);
}

/* RTT_min: the kernel's windowed minimum (net.ipv4.tcp_min_rtt_wlen), µs; 0 = none yet. */
static __always_inline __u32 rtt_min_us(const struct tcp_sock *tp)
{
	__u32 v = tp->rtt_min.s[0].v;

	return v == ~0U ? 0 : v;
}

/* The decision inputs of this ACK: a fresh grant (*g) and its capacity, or why not. */
static __always_inline enum sigma_verdict decide(struct sock *sk, struct sigma_flow *f,
						 struct capacity *c, struct sigma_grant **g)
{
	__u32 ue = ue_key(sk);
	enum sigma_verdict v;

	*g = bpf_map_lookup_elem(&sigma_grant, &ue);
	f->rtt_min_us = rtt_min_us(tcp_sk(sk));
	v = capacity_of(*g, bpf_ktime_get_ns(), stale_ns(), f->rtt_min_us, c);
	if (v == GRANT_OK) {
		f->w_max_segs = to_segs(c->w_max_bytes, tcp_sk(sk));
		f->p_max = c->p_max;
	}
	return v;
}

/* Max Start (§2.2): IW = W_max, paced at IW / RTT_min. */
static __always_inline void max_start(struct sock *sk, struct sigma_flow *f)
{
	struct tcp_sock *tp = tcp_sk(sk);
	__u64 rate = (__u64)f->w_max_segs * tp->mss_cache * USEC_PER_SEC / f->rtt_min_us;

	f->phase = PHASE_MAX_START;
	f->iw_segs = f->w_max_segs;
	f->acked_segs = 0;
	f->pacing_Bps = rate < ~0U ? rate : ~0U;
	tp->snd_cwnd = f->iw_segs;
	tp->snd_ssthresh = f->iw_segs;	/* no slow start after it, nor in a fallback */
	sk->sk_pacing_rate = f->pacing_Bps;
	sk->sk_pacing_status = SK_PACING_NEEDED;
}

static __always_inline void sigma_init(struct sock *sk)
{
	struct sigma_flow *f = flow_of(sk);
	struct sigma_counters *cnt = counters_of(ue_key(sk));
	struct sigma_grant *g;
	struct capacity c = {};

	if (!f)
		return;
	f->phase = PHASE_FALLBACK;
	if (decide(sk, f, &c, &g) != GRANT_OK)
		return;		/* counted on the ACKs that follow */
	max_start(sk, f);
	if (cnt)
		__sync_fetch_and_add(&cnt->max_starts, 1);
}

/*
 * Sending new data with nothing outstanding (CA_EVENT_TX_START with packets_out 0; if the
 * pause was longer than the RTO the kernel has just restarted the window at its initial
 * one, RFC 5681 §4.1): a new Max Start from the current grant, whose window the modem's
 * empty share of the buffer can take since none of this connection's data is queued. Not for a retransmission after a timeout
 * (packets_out > 0 then), nor on the first send of a connection whose Max Start from the
 * handshake has had no ACK yet (that window is still the one to send).
 */
static __always_inline void sigma_restart(struct sock *sk)
{
	struct sigma_flow *f = bpf_sk_storage_get(&sigma_flow, sk, NULL, 0);

	if (!f || tcp_sk(sk)->packets_out || (f->phase == PHASE_MAX_START && f->acked_segs == 0))
		return;
	sigma_init(sk);
}

/* Proportional Adjustment (3.10), always from W_max (not from the current cwnd). */
static __always_inline void proportional(struct tcp_sock *tp, struct sigma_flow *f,
					 struct sigma_counters *cnt)
{
	__u64 cwnd = (__u64)f->w_max_segs * f->rtt_min_us / f->rtt_last_us;
	__u32 floor = min_cwnd();

	if (f->phase != PHASE_PROPORTIONAL && cnt)
		__sync_fetch_and_add(&cnt->proportional, 1);
	f->phase = PHASE_PROPORTIONAL;
	tp->snd_cwnd = cwnd < floor ? floor : cwnd;
	f->cuts++;
	f->cut_cwnd = tp->snd_cwnd;
	f->cut_w_max_segs = f->w_max_segs;
	f->cut_rtt_min_us = f->rtt_min_us;
	f->cut_rtt_last_us = f->rtt_last_us;
	f->safe_milli = 0;
}

/* Safe Increase (3.11, 3.12): per segment ACKed, (1 - P_current / P_max) of a segment. */
static __always_inline void safe_increase(struct tcp_sock *tp, struct sigma_flow *f,
					  const struct sigma_grant *g, __u32 acked)
{
	__u32 p_current = g->p_current < f->p_max ? g->p_current : f->p_max;
	__u64 milli = (__u64)acked * MILLI * (f->p_max - p_current) / f->p_max;

	f->phase = PHASE_SAFE_INCREASE;
	milli += f->safe_milli;
	if (tp->snd_cwnd + milli / MILLI <= tp->snd_cwnd_clamp)
		tp->snd_cwnd += milli / MILLI;
	f->safe_milli = milli % MILLI;
}

/* One ACK (cong_avoid): true if SIGMA set cwnd, false if the fallback must grow it. */
static __always_inline bool sigma_ack(struct sock *sk, __u32 acked)
{
	struct tcp_sock *tp = tcp_sk(sk);
	struct sigma_counters *cnt = counters_of(ue_key(sk));
	struct sigma_flow *f = flow_of(sk);
	struct sigma_grant *g = NULL;
	struct capacity c = {};
	enum sigma_verdict v;

	if (!f || !cnt)
		return false;
	__sync_fetch_and_add(&cnt->acks, 1);
	v = decide(sk, f, &c, &g);
	if (v != GRANT_OK || !g) {
		count_fallback(cnt, v);
		if (f->phase == PHASE_MAX_START)
			sk->sk_pacing_status = SK_PACING_NONE;
		f->phase = PHASE_FALLBACK;
		return false;
	}
	__sync_fetch_and_add(&cnt->sigma_acks, 1);
	if (f->phase == PHASE_MAX_START) {
		if (f->acked_segs < f->iw_segs)
			return true;	/* cwnd stays IW until the first window is ACKed */
		sk->sk_pacing_status = SK_PACING_NONE;
		f->pacing_Bps = 0;
	}
	if (f->rtt_last_us && f->rtt_last_us >= 2ULL * f->rtt_min_us) {
		proportional(tp, f, cnt);
		return true;
	}
	/* the window was full before this ACK: growth is usable (not application-limited) */
	if (tp->packets_out + acked >= tp->snd_cwnd)
		safe_increase(tp, f, g, acked);
	else
		f->phase = PHASE_SAFE_INCREASE;
	return true;
}

/* Every ACK that acknowledges data: RTT_last and Max Start's count of ACKed segments. */
static __always_inline void sigma_acked(struct sock *sk, const struct ack_sample *sample)
{
	struct sigma_flow *f = bpf_sk_storage_get(&sigma_flow, sk, NULL, 0);

	if (!f)
		return;
	if (sample->rtt_us > 0)
		f->rtt_last_us = sample->rtt_us;
	if (f->phase == PHASE_MAX_START)
		f->acked_segs += sample->pkts_acked;
}

/*
 * A loss: SIGMA keeps cwnd (its window is the grant's BDP, and Proportional Adjustment
 * answers the queue); in a fallback the kernel's Reno/CUBIC reduction applies (*ssthresh
 * is then the caller's to compute). Returns true when SIGMA decided.
 */
static __always_inline bool sigma_loss(struct sock *sk, __u32 *ssthresh)
{
	struct sigma_counters *cnt = counters_of(ue_key(sk));
	struct sigma_flow *f = bpf_sk_storage_get(&sigma_flow, sk, NULL, 0);
	struct tcp_sock *tp = tcp_sk(sk);

	if (cnt)
		__sync_fetch_and_add(&cnt->losses, 1);
	if (!f || f->phase == PHASE_FALLBACK)
		return false;
	*ssthresh = tp->snd_cwnd > min_cwnd() ? tp->snd_cwnd : min_cwnd();
	return true;
}

/* ---- sigma_reno and sigma_cubic: the hooks of CCA_STRUCT_OPS (cca.h) -------------- */

static __always_inline void cca_init(struct sock *sk)
{
	sigma_init(sk);
}

static __always_inline __u32 cca_ssthresh(struct sock *sk, enum cca_base base)
{
	__u32 ssthresh;

	if (sigma_loss(sk, &ssthresh))
		return ssthresh;
	return base_ssthresh(sk, base);
}

static __always_inline bool cca_cong_avoid(struct sock *sk, __u32 acked)
{
	return sigma_ack(sk, acked);
}

static __always_inline void cca_cwnd_event(struct sock *sk, enum tcp_ca_event event)
{
	if (event == CA_EVENT_TX_START)
		sigma_restart(sk);
}

static __always_inline void cca_pkts_acked(struct sock *sk, const struct ack_sample *sample)
{
	sigma_acked(sk, sample);
}

/* either may be a UE namespace's default congestion control */
CCA_STRUCT_OPS(sigma, reno, CCA_RENO, TCP_CONG_NON_RESTRICTED);
CCA_STRUCT_OPS(sigma, cubic, CCA_CUBIC, TCP_CONG_NON_RESTRICTED);

/* ---- the capacity alone, for tests (BPF_PROG_TEST_RUN) ---------------------------- */

SEC("syscall")
int sigma_capacity(struct capacity_args *args)
{
	struct capacity c = {};
	__u32 mss = args->mss ? args->mss : 1;
	__u64 segs;

	args->verdict = capacity_of(args->has_grant ? &args->grant : NULL, args->now_ns,
				    args->stale_ns, args->rtt_min_us, &c);
	args->p_max = c.p_max;
	args->tbs_bytes = c.tbs_bytes;
	args->c_max_Bps = c.c_max_Bps;
	args->w_max_bytes = c.w_max_bytes;
	segs = c.w_max_bytes / mss;
	args->w_max_segs = segs < ~0U ? segs : ~0U;
	return 0;
}
