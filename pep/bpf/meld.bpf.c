// SPDX-License-Identifier: GPL-2.0
/*
 * MELD and RAPID as a TCP congestion control for the PEP's RAN leg (PEP -> UE).
 *
 * Two struct_ops are registered from this object and share all maps:
 *   meld_reno   growth and reduction of the kernel's Reno  (tcp_reno_* kfuncs)
 *   meld_cubic  growth and reduction of the kernel's CUBIC (cubictcp_* kfuncs, HyStart)
 * The growth function is the kernel's own, so "mode off" is exactly reno/cubic; the
 * socket picks one with TCP_CONGESTION. What MELD and RAPID change is decided per loss
 * and per ACK from the UE's entry in the maps, so a mode change applies at once to the
 * flows that are already running.
 *
 * Loss events. The kernel calls ssthresh() once when a recovery episode starts (fast
 * retransmit, RACK) and once per RTO (tcp_enter_loss, followed by CA_EVENT_LOSS). A CCA
 * cannot veto the retransmission; it only chooses the new ssthresh, and the kernel then
 * drives cwnd toward it (PRR during recovery, cwnd = ssthresh at its end). "Not
 * notifying the CCA" (MELD's silent retransmission) is therefore: return an ssthresh no
 * lower than the current cwnd and do not tell the growth function. After an RTO the
 * kernel has already set cwnd = in_flight + 1 and no CCA hook runs before the first
 * retransmission, so a suppressed RTO slow-starts back to the kept ssthresh (a few RTTs)
 * instead of halving it; docs/meld-rapid.md explains why we do not force cwnd back.
 *
 * Modes (enum meld_mode): the thesis's MELD-DE and MELD-ME decide on the radio state at
 * detection; MELD-overflow (ours) on the RLC queue while the lost data was in flight,
 * from a per-UE history (struct ue_history), and drains the queue's share of the window
 * at a loss it keeps (drained_ssthresh); ignore-loss keeps every loss (the upper bound on
 * goodput); RAPID sets cwnd itself. docs/meld-rapid.md.
 *
 * The struct_ops wrappers around the kernel's Reno/CUBIC are the suite's one
 * CCA_STRUCT_OPS (services/common/bpf/cca.h), shared with SIGMA. Style after the kernel's
 * tools/testing/selftests/bpf/progs/bpf_cubic.c and bpf_dctcp.c.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>
#include <bpf/bpf_tracing.h>
#include "cca.h"
#include "meld.h"

char _license[] SEC("license") = "GPL";

#define IPV4_HEADER 20
#define U32_MAX 0xffffffffU

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, __u32);
	__type(value, struct ue_radio);
} ue_radio SEC(".maps");

/* 2 KiB per UE, allocated for the UEs present only (no preallocation of 65536). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, 65536);
	__type(key, __u32);
	__type(value, struct ue_history);
} ue_history SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, __u32);
	__type(value, __u32);
} ue_mode SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, __u32);
	__type(value, struct ue_counters);
} ue_counters SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct meld_config);
} meld_config SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_SK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct flow_ctl);
} flow_ctl SEC(".maps");

/* Every loss decision, in time order (struct meld_decision); one reader drains it. */
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1 << 20);	/* bytes: ~10,900 decisions of 88 B (+ 8 B header) */
} decisions SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_SK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct flow_priv);
} flow_priv SEC(".maps");

static __always_inline struct meld_config *get_config(void)
{
	__u32 zero = 0;

	return bpf_map_lookup_elem(&meld_config, &zero);
}

/* The UE is the RAN-leg socket's peer; a v4-mapped IPv6 peer counts as IPv4. */
static __always_inline __u32 ue_key(const struct sock *sk)
{
	return sk_ipv4(sk, true);
}

static __always_inline __u32 ue_mode_of(__u32 ue, const struct meld_config *cfg)
{
	__u32 *mode = bpf_map_lookup_elem(&ue_mode, &ue);

	if (mode && *mode < MODE_COUNT)
		return *mode;
	return cfg ? cfg->global_mode : MODE_OFF;
}

/*
 * T_PDU: the IP packet of one full segment, i.e. MSS + TCP header with options + IPv4
 * header (1500 B on a 1500 B MTU path). S_TB = T_PDU / N_HARQ; comparing
 * D_TBS * N_HARQ < T_PDU keeps it exact without a division (S_TB = 187.5 B there).
 */
