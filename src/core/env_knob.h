// Tuning and testing knobs read from the environment (the CUDA back end's are listed in
// cuda/knobs.h). Each knob is an integer with a short list of allowed values; unset or empty
// means "the library chooses". Any other value is an error that names the variable, its value
// and the choices, which the caller returns as a status: a typo
// ("SMLA_DECODE_PAIR_HEAD_GROUPS=false") must not quietly pick a launch the user did not ask for.
#pragma once

#include <initializer_list>
#include <optional>
#include <string>

namespace sparse_mla::detail {

struct EnvKnob {
  std::optional<int> value;  // the forced value; nullopt = unset or empty
  std::string error;         // non-empty: the variable holds something not in the choices
};

// Parses `text` (nullptr = unset) as knob `name` with the given choices. Pure: unit-tested.
EnvKnob parse_env_knob(const char* name, const char* text, std::initializer_list<int> choices);

// The same for a knob that takes any integer in [lo, hi] (decimal digits only; "choices" in the
// error message reads "an integer in [lo, hi]").
EnvKnob parse_env_knob_in_range(const char* name, const char* text, int lo, int hi);

// parse_env_knob on std::getenv(name). Callers read a knob once per process (a function-local
// static), so a plan and the run that follows it agree.
EnvKnob read_env_knob(const char* name, std::initializer_list<int> choices);
EnvKnob read_env_knob_in_range(const char* name, int lo, int hi);

}  // namespace sparse_mla::detail
