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

/* Technique advertised in SYN and SYN-ACK as (loss, time): 10 spin, 01 delay. */
enum efm_technique {
	EFM_OFF = 0,		/* no marking: the reserved bits are left as they are */
	EFM_SPIN = 1,		/* spin bit; handshake code 10 (EFM_LOSS_BIT) */
	EFM_DELAY = 2,		/* delay bit; handshake code 01 (EFM_TIME_BIT) */
	EFM_TECHNIQUE_COUNT = 3,
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
	__u32 pad;
};

/* Endpoint state of one socket (socket storage). */
struct efm_sock {
	__u64 ds_time_ns;	/* client: when it last sent a delay sample (CLOCK_MONOTONIC, ns) */
	__u32 role;		/* enum efm_role */
	__u32 spin;		/* spin: time bit of the last segment received (0/1) */
	__u32 sample_pending;	/* delay: a received sample waits for the next segment out (0/1) */
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
	EFM_C_COUNT = 9,
};

#endif /* EFM_H */
