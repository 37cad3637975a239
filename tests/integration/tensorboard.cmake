# TensorBoard event files read back with the tensorboard package's reader and compared with metrics.jsonl
# (tests/integration/tensorboard.sh): 2 CPU ranks, a resumed run, the eval tasks. Skips without protobuf or the
# package. Included from tests/integration/tests.cmake; RT_SYSTEM_PYTHON3 comes from sweep.cmake.
add_test(NAME integration_tensorboard
         COMMAND ${CMAKE_CURRENT_LIST_DIR}/tensorboard.sh ${CMAKE_BINARY_DIR} ${CMAKE_CURRENT_BINARY_DIR}/tensorboard_run
                 ${RT_SYSTEM_PYTHON3})
set_tests_properties(integration_tensorboard PROPERTIES LABELS integration TIMEOUT 300 PROCESSORS 2 SKIP_RETURN_CODE 77
                     ENVIRONMENT "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1;OMPI_MCA_rmaps_base_oversubscribe=1")
