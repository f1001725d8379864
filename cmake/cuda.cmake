# CUDA kernels (kernels/*.cu) and the pieces that use them; included at the end of CMakeLists.txt.
#
#   PULSE_CUDA=AUTO (default)  build them when nvcc is found (CUDA_HOME, CUDA_PATH, PATH, /usr/local/cuda);
#                              otherwise say so and build the rest. A machine without a GPU or without a
#                              CUDA LibTorch still compiles and links them (the CI check); GPU tests then
#                              skip with a message.
#   PULSE_CUDA=ON              the same, but a missing nvcc is an error.
#   PULSE_CUDA=OFF             never.
#   PULSE_CUDA_ARCHITECTURES   CMAKE_CUDA_ARCHITECTURES for the kernels; default 90 = sm_90 code (H100/H200)
#                              plus compute_90 PTX (newer GPUs JIT it).
#
# Targets (when CUDA is on):
#   pulse_kernels_cuda   kernels/*.cu: BF16 cast + diff + compaction, varint-gap apply with device-side
#                        validation, PULSELoCo gate, XXH3 of device memory (torch-free, raw pointers).
#   test_kernels_cuda    tests/kernels_cuda/*.cpp: GPU vs CPU reference, bit for bit, kernels and the
#                        device-side encoder sync/gpu_encode.h (skip with a message without a GPU; the
#                        same tests also run on a CPU emulation of CUDA: cmake/cuda_emulation.cmake).
# Always:
#   pulse_kernels_bench  bench/kernels/*.cpp: `pulse bench kernels` (CPU variants; GPU kernels vs a
#                        device-to-device cudaMemcpy when built with CUDA and a GPU is present);
#   kernels_report       the same without LibTorch (bench/kernels/main.cpp).
# With CUDA, pulse_sync and pulse_kernels_bench get PULSE_CUDA=1 (private: the torch targets' flags, and
# so their shared precompiled header, stay the same) and sync/gpu_encode.cpp runs on the GPU.
set(PULSE_CUDA AUTO CACHE STRING "CUDA kernels: AUTO (when nvcc is found), ON (required) or OFF")
set_property(CACHE PULSE_CUDA PROPERTY STRINGS AUTO ON OFF)
set(PULSE_CUDA_ARCHITECTURES 90 CACHE STRING "CUDA architectures of the kernels (CMAKE_CUDA_ARCHITECTURES)")

set(PULSE_HAVE_CUDA OFF)
if(PULSE_CUDA STREQUAL "OFF")
  message(STATUS "PULSE_CUDA=OFF: the CUDA kernels (kernels/*.cu) are not built; sync/gpu_*.h refuse at run time")
else()
  if(NOT CMAKE_CUDA_COMPILER)
    find_program(PULSE_NVCC nvcc HINTS $ENV{CUDA_HOME}/bin $ENV{CUDA_PATH}/bin /usr/local/cuda/bin)
    if(PULSE_NVCC)
      set(CMAKE_CUDA_COMPILER ${PULSE_NVCC})
    endif()
  endif()
  if(CMAKE_CUDA_COMPILER)
    set(CMAKE_CUDA_ARCHITECTURES ${PULSE_CUDA_ARCHITECTURES})
    # The CUDA runtime linked statically: a binary built here runs on a GPU machine without the toolkit
    # (it needs only a driver new enough for this nvcc's runtime).
    set(CMAKE_CUDA_RUNTIME_LIBRARY Static)
    if(CCACHE_PROGRAM)
      set(CMAKE_CUDA_COMPILER_LAUNCHER ${CCACHE_PROGRAM})
    endif()
    enable_language(CUDA)
    find_package(CUDAToolkit REQUIRED)
    set(PULSE_HAVE_CUDA ON)
  elseif(PULSE_CUDA STREQUAL "ON")
    message(FATAL_ERROR "PULSE_CUDA=ON but nvcc was not found (set CUDA_HOME or CMAKE_CUDA_COMPILER)")
  else()
    message(STATUS "PULSE_CUDA=AUTO: nvcc not found, the CUDA kernels (kernels/*.cu) are not built and "
                   "their tests not registered; set CUDA_HOME or CMAKE_CUDA_COMPILER to build them")
  endif()
endif()

# Whether the LibTorch found can put tensors on a GPU (reported; the kernels do not need it).
if(TARGET torch_cuda OR TARGET c10_cuda OR TORCH_CUDA_LIBRARIES)
  set(PULSE_TORCH_CUDA ON)
