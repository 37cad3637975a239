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
