// The settings registry (runtime/settings.h): one parser per kind, errors naming the variable,
// the order API > environment > default, and listeners run for their own settings only.
#include <gtest/gtest.h>

#include <c10/util/Exception.h>

#include <cstdlib>
#include <string>

#include "runtime/settings.h"

namespace devx::settings {
namespace {

// A ValueError from `fn`, whose message has `part`.
template <typename F>
void expect_value_error(F fn, const std::string& part) {
  try {
    fn();
    ADD_FAILURE() << "no ValueError; expected one with: " << part;
  } catch (const c10::ValueError& e) {
    const std::string message = e.what_without_backtrace();
    EXPECT_NE(message.find(part), std::string::npos) << message;
  }
}

std::string source_of(const std::string& name) {
  for (const Entry& e : list()) {
    if (e.name == name) return e.source;
  }
  return "";
}

// Settings without listeners that reach beyond the registry: changing them in a test touches
// nothing else of the core.
constexpr const char* kInt = "DIPU_MEM_CHECK_LOG_INTERVAL";
constexpr const char* kBool = "DIPU_MEM_CHECK_ENABLE_BACKTRACE";

class SettingsTest : public ::testing::Test {
 protected:
  void TearDown() override {
    for (const char* name : {kInt, kBool}) {
      unsetenv(name);
      environment_changed(name);
      set(name, std::nullopt);
    }
  }
};

TEST_F(SettingsTest, AnUnknownNameIsAValueError) {
  expect_value_error([] { id_of("DEVX_NO_SUCH_SETTING"); }, "DEVX_NO_SUCH_SETTING");
}

TEST_F(SettingsTest, TheDefaultTheEnvironmentAndTheApiInThatOrder) {
  const Id id = id_of(kInt);
  EXPECT_EQ(get_int(id), 0);
  EXPECT_EQ(source_of(kInt), "default");
  setenv(kInt, "7", 1);
  environment_changed(kInt);
  EXPECT_EQ(get_int(id), 7);
  EXPECT_EQ(source_of(kInt), "environment");
  set(kInt, "9");
  EXPECT_EQ(get_int(id), 9);
  EXPECT_EQ(source_of(kInt), "api");
  // The API never writes the environment: a child would still see 7.
  EXPECT_STREQ(std::getenv(kInt), "7");
  set(kInt, std::nullopt);
  EXPECT_EQ(get_int(id), 7);
}

TEST_F(SettingsTest, AnEnvironmentWriteReplacesAnEarlierApiValue) {
  set(kInt, "9");
  setenv(kInt, "3", 1);
  environment_changed(kInt);
  EXPECT_EQ(get_int(id_of(kInt)), 3);
  EXPECT_EQ(source_of(kInt), "environment");
}

TEST_F(SettingsTest, BadValuesNameTheVariableTheValueAndWhatIsAllowed) {
  expect_value_error([] { set(kInt, "2.5"); }, std::string(kInt) + "='2.5'");
  expect_value_error([] { set(kInt, "-1"); }, std::string(kInt) + "='-1'");
  expect_value_error([] { set(kBool, "maybe"); }, "1/0, true/false, on/off or yes/no");
  // A rejected value leaves the old one.
  set(kInt, "4");
  expect_value_error([] { set(kInt, "x"); }, kInt);
  EXPECT_EQ(get_int(id_of(kInt)), 4);
}

TEST_F(SettingsTest, EverySwitchWordOfABoolean) {
  const Id id = id_of(kBool);
  for (const char* word : {"1", "true", "ON", " yes "}) {
    set(kBool, word);
    EXPECT_TRUE(get_bool(id)) << word;
  }
  for (const char* word : {"0", "False", "off", "no"}) {
    set(kBool, word);
    EXPECT_FALSE(get_bool(id)) << word;
  }
}

int g_int_listener_runs = 0;
void count_int_listener() { ++g_int_listener_runs; }

TEST_F(SettingsTest, AChangeRunsOnlyItsOwnListeners) {
  static Watch watch({id_of(kInt)}, &count_int_listener);
  const int start = g_int_listener_runs;
  EXPECT_GE(start, 1);  // a Watch runs its listener when made
  set(kInt, "5");
  EXPECT_EQ(g_int_listener_runs, start + 1);
  set(kBool, "1");
  setenv("DEVX_NOT_A_SETTING", "1", 1);
  environment_changed("DEVX_NOT_A_SETTING");
  unsetenv("DEVX_NOT_A_SETTING");
  EXPECT_EQ(g_int_listener_runs, start + 1);
}

}  // namespace
}  // namespace devx::settings
