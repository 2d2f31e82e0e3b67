/*
 * ld_numerics.h — the single source of the device path's element-level numerics.
 *
 * The same header compiles as host C++ (the `emulated` backend, device-hip/src) and as HIP/CUDA device
 * code (the `hip` backend's kernels), so both decode, round and accumulate identically, bit for bit.
 * That is why it is plain C-style inline code: no STL, no exceptions, no static tables (a table would need
 * __constant__ on a GPU), and every float is built from integer bits instead of relying on compiler
 * conversions (_Float16 casts, ldexpf, FTZ behaviour) that differ between host and device compilers.
 *
 * Compile requirements that bit-identity depends on:
 *   - no floating-point contraction: host g++ `-ffp-contract=off`; hipcc `-ffp-contract=off`; nvcc
 *     `--fmad=false`. Where a fused multiply-add is part of the spec it is written as fmaf explicitly.
 *   - no -ffast-math; f32 denormals kept (hipcc's default; never -fgpu-flush-denormals-to-zero).
 */
#ifndef LD_NUMERICS_H
#define LD_NUMERICS_H

#include <stdint.h>
#include <stddef.h>
#include <string.h>
#include <math.h>

#if defined(__HIPCC__) || defined(__CUDACC__)
#define LD_HD __host__ __device__
#else
#define LD_HD
#endif

#define LD_INLINE LD_HD static inline

/* ---------------------------------------------------------------------------------------------------
 * Bit casts (memcpy is the one cast that is defined in C++ and compiles to a move on every target).
 * ------------------------------------------------------------------------------------------------- */
