/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Shared between the BPF program (meld.bpf.c) and the test program it carries.
 * The Python side (mec_pep.ran_aware.kernel) mirrors these layouts with ctypes; a test
 * compares both against the BTF of the built object, so change them together.
 *
 * Every map key that names a UE is its IPv4 address in network byte order (__be32),
 * which is what the RAN-leg socket holds as its peer address (skc_daddr).
 */
#ifndef MELD_H
#define MELD_H

/* Per-UE or global mode. */
enum meld_mode {
	MODE_OFF = 0,		/* plain Reno/CUBIC: every loss reaches the growth function */
	MODE_MELD_DE = 1,	/* notify iff D_TBS < S_TB                         (Eq. 4.1) */
	MODE_MELD_ME = 2,	/* notify iff D_TBS < S_TB or S_TxQueue >= Q_th    (Alg. 2) */
	MODE_RAPID = 3,		/* cwnd = the flow's RAN BDP, losses ignored        (§5) */
	MODE_MELD_OVERFLOW = 4,	/* ours: notify iff the RLC buffer was full while the
				 * lost data was in flight (history, not the state at
				 * detection; see struct ue_history) */
	MODE_IGNORE_LOSS = 5,	/* every loss kept from the growth function: the upper
				 * bound on goodput, no congestion response at all */
	MODE_COUNT = 6,
};

/* What ssthresh() decided at one loss event; also the test program's return value. */
enum meld_verdict {
	VERDICT_OFF = 0,	/* mode off: standard reduction */
	VERDICT_NO_DATA = 1,	/* no radio state for this UE: standard reduction */
	VERDICT_STALE = 2,	/* radio state older than stale_ns: standard reduction */
	VERDICT_NOTIFY = 3,	/* MELD says congestion: standard reduction */
	VERDICT_SUPPRESS = 4,	/* MELD says random loss (or the mode ignores every loss):
				 * cwnd kept, TCP just retransmits */
	VERDICT_RAPID = 5,	/* RAPID: loss-agnostic, cwnd kept */
};

/* Radio state of one UE; the PEP overwrites the whole entry on every RNIS message. */
struct ue_radio {
	__u64 observed_ns;	/* CLOCK_MONOTONIC time the RAN was measured */
	__u64 capacity_Bps;	/* RAPID C_i, bytes per second (0 = unknown) */
	__u32 d_tbs;		/* D_TBS: DL transport block of the last TTI, bytes */
	__u32 txq_bytes;	/* S_TxQueue: RLC queue toward the UE, bytes */
	__u32 q_th_bytes;	/* Q_th = TBS(MCS(best CQI), current PRBs) * N_HARQ, BYTES */
	__u32 n_harq;		/* N_HARQ: DL HARQ processes */
	__u32 full_bytes;	/* S_TxQueue at or above this is a full RLC buffer, bytes
				 * (0 = buffer size unknown; a per-deployment setting) */
	__u32 pad;
};

/*
 * The UE's recent radio state in time buckets, written by the PEP with each RNIS message
 * (mec_pep.ran_aware.kernel.UeHistory.record). A loss is detected about one RTT after
 * its drop; MELD-overflow judges the drop by the RLC queue while the lost data was in
 * flight, which this history keeps, and not by the queue at detection. Bucket k of time
 * ([k * HISTORY_BUCKET_NS, (k + 1) * HISTORY_BUCKET_NS)) lives in slot k % HISTORY_BUCKETS.
 */
#define HISTORY_BUCKETS 128
#define HISTORY_BUCKET_NS 8000000ULL	/* 8 ms, the default RNIS poll: 128 buckets ~ 1 s */

struct radio_bucket {
	__u64 start_ns;		/* CLOCK_MONOTONIC start of the bucket, ns (0 = empty slot) */
	__u32 txq_max_bytes;	/* largest S_TxQueue measured in it, bytes */
	__u32 d_tbs_min;	/* smallest D_TBS measured in it, bytes */
};

struct ue_history {
	struct radio_bucket bucket[HISTORY_BUCKETS];
};

/* What the history says about a span of time (a loss episode's time in flight). */
struct radio_window {
	__u32 txq_peak_bytes;	/* largest S_TxQueue measured in the span, bytes */
	__u32 d_tbs_low;	/* smallest D_TBS measured in it, bytes (U32_MAX: none) */
	__u32 buckets;		/* buckets with a measurement in the span */
};

/* Per-UE counters, written by the kernel only. */
struct ue_counters {
	__u64 losses;		/* loss events (ssthresh calls: one per recovery episode) */
	__u64 notified;		/* ... that reached the growth function (reduction) */
	__u64 suppressed;	/* ... that MELD or RAPID kept from it */
	__u64 stale;		/* ... notified because the radio state was too old */
	__u64 no_data;		/* ... notified because there was no radio state at all */
	__u64 timeouts;		/* RTOs among the loss events (CA_EVENT_LOSS) */
	__u64 repaired;		/* loss events whose ssthresh was impossible (> 0x7fffffff, set
				 * while no hook of ours ran) and that this program reset */
	__u64 unlogged;		/* loss events the decision log had no room for (reader behind) */
};

/*
 * One loss event as ssthresh() decided it: a record of the `decisions` ring buffer.
 * MELD's test is D_TBS < S_TB = T_PDU / N_HARQ, kept exact as D_TBS * N_HARQ < T_PDU.
 * The flow is the RAN-leg socket (PEP -> UE); the episode covers the sequence numbers
 * [snd_una, snd_nxt) the sender had out when the loss was detected.
 */
