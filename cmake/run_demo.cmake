# The README's first command ends here: `cudaops info`, then add checked and timed when a GPU is
# there. Without one, info says why and the run stops without an error.
cmake_policy(VERSION 3.25)
execute_process(COMMAND ${CUDAOPS_CLI} info RESULT_VARIABLE info_result)
if(info_result EQUAL 3)
  message(STATUS "No usable CUDA device here: the build is done, nothing to run.")
  return()
elseif(NOT info_result EQUAL 0)
  message(FATAL_ERROR "cudaops info failed (exit ${info_result})")
endif()
execute_process(COMMAND ${CUDAOPS_CLI} run add --dtype bfloat16 --n 268435456 --check
                RESULT_VARIABLE run_result)
if(NOT run_result EQUAL 0)
  message(FATAL_ERROR "cudaops run add failed (exit ${run_result})")
endif()
