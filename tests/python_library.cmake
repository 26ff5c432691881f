# liboptgen.so (python/) exports the C ABI and nothing else, and needs nothing beyond the C and C++
# runtime libraries and yaml-cpp (the package's build dependency), so that Python loads it on a
# machine with no CUDA installed:
#   - `nm -D --defined-only`: every exported symbol starts with optgen_, and the list holds
#     optgen_create_from_spec, every built-in's optgen_<spec>_create and every function c_api.h
#     declares;
#   - `readelf -d`: its NEEDED libraries are libc, libm, libstdc++, libgcc_s, libyaml-cpp and the
#     loader.
# Variables (-D): LIBRARY, SOURCE_DIR (the source tree: its specs and c_api.h list what is expected).
cmake_minimum_required(VERSION 3.25)

execute_process(COMMAND nm -D --defined-only "${LIBRARY}" RESULT_VARIABLE status OUTPUT_VARIABLE nm_output
                ERROR_VARIABLE nm_output)
if(NOT status EQUAL 0)
  message(FATAL_ERROR "nm -D --defined-only ${LIBRARY} failed:\n${nm_output}")
endif()
string(REGEX MATCHALL "[^ \n]+\n" lines "${nm_output}")
set(exported "")
foreach(line IN LISTS lines)
  string(STRIP "${line}" symbol)
  list(APPEND exported "${symbol}")
endforeach()
set(problems "")
foreach(symbol IN LISTS exported)
  if(NOT symbol MATCHES "^optgen_")
    string(APPEND problems "  exports ${symbol}, which is not part of the C ABI\n")
  endif()
endforeach()

set(expected optgen_create_from_spec)
file(GLOB specs "${SOURCE_DIR}/specs/*.yaml")
foreach(spec IN LISTS specs)
  get_filename_component(name "${spec}" NAME_WE)
  list(APPEND expected "optgen_${name}_create")
endforeach()
file(READ "${SOURCE_DIR}/runtime/include/optgen/c_api.h" header)
string(REGEX MATCHALL "[a-z_0-9*]+ (optgen_[a-z_0-9]+)\\(" declarations "${header}")
foreach(declaration IN LISTS declarations)
  string(REGEX REPLACE ".* (optgen_[a-z_0-9]+)\\($" "\\1" function "${declaration}")
  list(APPEND expected "${function}")
endforeach()
list(REMOVE_DUPLICATES expected)
foreach(function IN LISTS expected)
  if(NOT function IN_LIST exported)
    string(APPEND problems "  does not export ${function}\n")
  endif()
endforeach()

execute_process(COMMAND readelf -d "${LIBRARY}" RESULT_VARIABLE status OUTPUT_VARIABLE dynamic ERROR_VARIABLE dynamic)
if(NOT status EQUAL 0)
  message(FATAL_ERROR "readelf -d ${LIBRARY} failed:\n${dynamic}")
endif()
string(REGEX MATCHALL "Shared library: \\[[^]]+\\]" needed "${dynamic}")
foreach(entry IN LISTS needed)
  string(REGEX REPLACE "Shared library: \\[(.+)\\]" "\\1" library "${entry}")
  if(NOT library MATCHES "^(libc|libm|libstdc\\+\\+|libgcc_s|libyaml-cpp)\\.so(\\.[0-9]+)+$" AND NOT library MATCHES "^ld-linux")
    string(APPEND problems "  needs ${library}\n")
  endif()
endforeach()
if(dynamic MATCHES "TEXTREL")
  string(APPEND problems "  has text relocations (code that is not position-independent)\n")
endif()

list(LENGTH exported count)
if(problems)
  message(FATAL_ERROR "${LIBRARY}:\n${problems}")
endif()
message(STATUS "${LIBRARY}: ${count} symbols, all of the C ABI; needs only the C and C++ runtime libraries and yaml-cpp")
