// sha256Parts(parts, threads): the SHA-256 of each part (a list of byte arrays, hashed as one concatenation),
// parts side by side on up to `threads` threads. For the core's trust chain (harness/io/sha256_parts.ts), in
// this addon because every run loads it: the FP16 cache's routed experts are verified when first routed to,
// a token routes to several at once, and one thread hashes ~1.75 GB/s here (SHA-NI), so hashing a layer's
// 6 experts (~300 MB at real width) one after the other in the main thread left the second core idle.
// The digest is OpenSSL's SHA-256, the one node:crypto's createHash('sha256') computes (the symbols are
// node's own: the addon links against the running node), so a result equals the JavaScript fallback's.
// Each part's bytes are read where they lie (a mapping of the cache file): the bytes hashed are the bytes used.
#include <napi.h>
#include <omp.h>
#include <openssl/evp.h>

#include <cstdint>
#include <string>
#include <vector>

#include "dequant_exact.h"

namespace {

struct Span {
  const uint8_t* p;
  size_t n;
};

// Digest of one part into out[32]; false when OpenSSL refuses (never expected: SHA-256 is always there).
bool digest(const std::vector<Span>& part, unsigned char* out) {
  EVP_MD_CTX* ctx = EVP_MD_CTX_new();
  bool ok = ctx != nullptr && EVP_DigestInit_ex(ctx, EVP_sha256(), nullptr) == 1;
  for (const Span& s : part) ok = ok && EVP_DigestUpdate(ctx, s.p, s.n) == 1;
  unsigned int len = 0;
  ok = ok && EVP_DigestFinal_ex(ctx, out, &len) == 1 && len == 32;
  EVP_MD_CTX_free(ctx);
  return ok;
}

Napi::Value sha256_parts(const Napi::CallbackInfo& info) {
  const Napi::Env env = info.Env();
  if (info.Length() < 2 || !info[0].IsArray() || !info[1].IsNumber()) throw Napi::TypeError::New(env, "sha256Parts: expected (parts: Uint8Array[][], threads)");
  const Napi::Array arr = info[0].As<Napi::Array>();
  const int threads = info[1].As<Napi::Number>().Int32Value();
  if (threads < 1) throw Napi::RangeError::New(env, "sha256Parts: threads must be ≥ 1");
  // Pointers are taken here, in the JavaScript thread: the worker threads below touch no N-API value.
  std::vector<std::vector<Span>> parts(arr.Length());
  for (uint32_t i = 0; i < arr.Length(); i++) {
    const Napi::Value v = arr.Get(i);
    if (!v.IsArray()) throw Napi::TypeError::New(env, "sha256Parts: each part must be an array of Uint8Array");
    const Napi::Array a = v.As<Napi::Array>();
    for (uint32_t j = 0; j < a.Length(); j++) {
      const Napi::Value b = a.Get(j);
      if (!b.IsTypedArray() || b.As<Napi::TypedArray>().TypedArrayType() != napi_uint8_array) throw Napi::TypeError::New(env, "sha256Parts: each part must be an array of Uint8Array");
      const Napi::Uint8Array u = b.As<Napi::Uint8Array>();
      parts[i].push_back({u.Data(), u.ByteLength()});
    }
  }
  const int n = static_cast<int>(parts.size());
  std::vector<unsigned char> out(static_cast<size_t>(n) * 32);
  std::vector<char> ok(static_cast<size_t>(n), 0);
  // One part per thread at a time: parts are similar in size (a layer's experts), dynamic for the rest.
#pragma omp parallel for num_threads(threads) schedule(dynamic, 1)
  for (int i = 0; i < n; i++) ok[i] = digest(parts[i], &out[static_cast<size_t>(i) * 32]);
  Napi::Array res = Napi::Array::New(env, n);
  static const char* hex = "0123456789abcdef";
  for (int i = 0; i < n; i++) {
    if (!ok[i]) throw Napi::Error::New(env, "sha256Parts: OpenSSL SHA-256 failed");
    std::string s(64, '0');
    for (int k = 0; k < 32; k++) {
      s[2 * k] = hex[out[i * 32 + k] >> 4];
      s[2 * k + 1] = hex[out[i * 32 + k] & 15];
    }
    res.Set(i, Napi::String::New(env, s));
  }
  return res;
}

}  // namespace

void register_sha256_parts(Napi::Env env, Napi::Object exports) { exports.Set("sha256Parts", Napi::Function::New(env, sha256_parts)); }