LD_INLINE float ld_bits_f32(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}
LD_INLINE uint32_t ld_f32_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}
/* Little-endian f32 read from a byte buffer that need not be 4-byte aligned (a Uint8Array view). */
LD_INLINE float ld_load_f32le(const uint8_t* p) {
  uint32_t u = (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
  return ld_bits_f32(u);
}
/* 2^e as a normal f32, exact, for e in [-126, 127]. */
LD_INLINE float ld_pow2f(int e) { return ld_bits_f32((uint32_t)(e + 127) << 23); }

/* ---------------------------------------------------------------------------------------------------
 * Scalar formats
 * ------------------------------------------------------------------------------------------------- */

/* FP4 E2M1 (OCP MX): sign bit 3; magnitudes {0, .5, 1, 1.5, 2, 3, 4, 6}; code 8 is −0. */
LD_INLINE float ld_e2m1_to_f32(int code) {
  uint32_t sign = (uint32_t)(code & 8) << 28;
  int c = code & 7;
  uint32_t mag;
  if (c == 0) mag = 0;
  else if (c == 1) mag = 0x3F000000u; /* 0.5: the one subnormal code */
  else mag = ((uint32_t)((c >> 1) - 1 + 127) << 23) | ((uint32_t)(c & 1) << 22);
  return ld_bits_f32(sign | mag);
}

/* E8M0 scale: 2^(b−127); 0xFF is NaN. b = 0 is 2^−127, an f32 subnormal (0x00400000). */
LD_INLINE float ld_e8m0_to_f32(uint8_t b) {
  if (b == 0xFF) return ld_bits_f32(0x7FC00000u);
  if (b == 0) return ld_bits_f32(0x00400000u);
  return ld_bits_f32((uint32_t)b << 23);
}

/* F8 E4M3 "fn" (OCP): bias 7, no Inf, 0x7F/0xFF are NaN, max ±448; e = 0 is subnormal m·2^−9. */
LD_INLINE float ld_e4m3_to_f32(uint8_t b) {
  uint32_t sign = (uint32_t)(b & 0x80) << 24;
  int e = (b >> 3) & 0xF, m = b & 7;
  if (e == 0xF && m == 7) return ld_bits_f32(sign | 0x7FC00000u);
  if (e == 0) {
    /* m·2^−9 = (m/4)·2^−7: exact as a normalised f32; built as an integer times a power of two. */
    float v = (float)m * ld_pow2f(-9);
    return ld_bits_f32(sign | ld_f32_bits(v));
  }
  return ld_bits_f32(sign | ((uint32_t)(e - 7 + 127) << 23) | ((uint32_t)m << 20));
}

/*
 * The element formats, one row each: the table the emulation (device-hip/src), the kernels
 * (device-hip/kernels) and the TypeScript registry (harness/formats/registry.ts) share. Adding a format is
 * one row here, its decoder above, and its registry entry. Columns: name, id (ABI with device-hip/binding.ts
 * ELEMENT_FORMATS), bits, decoder (code → f32, exact).
 */
#define LD_ELEMENT_FORMATS(X)              \
  X(E2M1, 0, 4, ld_e2m1_to_f32)            \
  X(E4M3, 1, 8, ld_e4m3_elem_f32)          \
  X(E8M0, 2, 8, ld_e8m0_elem_f32)          \
  X(NF4, 3, 4, ld_nf4_to_f32)              \
  X(BNB_FP4, 4, 4, ld_bnb_fp4_to_f32)

LD_INLINE float ld_e4m3_elem_f32(int code) { return ld_e4m3_to_f32((uint8_t)code); }

/* bitsandbytes' NF4 (get_4bit_type("nf4")): the float32 values bitsandbytes stores as quant_map. A
 * bitsandbytes checkpoint is decoded with its stored quant_map; this named table is what the loader checks
 * the stored one against, and what the code-table fault reads E2M1 codes with. */
LD_INLINE float ld_nf4_to_f32(int code) {
  const float t[16] = {-1.0f, -0.6961928009986877f, -0.5250730514526367f, -0.39491748809814453f,
                       -0.28444138169288635f, -0.18477343022823334f, -0.09105003625154495f, 0.0f,
                       0.07958029955625534f, 0.16093020141124725f, 0.24611230194568634f, 0.33791524171829224f,
                       0.44070982933044434f, 0.5626170039176941f, 0.7229568362236023f, 1.0f};
  return t[code & 15];
}

/* bitsandbytes' "fp4" (get_4bit_type("fp4")): not OCP E2M1. Raw magnitudes {0, 1/16, 8, 12, 4, 6, 2, 3} in
 * code order, sign bit 3, divided by their max 12 in f32 (one correctly rounded division). */
LD_INLINE float ld_bnb_fp4_to_f32(int code) {
  const float raw[8] = {0.0f, 0.0625f, 8.0f, 12.0f, 4.0f, 6.0f, 2.0f, 3.0f};
  const float v = raw[code & 7] / 12.0f;
  return (code & 8) ? -v : v;
}
LD_INLINE float ld_e8m0_elem_f32(int code) { return ld_e8m0_to_f32((uint8_t)code); }

typedef enum ld_element_format {
#define LD_ELEMENT_ENUM(name, id, bits, dec) LD_ELEM_##name = id,
  LD_ELEMENT_FORMATS(LD_ELEMENT_ENUM)
#undef LD_ELEMENT_ENUM
  LD_ELEM_COUNT
} ld_element_format;

/* Any element format's code → f32 (exact): the one dispatch over the table. NaN for an unknown format. */
LD_INLINE float ld_element_to_f32(int format, int code) {
  switch (format) {
#define LD_ELEMENT_CASE(name, id, bits, dec) \
  case id:                                   \
    return dec(code & ((1 << bits) - 1));
    LD_ELEMENT_FORMATS(LD_ELEMENT_CASE)
#undef LD_ELEMENT_CASE
    default:
      return ld_bits_f32(0x7FC00000u);
  }
}

/* BF16 is the top half of an IEEE binary32. */
LD_INLINE float ld_bf16_to_f32(uint16_t h) { return ld_bits_f32((uint32_t)h << 16); }

/* IEEE binary16 bits → f32 (exact). */
LD_INLINE float ld_f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000) << 16;
  uint32_t e = (h >> 10) & 0x1F, m = h & 0x3FF;
  if (e == 0x1F) return ld_bits_f32(sign | 0x7F800000u | (m << 13)); /* Inf, NaN keeps its payload */
  if (e != 0) return ld_bits_f32(sign | ((e + 112) << 23) | (m << 13));
  if (m == 0) return ld_bits_f32(sign);
  /* subnormal m·2^−24: normalise by shifting the leading one into the implicit bit */
  int sh = 0;
  while ((m & 0x400) == 0) {
    m <<= 1;
    sh++;
  }
  return ld_bits_f32(sign | ((uint32_t)(113 - sh) << 23) | ((m & 0x3FF) << 13));
}

