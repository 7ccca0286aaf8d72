// Library logging through a settable callback. The CLI installs one that writes to stderr.
#pragma once

#include <functional>
#include <string_view>

#include <fmt/format.h>

namespace latentllm {

enum class LogLevel { Debug, Info, Warn, Error };

using LogCallback = std::function<void(LogLevel, std::string_view)>;

// Replaces the callback (nullptr silences the library). Not thread-safe against concurrent logging.
void set_log_callback(LogCallback cb);
void set_log_level(LogLevel min_level);
void log_message(LogLevel level, std::string_view msg);

template <typename... Args>
void log_info(fmt::format_string<Args...> f, Args&&... args) {
  log_message(LogLevel::Info, fmt::format(f, std::forward<Args>(args)...));
}
template <typename... Args>
void log_warn(fmt::format_string<Args...> f, Args&&... args) {
  log_message(LogLevel::Warn, fmt::format(f, std::forward<Args>(args)...));
}
template <typename... Args>
void log_debug(fmt::format_string<Args...> f, Args&&... args) {
  log_message(LogLevel::Debug, fmt::format(f, std::forward<Args>(args)...));
}

}  // namespace latentllm
