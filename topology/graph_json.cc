#include "topology/graph_json.h"

#include <cstdio>
#include <limits>
#include <set>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "common/status_macros.h"
#include "topology/json.h"

namespace baton::topology {

namespace {

std::string HexString(uint64_t v, int digits) {
  char text[24];
  std::snprintf(text, sizeof(text), "0x%0*llx", digits, static_cast<unsigned long long>(v));
  return text;
}

// Builds an object, skipping members equal to their default so dumps stay readable.
class ObjectWriter {
 public:
  ObjectWriter& Str(const char* key, const std::string& v) {
    if (!v.empty()) value_.Add(key, JsonValue::String(v));
    return *this;
  }
  ObjectWriter& Int(const char* key, int64_t v, int64_t default_value) {
    if (v != default_value) value_.Add(key, JsonValue::Int(v));
    return *this;
  }
  // Ids and GUIDs read best in hex: "0x10de". Written only when known (>= 0 / non-zero).
  ObjectWriter& Hex(const char* key, int64_t v, int digits) {
    if (v >= 0) value_.Add(key, JsonValue::String(HexString(static_cast<uint64_t>(v), digits)));
    return *this;
  }
  ObjectWriter& Guid(const char* key, uint64_t v) {
    if (v != 0) value_.Add(key, JsonValue::String(HexString(v, 16)));
    return *this;
  }
  ObjectWriter& Uint(const char* key, uint64_t v) {
    if (v != 0) value_.Add(key, JsonValue::Uint(v));
    return *this;
  }
  ObjectWriter& Double(const char* key, double v) {
    if (v != 0) value_.Add(key, JsonValue::Double(v));
    return *this;
  }
  ObjectWriter& Bool(const char* key, bool v) {
    if (v) value_.Add(key, JsonValue::Bool(true));
    return *this;
  }
  ObjectWriter& Cpus(const char* key, const std::vector<int>& cpus) {
    return Str(key, FormatCpuList(cpus));
  }
  ObjectWriter& Value(const char* key, JsonValue v) {
    value_.Add(key, std::move(v));
    return *this;
  }
  JsonValue Build() { return std::move(value_); }

