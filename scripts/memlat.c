/* Memory latency of this machine: a dependent pointer chase over a random
 * cyclic permutation of 64-byte lines (every load waits for the previous
 * one), and independent random loads of the same lines, in a buffer of
 * N MiB backed by transparent huge pages (1) or not (0).
 *
 *   cc -O2 -o /tmp/memlat scripts/memlat.c && /tmp/memlat 96 1
 *
 * Used to read the storage benchmark: a GET of a lone key costs two such
 * dependent misses (index bucket, then item) once the cache outgrows the
 * CPU caches. See crates/bench/README.md and BENCHMARKS.md. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
    size_t mib = argc > 1 ? (size_t)atol(argv[1]) : 96;
    int huge = argc > 2 ? atoi(argv[2]) : 1;
    size_t sz = mib << 20, align = 2 << 20;
    char *raw = mmap(0, sz + align, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (raw == MAP_FAILED) return 1;
    char *p = (char *)(((uintptr_t)raw + align - 1) & ~(uintptr_t)(align - 1));
    if (huge) madvise(p, sz, MADV_HUGEPAGE);
    size_t n = sz / 64;
    uint64_t *perm = malloc(n * sizeof *perm), x = 88172645463325252ull;
    for (size_t i = 0; i < n; i++) perm[i] = i;
    for (size_t i = n - 1; i > 0; i--) {
        x ^= x << 13; x ^= x >> 7; x ^= x << 17;
        size_t k = x % (i + 1);
        uint64_t t = perm[i]; perm[i] = perm[k]; perm[k] = t;
    }
    for (size_t i = 0; i < n; i++) *(uint64_t *)(p + perm[i] * 64) = perm[(i + 1) % n] * 64;
    size_t loads = 5000000;
    double t = now();
    uint64_t j = perm[0] * 64;
    for (size_t i = 0; i < loads; i++) j = *(uint64_t *)(p + j);
    double dep = (now() - t) / loads * 1e9;
    t = now();
    uint64_t s = 0;
    for (size_t i = 0; i < loads; i++) s += *(uint64_t *)(p + perm[i % n] * 64);
    double ind = (now() - t) / loads * 1e9;
    printf("%zu MiB, huge pages %d: dependent load %.1f ns, independent loads %.1f ns each (%llu)\n",
           mib, huge, dep, ind, (unsigned long long)(j + s));
    return 0;
}
