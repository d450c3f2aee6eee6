#pragma once

// Named options that can come from a config file and from command-line flags, described once.
//
// Config file format: one "key = value" per line; '#' starts a comment; blank lines are ignored;
// values may be wrapped in double quotes. Flags: "--key=value" or "--key value"; booleans also
// accept a bare "--key". Keys may be written with '-' or '_' interchangeably. Flags override the
// file. Durations are written as "30s", "500ms", "2m".

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace baton {

class OptionSet {
 public:
  // Registers an option. `target` must outlive this set and holds the default until parsed.
  void AddString(absl::string_view name, std::string* target, absl::string_view help);
  void AddInt(absl::string_view name, int64_t* target, absl::string_view help);
  void AddBool(absl::string_view name, bool* target, absl::string_view help);
  void AddDuration(absl::string_view name, absl::Duration* target, absl::string_view help);

  // Sets option `name` from text. InvalidArgument for an unknown name or a malformed value.
  absl::Status Set(absl::string_view name, absl::string_view value);

  // Reads a config file. NotFound if it cannot be opened; InvalidArgument naming the line for a
  // syntax error or bad value.
  absl::Status ParseConfigFile(const std::string& path);

  // Parses flags from argv[first..argc). Stops at "--". Returns the positional arguments in order.
  // "--help"/"-h" is not handled here: callers check for it first (see WantsHelp).
  absl::StatusOr<std::vector<std::string>> ParseFlags(int argc, const char* const* argv,
                                                      int first = 1);

  // "  --name=<default>   help" lines for every option, in registration order.
  std::string Help() const;

 private:
  struct Option {
    std::string name;  // with '_' separators
    std::string help;
    std::function<absl::Status(absl::string_view)> set;
    std::function<std::string()> get;
    bool is_bool = false;
  };
  Option* Find(absl::string_view name);
  std::vector<Option> options_;
};

// True if argv[first..argc) holds "--help" or "-h" before any "--".
bool WantsHelp(int argc, const char* const* argv, int first = 1);

// Parses "30s", "250ms", "2m", "1h", "1.5s" (absl duration syntax); a bare number is seconds.
absl::StatusOr<absl::Duration> ParseDurationFlag(absl::string_view text);

}  // namespace baton