 private:
  JsonValue value_ = JsonValue::MakeObject();
};

JsonValue AttributesToJson(const std::vector<std::pair<std::string, std::string>>& attributes) {
  JsonValue object = JsonValue::MakeObject();
  for (const auto& [key, value] : attributes) object.Add(key, JsonValue::String(value));
  return object;
}

JsonValue NodeToJson(const Node& node) {
  ObjectWriter w;
  w.Int("id", node.id, std::numeric_limits<int64_t>::min())
      // NOLINTNEXTLINE(google-readability-casting): T(x) to a class type
      .Value("type", JsonValue::String(std::string(NodeTypeName(node.type))))
      .Str("name", node.name);
  if (node.type == NodeType::kCpu) {
    const CpuInfo& c = node.cpu;
    w.Value("cpu", ObjectWriter()
                       .Int("numa_id", c.numa_id, -1)
                       .Int("package", c.package, -1)
                       .Cpus("cpus", c.cpus)
                       .Str("arch", c.arch)
                       .Str("vendor", c.vendor)
                       .Int("family", c.family, -1)
                       .Int("model", c.model, -1)
                       .Str("model_name", c.model_name)
                       .Uint("memory_bytes", c.memory_bytes)
                       .Build());
  }
  if (node.type == NodeType::kPciSwitch || node.type == NodeType::kGpu ||
      node.type == NodeType::kNic) {
    const PciInfo& p = node.pci;
    w.Value("pci", ObjectWriter()
                       .Str("bus_id", p.bus_id)
                       .Hex("class_code", p.class_code, 6)
                       .Hex("vendor", p.vendor, 4)
                       .Hex("device", p.device, 4)
                       .Hex("subsystem_vendor", p.subsystem_vendor, 4)
                       .Hex("subsystem_device", p.subsystem_device, 4)
                       .Build());
  }
  if (node.type == NodeType::kGpu) {
    const GpuInfo& g = node.gpu;
    w.Value("gpu", ObjectWriter()
                       .Int("index", g.index, -1)
                       .Int("rank", g.rank, -1)
                       .Str("uuid", g.uuid)
                       .Str("model", g.model)
                       .Int("compute_capability", g.compute_capability, 0)
                       .Uint("memory_bytes", g.memory_bytes)
                       .Bool("gdr", g.gdr)
                       .Cpus("cpu_affinity", g.cpu_affinity)
                       .Build());
  }
  if (node.type == NodeType::kNic) {
    JsonValue ports = JsonValue::MakeArray();
    for (const NicPort& p : node.nic.ports) {
      ports.Append(ObjectWriter()
                       .Str("name", p.name)
                       .Int("port", p.port, 0)
                       .Int("dev", p.dev, -1)
                       .Int("speed_mbps", p.speed_mbps, 0)
                       .Str("state", p.state)
                       .Str("netdev", p.netdev)
                       .Str("link_layer", p.link_layer)
                       .Guid("guid", p.guid)
                       .Bool("gdr", p.gdr)
                       .Bool("coll", p.coll)
                       .Double("latency_us", p.latency_us)
                       .Int("max_connections", p.max_connections, 0)
                       .Build());
    }
    w.Value("nic", ObjectWriter()
                       .Value("ports", std::move(ports))
                       .Int("sysfs_numa_node", node.nic.sysfs_numa_node, -1)
                       .Build());
  }
  if (node.type == NodeType::kNvSwitch) {
    JsonValue ids = JsonValue::MakeArray();
    for (const std::string& id : node.nvswitch.bus_ids) ids.Append(JsonValue::String(id));
    w.Value("nvswitch", ObjectWriter().Value("bus_ids", std::move(ids)).Build());
  }
  if (!node.attributes.empty()) w.Value("attributes", AttributesToJson(node.attributes));
  return w.Build();
}

JsonValue LinkToJson(const Link& l) {
  return ObjectWriter()
      .Int("a", l.a, std::numeric_limits<int64_t>::min())
      .Int("b", l.b, std::numeric_limits<int64_t>::min())
      // NOLINTNEXTLINE(google-readability-casting): T(x) to a class type
      .Value("type", JsonValue::String(std::string(LinkTypeName(l.type))))
      .Double("bandwidth_gbps", l.bandwidth_gbps)
      .Int("nvlink_count", l.nvlink_count, 0)
      .Double("nvlink_per_link_gbps", l.nvlink_per_link_gbps)
      .Double("pcie_gts", l.pcie_gts)
      .Int("pcie_width", l.pcie_width, 0)
      .Build();
}

// Strict reader of one JSON object: each accessor marks its key used; Finish() rejects the rest.
class ObjectReader {
 public:
  static absl::StatusOr<ObjectReader> Of(const JsonValue* value, std::string where) {
    if (value == nullptr || value->kind() != JsonValue::Kind::kObject) {
      return absl::InvalidArgumentError(
          absl::StrCat("topology JSON: ", where, " must be an object"));
    }
    return ObjectReader(value, std::move(where));
  }

  const JsonValue* Member(const char* key) {
    used_.insert(key);
    return value_->Find(key);
  }

