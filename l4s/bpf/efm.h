/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Explicit flow measurement (RFC 9506: spin bit, delay bit) carried in a reserved bit of
 * the TCP header, as research 001 did with a kernel patch; here without one:
 * efm_marker.bpf.c marks at the endpoints (tc), efm_observer.bpf.c reads the marks on
 * the path (tc ingress at the MEC host).
 *
 * Shared between both BPF programs; the Python side (mec_l4s.efm) mirrors these
 * layouts with ctypes and a test compares the sizes against the built objects' BTF,
 * so change them together.
 */
#ifndef EFM_H
#define EFM_H

/*
 * Byte 12 of the TCP header (0-based): data offset (bits 7-4), then the reserved bits.
 * The research's code (and Spindump) use 0x02 for the "time" bit (the spin value or the
 * delay sample) and 0x04 for the "loss" bit (Q bit, not built). 0x01 is AE (AccECN).
 */
#define EFM_TIME_BIT 0x02
#define EFM_LOSS_BIT 0x04
#define EFM_BITS (EFM_TIME_BIT | EFM_LOSS_BIT)
/* Not the research's (EFM_DELAY_RUN below): in SYN and SYN-ACK "the delay bit marks whole
 * GSO/TSO runs"; on a marked segment, the parity of its sample (it alternates from one
 * sample of a sender to its next). 0x08 is the reserved bit neither the research nor
 * AccECN uses. */
#define EFM_RUN_BIT 0x08
#define EFM_CODE_BITS (EFM_BITS | EFM_RUN_BIT)

/*
 * Technique advertised in SYN and SYN-ACK as (run, loss, time): 010 spin, 001 delay,
 * 101 delay with runs.
 *
 * EFM_DELAY is the research's rule: one sample is one marked segment, so GSO/TSO must be
 * off (it copies the header of a super-packet, the mark included, to every segment).
 * EFM_DELAY_RUN keeps GSO/TSO: the sender marks a whole skb, whatever it is cut into
 * later, with the sample's parity in EFM_RUN_BIT, and the receiving endpoint and the
 * observer take a *run* as one sample: the first marked segment starts it; a marked
 * segment continues it if it has the run's parity and ack number and starts where the
 * run ended (seq == the run's end), which is what the segments of one super-packet look
 * like (GSO/TSO and GRO copy the header bits and the ack, and split or join seq
 * contiguously). The parity tells two marked skbs sent back to back apart (an
 * application-limited flow whose RTT is shorter than its gap between writes marks every
 * skb); the contiguity, a sample after a lost one of the same parity. The sample's time
 * is its first segment's.
 */
enum efm_technique {
	EFM_OFF = 0,		/* no marking: the reserved bits are left as they are */
	EFM_SPIN = 1,		/* spin bit; handshake code 010 (EFM_LOSS_BIT) */
	EFM_DELAY = 2,		/* delay bit, one segment per sample; code 001 (EFM_TIME_BIT) */
	EFM_DELAY_RUN = 3,	/* delay bit, one run per sample; code 101 (RUN | TIME) */
	EFM_TECHNIQUE_COUNT = 4,
};

/* A run of marked segments (EFM_DELAY_RUN), per socket or per flow direction. */
struct efm_run {
	__u32 active;		/* a run was seen (0/1) */
	__u32 ack;		/* its ack number */
	__u32 end;		/* seq + payload of its last segment */
	__u32 parity;		/* its EFM_RUN_BIT (0/1) */
};

/*
 * The spin guard's view of one direction of a connection, at an endpoint (the segments it
 * receives) and in the observer's filtered mode (the packets of one direction): where the
 * data received so far ends with nothing missing before it, the highest ack, and one
 * block of data received beyond a hole (efm_follows in efm_packet.h).
 */