static __always_inline __u32 t_pdu_of(const struct tcp_sock *tp)
{
	return tp->mss_cache + tp->tcp_header_len + IPV4_HEADER;
}

/* Algorithm 2 of the thesis; MELD-DE keeps only Eq. 4.1. */
static __always_inline bool meld_notify(__u32 mode, const struct ue_radio *r, __u32 t_pdu)
{
	bool small_tb = (__u64)r->d_tbs * r->n_harq < t_pdu;

	if (mode == MODE_MELD_DE)
		return small_tb;
	return small_tb || r->txq_bytes >= r->q_th_bytes;
}

/*
 * The radio history over [from_ns, to_ns]: every bucket that overlaps the span. An empty
 * window (buckets 0) has txq_peak_bytes 0 and d_tbs_low U32_MAX. The walk is a bpf_loop
 * callback, verified once: a plain loop over 128 buckets with three branches each is
 * more paths than the verifier explores (1,000,000 instructions).
 */
struct window_walk {
	const struct ue_history *h;
	__u64 from_ns;
	__u64 to_ns;
	struct radio_window w;
};

static long window_step(__u64 i, void *ctx)
{
	struct window_walk *walk = ctx;
	const struct radio_bucket *b;

	if (i >= HISTORY_BUCKETS)
		return 1;
	b = &walk->h->bucket[i];
	if (!b->start_ns || b->start_ns > walk->to_ns ||
	    b->start_ns + HISTORY_BUCKET_NS <= walk->from_ns)
		return 0;	/* empty, or outside the span */
	walk->w.buckets++;
	if (b->txq_max_bytes > walk->w.txq_peak_bytes)
		walk->w.txq_peak_bytes = b->txq_max_bytes;
	if (b->d_tbs_min < walk->w.d_tbs_low)
		walk->w.d_tbs_low = b->d_tbs_min;
	return 0;
}

static __always_inline void radio_window_of(const struct ue_history *h, __u64 from_ns,
					    __u64 to_ns, struct radio_window *w)
{
	struct window_walk walk = {
		.h = h, .from_ns = from_ns, .to_ns = to_ns, .w = { .d_tbs_low = U32_MAX },
	};

	if (h)
		bpf_loop(HISTORY_BUCKETS, window_step, &walk, 0);
	*w = walk.w;
}

/*
 * MELD-overflow: a loss is congestion iff the RLC buffer was full while the lost data was
 * in flight. An overflow drop needs a full buffer, and a radio loss does not; the span is
 * the episode's (see episode_window). It replaces both of Algorithm 2's tests: Q_th =
 * TBS x N_HARQ is far below a full buffer (a standing queue above it is no overflow),
 * and a small TB at detection says nothing of the drop an RTT earlier.
 */
static __always_inline enum meld_verdict overflow_verdict(const struct ue_radio *r,
							   const struct radio_window *w)
{
	if (!r->full_bytes || !w->buckets)
		return VERDICT_NO_DATA;	/* buffer size unknown, or no history of the span */
	return w->txq_peak_bytes >= r->full_bytes ? VERDICT_NOTIFY : VERDICT_SUPPRESS;
}

/*
 * How old the newest measurement may be at a loss. MELD-DE and MELD-ME decide on the state
 * at detection: stale_ns (PEP_MELD_STALE_MS). MELD-overflow decides on the history over the
 * episode's span (one srtt back, see episode_window): a measurement taken within the span
 * was taken while the lost data was in flight, so the longer of the two bounds it. A loaded
 * host delays the feed by more than 50 ms, but often by less than the RTT of a queue.
 */
static __always_inline __u64 stale_bound_ns(__u32 mode, __u64 stale_ns, __u64 span_ns)
{
	return mode == MODE_MELD_OVERFLOW && span_ns > stale_ns ? span_ns : stale_ns;
}

