# launch/ scripts without a build (included by tests/CMakeLists.txt).
# launch/train.sh and repeated signals (issue 31, row 3): a stand-in mpirun and stand-in ranks; nothing of the job
# may outlive train.sh.
add_test(NAME launch_train_signals COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_LIST_DIR}/test_train_signals.py)
set_tests_properties(launch_train_signals PROPERTIES LABELS unit SKIP_RETURN_CODE 77 TIMEOUT 120)
