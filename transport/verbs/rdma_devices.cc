#include "transport/verbs/rdma_devices.h"

#include <endian.h>
#include <infiniband/verbs.h>

#include <cerrno>
#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status_macros.h"

namespace baton::transport::verbs {
namespace {

struct DeviceListDeleter {
  void operator()(ibv_device** list) const { ibv_free_device_list(list); }
};
struct ContextDeleter {
  void operator()(ibv_context* context) const { ibv_close_device(context); }
};

LinkLayer LinkLayerOf(uint8_t link_layer) {
  switch (link_layer) {
    case IBV_LINK_LAYER_INFINIBAND:
      return LinkLayer::kInfiniBand;
    case IBV_LINK_LAYER_ETHERNET:
      return LinkLayer::kEthernet;
    default:
      return LinkLayer::kUnknown;
  }
}

// Opens the device and fills in its ports; any failure goes to device.status.
void QueryPorts(ibv_device* verbs_device, RdmaDevice& device) {
  std::unique_ptr<ibv_context, ContextDeleter> context(ibv_open_device(verbs_device));
  if (context == nullptr) {
    device.status = BATON_ERRNO_STATUS(absl::StrCat("ibv_open_device(", device.name, ")"));
    return;
  }
  ibv_device_attr attributes{};
  // ibv_query_device returns an errno value rather than setting errno.
  if (const int error = ibv_query_device(context.get(), &attributes); error != 0) {
    device.status =
        ErrnoStatus(error, absl::StrCat("ibv_query_device(", device.name, ")"), __FILE__, __LINE__);
    return;
  }
  for (int number = 1; number <= attributes.phys_port_cnt; ++number) {
    ibv_port_attr port_attributes{};
    if (const int error =
            ibv_query_port(context.get(), static_cast<uint8_t>(number), &port_attributes);
        error != 0) {
      device.status =
          ErrnoStatus(error, absl::StrCat("ibv_query_port(", device.name, ", ", number, ")"),
                      __FILE__, __LINE__);
      return;
    }
    RdmaPort port;
    port.number = number;
    port.active = port_attributes.state == IBV_PORT_ACTIVE;
    port.state = ibv_port_state_str(port_attributes.state);
    port.link_layer = LinkLayerOf(port_attributes.link_layer);
    port.active_mtu_bytes = MtuBytes(port_attributes.active_mtu);
    port.width_lanes = WidthLanes(port_attributes.active_width);
    port.lane_gbps = LaneGbps(port_attributes.active_speed);
    port.lid = port.link_layer == LinkLayer::kEthernet ? 0 : port_attributes.lid;
    device.ports.push_back(std::move(port));
  }
}

}  // namespace

absl::string_view LinkLayerName(LinkLayer layer) {
  switch (layer) {
    case LinkLayer::kInfiniBand:
      return "infiniband";
    case LinkLayer::kEthernet:
      return "ethernet";
    case LinkLayer::kUnknown:
      break;
  }
  return "unknown";
}

int MtuBytes(int ibv_mtu) {
  return ibv_mtu >= IBV_MTU_256 && ibv_mtu <= IBV_MTU_4096 ? 128 << ibv_mtu : 0;
}

int WidthLanes(int active_width) {
  switch (active_width) {
    case 1:
      return 1;
    case 2:
      return 4;
    case 4:
      return 8;
    case 8:
      return 12;
    case 16:
      return 2;
    default:
      return 0;
  }
}

double LaneGbps(int active_speed) {
  switch (active_speed) {
    case 1:
      return 2.5;  // SDR
    case 2:
      return 5.0;  // DDR
    case 4:
    case 8:
      return 10.0;  // QDR, FDR10
    case 16:
      return 14.0;  // FDR
    case 32:
      return 25.0;  // EDR
    case 64:
      return 50.0;  // HDR
    case 128:
      return 100.0;  // NDR
    default:
      return 0;  // XDR and later are in active_speed_ex, which rdma-core 44 lacks
  }
}

std::string FormatGuid(uint64_t guid) {
  return absl::StrFormat("%04x:%04x:%04x:%04x", guid >> 48 & 0xFFFF, guid >> 32 & 0xFFFF,
                         guid >> 16 & 0xFFFF, guid & 0xFFFF);
}

absl::StatusOr<std::vector<RdmaDevice>> ListRdmaDevices() {
  int count = 0;
  errno = 0;
  std::unique_ptr<ibv_device*, DeviceListDeleter> list(ibv_get_device_list(&count));
  if (list == nullptr) {
    // A kernel without the InfiniBand class (no RDMA hardware or drivers) answers ENOSYS.
    if (errno == ENOSYS || errno == 0) return std::vector<RdmaDevice>{};
    return BATON_ERRNO_STATUS("ibv_get_device_list");
  }
  std::vector<RdmaDevice> devices;
  for (int i = 0; i < count && list.get()[i] != nullptr; ++i) {
    ibv_device* verbs_device = list.get()[i];
    RdmaDevice device;
    const char* name = ibv_get_device_name(verbs_device);
    device.name = name != nullptr ? name : "";
    device.node_guid = be64toh(ibv_get_device_guid(verbs_device));
    QueryPorts(verbs_device, device);
    devices.push_back(std::move(device));
  }
  return devices;
}

}  // namespace baton::transport::verbs
