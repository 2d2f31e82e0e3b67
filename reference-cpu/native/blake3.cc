// BLAKE3 (the hash mode: 32-byte digests) of byte ranges in memory and of files, on several threads, for the FP16
// cache's trust chain (harness/io/blake3.ts). Why not SHA-256: a first load of the cache verifies every byte it uses
// (3.4 GB on the wide fixture), and SHA-256 is one serial stream per file at ~1.1–1.75 GB/s a core here (SHA-NI):
// a first load took 2.4–2.8 s where a load whose digests were already recorded took 0.7 s. BLAKE3 is a tree: every 1 KiB chunk is compressed independently
// (16 at a time in AVX-512 lanes, 8 in AVX2), and the chunks' chaining values are merged pairwise, so a file is
// hashed on every core and at SIMD width, and it is still a cryptographic hash (an edited cache cannot be made
// to match its manifest).
//
// Written from the BLAKE3 specification (O'Connor, Aumasson, Neves, Wilcox-O'Hearn, 2020): IV and message
// permutation §2.1–2.2, compression §2.2, chunk flags and counters §2.3, the tree §2.5 and §5.1. The tree is
// computed here level by level — adjacent chaining values merged pairwise, an odd one carried up — which gives
// the specification's tree (every left subtree a complete power of two of chunks, §2.5); the TypeScript
// implementation (harness/io/blake3.ts) builds it the specification's other way, with a stack of subtree
// values, and tests compare the two and check both against the official test vectors.
// Work split: the input is cut into subtrees of kSubtreeChunks chunks (8 MiB), each a complete power of two and
// so a node of the final tree; threads take subtrees; the subtree values are merged at the end.
#include <napi.h>
#include <omp.h>
#include <immintrin.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "dequant_exact.h"
#include "huge_map.h"