struct efm_order {
	__u32 seen;		/* a first segment set the numbers (0/1) */
	__u32 next;		/* in-order end: seq + payload with nothing missing before it */
	__u32 hi_ack;		/* highest ack of a followed segment */
	__u32 ooo_start;	/* the block beyond a hole: [start, end); start == end: none */
	__u32 ooo_end;
	__u32 pad;
};

/* Endpoint role, from the handshake (research: SYN_SENT->EST client, SYN_RECV->EST server). */
enum efm_role {
	EFM_ROLE_UNMANAGED = 0,	/* existed before the program: never marked */
	EFM_ROLE_CLIENT = 1,
	EFM_ROLE_SERVER = 2,
};

/* Endpoint knobs: one entry in the `efm_config` array map. */
struct efm_config {
	__u32 technique;	/* enum efm_technique */
	__u32 t_max_us;		/* delay bit: the client injects a new sample after this, µs */
	__u32 dynamic_t_max;	/* 1: T_max = max(t_max_us, 2 x SRTT) */
	__u32 ect1;		/* 1: outgoing ECT(0) becomes ECT(1), the L4S identifier (this
				 * kernel gives a BPF CCA no way to ask for ECT(1)) */
	__u32 spin_guard;	/* 1: a received segment sets the spin value only if it advances
				 * the highest seq or ack seen, neither below (RFC 9000 §17.4's
				 * rule; not the research's) */
};

/* Endpoint state of one socket (socket storage). */
struct efm_sock {
	__u64 ds_time_ns;	/* client: when it last sent a delay sample (CLOCK_MONOTONIC, ns) */
	__u64 edge_ns;		/* spin guard: when this endpoint's own spin value last changed */
	__u32 role;		/* enum efm_role */
	__u32 spin;		/* spin: time bit of the last segment received (0/1) */
	__u32 sample_pending;	/* delay: a received sample waits for the next segment out (0/1) */
	struct efm_order order;	/* spin guard: the segments received (efm_follows) */
	struct efm_run run_in;	/* delay with runs: the run of marked segments received last */
	__u32 parity_out;	/* delay with runs: the parity of the next sample sent (0/1) */
	__u32 base_rtt_us;	/* spin guard: TCP's rtt_min when first read (the handshake's) */
	__u32 pad;
};

/* Endpoint counters: index into the `efm_counters` per-CPU array, in segments. */
enum efm_counter {
	EFM_C_SEGMENTS_OUT = 0,	/* TCP segments (skbs) seen at egress */
	EFM_C_HANDSHAKE = 1,	/* SYN and SYN-ACK given the handshake code */
	EFM_C_SPIN_SET = 2,	/* segments sent with spin value 1 */
	EFM_C_SAMPLES_REFLECTED = 3, /* delay samples sent because one was received */
	EFM_C_SAMPLES_GENERATED = 4, /* delay samples the client injected after T_max */
	EFM_C_SACK_HELD = 5,	/* a due sample kept pending because the segment carried SACK */
	EFM_C_GSO_MARKED = 6,	/* a delay sample on a GSO skb (copied to each segment!) */
	EFM_C_SAMPLES_IN = 7,	/* delay samples received */
	EFM_C_UNPARSED = 8,	/* TCP/IPv4 packets whose headers could not be read */
	EFM_C_ECT1 = 9,		/* ECT(0) packets sent as ECT(1) */
	EFM_C_SPIN_GUARDED = 10, /* spin guard: segments not followed (spin_follows) */
	EFM_C_RUN_CONTINUED = 11, /* delay with runs: marked segments received that continued
				   * a run (not a new sample) */
	EFM_C_COUNT = 12,
};


/* ---- the observer (efm_observer.bpf.c) ------------------------------------------- */

/* A flow, both directions under one key: endpoint a is the lower (address, port). */
struct obs_key {
	__be32 addr_a;
	__be32 addr_b;
	__be16 port_a;
	__be16 port_b;
};

enum obs_mode {
	OBS_RAW = 0,		/* Spindump's rules, no filter (the research's observer) */
	OBS_FILTERED = 1,	/* + reordering guard (spin) and minimum-gap rule (both) */
	OBS_MODES = 2,
};

