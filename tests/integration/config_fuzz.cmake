# A seeded config fuzz through `ringtrain plan` (tests/integration/config_fuzz.cpp): 140 mutations of
# configs/tiny.yaml, each ending with exit 0 or 2 within 20 s, every error naming its key.
add_executable(test_config_fuzz ${CMAKE_CURRENT_LIST_DIR}/config_fuzz.cpp)
target_link_libraries(test_config_fuzz PRIVATE ${RT_YAML_TARGET} GTest::gtest_main)
target_include_directories(test_config_fuzz PRIVATE ${PROJECT_SOURCE_DIR})
target_compile_definitions(test_config_fuzz PRIVATE RINGTRAIN_BINARY="$<TARGET_FILE:ringtrain>"
                           RT_SOURCE_DIR="${PROJECT_SOURCE_DIR}")
add_dependencies(test_config_fuzz ringtrain)
add_test(NAME integration_config_fuzz COMMAND test_config_fuzz)
set_tests_properties(integration_config_fuzz PROPERTIES LABELS integration TIMEOUT 180 PROCESSORS 2)

# The same for the command line (tests/integration/cli_fuzz.py, issue 43): 200 seeded cases, one option of
# generate, eval, plan, launch/make_needles.py or launch/generate.py set to a hostile value; each ends within 20 s
# with exit 0, or 2 naming the option, no traceback, no signal. About 40 s on 2 idle cores.
add_test(NAME integration_cli_fuzz
         COMMAND ${RT_SYSTEM_PYTHON3} ${CMAKE_CURRENT_LIST_DIR}/cli_fuzz.py --ringtrain $<TARGET_FILE:ringtrain>
                 --source-dir ${PROJECT_SOURCE_DIR})
set_tests_properties(integration_cli_fuzz PROPERTIES LABELS integration TIMEOUT 180 PROCESSORS 2
                     ENVIRONMENT "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1")
