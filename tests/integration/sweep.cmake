# Scaling-study driver (launch/sweep.sh), on CPU ranks. Included from tests/integration/tests.cmake.
# Debian's python3-yaml and python3-matplotlib live under /usr/bin/python3: prefer it to another python3 on PATH.
find_program(RT_SYSTEM_PYTHON3 python3 PATHS /usr/bin NO_DEFAULT_PATH)
if(NOT RT_SYSTEM_PYTHON3)
  find_program(RT_SYSTEM_PYTHON3 python3)
endif()
if(RT_SYSTEM_PYTHON3)
  set(RT_SWEEP_DIR ${PROJECT_SOURCE_DIR}/launch/sweep)
  # The driver's own logic (sweep file, expansion, metrics summary, scaling efficiency): no ringtrain needed.
  add_test(NAME integration_sweep_unit
           COMMAND ${RT_SYSTEM_PYTHON3} -m unittest discover -s ${RT_SWEEP_DIR} -p test_sweep_unit.py)
  set_tests_properties(integration_sweep_unit PROPERTIES LABELS integration TIMEOUT 60)
  # configs/sweeps/tiny-cpu.yaml end to end (2 ranks per point), resume, and failed points.
  add_test(NAME integration_sweep_cpu
           COMMAND ${RT_SYSTEM_PYTHON3} ${RT_SWEEP_DIR}/test_sweep_cpu.py --build-dir ${CMAKE_BINARY_DIR}
                   --work-dir ${CMAKE_CURRENT_BINARY_DIR}/sweep_cpu_test)
  set_tests_properties(integration_sweep_cpu PROPERTIES LABELS integration TIMEOUT 600 PROCESSORS 2
                       ENVIRONMENT "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1;OMPI_MCA_rmaps_base_oversubscribe=1")
else()
  message(WARNING "python3 not found: the sweep tests (launch/sweep.sh) are not registered")
endif()
