#pragma once

// The node's RDMA devices and their ports, as libibverbs reports them (what `ibv_devinfo`
// prints): the first piece of the verbs transport, which is later work -- nothing here moves
// data. Built only when BATON_HAVE_VERBS (target baton_verbs). Used to tell the daemon, the
// topology and an operator which RDMA ports a node has and in which state.

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace baton::transport::verbs {

enum class LinkLayer {
  kUnknown,     // not reported (older kernels report nothing for InfiniBand ports)
  kInfiniBand,  // IB
  kEthernet,    // RoCE
};

// "unknown", "infiniband", "ethernet".
absl::string_view LinkLayerName(LinkLayer layer);

struct RdmaPort {
  int number = 0;       // 1-based, as verbs numbers ports
  bool active = false;  // IBV_PORT_ACTIVE: the port carries traffic
  std::string state;    // ibv_port_state_str(): "PORT_ACTIVE", "PORT_DOWN", ...
  LinkLayer link_layer = LinkLayer::kUnknown;
  int active_mtu_bytes = 0;  // 256 .. 4096; 0 if not reported
  int width_lanes = 0;       // 1, 2, 4, 8 or 12; 0 if not reported
  double lane_gbps = 0;      // per-lane data rate (SDR 2.5 ... NDR 100); 0 if not reported
  uint16_t lid = 0;          // InfiniBand local id (0 on Ethernet)

  // width_lanes * lane_gbps: the link's data rate in Gbit/s, 0 if not reported.
  double link_gbps() const { return width_lanes * lane_gbps; }
};

struct RdmaDevice {
  std::string name;        // e.g. "mlx5_0"
  uint64_t node_guid = 0;  // host byte order
  // OK, or why the device could not be opened or queried; then `ports` may be empty or partial.
  absl::Status status;
  std::vector<RdmaPort> ports;
};

// Every RDMA device of the node with its ports, in libibverbs' order. No devices, or a kernel
// without RDMA support (ibv_get_device_list fails with ENOSYS), is an empty list, not an error;
// an error only when libibverbs itself fails (out of memory, permission denied). A device that
// cannot be opened or queried is listed with its `status` set. Thread-safe; opens each device
// briefly and closes it before returning.
absl::StatusOr<std::vector<RdmaDevice>> ListRdmaDevices();

// The verbs encodings, as ibv_devinfo decodes them.
// enum ibv_mtu (1..5) -> 256..4096 bytes, else 0.
int MtuBytes(int ibv_mtu);
// ibv_port_attr.active_width (1, 2, 4, 8, 16) -> lanes (1, 4, 8, 12, 2), else 0.
int WidthLanes(int active_width);
// ibv_port_attr.active_speed (1, 2, 4, 8, 16, 32, 64, 128) -> Gbit/s per lane (2.5 SDR,
// 5 DDR, 10 QDR and FDR10, 14 FDR, 25 EDR, 50 HDR, 100 NDR), else 0.
double LaneGbps(int active_speed);
// A GUID in ibv_devinfo's form: "0002:c903:00a1:b2c3".
std::string FormatGuid(uint64_t guid);

}  // namespace baton::transport::verbs
