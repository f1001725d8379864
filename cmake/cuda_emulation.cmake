# test_kernels_cuda_emulated: the GPU tests (tests/kernels_cuda/*.cpp: every CUDA kernel and the device
# encoder/apply/gate against their CPU references, bit for bit) built with the host compiler against a CPU
# emulation of CUDA (tests/kernels_cuda/emulation/cuda_emulation.h, force-included: a fiber per CUDA
# thread, synchronous streams, host memory). Built wherever tests are, with or without nvcc, so that the
# kernels' logic is checked on every machine, CI included; the real test_kernels_cuda (cmake/cuda.cmake)
# still runs them on a GPU. CTest names start with "emulated:". x86-64 only (the fiber switch).
if(PULSE_BUILD_TESTS AND CMAKE_SYSTEM_PROCESSOR MATCHES "x86_64|AMD64")
  set(_emu ${PROJECT_SOURCE_DIR}/tests/kernels_cuda/emulation)
  file(GLOB _emu_tests CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/tests/kernels_cuda/*.cpp)
  file(GLOB _emu_sources CONFIGURE_DEPENDS ${_emu}/*.cpp)
  # The device paths of sync/ compiled again here with PULSE_CUDA=1 against the emulation; pulse_sync's
  # own objects of these files are then never pulled from its archive (same symbols, defined first).
  add_executable(test_kernels_cuda_emulated ${_emu_tests} ${_emu_sources} ${PROJECT_SOURCE_DIR}/sync/gpu_encode.cpp
                                            ${PROJECT_SOURCE_DIR}/sync/gpu_apply.cpp
                                            ${PROJECT_SOURCE_DIR}/sync/gpu_loco.cpp)
  target_include_directories(test_kernels_cuda_emulated BEFORE PRIVATE ${_emu} ${PROJECT_SOURCE_DIR})
  target_compile_definitions(test_kernels_cuda_emulated PRIVATE PULSE_CUDA=1)
  # -ffp-contract=off: the kernels' float arithmetic rounds each operation, as nvcc's __fadd_rn etc. do.
  target_compile_options(test_kernels_cuda_emulated PRIVATE -include ${_emu}/cuda_emulation.h -ffp-contract=off
                                                            -Wno-unknown-pragmas)
  target_link_libraries(test_kernels_cuda_emulated PRIVATE pulse_catch_main pulse_sync pulse_kernels
                                                           PkgConfig::XXHASH)
  pulse_discover_tests(test_kernels_cuda_emulated TEST_PREFIX "emulated:" PROPERTIES TIMEOUT 900)
endif()