static __always_inline enum meld_verdict decide(__u32 mode, const struct ue_radio *r,
						const struct radio_window *w, __u64 now_ns,
						__u64 stale_ns, __u64 span_ns, __u32 t_pdu)
{
	if (mode == MODE_OFF || mode >= MODE_COUNT)
		return VERDICT_OFF;
	if (mode == MODE_IGNORE_LOSS)
		return VERDICT_SUPPRESS;	/* whatever the radio says, or without it */
	if (!r)
		return VERDICT_NO_DATA;
	/* A measurement from the future (clock step) is as unusable as an old one. */
	if (now_ns < r->observed_ns ||
	    now_ns - r->observed_ns > stale_bound_ns(mode, stale_ns, span_ns))
		return VERDICT_STALE;
	if (mode == MODE_RAPID)
		return VERDICT_RAPID;
	if (mode == MODE_MELD_OVERFLOW)
		return overflow_verdict(r, w);
	return meld_notify(mode, r, t_pdu) ? VERDICT_NOTIFY : VERDICT_SUPPRESS;
}

/*
 * The episode's time in flight: the segments out at detection, [snd_una, snd_nxt), were
 * sent within about one smoothed RTT, and each was dropped (if it was) between its
 * sending and now. The span reaches back at least to the newest measurement `r` (fresh,
 * else the verdict is stale): with a short RTT and a late feed, it is the state that
 * held over the whole span. Returns the span looked back, µs.
 */
static __always_inline __u64 srtt_ns(const struct tcp_sock *tp)
{
	return (__u64)(tp->srtt_us >> 3) * NSEC_PER_USEC;	/* srtt_us is 8 x srtt */
}

static __always_inline __u32 episode_window(__u32 ue, const struct tcp_sock *tp,
					    const struct ue_radio *r, __u64 now,
					    struct radio_window *w)
{
	struct ue_history *h = bpf_map_lookup_elem(&ue_history, &ue);
	__u64 lookback_ns = srtt_ns(tp);

	if (r && now > r->observed_ns && now - r->observed_ns > lookback_ns)
		lookback_ns = now - r->observed_ns;
	if (lookback_ns > HISTORY_BUCKETS * HISTORY_BUCKET_NS)
		lookback_ns = HISTORY_BUCKETS * HISTORY_BUCKET_NS;	/* all there is */
	radio_window_of(h, now > lookback_ns ? now - lookback_ns : 0, now, w);
	return lookback_ns / NSEC_PER_USEC;
}

static __always_inline struct ue_counters *counters_of(__u32 ue)
{
	struct ue_counters *c = bpf_map_lookup_elem(&ue_counters, &ue);

	if (c)
		return c;
	struct ue_counters zero = {};

	bpf_map_update_elem(&ue_counters, &ue, &zero, BPF_NOEXIST);
	return bpf_map_lookup_elem(&ue_counters, &ue);
}

static __always_inline void count(__u32 ue, enum meld_verdict v)
{
	struct ue_counters *c = counters_of(ue);

	if (!c)
		return;
	__sync_fetch_and_add(&c->losses, 1);
	switch (v) {
	case VERDICT_SUPPRESS:
	case VERDICT_RAPID:
		__sync_fetch_and_add(&c->suppressed, 1);
		return;
	case VERDICT_STALE:
		__sync_fetch_and_add(&c->stale, 1);
		break;
	case VERDICT_NO_DATA:
		__sync_fetch_and_add(&c->no_data, 1);
		break;
	default:
		break;
	}
	__sync_fetch_and_add(&c->notified, 1);
}

/*
 * Shared loss handling: decides, counts, and fills the decision record `d` (sent once the
 * ssthresh is known, by loss_ssthresh). Returns true if the growth function must see
 * this loss.
 */
static __always_inline bool loss_reaches_cca(struct sock *sk, struct meld_decision *d)
{
	struct meld_config *cfg = get_config();
	const struct tcp_sock *tp = tcp_sk(sk);
	__u32 ue = ue_key(sk);
	__u32 mode = ue_mode_of(ue, cfg);
	struct ue_radio *r = bpf_map_lookup_elem(&ue_radio, &ue);
	__u64 now = bpf_ktime_get_ns();
	enum meld_verdict v;

	d->lookback_us = episode_window(ue, tp, r, now, &d->window);
	v = decide(mode, r, &d->window, now, cfg ? cfg->stale_ns : 0, srtt_ns(tp), t_pdu_of(tp));
	count(ue, v);
	d->time_ns = now;
	d->ue = ue;
	d->saddr = sk->__sk_common.skc_rcv_saddr;
	d->sport = sk->__sk_common.skc_num;
	d->dport = bpf_ntohs(sk->__sk_common.skc_dport);
	d->snd_una = tp->snd_una;
	d->snd_nxt = tp->snd_nxt;
	d->t_pdu = t_pdu_of(tp);
	d->cwnd = tp->snd_cwnd;
	d->mode = mode;
	d->verdict = v;
	if (r) {
		d->radio_age_ns = now > r->observed_ns ? now - r->observed_ns : 0;
		d->d_tbs = r->d_tbs;
		d->n_harq = r->n_harq;
		d->txq_bytes = r->txq_bytes;
		d->q_th_bytes = r->q_th_bytes;
		d->full_bytes = r->full_bytes;
	}
	return v != VERDICT_SUPPRESS && v != VERDICT_RAPID;
}