/*
 * f32 → binary16 bits, round to nearest even (what a GPU cvt.rn.f16.f32 does), with subnormals; finite
 * values at or past 65520 (the midpoint above 65504) go to ±Inf; NaN → sign | 0x7E00 (quiet NaN).
 */
LD_INLINE uint16_t ld_f32_to_f16(float f) {
  uint32_t u = ld_f32_bits(f);
  uint32_t sign = (u >> 16) & 0x8000u;
  int exp = (int)((u >> 23) & 0xFF);
  uint32_t mant = u & 0x7FFFFFu;
  if (exp == 0xFF) return (uint16_t)(sign | 0x7C00u | (mant != 0 ? 0x200u : 0u));
  int e = exp - 127 + 15;
  if (e >= 31) return (uint16_t)(sign | 0x7C00u);
  if (e <= 0) {
    if (e < -10) return (uint16_t)sign; /* below half the smallest subnormal (2^−25): rounds to ±0 */
    mant |= 0x800000u;
    int shift = 14 - e;
    uint32_t half = 1u << (shift - 1);
    uint32_t rest = mant & ((1u << shift) - 1u);
    uint32_t q = mant >> shift;
    if (rest > half || (rest == half && (q & 1u))) q += 1; /* may round up into the smallest normal: correct */
    return (uint16_t)(sign | q);
  }
  uint32_t q = ((uint32_t)e << 10) | (mant >> 13);
  uint32_t rest = mant & 0x1FFFu;
  if (rest > 0x1000u || (rest == 0x1000u && (q & 1u))) q += 1; /* a carry into the exponent is correct, up to Inf */
  return (uint16_t)(sign | q);
}

LD_INLINE uint16_t ld_bf16_to_f16(uint16_t h) { return ld_f32_to_f16(ld_bf16_to_f32(h)); }

/*
 * exp for f32, used by softmax and SiLU. Not libm's expf: glibc, ROCm's ocml and CUDA's libdevice each
 * round differently in the last bit, and the emulator must agree with the GPU kernel bit for bit. This is
 * Cephes' expf (error ≈ 1 ulp) written with explicit fmaf, so any compiler on any target gives the same
 * bits, and a test can replay it exactly in TypeScript.
 *   n = round(x·log2 e) (by the 1.5·2^23 shifter), r = x − n·C1 − n·C2 (C1 has 9 bits: n·C1 and the
 *   subtraction are exact), p = Horner polynomial in r, result = (p·r² + r + 1)·2^n, the power of two
 *   applied in two exact-or-once-rounded steps so subnormal results round once.
 */
LD_INLINE float ld_expf(float x) {
  if (x != x) return x + x;
  if (x > 89.0f) return ld_bits_f32(0x7F800000u);
  if (x < -104.0f) return 0.0f;
  float z = x * 1.44269504088896341f;
  float n = (z + 12582912.0f) - 12582912.0f;
  float r = x - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = fmaf(p, r, 1.3981999507e-3f);
  p = fmaf(p, r, 8.3334519073e-3f);
  p = fmaf(p, r, 4.1665795894e-2f);
  p = fmaf(p, r, 1.6666665459e-1f);
  p = fmaf(p, r, 5.0000001201e-1f);
  float r2 = r * r;
  float y = fmaf(p, r2, r) + 1.0f;
  int ni = (int)n;
  if (ni > 127) return (y * ld_pow2f(127)) * ld_pow2f(ni - 127);
  if (ni < -126) return (y * ld_pow2f(ni + 126)) * ld_pow2f(-126);
  return y * ld_pow2f(ni);
}

