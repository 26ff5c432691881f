# optgen_add_optimizer(<target> SPEC <file.yaml>
#                      [ARCHS 80 90] [STORAGE f32 bf16 ...] [VARIANTS <variant> ...]
#                      [OPTIONS <more optgen options>...])
#
# Generates the kernels, launcher and CPU reference of an optimizer spec at build time, compiles
# the kernels with NVRTC for ARCHS (default 80 90: a cubin for 8.0 runs on 8.6 and 8.9 too; name
# 86 and 89 for cubins compiled for them), plus PTX for the newest (JIT-compiled by the driver on
# newer GPUs), and makes
# <target> a static library holding the launcher (class optgen::<Optimizer> in <name>.h, and its
# C ABI). The generator re-runs only when the spec or the generator changes; a spec error stops
# the build with the spec's file:line:col.
#   STORAGE   storage types, PARAM[:STATE] (default: the spec's `storage:`, else f32 and bf16); bf16
#             storage needs ARCHS of 80 and newer: with an older one, a STORAGE naming bf16 stops the
#             configure, and a default that holds bf16 stops the build, each with one line saying so
#   VARIANTS  generate kernels only for these variants (e.g. adam; default: all)
#   OPTIONS   passed to `optgen emit` and `optgen compile` (e.g. --block-size 512)
function(optgen_add_optimizer target)
  cmake_parse_arguments(PARSE_ARGV 1 ARG "" "SPEC" "ARCHS;STORAGE;VARIANTS;OPTIONS")
  if(NOT ARG_SPEC)
    message(FATAL_ERROR "optgen_add_optimizer(${target}): SPEC <file.yaml> is required")
  endif()
  if(ARG_UNPARSED_ARGUMENTS)
    message(FATAL_ERROR "optgen_add_optimizer(${target}): unexpected arguments ${ARG_UNPARSED_ARGUMENTS}")
  endif()
  get_filename_component(spec "${ARG_SPEC}" ABSOLUTE)
  if(NOT EXISTS "${spec}")
    message(FATAL_ERROR "optgen_add_optimizer(${target}): spec ${spec} does not exist")
  endif()
  get_filename_component(name "${spec}" NAME_WE)
  set(out "${CMAKE_CURRENT_BINARY_DIR}/${target}_generated")

  set(options ${ARG_OPTIONS})
  if(ARG_STORAGE)
    list(JOIN ARG_STORAGE "," storage)
    list(APPEND options --storage ${storage})
  endif()
  if(ARG_VARIANTS)
    list(JOIN ARG_VARIANTS "," variants)
    list(APPEND options --variants ${variants})
  endif()
  set(archs 80 90)
  if(ARG_ARCHS)
    set(archs ${ARG_ARCHS})
  endif()
  list(JOIN archs "," arch_list)
  set(sources "${out}/${name}.cpp" "${out}/${name}.h" "${out}/${name}_kernels.cu" "${out}/${name}_reference.h")
  add_custom_command(
    OUTPUT ${sources}
    COMMAND optgen::optgen emit "${spec}" --out "${out}" ${options}
    DEPENDS "${spec}" optgen::optgen
    COMMENT "optgen: generating ${name} from ${ARG_SPEC}"
    VERBATIM)
  add_custom_command(
    OUTPUT "${out}/${name}_images.cpp"
    COMMAND optgen::optgen compile "${spec}" --out "${out}" --arch ${arch_list} ${options}
    DEPENDS "${spec}" optgen::optgen
    COMMENT "optgen: compiling ${name}'s kernels with NVRTC for ${arch_list}"
    VERBATIM)

  add_library(${target} STATIC "${out}/${name}.cpp" "${out}/${name}_images.cpp")
  set_target_properties(${target} PROPERTIES POSITION_INDEPENDENT_CODE ON)
  target_include_directories(${target} PUBLIC "${out}")
  target_link_libraries(${target} PUBLIC optgen::runtime)
  target_compile_features(${target} PUBLIC cxx_std_17)
endfunction()
