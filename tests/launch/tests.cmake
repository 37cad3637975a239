# launch/ scripts without a build (included by tests/CMakeLists.txt).
# launch/train.sh and repeated signals (issue 31, row 3): a stand-in mpirun and stand-in ranks; nothing of the job
# may outlive train.sh.
add_test(NAME launch_train_signals COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_LIST_DIR}/test_train_signals.py)
set_tests_properties(launch_train_signals PROPERTIES LABELS unit SKIP_RETURN_CODE 77 TIMEOUT 120)
# launch/build.sh re-configures when an option differs from the cache (issue 30): a stand-in cmake records calls.
add_test(NAME launch_build_reconfigure COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_LIST_DIR}/test_build_reconfigure.py)
set_tests_properties(launch_build_reconfigure PROPERTIES LABELS unit TIMEOUT 120)
# README command 1 (launch/quickstart.sh) builds only the trainer, command 2 (launch/test.sh) everything (issue 45).
add_test(NAME launch_quickstart_build COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_LIST_DIR}/test_quickstart_build.py)
set_tests_properties(launch_quickstart_build PROPERTIES LABELS unit TIMEOUT 120)
# launch/make_ruler.py (issue 45): deterministic per seed, answers where each task puts them, exit 2 on user errors.
add_test(NAME launch_make_ruler COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_LIST_DIR}/test_make_ruler.py)
set_tests_properties(launch_make_ruler PROPERTIES LABELS unit TIMEOUT 300)
# launch/make_needles.py and launch/generate.py on bad options (issue 43, rows 6, 7): exit 2 with one
# `<script>: error:` line, no traceback; generate.py --np N oversubscribes as train.sh does. Stand-ins, no build.
add_test(NAME launch_script_errors COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_LIST_DIR}/test_launch_errors.py)
set_tests_properties(launch_script_errors PROPERTIES LABELS unit TIMEOUT 120)
