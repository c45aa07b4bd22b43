/*
 * The explicit modes' handshakes for the compiled relay core: SOCKS5 (RFC 1928, the subset
 * of mec_pep/socks5.py) and the TFO opt-in TLV (mec_pep/tlv.py, wire format in docs/pep.md).
 *
 * Python owns the contract: the core cannot call Python per connection, so the parse is
 * written again here, step for step in the same order, and pep/tests/test_handshake.py
 * feeds both the same bytes (known cases and random ones) and wants the same answers, the
 * same replies and the same choice between RST and FIN.
 */
#include "pep_core.h"

#include <string.h>
#include <sys/socket.h>

enum { SOCKS_VERSION = 5, NO_AUTH = 0x00, NO_ACCEPTABLE_METHOD = 0xff, CMD_CONNECT = 0x01 };
enum { ATYP_IPV4 = 0x01, ATYP_IPV6 = 0x04 };
enum { GENERAL_FAILURE = 0x01, HOST_UNREACHABLE = 0x04, COMMAND_NOT_SUPPORTED = 0x07,
       ADDRESS_TYPE_NOT_SUPPORTED = 0x08 };
enum { TLV_VERSION = 1, TLV_MAX_OPTIONS = 32, TLV_HEADER = 4, TLV_OPTION = 8 };
enum { TLV_CONNECT = 0x0a, TLV_BUFFER_SIZE = 0x0b, TLV_CONNECT6 = 0x0c, TLV_ADDRESS6 = 0x0d };

uint32_t pep_core_socks5_reply(uint8_t out[22], uint8_t code, int family, const uint8_t *address,
			       uint16_t port) {
	uint32_t size = family == AF_INET6 ? 16 : 4;
	out[0] = SOCKS_VERSION, out[1] = code, out[2] = 0;
	out[3] = family == AF_INET6 ? ATYP_IPV6 : ATYP_IPV4;
	memcpy(out + 4, address, size);
	out[4 + size] = (uint8_t)(port >> 8), out[5 + size] = (uint8_t)port;
	return 6 + size;
}

static void answer(struct pep_handshake *h, const uint8_t *bytes, uint32_t n) {
	memcpy(h->answer + h->answer_len, bytes, n);
	h->answer_len = (uint8_t)(h->answer_len + n);
}

static int refused(struct pep_handshake *h, int reset) {
	h->reset = (uint8_t)reset;
	return PEP_PARSE_REFUSED;
}

/* A refusal the client hears as a reply code (socks5.Socks5Error with a reply): a FIN after it. */
static int socks_refused(struct pep_handshake *h, uint8_t code) {
	static const uint8_t unbound[4];
	uint8_t reply[22];
	answer(h, reply, pep_core_socks5_reply(reply, code, AF_INET, unbound, 0));
	return refused(h, 0);
}

static int unspecified(const uint8_t *address, uint32_t size) {
	static const uint8_t zero[16];
	return !memcmp(address, zero, size);
}

static int destination(struct pep_handshake *h, int family, uint16_t port) {
	h->family = (uint8_t)family, h->port = port;
	return !port || unspecified(h->address, family == AF_INET6 ? 16 : 4);
}

/* VER NMETHODS METHODS: PEP_PARSE_DONE once answered (the request comes next). */
static int socks_greeting(struct pep_handshake *h, const uint8_t *d, uint32_t n) {
	static const uint8_t no_auth[2] = {SOCKS_VERSION, NO_AUTH};
	static const uint8_t none_acceptable[2] = {SOCKS_VERSION, NO_ACCEPTABLE_METHOD};
	if (n < 2) return n && d[0] != SOCKS_VERSION ? refused(h, 1) : PEP_PARSE_MORE;
	if (d[0] != SOCKS_VERSION || !d[1]) return refused(h, 1);
	if (n < 2u + d[1]) return PEP_PARSE_MORE;
	if (!memchr(d + 2, NO_AUTH, d[1])) {
		answer(h, none_acceptable, 2);
		return refused(h, 1);
	}
	answer(h, no_auth, 2);
	h->taken = (uint16_t)(h->taken + 2 + d[1]);
	h->stage = PEP_SOCKS_REQUEST;
	return PEP_PARSE_DONE;
}

/* VER CMD RSV ATYP DST.ADDR DST.PORT */
static int socks_request(struct pep_handshake *h, const uint8_t *d, uint32_t n) {
	if (n < 4) return PEP_PARSE_MORE;
	if (d[0] != SOCKS_VERSION || d[2]) return socks_refused(h, GENERAL_FAILURE);
	if (d[1] != CMD_CONNECT) return socks_refused(h, COMMAND_NOT_SUPPORTED);
	uint32_t size = d[3] == ATYP_IPV4 ? 4 : d[3] == ATYP_IPV6 ? 16 : 0;
	if (!size) return socks_refused(h, ADDRESS_TYPE_NOT_SUPPORTED); /* no resolver on the PEP */
	if (n < 6 + size) return PEP_PARSE_MORE;
	memcpy(h->address, d + 4, size);
	if (destination(h, size == 16 ? AF_INET6 : AF_INET, (uint16_t)(d[4 + size] << 8 | d[5 + size])))
		return socks_refused(h, HOST_UNREACHABLE);
	h->taken = (uint16_t)(h->taken + 6 + size);
	return PEP_PARSE_DONE;
}

