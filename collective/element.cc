#include "collective/element.h"

#include <cstdint>

#include "device/half.h"

namespace baton::collective {
namespace {

template <typename T>
void Set(void* base, size_t i, double v) {
  static_cast<T*>(base)[i] = static_cast<T>(v);
}

template <typename T>
double Get(const void* base, size_t i) {
  return static_cast<double>(static_cast<const T*>(base)[i]);
}

}  // namespace

void SetElement(DataType type, void* base, size_t i, double v) {
  const float f = static_cast<float>(v);
  switch (type) {
    case DataType::kInt8:
      return Set<int8_t>(base, i, v);
    case DataType::kUint8:
      return Set<uint8_t>(base, i, v);
    case DataType::kInt32:
      return Set<int32_t>(base, i, v);
    case DataType::kUint32:
      return Set<uint32_t>(base, i, v);
    case DataType::kInt64:
      return Set<int64_t>(base, i, v);
    case DataType::kUint64:
      return Set<uint64_t>(base, i, v);
    case DataType::kFloat16:
      static_cast<uint16_t*>(base)[i] = device::FloatToHalf(f);
      return;
    case DataType::kBfloat16:
      static_cast<uint16_t*>(base)[i] = device::FloatToBfloat16(f);
      return;
    case DataType::kFloat32:
      return Set<float>(base, i, v);
    case DataType::kFloat64:
      return Set<double>(base, i, v);
    case DataType::kFp8E4M3:
      static_cast<uint8_t*>(base)[i] = device::FloatToFp8E4M3(f);
      return;
    case DataType::kFp8E5M2:
      static_cast<uint8_t*>(base)[i] = device::FloatToFp8E5M2(f);
      return;
  }
}

double GetElement(DataType type, const void* base, size_t i) {
  switch (type) {
    case DataType::kInt8:
      return Get<int8_t>(base, i);
    case DataType::kUint8:
      return Get<uint8_t>(base, i);
    case DataType::kInt32:
      return Get<int32_t>(base, i);
    case DataType::kUint32:
      return Get<uint32_t>(base, i);
    case DataType::kInt64:
      return Get<int64_t>(base, i);
    case DataType::kUint64:
      return Get<uint64_t>(base, i);
    case DataType::kFloat16:
      return device::HalfToFloat(static_cast<const uint16_t*>(base)[i]);
    case DataType::kBfloat16:
      return device::Bfloat16ToFloat(static_cast<const uint16_t*>(base)[i]);
    case DataType::kFloat32:
      return Get<float>(base, i);
    case DataType::kFloat64:
      return Get<double>(base, i);
    case DataType::kFp8E4M3:
      return device::Fp8E4M3ToFloat(static_cast<const uint8_t*>(base)[i]);
    case DataType::kFp8E5M2:
      return device::Fp8E5M2ToFloat(static_cast<const uint8_t*>(base)[i]);
  }
  return 0;
}

}  // namespace baton::collective
