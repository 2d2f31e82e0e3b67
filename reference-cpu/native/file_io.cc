// The core's file primitives Node lacks (harness/io/prefetch.ts, harness/io/map.ts), in this addon because every
// run loads it: posix_fadvise read-ahead and a private, copy-on-write mapping of a file range.
#include <fcntl.h>
#include <napi.h>
#include <v8.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <system_error>
#include <thread>
#include <unordered_map>
#include <vector>

#include "huge_map.h"

namespace {

// The read-ahead itself: bytes [off, off + len) of fd into the page cache, as 2 MiB folios where they are missing.
// POSIX_FADV_WILLNEED reads them in as 4 KiB folios, and a page cache of those made every later mapped reader of
// the file slow (round 38: ~2 GB/s mapped, against 15–40 GB/s from 2 MiB folios through PMD entries) and kept the
// weights check's mapped rows from being used (check_f16.cc). So each kStep of the range that cachestat does not
// find cached whole is mapped as huge_map.h lays it out, mincore finds the 2 MiB extents with a page missing, and
// MADV_POPULATE_READ faults those in, which under MADV_HUGEPAGE reads each as one folio; cached extents are left as
// they are (populating 4 KiB folios only maps them, at the cost above, for nothing). The mapping is then dropped: the pages stay in the page cache and
// leave this process. Where a step cannot be mapped, or the kernel lacks MADV_POPULATE_READ (before 5.14), the
// step is advised WILLNEED as before. A file truncated meanwhile ends the populate with an error, not a fault.
// cachestat(2) (Linux 6.5), declared here for older headers: the pages of a byte range the page cache holds, counted
// a folio at a time (mincore asks page by page: ~18 ms over a wide layer's 3.55 GB, all cached, against well under
// one with this). An older kernel answers ENOSYS, and mincore is asked.
struct CachestatRange {
  uint64_t off, len;
};
struct Cachestat {
  uint64_t nr_cache, nr_dirty, nr_writeback, nr_evicted, nr_recently_evicted;
};
#ifndef __NR_cachestat
#define __NR_cachestat 451  // the same number on every architecture Linux numbers from the generic table
#endif

// whether every page of [a, b) is in the page cache, by cachestat; false where it cannot tell
bool all_cached(int fd, int64_t a, int64_t b, int64_t page) {
  CachestatRange r{static_cast<uint64_t>(a), static_cast<uint64_t>(b - a)};
  Cachestat c{};
  return syscall(__NR_cachestat, fd, &r, &c, 0) == 0 && static_cast<int64_t>(c.nr_cache) * page >= b - a;
}

void read_ahead(int fd, off_t off, off_t len) {
  struct stat st;
  // mincore answers for the page cache only to a file's owner or a writer (Linux 5.2, against a side channel); to
  // others every page looks missing, and populating what is cached in 4 KiB folios maps them at the cost above, for
  // nothing: a file this process does not own is advised WILLNEED
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || (st.st_uid != geteuid() && geteuid() != 0)) {
    posix_fadvise(fd, off, len, POSIX_FADV_WILLNEED);
    return;
  }
  const int64_t page = sysconf(_SC_PAGESIZE), size = st.st_size;
  const int64_t end = std::min<int64_t>(len == 0 ? size : off + len, size);
  constexpr int64_t kStep = int64_t{64} << 20;  // mapped at once: at most this much is in this process's RSS
  std::vector<unsigned char> resident;
  for (int64_t a = off / ld::kExtent * ld::kExtent; a < end; a += kStep) {
    const int64_t b = std::min(a + kStep, (end + page - 1) / page * page);
    if (all_cached(fd, a, b, page)) continue;
    const size_t span = static_cast<size_t>(b - a);
    uint8_t* m = ld::map_extents(fd, a, span);
    resident.resize((span + static_cast<size_t>(page) - 1) / static_cast<size_t>(page));
    if (m == nullptr || mincore(m, span, resident.data()) != 0) {
      if (m != nullptr) munmap(m, span);
      posix_fadvise(fd, a, b - a, POSIX_FADV_WILLNEED);
      continue;
    }
    const size_t per = static_cast<size_t>(ld::kExtent / page);
    bool refused = false;
    for (size_t e = 0; e * per < resident.size() && !refused; e++) {
      const size_t p0 = e * per, p1 = std::min(resident.size(), p0 + per);
      bool missing = false;
      for (size_t p = p0; p < p1 && !missing; p++) missing = (resident[p] & 1) == 0;
      if (!missing) continue;
      const size_t at = p0 * static_cast<size_t>(page), n = std::min(span, p1 * static_cast<size_t>(page)) - at;
      if (madvise(m + at, n, MADV_POPULATE_READ) != 0 && errno == EINVAL) refused = true;
    }
    munmap(m, span);
    if (refused) posix_fadvise(fd, a, b - a, POSIX_FADV_WILLNEED);
  }
}