namespace {

constexpr uint32_t kIV[8] = {0x6A09E667u, 0xBB67AE85u, 0x3C6EF372u, 0xA54FF53Au, 0x510E527Fu, 0x9B05688Cu, 0x1F83D9ABu, 0x5BE0CD19u};
constexpr uint32_t CHUNK_START = 1, CHUNK_END = 2, PARENT = 4, ROOT = 8;
constexpr size_t kBlock = 64, kChunk = 1024, kBlocksPerChunk = kChunk / kBlock;
constexpr size_t kSubtreeChunks = size_t{1} << 13;  // 8 MiB: a power of two, so a subtree is a node of the tree
constexpr size_t kWindow = 64 * kChunk;             // bytes read (or assembled) at a time: fits in L2 with its values

// The message word order of each of the 7 rounds: round r applies the permutation r times (§2.2).
struct Schedule {
  uint8_t s[7][16];
  constexpr Schedule() : s() {
    constexpr uint8_t perm[16] = {2, 6, 3, 10, 7, 0, 4, 13, 1, 11, 12, 5, 9, 14, 15, 8};
    for (int i = 0; i < 16; i++) s[0][i] = static_cast<uint8_t>(i);
    for (int r = 1; r < 7; r++)
      for (int i = 0; i < 16; i++) s[r][i] = s[r - 1][perm[i]];
  }
};
constexpr Schedule kSchedule;

// The 7 rounds of quarter-rounds G over the 16-word state v with message m (§2.2), for any word type: the
// word operations are the macro's arguments, so that the scalar, AVX2 and AVX-512 compressions are one text.
// The message word is added before v[b] (addition mod 2^32 is associative: the same words) because v[b] is the
// word the step before computed last, so it waits one addition less.
#define LD_G(ADD, XOR, R16, R12, R8, R7, a, b, c, d, x, y) \
  v[a] = ADD(ADD(v[a], x), v[b]);                          \
  v[d] = R16(XOR(v[d], v[a]));                             \
  v[c] = ADD(v[c], v[d]);                                  \
  v[b] = R12(XOR(v[b], v[c]));                             \
  v[a] = ADD(ADD(v[a], y), v[b]);                          \
  v[d] = R8(XOR(v[d], v[a]));                              \
  v[c] = ADD(v[c], v[d]);                                  \
  v[b] = R7(XOR(v[b], v[c]));
#define LD_ROUNDS(...)                                              \
  for (int r = 0; r < 7; r++) {                                     \
    const uint8_t* s = kSchedule.s[r];                              \
    LD_G(__VA_ARGS__, 0, 4, 8, 12, m[s[0]], m[s[1]])                \
    LD_G(__VA_ARGS__, 1, 5, 9, 13, m[s[2]], m[s[3]])                \
    LD_G(__VA_ARGS__, 2, 6, 10, 14, m[s[4]], m[s[5]])               \
    LD_G(__VA_ARGS__, 3, 7, 11, 15, m[s[6]], m[s[7]])               \
    LD_G(__VA_ARGS__, 0, 5, 10, 15, m[s[8]], m[s[9]])               \
    LD_G(__VA_ARGS__, 1, 6, 11, 12, m[s[10]], m[s[11]])             \
    LD_G(__VA_ARGS__, 2, 7, 8, 13, m[s[12]], m[s[13]])              \
    LD_G(__VA_ARGS__, 3, 4, 9, 14, m[s[14]], m[s[15]])              \
  }

// Unrolled, the schedule's message words are fixed registers or offsets instead of indexed loads, where the state
// and the message fit the registers (AVX-512's 32; scalar); AVX2's 16 spill (2.7 → 2.3 GB/s unrolled). Round 42,
// one core, an 8 MiB input in L3, the builds alternating in one process: AVX-512 6.16 → 6.49 GB/s (medians of 7),
// scalar 0.65 → 0.84; the official `blake3` crate (Rust, as npm's @napi-rs/blake-hash builds it) 7.64 there.
#define LD_ROUNDS_UNROLLED(...) _Pragma("GCC unroll 7") LD_ROUNDS(__VA_ARGS__)

// ---- scalar ----------------------------------------------------------------------------------------------

inline uint32_t add32(uint32_t x, uint32_t y) { return x + y; }
inline uint32_t xor32(uint32_t x, uint32_t y) { return x ^ y; }
template <int n>
inline uint32_t rotr(uint32_t x) { return (x >> n) | (x << (32 - n)); }

// One compression; out = the first 8 words of the output (the new chaining value). block: 64 bytes, zero-padded.
void compress(const uint32_t cv[8], const uint8_t block[kBlock], uint32_t block_len, uint64_t counter, uint32_t flags, uint32_t out[8]) {
  uint32_t m[16];
  std::memcpy(m, block, kBlock);  // words are little-endian (§2.2), as x86-64 stores them
  uint32_t v[16] = {cv[0], cv[1], cv[2], cv[3], cv[4], cv[5], cv[6], cv[7], kIV[0], kIV[1], kIV[2], kIV[3],
                    static_cast<uint32_t>(counter), static_cast<uint32_t>(counter >> 32), block_len, flags};
  LD_ROUNDS_UNROLLED(add32, xor32, rotr<16>, rotr<12>, rotr<8>, rotr<7>)
  for (int i = 0; i < 8; i++) out[i] = v[i] ^ v[i + 8];
}

// The chaining value of one chunk of `len` bytes (1..1024; 0 only for the empty input), chunk number `counter`;
// `extra` ROOT when this chunk is the whole input.
void chunk_cv(const uint8_t* p, size_t len, uint64_t counter, uint32_t extra, uint32_t out[8]) {
  uint32_t cv[8];
  std::memcpy(cv, kIV, sizeof cv);
  const size_t nblocks = len == 0 ? 1 : (len + kBlock - 1) / kBlock;
  for (size_t b = 0; b < nblocks; b++) {
    uint8_t block[kBlock] = {0};
    const size_t n = std::min(kBlock, len - b * kBlock);
    if (n > 0) std::memcpy(block, p + b * kBlock, n);
    const uint32_t flags = (b == 0 ? CHUNK_START : 0) | (b + 1 == nblocks ? CHUNK_END | extra : 0);
    compress(cv, block, static_cast<uint32_t>(n), counter, flags, cv);
  }
  std::memcpy(out, cv, sizeof cv);
}

// A parent node over two adjacent chaining values (stored consecutively: 64 bytes, the parent's message).
void parent_cv(const uint32_t pair[16], uint32_t extra, uint32_t out[8]) {
  uint8_t block[kBlock];
  std::memcpy(block, pair, kBlock);
  compress(kIV, block, kBlock, 0, PARENT | extra, out);
}

// ---- many inputs at once ----------------------------------------------------------------------------------
// `lanes` inputs at base + i·stride (i < lanes), each `nblocks` blocks, input i with counter counter0 + i·inc;
// the first block gets `first`, the last `last`, every block `flags`. out[i·8 + w]: word w of input i's value.

bool has_avx2() { return __builtin_cpu_supports("avx2") != 0; }
bool has_avx512() { return __builtin_cpu_supports("avx512f") != 0; }
const bool g_avx2 = has_avx2();
const bool g_avx512 = has_avx512();

// m[w] = word w of the 64-byte blocks at p + i·stride, lane i (a 16×16 transpose of 32-bit words: pairs of
// words, then of pairs, within each 128-bit quarter; then the quarters themselves). Loads and shuffles, where
// 16 gathers a block were 7–20% slower here (one and two threads, in memory).
__attribute__((target("avx512f"))) inline void load_transposed16(const uint8_t* p, size_t stride, __m512i m[16]) {
  __m512i r[16], t[16];
  for (int i = 0; i < 16; i++) r[i] = _mm512_loadu_si512(p + i * stride);
  for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_unpacklo_epi32(r[i], r[i + 1]);      // quarter j: i w4j, i+1 w4j, i w4j+1, i+1 w4j+1
    t[i + 1] = _mm512_unpackhi_epi32(r[i], r[i + 1]);  // quarter j: the same for words 4j+2, 4j+3
  }
  for (int g = 0; g < 4; g++) {  // lanes 4g..4g+3: r[4g+q], quarter j = their word 4j+q
    const __m512i *a = t + 4 * g;
    r[4 * g + 0] = _mm512_unpacklo_epi64(a[0], a[2]);
    r[4 * g + 1] = _mm512_unpackhi_epi64(a[0], a[2]);
    r[4 * g + 2] = _mm512_unpacklo_epi64(a[1], a[3]);
    r[4 * g + 3] = _mm512_unpackhi_epi64(a[1], a[3]);
  }
  for (int q = 0; q < 4; q++) {  // word 4j+q: quarter g from r[4g+q]'s quarter j
    const __m512i a = _mm512_shuffle_i32x4(r[q], r[4 + q], 0x44), b = _mm512_shuffle_i32x4(r[q], r[4 + q], 0xEE);
    const __m512i c = _mm512_shuffle_i32x4(r[8 + q], r[12 + q], 0x44), d = _mm512_shuffle_i32x4(r[8 + q], r[12 + q], 0xEE);
    m[q] = _mm512_shuffle_i32x4(a, c, 0x88);
    m[4 + q] = _mm512_shuffle_i32x4(a, c, 0xDD);
    m[8 + q] = _mm512_shuffle_i32x4(b, d, 0x88);
    m[12 + q] = _mm512_shuffle_i32x4(b, d, 0xDD);
  }
}

