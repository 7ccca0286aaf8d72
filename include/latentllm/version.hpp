// The version of the library and the source it was built from (provenance of every output).
#pragma once

#include <string_view>

namespace latentllm {

// The project version (CMakeLists.txt's project(VERSION)), e.g. "0.1.0".
std::string_view version();
// The git commit the library was built from: 12 hex digits, "-dirty" appended when tracked files had
// changes, or "unknown" when built outside a git checkout (a source tarball).
std::string_view git_commit();

}  // namespace latentllm