// willNeed(fd, offset, length): read a byte range into the page cache ahead of its use (read_ahead above), so a
// later read finds it there (the weights check's read-ahead, the diff's next layer). Advice only: an error (a pipe,
// an old kernel) is ignored. It is given on a background thread, on a duplicate of the descriptor (so closing the
// file meanwhile harms nothing): the caller asks it for the next layer while it has the current one to check
// (POSIX_FADV_WILLNEED alone walked every page of the range even when all were cached, ~0.1 s a wide DeepSeek-V4
// layer of 3.55 GB here). Returns whether the advice was queued.
class Advisor {
 public:
  // → the advice's number (1, 2, … in the order given), 0 where it was not queued
  uint64_t push(int fd, off_t off, off_t len) {
    const int d = fcntl(fd, F_DUPFD_CLOEXEC, 0);
    if (d < 0) return 0;
    uint64_t seq = 0;
    {
      std::lock_guard<std::mutex> lock(m_);
      // advice the thread has not reached yet is dropped past kMaxQueued (a caller far ahead of the disk gains
      // nothing from more), and none is given where the thread cannot be started
      bool queued = q_.size() < kMaxQueued;
      if (queued && !started_) {
        try {
          std::thread([this] { run(); }).detach();
          started_ = true;
        } catch (const std::system_error&) {
          queued = false;
        }
      }
      if (!queued) {
        close(d);
        return 0;
      }
      seq = ++given_;
      q_.push_back({d, off, len, seq});
    }
    cv_.notify_one();
    return seq;
  }
  // the number of the last advice queued (0: none yet)
  uint64_t mark() {
    std::lock_guard<std::mutex> lock(m_);
    return given_;
  }
  // until every advice numbered up to seq has been carried out
  void wait(uint64_t seq) {
    std::unique_lock<std::mutex> lock(m_);
    done_cv_.wait(lock, [&] { return done_ >= seq; });
  }

 private:
  struct Advice {
    int fd;
    off_t off, len;
    uint64_t seq;
  };
  void run() {
    for (;;) {
      Advice a;
      {
        std::unique_lock<std::mutex> lock(m_);
        cv_.wait(lock, [this] { return !q_.empty(); });
        a = q_.front();
        q_.pop_front();
      }
      read_ahead(a.fd, a.off, a.len);
      close(a.fd);
      {
        std::lock_guard<std::mutex> lock(m_);
        done_ = a.seq;  // in order: the queue is first in, first out
      }
      done_cv_.notify_all();
    }
  }
  std::mutex m_;
  std::condition_variable cv_, done_cv_;
  static constexpr size_t kMaxQueued = 4096;
  std::deque<Advice> q_;
  uint64_t given_ = 0, done_ = 0;
  bool started_ = false;
};

Advisor& advisor() {
  static Advisor* a = new Advisor();  // never destroyed: its thread outlives every caller
  return *a;
}

Napi::Value will_need(const Napi::CallbackInfo& info) {
  if (info.Length() < 3 || !info[0].IsNumber() || !info[1].IsNumber() || !info[2].IsNumber()) throw Napi::TypeError::New(info.Env(), "willNeed: expected (fd, offset, length)");
  const int fd = info[0].As<Napi::Number>().Int32Value();
  const double off = info[1].As<Napi::Number>().DoubleValue(), len = info[2].As<Napi::Number>().DoubleValue();
  if (!(off >= 0 && len >= 0)) throw Napi::RangeError::New(info.Env(), "willNeed: offset and length must be ≥ 0");
  return Napi::Boolean::New(info.Env(), advisor().push(fd, static_cast<off_t>(off), static_cast<off_t>(len)) != 0);
}