// GCC 12's avx512fintrin.h fills the unused source of ror with _mm512_undefined_epi32(), a variable
// initialised from itself: a false -Wuninitialized in every caller.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
template <int n>
__attribute__((target("avx512f"))) inline __m512i ror512(__m512i x) { return _mm512_ror_epi32(x, n); }
__attribute__((target("avx512f"))) void hash16_avx512(const uint8_t* base, size_t stride, size_t nblocks, uint64_t counter0, uint64_t inc, uint32_t flags, uint32_t first, uint32_t last, uint32_t* out) {
  alignas(64) uint32_t lo[16], hi[16];
  for (int i = 0; i < 16; i++) {
    const uint64_t c = counter0 + inc * static_cast<uint64_t>(i);
    lo[i] = static_cast<uint32_t>(c);
    hi[i] = static_cast<uint32_t>(c >> 32);
  }
  __m512i h[8];
  for (int i = 0; i < 8; i++) h[i] = _mm512_set1_epi32(static_cast<int>(kIV[i]));
  const __m512i clo = _mm512_load_si512(lo), chi = _mm512_load_si512(hi);
  for (size_t b = 0; b < nblocks; b++) {
    __m512i m[16];
    load_transposed16(base + b * kBlock, stride, m);
    const uint32_t f = flags | (b == 0 ? first : 0) | (b + 1 == nblocks ? last : 0);
    __m512i v[16] = {h[0], h[1], h[2], h[3], h[4], h[5], h[6], h[7],
                     _mm512_set1_epi32(static_cast<int>(kIV[0])), _mm512_set1_epi32(static_cast<int>(kIV[1])), _mm512_set1_epi32(static_cast<int>(kIV[2])), _mm512_set1_epi32(static_cast<int>(kIV[3])),
                     clo, chi, _mm512_set1_epi32(static_cast<int>(kBlock)), _mm512_set1_epi32(static_cast<int>(f))};
    LD_ROUNDS_UNROLLED(_mm512_add_epi32, _mm512_xor_si512, ror512<16>, ror512<12>, ror512<8>, ror512<7>)
    for (int i = 0; i < 8; i++) h[i] = _mm512_xor_si512(v[i], v[i + 8]);
  }
  // stored, then written out transposed: 8 scatters took longer on AMD's cores than these 128 scalar moves
  alignas(64) uint32_t words[8][16];
  for (int w = 0; w < 8; w++) _mm512_store_si512(words[w], h[w]);
  for (int i = 0; i < 16; i++)
    for (int w = 0; w < 8; w++) out[i * 8 + w] = words[w][i];
}
#pragma GCC diagnostic pop

