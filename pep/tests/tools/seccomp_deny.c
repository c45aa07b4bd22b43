/* Runs a command with one system call refused (EPERM) by a seccomp filter, as containerd's
 * and Docker's RuntimeDefault profiles refuse unshare(2) to a container without SYS_ADMIN,
 * Docker's since 25.0 io_uring_setup(2), and Docker's pidfd_getfd(2) without CAP_SYS_PTRACE
 * (test_seccomp.py: the PEP's relay threads keep the process's descriptor table;
 * test_relay_choice.py: PEP_RELAY_CORE=auto takes the Python relay, uring refuses). */
#include <errno.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

static const struct {
    const char *name;
    unsigned int nr;
} CALLS[] = {{"unshare", __NR_unshare},
             {"io_uring_setup", __NR_io_uring_setup},
             {"pidfd_getfd", __NR_pidfd_getfd}};

int main(int argc, char **argv) {
    int call = -1;
    for (size_t i = 0; argc >= 3 && i < sizeof CALLS / sizeof CALLS[0]; i++)
        if (!strcmp(argv[1], CALLS[i].name)) call = (int)i;
    if (call < 0) {
        fprintf(stderr, "usage: seccomp_deny unshare|io_uring_setup|pidfd_getfd COMMAND [ARG...]\n");
        return 2;
    }
    struct sock_filter filter[] = {
        /* another architecture's system call numbers mean other calls: refuse them all */
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AUDIT_ARCH_X86_64, 1, 0),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS),
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, CALLS[call].nr, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (EPERM & SECCOMP_RET_DATA)),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    };
    struct sock_fprog program = {sizeof filter / sizeof filter[0], filter};
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 ||
        prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &program) != 0) {
        perror("seccomp");
        return 1;
    }
    execvp(argv[2], argv + 2);
    perror(argv[2]);
    return 127;
}
