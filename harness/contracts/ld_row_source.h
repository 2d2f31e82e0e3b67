/*
 * The contract between the two native addons for the weights-first check's fused pass (issue 15): the device
 * emulation (ld_device) hands the reference (ld_reference) a producer of its FP16 dequantization of one stored
 * weight, row range by row range, and the reference's compare pulls rows from it into a small per-thread buffer,
 * so neither side materialises the whole tensor. Only this calling convention is shared: each side's decoder
 * stays its own code (device-hip/src/dequant.cc; reference-cpu/native/dequant_exact.cc).
 *
 * The producer is a napi External holding an LdRowSource, type-tagged with LD_ROW_SOURCE_TAG so a wrong object
 * is refused, never called. rows() is reentrant (it reads only `state`) and runs no OpenMP region of its own: the
 * caller's threads each pull their own rows.
 */
#ifndef LD_ROW_SOURCE_H
#define LD_ROW_SOURCE_H

#include <stdint.h>

typedef struct LdRowSource {
  /* dst [n, in] ← the device's FP16 bits of rows row0 .. row0+n−1 */
  void (*rows)(const struct LdRowSource* self, int64_t row0, int64_t n, uint16_t* dst);
  /* the same rows decoded from `weight`, the stored bytes of rows row0 .. row0+n−1 (row-major, as in the file),
     instead of the bound tensor's: the fused read's per-thread chunk (version 2) */
  void (*rows_from)(const struct LdRowSource* self, const uint8_t* weight, int64_t row0, int64_t n, uint16_t* dst);
  int64_t out, in;
  const void* state;
} LdRowSource;

/* napi_type_tag of the External */
#define LD_ROW_SOURCE_TAG_LOWER 0x6c64726f77737263ULL /* "ldrowsrc" */
#define LD_ROW_SOURCE_TAG_UPPER 0x0000000000000002ULL /* version 2 of this struct (rows_from) */

#endif
