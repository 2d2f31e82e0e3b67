// The core's file primitives Node lacks (harness/io/prefetch.ts, harness/io/map.ts), in this addon because every
// run loads it: posix_fadvise read-ahead and a private, copy-on-write mapping of a file range.
#include <fcntl.h>
#include <napi.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <string>
#include <system_error>
#include <thread>
#include <unordered_map>

#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22  // Linux 5.14's value, for older headers (the call then fails with EINVAL, harmlessly)
#endif

namespace {

// willNeed(fd, offset, length): posix_fadvise(POSIX_FADV_WILLNEED) — ask the kernel to start reading a byte
// range into the page cache, so a later read finds it there (the weights check's read-ahead). Advice only: an
// error (a pipe, an old kernel) is ignored. The advice is given on a background thread, on a duplicate of the
// descriptor (so closing the file meanwhile harms nothing): WILLNEED walks every page of the range even when all
// are cached (~0.1 s a wide DeepSeek-V4 layer of 3.55 GB here, measured), and the caller asks it for the next
// layer while it has the current one to check. Returns whether the advice was queued.
class Advisor {
 public:
  bool push(int fd, off_t off, off_t len) {
    const int d = fcntl(fd, F_DUPFD_CLOEXEC, 0);
    if (d < 0) return false;
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
        return false;
      }
      q_.push_back({d, off, len});
    }
    cv_.notify_one();
    return true;
  }

 private:
  struct Advice {
    int fd;
    off_t off, len;
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
      posix_fadvise(a.fd, a.off, a.len, POSIX_FADV_WILLNEED);
      close(a.fd);
    }
  }
  std::mutex m_;
  std::condition_variable cv_;
  static constexpr size_t kMaxQueued = 4096;
  std::deque<Advice> q_;
  bool started_ = false;
};

Napi::Value will_need(const Napi::CallbackInfo& info) {
  if (info.Length() < 3 || !info[0].IsNumber() || !info[1].IsNumber() || !info[2].IsNumber()) throw Napi::TypeError::New(info.Env(), "willNeed: expected (fd, offset, length)");
  const int fd = info[0].As<Napi::Number>().Int32Value();
  const double off = info[1].As<Napi::Number>().DoubleValue(), len = info[2].As<Napi::Number>().DoubleValue();
  if (!(off >= 0 && len >= 0)) throw Napi::RangeError::New(info.Env(), "willNeed: offset and length must be ≥ 0");
  static Advisor* advisor = new Advisor();  // never destroyed: its thread outlives every caller
  return Napi::Boolean::New(info.Env(), advisor->push(fd, static_cast<off_t>(off), static_cast<off_t>(len)));
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
// ends: its pages leave this process at once (MADV_DONTNEED: RSS does not wait for the collector) and the buffer
// is detached, so a view kept past its scope reads nothing instead of stale bytes; the address range itself is
// unmapped when the buffer is collected.
struct Mapping {
  void* base;
  size_t length;
  bool released = false;
};

// live mappings by their buffer's first byte: releaseMapped acts only on these (any other buffer is refused)
std::mutex g_maps_mutex;
std::unordered_map<const void*, Mapping*> g_maps;

Napi::Value map_file(const Napi::CallbackInfo& info, const char* name, bool populate) {
  const Napi::Env env = info.Env();
  if (info.Length() < 3 || !info[0].IsNumber() || !info[1].IsNumber() || !info[2].IsNumber()) throw Napi::TypeError::New(env, std::string(name) + ": expected (fd, offset, length)");
  const int fd = info[0].As<Napi::Number>().Int32Value();
  const double off = info[1].As<Napi::Number>().DoubleValue(), len = info[2].As<Napi::Number>().DoubleValue();
  if (!(off >= 0 && len >= 0 && off == std::floor(off) && len == std::floor(len))) throw Napi::RangeError::New(env, std::string(name) + ": offset and length must be integers ≥ 0");
  struct stat st;
  if (len == 0 || fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || off + len > static_cast<double>(st.st_size)) return env.Null();
  const long page = sysconf(_SC_PAGESIZE);
  const off_t aligned = static_cast<off_t>(off) / page * page;
  const size_t lead = static_cast<size_t>(static_cast<off_t>(off) - aligned), total = lead + static_cast<size_t>(len);
  void* base = mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, aligned);
  if (base == MAP_FAILED) return env.Null();
  // a kernel without MADV_POPULATE_READ (before 5.14) answers EINVAL: the pages then map as they are touched
  if (populate) madvise(base, total, MADV_POPULATE_READ);
  auto* m = new Mapping{base, total};
  uint8_t* data = static_cast<uint8_t*>(base) + lead;
  {
    std::lock_guard<std::mutex> lock(g_maps_mutex);
    g_maps[data] = m;
  }
  return Napi::ArrayBuffer::New(env, data, static_cast<size_t>(len), [](Napi::Env, void* d, Mapping* h) {
    {
      std::lock_guard<std::mutex> lock(g_maps_mutex);
      g_maps.erase(d);
    }
    munmap(h->base, h->length);
    delete h;
  }, m);
}

Napi::Value map_range(const Napi::CallbackInfo& info) { return map_file(info, "mapRange", false); }
Napi::Value map_populated(const Napi::CallbackInfo& info) { return map_file(info, "mapPopulated", true); }

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
  m->released = true;
  ab.Detach();
  madvise(m->base, m->length, MADV_DONTNEED);  // private pages never written: the next touch would read the file again
  return Napi::Boolean::New(env, true);
}

}  // namespace

void register_file_io(Napi::Env env, Napi::Object exports) {
  exports.Set("willNeed", Napi::Function::New(env, will_need));
  exports.Set("mapRange", Napi::Function::New(env, map_range));
  exports.Set("mapPopulated", Napi::Function::New(env, map_populated));
  exports.Set("releaseMapped", Napi::Function::New(env, release_mapped));
}
