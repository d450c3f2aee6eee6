#include "common/options.h"

#include <fstream>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"

namespace baton {
namespace {

std::string NormalizeName(absl::string_view name) {
  return absl::StrReplaceAll(name, {{"-", "_"}});
}

std::string FlagName(absl::string_view name) { return absl::StrReplaceAll(name, {{"_", "-"}}); }

absl::StatusOr<bool> ParseBool(absl::string_view text) {
  const std::string lower = absl::AsciiStrToLower(text);
  if (lower == "true" || lower == "1" || lower == "yes" || lower == "on") return true;
  if (lower == "false" || lower == "0" || lower == "no" || lower == "off") return false;
  return absl::InvalidArgumentError(absl::StrCat("'", text, "' is not a boolean"));
}

}  // namespace

absl::StatusOr<absl::Duration> ParseDurationFlag(absl::string_view text) {
  double seconds = 0;
  if (absl::SimpleAtod(text, &seconds)) return absl::Seconds(seconds);
  absl::Duration duration;
  if (!absl::ParseDuration(text, &duration) || duration < absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", text, "' is not a duration (examples: 30s, 500ms, 2m)"));
  }
  return duration;
}

void OptionSet::AddString(absl::string_view name, std::string* target, absl::string_view help) {
  // NOLINTNEXTLINE(google-readability-casting): T(x) to a class type
  options_.push_back({NormalizeName(name), std::string(help),
                      [target](absl::string_view v) {
                        // NOLINTNEXTLINE(google-readability-casting): T(x) to a class type
                        *target = std::string(v);
                        return absl::OkStatus();
                      },
                      [target] { return *target; }});
}

void OptionSet::AddInt(absl::string_view name, int64_t* target, absl::string_view help) {
  // NOLINTNEXTLINE(google-readability-casting): T(x) to a class type
  options_.push_back({NormalizeName(name), std::string(help),
                      [target](absl::string_view v) {
                        int64_t parsed = 0;
                        if (!absl::SimpleAtoi(v, &parsed)) {
                          return absl::InvalidArgumentError(
                              absl::StrCat("'", v, "' is not an integer"));
                        }
                        *target = parsed;
                        return absl::OkStatus();
                      },
                      [target] { return absl::StrCat(*target); }});
}

void OptionSet::AddBool(absl::string_view name, bool* target, absl::string_view help) {
  // NOLINTNEXTLINE(google-readability-casting): T(x) to a class type
  options_.push_back({NormalizeName(name), std::string(help),
                      [target](absl::string_view v) -> absl::Status {
                        absl::StatusOr<bool> parsed = ParseBool(v);
                        if (!parsed.ok()) return parsed.status();
                        *target = *parsed;
                        return absl::OkStatus();
                      },
                      [target] { return std::string(*target ? "true" : "false"); }, true});
}

void OptionSet::AddDuration(absl::string_view name, absl::Duration* target,
                            absl::string_view help) {
  // NOLINTNEXTLINE(google-readability-casting): T(x) to a class type
  options_.push_back({NormalizeName(name), std::string(help),
                      [target](absl::string_view v) -> absl::Status {
                        absl::StatusOr<absl::Duration> parsed = ParseDurationFlag(v);
                        if (!parsed.ok()) return parsed.status();
                        *target = *parsed;
                        return absl::OkStatus();
                      },
                      [target] { return absl::FormatDuration(*target); }});
}

OptionSet::Option* OptionSet::Find(absl::string_view name) {
  const std::string normalized = NormalizeName(name);
  for (Option& option : options_) {
    if (option.name == normalized) return &option;
  }
  return nullptr;
}

absl::Status OptionSet::Set(absl::string_view name, absl::string_view value) {
  Option* option = Find(name);
  if (option == nullptr)
    return absl::InvalidArgumentError(absl::StrCat("unknown option '", name, "'"));
  absl::Status status = option->set(value);
  if (!status.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("option '", name, "': ", status.message()));
  }
  return absl::OkStatus();
}

absl::Status OptionSet::ParseConfigFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open config file ", path));
  std::string line;
  int line_number = 0;
  while (std::getline(in, line)) {
    ++line_number;
    absl::string_view text = line;
    if (size_t hash = text.find('#'); hash != absl::string_view::npos) text = text.substr(0, hash);
    text = absl::StripAsciiWhitespace(text);
    if (text.empty()) continue;
    const size_t eq = text.find('=');
    if (eq == absl::string_view::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ":", line_number, ": expected 'key = value', got '", text, "'"));
    }
    absl::string_view key = absl::StripAsciiWhitespace(text.substr(0, eq));
    absl::string_view value = absl::StripAsciiWhitespace(text.substr(eq + 1));
    if (value.size() >= 2 && value.front() == '"' && value.back() == '"') {
      value = value.substr(1, value.size() - 2);
    }
    absl::Status status = Set(key, value);
    if (!status.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ":", line_number, ": ", status.message()));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::string>> OptionSet::ParseFlags(int argc, const char* const* argv,
                                                               int first) {
  std::vector<std::string> positional;
  for (int i = first; i < argc; ++i) {
    absl::string_view arg = argv[i];
    if (arg == "--") {
      for (++i; i < argc; ++i) positional.emplace_back(argv[i]);
      break;
    }
    if (!absl::ConsumePrefix(&arg, "--")) {
      positional.emplace_back(arg);
      continue;
    }
    absl::string_view name = arg;
    absl::string_view value;
    bool has_value = false;
    if (size_t eq = arg.find('='); eq != absl::string_view::npos) {
      name = arg.substr(0, eq);
      value = arg.substr(eq + 1);
      has_value = true;
    }
    Option* option = Find(name);
    if (option == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("unknown flag --", name, " (see --help)"));
    }
    if (!has_value) {
      if (option->is_bool) {
        value = "true";
      } else if (i + 1 < argc) {
        value = argv[++i];
      } else {
        return absl::InvalidArgumentError(absl::StrCat("flag --", name, " needs a value"));
      }
    }
    if (absl::Status status = Set(name, value); !status.ok()) return status;
  }
  return positional;
}

std::string OptionSet::Help() const {
  std::ostringstream out;
  for (const Option& option : options_) {
    std::string flag = absl::StrCat("  --", FlagName(option.name), "=", option.get());
    out << flag;
    if (flag.size() < 40) {
      out << std::string(40 - flag.size(), ' ');
    } else {
      out << "\n" << std::string(40, ' ');
    }
    out << option.help << "\n";
  }
  return out.str();
}

bool WantsHelp(int argc, const char* const* argv, int first) {
  for (int i = first; i < argc; ++i) {
    absl::string_view arg = argv[i];
    if (arg == "--") return false;
    if (arg == "--help" || arg == "-h") return true;
  }
  return false;
}

}  // namespace baton