/* ---------------------------------------------------------------------------------------------------
 * Injected device-path faults (DESIGN §9). Values are the ABI shared with device-hip/binding.ts.
 * A fault that does not apply to a format (E3M0_TABLE / NIBBLE_SWAP on FP8, any fault on plain weights,
 * E8M0_AS_INT on F32 scales) is a no-op there: the bug it models lives in another decoder.
 * ------------------------------------------------------------------------------------------------- */
typedef enum ld_fault {
  LD_FAULT_NONE = 0,
  LD_FAULT_E3M0_TABLE = 1,   /* nibble magnitude decoded as E3M0: c&7 == 0 → 0, else 2^((c&7)−1) */
  LD_FAULT_NIBBLE_SWAP = 2,  /* element 2j taken from the high nibble, 2j+1 from the low */
  LD_FAULT_SCALE_MISSING = 3, /* scale treated as 1.0 */
  LD_FAULT_SCALE_AXIS = 4,   /* scale grid [R, C] read as if stored transposed: (r, c) at c·R + r */
  LD_FAULT_SCALE_STRIDE = 5, /* row stride C+1: (r·(C+1) + c) mod (R·C) */
  LD_FAULT_E8M0_AS_INT = 6,  /* the scale byte used as an integer, not 2^(b−127) */
  LD_FAULT_GLOBAL_SCALE_INVERTED = 7, /* NVFP4: a multiplier global scale divided by, a divisor multiplied by */
  LD_FAULT_E4M3_SCALE_AS_E8M0 = 8,    /* NVFP4: the E4M3 block-scale byte decoded as E8M0, 2^(b−127) */
  LD_FAULT_SCALE_BLOCK_SIZE = 9,      /* NVFP4: 16-wide blocks read as 32: scale (o, c) taken at o·⌊C/2⌋ + ⌊c/2⌋ */
  LD_FAULT_CODE_TABLE = 10,           /* FP4 codes read with the other family's table: bitsandbytes codes as E2M1, E2M1 codes as NF4 */
  LD_FAULT_NESTED_ABSMAX_RAW = 11     /* bitsandbytes double quant: the U8 absmax codes used as the absmax values */
} ld_fault;
#define LD_FAULT_COUNT 12

/* Flat index of scale (r, c) in a row-major [R, C] grid, as the (possibly faulty) kernel reads it. */
LD_INLINE size_t ld_scale_index(size_t R, size_t C, size_t r, size_t c, int fault) {
  if (fault == LD_FAULT_SCALE_AXIS) return c * R + r;
  if (fault == LD_FAULT_SCALE_STRIDE) return (r * (C + 1) + c) % (R * C);
  return r * C + c;
}

LD_INLINE float ld_e8m0_scale(uint8_t b, int fault) {
  if (fault == LD_FAULT_SCALE_MISSING) return 1.0f;
  if (fault == LD_FAULT_E8M0_AS_INT) return (float)b;
  return ld_e8m0_to_f32(b);
}

/* One MXFP4 element from its nibble and its (already located) scale byte: E2M1 · 2^(b−127) is exact in
 * f32 (3 significant bits times a power of two), so the only rounding is the final one to f16. */
LD_INLINE uint16_t ld_mxfp4_value_f16(int nibble, uint8_t scale_byte, int fault) {
  float v;
  if (fault == LD_FAULT_E3M0_TABLE) {
    int c = nibble & 7;
    v = c == 0 ? 0.0f : ld_pow2f(c - 1);
    if (nibble & 8) v = -v;
  } else {
    v = ld_element_to_f32(fault == LD_FAULT_CODE_TABLE ? LD_ELEM_NF4 : LD_ELEM_E2M1, nibble);
  }
  return ld_f32_to_f16(v * ld_e8m0_scale(scale_byte, fault));
}

/*
 * W[o, i] of an MXFP4 weight: packed bytes [out, in/2] (low nibble = even i), E8M0 scales [out, in/32].
 * `in` must be a multiple of 32.
 */
