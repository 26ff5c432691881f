# Every macro of the headers the generated code includes, as the C++ compiler lists them, is a name
# optgen refuses: a hyperparameter of that name would be the macro's text in the generated code
# (generator/names.cpp, macros() and reserved_prefixes()).
file(MAKE_DIRECTORY ${SCRATCH})
set(includes "")
foreach(header array cstddef cstdint limits string vector cuda.h optgen/c_api.h optgen/optimizer.h optgen/reference.h)
  string(APPEND includes "#include <${header}>\n")
endforeach()
file(WRITE ${SCRATCH}/includes.cpp "${includes}")
execute_process(COMMAND ${CXX} -std=c++17 -dM -E -I${SOURCE_DIR}/runtime/include -I${CUDA_INCLUDE} ${SCRATCH}/includes.cpp
                OUTPUT_VARIABLE defines RESULT_VARIABLE status)
if(NOT status EQUAL 0)
  message(FATAL_ERROR "${CXX} -dM -E failed (${status})")
endif()
string(REGEX MATCHALL "#define [A-Za-z][A-Za-z0-9_]*" defines "${defines}")
set(accepted "")
set(count 0)
foreach(define IN LISTS defines)
  string(SUBSTRING "${define}" 8 -1 name)
  if(name MATCHES "__")  # reserved by C++, refused as such
    continue()
  endif()
  math(EXPR count "${count} + 1")
  file(WRITE ${SCRATCH}/macro_check.yaml
       "optimizer: MacroCheck\nsummary: s\nhyperparameters:\n  ${name}: {type: float, default: 1.0}\n"
       "update:\n  - param = param - ${name} * grad\n")
  execute_process(COMMAND ${OPTGEN} check ${SCRATCH}/macro_check.yaml RESULT_VARIABLE status OUTPUT_QUIET ERROR_VARIABLE error)
  if(status EQUAL 0 OR NOT error MATCHES "macro_check.yaml:4:3: error")  # refused where it is declared
    string(APPEND accepted " ${name}")
  endif()
endforeach()
if(accepted)
  message(FATAL_ERROR "macros of the generated code's headers that optgen accepts as names:${accepted}")
endif()
message(STATUS "${count} macros of the generated code's headers, each refused as a name")
