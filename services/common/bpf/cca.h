/* SPDX-License-Identifier: GPL-2.0 */
/*
 * What the suite's BPF congestion controls share: MELD/RAPID on the PEP (pep/bpf/meld.bpf.c),
 * SIGMA on the UE (ue/bpf/sigma.bpf.c) and Prague at the L4S endpoints (l4s/bpf/prague.bpf.c).
 * Include it after vmlinux.h, bpf_helpers.h, bpf_endian.h and bpf_tracing.h.
 *
 * - the kernel's Reno and CUBIC as kfuncs, and the socket helpers every CCA needs;
 * - CCA_STRUCT_OPS: a congestion control that keeps the kernel's own Reno or CUBIC as its
 *   growth and reduction and changes what its hooks decide. MELD and SIGMA each register
 *   one over Reno and one over CUBIC, so their "off" is exactly the kernel's CCA.
 *
 * Style after the kernel's tools/testing/selftests/bpf/progs/bpf_cubic.c.
 */
#ifndef MTS_CCA_H
#define MTS_CCA_H

#define AF_INET 2
#define AF_INET6 10
#define NSEC_PER_SEC 1000000000ULL
#define USEC_PER_SEC 1000000ULL
#define NSEC_PER_USEC 1000ULL
#define TCP_INFINITE_SSTHRESH 0x7fffffffU
#define TCP_CONG_NON_RESTRICTED 0x1	/* include/net/tcp.h */
#define TCP_CONG_NEEDS_ECN 0x2

extern void cubictcp_init(struct sock *sk) __ksym;
extern __u32 cubictcp_recalc_ssthresh(struct sock *sk) __ksym;
extern void cubictcp_cong_avoid(struct sock *sk, __u32 ack, __u32 acked) __ksym;
extern void cubictcp_state(struct sock *sk, __u8 new_state) __ksym;
extern void cubictcp_cwnd_event(struct sock *sk, enum tcp_ca_event event) __ksym;
extern void cubictcp_acked(struct sock *sk, const struct ack_sample *sample) __ksym;
extern __u32 tcp_reno_ssthresh(struct sock *sk) __ksym;
extern void tcp_reno_cong_avoid(struct sock *sk, __u32 ack, __u32 acked) __ksym;
extern __u32 tcp_reno_undo_cwnd(struct sock *sk) __ksym;
extern __u32 tcp_slow_start(struct tcp_sock *tp, __u32 acked) __ksym;
extern void tcp_cong_avoid_ai(struct tcp_sock *tp, __u32 w, __u32 acked) __ksym;

static __always_inline struct tcp_sock *tcp_sk(const struct sock *sk)
{
	return (struct tcp_sock *)sk;
}

/*
 * The IPv4 address of one end of the socket, in network byte order: its peer's (remote) or
 * its own (!remote); a v4-mapped IPv6 address counts as IPv4; 0 for any other address.
 */
static __always_inline __u32 sk_ipv4(const struct sock *sk, bool remote)
{
	const struct sock_common *c = &sk->__sk_common;

	if (c->skc_family == AF_INET)
		return remote ? c->skc_daddr : c->skc_rcv_saddr;
	if (c->skc_family == AF_INET6) {
		const __u32 *a = remote ? c->skc_v6_daddr.in6_u.u6_addr32
					: c->skc_v6_rcv_saddr.in6_u.u6_addr32;

		if (a[0] == 0 && a[1] == 0 && a[2] == bpf_htonl(0xffff))
			return a[3];
	}
	return 0;
}

/* ---- a CCA over the kernel's Reno or CUBIC ---------------------------------------- */

/* The kernel CCA underneath; a constant at every call, so each program calls one. */
enum cca_base {
	CCA_RENO,
	CCA_CUBIC,
};

static __always_inline void base_init(struct sock *sk, enum cca_base base)
{
	if (base == CCA_CUBIC)
		cubictcp_init(sk);
}

static __always_inline __u32 base_ssthresh(struct sock *sk, enum cca_base base)
{
	return base == CCA_CUBIC ? cubictcp_recalc_ssthresh(sk) : tcp_reno_ssthresh(sk);
}