// readIn(fd, offset, length): read_ahead on this thread, returning once the range is in the page cache (as 2 MiB
// folios where it was missing), for a caller about to pread it: its own reads would leave what they bring in as the
// kernel's read-ahead sizes it, smaller folios that every later mapped reader pays a fault a page for, and that keep
// their extents from ever being one folio while cached (round 41: the FP16 cache's layer files, hashed through
// pread by a first load after a convert, were left 3–7 % PMD-mappable). Advice only, as willNeed: errors are ignored.
Napi::Value read_in(const Napi::CallbackInfo& info) {
  if (info.Length() < 3 || !info[0].IsNumber() || !info[1].IsNumber() || !info[2].IsNumber()) throw Napi::TypeError::New(info.Env(), "readIn: expected (fd, offset, length)");
  const int fd = info[0].As<Napi::Number>().Int32Value();
  const double off = info[1].As<Napi::Number>().DoubleValue(), len = info[2].As<Napi::Number>().DoubleValue();
  if (!(off >= 0 && len >= 0 && off <= 9007199254740991.0 && len <= 9007199254740991.0 && off == std::floor(off) && len == std::floor(len))) throw Napi::RangeError::New(info.Env(), "readIn: offset and length must be integers in [0, 2^53)");
  ld::read_in(fd, static_cast<int64_t>(off), static_cast<int64_t>(len));
  return info.Env().Undefined();
}

// readAheadMark() → the number of the last read-ahead queued; readAheadWait(mark) returns once it and every one
// before it has been carried out (at once for 0, or a mark already reached). The weights check waits for a layer's
// own read-ahead before it reads the layer (harness/weights/check.ts), so that the layer's bytes come into the page
// cache as read_ahead reads them, 2 MiB folios, and not as its own first reads would (a scale tensor's pread and
// the kernel's read-ahead around it: 4 KiB folios in the extents it shares with the weights beside it).
Napi::Value read_ahead_mark(const Napi::CallbackInfo& info) { return Napi::Number::New(info.Env(), static_cast<double>(advisor().mark())); }

Napi::Value read_ahead_wait(const Napi::CallbackInfo& info) {
  if (info.Length() < 1 || !info[0].IsNumber()) throw Napi::TypeError::New(info.Env(), "readAheadWait: expected (mark)");
  const double m = info[0].As<Napi::Number>().DoubleValue();
  if (!(m >= 0 && m == std::floor(m))) throw Napi::RangeError::New(info.Env(), "readAheadWait: mark must be an integer ≥ 0");
  const uint64_t seq = static_cast<uint64_t>(m);
  if (seq > advisor().mark()) throw Napi::RangeError::New(info.Env(), "readAheadWait: no read-ahead numbered " + std::to_string(seq) + " was queued");
  advisor().wait(seq);
  return info.Env().Undefined();
}

// dropCached(fd): posix_fadvise(POSIX_FADV_DONTNEED) over the whole file — the kernel drops its clean pages from
// the page cache (dirty ones are left, their writeback started). For the wide benchmarks (scripts/bench/all.ts),
// which write ~46 GB of fixtures on a 24 GB host: a section's measurements of a warm page cache then do not run
// with the earlier sections' pages filling memory (the host a standalone run of that section finds). On a user's
// files only where the tool wrote them: `layerdiff convert`'s FP16 cache once flushed to the disk (fp16cache.ts,
// dropFolderFromPageCache: read back later as 2 MiB folios). Returns whether the advice was taken.
Napi::Value drop_cached(const Napi::CallbackInfo& info) {
  if (info.Length() < 1 || !info[0].IsNumber()) throw Napi::TypeError::New(info.Env(), "dropCached: expected (fd)");
  return Napi::Boolean::New(info.Env(), posix_fadvise(info[0].As<Napi::Number>().Int32Value(), 0, 0, POSIX_FADV_DONTNEED) == 0);
}

