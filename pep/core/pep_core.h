/*
 * The compiled relay core's interface to the PEP's Python control plane (mec_pep/core.py
 * mirrors these structures with ctypes: change both together).
 *
 * Python opens the listeners, writes the settings and the access policy, and reads the
 * flow records and counters the core writes; the core calls no Python, per connection or
 * otherwise (docs/pep.md, "The compiled relay core").
 */
#ifndef PEP_CORE_H
#define PEP_CORE_H

#include <stdint.h>

#define PEP_CORE_MAX_THREADS 64
/* Per relay thread: the IPv4 and IPv6 listener of each mode (transparent, SOCKS5, TLV), then
 * with an MPTCP RAN leg one listener per intercepted port for the UEs' MP_JOINs (docs/pep.md,
 * "MPTCP RAN leg"). Python places them and says each one's mode (pep_core_config.modes). */
#define PEP_CORE_LISTENERS 22
#define PEP_CORE_MAX_RANGES 256
#define PEP_CORE_CC_NAME 16 /* TCP_CA_NAME_MAX */

/* Why a flow was refused (never established) or aborted (ended by RST): the index into
 * the counters' arrays; core.py maps each to the same text the Python relay counts. */
enum pep_reason {
	PEP_CLIENT_NOT_ALLOWED,
	PEP_FLOW_LIMIT,
	PEP_PER_CLIENT_LIMIT,
	PEP_DESTINATION_NOT_ALLOWED,
	PEP_WAN_SETUP_FAILED,
	PEP_CONNECT_FAILED,
	PEP_RESET_BY_PEER,
	PEP_IDLE_TIMEOUT,
	PEP_HALF_OPEN_TIMEOUT,
	PEP_SHUTDOWN,
	PEP_RESET_BY_API,
	PEP_BAD_HANDSHAKE,
	PEP_HANDSHAKE_TIMEOUT,
	PEP_CLOSED_IN_HANDSHAKE,
	PEP_RESET_IN_HANDSHAKE,
	PEP_REASONS
};

/* The explicit modes' stages come before the destination is known (relay/conn.py's names). */
enum pep_stage {
	PEP_FREE, PEP_CONNECTING, PEP_RELAYING, PEP_CLOSING,
	PEP_SOCKS_GREETING, PEP_SOCKS_REQUEST, PEP_TLV_HEADER
};

/* flows.ProxyMode: a listener's, and so its flows' */
enum pep_mode { PEP_MODE_TRANSPARENT, PEP_MODE_SOCKS5, PEP_MODE_TLV };

struct pep_core_config {
	uint32_t threads;
	int32_t listeners[PEP_CORE_MAX_THREADS][PEP_CORE_LISTENERS]; /* fds, -1 = none */
	uint8_t modes[PEP_CORE_LISTENERS]; /* enum pep_mode of each listener slot */
	int32_t cpus[PEP_CORE_MAX_THREADS]; /* pin relay thread i to this CPU; -1 = not */
	uint32_t max_flows;		    /* all clients together */
	uint32_t max_flows_per_client;
	uint64_t connect_timeout_ms; /* the WAN connect (PEP_HANDSHAKE_TIMEOUT) */
	uint64_t idle_timeout_ms;
	uint64_t half_open_timeout_ms;
	int32_t wan_rcvbuf, wan_sndbuf; /* bytes; 0 = the kernel's autotuning */
	uint8_t force_buffers;		/* SO_*BUFFORCE (CAP_NET_ADMIN), else SO_*BUF */
	uint8_t keep_ue_source;		/* WAN leg bound to the UE's address (IP_TRANSPARENT) */
	char ran_cc[PEP_CORE_CC_NAME], wan_cc[PEP_CORE_CC_NAME]; /* "" = namespace default */
	uint32_t buffer_bytes;		/* one relay buffer, held only while bytes are in it */
	uint32_t buffers;		/* per relay thread, a power of two */
	uint8_t events;			/* queue flow events for Python's hooks (extensions) */
	uint8_t ran_nodelay;		/* TCP_NODELAY on each RAN leg: an accepted MPTCP socket
					 * does not inherit it from its listener (a TCP one does) */
	uint8_t shared_table;		/* the relay threads keep the process's descriptor table
					 * and copy a socket by its number (Python decides: where
					 * pidfd_getfd is refused); else each unshares its own */
	uint32_t pipe_bytes;		/* one splice pipe (F_SETPIPE_SZ), held only while bytes are in it */
	uint32_t splice_after;		/* a flow's directions splice once it has relayed this many
					 * bytes (buffers before: cheaper for short flows); 0 = never */
	uint32_t tlv_max_buffer;	/* a TLV's BUFFER_SIZE is granted up to this */
};

