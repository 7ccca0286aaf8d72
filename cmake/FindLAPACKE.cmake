# FindLAPACKE: the C interface to LAPACK (liblapacke), as the imported target LAPACKE::LAPACKE.
# Sets LAPACKE_FOUND and LAPACKE_LIBRARY. Installed with the latentllm package: its config file finds
# the library's link-only dependencies with this module too.
find_library(LAPACKE_LIBRARY lapacke)
include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(LAPACKE REQUIRED_VARS LAPACKE_LIBRARY)
mark_as_advanced(LAPACKE_LIBRARY)
if(LAPACKE_FOUND AND NOT TARGET LAPACKE::LAPACKE)
  add_library(LAPACKE::LAPACKE UNKNOWN IMPORTED)
  set_target_properties(LAPACKE::LAPACKE PROPERTIES IMPORTED_LOCATION "${LAPACKE_LIBRARY}")
endif()
