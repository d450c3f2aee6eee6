#include "device/data_type.h"

#include <array>
#include <utility>

#include "absl/strings/string_view.h"

namespace baton::device {
namespace {

struct DataTypeInfo {
  DataType type;
  absl::string_view name;
  size_t size;
};

// Indexed by the enum's value; DataTypeName and ParseDataType both read this one table so that
// names cannot drift apart.
constexpr std::array<DataTypeInfo, 12> kDataTypes = {{
    {DataType::kInt8, "int8", 1},
    {DataType::kUint8, "uint8", 1},
    {DataType::kInt32, "int32", 4},
    {DataType::kUint32, "uint32", 4},
    {DataType::kInt64, "int64", 8},
    {DataType::kUint64, "uint64", 8},
    {DataType::kFloat16, "float16", 2},
    {DataType::kBfloat16, "bfloat16", 2},
    {DataType::kFloat32, "float32", 4},
    {DataType::kFloat64, "float64", 8},
    {DataType::kFp8E4M3, "fp8_e4m3", 1},
    {DataType::kFp8E5M2, "fp8_e5m2", 1},
}};

constexpr std::array<std::pair<ReduceOp, absl::string_view>, 5> kReduceOps = {{
    {ReduceOp::kSum, "sum"},
    {ReduceOp::kProd, "prod"},
    {ReduceOp::kMin, "min"},
    {ReduceOp::kMax, "max"},
    {ReduceOp::kAvg, "avg"},
}};

constexpr bool TablesMatchEnums() {
  for (size_t i = 0; i < kDataTypes.size(); ++i) {
    if (static_cast<size_t>(kDataTypes[i].type) != i) return false;
  }
  for (size_t i = 0; i < kReduceOps.size(); ++i) {
    if (static_cast<size_t>(kReduceOps[i].first) != i) return false;
  }
  return true;
}
static_assert(TablesMatchEnums(), "tables must list the enumerators in declaration order");

}  // namespace

// Values outside the enum (a corrupt cast from the wire) get size 0 and name "unknown" rather
// than reading past the table.
size_t DataTypeSize(DataType type) {
  const auto index = static_cast<size_t>(type);
  return index < kDataTypes.size() ? kDataTypes[index].size : 0;
}

absl::string_view DataTypeName(DataType type) {
  const auto index = static_cast<size_t>(type);
  return index < kDataTypes.size() ? kDataTypes[index].name : "unknown";
}

std::optional<DataType> ParseDataType(absl::string_view name) {
  for (const DataTypeInfo& info : kDataTypes) {
    if (info.name == name) return info.type;
  }
  return std::nullopt;
}

absl::string_view ReduceOpName(ReduceOp op) {
  const auto index = static_cast<size_t>(op);
  return index < kReduceOps.size() ? kReduceOps[index].second : "unknown";
}

std::optional<ReduceOp> ParseReduceOp(absl::string_view name) {
  for (const auto& [op, op_name] : kReduceOps) {
    if (op_name == name) return op;
  }
  return std::nullopt;
}

}  // namespace baton::device