// mapRange(fd, offset, length) → an ArrayBuffer over bytes [offset, offset+length) of the file, or null where the
// range cannot be mapped (not a regular file, past its end, length 0, mmap refused): the caller then reads.
// MAP_PRIVATE with PROT_WRITE: the pages are the page cache's until written, and a write (nothing here writes
// weights, but an ArrayBuffer is writable) copies the page for this process only, never touching the file.
// Why: reading a large tensor copies it into freshly allocated memory, and on a virtual machine every first touch
// of a new page costs ~3–15 µs (the FP16 cache's 9 GB at ~0.3 GB/s); a mapping's first touch only maps a page
// the page cache already holds (2.4–3.3 GB/s measured), and a tensor never touched is never read. The buffer
// unmaps when garbage-collected. The one hazard of any mapping: a file truncated by another process while mapped
// faults (SIGBUS) on access; the range is checked against the file's size at mapping time.
//
// mapPopulated(fd, offset, length): the same mapping with every page mapped at once (MADV_POPULATE_READ), for the
// read pool (harness/io/read_pool.ts): a layer's routed experts, ~1.2 GB a wide layer, used for one layer only.
// Read into new buffers they paid the first touch of fresh memory, 0.2–1.5 GB/s on this VM once the page cache
// has filled its memory (a C test over a wide shard, page cache warm; 1.2 GB took 0.9–6 s), where mapping and
// populating the same bytes took 0.01 s. releaseMapped(buffer) ends such a mapping's use when its pool scope
// ends: the buffer is detached (every view of it then has length 0, so nothing in JavaScript reaches the range)
// and the range is unmapped at once: its pages leave this process and its address range and kernel mapping are
// free without waiting for the collector (a gate over many prompts maps hundreds of experts a layer, and Linux
// allows a process ~65,000 mappings). The pool's caller promises nothing read in a scope is used after it.
//
// Why V8 does not count these buffers: a buffer made by napi_create_external_arraybuffer counts its length as
// memory V8 owns, and V8 answers ~64 MB of such growth with a collection. A DeepSeek-V4 FP16-cache start-up maps
// ~190 tensors, 3.4 GB: --trace-gc counted 58–66 collections in it, 50–110 ms, for memory that is the page
// cache's, not the heap's, and the start-up took 250–350 ms with them against 145–170 ms without (round 19, the
// same children). A backing store with V8's empty deleter is not counted (BackingStore::PerIsolateAccountingLength),
// so the buffer is made with it, and the unmapping V8 would have done is tied instead to the buffer object's
// collection (a finalizer on the object) or to releaseMapped, whichever comes first. The object outlives every
// view of it (a typed array holds its buffer), and no mapped buffer is ever transferred to another thread (that
// would detach it here and unmap it under the receiver).
// What counting bought was a bound: buffers dropped without releaseMapped (the FP16 cache's tensors, re-read each
// step by a decoder that does not keep its layers) are unmapped only when collected. So past kUncountedLimit live
// uncounted mappings, or once they span the machine's memory, a new one is counted again, as Node-API would make it,
// and V8's usual pressure collects the dropped ones. The count limit is an eighth of Linux's default
// vm.max_map_count, which the rest of the process needs too (a mapping refused there is read instead, as any range
// that cannot be mapped); the bytes limit keeps the pages of dropped mappings, which count in the process's RSS
// until unmapped, below what the machine holds.
struct Mapping {
  void* base;
  size_t length;
  const void* data;  // the buffer's first byte: the key in g_maps
  bool counted;      // made by Node-API (V8 counts its bytes); else one of g_uncounted
  bool released = false;
};

constexpr size_t kUncountedLimit = 8192;

size_t uncounted_bytes_limit() {
  static const size_t limit = static_cast<size_t>(sysconf(_SC_PHYS_PAGES)) * static_cast<size_t>(sysconf(_SC_PAGESIZE));
  return limit;
}

// live mappings by their buffer's first byte: releaseMapped acts only on these (any other buffer is refused)
std::mutex g_maps_mutex;
std::unordered_map<const void*, Mapping*> g_maps;
size_t g_uncounted = 0;        // live uncounted mappings (released or collected ones are not live)
size_t g_uncounted_bytes = 0;  // and the bytes they span

