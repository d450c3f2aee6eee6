#pragma once

// The element types and reduction operators of an operation: the device layer's
// (device/data_type.h, where the element-wise kernels beneath collective/ take them), named here
// in baton::collective as the operation's vocabulary (OpSpec, the wire format, libbaton). These
// are the same types, not copies: nothing converts between them.

#include "device/data_type.h"

namespace baton::collective {

using device::DataType;
using device::ReduceOp;

using device::DataTypeName;
using device::DataTypeSize;
using device::ParseDataType;
using device::ParseReduceOp;
using device::ReduceOpName;

}  // namespace baton::collective