static __always_inline void base_cong_avoid(struct sock *sk, __u32 ack, __u32 acked,
					    enum cca_base base)
{
	if (base == CCA_CUBIC)
		cubictcp_cong_avoid(sk, ack, acked);
	else
		tcp_reno_cong_avoid(sk, ack, acked);
}

static __always_inline void base_set_state(struct sock *sk, __u8 new_state, enum cca_base base)
{
	if (base == CCA_CUBIC)
		cubictcp_state(sk, new_state);
}

static __always_inline void base_cwnd_event(struct sock *sk, enum tcp_ca_event event,
					    enum cca_base base)
{
	if (base == CCA_CUBIC)
		cubictcp_cwnd_event(sk, event);
}

static __always_inline void base_pkts_acked(struct sock *sk, const struct ack_sample *sample,
					    enum cca_base base)
{
	if (base == CCA_CUBIC)
		cubictcp_acked(sk, sample);
}

/*
 * CCA_STRUCT_OPS(meld, cubic, CCA_CUBIC, 0) registers the struct_ops `meld_cubic`. Its
 * hooks call the kernel CCA's and then these, which the including file defines:
 *
 *   void  cca_init(struct sock *sk);                        after the base's init
 *   __u32 cca_ssthresh(struct sock *sk, enum cca_base b);   at a loss: the new ssthresh;
 *                                                           base_ssthresh(sk, b) if it wants
 *   bool  cca_cong_avoid(struct sock *sk, __u32 acked);     true: it set cwnd, the base's
 *                                                           growth does not run
 *   void  cca_cwnd_event(struct sock *sk, enum tcp_ca_event event);
 *   void  cca_pkts_acked(struct sock *sk, const struct ack_sample *sample);
 *
 * undo_cwnd is Reno's for both bases, as the kernel's CUBIC has it.
 */
#define CCA_STRUCT_OPS(cca, base_name, base, ca_flags)					\
SEC("struct_ops")									\
void BPF_PROG(cca##_##base_name##_init, struct sock *sk)				\
{											\
	base_init(sk, base);								\
	cca_init(sk);									\
}											\
											\
SEC("struct_ops")									\
__u32 BPF_PROG(cca##_##base_name##_ssthresh, struct sock *sk)				\
{											\
	return cca_ssthresh(sk, base);							\
}											\
											\
SEC("struct_ops")									\
void BPF_PROG(cca##_##base_name##_cong_avoid, struct sock *sk, __u32 ack, __u32 acked)	\
{											\
	if (!cca_cong_avoid(sk, acked))							\
		base_cong_avoid(sk, ack, acked, base);					\
}											\
											\
SEC("struct_ops")									\
void BPF_PROG(cca##_##base_name##_set_state, struct sock *sk, __u8 new_state)		\
{											\
	base_set_state(sk, new_state, base);						\
}											\
											\
SEC("struct_ops")									\
__u32 BPF_PROG(cca##_##base_name##_undo_cwnd, struct sock *sk)				\
{											\
	return tcp_reno_undo_cwnd(sk);							\
}											\
											\
SEC("struct_ops")									\
void BPF_PROG(cca##_##base_name##_cwnd_event, struct sock *sk, enum tcp_ca_event event)	\
{											\
	base_cwnd_event(sk, event, base);						\
	cca_cwnd_event(sk, event);							\
}											\
											\
SEC("struct_ops")									\
void BPF_PROG(cca##_##base_name##_pkts_acked, struct sock *sk,				\
	      const struct ack_sample *sample)						\
{											\
	base_pkts_acked(sk, sample, base);						\
	cca_pkts_acked(sk, sample);							\
}											\
											\
SEC(".struct_ops")									\
struct tcp_congestion_ops cca##_##base_name = {						\
	.init		= (void *)cca##_##base_name##_init,				\
	.ssthresh	= (void *)cca##_##base_name##_ssthresh,				\
	.cong_avoid	= (void *)cca##_##base_name##_cong_avoid,			\
	.set_state	= (void *)cca##_##base_name##_set_state,			\
	.undo_cwnd	= (void *)cca##_##base_name##_undo_cwnd,			\
	.cwnd_event	= (void *)cca##_##base_name##_cwnd_event,			\
	.pkts_acked	= (void *)cca##_##base_name##_pkts_acked,			\
	.flags		= (ca_flags),							\
	.name		= #cca "_" #base_name,						\
}

#endif /* MTS_CCA_H */