/* The ssthresh that leaves the growth function untouched: slow start continues. */
static __always_inline __u32 kept_ssthresh(const struct tcp_sock *tp)
{
	return tp->snd_ssthresh > tp->snd_cwnd ? tp->snd_ssthresh : tp->snd_cwnd;
}

/*
 * MELD-overflow's queue discipline, apart from its loss decision. A loss it keeps (radio)
 * is not answered with the growth function's reduction, but the window it keeps loses its
 * share of the standing queue: cwnd x RTT_min / srtt (the socket's windowed minimum,
 * tcp_min_rtt_wlen 300 s, and its smoothed RTT, which includes the RLC queue's delay).
 * Every flow of the UE scales by the same ratio, so together they keep about one BDP in
 * flight and the queue drains, whatever their number; without it, ignoring radio losses
 * grows the queue until the buffer overflows, the only loss that still reduces. Never
 * below Reno's halving, never above the kept window; no queue (srtt <= RTT_min): kept.
 * cwnd, kept and the result in segments, the RTTs in µs.
 */
static __always_inline __u32 drained_ssthresh(__u32 cwnd, __u32 kept, __u32 rtt_min_us,
					      __u32 srtt_us)
{
	__u32 half = cwnd / 2 > 2 ? cwnd / 2 : 2;	/* segments */
	__u64 drained;

	if (!rtt_min_us || srtt_us <= rtt_min_us)
		return kept;
	drained = (__u64)cwnd * rtt_min_us / srtt_us;	/* segments */
	if (drained < half)
		return half;
	return drained < kept ? drained : kept;
}

/*
 * CUBIC after a loss MELD-overflow keeps. The kernel's CUBIC keeps its curve in
 * icsk_ca_priv (struct bictcp): the epoch's start, W_max (last_max_cwnd) and its
 * Reno-friendly estimate (tcp_cwnd). A loss kept from it leaves all three as they were, so
 * once recovery ends at the drained window, the curve's target and the Reno estimate both
 * lie at or above the old window and CUBIC grows at its fastest (cnt 2: x1.5 per RTT) back
 * to the window that had built the queue: 0.5 -> 1 of it within ~5 RTTs (measured, run 1's
 * ss samples; docs/results.md, MELD). Without a drain the curve also runs on from the last
 * reduction, seconds ago, into its fast convex part, where mode off restarts it at every
 * radio loss. Ending the epoch with W_max at the window kept (the drained ssthresh, else
 * cwnd) makes the next ACK start a new curve there (K = 0): its plateau is the window
 * without the queue. Reno has no such
 * state: its +1 per RTT regrows slowly anyway.
 */
static __always_inline void cubic_restart_at(struct sock *sk, __u32 cwnd)
{
	struct bictcp *ca = (struct bictcp *)((struct inet_connection_sock *)sk)->icsk_ca_priv;

	ca->epoch_start = 0;
	ca->last_max_cwnd = cwnd;
}

static __always_inline struct flow_priv *priv_of(struct sock *sk)
{
	return bpf_sk_storage_get(&flow_priv, sk, NULL, BPF_SK_STORAGE_GET_F_CREATE);
}

/* Not inlined, so that struct meld_decision is in the object's BTF (the layout test). */
static __noinline void log_decision(struct meld_decision *d)
{
	struct ue_counters *c;

	if (!bpf_ringbuf_output(&decisions, d, sizeof(*d), 0))
		return;
	c = counters_of(d->ue);
	if (c)
		__sync_fetch_and_add(&c->unlogged, 1);
}

