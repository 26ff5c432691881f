# examples/ builds against an INSTALLED optgen, as a user's project would:
#   1. cmake --install BUILD_DIR --prefix SCRATCH/install
#   2. configure SOURCE_DIR/examples in SCRATCH/examples with optgen_DIR=SCRATCH/install/lib/cmake/optgen
#   3. build it (both optimizers generated and NVRTC-compiled at build time, mlp compiled by nvcc)
#   4. where nvidia-smi lists a GPU, run mlp with each optimizer; elsewhere it is not run.
# Any failing step fails the test with that step's output.
#
# Variables (-D): BUILD_DIR (optgen's build tree), SOURCE_DIR (optgen's source tree), SCRATCH (a
# directory of this test's own, emptied first), NVCC (optional: the nvcc of the toolkit optgen was
# built with).
cmake_minimum_required(VERSION 3.25)
foreach(var BUILD_DIR SOURCE_DIR SCRATCH)
  if(NOT DEFINED ${var} OR "${${var}}" STREQUAL "")
    message(FATAL_ERROR "examples_build.cmake: -D${var}=... is required")
  endif()
endforeach()

# Runs one step; on failure stops the test with the step's command line and output.
function(run_step what)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE status OUTPUT_VARIABLE output ERROR_VARIABLE output)
  if(NOT status EQUAL 0)
    list(JOIN ARGN " " command)
    message(NOTICE "${output}")  # as it came, unwrapped
    message(FATAL_ERROR "${what} failed (exit status ${status}), its output above.\n  command: ${command}")
  endif()
  message(STATUS "${what}: ok")
endfunction()

file(REMOVE_RECURSE "${SCRATCH}")
set(prefix "${SCRATCH}/install")
set(examples_build "${SCRATCH}/examples")

# 1. Install.
run_step("installing ${BUILD_DIR} into ${prefix}" "${CMAKE_COMMAND}" --install "${BUILD_DIR}" --prefix "${prefix}")
if(NOT EXISTS "${prefix}/lib/cmake/optgen/optgenConfig.cmake")
  message(FATAL_ERROR "the install did not produce ${prefix}/lib/cmake/optgen/optgenConfig.cmake")
endif()

# 2. Configure. nvcc may be off PATH (e.g. only in /usr/local/cuda/bin): name it explicitly.
if(NOT NVCC OR NOT EXISTS "${NVCC}")
  find_program(found_nvcc nvcc PATHS /usr/local/cuda/bin NO_CACHE)
  set(NVCC "${found_nvcc}")
endif()
if(NOT NVCC)
  message(FATAL_ERROR "no nvcc: the examples need the CUDA compiler (not on PATH, not in /usr/local/cuda/bin)")
endif()
get_filename_component(cuda_root "${NVCC}" DIRECTORY)
get_filename_component(cuda_root "${cuda_root}" DIRECTORY)
set(configure_args -S "${SOURCE_DIR}/examples" -B "${examples_build}"
    "-Doptgen_DIR=${prefix}/lib/cmake/optgen" "-DCMAKE_CUDA_COMPILER=${NVCC}" "-DCUDAToolkit_ROOT=${cuda_root}")
run_step("configuring examples/ against the installed tree" "${CMAKE_COMMAND}" ${configure_args})

# 3. Build.
include(ProcessorCount)
ProcessorCount(jobs)
if(jobs EQUAL 0)
  set(jobs 2)
endif()
run_step("building examples/" "${CMAKE_COMMAND}" --build "${examples_build}" -j ${jobs})
set(mlp "${examples_build}/mlp")
if(NOT EXISTS "${mlp}")
  message(FATAL_ERROR "the examples built, but ${mlp} is missing")
endif()

# 4. Run, only where there is a GPU.
find_program(nvidia_smi nvidia-smi NO_CACHE)
set(gpu FALSE)
if(nvidia_smi)
  execute_process(COMMAND "${nvidia_smi}" -L RESULT_VARIABLE status OUTPUT_QUIET ERROR_QUIET)
  if(status EQUAL 0)
    set(gpu TRUE)
  endif()
endif()
if(NOT gpu)
  message(STATUS "no GPU (nvidia-smi absent or it found none): ${mlp} was built but not run")
  return()
endif()
foreach(optimizer adamw adabelief)
  execute_process(COMMAND "${mlp}" --optimizer ${optimizer} RESULT_VARIABLE status OUTPUT_VARIABLE output
                  ERROR_VARIABLE output)
  if(status EQUAL 77)
    message(WARNING "mlp --optimizer ${optimizer}: no usable GPU although nvidia-smi lists one; not run:\n${output}")
  elseif(NOT status EQUAL 0)
    message(NOTICE "${output}")
    message(FATAL_ERROR "mlp --optimizer ${optimizer} failed (exit status ${status}), its output above")
  else()
    message(STATUS "mlp --optimizer ${optimizer}: ok\n${output}")
  endif()
endforeach()