LD_INLINE uint16_t ld_mxfp4_elem_f16(const uint8_t* packed, const uint8_t* scales, int out, int in, int o, int i,
                                     int fault) {
  uint8_t byte = packed[(size_t)o * (size_t)(in / 2) + (size_t)(i / 2)];
  int high = (i & 1) != (fault == LD_FAULT_NIBBLE_SWAP);
  int nibble = high ? (byte >> 4) : (byte & 0xF);
  size_t C = (size_t)(in / 32);
  uint8_t sb = scales[ld_scale_index((size_t)out, C, (size_t)o, (size_t)(i / 32), fault)];
  return ld_mxfp4_value_f16(nibble, sb, fault);
}

/* The FP8 block scale of block (r, c) in a [R, C] grid of E8M0 bytes or little-endian F32 values. */
LD_INLINE float ld_fp8_scale(const void* scales, int scale_is_f32, size_t R, size_t C, size_t r, size_t c, int fault) {
  if (fault == LD_FAULT_SCALE_MISSING) return 1.0f;
  size_t at = ld_scale_index(R, C, r, c, fault);
  const uint8_t* s = (const uint8_t*)scales;
  if (scale_is_f32) return ld_load_f32le(s + 4 * at);
  return ld_e8m0_scale(s[at], fault);
}

/* E4M3 · scale in f32 (exact for E8M0 scales; one rounding for F32 scales), then RNE to f16. */
LD_INLINE uint16_t ld_fp8_value_f16(uint8_t w, float scale) { return ld_f32_to_f16(ld_e4m3_to_f32(w) * scale); }

/* W[o, i] of an FP8-block weight: E4M3 bytes [out, in], scale grid [ceil(out/bo), ceil(in/bi)]. */
LD_INLINE uint16_t ld_fp8_elem_f16(const uint8_t* w, const void* scales, int scale_is_f32, int out, int in,
                                   int block_out, int block_in, int o, int i, int fault) {
  size_t R = (size_t)((out + block_out - 1) / block_out), C = (size_t)((in + block_in - 1) / block_in);
  float s = ld_fp8_scale(scales, scale_is_f32, R, C, (size_t)(o / block_out), (size_t)(i / block_in), fault);
  return ld_fp8_value_f16(w[(size_t)o * (size_t)in + (size_t)i], s);
}

/*
 * NVFP4 (ModelOpt, compressed-tensors): packed bytes [out, in/2] low-even, E4M3 block scales [out, in/16],
 * one f32 global scale per tensor — a multiplier (ModelOpt weight_scale_2) or a divisor (compressed-tensors
 * weight_global_scale). The block's scale is formed in f32 first, s = e4m3(b) · g or e4m3(b) / g (one f32
 * rounding, correctly rounded on host, HIP and CUDA without fast-math), then the element E2M1 · s in f32
 * (one more rounding at most) and rounded once to f16 — never an f16 scale (e4m3 · g leaves f16's range).
 */
LD_INLINE float ld_nvfp4_scale(uint8_t b, float global, int divisor, int fault) {
  if (fault == LD_FAULT_SCALE_MISSING) return 1.0f;
  float s = ld_element_to_f32(fault == LD_FAULT_E4M3_SCALE_AS_E8M0 ? LD_ELEM_E8M0 : LD_ELEM_E4M3, b);
  if (fault == LD_FAULT_GLOBAL_SCALE_INVERTED) divisor = !divisor;
  return divisor ? s / global : s * global;
}

/* Flat index of NVFP4 scale (o, c) in its [out, C] grid (C = in/16), as the (possibly faulty) kernel reads it. */
LD_INLINE size_t ld_nvfp4_scale_index(size_t out, size_t C, size_t o, size_t c, int fault) {
  if (fault == LD_FAULT_SCALE_BLOCK_SIZE) return o * (C / 2) + c / 2;
  return ld_scale_index(out, C, o, c, fault);
}

LD_INLINE float ld_fp4_elem_f32(int nibble, int fault) {
  if (fault == LD_FAULT_E3M0_TABLE) {
    int c = nibble & 7;
    float v = c == 0 ? 0.0f : ld_pow2f(c - 1);
    return (nibble & 8) ? -v : v;
  }
  return ld_element_to_f32(fault == LD_FAULT_CODE_TABLE ? LD_ELEM_NF4 : LD_ELEM_E2M1, nibble);
}

