# Helpers shared by the project's CMakeLists. Everything here acts on targets, never on directories.

# find_package(<name> CONFIG) that stops configure with the Debian package to install when missing.
function(cudaops_require_package name debian_package)
  find_package(${name} ${ARGN} CONFIG QUIET)
  if(NOT ${name}_FOUND)
    message(FATAL_ERROR
      "${name} was not found. On Debian or Ubuntu install it with:\n"
      "  apt-get install ${debian_package}\n"
      "or point CMAKE_PREFIX_PATH at an installation of it.")
  endif()
endfunction()

# Language level and warnings for every target the project builds.
function(cudaops_target_defaults target)
  target_compile_features(${target} PUBLIC cxx_std_17)
  set_target_properties(${target} PROPERTIES CXX_EXTENSIONS OFF CUDA_EXTENSIONS OFF
                                             CUDA_STANDARD 17 CUDA_STANDARD_REQUIRED ON)
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wpedantic -Wshadow -Wconversion -Wno-sign-conversion>
    $<$<COMPILE_LANGUAGE:CUDA>:--Werror=all-warnings -Xcompiler=-Wall,-Wextra --expt-relaxed-constexpr>)
  if(CUDAOPS_WARNINGS_AS_ERRORS)
    target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-Werror>
                                             $<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-Werror>)
  endif()
endfunction()

# The CUDA runtime for a host-only target (tests, CLI, harness): the static runtime by default,
# which finds libcuda at run time, so every binary starts on a machine with no driver.
function(cudaops_link_cudart target)
  if(CUDAOPS_CUDART STREQUAL "Static")
    target_link_libraries(${target} PRIVATE CUDA::cudart_static)
  else()
    target_link_libraries(${target} PRIVATE CUDA::cudart)
  endif()
endfunction()
