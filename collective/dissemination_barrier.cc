#include "collective/dissemination_barrier.h"

#include <cstdint>

#include "absl/strings/str_cat.h"
#include "collective/op_checks.h"
#include "common/status_macros.h"

namespace baton::collective {

absl::Status DisseminationBarrier(const OpContext& ctx, const Participants& participants) {
  constexpr absl::string_view kWhat = "barrier";
  const int n = participants.size();
  const int r = participants.rank;
  BATON_RETURN_IF_ERROR(internal::CheckRank(kWhat, r, n));
  if (n == 1) return absl::OkStatus();
  BATON_RETURN_IF_ERROR(internal::CheckParticipantLinks(kWhat, ctx, participants));

  int rounds = 0;
  while ((int64_t{1} << rounds) < n) ++rounds;
  for (int k = 0; k < rounds; ++k) {
    const int distance = 1 << k;
    const std::string& to = participants.addresses[(r + distance) % n];
    const std::string& from = participants.addresses[(r - distance + n) % n];
    const transport::Tag tag{ctx.comm, ctx.seq, ctx.first_step + static_cast<uint32_t>(k), 0};
    auto where = [&] {
      return absl::StrCat("barrier rank ", r, "/", n, ", round ", k + 1, "/", rounds);
    };
    absl::Status status = ctx.endpoint->Send(to, tag, {}, ctx.deadline);
    if (!status.ok()) return internal::AnnotateTransportError(status, where(), "sending to", to);
    status = ctx.endpoint->Recv(from, tag, {}, ctx.deadline);
    if (!status.ok()) {
      return internal::AnnotateTransportError(status, where(), "receiving from", from);
    }
  }
  return absl::OkStatus();
}

}  // namespace baton::collective
