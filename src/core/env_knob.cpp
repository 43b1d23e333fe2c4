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

EnvKnob read_env_knob(const char* name, std::initializer_list<int> choices) {
  return parse_env_knob(name, std::getenv(name), choices);
}

}  // namespace sparse_mla::detail
