#include "core/env_knob.h"

#include <cstdlib>

namespace sparse_mla::detail {

EnvKnob parse_env_knob(const char* name, const char* text, std::initializer_list<int> choices) {
  EnvKnob knob;
  if (text == nullptr || *text == '\0') return knob;
  std::string allowed;
  for (const int choice : choices) {
    if (std::to_string(choice) == text) {
      knob.value = choice;
      return knob;
    }
    allowed += (allowed.empty() ? "" : " or ") + std::to_string(choice);
  }
  knob.error = std::string(name) + " = '" + text + "' is not a valid setting: expected " + allowed +
               ", or unset to let the library choose";
  return knob;
}

EnvKnob parse_env_knob_in_range(const char* name, const char* text, int lo, int hi) {
  EnvKnob knob;
  if (text == nullptr || *text == '\0') return knob;
  // Decimal digits only, at most 9 of them (no sign, spaces or leading zeros), so the value
  // fits an int and its text round-trips.
  const std::string digits(text);
  const bool decimal = digits.size() <= 9 &&
                       digits.find_first_not_of("0123456789") == std::string::npos &&
                       (digits.size() == 1 || digits[0] != '0');
  const int value = decimal ? std::stoi(digits) : 0;
  if (decimal && value >= lo && value <= hi) {
    knob.value = value;
    return knob;
  }
  knob.error = std::string(name) + " = '" + text + "' is not a valid setting: expected an " +
               "integer in [" + std::to_string(lo) + ", " + std::to_string(hi) +
               "], or unset to let the library choose";
  return knob;
}

EnvKnob read_env_knob(const char* name, std::initializer_list<int> choices) {
  return parse_env_knob(name, std::getenv(name), choices);
}

EnvKnob read_env_knob_in_range(const char* name, int lo, int hi) {
  return parse_env_knob_in_range(name, std::getenv(name), lo, hi);
}

}  // namespace sparse_mla::detail
