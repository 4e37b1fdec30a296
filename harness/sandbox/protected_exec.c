/*
 * protected-exec: run one protected executable that the caller may run but not read.
 *
 * Installed inside a sandbox setuid to a dedicated unprivileged owner (see
 * harness/sandbox/protected.py), next to the agent's files, compiled with
 * -DPROTECTED_TARGET='"<path of the real file in a directory only that owner can enter>"'.
 *
 *   1. While privileged (effective uid = the owner), open the real file with O_PATH:
 *      only the directory search needs the owner; the file is never opened for reading.
 *   2. Drop back fully to the caller's real uid and gid (setresgid/setresuid), and check.
 *   3. Remove from the environment every variable that makes the dynamic loader or the C
 *      library load or read code chosen by the caller (all LD_*, glibc's unsecure list).
 *   4. execveat(fd, "", argv, env, AT_EMPTY_PATH): argv exactly as given.
 *
 * The program then runs as the caller (files it writes are the caller's). The kernel marks
 * it non-dumpable because the caller cannot read the file it runs: no ptrace attach, no
 * /proc/<pid>/mem, maps or exe, no core dump. When the launcher itself is traced or runs
 * under no_new_privileges, the kernel ignores the setuid bit and step 1 fails: exit 126.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#ifndef PROTECTED_TARGET
#error "compile with -DPROTECTED_TARGET='\"/absolute/path\"'"
#endif

#ifndef AT_EMPTY_PATH
#define AT_EMPTY_PATH 0x1000
#endif

/* glibc's unsecure variables that are not LD_* (sysdeps/generic/unsecvars.h). glibc itself
 * already removes them (and TMPDIR) from a setuid program's environment before main; this
 * list keeps the launcher correct whatever C library it is linked with. */
static const char *const UNSECURE[] = {
    "GCONV_PATH", "GETCONF_DIR", "GLIBC_TUNABLES", "HOSTALIASES", "LOCALDOMAIN", "LOCPATH",
    "MALLOC_TRACE", "NIS_PATH", "NLSPATH", "RESOLV_HOST_CONF", "RES_OPTIONS", "TZDIR", NULL,
};

static int unsafe(const char *entry) {
    if (strncmp(entry, "LD_", 3) == 0) return 1;
    for (const char *const *name = UNSECURE; *name != NULL; name++) {
        size_t len = strlen(*name);
        if (strncmp(entry, *name, len) == 0 && (entry[len] == '=' || entry[len] == '\0')) return 1;
    }
    return 0;
}

static int fail(const char *what, int err) {
    fprintf(stderr, "protected-exec: %s: %s\n", what, strerror(err));
    return 126;
}

int main(int argc, char **argv, char **envp) {
    (void)argc;
    /* Not dumpable from here on (the kernel also does this for a setuid exec). */
    if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0) return fail("prctl", errno);
    int fd = open(PROTECTED_TARGET, O_PATH | O_CLOEXEC);
    int open_errno = errno;

    uid_t uid = getuid();
    gid_t gid = getgid();
    if (setresgid(gid, gid, gid) != 0) return fail("setresgid", errno);
    if (setresuid(uid, uid, uid) != 0) return fail("setresuid", errno);
    uid_t r, e, s;
    gid_t rg, eg, sg;
    if (getresuid(&r, &e, &s) != 0 || r != uid || e != uid || s != uid)
        return fail("dropping the owner's uid", EPERM);
    if (getresgid(&rg, &eg, &sg) != 0 || rg != gid || eg != gid || sg != gid)
        return fail("dropping the owner's gid", EPERM);
    if (fd < 0) {
        fprintf(stderr,
                "protected-exec: cannot open the protected program: %s "
                "(a traced launcher, or no_new_privileges, runs without its setuid owner)\n",
                strerror(open_errno));
        return 126;
    }

    size_t n = 0;
    for (char **p = envp; *p != NULL; p++) n++;
    char **env = calloc(n + 1, sizeof(char *));
    if (env == NULL) return fail("calloc", ENOMEM);
    size_t k = 0;
    for (char **p = envp; *p != NULL; p++)
        if (!unsafe(*p)) env[k++] = *p;
    env[k] = NULL;

    syscall(SYS_execveat, fd, "", argv, env, AT_EMPTY_PATH);
    return fail("execveat", errno);
}
