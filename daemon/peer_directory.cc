#include "daemon/peer_directory.h"

#include <algorithm>

#include "absl/strings/ascii.h"

namespace baton::daemon {

PeerDirectory::PeerDirectory(Member self, const std::vector<std::string>& configured,
                             absl::Duration linger)
    : self_(std::move(self)), linger_(linger) {
  for (const std::string& configured_address : configured) {
    const std::string address(absl::StripAsciiWhitespace(configured_address));
    if (address.empty() || address == self_.peer_address) continue;
    Entry& entry = entries_[address];
    entry.member.peer_address = address;
    entry.configured = true;
  }
}

void PeerDirectory::AddPlan(const std::vector<Member>& members) {
  absl::MutexLock lock(&mu_);
  for (const Member& member : members) {
    if (member.peer_address == self_.peer_address) continue;
    Entry& entry = entries_[member.peer_address];
    entry.member = member;
    entry.in_plan = true;
  }
}

void PeerDirectory::Update(const std::vector<Member>& in_plans, absl::Time now) {
  absl::MutexLock lock(&mu_);
  for (auto& [address, entry] : entries_) {
    if (entry.in_plan) entry.left_plans = now;
    entry.in_plan = false;
  }
  for (const Member& member : in_plans) {
    if (member.peer_address == self_.peer_address) continue;
    Entry& entry = entries_[member.peer_address];
    entry.member = member;
    entry.in_plan = true;
  }
}

void PeerDirectory::Learn(const std::string& peer_address, const Member& member) {
  absl::MutexLock lock(&mu_);
  auto it = entries_.find(peer_address);
  if (it == entries_.end()) return;
  if (!member.node_name.empty()) it->second.member.node_name = member.node_name;
  if (!member.data_address.empty()) it->second.member.data_address = member.data_address;
  if (!member.locality.empty()) it->second.member.locality = member.locality;
}

std::vector<Member> PeerDirectory::Active(absl::Time now) {
  absl::MutexLock lock(&mu_);
  std::vector<Member> active;
  absl::erase_if(entries_, [&](const auto& item) {
    const Entry& entry = item.second;
    return !entry.configured && !entry.in_plan && now - entry.left_plans >= linger_;
  });
  for (const auto& [address, entry] : entries_) active.push_back(entry.member);
  std::sort(active.begin(), active.end(),
            [](const Member& a, const Member& b) { return a.peer_address < b.peer_address; });
  return active;
}

std::string PeerDirectory::NameOf(const std::string& data_address) const {
  absl::MutexLock lock(&mu_);
  for (const auto& [address, entry] : entries_) {
    if (entry.member.data_address == data_address && !entry.member.node_name.empty()) {
      return entry.member.node_name;
    }
  }
  return data_address;
}

std::optional<Member> PeerDirectory::MemberAt(const std::string& data_address) const {
  absl::MutexLock lock(&mu_);
  for (const auto& [address, entry] : entries_) {
    if (entry.member.data_address == data_address) return entry.member;
  }
  return std::nullopt;
}

}  // namespace baton::daemon
