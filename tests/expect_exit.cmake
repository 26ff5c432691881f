# Runs COMMAND (its arguments separated by '|': a list would split on the way here) and fails
# unless it exits with EXPECTED_STATUS and, when EXPECTED_ERROR is given, its stderr matches that
# regular expression.
string(REPLACE "|" ";" command "${COMMAND}")
execute_process(COMMAND ${command} RESULT_VARIABLE status OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT status EQUAL EXPECTED_STATUS)
  message(FATAL_ERROR "${command} exited with ${status}, expected ${EXPECTED_STATUS}:\n${out}${err}")
endif()
if(DEFINED EXPECTED_ERROR AND NOT err MATCHES "${EXPECTED_ERROR}")
  message(FATAL_ERROR "${command}: stderr does not match '${EXPECTED_ERROR}':\n${err}")
endif()
