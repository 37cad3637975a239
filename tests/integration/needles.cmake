# Needles and loss by position through the real binary (tests/integration/needles.sh). Included from
# tests/integration/tests.cmake; RT_SYSTEM_PYTHON3 comes from sweep.cmake (Debian's python3 with matplotlib).
add_test(NAME integration_needles
         COMMAND ${CMAKE_CURRENT_LIST_DIR}/needles.sh ${CMAKE_BINARY_DIR} ${CMAKE_CURRENT_BINARY_DIR}/needles_run
                 ${RT_SYSTEM_PYTHON3})
set_tests_properties(integration_needles PROPERTIES LABELS integration TIMEOUT 180 PROCESSORS 2
                     ENVIRONMENT "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1;OMPI_MCA_rmaps_base_oversubscribe=1")
