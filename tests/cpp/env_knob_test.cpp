// The environment knobs (core/env_knob.h): unset and empty mean "not forced", an allowed value is
// taken exactly, and anything else is an error naming the variable, the value and the choices.
#include "core/env_knob.h"

#include <gtest/gtest.h>

#include <cstdlib>

namespace {

using sparse_mla::detail::EnvKnob;
using sparse_mla::detail::parse_env_knob;
using sparse_mla::detail::read_env_knob;

TEST(EnvKnob, UnsetAndEmptyAreNotForced) {
  for (const char* text : {static_cast<const char*>(nullptr), ""}) {
    const EnvKnob knob = parse_env_knob("SMLA_X", text, {32, 64});
    EXPECT_FALSE(knob.value.has_value());
    EXPECT_EQ(knob.error, "");
  }
}

TEST(EnvKnob, AllowedValuesAreTakenExactly) {
  EXPECT_EQ(parse_env_knob("SMLA_X", "32", {32, 64}).value, 32);
  EXPECT_EQ(parse_env_knob("SMLA_X", "64", {32, 64}).value, 64);
  // 0 is a value like any other (SMLA_DECODE_PAIR_HEAD_GROUPS=0 turns pairing off).
  const EnvKnob off = parse_env_knob("SMLA_X", "0", {0, 1});
  ASSERT_TRUE(off.value.has_value());
  EXPECT_EQ(*off.value, 0);
  EXPECT_EQ(off.error, "");
}

TEST(EnvKnob, AnythingElseIsAnErrorNamingVariableValueAndChoices) {
  // "false", " 1", "01", "4.0": near misses that an atoi-style parse would accept or mis-read.
  for (const char* text : {"false", "2", " 1", "01", "1 ", "4.0", "-1", "on"}) {
    SCOPED_TRACE(text);
    const EnvKnob knob = parse_env_knob("SMLA_COMBINE_COLUMN_SLICES", text, {1, 4});
    EXPECT_FALSE(knob.value.has_value());
    EXPECT_EQ(knob.error, std::string("SMLA_COMBINE_COLUMN_SLICES = '") + text +
                              "' is not a valid setting: expected 1 or 4, or unset to let the "
                              "library choose");
  }
}

TEST(EnvKnob, RangeKnobTakesDecimalIntegersInRange) {
  using sparse_mla::detail::parse_env_knob_in_range;
  EXPECT_FALSE(parse_env_knob_in_range("SMLA_X", nullptr, 1, 1 << 20).value.has_value());
  EXPECT_FALSE(parse_env_knob_in_range("SMLA_X", "", 1, 1 << 20).value.has_value());
  EXPECT_EQ(parse_env_knob_in_range("SMLA_X", "1", 1, 1 << 20).value, 1);
  EXPECT_EQ(parse_env_knob_in_range("SMLA_X", "264", 1, 1 << 20).value, 264);
  EXPECT_EQ(parse_env_knob_in_range("SMLA_X", "1048576", 1, 1 << 20).value, 1 << 20);
  for (const char* text :
       {"0", "1048577", "-7", "+7", "07", " 7", "7 ", "7x", "0x10", "99999999999999999999"}) {
    SCOPED_TRACE(text);
    const EnvKnob knob = parse_env_knob_in_range("SMLA_DECODE_NUM_PARTS", text, 1, 1 << 20);
    EXPECT_FALSE(knob.value.has_value());
    EXPECT_EQ(knob.error, std::string("SMLA_DECODE_NUM_PARTS = '") + text +
                              "' is not a valid setting: expected an integer in [1, 1048576], "
                              "or unset to let the library choose");
  }
}

TEST(EnvKnob, ReadsTheEnvironment) {
  constexpr const char* kName = "SMLA_ENV_KNOB_TEST_ONLY";
  ASSERT_EQ(unsetenv(kName), 0);
  EXPECT_FALSE(read_env_knob(kName, {32, 64}).value.has_value());
  ASSERT_EQ(setenv(kName, "64", 1), 0);
  EXPECT_EQ(read_env_knob(kName, {32, 64}).value, 64);
  ASSERT_EQ(setenv(kName, "48", 1), 0);
  EXPECT_NE(read_env_knob(kName, {32, 64}).error.find("'48'"), std::string::npos);
  ASSERT_EQ(unsetenv(kName), 0);
}

}  // namespace
