#pragma once

// Reading and writing one element of a buffer of any DataType as a double: for tools and tests
// that fill and check buffers (baton bench, integration tests), not for hot paths. Narrow floats
// convert as device/half.h does (round to nearest even); integers convert with C++ casts.

#include <cstddef>

#include "collective/data_type.h"

namespace baton::collective {

void SetElement(DataType type, void* base, size_t index, double value);
double GetElement(DataType type, const void* base, size_t index);

}  // namespace baton::collective
