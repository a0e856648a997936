# Runs COMMAND (arguments separated by '|') and checks its exit code is one of EXIT (separated
# by '|') and that its output (stdout and stderr) matches OUTPUT, a regular expression.
cmake_policy(VERSION 3.25)
string(REPLACE "|" ";" command "${COMMAND}")
string(REPLACE "|" ";" allowed "${EXIT}")
execute_process(COMMAND ${command} RESULT_VARIABLE result OUTPUT_VARIABLE out ERROR_VARIABLE err)
set(text "${out}${err}")
if(NOT result IN_LIST allowed)
  message(FATAL_ERROR "exit code ${result}, expected one of ${allowed}\n${text}")
endif()
if(NOT OUTPUT STREQUAL "" AND NOT text MATCHES "${OUTPUT}")
  message(FATAL_ERROR "output does not match '${OUTPUT}':\n${text}")
endif()
message(STATUS "exit ${result}, output as expected:\n${text}")
