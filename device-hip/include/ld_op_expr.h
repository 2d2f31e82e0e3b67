// The functions of the op table's expressions (device-hip/ops/table.ts) for the generated C++: the argument
// readers (src/ops_args.generated.h) and the hip backend's methods (hip/backend_ops.generated.inc). No N-API here:
// the backend builds without it (check/module_check.cc).
#pragma once

#include <cmath>

inline long long op_cdiv(long long a, long long b) { return (a + b - 1) / b; }
inline long long op_div(long long a, long long b) { return a / b; }
inline bool op_finite32(double x) { return std::isfinite((float)x); }
