# Runs `optgen check SPEC` and fails unless it exits with EXPECTED_STATUS.
execute_process(COMMAND ${OPTGEN} check ${SPEC} RESULT_VARIABLE status ERROR_VARIABLE err OUTPUT_QUIET)
if(NOT status EQUAL EXPECTED_STATUS)
  message(FATAL_ERROR "optgen check exited with ${status}, expected ${EXPECTED_STATUS}:\n${err}")
endif()
