#pragma once

// Element types and reduction operators that collectives understand, with their names as users
// write them (the names `baton bench -d/-r` and the client API accept). They are the element-wise
// kernels' vocabulary (device/kernels.h), so they live in the device layer, beneath collective/;
// collective/data_type.h names the same types in baton::collective for the operation's
// vocabulary (OpSpec, the wire format, libbaton).

#include <cstddef>
#include <optional>

#include "absl/strings/string_view.h"

namespace baton::device {

enum class DataType {
  kInt8,
  kUint8,
  kInt32,
  kUint32,
  kInt64,
  kUint64,
  kFloat16,
  kBfloat16,
  kFloat32,
  kFloat64,
  kFp8E4M3,
  kFp8E5M2,
};

enum class ReduceOp {
  kSum,
  kProd,
  kMin,
  kMax,
  kAvg,  // sum, then divided by the number of ranks once at the end
};

// Size of one element in bytes.
size_t DataTypeSize(DataType type);

// "int8", "uint8", "int32", "uint32", "int64", "uint64", "float16", "bfloat16", "float32",
// "float64", "fp8_e4m3", "fp8_e5m2".
absl::string_view DataTypeName(DataType type);
std::optional<DataType> ParseDataType(absl::string_view name);

// "sum", "prod", "min", "max", "avg".
absl::string_view ReduceOpName(ReduceOp op);
std::optional<ReduceOp> ParseReduceOp(absl::string_view name);

}  // namespace baton::device