template <int n>
__attribute__((target("avx2"))) inline __m256i ror_avx2(__m256i x) { return _mm256_or_si256(_mm256_srli_epi32(x, n), _mm256_slli_epi32(x, 32 - n)); }

// m[w] = word w (of 8) of the 32 bytes at p + i·stride, lane i: an 8×8 transpose of 32-bit words.
__attribute__((target("avx2"))) inline void load_transposed8(const uint8_t* p, size_t stride, __m256i m[8]) {
  __m256i r[8], t[8];
  for (int i = 0; i < 8; i++) r[i] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i * stride));
  for (int i = 0; i < 8; i += 2) {
    t[i] = _mm256_unpacklo_epi32(r[i], r[i + 1]);      // half h: i w4h, i+1 w4h, i w4h+1, i+1 w4h+1
    t[i + 1] = _mm256_unpackhi_epi32(r[i], r[i + 1]);  // half h: the same for words 4h+2, 4h+3
  }
  for (int g = 0; g < 2; g++) {  // lanes 4g..4g+3: r[4g+q], half h = their word 4h+q
    const __m256i* a = t + 4 * g;
    r[4 * g + 0] = _mm256_unpacklo_epi64(a[0], a[2]);
    r[4 * g + 1] = _mm256_unpackhi_epi64(a[0], a[2]);
    r[4 * g + 2] = _mm256_unpacklo_epi64(a[1], a[3]);
    r[4 * g + 3] = _mm256_unpackhi_epi64(a[1], a[3]);
  }
  for (int q = 0; q < 4; q++) {
    m[q] = _mm256_permute2x128_si256(r[q], r[4 + q], 0x20);
    m[4 + q] = _mm256_permute2x128_si256(r[q], r[4 + q], 0x31);
  }
}