// An ArrayBuffer over [data, data + length) whose bytes V8 does not count (see above) and does not free.
// Node-API cannot make one, so it is made with V8's own API and handed back as a napi_value: Node reads a
// napi_value back as the bytes of a v8::Local (its V8LocalValueFromJsValue is a memcpy, asserted to be one pointer
// wide), so the Local's bytes are copied into one. The handle lives in the scope Node-API opened for this call, as
// every returned value does.
napi_value uncounted_array_buffer(void* data, size_t length) {
  v8::Isolate* isolate = v8::Isolate::GetCurrent();
  std::unique_ptr<v8::BackingStore> store = v8::ArrayBuffer::NewBackingStore(data, length, v8::BackingStore::EmptyDeleter, nullptr);
  v8::Local<v8::Value> buffer = v8::ArrayBuffer::New(isolate, std::move(store));
  static_assert(sizeof(buffer) == sizeof(napi_value), "a v8::Local is not one napi_value wide");
  napi_value value;
  std::memcpy(static_cast<void*>(&value), static_cast<const void*>(&buffer), sizeof(value));
  return value;
}

// m stops being live (released or collected): forget its entry if it is still ours (a released range's address
// may since belong to a newer mapping) and whether it was counted; true where it was live
bool retire(Mapping* m) {
  std::lock_guard<std::mutex> lock(g_maps_mutex);
  if (m->released) return false;
  m->released = true;
  const auto it = g_maps.find(m->data);
  if (it != g_maps.end() && it->second == m) g_maps.erase(it);
  if (!m->counted) {
    g_uncounted--;
    g_uncounted_bytes -= m->length;
  }
  return true;
}

// the buffer is gone (an uncounted one's object collected, a counted one's store freed): unmap unless released
void finish(Mapping* m) {
  if (retire(m)) munmap(m->base, m->length);
  delete m;
}

// The ArrayBuffer over [data, data + len) of the mapping [base, base + total): uncounted while the limits allow
// (above), registered for releaseMapped, unmapped when released or collected.
Napi::Value wrap_mapping(Napi::Env env, void* base, size_t total, uint8_t* data, size_t len) {
  bool counted;
  {
    std::lock_guard<std::mutex> lock(g_maps_mutex);
    counted = g_uncounted >= kUncountedLimit || g_uncounted_bytes + total > uncounted_bytes_limit();
  }
  auto* m = new Mapping{base, total, data, counted};
  Napi::ArrayBuffer buffer;
  try {
    if (counted) {
      buffer = Napi::ArrayBuffer::New(env, data, len, [](Napi::Env, void*, Mapping* h) { finish(h); }, m);
    } else {
      buffer = Napi::ArrayBuffer(env, uncounted_array_buffer(data, len));
      buffer.AddFinalizer([](Napi::Env, Mapping* h) { finish(h); }, m);
    }
  } catch (...) {
    if (!buffer.IsEmpty()) buffer.Detach();  // made, but nothing will unmap it: no view may reach the range
    munmap(base, total);
    delete m;
    throw;
  }
  // registered only now: no lock is held while V8 runs (a collection in it may finish other mappings)
  std::lock_guard<std::mutex> lock(g_maps_mutex);
  g_maps[data] = m;
  if (!counted) {
    g_uncounted++;
    g_uncounted_bytes += total;
  }
  return buffer;
}

