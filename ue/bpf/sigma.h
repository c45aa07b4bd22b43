/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Shared between the SIGMA program (sigma.bpf.c), its user space (mts_ue.sigma, ctypes
 * mirrors checked against the built object's BTF by a test) and the grant feed's
 * writer, the RAN emulator (testbed/ran-emulator/internal/ran/grantfeed.go, which
 * writes struct sigma_grant byte by byte: change both together).
 *
 * Every map key that names a UE is its IPv4 address in network byte order (__be32):
 * SIGMA runs on the UE, so it is the socket's local address (skc_rcv_saddr).
 */
#ifndef SIGMA_H
#define SIGMA_H

/* The TBS table `sigma_tbs`: bytes per TTI for (RAT, MCS, PRBs), from the 3GPP tables. */
#define SIGMA_MCS_MAX 28	/* MCS 0..28 (TS 36.213 Table 7.1.7.1-1, TS 38.214 Table 5.1.3.1-1) */
#define SIGMA_PRB_MAX 275	/* PRBs 0..275 (NR; LTE stops at 110, the rest is 0) */
#define SIGMA_RAT_LTE 0
#define SIGMA_RAT_NR 1
#define SIGMA_TBS_ENTRIES (2 * (SIGMA_MCS_MAX + 1) * (SIGMA_PRB_MAX + 1))
#define SIGMA_TBS_INDEX(rat, mcs, prb) \
	(((rat) * (SIGMA_MCS_MAX + 1) + (mcs)) * (SIGMA_PRB_MAX + 1) + (prb))

/*
 * One TTI of the UE's cell uplink as its DCI decoder reads it (research 002 §2.1):
 * written every TTI by the UE's modem driver (here: the emulator's grant feed).
 */
struct sigma_grant {
	__u64 tti_start_ns;	/* CLOCK_MONOTONIC start of the TTI, ns (staleness) */
	__u64 tti;		/* TTI index */
	__u32 tti_ns;		/* TTI length, ns (LTE 1,000,000; NR 1 ms / 2^µ) */
	__u32 p_cell;		/* P_cell: uplink PRBs of the cell */
	__u32 n_users;		/* N: UEs granted PRBs in this TTI (this UE included if granted) */
	__u32 p_unused;		/* P_unused: PRBs granted to nobody in this TTI */
	__u32 p_current;	/* P_current: PRBs granted to this UE in this TTI */
	__u32 mcs;		/* this UE's uplink MCS */
	__u32 rat;		/* SIGMA_RAT_LTE or SIGMA_RAT_NR: the TBS table of the MCS */
	__u32 buffer_bytes;	/* the UE's modem buffer after the TTI, bytes (for tools) */
};

/* Where a connection is (Algorithm 1); FALLBACK = the kernel's Reno/CUBIC grows cwnd. */
enum sigma_phase {
	PHASE_FALLBACK = 0,
	PHASE_MAX_START = 1,		/* cwnd = IW = W_max, paced; until IW/MSS segments ACKed */
	PHASE_PROPORTIONAL = 2,		/* RTT_last >= 2 RTT_min: cwnd = W_max * RTT_min / RTT_last */
	PHASE_SAFE_INCREASE = 3,	/* per segment ACKed: cwnd += MSS * (1 - P_current / P_max) */
};

/* Why a grant could not be used (also the test program's verdict). */
enum sigma_verdict {
	GRANT_OK = 0,
	GRANT_NONE = 1,		/* no entry for this UE */
	GRANT_STALE = 2,	/* older than stale_ns, or from the future */
	GRANT_INVALID = 3,	/* P_cell, MCS, RAT or TTI out of range, TBS 0 */
	GRANT_NO_RTT = 4,	/* no RTT_min yet: W_max undefined */
};

/* Global knobs: one entry in the `sigma_config` array map (zero = the defaults below). */
struct sigma_config {
	__u64 stale_ns;		/* a grant older than this is stale (default 20 ms) */
	__u32 min_cwnd;		/* floor of every cwnd SIGMA sets, segments (default 2) */
	__u32 pad;
};

/* Per-UE counters, written by the kernel only. */
struct sigma_counters {
	__u64 acks;		/* cong_avoid calls (ACKs that may grow cwnd) */
	__u64 sigma_acks;	/* ... on which SIGMA set cwnd from a fresh grant */
	__u64 fallback_acks;	/* ... on which Reno/CUBIC grew it instead: */
	__u64 no_grant;		/*   no grant entry */
	__u64 stale;		/*   grant older than stale_ns */
	__u64 invalid;		/*   grant out of range */
	__u64 max_starts;	/* connections that began with Max Start */
	__u64 proportional;	/* Proportional Adjustments (entries into that phase) */
	__u64 losses;		/* ssthresh calls (loss episodes) */
};

/* Per-socket SIGMA state (sk_storage; readable from user space through the socket's fd). */
struct sigma_flow {
	__u32 phase;		/* enum sigma_phase */
	__u32 iw_segs;		/* Max Start's IW = W_max at the handshake, segments (0: none) */
	__u32 acked_segs;	/* segments ACKed since Max Start began */
	__u32 rtt_min_us;	/* RTT_min at the last decision, µs */
	__u32 rtt_last_us;	/* RTT_last: the latest RTT sample, µs */
	__u32 w_max_segs;	/* W_max at the last decision, segments */
	__u32 p_max;		/* P_max at the last decision, PRBs */
	__u32 safe_milli;	/* Safe Increase: fraction of a segment accumulated, 1/1000 */
	__u32 cuts;		/* Proportional Adjustments so far */
	__u32 cut_cwnd;		/* cwnd the last adjustment set, segments */
	__u32 cut_w_max_segs;	/* ... its W_max, segments */
	__u32 cut_rtt_min_us;	/* ... its RTT_min, µs */
	__u32 cut_rtt_last_us;	/* ... its RTT_last, µs */
	__u32 pacing_Bps;	/* Max Start's pacing rate IW / RTT_min, bytes/s (0: none) */
};

/* Input and output of the `sigma_capacity` test program (BPF_PROG_TEST_RUN). */
struct capacity_args {
	struct sigma_grant grant;
	__u64 now_ns;
	__u64 stale_ns;
	__u32 has_grant;
	__u32 rtt_min_us;	/* RTT_min, µs */
	__u32 mss;		/* bytes */
	__u32 verdict;		/* out: enum sigma_verdict */
	__u32 p_max;		/* out: P_max, PRBs */
	__u32 tbs_bytes;	/* out: TBS(P_max, MCS), bytes per TTI */
	__u64 c_max_Bps;	/* out: C_max, bytes/s */
	__u64 w_max_bytes;	/* out: W_max, bytes */
	__u32 w_max_segs;	/* out: W_max, segments (what cwnd would be set to) */
	__u32 pad;
};

#endif /* SIGMA_H */