/*
 * Remember the cwnd at the loss and the ssthresh chosen for it: the kernel starts
 * reducing cwnd (PRR) right after, so TCP_INFO alone never shows this pair exactly.
 * Then log the decision; a full log drops the record and counts it (never blocks).
 */
static __always_inline __u32 loss_ssthresh(struct sock *sk, struct meld_decision *d,
					   __u32 ssthresh)
{
	struct flow_priv *p = priv_of(sk);

	if (p) {
		p->loss_cwnd = tcp_sk(sk)->snd_cwnd;
		p->loss_ssthresh = ssthresh;
	}
	d->ssthresh = ssthresh;
	log_decision(d);
	return ssthresh;
}

/* ---- RAPID: cwnd = rate x smoothed RAN RTT_min ---------------------------------- */

/*
 * The thesis's OAI lesson (5.4.3): RTT_min on the RAN leg is underestimated at the
 * start and distorted by scheduling; take the minimum of each period and smooth the
 * per-period minima (7/8 old + 1/8 new, as the research's Linux module did).
 *
 * A period minimum includes any standing queue, and RAPID keeps one whenever the cwnd
 * is above the BDP the radio really delivers (a gain above 100 %, C_i above the
 * delivered rate): then no sample shows the empty path, and fed back into RTT_min the
 * queue grows the cwnd, hence the queue, without bound. Each period minimum is
 * therefore capped at RTT_MIN_MARGIN_PCT above the socket's lowest RTT of the last
 * minutes (the kernel's windowed minimum, net.ipv4.tcp_min_rtt_wlen, 300 s by
 * default), a sample necessarily taken before the queue formed.
 */
#define RTT_MIN_MARGIN_PCT 25

static __always_inline void close_period(struct flow_priv *p, __u32 path_min_us)
{
	__u32 sample = p->period_min_us;
	__u64 cap = (__u64)path_min_us * (100 + RTT_MIN_MARGIN_PCT) / 100;

	if (path_min_us && sample > cap)
		sample = cap;
	if (p->rtt_min_us)
		p->rtt_min_us = (7ULL * p->rtt_min_us + sample) / 8;
	else
		p->rtt_min_us = sample;
	p->period_min_us = 0;
}

static __always_inline void track_rtt_min(struct sock *sk, __s32 rtt_us,
					  const struct meld_config *cfg)
{
	struct flow_priv *p;
	__u64 now, period;

	if (rtt_us <= 0)
		return;
	p = priv_of(sk);
	if (!p)
		return;
	if (!p->period_min_us || (__u32)rtt_us < p->period_min_us)
		p->period_min_us = rtt_us;
	now = bpf_ktime_get_ns();
	if (now < p->period_end_ns)
		return;
	if (p->period_end_ns)	/* close a period (the first one just starts) */
		close_period(p, tcp_sk(sk)->rtt_min.s[0].v);
	period = cfg ? cfg->rapid_period_ns : 0;
	/* at least two smoothed RTTs (srtt_us is 8x the RTT in µs) */
	if (period < (__u64)tcp_sk(sk)->srtt_us / 4 * NSEC_PER_USEC)
		period = (__u64)tcp_sk(sk)->srtt_us / 4 * NSEC_PER_USEC;
	p->period_end_ns = now + period;
}

/*
 * cwnd = gain% x rate x (RTT_min + extra) / MSS, in segments, within [min, clamp].
 * Computed in 64 bits and clamped before it is narrowed to the u32 of snd_cwnd: a bare
 * cast of a large quotient wraps to an arbitrary window. The inputs are capped so that
 * no intermediate overflows 64 bits: rate x RTT < 2^36 x 2^26 = 2^62, bytes per RTT
 * (divided by 10^6) < 2^43, times the gain < 2^63.
 */
#define RAPID_MAX_RATE_BPS (1ULL << 36)	/* 550 Gbit/s, far above any cell */
#define RAPID_MAX_RTT_US (1ULL << 26)	/* 67 s */
#define RAPID_MAX_GAIN_PCT (1U << 20)

