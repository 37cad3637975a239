# A hostile user's inputs through the real binary on 1 and 2 CPU ranks (issue 43): option ranges of generate and
# plan, the --out rule, the output contracts and exit codes (tests/integration/hostile_cli.py), and a training
# shard cut under a running job (tests/integration/shard_changed.py). RT_SYSTEM_PYTHON3: sweep.cmake.
foreach(case limits outputs contracts)
  add_test(NAME integration_hostile_${case}
           COMMAND ${RT_SYSTEM_PYTHON3} ${CMAKE_CURRENT_LIST_DIR}/hostile_cli.py --ringtrain $<TARGET_FILE:ringtrain>
                   --mpirun ${MPIEXEC_EXECUTABLE} --source-dir ${PROJECT_SOURCE_DIR} ${case})
  set_tests_properties(integration_hostile_${case} PROPERTIES LABELS integration TIMEOUT 300 PROCESSORS 2
                       ENVIRONMENT "${RT_MPI_ENV}")
endforeach()
add_test(NAME integration_shard_changed
         COMMAND ${RT_SYSTEM_PYTHON3} ${CMAKE_CURRENT_LIST_DIR}/shard_changed.py --ringtrain $<TARGET_FILE:ringtrain>
                 --mpirun ${MPIEXEC_EXECUTABLE} --source-dir ${PROJECT_SOURCE_DIR})
set_tests_properties(integration_shard_changed PROPERTIES LABELS integration TIMEOUT 300 PROCESSORS 2
                     ENVIRONMENT "${RT_MPI_ENV}")