/* One network of an access list; an address matches if (address & mask) == network. */
struct pep_range {
	uint8_t family; /* AF_INET or AF_INET6; IPv4 in the first 4 bytes */
	uint8_t network[16], mask[16];
};

/* Client ranges, then destination ranges, then the loopback destinations allowed (a
 * loopback destination needs an explicit entry even under 0.0.0.0/0: policy.py). */
struct pep_policy {
	uint32_t clients, destinations, loopback;
	struct pep_range range[PEP_CORE_MAX_RANGES];
};

/* A flow as the control plane sees it. The owning relay thread writes it; readers copy it
 * (pep_core_snapshot) and may see counters a moment old, never a record of another flow. */
struct pep_flow_record {
	uint64_t id;			/* 0 = the slot is free */
	uint32_t slot, thread;		/* where the flow lives in the core */
	uint8_t family, stage;		/* AF_INET/AF_INET6, enum pep_stage */
	uint8_t ue_eof, server_eof;	/* FIN received from that side (half-closed) */
	uint8_t mode;			/* enum pep_mode */
	uint8_t destination_family;	/* of destination and wan_local (an explicit mode's
					 * destination may differ from the UE's family) */
	uint16_t ue_port, destination_port, wan_port, ran_port; /* host order */
	uint8_t ue[16], destination[16], wan_local[16];
	uint8_t ran_local[16];		/* the RAN leg's local address (UE family): in transparent
					 * mode the destination, else the PEP's listener */
	int64_t created_ns, established_ns;	/* CLOCK_REALTIME; 0 = not yet */
	int64_t last_active_ns;			/* CLOCK_MONOTONIC */
	uint64_t bytes_to_ue, bytes_from_ue;	/* relayed: written to the other leg */
	int32_t ran_fd, wan_fd;
	uint32_t buffered_to_ue, buffered_to_server; /* bytes in the core's buffer or pipe */
};

/* What the extensions' hooks need to hear, queued per relay thread (pep_core_events):
 * a flow established, and an established flow ended. */
enum pep_event_kind { PEP_EVENT_ESTABLISHED = 1, PEP_EVENT_CLOSED = 2 };
struct pep_flow_event {
	uint64_t id;
	uint32_t slot;
	uint32_t kind; /* enum pep_event_kind */
};

struct pep_core_counters {
	uint64_t accepted, established, closed;
	uint64_t events_lost; /* the event queue was full (Python's hooks lag far behind) */
	uint64_t reader_wakes; /* events that woke the hooks' reader (pep_core_wait_events) */
	uint64_t bytes_to_ue, bytes_from_ue; /* relayed, flows that ended included */
	uint64_t spliced;		     /* directions that moved to the splice path */
	uint64_t pipes_in_use;		     /* now: pipes holding a direction's bytes */
	uint64_t ues_uncounted;		     /* flows of UEs beyond the per-UE table's room:
					      * their bytes from servers are not in pep_core_ue_totals */
	uint64_t refused[PEP_REASONS], aborted[PEP_REASONS];
};

/* Bytes the core read from servers for one UE since it started, over all its flows (ended
 * ones included): the arrival count of the UE's backlog (the backlog feed's received_bytes). */
struct pep_ue_total {
	uint8_t family; /* AF_INET or AF_INET6; IPv4 in the first 4 bytes */
	uint8_t address[16];
	uint64_t received;
};

/* An explicit mode's handshake, parsed by pep_core_handshake (pep_handshake.c) as
 * mec_pep/relay/handshake.py parses it for the Python relay; pep/tests/test_handshake.py
 * holds the two to the same answers. The input is everything the client sent so far. */