static __always_inline __u32 rapid_cwnd(__u64 rate_Bps, __u32 rtt_us, __u32 extra_us,
					__u32 gain_pct, __u32 mss, __u32 floor_cwnd,
					__u32 clamp)
{
	__u64 rtt = (__u64)rtt_us + extra_us;
	__u64 segs;

	if (rate_Bps > RAPID_MAX_RATE_BPS)
		rate_Bps = RAPID_MAX_RATE_BPS;
	if (rtt > RAPID_MAX_RTT_US)
		rtt = RAPID_MAX_RTT_US;
	if (gain_pct > RAPID_MAX_GAIN_PCT)
		gain_pct = RAPID_MAX_GAIN_PCT;
	segs = rate_Bps * rtt / USEC_PER_SEC * gain_pct / 100 / (mss ? mss : 1);
	if (segs < floor_cwnd)
		segs = floor_cwnd;
	if (segs > clamp)
		segs = clamp;
	return segs;
}

/* The flow's RAN BDP in segments, or 0 when RAPID has no rate for it. */
static __always_inline __u32 rapid_target(struct sock *sk, const struct ue_radio *r,
					  const struct meld_config *cfg)
{
	struct tcp_sock *tp = tcp_sk(sk);
	struct flow_ctl *ctl;
	struct flow_priv *p;
	__u64 rate;
	__u32 rtt_us, floor, cwnd;

	ctl = bpf_sk_storage_get(&flow_ctl, sk, NULL, 0);
	rate = ctl && ctl->rate_Bps ? ctl->rate_Bps : r->capacity_Bps;
	if (!rate)
		return 0;
	p = priv_of(sk);
	if (!p)
		return 0;
	/* Before the first full period, the lowest sample so far, with a high floor. */
	rtt_us = p->rtt_min_us ? p->rtt_min_us : p->period_min_us;
	if (!rtt_us)
		return cfg->rapid_init_cwnd;
	/* the floor: the minimum, or the (higher) initial cwnd before the first period */
	floor = cfg->rapid_min_cwnd;
	if (!p->rtt_min_us && cfg->rapid_init_cwnd > floor)
		floor = cfg->rapid_init_cwnd;
	cwnd = rapid_cwnd(rate, rtt_us, cfg->rapid_rtt_extra_us, cfg->rapid_gain_pct,
			  tp->mss_cache, floor, tp->snd_cwnd_clamp);
	p->target_cwnd = cwnd;
	return cwnd;
}

/* RAPID owns cwnd on this ACK if the UE is in RAPID mode with fresh radio state. */
static __always_inline bool rapid_cong_avoid(struct sock *sk)
{
	struct meld_config *cfg = get_config();
	__u32 ue = ue_key(sk), cwnd;
	struct ue_radio *r;

	if (!cfg || ue_mode_of(ue, cfg) != MODE_RAPID)
		return false;
	r = bpf_map_lookup_elem(&ue_radio, &ue);
	if (decide(MODE_RAPID, r, NULL, bpf_ktime_get_ns(), cfg->stale_ns, 0, 0) != VERDICT_RAPID)
		return false;
	cwnd = rapid_target(sk, r, cfg);
	if (!cwnd)
		return false;
	tcp_sk(sk)->snd_cwnd = cwnd;
	return true;
}

static __always_inline void rapid_init(struct sock *sk)
{
	struct meld_config *cfg = get_config();
	struct tcp_sock *tp = tcp_sk(sk);
	__u32 ue = ue_key(sk);

	if (!cfg || ue_mode_of(ue, cfg) != MODE_RAPID || !cfg->rapid_init_cwnd)
		return;
	if (tp->snd_cwnd < cfg->rapid_init_cwnd && cfg->rapid_init_cwnd <= tp->snd_cwnd_clamp)
		tp->snd_cwnd = cfg->rapid_init_cwnd;
}

/*
 * A defect we measured but could not prevent (docs/meld-rapid.md, "Impossible
 * ssthresh"): rarely, on this kernel, a socket enters Recovery with snd_ssthresh =
 * 0x822034e5 (the low half of srso_return_thunk+5, a return address) while neither our
 * ssthresh nor our set_state program ran. PRR then divides by a window above 2^31
 * (tcp_cwnd_reduction: delta < 0, sndcnt = ssthresh x delivered / prior_cwnd) and
 * cwnd jumps to ~2e9 segments: the 1,990,261,064 one RAPID test read. No legitimate
 * ssthresh exceeds TCP_INFINITE_SSTHRESH, so the first ACK after such an entry puts
 * back what our ssthresh returns for a loss it keeps: the cwnd the episode began with.
 */