/* One direction of a flow as one mode sees it. */
struct obs_track {
	__u64 last_ns;		/* last accepted spin edge / delay sample in this direction */
	__u32 value;		/* spin: the value of the last accepted packet (0/1) */
	__u32 seen;		/* spin: a first value was seen (it only initialises) */
};

struct obs_flow {
	__u64 created_ns;
	__u64 last_ns;			/* last packet, CLOCK_MONOTONIC ns */
	__u64 srtt_ns[OBS_MODES];	/* EWMA 7/8 of the accepted e2e samples (gap rule) */
	struct obs_track track[OBS_MODES][2];
	struct efm_order order[2];	/* filtered spin: per direction (efm_follows) */
	struct efm_run run[2];		/* delay with runs: the last run per direction */
	__u64 packets[2];		/* packets per direction (index: 0 = from a) */
	__u8 technique;			/* enum efm_technique from the SYN, 0 until agreed */
	__u8 syn_code;			/* (run, loss, time) bits of the SYN */
	__u8 client_dir;		/* direction of the SYN (0: a is the client) */
	__u8 state;			/* enum obs_flow_state */
	__u32 pad;
};

enum obs_flow_state {
	OBS_SYN_SEEN = 0,	/* waiting for the SYN-ACK to agree on the technique */
	OBS_AGREED = 1,		/* SYN and SYN-ACK carry the same code: measuring */
	OBS_DISABLED = 2,	/* they disagreed (or no code): no EFM for this flow */
};

/* Observer knobs: one entry in `obs_config`. */
struct obs_config {
	__u64 delay_cutoff_ns;	/* Spindump: delay samples further apart are discarded (225 ms) */
	__u32 min_gap_pct;	/* filtered: reject an edge sooner than this % of the RTT (50) */
	__u32 pad;
};

enum obs_kind {
	OBS_SPIN_E2E = 0,	/* spin: flip to flip in the same direction */
	OBS_SPIN_HALF = 1,	/* spin: the other direction's flip to this one */
	OBS_DELAY_E2E = 2,	/* delay: sample to sample in the same direction */
	OBS_DELAY_HALF = 3,	/* delay: the other direction's sample to this one */
};

/* One RTT sample, to user space through the `obs_samples` ring buffer. */
struct obs_sample {
	__u64 t_ns;		/* when the packet passed, CLOCK_MONOTONIC ns */
	struct obs_key key;
	__u32 rtt_ns;		/* the sample (< 4.29 s) */
	__u8 kind;		/* enum obs_kind */
	__u8 mode;		/* enum obs_mode */
	__u8 dir;		/* 0: the packet went from a to b */
	__u8 client_dir;	/* direction of the flow's SYN */
};

enum obs_counter {
	OBS_C_PACKETS = 0,	/* packets seen */
	OBS_C_TCP = 1,		/* IPv4 TCP packets with complete headers */
	OBS_C_MALFORMED = 2,	/* IPv4 TCP packets truncated or malformed: skipped */
	OBS_C_FLOWS = 3,	/* flows created (one per SYN of an unknown flow) */
	OBS_C_NO_FLOW = 4,	/* packets of flows whose SYN was not seen (or evicted) */
	OBS_C_DISAGREED = 5,	/* flows whose SYN-ACK code differed from the SYN's */
	OBS_C_SAMPLES = 6,	/* samples written to the ring buffer */
	OBS_C_RING_FULL = 7,	/* samples lost: the ring buffer was full */
	OBS_C_REORDERED = 8,	/* filtered: spin packets set aside by the reordering guard */
	OBS_C_TOO_SOON = 9,	/* filtered: edges/samples set aside by the minimum-gap rule */
	OBS_C_RUN_CONTINUED = 10, /* delay with runs: marked packets continuing a run */
	OBS_C_COUNT = 11,
};

#endif /* EFM_H */
