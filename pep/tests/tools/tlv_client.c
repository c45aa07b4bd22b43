/* Test client for pep_tlv.h.
 *   tlv_client encode IP PORT [BUFFER]        prints the TLV as hex
 *   tlv_client echo PEP_IP PEP_PORT IP PORT   connects through the PEP, sends the echo
 *                                             request of the test server, prints the echo
 */
#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "pep_tlv.h"

static struct sockaddr_in address(const char *ip, const char *port)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(port)) };

	if (inet_pton(AF_INET, ip, &a.sin_addr) != 1)
		exit(2);
	return a;
}

int main(int argc, char **argv)
{
	if (argc >= 4 && !strcmp(argv[1], "encode")) {
		struct sockaddr_in dst = address(argv[2], argv[3]);
		uint8_t tlv[PEP_TLV_MAX_LEN];
		size_t n = pep_tlv_encode(tlv, &dst, argc > 4 ? (uint32_t)strtoul(argv[4], NULL, 0) : 0);

		for (size_t i = 0; i < n; i++)
			printf("%02x", tlv[i]);
		printf("\n");
		return 0;
	}
	if (argc == 6 && !strcmp(argv[1], "echo")) {
		struct sockaddr_in pep = address(argv[2], argv[3]), dst = address(argv[4], argv[5]);
		/* the test server's request: 'E' + 8-byte size (unused), then the payload */
		static const uint8_t req[] = { 'E', 0, 0, 0, 0, 0, 0, 0, 0, 'h', 'e', 'l', 'l', 'o' };
		char buf[5];
		int fd = socket(AF_INET, SOCK_STREAM, 0);

		if (fd < 0 || pep_connect(fd, (struct sockaddr *)&dst, sizeof(dst), &pep, 0) < 0) {
			perror("pep_connect");
			return 1;
		}
		if (pep_send_all(fd, req, sizeof(req)) < 0 || recv(fd, buf, 5, MSG_WAITALL) != 5) {
			perror("echo");
			return 1;
		}
		printf("%.5s\n", buf);
		close(fd);
		return 0;
	}
	fprintf(stderr, "usage: tlv_client encode IP PORT [BUFFER] | echo PEP_IP PEP_PORT IP PORT\n");
	return 2;
}