static __always_inline void repair_ssthresh(struct sock *sk)
{
	struct tcp_sock *tp = tcp_sk(sk);
	struct ue_counters *c;
	__u32 kept = tp->prior_cwnd > 2 ? tp->prior_cwnd : 2;

	if (tp->snd_ssthresh <= TCP_INFINITE_SSTHRESH)
		return;
	tp->snd_ssthresh = kept;
	if (tp->snd_cwnd > kept)
		tp->snd_cwnd = kept;
	c = counters_of(ue_key(sk));
	if (c)
		__sync_fetch_and_add(&c->repaired, 1);
}

static __always_inline void on_ack_sample(struct sock *sk, const struct ack_sample *sample)
{
	repair_ssthresh(sk);
	track_rtt_min(sk, sample->rtt_us, get_config());
}

static __always_inline void on_cwnd_event(struct sock *sk, enum tcp_ca_event event)
{
	struct ue_counters *c;

	if (event != CA_EVENT_LOSS)
		return;
	c = counters_of(ue_key(sk));
	if (c)
		__sync_fetch_and_add(&c->timeouts, 1);
}

/* ---- meld_reno and meld_cubic: the hooks of CCA_STRUCT_OPS (cca.h) ---------------- */

static __always_inline void cca_init(struct sock *sk)
{
	rapid_init(sk);
}

static __always_inline __u32 cca_ssthresh(struct sock *sk, enum cca_base base)
{
	const struct tcp_sock *tp = tcp_sk(sk);
	struct meld_decision d = {};

	__u32 ssthresh;

	if (loss_reaches_cca(sk, &d))
		return loss_ssthresh(sk, &d, base_ssthresh(sk, base));
	if (d.mode != MODE_MELD_OVERFLOW)
		return loss_ssthresh(sk, &d, kept_ssthresh(tp));
	ssthresh = drained_ssthresh(tp->snd_cwnd, kept_ssthresh(tp), tp->rtt_min.s[0].v,
				    tp->srtt_us >> 3);
	if (base == CCA_CUBIC)	/* at the window kept: in slow start ssthresh is "infinite" */
		cubic_restart_at(sk, ssthresh < tp->snd_cwnd ? ssthresh : tp->snd_cwnd);
	return loss_ssthresh(sk, &d, ssthresh);
}

static __always_inline bool cca_cong_avoid(struct sock *sk, __u32 acked)
{
	return rapid_cong_avoid(sk);
}

static __always_inline void cca_cwnd_event(struct sock *sk, enum tcp_ca_event event)
{
	on_cwnd_event(sk, event);
}

static __always_inline void cca_pkts_acked(struct sock *sk, const struct ack_sample *sample)
{
	on_ack_sample(sk, sample);
}

CCA_STRUCT_OPS(meld, reno, CCA_RENO, 0);
CCA_STRUCT_OPS(meld, cubic, CCA_CUBIC, 0);

/* ---- the decision alone, for tests (BPF_PROG_TEST_RUN) ---------------------------- */

/* The inputs are copied out of the context: the verifier reads a context at fixed offsets only. */
SEC("syscall")
int meld_decide(struct decide_args *args)
{
	struct ue_radio radio = args->radio;
	struct radio_window window = args->window;

	args->verdict = decide(args->mode, args->has_radio ? &radio : NULL, &window,
			       args->now_ns, args->stale_ns, args->span_ns, args->t_pdu);
	return 0;
}

SEC("syscall")
int meld_window(struct window_args *args)
{
	__u32 ue = args->ue;
	struct radio_window w;

	radio_window_of(bpf_map_lookup_elem(&ue_history, &ue), args->from_ns, args->to_ns, &w);
	args->window = w;
	return 0;
}

SEC("syscall")
int meld_drained(struct drain_args *args)
{
	args->ssthresh = drained_ssthresh(args->cwnd, args->kept, args->rtt_min_us,
					  args->srtt_us);
	return 0;
}

SEC("syscall")
int meld_rapid_cwnd(struct rapid_cwnd_args *args)
{
	args->cwnd = rapid_cwnd(args->rate_Bps, args->rtt_us, args->rtt_extra_us,
				args->gain_pct, args->mss, args->floor_cwnd, args->clamp);
	return 0;
}
