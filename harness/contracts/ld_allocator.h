/*
 * The process's large allocations kept in the heap (issue 15). A diff allocates and drops typed arrays of
 * 16–64 MiB by the thousand (a routed expert's FP16 copy, its exact FP32 rows, a head chunk's logits). glibc
 * serves every block over its mmap threshold (128 KiB, rising to at most 32 MiB) with a fresh mmap and unmaps it
 * on free, so each new array is faulted in page by page again: on the virtual machines this tool runs on, a
 * 4 KiB first-touch fault costs ~3–11 µs, which made a 16 MiB allocation cost more than dequantizing into it
 * (measured: 16 MiB new+fill 10–45 ms with the defaults, 3 ms with these settings) and a wide 2-layer diff 55 s
 * instead of 39 s.
 * With the threshold at 1 GiB and the heap trimmed only past 1 GiB of free top, freed blocks are reused
 * (calloc clears them with memset, at memory speed) and the peak RSS stays what the live arrays need (the
 * diff's streaming bound is unchanged: 3.1 → 3.2 GiB on the wide fixture). Values only: no numerics depend on it.
 * Both addons call it on load (mallopt is process-wide and idempotent); LAYERDIFF_MALLOC=system keeps glibc's
 * defaults (to measure the difference, or under a custom allocator). Huge pages are the other half, and glibc
 * takes them only from its start-up tunables: the CLI starts its runs in a child with glibc.malloc.hugetlb=1
 * (harness/cli/supervise.ts).
 */
#ifndef LD_ALLOCATOR_H
#define LD_ALLOCATOR_H

#include <stdlib.h>
#include <string.h>
#if defined(__GLIBC__)
#include <malloc.h>
#endif

static inline void ld_tune_allocator(void) {
#if defined(__GLIBC__)
  const char* mode = getenv("LAYERDIFF_MALLOC");
  if (mode != NULL && strcmp(mode, "system") == 0) return;
  mallopt(M_MMAP_THRESHOLD, 1 << 30);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
#endif
}

#endif
