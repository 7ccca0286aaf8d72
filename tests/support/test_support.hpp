// Helpers shared by the test executables.
#pragma once

#include <exception>
#include <filesystem>
#include <initializer_list>
#include <string>

#include <gtest/gtest.h>

namespace latentllm::test {

// The message of the exception `f` throws if it is an E; otherwise "wrong exception type: <what>" or
// "no exception", so an EXPECT_EQ on the message also checks the type.
template <typename E, typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  } catch (const std::exception& e) {
    return std::string("wrong exception type: ") + e.what();
  }
  return "no exception";
}

// Expects every part in msg (one failure per missing part, showing the message).
inline void expect_contains(const std::string& msg, std::initializer_list<std::string> parts) {
  for (const auto& part : parts) EXPECT_NE(msg.find(part), std::string::npos) << "'" << part << "' not in: " << msg;
}

// Expects fn to throw an E whose message contains every part.
template <typename E, typename F>
void expect_error(F&& fn, std::initializer_list<std::string> parts) {
  expect_contains(error_of<E>(std::forward<F>(fn)), parts);
}

// ../shared/<rel> (models, data). Throws std::runtime_error if it does not exist, so a missing
// ../shared fails the test instead of silently skipping it.
std::filesystem::path shared_path(const std::string& rel);
// tests/data/<rel>: small fixtures committed with the tests.
std::filesystem::path test_data_path(const std::string& rel);
// The built CLI binary.
std::filesystem::path cli_path();
// A fresh empty temporary directory, removed at process exit.
std::filesystem::path make_temp_dir(const std::string& tag);
// Runs a shell command, returns its exit status; stdout+stderr captured into `output`.
int run_command(const std::string& cmd, std::string& output);
// sha256 hex digest of a byte string.
std::string sha256_hex(const void* data, std::size_t n);
// A file's bytes ("" when it cannot be read).
std::string read_bytes(const std::filesystem::path& p);

}  // namespace latentllm::test