__attribute__((target("avx2"))) void hash8_avx2(const uint8_t* base, size_t stride, size_t nblocks, uint64_t counter0, uint64_t inc, uint32_t flags, uint32_t first, uint32_t last, uint32_t* out) {
  alignas(32) uint32_t lo[8], hi[8];
  for (int i = 0; i < 8; i++) {
    const uint64_t c = counter0 + inc * static_cast<uint64_t>(i);
    lo[i] = static_cast<uint32_t>(c);
    hi[i] = static_cast<uint32_t>(c >> 32);
  }
  // byte rotations by 16 and 8 as shuffles (one instruction where the shifts take three)
  const __m256i r16 = _mm256_setr_epi8(2, 3, 0, 1, 6, 7, 4, 5, 10, 11, 8, 9, 14, 15, 12, 13, 2, 3, 0, 1, 6, 7, 4, 5, 10, 11, 8, 9, 14, 15, 12, 13);
  const __m256i r8 = _mm256_setr_epi8(1, 2, 3, 0, 5, 6, 7, 4, 9, 10, 11, 8, 13, 14, 15, 12, 1, 2, 3, 0, 5, 6, 7, 4, 9, 10, 11, 8, 13, 14, 15, 12);
  __m256i h[8];
  for (int i = 0; i < 8; i++) h[i] = _mm256_set1_epi32(static_cast<int>(kIV[i]));
  const __m256i clo = _mm256_load_si256(reinterpret_cast<const __m256i*>(lo)), chi = _mm256_load_si256(reinterpret_cast<const __m256i*>(hi));
  for (size_t b = 0; b < nblocks; b++) {
    __m256i m[16];
    load_transposed8(base + b * kBlock, stride, m);
    load_transposed8(base + b * kBlock + 32, stride, m + 8);
    const uint32_t f = flags | (b == 0 ? first : 0) | (b + 1 == nblocks ? last : 0);
    __m256i v[16] = {h[0], h[1], h[2], h[3], h[4], h[5], h[6], h[7],
                     _mm256_set1_epi32(static_cast<int>(kIV[0])), _mm256_set1_epi32(static_cast<int>(kIV[1])), _mm256_set1_epi32(static_cast<int>(kIV[2])), _mm256_set1_epi32(static_cast<int>(kIV[3])),
                     clo, chi, _mm256_set1_epi32(static_cast<int>(kBlock)), _mm256_set1_epi32(static_cast<int>(f))};
    const auto rot16 = [r16](__m256i x) __attribute__((target("avx2"))) { return _mm256_shuffle_epi8(x, r16); };
    const auto rot8 = [r8](__m256i x) __attribute__((target("avx2"))) { return _mm256_shuffle_epi8(x, r8); };
    LD_ROUNDS(_mm256_add_epi32, _mm256_xor_si256, rot16, ror_avx2<12>, rot8, ror_avx2<7>)
    for (int i = 0; i < 8; i++) h[i] = _mm256_xor_si256(v[i], v[i + 8]);
  }
  alignas(32) uint32_t t[8][8];
  for (int w = 0; w < 8; w++) _mm256_store_si256(reinterpret_cast<__m256i*>(t[w]), h[w]);
  for (int i = 0; i < 8; i++)
    for (int w = 0; w < 8; w++) out[i * 8 + w] = t[w][i];
}

}  // namespace

// Kernel level for tests: 2 AVX-512, 1 AVX2, 0 scalar; a level the CPU lacks is lowered to one it has.
static int g_level = -1;

