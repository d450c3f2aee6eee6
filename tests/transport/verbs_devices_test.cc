#include <gtest/gtest.h>

#include <iostream>

#include "transport/verbs/rdma_devices.h"

// ListRdmaDevices on this machine's real libibverbs: it must succeed with or without RDMA
// hardware (no devices is an empty list), and every device it lists must have a name and, when it
// could be opened, ports numbered from 1 with a state. The decoders are checked against the
// InfiniBand encodings (ibv_devinfo's table).

namespace baton::transport::verbs {
namespace {

TEST(VerbsDevicesTest, ListsTheNodesDevices) {
  const auto devices = ListRdmaDevices();
  ASSERT_TRUE(devices.ok()) << devices.status();
  if (devices->empty()) std::cout << "no RDMA devices on this node\n";
  for (const RdmaDevice& device : *devices) {
    SCOPED_TRACE(device.name);
    std::cout << device.name << " guid " << FormatGuid(device.node_guid) << " "
              << (device.status.ok() ? "" : device.status.ToString()) << "\n";
    EXPECT_FALSE(device.name.empty());
    if (!device.status.ok()) continue;  // listed, but could not be opened (e.g. permissions)
    EXPECT_FALSE(device.ports.empty());
    for (size_t i = 0; i < device.ports.size(); ++i) {
      const RdmaPort& port = device.ports[i];
      std::cout << "  port " << port.number << " " << port.state << " "
                << LinkLayerName(port.link_layer) << " mtu " << port.active_mtu_bytes << " "
                << port.width_lanes << "x" << port.lane_gbps << " Gb/s\n";
      EXPECT_EQ(port.number, static_cast<int>(i) + 1);
      EXPECT_FALSE(port.state.empty());
      EXPECT_EQ(port.active, port.state == "PORT_ACTIVE");
      if (port.active) {
        EXPECT_GT(port.active_mtu_bytes, 0);
      }
    }
  }
}

TEST(VerbsDevicesTest, DecodesVerbsEncodings) {
  EXPECT_EQ(MtuBytes(1), 256);
  EXPECT_EQ(MtuBytes(3), 1024);
  EXPECT_EQ(MtuBytes(5), 4096);
  EXPECT_EQ(MtuBytes(0), 0);
  EXPECT_EQ(MtuBytes(6), 0);
  EXPECT_EQ(WidthLanes(1), 1);
  EXPECT_EQ(WidthLanes(2), 4);
  EXPECT_EQ(WidthLanes(16), 2);
  EXPECT_EQ(WidthLanes(3), 0);
  EXPECT_EQ(LaneGbps(1), 2.5);
  EXPECT_EQ(LaneGbps(32), 25.0);
  EXPECT_EQ(LaneGbps(128), 100.0);
  EXPECT_EQ(LaneGbps(0), 0.0);
  RdmaPort hdr;
  hdr.width_lanes = WidthLanes(2);
  hdr.lane_gbps = LaneGbps(64);
  EXPECT_EQ(hdr.link_gbps(), 200.0);
  EXPECT_EQ(FormatGuid(0x0002c90300a1b2c3ull), "0002:c903:00a1:b2c3");
  EXPECT_EQ(LinkLayerName(LinkLayer::kEthernet), "ethernet");
}

}  // namespace
}  // namespace baton::transport::verbs
