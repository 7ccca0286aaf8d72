#include "latentllm/log.hpp"

#include <cstdio>
#include <mutex>

namespace latentllm {
namespace {

void default_callback(LogLevel level, std::string_view msg) {
  static const char* kPrefix[] = {"debug: ", "", "warning: ", "error: "};
  std::fprintf(stderr, "%s%.*s\n", kPrefix[static_cast<int>(level)], static_cast<int>(msg.size()), msg.data());
}

LogCallback g_callback = default_callback;
LogLevel g_min_level = LogLevel::Info;
std::mutex g_mutex;

}  // namespace

void set_log_callback(LogCallback cb) {
  std::lock_guard lock(g_mutex);
  g_callback = std::move(cb);
}

void set_log_level(LogLevel min_level) { g_min_level = min_level; }

void log_message(LogLevel level, std::string_view msg) {
  if (level < g_min_level) return;
  std::lock_guard lock(g_mutex);
  if (g_callback) g_callback(level, msg);
}

}  // namespace latentllm
