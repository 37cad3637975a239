# bench/doc_cp_e2e.sh (packed documents per parallel.cp_scheme) on CPU ranks, through tests/integration/doc_cp_e2e.sh.
# Included from tests/integration/tests.cmake; RT_SYSTEM_PYTHON3 comes from sweep.cmake.
add_test(NAME integration_doc_cp_e2e
         COMMAND ${CMAKE_CURRENT_LIST_DIR}/doc_cp_e2e.sh ${CMAKE_BINARY_DIR} ${CMAKE_CURRENT_BINARY_DIR}/doc_cp_e2e_run
                 ${RT_SYSTEM_PYTHON3})
set_tests_properties(integration_doc_cp_e2e PROPERTIES LABELS integration TIMEOUT 300 PROCESSORS 2
                     ENVIRONMENT
                     "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1;OMPI_MCA_rmaps_base_oversubscribe=1")