LD_INLINE uint16_t ld_nvfp4_value_f16(int nibble, float scale, int fault) { return ld_f32_to_f16(ld_fp4_elem_f32(nibble, fault) * scale); }

/* W[o, i] of an NVFP4 weight (`in` a multiple of 16). */
LD_INLINE uint16_t ld_nvfp4_elem_f16(const uint8_t* packed, const uint8_t* scales, int out, int in, float global, int divisor,
                                     int o, int i, int fault) {
  uint8_t byte = packed[(size_t)o * (size_t)(in / 2) + (size_t)(i / 2)];
  int high = (i & 1) != (fault == LD_FAULT_NIBBLE_SWAP);
  int nibble = high ? (byte >> 4) : (byte & 0xF);
  size_t C = (size_t)(in / 16);
  uint8_t sb = scales[ld_nvfp4_scale_index((size_t)out, C, (size_t)o, (size_t)(i / 16), fault)];
  return ld_nvfp4_value_f16(nibble, ld_nvfp4_scale(sb, global, divisor, fault), fault);
}

/*
 * bitsandbytes 4-bit (spec/fp4-formats.md §5): codes over the row-major flattened [out, in], two a byte,
 * HIGH-even (element 2k = byte >> 4, 2k+1 = byte & 15); blocks of `blocksize` consecutive flat elements.
 * W[j] = quant_map[code_j] · absmax[⌊j/blocksize⌋], the stored quant_map (16 f32) and absmax in f32, the
 * product rounded once to f32 and then once to f16. With double quantization the absmax is itself stored as
 * U8 codes: absmax[b] = nested_map[code_b] · nested_absmax[⌊b/nested_blocksize⌋] + nested_offset, a product
 * and a sum each rounded to f32 (bitsandbytes' dequantize_blockwise, then `absmax += offset`; never one fma:
 * every build of this header runs with -ffp-contract=off).
 */
LD_INLINE float ld_bnb4_absmax(const uint8_t* absmax, int absmax_is_codes, const float* nested_absmax, const float* nested_map,
                               float nested_offset, int nested_blocksize, size_t b, int fault) {
  if (fault == LD_FAULT_SCALE_MISSING) return 1.0f;
  if (!absmax_is_codes) return ld_load_f32le(absmax + 4 * b);
  const int c = absmax[b];
  if (fault == LD_FAULT_NESTED_ABSMAX_RAW) return (float)c;
  const float scaled = nested_map[c] * nested_absmax[b / (size_t)nested_blocksize];
  return scaled + nested_offset;
}

/* The code of flat element j, high-even (the nibble-swap fault reads it low-first). */
LD_INLINE int ld_bnb4_code(const uint8_t* packed, size_t j, int fault) {
  const uint8_t byte = packed[j / 2];
  const int high = ((j & 1) == 0) != (fault == LD_FAULT_NIBBLE_SWAP);
  return high ? (byte >> 4) : (byte & 0xF);
}

/* One element from its code and its block's absmax: quant_map[code] (or, code-table fault, E2M1[code]) · absmax. */
LD_INLINE uint16_t ld_bnb4_value_f16(int code, float absmax, const float* quant_map, int fault) {
  const float q = fault == LD_FAULT_CODE_TABLE ? ld_element_to_f32(LD_ELEM_E2M1, code) : quant_map[code & 15];
  return ld_f32_to_f16(q * absmax);
}

/* ---------------------------------------------------------------------------------------------------
 * GEMM accumulation order — the contract every matrix-product kernel (GPU thread, CPU AVX2, CPU scalar)
 * follows, so that results are bit-identical across them:
 *   A dot product over K accumulates in FP32 in LD_LANES = 8 interleaved lanes: lane l holds the sum of
 *   x[k]·w[k] for k ≡ l (mod 8), in increasing k, each step acc[l] = fmaf(x[k], w[k], acc[l]), starting
 *   from +0. The K tail (K not a multiple of 8) lands in the same lanes by the same rule. Lanes are then
 *   combined as ((l0+l4) + (l2+l6)) + ((l1+l5) + (l3+l7)).
 * Why this order: lane l of an 8-wide f32 vector loaded at k = 8q is exactly k ≡ l (mod 8), and the
 * combine is the natural halving reduction of a vector (hi+lo of 256 bits, then of 128, then of 64), so
 * the CPU kernel needs no shuffles; a GPU thread keeps 8 scalar accumulators the same way.
 * ------------------------------------------------------------------------------------------------- */
