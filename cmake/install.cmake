# cmake --install build --prefix P: the static library and its public headers, the CLI, latentllm-synth,
# the docs, a CMake package (find_package(latentllm CONFIG), target latentllm::latentllm) and a
# pkg-config file (latentllm.pc). README "Using the library".
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(LATENTLLM_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/latentllm)
set(LATENTLLM_PKGCONFIG_DIR ${CMAKE_INSTALL_LIBDIR}/pkgconfig)

install(TARGETS latentllm EXPORT latentllmTargets
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(TARGETS latentllm-cli latentllm-synth RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(DIRECTORY include/latentllm DESTINATION ${CMAKE_INSTALL_INCLUDEDIR} FILES_MATCHING PATTERN "*.hpp")
file(GLOB LATENTLLM_DOCS CONFIGURE_DEPENDS docs/*.md)
install(FILES README.md ${LATENTLLM_DOCS} DESTINATION ${CMAKE_INSTALL_DOCDIR})

# The CMake package.
install(EXPORT latentllmTargets NAMESPACE latentllm:: DESTINATION ${LATENTLLM_CMAKE_DIR})
configure_package_config_file(cmake/latentllmConfig.cmake.in
  ${CMAKE_CURRENT_BINARY_DIR}/latentllmConfig.cmake INSTALL_DESTINATION ${LATENTLLM_CMAKE_DIR})
# 0.x: a minor version may change the API.
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/latentllmConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/latentllmConfig.cmake
  ${CMAKE_CURRENT_BINARY_DIR}/latentllmConfigVersion.cmake cmake/FindLAPACKE.cmake
  DESTINATION ${LATENTLLM_CMAKE_DIR})

# The pkg-config file: the same definitions and architecture flags as the exported target.
file(RELATIVE_PATH LATENTLLM_PC_RELATIVE_PREFIX
  ${CMAKE_INSTALL_PREFIX}/${LATENTLLM_PKGCONFIG_DIR} ${CMAKE_INSTALL_PREFIX})
string(REGEX REPLACE "/$" "" LATENTLLM_PC_RELATIVE_PREFIX "${LATENTLLM_PC_RELATIVE_PREFIX}")
list(TRANSFORM LATENTLLM_PUBLIC_DEFINITIONS PREPEND "-D" OUTPUT_VARIABLE LATENTLLM_PC_CFLAGS)
list(APPEND LATENTLLM_PC_CFLAGS ${LATENTLLM_ARCH_FLAGS})
list(JOIN LATENTLLM_PC_CFLAGS " " LATENTLLM_PC_CFLAGS)
# Built with MPI (src/dist): its C library (pkg-config `mpi-c`) is required too.
set(LATENTLLM_PC_MPI "")
if(LATENTLLM_WITH_MPI)
  set(LATENTLLM_PC_MPI " mpi-c")
endif()
configure_file(cmake/latentllm.pc.in ${CMAKE_CURRENT_BINARY_DIR}/latentllm.pc @ONLY)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/latentllm.pc DESTINATION ${LATENTLLM_PKGCONFIG_DIR})
