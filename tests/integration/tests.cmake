# Integration tests (included by tests/CMakeLists.txt). Each part appends its own lines.

# Scaling-study driver: launch/sweep.sh on CPU ranks.
include(${CMAKE_CURRENT_LIST_DIR}/sweep.cmake)
