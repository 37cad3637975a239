# The README main command's job (configs/tiny.yaml: cp=2, zigzag, 2 ranks) meets its time and loss targets.
# Included from tests/integration/tests.cmake.
add_test(NAME integration_tiny_main
         COMMAND ${CMAKE_CURRENT_LIST_DIR}/tiny_main.sh ${CMAKE_BINARY_DIR} ${CMAKE_CURRENT_BINARY_DIR}/tiny_main_run)
set_tests_properties(integration_tiny_main PROPERTIES LABELS integration TIMEOUT 300 PROCESSORS 2
                     ENVIRONMENT "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1")