namespace {

int level() { return g_level >= 0 ? g_level : (g_avx512 ? 2 : g_avx2 ? 1 : 0); }

// Values of `n` inputs (see the block comment above hash16_avx512), at the widest level available.
void hash_many(const uint8_t* base, size_t stride, size_t n, size_t nblocks, uint64_t counter0, uint64_t inc, uint32_t flags, uint32_t first, uint32_t last, uint32_t* out) {
  size_t i = 0;
  const int lv = level();
  if (lv >= 2 && g_avx512)
    for (; i + 16 <= n; i += 16) hash16_avx512(base + i * stride, stride, nblocks, counter0 + i * inc, inc, flags, first, last, out + i * 8);
  if (lv >= 1 && g_avx2)
    for (; i + 8 <= n; i += 8) hash8_avx2(base + i * stride, stride, nblocks, counter0 + i * inc, inc, flags, first, last, out + i * 8);
  for (; i < n; i++) {
    uint32_t cv[8];
    std::memcpy(cv, kIV, sizeof cv);
    for (size_t b = 0; b < nblocks; b++) {
      const uint32_t f = flags | (b == 0 ? first : 0) | (b + 1 == nblocks ? last : 0);
      compress(cv, base + i * stride + b * kBlock, kBlock, counter0 + i * inc, f, cv);
    }
    std::memcpy(out + i * 8, cv, sizeof cv);
  }
}

// Merge `count` ≥ 1 consecutive values (in cvs, 8 words each) of a subtree into cvs[0..8), level by level.
// `root`: the last merge is the root node. Parents are written over the values they consume (parent i reads
// values 2i and 2i+1, every lane's message is loaded before its value is stored).
void merge(uint32_t* cvs, size_t count, bool root) {
  while (count > 1) {
    const size_t pairs = count / 2;
    const bool last = count == 2;
    if (last && root) {
      parent_cv(cvs, ROOT, cvs);
    } else {
      hash_many(reinterpret_cast<const uint8_t*>(cvs), 2 * 8 * sizeof(uint32_t), pairs, 1, 0, 0, PARENT, 0, 0, cvs);
    }
    if (count % 2 == 1) std::memcpy(cvs + pairs * 8, cvs + (count - 1) * 8, 8 * sizeof(uint32_t));
    count = pairs + count % 2;
  }
}

// Where an input's bytes come from: spans in memory (hashed as their concatenation) or a file read through fd.
struct Input {
  std::vector<std::pair<const uint8_t*, size_t>> spans;
  bool from_file = false;  // read through fd, else the spans
  int fd = -1;
  size_t length = 0;

