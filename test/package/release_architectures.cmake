# Configures the project as a wheel or a package is built (no architectures given) and checks that
# every .cu file of the library is compiled for each architecture of CUDAOPS_RELEASE_ARCHITECTURES:
# SASS for each "-real" one, SASS and PTX for the others. A configure takes seconds, where building
# the ten architectures would take most of an hour on a small machine.
#   cmake -DSOURCE_DIR=... -DBINARY_DIR=... -DGENERATOR=... -P release_architectures.cmake
file(REMOVE_RECURSE "${BINARY_DIR}")
execute_process(
  COMMAND ${CMAKE_COMMAND} -E env --unset=CUDAARCHS
          ${CMAKE_COMMAND} -S ${SOURCE_DIR} -B ${BINARY_DIR} -G ${GENERATOR}
          -DCUDAOPS_BUILD_TESTS=OFF -DCUDAOPS_BUILD_BENCH=OFF -DCUDAOPS_BUILD_APPS=OFF
          -DCMAKE_EXPORT_COMPILE_COMMANDS=ON
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "configure failed:\n${out}")
endif()
file(STRINGS "${BINARY_DIR}/CMakeCache.txt" release REGEX "^CUDAOPS_RELEASE_ARCHITECTURES:")
string(REGEX REPLACE "^[^=]*=" "" release "${release}")
string(REPLACE "\\;" ";" release "${release}")
list(LENGTH release count)
if(count LESS 2)
  message(FATAL_ERROR "the release list '${release}' has fewer than two architectures")
endif()

file(READ "${BINARY_DIR}/compile_commands.json" commands)
string(JSON entries LENGTH "${commands}")
math(EXPR last "${entries} - 1")
set(cuda_sources 0)
foreach(i RANGE ${last})
  string(JSON file GET "${commands}" ${i} file)
  if(NOT file MATCHES "\\.cu$")
    continue()
  endif()
  # Sources of Hopper-only instructions are compiled for sm_90a alone, whatever the release list.
  if(file MATCHES "_sm90a\\.cu$")
    string(JSON command GET "${commands}" ${i} command)
    if(NOT command MATCHES "arch=compute_90a,code=sm_90a")
      message(FATAL_ERROR "${file} is not compiled for sm_90a:\n${command}")
    endif()
    continue()
  endif()
  math(EXPR cuda_sources "${cuda_sources} + 1")
  string(JSON command GET "${commands}" ${i} command)
  foreach(arch IN LISTS release)
    string(REGEX REPLACE "-real$" "" number "${arch}")
    if(arch MATCHES "-real$")
      set(want "arch=compute_${number},code=[sm_${number}]")
    else()
      set(want "arch=compute_${number},code=[compute_${number},sm_${number}]")
    endif()
    string(FIND "${command}" "${want}" at)
    if(at EQUAL -1)
      message(FATAL_ERROR "${file} is not compiled for ${arch} (no '${want}' in:\n${command})")
    endif()
  endforeach()
endforeach()
if(cuda_sources EQUAL 0)
  message(FATAL_ERROR "no .cu file in ${BINARY_DIR}/compile_commands.json")
endif()
message(STATUS "${cuda_sources} CUDA sources, each for: ${release}")