#define LD_LANES 8

LD_INLINE float ld_lanes_combine(const float* a) {
  return ((a[0] + a[4]) + (a[2] + a[6])) + ((a[1] + a[5]) + (a[3] + a[7]));
}

/* Reference dot product of two f16 vectors in the order above. */
LD_INLINE float ld_dot_f16(const uint16_t* x, const uint16_t* w, int k) {
  float acc[LD_LANES] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
  for (int i = 0; i < k; i++) acc[i & 7] = fmaf(ld_f16_to_f32(x[i]), ld_f16_to_f32(w[i]), acc[i & 7]);
  return ld_lanes_combine(acc);
}

/* The same order over f32 inputs (activations already widened from f16, which is exact). */
LD_INLINE float ld_dot_f32(const float* x, const float* w, int k) {
  float acc[LD_LANES] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
  for (int i = 0; i < k; i++) acc[i & 7] = fmaf(x[i], w[i], acc[i & 7]);
  return ld_lanes_combine(acc);
}

/* ---------------------------------------------------------------------------------------------------
 * Row ops and reductions shared by the emulation (src/ops.cc, src/attention.cc, src/dequant.cc) and the HIP
 * kernels (the .hip files in device-hip/kernels). Each helper is the element math the .cc files had inline; the order
 * of every reduction is written next to it, and both sides walk it the same way:
 *   - a dot product / sum of squares: the LD_LANES order above. On a GPU, 8 consecutive threads hold the
 *     8 lanes (thread l: k ≡ l mod 8, increasing k, fmaf) and combine them with xor-shuffles 4, 2, 1: since
 *     f32 + is commutative, lane 0 then holds ((l0+l4) + (l2+l6)) + ((l1+l5) + (l3+l7)) = ld_lanes_combine.
 *   - a softmax denominator: a sequential f32 sum in increasing index, any sink term last.
 *   - a max: order-free (`z > m ? z : m`, NaN never wins; max is exact, so any tree gives the same value).
 * ------------------------------------------------------------------------------------------------- */

/* Nibble of element 2j (odd = 0) or 2j+1 (odd = 1) of an MXFP4 byte, as the (possibly faulty) kernel
 * reads it: low nibble = even element, swapped by LD_FAULT_NIBBLE_SWAP. Same rule as ld_mxfp4_elem_f16. */
LD_INLINE int ld_mxfp4_nibble(uint8_t byte, int odd, int fault) {
  int high = (odd != 0) != (fault == LD_FAULT_NIBBLE_SWAP);
  return high ? (byte >> 4) : (byte & 0xF);
}

/* RMSNorm: inv = 1 / sqrtf(Σx²/dim + eps) with Σx² a dot product in the LD_LANES order (x with itself);
 * y = f16((x·inv)·w). sqrtf and / are correctly rounded on the host, HIP and CUDA (no fast-math). */
LD_INLINE float ld_rms_inv(float sum_sq, int dim, float eps) { return 1.0f / sqrtf(sum_sq / (float)dim + eps); }
LD_INLINE uint16_t ld_rmsnorm_elem_f16(uint16_t x, float inv, uint16_t w) {
  return ld_f32_to_f16((ld_f16_to_f32(x) * inv) * ld_f16_to_f32(w));
}

/* RoPE pair j of a head's rotated span (rot dims, half = rot/2): (j, j+half) rotate-half, or (2j, 2j+1)
 * interleaved; offsets relative to the span's start. */