struct meld_decision {
	__u64 time_ns;		/* CLOCK_MONOTONIC when ssthresh() ran, ns */
	__u64 radio_age_ns;	/* age of the radio state decided on, ns (0 without any) */
	__u32 ue;		/* UE IPv4 (the socket's peer), network byte order */
	__u32 saddr;		/* PEP-side IPv4 of the flow, network byte order */
	__u16 sport;		/* PEP-side TCP port, host byte order */
	__u16 dport;		/* UE-side TCP port, host byte order */
	__u32 snd_una;		/* first unacknowledged byte (TCP sequence number) */
	__u32 snd_nxt;		/* next byte to send (TCP sequence number) */
	__u32 d_tbs;		/* D_TBS: DL transport block of the last TTI, bytes */
	__u32 t_pdu;		/* T_PDU: one full segment's IP packet, bytes */
	__u32 n_harq;		/* N_HARQ: DL HARQ processes (S_TB = t_pdu / n_harq, bytes) */
	__u32 txq_bytes;	/* S_TxQueue: RLC queue toward the UE, bytes */
	__u32 q_th_bytes;	/* Q_th, bytes */
	__u32 cwnd;		/* snd_cwnd when the loss was detected, segments */
	__u32 ssthresh;		/* the ssthresh returned, segments */
	__u32 lookback_us;	/* the span looked back for the radio history: srtt, µs */
	__u32 full_bytes;	/* S_TxQueue of a full RLC buffer, bytes (0 = unknown) */
	struct radio_window window; /* the radio history over that span */
	__u8 mode;		/* enum meld_mode applied */
	__u8 verdict;		/* enum meld_verdict: SUPPRESS and RAPID kept cwnd, others cut it */
	__u8 pad[2];
};

/* Global knobs: one entry in the `config` array map. */
struct meld_config {
	__u64 stale_ns;		/* radio state older than this means "notify" */
	__u64 rapid_period_ns;	/* minimum length of a RAN RTT_min period */
	__u32 global_mode;	/* enum meld_mode for UEs without an entry in ue_mode */
	__u32 rapid_init_cwnd;	/* initial cwnd (segments) of a RAPID flow before any RTT */
	__u32 rapid_min_cwnd;	/* floor of the RAPID cwnd (segments) */
	__u32 rapid_gain_pct;	/* cwnd = gain% * rate * RTT_min (100 = exactly one BDP) */
	__u32 rapid_rtt_extra_us; /* added to RTT_min (e.g. the uplink SR period) */
	__u32 pad;
};

/* Per-socket RAPID share on the RAN leg, written by the PEP through the socket's fd. */
struct flow_ctl {
	__u64 rate_Bps;		/* the flow's allocated rate; 0 = use the UE's C_i */
};

/* Per-socket state owned by the kernel program (readable through the socket's fd). */
struct flow_priv {
	__u64 period_end_ns;	/* end of the current RTT_min period */
	__u32 period_min_us;	/* smallest RTT sample of the current period */
	__u32 rtt_min_us;	/* smoothed RAN RTT_min: EWMA 7/8 of the per-period minima */
	__u32 target_cwnd;	/* last RAPID cwnd (segments); 0 = never set */
	__u32 loss_cwnd;	/* cwnd when the last loss event began (segments) */
	__u32 loss_ssthresh;	/* ssthresh this program chose for it */
	__u32 pad;
};

/* Input of the `rapid_cwnd` test program: RAPID's cwnd arithmetic alone. */
struct rapid_cwnd_args {
	__u64 rate_Bps;		/* the flow's rate, bytes per second */
	__u32 rtt_us;		/* smoothed RAN RTT_min, µs (0 = none yet) */
	__u32 rtt_extra_us;	/* added to RTT_min, µs */
	__u32 gain_pct;		/* percent of one BDP */
	__u32 mss;		/* bytes per segment */
	__u32 floor_cwnd;	/* segments: the minimum (or the initial cwnd, higher) */
	__u32 clamp;		/* segments: the socket's snd_cwnd_clamp */
	__u32 cwnd;		/* out: segments */
	__u32 pad;
};

/* Input of the `decide` test program (BPF_PROG_TEST_RUN): the decision, in isolation. */
struct decide_args {
	struct ue_radio radio;
	struct radio_window window;	/* the history over the episode (MELD-overflow) */
	__u32 has_radio;
	__u64 now_ns;
	__u64 stale_ns;
	__u64 span_ns;		/* the episode's span, the socket's srtt (MELD-overflow's bound) */
	__u32 mode;
	__u32 t_pdu;
	__u32 verdict;		/* out */
	__u32 pad;
};

/* Input of the `drained` test program: the window MELD-overflow keeps at a radio loss. */
struct drain_args {
	__u32 cwnd;		/* snd_cwnd at the loss, segments */
	__u32 kept;		/* the ssthresh that keeps it (kept_ssthresh), segments */
	__u32 rtt_min_us;	/* the socket's windowed minimum RTT, µs */
	__u32 srtt_us;		/* its smoothed RTT, µs */
	__u32 ssthresh;		/* out: segments */
};

/* Input of the `window` test program: the history walk over the `ue_history` map. */
struct window_args {
	__u64 from_ns;		/* CLOCK_MONOTONIC start of the span, ns */
	__u64 to_ns;		/* ... its end, ns */
	__u32 ue;		/* the UE's key in ue_history (IPv4, network byte order) */
	struct radio_window window; /* out */
};

#endif /* MELD_H */