  absl::Status Str(const char* key, std::string* out, bool required = false) {
    const JsonValue* v = Member(key);
    if (v == nullptr) return required ? Missing(key) : absl::OkStatus();
    absl::StatusOr<std::string> s = v->GetString();
    if (!s.ok()) return Bad(key, s.status());
    *out = *std::move(s);
    return absl::OkStatus();
  }
  template <typename T>
  absl::Status Int(const char* key, T* out, bool required = false) {
    const JsonValue* v = Member(key);
    if (v == nullptr) return required ? Missing(key) : absl::OkStatus();
    if constexpr (std::is_unsigned_v<T>) {
      absl::StatusOr<uint64_t> i = v->GetUint();
      if (!i.ok()) return Bad(key, i.status());
      *out = *i;
    } else {
      absl::StatusOr<int64_t> i = v->GetInt();
      if (!i.ok()) return Bad(key, i.status());
      if (*i < std::numeric_limits<T>::min() || *i > std::numeric_limits<T>::max()) {
        return Bad(key, absl::InvalidArgumentError("out of range"));
      }
      *out = static_cast<T>(*i);
    }
    return absl::OkStatus();
  }
  // A hex string written by ObjectWriter::Hex / Guid ("0x10de").
  template <typename T>
  absl::Status Hex(const char* key, T* out) {
    std::string text;
    BATON_RETURN_IF_ERROR(Str(key, &text));
    if (text.empty() && Member(key) == nullptr) return absl::OkStatus();
    absl::string_view digits = text;
    uint64_t value;
    if (!absl::ConsumePrefix(&digits, "0x") || digits.empty() || digits.size() > 16 ||
        !absl::SimpleHexAtoi(digits, &value) ||
        value > static_cast<uint64_t>(std::numeric_limits<T>::max())) {
      return Bad(key, absl::InvalidArgumentError(absl::StrCat("\"", text, "\" is not 0x-hex")));
    }
    *out = static_cast<T>(value);
    return absl::OkStatus();
  }
  absl::Status Double(const char* key, double* out) {
    const JsonValue* v = Member(key);
    if (v == nullptr) return absl::OkStatus();
    absl::StatusOr<double> d = v->GetDouble();
    if (!d.ok()) return Bad(key, d.status());
    *out = *d;
    return absl::OkStatus();
  }
  absl::Status Bool(const char* key, bool* out) {
    const JsonValue* v = Member(key);
    if (v == nullptr) return absl::OkStatus();
    absl::StatusOr<bool> b = v->GetBool();
    if (!b.ok()) return Bad(key, b.status());
    *out = *b;
    return absl::OkStatus();
  }
  absl::Status Cpus(const char* key, std::vector<int>* out) {
    std::string text;
    BATON_RETURN_IF_ERROR(Str(key, &text));
    absl::StatusOr<std::vector<int>> cpus = ParseCpuList(text);
    if (!cpus.ok()) return Bad(key, cpus.status());
    *out = *std::move(cpus);
    return absl::OkStatus();
  }
  absl::Status Attributes(const char* key, std::vector<std::pair<std::string, std::string>>* out) {
    const JsonValue* v = Member(key);
    if (v == nullptr) return absl::OkStatus();
    if (v->kind() != JsonValue::Kind::kObject) {
      return Bad(key, absl::InvalidArgumentError("must be an object"));
    }
    for (const auto& [k, value] : v->object()) {
      absl::StatusOr<std::string> s = value.GetString();
      if (!s.ok()) return Bad(key, s.status());
      out->emplace_back(k, *std::move(s));
    }
    return absl::OkStatus();
  }

  absl::Status Finish() const {
    for (const auto& [key, value] : value_->object()) {
      if (used_.count(key) == 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("topology JSON: unknown key \"", key, "\" in ", where_));
      }
    }
    return absl::OkStatus();
  }

 private:
  ObjectReader(const JsonValue* value, std::string where)
      : value_(value), where_(std::move(where)) {}
  absl::Status Missing(const char* key) const {
    return absl::InvalidArgumentError(
        absl::StrCat("topology JSON: ", where_, " lacks \"", key, "\""));
  }
  absl::Status Bad(const char* key, const absl::Status& status) const {
    return absl::InvalidArgumentError(
        absl::StrCat("topology JSON: ", where_, ".", key, ": ", status.message()));
  }

