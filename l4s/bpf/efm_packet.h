/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Reading the IPv4 and TCP headers of a packet at tc, for the marker and the observer.
 * Every length is checked against the packet: a truncated or malformed header is
 * reported as such (the caller counts it) and never read past.
 */
#ifndef EFM_PACKET_H
#define EFM_PACKET_H

#include "efm.h"		/* the run of marked segments (struct efm_run, EFM_RUN_BIT) */

#define ETH_HLEN 14
#define ETH_P_IP 0x0800
#define IPPROTO_TCP 6
#define TCP_HLEN 20		/* TCP header without options */
#define TCP_BYTE12 12		/* offset of data offset + reserved bits in the TCP header */
#define TCP_CHECK 16		/* offset of the checksum in the TCP header */
#define TCP_FLAG_FIN 0x01
#define TCP_FLAG_SYN 0x02
#define TCP_FLAG_RST 0x04
#define TCP_FLAG_ACK 0x10

enum parse_result {
	PKT_OTHER = 0,		/* not an IPv4 TCP packet with a TCP header (or a later fragment) */
	PKT_TCP = 1,
	PKT_MALFORMED = 2,	/* IPv4 TCP, but truncated or inconsistent lengths */
};

/* The parts of one IPv4/TCP packet the programs need; offsets from skb->data. */
struct tcp_seg {
	__u32 tcp_off;		/* TCP header, bytes from skb->data */
	__u32 options_len;	/* bytes of TCP options */
	__u32 payload;		/* TCP payload bytes (from the IP total length) */
	__u32 seq, ack;		/* host order */
	__be32 saddr, daddr;
	__be16 sport, dport;
	__u8 byte12;		/* data offset and reserved bits */
	__u8 flags;		/* byte 13: CWR ECE URG ACK PSH RST SYN FIN */
	__u8 tos;		/* IP DS field (ECN in the low two bits) */
	__u8 ver_ihl;		/* IP byte 0 (version, header length) */
	__u32 ip_hlen;		/* IP header bytes */
};

/* l2: bytes of link-layer header before the IP header (14 Ethernet, 0 TUN). */
static __always_inline enum parse_result parse_tcp(struct __sk_buff *skb, __u32 l2,
						   struct tcp_seg *seg)
{
	struct iphdr ip;
	__u8 tcp[TCP_HLEN];
	__u32 ihl, doff, tot;

	if (skb->protocol != bpf_htons(ETH_P_IP))
		return PKT_OTHER;
	if (bpf_skb_load_bytes(skb, l2, &ip, sizeof(ip)))
		return PKT_OTHER;	/* shorter than an IP header: not ours to judge */
	if (ip.version != 4 || ip.protocol != IPPROTO_TCP)
		return PKT_OTHER;
	/* a non-first fragment has no TCP header */
	if (ip.frag_off & bpf_htons(0x1fff))
		return PKT_OTHER;
	ihl = ip.ihl * 4;
	tot = bpf_ntohs(ip.tot_len);
	if (ihl < sizeof(ip) || tot < ihl + TCP_HLEN)
		return PKT_MALFORMED;
	/* GSO skbs carry the whole super-packet; anything else must hold what IP says */
	if (!skb->gso_segs && skb->len < l2 + tot)
		return PKT_MALFORMED;
	seg->tcp_off = l2 + ihl;
	if (bpf_skb_load_bytes(skb, seg->tcp_off, tcp, sizeof(tcp)))
		return PKT_MALFORMED;
	doff = (tcp[TCP_BYTE12] >> 4) * 4;
	if (doff < TCP_HLEN || ihl + doff > tot)
		return PKT_MALFORMED;
	seg->options_len = doff - TCP_HLEN;
	seg->payload = tot - ihl - doff;
	seg->saddr = ip.saddr;
	seg->daddr = ip.daddr;
	seg->sport = *(__be16 *)&tcp[0];
	seg->dport = *(__be16 *)&tcp[2];
	seg->seq = bpf_ntohl(*(__be32 *)&tcp[4]);
	seg->ack = bpf_ntohl(*(__be32 *)&tcp[8]);
	seg->byte12 = tcp[TCP_BYTE12];
	seg->flags = tcp[TCP_BYTE12 + 1];
	seg->tos = ip.tos;
	seg->ver_ihl = 0x40 | ip.ihl;
	seg->ip_hlen = ihl;
	return PKT_TCP;
}