else()
  set(PULSE_TORCH_CUDA OFF)
endif()
# model/cuda_graph_step.cpp captures decode steps with at::cuda::CUDAGraph when LibTorch has CUDA.
if(PULSE_TORCH_CUDA AND TARGET pulse_model)
  target_compile_definitions(pulse_model PRIVATE PULSE_TORCH_CUDA=1)
endif()

if(PULSE_HAVE_CUDA)
  file(GLOB PULSE_KERNEL_CUDA_SOURCES CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/kernels/*.cu)
  add_library(pulse_kernels_cuda STATIC ${PULSE_KERNEL_CUDA_SOURCES})
  # nvcc does not take the directory's -Wall -Wextra itself: they go to the host compiler.
  set_target_properties(pulse_kernels_cuda PROPERTIES COMPILE_OPTIONS "" CUDA_STANDARD 17
                                                      CUDA_STANDARD_REQUIRED ON POSITION_INDEPENDENT_CODE ON)
  # The host code is built with LibTorch's flags (its C++ ABI macro), as every other target.
  separate_arguments(_pulse_torch_flags UNIX_COMMAND "${TORCH_CXX_FLAGS}")
  target_compile_options(pulse_kernels_cuda PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-Wall,-Wextra>
                                                    ${_pulse_torch_flags})
  target_include_directories(pulse_kernels_cuda PUBLIC ${PROJECT_SOURCE_DIR})
  target_link_libraries(pulse_kernels_cuda PUBLIC pulse_kernels CUDA::cudart_static PkgConfig::XXHASH)
  target_compile_definitions(pulse_sync PRIVATE PULSE_CUDA=1)
  target_link_libraries(pulse_sync PRIVATE pulse_kernels_cuda)
  message(STATUS "PULSE_CUDA: CUDA kernels on (nvcc ${CMAKE_CUDA_COMPILER_VERSION}, architectures "
                 "${CMAKE_CUDA_ARCHITECTURES}); LibTorch with CUDA: ${PULSE_TORCH_CUDA}")
endif()

# `pulse bench kernels` (torch-free; the CLI command in app/ calls it), and the same as a torch-free
# executable `kernels_report` (bench/kernels/main.cpp) that bench/gpu_check.sh can carry to a GPU machine.
file(GLOB PULSE_KERNELS_BENCH_SOURCES CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/bench/kernels/*.cpp)
list(REMOVE_ITEM PULSE_KERNELS_BENCH_SOURCES ${PROJECT_SOURCE_DIR}/bench/kernels/main.cpp)
if(PULSE_KERNELS_BENCH_SOURCES)
  add_library(pulse_kernels_bench STATIC ${PULSE_KERNELS_BENCH_SOURCES})
  target_include_directories(pulse_kernels_bench PUBLIC ${PROJECT_SOURCE_DIR})
  target_link_libraries(pulse_kernels_bench PUBLIC pulse_kernels nlohmann_json::nlohmann_json PkgConfig::ZSTD)
  # The model stages' CPU part runs tiny in test_kernels (tests/kernels/test_model_stages.cpp).
  if(TARGET test_kernels)
    target_link_libraries(test_kernels PRIVATE pulse_kernels_bench)
  endif()
  if(PULSE_HAVE_CUDA)
    target_compile_definitions(pulse_kernels_bench PRIVATE PULSE_CUDA=1)
    target_link_libraries(pulse_kernels_bench PRIVATE pulse_kernels_cuda)
  endif()
  target_link_libraries(pulse_app PUBLIC pulse_kernels_bench)
  if(EXISTS ${PROJECT_SOURCE_DIR}/bench/kernels/main.cpp)
    add_executable(kernels_report ${PROJECT_SOURCE_DIR}/bench/kernels/main.cpp)
    target_link_libraries(kernels_report PRIVATE pulse_kernels_bench)
  endif()
endif()

if(PULSE_HAVE_CUDA AND PULSE_BUILD_TESTS)
  file(GLOB _cuda_tests CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/tests/kernels_cuda/*.cpp)
  if(_cuda_tests)
    add_executable(test_kernels_cuda ${_cuda_tests})
    target_link_libraries(test_kernels_cuda PRIVATE pulse_catch_main pulse_kernels_cuda pulse_kernels pulse_sync)
    pulse_discover_tests(test_kernels_cuda PROPERTIES TIMEOUT 900)
  endif()
endif()
