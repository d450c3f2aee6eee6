#include "topology/graph_json.h"

#include <string>

#include "absl/strings/str_replace.h"
#include "gtest/gtest.h"
#include "tests/topology/fixtures.h"
#include "topology/discovery.h"

namespace baton::topology {
namespace {

TEST(GraphJsonTest, EveryFixtureRoundTripsLosslessly) {
  for (const std::string& name : testing::MachineFixtures()) {
    SCOPED_TRACE(name);
    const Graph graph = testing::LoadFixture(name);
    ASSERT_FALSE(graph.nodes.empty());
    const std::string json = GraphToJson(graph);
    absl::StatusOr<Graph> back = GraphFromJson(json);
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ(*back, graph);
    EXPECT_EQ(GraphToJson(*back), json);  // the writer is deterministic
    // The generic loader recognises the dump too.
    absl::StatusOr<Graph> detected = ImportTopology(json);
    ASSERT_TRUE(detected.ok()) << detected.status();
    EXPECT_EQ(*detected, graph);
  }
}

TEST(GraphJsonTest, WritesReadableFields) {
  const Graph g = testing::LoadFixture("nccl_ibmcloud-gx3d-h100_8xH100_8xCX7_nvswitch.xml");
  const std::string json = GraphToJson(g);
  EXPECT_NE(json.find("\"format\": \"baton.topology.v1\""), std::string::npos);
  EXPECT_NE(json.find("\"vendor\": \"0x10de\""), std::string::npos);
  EXPECT_NE(json.find("\"class_code\": \"0x030200\""), std::string::npos);
  EXPECT_NE(json.find("\"guid\": \"0xe406e40003e1a258\""), std::string::npos);
  EXPECT_NE(json.find("\"cpus\": \"0-79\""), std::string::npos) << json.substr(0, 600);
  EXPECT_NE(json.find("\"bandwidth_gbps\": 370.8"), std::string::npos);
  EXPECT_NE(json.find("\"bus_ids\": [\"0000:f3:00.0\", \"0000:f4:00.0\""), std::string::npos);
}

TEST(GraphJsonTest, ReadingIsStrict) {
  const Graph g = testing::LoadFixture("nccl_azure-ncv4_4xA100-PCIe_nvlink-pairs.xml");
  const std::string json = GraphToJson(g);
  auto expect_error = [&](const std::string& text, const std::string& message) {
    absl::StatusOr<Graph> back = GraphFromJson(text);
    ASSERT_FALSE(back.ok()) << message;
    EXPECT_EQ(back.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(back.status().message().find(message), std::string::npos) << back.status();
  };
  expect_error(absl::StrReplaceAll(json, {{"baton.topology.v1", "v0"}}), "unsupported format");
  expect_error(absl::StrReplaceAll(json, {{"\"numa_id\"", "\"numa\""}}), "unknown key \"numa\"");
  expect_error(absl::StrReplaceAll(json, {{"\"type\": \"gpu\"", "\"type\": \"tpu\""}}),
               "unknown node type");
  expect_error(
      absl::StrReplaceAll(json, {{"\"compute_capability\": 80", "\"compute_capability\": \"80\""}}),
      "expected a number");
  expect_error(absl::StrReplaceAll(json, {{"\"vendor\": \"0x10de\"", "\"vendor\": \"10de\""}}),
               "not 0x-hex");
  expect_error(absl::StrReplaceAll(json, {{"\"cpus\": \"0-23\"", "\"cpus\": \"23-0\""}}),
               "bad CPU list");
  expect_error(absl::StrReplaceAll(json, {{"\"type\": \"nvlink\"", "\"type\": \"pci\""}}),
               "PCI upstream end");
  expect_error(json + "x", "unexpected text");
  expect_error("{\"format\": \"baton.topology.v1\", \"nodes\": [], \"links\": {}}",
               "\"links\" must be an array");
}

}  // namespace
}  // namespace baton::topology
