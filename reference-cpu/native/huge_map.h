// File mappings laid out for the page cache's 2 MiB folios (reference-cpu/native/check_f16.cc's mapped rows and
// file_io.cc's read-ahead, read-only; file_io.cc's mapped tensors, copy-on-write). A 2 MiB folio is mapped by one PMD entry only where the mapping's address and
// the file offset agree modulo 2 MiB and the mapping spans the folio's whole extent; otherwise, and for folios of
// 4 KiB, every page is a PTE of its own, set by a fault (on this kind of VM ~2 GB/s mapped that way, against
// 15–40 GB/s through PMD entries: scripts/bench/HISTORY.md, rounds 38 and 39).
#pragma once

#include <sys/mman.h>

#include <cstddef>
#include <cstdint>

#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22  // Linux 5.14's value, for older headers (the call then fails with EINVAL, harmlessly)
#endif

namespace ld {

constexpr int64_t kExtent = int64_t{2} << 20;

// [offset, offset + span) of fd (offset a multiple of kExtent) mapped at an address that is a multiple of kExtent,
// advised MADV_HUGEPAGE (a page the page cache lacks is then read in as its extent's 2 MiB folio); nullptr where it
// cannot be. Unmap with munmap(p, span). PROT_READ and MAP_SHARED, or with `copy_on_write` PROT_READ | PROT_WRITE
// and MAP_PRIVATE (file_io.cc's mapped tensors: a write copies the page for this process, never the file).
inline uint8_t* map_extents(int fd, int64_t offset, size_t span, bool copy_on_write = false) {
  const size_t slack = static_cast<size_t>(kExtent);
  void* r = mmap(nullptr, span + slack, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (r == MAP_FAILED) return nullptr;
  const uintptr_t r0 = reinterpret_cast<uintptr_t>(r), at = (r0 + slack - 1) & ~static_cast<uintptr_t>(slack - 1);
  // MAP_NORESERVE: a private writable mapping would otherwise be charged to the commit limit for its whole span
  // (under vm.overcommit_memory=2 a refusal), though nothing here writes to it
  const int prot = copy_on_write ? PROT_READ | PROT_WRITE : PROT_READ, flags = copy_on_write ? MAP_PRIVATE | MAP_NORESERVE : MAP_SHARED;
  void* m = mmap(reinterpret_cast<void*>(at), span, prot, flags | MAP_FIXED, fd, static_cast<off_t>(offset));
  if (m == MAP_FAILED) {
    munmap(r, span + slack);
    return nullptr;
  }
  // the reservation's slack either side of the file mapping
  if (at > r0) munmap(r, at - r0);
  const uintptr_t end = at + span, rend = r0 + span + slack;
  if (rend > end) munmap(reinterpret_cast<void*>(end), rend - end);
  madvise(m, span, MADV_HUGEPAGE);  // a kernel without transparent huge pages refuses it (EINVAL), harmlessly
  return static_cast<uint8_t*>(m);
}

// [offset, offset + length) of fd read into the page cache, as 2 MiB folios where it was missing, before this
// returns (file_io.cc's read_ahead on the calling thread), for a caller about to read it with pread
void read_in(int fd, int64_t offset, int64_t length);

}  // namespace ld