  const JsonValue* value_;
  std::string where_;
  std::set<std::string> used_;
};

absl::Status ReadPorts(const JsonValue* ports, const std::string& where, NicInfo* nic) {
  if (ports == nullptr) return absl::OkStatus();
  if (ports->kind() != JsonValue::Kind::kArray) {
    return absl::InvalidArgumentError(absl::StrCat("topology JSON: ", where, " must be an array"));
  }
  for (size_t i = 0; i < ports->array().size(); ++i) {
    BATON_ASSIGN_OR_RETURN(ObjectReader r,
                           ObjectReader::Of(&ports->array()[i], absl::StrCat(where, "[", i, "]")));
    NicPort p;
    BATON_RETURN_IF_ERROR(r.Str("name", &p.name));
    BATON_RETURN_IF_ERROR(r.Int("port", &p.port));
    BATON_RETURN_IF_ERROR(r.Int("dev", &p.dev));
    BATON_RETURN_IF_ERROR(r.Int("speed_mbps", &p.speed_mbps));
    BATON_RETURN_IF_ERROR(r.Str("state", &p.state));
    BATON_RETURN_IF_ERROR(r.Str("netdev", &p.netdev));
    BATON_RETURN_IF_ERROR(r.Str("link_layer", &p.link_layer));
    BATON_RETURN_IF_ERROR(r.Hex("guid", &p.guid));
    BATON_RETURN_IF_ERROR(r.Bool("gdr", &p.gdr));
    BATON_RETURN_IF_ERROR(r.Bool("coll", &p.coll));
    BATON_RETURN_IF_ERROR(r.Double("latency_us", &p.latency_us));
    BATON_RETURN_IF_ERROR(r.Int("max_connections", &p.max_connections));
    BATON_RETURN_IF_ERROR(r.Finish());
    nic->ports.push_back(std::move(p));
  }
  return absl::OkStatus();
}

absl::StatusOr<Node> NodeFromJson(const JsonValue& value, size_t index) {
  const std::string where = absl::StrCat("nodes[", index, "]");
  BATON_ASSIGN_OR_RETURN(ObjectReader r, ObjectReader::Of(&value, where));
  Node node;
  std::string type;
  BATON_RETURN_IF_ERROR(r.Int("id", &node.id, /*required=*/true));
  BATON_RETURN_IF_ERROR(r.Str("type", &type, /*required=*/true));
  BATON_ASSIGN_OR_RETURN(node.type, ParseNodeType(type));
  BATON_RETURN_IF_ERROR(r.Str("name", &node.name));
  BATON_RETURN_IF_ERROR(r.Attributes("attributes", &node.attributes));
  const bool has_pci = node.type == NodeType::kPciSwitch || node.type == NodeType::kGpu ||
                       node.type == NodeType::kNic;
  if (const JsonValue* v = r.Member("cpu"); v != nullptr || node.type == NodeType::kCpu) {
    if (node.type != NodeType::kCpu) {
      return absl::InvalidArgumentError(
          absl::StrCat("topology JSON: ", where, " is not a cpu but has \"cpu\""));
    }
    BATON_ASSIGN_OR_RETURN(ObjectReader c, ObjectReader::Of(v, where + ".cpu"));
    CpuInfo& cpu = node.cpu;
    BATON_RETURN_IF_ERROR(c.Int("numa_id", &cpu.numa_id));
    BATON_RETURN_IF_ERROR(c.Int("package", &cpu.package));
    BATON_RETURN_IF_ERROR(c.Cpus("cpus", &cpu.cpus));
    BATON_RETURN_IF_ERROR(c.Str("arch", &cpu.arch));
    BATON_RETURN_IF_ERROR(c.Str("vendor", &cpu.vendor));
    BATON_RETURN_IF_ERROR(c.Int("family", &cpu.family));
    BATON_RETURN_IF_ERROR(c.Int("model", &cpu.model));
    BATON_RETURN_IF_ERROR(c.Str("model_name", &cpu.model_name));
    BATON_RETURN_IF_ERROR(c.Int("memory_bytes", &cpu.memory_bytes));
    BATON_RETURN_IF_ERROR(c.Finish());
  }
  if (const JsonValue* v = r.Member("pci"); v != nullptr || has_pci) {
    if (!has_pci) {
      return absl::InvalidArgumentError(
          absl::StrCat("topology JSON: ", where, " cannot have \"pci\""));
    }
    BATON_ASSIGN_OR_RETURN(ObjectReader p, ObjectReader::Of(v, where + ".pci"));
    BATON_RETURN_IF_ERROR(p.Str("bus_id", &node.pci.bus_id));
    BATON_RETURN_IF_ERROR(p.Hex("class_code", &node.pci.class_code));
    BATON_RETURN_IF_ERROR(p.Hex("vendor", &node.pci.vendor));
    BATON_RETURN_IF_ERROR(p.Hex("device", &node.pci.device));
    BATON_RETURN_IF_ERROR(p.Hex("subsystem_vendor", &node.pci.subsystem_vendor));
    BATON_RETURN_IF_ERROR(p.Hex("subsystem_device", &node.pci.subsystem_device));
    BATON_RETURN_IF_ERROR(p.Finish());
  }
  if (const JsonValue* v = r.Member("gpu"); v != nullptr || node.type == NodeType::kGpu) {
    if (node.type != NodeType::kGpu) {
      return absl::InvalidArgumentError(
          absl::StrCat("topology JSON: ", where, " is not a gpu but has \"gpu\""));
    }
    BATON_ASSIGN_OR_RETURN(ObjectReader g, ObjectReader::Of(v, where + ".gpu"));
    GpuInfo& gpu = node.gpu;
    BATON_RETURN_IF_ERROR(g.Int("index", &gpu.index));
    BATON_RETURN_IF_ERROR(g.Int("rank", &gpu.rank));
    BATON_RETURN_IF_ERROR(g.Str("uuid", &gpu.uuid));
    BATON_RETURN_IF_ERROR(g.Str("model", &gpu.model));
    BATON_RETURN_IF_ERROR(g.Int("compute_capability", &gpu.compute_capability));
    BATON_RETURN_IF_ERROR(g.Int("memory_bytes", &gpu.memory_bytes));
    BATON_RETURN_IF_ERROR(g.Bool("gdr", &gpu.gdr));
    BATON_RETURN_IF_ERROR(g.Cpus("cpu_affinity", &gpu.cpu_affinity));
    BATON_RETURN_IF_ERROR(g.Finish());
  }
  if (const JsonValue* v = r.Member("nic"); v != nullptr || node.type == NodeType::kNic) {
    if (node.type != NodeType::kNic) {
      return absl::InvalidArgumentError(
          absl::StrCat("topology JSON: ", where, " is not a nic but has \"nic\""));
    }
    BATON_ASSIGN_OR_RETURN(ObjectReader n, ObjectReader::Of(v, where + ".nic"));
    BATON_RETURN_IF_ERROR(ReadPorts(n.Member("ports"), where + ".nic.ports", &node.nic));
    BATON_RETURN_IF_ERROR(n.Int("sysfs_numa_node", &node.nic.sysfs_numa_node));
    BATON_RETURN_IF_ERROR(n.Finish());
  }
  if (const JsonValue* v = r.Member("nvswitch"); v != nullptr || node.type == NodeType::kNvSwitch) {
    if (node.type != NodeType::kNvSwitch) {
      return absl::InvalidArgumentError(
          absl::StrCat("topology JSON: ", where, " is not an nvswitch but has \"nvswitch\""));
    }
    BATON_ASSIGN_OR_RETURN(ObjectReader s, ObjectReader::Of(v, where + ".nvswitch"));
    const JsonValue* ids = s.Member("bus_ids");
    if (ids != nullptr && ids->kind() != JsonValue::Kind::kArray) {
      return absl::InvalidArgumentError(
          absl::StrCat("topology JSON: ", where, ".nvswitch.bus_ids must be an array"));
    }
    for (const JsonValue& id : ids == nullptr ? JsonValue::Array{} : ids->array()) {
      BATON_ASSIGN_OR_RETURN(std::string bus_id, id.GetString());
      node.nvswitch.bus_ids.push_back(std::move(bus_id));
    }
    BATON_RETURN_IF_ERROR(s.Finish());
  }
  BATON_RETURN_IF_ERROR(r.Finish());
  return node;
}

absl::StatusOr<Link> LinkFromJson(const JsonValue& value, size_t index) {
  BATON_ASSIGN_OR_RETURN(ObjectReader r,
                         ObjectReader::Of(&value, absl::StrCat("links[", index, "]")));
  Link l;
  std::string type;
  BATON_RETURN_IF_ERROR(r.Int("a", &l.a, /*required=*/true));
  BATON_RETURN_IF_ERROR(r.Int("b", &l.b, /*required=*/true));
  BATON_RETURN_IF_ERROR(r.Str("type", &type, /*required=*/true));
  BATON_ASSIGN_OR_RETURN(l.type, ParseLinkType(type));
  BATON_RETURN_IF_ERROR(r.Double("bandwidth_gbps", &l.bandwidth_gbps));
  BATON_RETURN_IF_ERROR(r.Int("nvlink_count", &l.nvlink_count));
  BATON_RETURN_IF_ERROR(r.Double("nvlink_per_link_gbps", &l.nvlink_per_link_gbps));
  BATON_RETURN_IF_ERROR(r.Double("pcie_gts", &l.pcie_gts));
  BATON_RETURN_IF_ERROR(r.Int("pcie_width", &l.pcie_width));
  BATON_RETURN_IF_ERROR(r.Finish());
  return l;
}

}  // namespace

