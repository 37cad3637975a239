# configs/tiny.yaml trains on the GPU to the CPU's loss target (label gpu; skipped without a device).
# Included from tests/integration/tests.cmake.
add_test(NAME integration_tiny_gpu
         COMMAND ${CMAKE_CURRENT_LIST_DIR}/tiny_gpu.sh ${CMAKE_BINARY_DIR} ${CMAKE_CURRENT_BINARY_DIR}/tiny_gpu_run)
set_tests_properties(integration_tiny_gpu PROPERTIES LABELS "integration;gpu" TIMEOUT 300 PROCESSORS 2
                     SKIP_RETURN_CODE 77
                     ENVIRONMENT "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1")
