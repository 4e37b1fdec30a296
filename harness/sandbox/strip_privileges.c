/*
 * strip-privileges: remove every privilege-granting file attribute from one filesystem.
 *
 * Walks the tree under argv[1] without crossing mount points or following links and, for
 * every regular file: clears the setuid and setgid bits and removes the
 * "security.capability" extended attribute (file capabilities). The attribute is removed by
 * a chown to the same owner (the kernel drops it on every chown), which, unlike
 * removexattr, does not need CAP_SETFCAP (sandboxes drop it). Run once as root when a
 * sandbox is prepared (harness/sandbox/protected.py), so that the only privilege
 * transition left in the sandbox is the protected-exec launcher installed after it.
 * Prints one line per changed file; exits 1 if any change failed.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <ftw.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

static int failures = 0;

static int visit(const char *path, const struct stat *st, int type, struct FTW *ftw) {
    (void)ftw;
    if (type != FTW_F || !S_ISREG(st->st_mode)) return 0;
    if (st->st_mode & (S_ISUID | S_ISGID)) {
        if (chmod(path, st->st_mode & 07777 & ~(S_ISUID | S_ISGID)) == 0) {
            printf("setid %s\n", path);
        } else {
            fprintf(stderr, "strip-privileges: chmod %s: %s\n", path, strerror(errno));
            failures++;
        }
    }
    if (lgetxattr(path, "security.capability", NULL, 0) >= 0) {
        if (lchown(path, st->st_uid, st->st_gid) != 0) {
            fprintf(stderr, "strip-privileges: chown %s: %s\n", path, strerror(errno));
            failures++;
        } else if (lgetxattr(path, "security.capability", NULL, 0) >= 0) {
            fprintf(stderr, "strip-privileges: %s keeps its file capabilities\n", path);
            failures++;
        } else {
            printf("fcaps %s\n", path);
        }
    }
    return 0;
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: strip-privileges DIR\n");
        return 2;
    }
    if (nftw(argv[1], visit, 64, FTW_PHYS | FTW_MOUNT) != 0) {
        fprintf(stderr, "strip-privileges: walking %s: %s\n", argv[1], strerror(errno));
        return 1;
    }
    return failures ? 1 : 0;
}
