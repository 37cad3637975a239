# RULER-style checks through the real binary (tests/integration/ruler.sh): the copy task's trained model scores 100
# and an untrained one near 0 on copy-task cases; the same tokens on the ring, the all-to-all, the hybrid (4 ranks),
# tp, dp and one rank; refusals exit 2. Included from tests/integration/tests.cmake; RT_SYSTEM_PYTHON3 comes from
# sweep.cmake (Debian's python3 with matplotlib).
add_test(NAME integration_ruler
         COMMAND ${CMAKE_CURRENT_LIST_DIR}/ruler.sh ${CMAKE_BINARY_DIR} ${CMAKE_CURRENT_BINARY_DIR}/ruler_run
                 ${RT_SYSTEM_PYTHON3})
set_tests_properties(integration_ruler PROPERTIES LABELS integration TIMEOUT 180 PROCESSORS 2
                     ENVIRONMENT "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1;OMPI_MCA_rmaps_base_oversubscribe=1")