Napi::Value map_file(const Napi::CallbackInfo& info, const char* name, bool populate) {
  const Napi::Env env = info.Env();
  if (info.Length() < 3 || !info[0].IsNumber() || !info[1].IsNumber() || !info[2].IsNumber()) throw Napi::TypeError::New(env, std::string(name) + ": expected (fd, offset, length)");
  const int fd = info[0].As<Napi::Number>().Int32Value();
  const double off = info[1].As<Napi::Number>().DoubleValue(), len = info[2].As<Napi::Number>().DoubleValue();
  if (!(off >= 0 && len >= 0 && off == std::floor(off) && len == std::floor(len))) throw Napi::RangeError::New(env, std::string(name) + ": offset and length must be integers ≥ 0");
  struct stat st;
  if (len == 0 || fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || off + len > static_cast<double>(st.st_size)) return env.Null();
  const int64_t page = sysconf(_SC_PAGESIZE), at = static_cast<int64_t>(off), n = static_cast<int64_t>(len);
  // Ranges of 8 MiB or more are mapped over the whole 2 MiB extents of the file that hold them, at an address
  // congruent to the file offset (huge_map.h); every range is advised MADV_HUGEPAGE. The advice: a fault on a page the page
  // cache lacks then reads its aligned 2 MiB around it as one large folio, which later mappings of the file map with
  // one PMD entry. Without it a fault reads 4 KiB folios unless the faults look sequential to read-ahead, and the
  // FP16 cache's faults (head chunks, one mapping per tensor, two threads) do not: in round 38 its pages, read in by
  // generate's own start-ups, mapped at 1.7–2.6 GB/s where the same file read in 2 MiB folios mapped at 15–26 GB/s (a
  // C test over the wide head file), and the wide start-up from that cache took 1.0–1.7 s against 0.33–0.44 s with
  // this advice (cold: 3.6 s against 1.3 s). Advice only: pages the page cache already holds keep their folios, and
  // a kernel without transparent huge pages refuses it (EINVAL), harmlessly. What it reads beyond a range is
  // read-ahead's, a few MiB at its ends. Smaller ranges are advised too (round 41): a fault in one reads its whole
  // extent as a 2 MiB folio, where without the advice it read 4 KiB ones around the fault, which then kept the
  // extent from ever being one folio. A wide FP16-cache layer file interleaves small tensors (norms, biases, the
  // hyper-connection tables) with large ones, and read back by start-ups it stayed 41–86 % PMD-mappable; advised,
  // 98–99 %, and a start-up from it 230–370 ms against 430–900 ms. What a small range reads beyond itself is the
  // rest of its extent (2–4 MiB).
  // The layout: a folio is mapped by a PMD entry only where the mapping spans its whole extent at a congruent
  // address. A mapping of the range alone (from its page) has neither at its ends, so a tensor that starts inside
  // an extent (every FP16-cache tensor: the header before them is ~10 KiB) had its first and last extents mapped a
  // 4 KiB page at a time. A wide routed expert's [2048, 4096] FP16 weight is 8 extents and those two ~1: the GEMV
  // thread whose rows start there took 2.5 times as long as the other over its equal half (round 41, per-thread
  // timers in a wide FP16-cache decode), and a C test over the cache's experts file ran the two-thread GEMV at
  // 13 GB/s mapped per tensor against 24 GB/s over the extents. The extents' bytes beyond the range are the file's
  // other tensors: never populated, and out of the buffer's reach, but a 2 MiB folio maps whole, so the process's RSS
  // counts them (page-cache pages, no memory of its own). From 8 MiB that is at most half the range: below it, the
  // diff's packed ~4 MiB MXFP4 experts (mapped a layer's worth at a time by the read pool) took the wide diff's peak
  // RSS from 1.30 to 1.70–1.78 GiB (2 layers) and its depth ratio to 1.08–1.10, for no decode's gain.
  const bool extents = (at + n + page - 1) / page * page - at / page * page >= 4 * ld::kExtent;  // its pages span 8 MiB or more
  const int64_t a = extents ? at / ld::kExtent * ld::kExtent : at / page * page;
  const int64_t b = extents ? std::min((at + n + ld::kExtent - 1) / ld::kExtent * ld::kExtent, (static_cast<int64_t>(st.st_size) + page - 1) / page * page) : at + n;
  const size_t total = static_cast<size_t>(b - a);
  uint8_t* base = extents ? ld::map_extents(fd, a, total, true) : static_cast<uint8_t*>(mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, a));
  if (base == nullptr || base == MAP_FAILED) return env.Null();
  if (!extents) madvise(base, total, MADV_HUGEPAGE);
  uint8_t* data = base + (at - a);
  // a kernel without MADV_POPULATE_READ (before 5.14) answers EINVAL: the pages then map as they are touched
  if (populate) {
    uint8_t* from = base + (at - a) / page * page;
    madvise(from, static_cast<size_t>(data + n - from), MADV_POPULATE_READ);
  }
  return wrap_mapping(env, base, total, data, static_cast<size_t>(len));
}