#define PEP_HANDSHAKE_LIMIT 512 /* bytes a header may take (handshake.HANDSHAKE_LIMIT) */
enum pep_parsed { PEP_PARSE_MORE, PEP_PARSE_DONE, PEP_PARSE_REFUSED };
struct pep_handshake {
	uint8_t stage;	    /* in and out: PEP_SOCKS_GREETING, PEP_SOCKS_REQUEST or PEP_TLV_HEADER */
	uint8_t reset;	    /* refused: end with an RST (else a FIN after the answer) */
	uint8_t answer_len; /* bytes of answer to send the client now (also when refused) */
	uint8_t family;	    /* done: the destination's AF_INET or AF_INET6 */
	uint16_t taken;	    /* in and out: bytes of the input the handshake has consumed */
	uint16_t port;	    /* done: the destination's */
	uint32_t buffer_size; /* done: TLV BUFFER_SIZE, 0 = none */
	uint8_t address[16];  /* done: the destination's; IPv4 in the first 4 bytes */
	uint8_t answer[12];   /* a SOCKS5 method reply, and a SOCKS5 refusal's reply */
};
int pep_core_handshake(struct pep_handshake *h, const uint8_t *data, uint32_t len);
/* A SOCKS5 reply (socks5.reply) with the address bound toward the server: its length. */
uint32_t pep_core_socks5_reply(uint8_t out[22], uint8_t code, int family, const uint8_t *address,
			       uint16_t port);

/* sizeof of each structure above, in order: core.py checks its mirror against them. */
extern const uint32_t pep_core_abi[8];

/* 0, or a negative errno with pep_core_error() saying what failed. */
int pep_core_start(const struct pep_core_config *config, const struct pep_policy *policy);
const char *pep_core_error(void);
void pep_core_stop(void);
void pep_core_set_policy(const struct pep_policy *policy);
/* Run-time changes of the limits, timeouts, WAN buffers, force_buffers and tlv_max_buffer
 * (the other fields are ignored); -ERANGE if max_flows exceeds the size given at start. */
int pep_core_set_limits(const struct pep_core_config *config);
const struct pep_core_counters *pep_core_counters(uint32_t thread);
uint32_t pep_core_live(void); /* flows held now */
/* Queued flow events of every relay thread, oldest first per thread. */
uint32_t pep_core_events(struct pep_flow_event *out, uint32_t room);
/* For the one reader of the events: pep_core_events, and if none is queued, first a sleep
 * until one is; 0 only after pep_core_release_events (from then on at once, until the next
 * start). A relay thread wakes the reader only when it has said it sleeps here, so a busy
 * reader costs the relay threads no system call per event. */
uint32_t pep_core_wait_events(struct pep_flow_event *out, uint32_t room);
void pep_core_release_events(void);
/* One flow's record, if the slot still holds flow `id`: 0, else -1. */
int pep_core_record(uint32_t slot, uint64_t id, struct pep_flow_record *out);
uint32_t pep_core_snapshot(struct pep_flow_record *out, uint32_t room);
/* Copies of a flow's sockets in the caller's descriptor table, to read them (TCP_INFO,
 * queues; -1 for a leg without a socket): 0 if the slot still holds flow `id`, -1 if it
 * ended. The caller closes the copies. */
int pep_core_hold(uint32_t slot, uint64_t id, int32_t fds[2]);
/* 1 if every relay thread has its own descriptor table (else the process's is shared:
 * config.shared_table, or unshare refused). */
int pep_core_private_tables(void);
/* Reset a flow (RST on both legs) in its relay thread; -1 if it has ended. */
int pep_core_reset(uint32_t slot, uint64_t id);
/* Replace listener slot `listener` of every relay thread by fds[thread] (the caller's
 * descriptor, -1 = none; the thread takes its own copy), the old one closed; returns once
 * every thread has done so: 0, else a negative errno. The caller then closes its copies. */
int pep_core_listen(uint32_t listener, const int32_t *fds);

/* The backlog feed's input (mec_pep/backlog.py holds the formula). A flow is marked when the
 * core reads bytes toward its UE; pep_core_toward_ue copies the records of marked flows from
 * slot *cursor on, clears their marks and moves *cursor past the last slot looked at (call
 * again while it returns `room`). The feed marks again (pep_core_mark_toward_ue) a flow it
 * found still holding bytes, so it is sampled until its backlog is seen at zero. */
uint32_t pep_core_toward_ue(uint32_t *cursor, struct pep_flow_record *out, uint32_t room);
void pep_core_mark_toward_ue(uint32_t slot, uint64_t id);
/* Every UE's bytes read from servers so far, in the order they were first seen. */
uint32_t pep_core_ue_totals(struct pep_ue_total *out, uint32_t room);

#endif
