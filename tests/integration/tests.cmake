# Integration tests (included by tests/CMakeLists.txt). Each part appends its own lines.

# Scaling-study driver: launch/sweep.sh on CPU ranks.
include(${CMAKE_CURRENT_LIST_DIR}/sweep.cmake)

# The README main command: configs/tiny.yaml as a cp=2 zigzag job on 2 ranks (time and loss targets).
include(${CMAKE_CURRENT_LIST_DIR}/tiny_main.cmake)

# configs/tiny.yaml on the GPU (2 ranks sharing it), same loss target (label gpu).
include(${CMAKE_CURRENT_LIST_DIR}/tiny_gpu.cmake)

# Config fuzz: mutations of configs/tiny.yaml through `ringtrain plan` (no crash, no hang, every error names its key).
include(${CMAKE_CURRENT_LIST_DIR}/config_fuzz.cmake)

# Teacher-forced needles on the copy task's trained model and loss by position, through the binary (2 ranks).
include(${CMAKE_CURRENT_LIST_DIR}/needles.cmake)

# RULER-style cases answered by greedy generation on the copy task's trained and untrained models (2 ranks).
include(${CMAKE_CURRENT_LIST_DIR}/ruler.cmake)

# Packed stdlib documents under each parallel.cp_scheme (bench/doc_cp_e2e.sh), cp=2 on 2 CPU ranks: runs exit 0,
# the scheme each step ran, first-step losses equal across schemes.
include(${CMAKE_CURRENT_LIST_DIR}/doc_cp_e2e.cmake)

# TensorBoard event files (log.tensorboard) equal metrics.jsonl and the eval tasks' .jsonl, including a resumed run.
include(${CMAKE_CURRENT_LIST_DIR}/tensorboard.cmake)

# A hostile user's options, outputs and a shard cut mid-run, through the binary on 1 and 2 ranks (issue 43).
include(${CMAKE_CURRENT_LIST_DIR}/hostile_user.cmake)

# bench/fp8_study.sh (issue 44's one-GPU measurements in one command) in DRY_RUN=1: every part prints its commands and
# every config, script and program they name exists.
add_test(NAME integration_fp8_study_dry_run
         COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/fp8_study_dry_run.sh ${CMAKE_BINARY_DIR})
set_tests_properties(integration_fp8_study_dry_run PROPERTIES LABELS integration TIMEOUT 60)

# bench/multi_gpu.sh --dry-run (the 8-GPU node day, MULTI_GPU_GPUS=8) with this build: every part prints its command,
# and every script, config and program it names exists (a program: its source and this build's target).
if(RINGTRAIN_HAVE_CUDA)
  set(rt_multi_gpu_dry_run_cuda ON)
else()
  set(rt_multi_gpu_dry_run_cuda OFF)
endif()
add_test(NAME integration_multi_gpu_dry_run
         COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/multi_gpu_dry_run.sh ${CMAKE_BINARY_DIR} ${rt_multi_gpu_dry_run_cuda})
set_tests_properties(integration_multi_gpu_dry_run PROPERTIES LABELS integration TIMEOUT 60)