LD_INLINE int ld_rope_index_a(int j, int interleaved) { return interleaved ? 2 * j : j; }
LD_INLINE int ld_rope_index_b(int j, int half, int interleaved) { return interleaved ? 2 * j + 1 : j + half; }
/* a' = a·c − b·s, b' = a·s + b·c, each product rounded (no fma), then f16. */
LD_INLINE uint16_t ld_rope_a_f16(uint16_t a, uint16_t b, float c, float s) {
  const float af = ld_f16_to_f32(a), bf = ld_f16_to_f32(b);
  const float ac = af * c, bs = bf * s;
  return ld_f32_to_f16(ac - bs);
}
LD_INLINE uint16_t ld_rope_b_f16(uint16_t a, uint16_t b, float c, float s) {
  const float af = ld_f16_to_f32(a), bf = ld_f16_to_f32(b);
  const float as = af * s, bc = bf * c;
  return ld_f32_to_f16(as + bc);
}

/* SwiGLU in f32: with limit > 0, g ≤ limit and |u| ≤ limit, written as comparisons so a NaN passes through
 * (torch.clamp keeps NaN; fminf would hide it); silu(g)·u = (g / (1 + ld_expf(−g)))·u. The same formula as
 * ld_deepseek.h's ld_swiglu_f32 (device-check and a test hold the two bit-identical). */
LD_INLINE float ld_swiglu_clamp_f32(float g, float u, float limit) {
  if (limit > 0.0f) {
    if (g > limit) g = limit;
    if (u > limit) u = limit;
    if (u < -limit) u = -limit;
  }
  return (g / (1.0f + ld_expf(-g))) * u;
}
LD_INLINE uint16_t ld_swiglu_f16(uint16_t g, uint16_t u, float limit) {
  return ld_f32_to_f16(ld_swiglu_clamp_f32(ld_f16_to_f32(g), ld_f16_to_f32(u), limit));
}

/* Residual add and scalar multiply: one f32 operation, one rounding. */
LD_INLINE uint16_t ld_add_f16(uint16_t a, uint16_t b) { return ld_f32_to_f16(ld_f16_to_f32(a) + ld_f16_to_f32(b)); }
LD_INLINE uint16_t ld_mul_scalar_f16(uint16_t a, float s) { return ld_f32_to_f16(ld_f16_to_f32(a) * s); }

/* Attention (src/attention.cc, src/decode.cc): the first key query t sees (window 0 = all s ≤ t). */
LD_INLINE int ld_attn_first_key(int t, int window) { return window > 0 && t - window + 1 > 0 ? t - window + 1 : 0; }
/* The running max of a softmax: a NaN score never wins (it propagates through its own exp term). */
LD_INLINE float ld_max_step(float m, float z) { return z > m ? z : m; }
/* A probability as the P·V product reads it: p / l rounded to f16, widened back. */
LD_INLINE float ld_attn_prob_f32(float p, float l) { return ld_f16_to_f32(ld_f32_to_f16(p / l)); }
/* Decode attention over a KV cache (src/decode.cc, ld_attention_decode): Bc sequences of cap slots, rows
 * [Hkv, D]; position s lives in slot s mod cap. A cache at least as long as the sequence holds position s in
 * slot s; a shorter one is a ring (gpt-oss's sliding layers keep window + chunk − 1 rows), valid as long as
 * every key a query sees is still in it. The row of key s, kv head hk, in cache sequence `seq` (the
 * emulation, the kernel and the host reference index the cache through this one function, or walk it from
 * slot 0 with ld_ring_slot). */
LD_INLINE size_t ld_ring_slot(int s, int cap) { return (size_t)(s % cap); }
LD_INLINE size_t ld_kv_cache_row(int seq, int cap, int s, int Hkv, int hk) { return ((size_t)seq * cap + ld_ring_slot(s, cap)) * Hkv + hk; }

/* MoE combine (scatter) of one output element: acc over a token's routed rows in increasing row order,
 * f32 adds from +0, then the shared expert's value last, one rounding (src/deepseek_moe.cc's order). */
LD_INLINE float ld_acc_add_f16(float acc, uint16_t v) { return acc + ld_f16_to_f32(v); }

#endif /* LD_NUMERICS_H */
