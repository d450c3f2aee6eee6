#include "transport/transport.h"

#include "absl/strings/str_cat.h"

namespace baton::transport {

std::string TagToString(const Tag& tag) {
  return absl::StrCat("comm ", absl::Hex(tag.comm, absl::kZeroPad8), " op ", tag.seq, " step ",
                      tag.step, " part ", tag.part);
}

}  // namespace baton::transport