// hugeMappedBytes(fd, offset, length): how much of the file's 2 MiB extents holding [offset, offset + length) maps
// through PMD entries (a page-cache folio of 2 MiB each), as the kernel's own account says: the range mapped as
// huge_map.h lays it out, populated, and /proc/self/smaps' FilePmdMapped for that mapping. For the tests of the
// weights check's mapped rows (check_f16.cc), which find the same thing another way (PAGEMAP_SCAN); 0 where the
// range cannot be mapped or smaps cannot be read.
Napi::Value huge_mapped_bytes(const Napi::CallbackInfo& info) {
  const Napi::Env env = info.Env();
  if (info.Length() < 3 || !info[0].IsNumber() || !info[1].IsNumber() || !info[2].IsNumber()) throw Napi::TypeError::New(env, "hugeMappedBytes: expected (fd, offset, length)");
  const int fd = info[0].As<Napi::Number>().Int32Value();
  const int64_t off = info[1].As<Napi::Number>().Int64Value(), len = info[2].As<Napi::Number>().Int64Value();
  struct stat st;
  if (off < 0 || len <= 0 || fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || off + len > st.st_size) return Napi::Number::New(env, 0);
  const int64_t page = sysconf(_SC_PAGESIZE), a = off / ld::kExtent * ld::kExtent;
  const int64_t b = std::min((off + len + ld::kExtent - 1) / ld::kExtent * ld::kExtent, (static_cast<int64_t>(st.st_size) + page - 1) / page * page);
  uint8_t* m = ld::map_extents(fd, a, static_cast<size_t>(b - a));
  if (m == nullptr) return Napi::Number::New(env, 0);
  madvise(m, static_cast<size_t>(b - a), MADV_POPULATE_READ);
  double kb = 0;
  if (FILE* f = fopen("/proc/self/smaps", "re")) {
    char line[512];
    bool ours = false;
    const uintptr_t at = reinterpret_cast<uintptr_t>(m);
    while (fgets(line, sizeof line, f) != nullptr) {
      unsigned long lo = 0, hi = 0;
      char dash = 0;
      if (sscanf(line, "%lx%c%lx", &lo, &dash, &hi) == 3 && dash == '-') ours = lo == at;  // a mapping's first line
      else if (ours && std::strncmp(line, "FilePmdMapped:", 14) == 0) kb = std::strtod(line + 14, nullptr);
    }
    fclose(f);
  }
  munmap(m, static_cast<size_t>(b - a));
  return Napi::Number::New(env, kb * 1024);
}

Napi::Value map_range(const Napi::CallbackInfo& info) { return map_file(info, "mapRange", false); }
Napi::Value map_populated(const Napi::CallbackInfo& info) { return map_file(info, "mapPopulated", true); }