  // `n` bytes from `at`: a pointer into a span when they lie in one, else assembled in (or read into) scratch.
  // nullptr: the file could not be read there (error or end of file).
  const uint8_t* get(size_t at, size_t n, uint8_t* scratch) const {
    if (from_file) {
      for (size_t done = 0; done < n;) {
        const ssize_t got = pread(fd, scratch + done, n - done, static_cast<off_t>(at + done));
        if (got < 0 && errno == EINTR) continue;
        if (got <= 0) return nullptr;
        done += static_cast<size_t>(got);
      }
      return scratch;
    }
    size_t s = 0, base = 0;
    while (s < spans.size() && base + spans[s].second <= at) base += spans[s++].second;
    if (s < spans.size() && at - base + n <= spans[s].second) return spans[s].first + (at - base);
    for (size_t done = 0; done < n; s++) {
      const size_t from = at + done - base, k = std::min(n - done, spans[s].second - from);
      std::memcpy(scratch + done, spans[s].first + from, k);
      done += k;
      base += spans[s].second;
    }
    return scratch;
  }
};

// The value of chunks [c0, c0 + count) of `in` (count ≤ kSubtreeChunks), into out[8]; root: these are the whole input.
bool subtree(const Input& in, size_t c0, size_t count, bool root, uint32_t* cvs, uint8_t* scratch, uint32_t out[8]) {
  const size_t begin = c0 * kChunk, end = std::min(in.length, (c0 + count) * kChunk);
  // A file's subtree (8 MiB, on 2 MiB extents) is read in by its thread as 2 MiB folios where the page cache lacks
  // it, before its preads: the threads' interleaved preads would otherwise leave it in the small folios the kernel's
  // read-ahead makes for them, which every later mapped reader of the file pays a fault a page for (file_io.cc,
  // readIn; round 41: an FP16-cache layer file hashed by a first load after a convert, 3–7 % PMD-mappable). Per
  // subtree, so the threads still read one part while hashing another.
  if (in.from_file && end > begin) ld::read_in(in.fd, static_cast<int64_t>(begin), static_cast<int64_t>(end - begin));
  if (root && count == 1) {
    const uint8_t* p = end > begin ? in.get(begin, end - begin, scratch) : scratch;
    if (p == nullptr) return false;
    chunk_cv(p, end - begin, c0, ROOT, out);
    return true;
  }
  size_t done = 0;  // chunks whose value is in cvs
  for (size_t at = begin; at < end;) {
    const size_t n = std::min(kWindow, end - at);
    const uint8_t* p = in.get(at, n, scratch);
    if (p == nullptr) return false;
    const size_t full = n / kChunk;
    hash_many(p, kChunk, full, kBlocksPerChunk, c0 + done, 1, 0, CHUNK_START, CHUNK_END, cvs + done * 8);
    done += full;
    if (n % kChunk != 0) {  // the input's last chunk, shorter than 1 KiB
      chunk_cv(p + full * kChunk, n % kChunk, c0 + done, 0, cvs + done * 8);
      done++;
    }
    at += n;
  }
  merge(cvs, done, root);
  std::memcpy(out, cvs, 8 * sizeof(uint32_t));
  return true;
}

// Digests of `inputs` side by side: every input's subtrees are one pool of tasks for `threads` threads.
std::vector<std::string> digest_all(const std::vector<Input>& inputs, int threads, std::vector<char>& ok) {
  struct Task {
    size_t input, c0, count;
  };
  std::vector<Task> tasks;
  std::vector<size_t> first(inputs.size());
  for (size_t i = 0; i < inputs.size(); i++) {
    first[i] = tasks.size();
    const size_t chunks = std::max<size_t>(1, (inputs[i].length + kChunk - 1) / kChunk);
    for (size_t c = 0; c < chunks; c += kSubtreeChunks) tasks.push_back({i, c, std::min(kSubtreeChunks, chunks - c)});
  }
  std::vector<uint32_t> values(tasks.size() * 8);
  std::vector<char> task_ok(tasks.size(), 0);
  const int n = static_cast<int>(tasks.size());
  // never more threads than tasks or processors (each takes ~320 KiB of scratch)
  threads = std::max(1, std::min({threads, n, omp_get_num_procs()}));
#pragma omp parallel num_threads(threads)
  {
    // not zero-filled (each word is written before it is read): 320 KiB of stores a call, which took a 256 KiB
    // input hashed hot in cache from 5.5 to 6.0 GB/s
    const std::unique_ptr<uint32_t[]> cvs(new uint32_t[kSubtreeChunks * 8]);
    const std::unique_ptr<uint8_t[]> scratch(new uint8_t[kWindow]);
#pragma omp for schedule(dynamic, 1)
    for (int t = 0; t < n; t++) {
      const Task& k = tasks[t];
      const bool whole = k.c0 == 0 && k.count * kChunk >= inputs[k.input].length;
      task_ok[t] = subtree(inputs[k.input], k.c0, k.count, whole, cvs.get(), scratch.get(), &values[t * 8]);
    }
  }
  std::vector<std::string> hex(inputs.size());
  ok.assign(inputs.size(), 1);
  static const char* digits = "0123456789abcdef";
  for (size_t i = 0; i < inputs.size(); i++) {
    const size_t t0 = first[i], t1 = i + 1 < inputs.size() ? first[i + 1] : tasks.size();
    for (size_t t = t0; t < t1; t++) ok[i] = ok[i] && task_ok[t];
    if (!ok[i]) continue;
    // the subtree values are consecutive in `values`: merged in place (several subtrees: the root merge is here)
    if (t1 - t0 > 1) merge(&values[t0 * 8], t1 - t0, true);
    uint8_t bytes[32];
    std::memcpy(bytes, &values[t0 * 8], 32);
    hex[i].resize(64);
    for (int k = 0; k < 32; k++) {
      hex[i][2 * k] = digits[bytes[k] >> 4];
      hex[i][2 * k + 1] = digits[bytes[k] & 15];
    }
  }
  return hex;
}

int threads_arg(const Napi::CallbackInfo& info, size_t at, const char* fn) {
  if (info.Length() <= at || !info[at].IsNumber()) throw Napi::TypeError::New(info.Env(), std::string(fn) + ": expected threads");
  const int t = info[at].As<Napi::Number>().Int32Value();
  if (t < 1) throw Napi::RangeError::New(info.Env(), std::string(fn) + ": threads must be ≥ 1");
  return t;
}

// blake3Parts(parts: Uint8Array[][], threads) → hex digest of each part (its arrays hashed as one concatenation).
Napi::Value blake3_parts(const Napi::CallbackInfo& info) {
  const Napi::Env env = info.Env();
  if (info.Length() < 2 || !info[0].IsArray()) throw Napi::TypeError::New(env, "blake3Parts: expected (parts: Uint8Array[][], threads)");
  const int threads = threads_arg(info, 1, "blake3Parts");
  const Napi::Array arr = info[0].As<Napi::Array>();
  // Pointers are taken here, in the JavaScript thread: the worker threads touch no N-API value.
  std::vector<Input> inputs(arr.Length());
  for (uint32_t i = 0; i < arr.Length(); i++) {
    const Napi::Value v = arr.Get(i);
    if (!v.IsArray()) throw Napi::TypeError::New(env, "blake3Parts: each part must be an array of Uint8Array");
    const Napi::Array a = v.As<Napi::Array>();
    for (uint32_t j = 0; j < a.Length(); j++) {
      const Napi::Value b = a.Get(j);
      if (!b.IsTypedArray() || b.As<Napi::TypedArray>().TypedArrayType() != napi_uint8_array) throw Napi::TypeError::New(env, "blake3Parts: each part must be an array of Uint8Array");
      const Napi::Uint8Array u = b.As<Napi::Uint8Array>();
      if (u.ByteLength() > 0) inputs[i].spans.push_back({u.Data(), u.ByteLength()});
      inputs[i].length += u.ByteLength();
    }
  }
  std::vector<char> ok;
  const std::vector<std::string> hex = digest_all(inputs, threads, ok);
  Napi::Array res = Napi::Array::New(env, hex.size());
  for (size_t i = 0; i < hex.size(); i++) res.Set(static_cast<uint32_t>(i), Napi::String::New(env, hex[i]));
  return res;
}

// blake3File(fd, length, threads) → hex digest of the file's bytes [0, length), read with pread (the descriptor's
// offset untouched), or null when they cannot all be read (not an open regular file, a read error, or the file
// ends before `length`).
Napi::Value blake3_file(const Napi::CallbackInfo& info) {
  const Napi::Env env = info.Env();
  if (info.Length() < 3 || !info[0].IsNumber() || !info[1].IsNumber()) throw Napi::TypeError::New(env, "blake3File: expected (fd, length, threads)");
  const double fdv = info[0].As<Napi::Number>().DoubleValue(), len = info[1].As<Napi::Number>().DoubleValue();
  if (!(fdv >= 0 && fdv <= 2147483647.0 && fdv == std::floor(fdv))) throw Napi::RangeError::New(env, "blake3File: fd must be an integer ≥ 0");
  if (!(len >= 0 && len <= 9007199254740991.0 && len == std::floor(len))) throw Napi::RangeError::New(env, "blake3File: length must be an integer ≥ 0");
  const int threads = threads_arg(info, 2, "blake3File");
  std::vector<Input> inputs(1);
  inputs[0].from_file = true;
  inputs[0].fd = static_cast<int>(fdv);
  inputs[0].length = static_cast<size_t>(len);
  // a length the file does not have is answered before any work is sized by it
  struct stat st;
  if (fstat(inputs[0].fd, &st) != 0 || !S_ISREG(st.st_mode) || static_cast<double>(st.st_size) < len) return env.Null();
  std::vector<char> ok;
  const std::vector<std::string> hex = digest_all(inputs, threads, ok);
  return ok[0] ? Napi::Value(Napi::String::New(env, hex[0])) : env.Null();
}

// blake3Level(level?) → the kernel level in use; with an argument, sets it (tests: 0 scalar, 1 AVX2, 2 AVX-512).
Napi::Value blake3_level(const Napi::CallbackInfo& info) {
  if (info.Length() > 0 && info[0].IsNumber()) g_level = info[0].As<Napi::Number>().Int32Value();
  const int lv = level();
  return Napi::Number::New(info.Env(), lv >= 2 && g_avx512 ? 2 : lv >= 1 && g_avx2 ? 1 : 0);
}

}  // namespace

void register_blake3(Napi::Env env, Napi::Object exports) {
  exports.Set("blake3Parts", Napi::Function::New(env, blake3_parts));
  exports.Set("blake3File", Napi::Function::New(env, blake3_file));
  exports.Set("blake3Level", Napi::Function::New(env, blake3_level));
}