std::string GraphToJson(const Graph& graph) {
  JsonValue nodes = JsonValue::MakeArray();
  for (const Node& node : graph.nodes) nodes.Append(NodeToJson(node));
  JsonValue links = JsonValue::MakeArray();
  for (const Link& link : graph.links) links.Append(LinkToJson(link));
  ObjectWriter w;
  // NOLINTNEXTLINE(google-readability-casting): T(x) to a class type
  w.Value("format", JsonValue::String(std::string(kGraphJsonFormat)))
      .Str("source", graph.source)
      .Str("hostname", graph.hostname);
  if (!graph.attributes.empty()) w.Value("attributes", AttributesToJson(graph.attributes));
  w.Value("nodes", std::move(nodes)).Value("links", std::move(links));
  return WriteJson(w.Build()) + "\n";
}

absl::StatusOr<Graph> GraphFromJson(absl::string_view json) {
  BATON_ASSIGN_OR_RETURN(const JsonValue root, ParseJson(json));
  BATON_ASSIGN_OR_RETURN(ObjectReader r, ObjectReader::Of(&root, "the document"));
  std::string format;
  BATON_RETURN_IF_ERROR(r.Str("format", &format, /*required=*/true));
  if (format != kGraphJsonFormat) {
    return absl::InvalidArgumentError(absl::StrCat("topology JSON: unsupported format \"", format,
                                                   "\" (want ", kGraphJsonFormat, ")"));
  }
  Graph graph;
  BATON_RETURN_IF_ERROR(r.Str("source", &graph.source));
  BATON_RETURN_IF_ERROR(r.Str("hostname", &graph.hostname));
  BATON_RETURN_IF_ERROR(r.Attributes("attributes", &graph.attributes));
  for (const char* key : {"nodes", "links"}) {
    const JsonValue* items = r.Member(key);
    if (items == nullptr || items->kind() != JsonValue::Kind::kArray) {
      return absl::InvalidArgumentError(
          absl::StrCat("topology JSON: \"", key, "\" must be an array"));
    }
    for (size_t i = 0; i < items->array().size(); ++i) {
      if (key[0] == 'n') {
        BATON_ASSIGN_OR_RETURN(Node node, NodeFromJson(items->array()[i], i));
        graph.nodes.push_back(std::move(node));
      } else {
        BATON_ASSIGN_OR_RETURN(Link link, LinkFromJson(items->array()[i], i));
        graph.links.push_back(link);
      }
    }
  }
  BATON_RETURN_IF_ERROR(r.Finish());
  BATON_RETURN_IF_ERROR(ValidateGraph(graph));
  return graph;
}

}  // namespace baton::topology
