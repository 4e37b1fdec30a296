/* The engine probe: what a Docker engine's host has free, read from inside a container.
 *
 * Built with gcc -static by harness.sandbox.static_tools, put alone in an image
 * (harness.sandbox.engine_capacity) and run with no network. Prints one "key value" line
 * each: the host's memory (/proc/meminfo: a container without LXCFS sees the host's), the
 * memory stall share (/proc/pressure/memory, when the kernel has PSI) and the free and
 * total bytes of the file system under the container's root (the engine's data root).
 */
#include <stdio.h>
#include <string.h>
#include <sys/statvfs.h>

static void meminfo(void) {
    FILE *f = fopen("/proc/meminfo", "r");
    char line[256];
    unsigned long long kb;
    if (f == NULL) return;
    while (fgets(line, sizeof line, f) != NULL) {
        if (sscanf(line, "MemTotal: %llu kB", &kb) == 1) printf("mem_total %llu\n", kb * 1024);
        if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1)
            printf("mem_available %llu\n", kb * 1024);
    }
    fclose(f);
}

static void pressure(void) {
    FILE *f = fopen("/proc/pressure/memory", "r");
    char line[256];
    double avg10;
    if (f == NULL) return;
    while (fgets(line, sizeof line, f) != NULL) {
        if (sscanf(line, "full avg10=%lf", &avg10) == 1) printf("psi_full_avg10 %.2f\n", avg10);
    }
    fclose(f);
}

static void disk(void) {
    struct statvfs st;
    if (statvfs("/", &st) != 0) return;
    printf("disk_free %llu\n", (unsigned long long)st.f_bavail * st.f_frsize);
    printf("disk_total %llu\n", (unsigned long long)st.f_blocks * st.f_frsize);
}

int main(void) {
    meminfo();
    pressure();
    disk();
    return 0;
}