/*
 * EFM_DELAY_RUN's rule (efm.h), one owner for the endpoint and the observer: is this
 * marked segment a new delay sample, or the next piece of the run before it (same
 * parity and ack, starting where the run ended, as the segments of one GSO/TSO
 * super-packet)? Records the segment in the run either way. A reordered piece of a run
 * counts as a new sample (the observer's minimum-gap rule sets such a sample aside).
 */
static __always_inline bool efm_run_starts(struct efm_run *run, const struct tcp_seg *seg)
{
	__u32 parity = (seg->byte12 & EFM_RUN_BIT) ? 1 : 0;
	bool continues = run->active && parity == run->parity && seg->ack == run->ack &&
			 seg->seq == run->end;

	run->active = 1;
	run->parity = parity;
	run->ack = seg->ack;
	run->end = seg->seq + seg->payload;
	return !continues;
}

/* Serial-number comparison (RFC 1982 on 32 bits): a comes after b. */
static __always_inline bool efm_after(__u32 a, __u32 b)
{
	return (__s32)(a - b) > 0;
}

/*
 * The spin guard, one owner for the endpoints (efm_in) and the observer's filtered mode:
 * may this segment's spin value be followed? RFC 9000 §17.4 follows only the packet with
 * the highest number; TCP's numbers say more, and the rule uses it:
 *
 * - a segment whose data starts below the in-order end is old (reordered or resent);
 * - one that starts beyond it, after a hole, and does not continue the block already
 *   received beyond that hole is *the first segment beyond a new hole*: it overtook
 *   segments still in flight (they were sent before it, with the value it replaces) or it
 *   follows a lost one. Not followed: its value would come early by what it overtook,
 *   and the segment after it in a loss continues the block and is followed;
 * - its ack must not be below the highest of a followed segment;
 * - with `need_new` (the endpoints), it must bring something new, data or a higher ack:
 *   a repeat of the highest pair (a duplicate ACK) cannot be told from an older copy.
 *
 * One block beyond a hole is kept; the in-order end jumps over it when it reaches it. Two
 * holes at once (rare) make the block span both, and the second hole's segments count as
 * old.
 */
static __always_inline bool efm_follows(struct efm_order *o, const struct tcp_seg *seg,
					bool need_new)
{
	__u32 end = seg->seq + seg->payload;
	bool block = o->ooo_start != o->ooo_end;
	__s32 dack = (__s32)(seg->ack - o->hi_ack);

	if (!o->seen) {
		o->seen = 1;
		o->next = o->ooo_start = o->ooo_end = end;
		o->hi_ack = seg->ack;
		return true;
	}
	if (efm_after(seg->seq, o->next)) {
		bool continues = block && seg->seq == o->ooo_end;

		if (!block || efm_after(o->ooo_start, seg->seq))
			o->ooo_start = seg->seq;
		if (!block || efm_after(end, o->ooo_end))
			o->ooo_end = end;
		if (!continues || dack < 0)
			return false;
	} else {
		bool in_order = seg->seq == o->next;

		if (efm_after(end, o->next))
			o->next = end;
		if (block && !efm_after(o->ooo_start, o->next)) {
			if (efm_after(o->ooo_end, o->next))
				o->next = o->ooo_end;
			o->ooo_start = o->ooo_end = o->next;
		}
		if (!in_order || dack < 0 || (need_new && seg->payload == 0 && dack == 0))
			return false;
	}
	o->hi_ack = seg->ack;
	return true;
}

#endif /* EFM_PACKET_H */