static int socks5(struct pep_handshake *h, const uint8_t *d, uint32_t n) {
	if (h->stage == PEP_SOCKS_GREETING) {
		int greeted = socks_greeting(h, d, n);
		if (greeted != PEP_PARSE_DONE) return greeted;
	}
	int parsed = socks_request(h, d + h->taken, n - h->taken);
	if (parsed == PEP_PARSE_MORE && n - h->taken > PEP_HANDSHAKE_LIMIT)
		return socks_refused(h, GENERAL_FAILURE); /* request too long */
	return parsed;
}

/* CONNECT6 and the two ADDRESS6 right after it: the 16 address bytes in network order. */
static int tlv_connect6(struct pep_handshake *h, const uint8_t *o, uint32_t rest) {
	const uint8_t *a = o + TLV_OPTION, *b = a + TLV_OPTION;
	if (o[1] != 6 || rest < 2 || a[0] != TLV_ADDRESS6 || a[1] != 6 || b[0] != TLV_ADDRESS6 ||
	    b[1] != 6)
		return refused(h, 1);
	memcpy(h->address, o + 4, 4);
	memcpy(h->address + 4, a + 2, 6);
	memcpy(h->address + 10, b + 2, 6);
	return destination(h, AF_INET6, (uint16_t)(o[2] << 8 | o[3])) ? refused(h, 1) : PEP_PARSE_DONE;
}

static int tlv_connect(struct pep_handshake *h, const uint8_t *o) {
	if (o[1] != 6) return refused(h, 1);
	memcpy(h->address, o + 4, 4);
	return destination(h, AF_INET, (uint16_t)(o[2] << 8 | o[3])) ? refused(h, 1) : PEP_PARSE_DONE;
}

/* The options in order; unknown types with a valid length are skipped. */
static int tlv_options(struct pep_handshake *h, const uint8_t *d, uint32_t count) {
	int found = 0;
	for (uint32_t i = 0; i < count; i++) {
		const uint8_t *o = d + TLV_HEADER + TLV_OPTION * i;
		int parsed = PEP_PARSE_DONE;
		if (o[1] != 2 && o[1] != 6) return refused(h, 1);
		if (o[0] == TLV_CONNECT || o[0] == TLV_CONNECT6) {
			if (found++) return refused(h, 1); /* more than one CONNECT */
			if (o[0] == TLV_CONNECT) parsed = tlv_connect(h, o);
			else parsed = tlv_connect6(h, o, count - 1 - i), i += 2;
		} else if (o[0] == TLV_ADDRESS6) {
			return refused(h, 1); /* without CONNECT6 right before it */
		} else if (o[0] == TLV_BUFFER_SIZE) {
			if (o[1] != 6) return refused(h, 1);
			h->buffer_size = (uint32_t)o[4] | (uint32_t)o[5] << 8 | (uint32_t)o[6] << 16 |
					 (uint32_t)o[7] << 24;
		}
		if (parsed != PEP_PARSE_DONE) return parsed;
	}
	return found ? PEP_PARSE_DONE : refused(h, 1);
}

static int tlv(struct pep_handshake *h, const uint8_t *d, uint32_t n) {
	if (n < 1) return PEP_PARSE_MORE;
	if (d[0] != TLV_VERSION) return refused(h, 1);
	if (n < TLV_HEADER) return PEP_PARSE_MORE;
	if (d[2] != 0xef || d[3] != 0xbe) return refused(h, 1); /* magic 0xBEEF, little-endian */
	uint32_t count = d[1], length = TLV_HEADER + TLV_OPTION * count;
	if (!count || count > TLV_MAX_OPTIONS) return refused(h, 1);
	if (n < length) return n > PEP_HANDSHAKE_LIMIT ? refused(h, 1) : PEP_PARSE_MORE;
	int parsed = tlv_options(h, d, count);
	if (parsed == PEP_PARSE_DONE) h->taken = (uint16_t)length;
	return parsed;
}

int pep_core_handshake(struct pep_handshake *h, const uint8_t *data, uint32_t len) {
	h->reset = 0, h->answer_len = 0, h->buffer_size = 0;
	if (h->taken > len) return refused(h, 1); /* the caller's mistake: never relay on it */
	return h->stage == PEP_TLV_HEADER ? tlv(h, data, len) : socks5(h, data, len);
}