// mapAnonymous(length) → an ArrayBuffer of `length` zero bytes that take no memory until written (a private
// anonymous mapping, pages made as they are touched), or null where it cannot be mapped; released and collected
// as the file mappings are. For a buffer a read may never fill: the weights check's tensors, which its fused pass
// reads into chunks of its own, their buffers filled only for a mismatch's evidence. Taken from the heap, such
// buffers were each partly resident (glibc's chunk header at their start, on a 2 MiB page where the heap has huge
// pages), 0.15–0.3 GB of a wide diff's memory or not depending on whether the kernel had huge pages free.
Napi::Value map_anonymous(const Napi::CallbackInfo& info) {
  const Napi::Env env = info.Env();
  if (info.Length() < 1 || !info[0].IsNumber()) throw Napi::TypeError::New(env, "mapAnonymous: expected (length)");
  const double len = info[0].As<Napi::Number>().DoubleValue();
  if (!(len > 0 && len == std::floor(len) && len <= 9007199254740991.0)) throw Napi::RangeError::New(env, "mapAnonymous: length must be an integer > 0");
  void* base = mmap(nullptr, static_cast<size_t>(len), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (base == MAP_FAILED) return env.Null();
  return wrap_mapping(env, base, static_cast<size_t>(len), static_cast<uint8_t*>(base), static_cast<size_t>(len));
}

// releaseMapped(buffer) → true where buffer is a live mapping of mapRange or mapPopulated (now released), else false.
Napi::Value release_mapped(const Napi::CallbackInfo& info) {
  const Napi::Env env = info.Env();
  if (info.Length() < 1 || !info[0].IsArrayBuffer()) throw Napi::TypeError::New(env, "releaseMapped: expected an ArrayBuffer");
  Napi::ArrayBuffer ab = info[0].As<Napi::ArrayBuffer>();
  const void* data = ab.Data();
  Mapping* m = nullptr;
  {
    std::lock_guard<std::mutex> lock(g_maps_mutex);
    const auto it = g_maps.find(data);
    if (it != g_maps.end() && !it->second->released) m = it->second;
  }
  if (m == nullptr || ab.ByteLength() == 0) return Napi::Boolean::New(env, false);
  ab.Detach();  // every view now has length 0, so nothing in JavaScript reaches the range unmapped next
  if (retire(m)) munmap(m->base, m->length);  // the entry (m itself) is deleted when the buffer is collected
  return Napi::Boolean::New(env, true);
}

// mappedStats() → { uncounted, uncountedLimit, uncountedBytes, uncountedBytesLimit }: live mappings V8 does not
// count and the bytes they span, and how many and how much there may be (tests)
Napi::Value mapped_stats(const Napi::CallbackInfo& info) {
  size_t live, bytes;
  {
    std::lock_guard<std::mutex> lock(g_maps_mutex);  // not held while V8 runs (wrap_mapping)
    live = g_uncounted;
    bytes = g_uncounted_bytes;
  }
  Napi::Object o = Napi::Object::New(info.Env());
  o.Set("uncounted", Napi::Number::New(info.Env(), static_cast<double>(live)));
  o.Set("uncountedLimit", Napi::Number::New(info.Env(), static_cast<double>(kUncountedLimit)));
  o.Set("uncountedBytes", Napi::Number::New(info.Env(), static_cast<double>(bytes)));
  o.Set("uncountedBytesLimit", Napi::Number::New(info.Env(), static_cast<double>(uncounted_bytes_limit())));
  return o;
}

// detachBuffer(buffer) → whether it was detached: an allocated buffer's memory then goes back to the allocator at
// once (its backing store's last owner is gone), where the collector would free it only when it finds the buffer
// dead, one or several collections later (harness/io/read_pool.ts, tieToRead).
Napi::Value detach_buffer(const Napi::CallbackInfo& info) {
  const Napi::Env env = info.Env();
  if (info.Length() < 1 || !info[0].IsArrayBuffer()) throw Napi::TypeError::New(env, "detachBuffer: expected an ArrayBuffer");
  bool detached = false;
  if (napi_is_detached_arraybuffer(env, info[0], &detached) != napi_ok || detached) return Napi::Boolean::New(env, false);
  return Napi::Boolean::New(env, napi_detach_arraybuffer(env, info[0]) == napi_ok);
}

}  // namespace

namespace ld {
void read_in(int fd, int64_t offset, int64_t length) {
  if (length > 0) read_ahead(fd, static_cast<off_t>(offset), static_cast<off_t>(length));
}
}  // namespace ld

void register_file_io(Napi::Env env, Napi::Object exports) {
  exports.Set("willNeed", Napi::Function::New(env, will_need));
  exports.Set("readIn", Napi::Function::New(env, read_in));
  exports.Set("readAheadMark", Napi::Function::New(env, read_ahead_mark));
  exports.Set("readAheadWait", Napi::Function::New(env, read_ahead_wait));
  exports.Set("dropCached", Napi::Function::New(env, drop_cached));
  exports.Set("mapRange", Napi::Function::New(env, map_range));
  exports.Set("mapPopulated", Napi::Function::New(env, map_populated));
  exports.Set("hugeMappedBytes", Napi::Function::New(env, huge_mapped_bytes));
  exports.Set("mapAnonymous", Napi::Function::New(env, map_anonymous));
  exports.Set("releaseMapped", Napi::Function::New(env, release_mapped));
  exports.Set("mappedStats", Napi::Function::New(env, mapped_stats));
  exports.Set("detachBuffer", Napi::Function::New(env, detach_buffer));
}
