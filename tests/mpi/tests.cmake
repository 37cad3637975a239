# Rank counts per MPI suite (rt_mpi_test is defined in tests/CMakeLists.txt). At most 4 ranks per test, except the one long-ring case (8).
rt_mpi_test(comm 2)
rt_mpi_test(comm 3)
rt_mpi_test(comm 4)
rt_mpi_test(ring_attention 4)
rt_mpi_test(ring_attention_docs 4)  # the ring and the gather scheme of packed documents
rt_mpi_test(ring_gather_work_list 4)  # the gather scheme's backward over the work list (RT_ATTN_WORK_LIST=1)
rt_mpi_test(ring_attention 8 --gtest_filter=RingAttentionLongRing.*)  # cp up to 8 (oversubscribed on CI)
rt_mpi_test(ring_attention_fp8 4)  # fp8.attention's backward on the ring against the one-rank FP8 call
# fp8.attention_kv: e4m3 (K/V as E4M3 codes on the ring): ring against one rank, the rounding's size, the bytes.
rt_mpi_test(ring_kv_fp8_wire 2)
rt_mpi_test(ring_kv_fp8_wire 4)
rt_mpi_test(tensor_parallel 2)

# Fault handling: the launcher test starts `mpirun -np 2 rt_fault_victim` itself.
add_executable(rt_fault_victim ${CMAKE_CURRENT_SOURCE_DIR}/mpi/fault_victim.cpp)
target_link_libraries(rt_fault_victim PRIVATE rt_parallel)
target_compile_definitions(test_mpi_fault PRIVATE RT_FAULT_VICTIM="$<TARGET_FILE:rt_fault_victim>"
                           MPIEXEC_PATH="${MPIEXEC_EXECUTABLE}")
add_dependencies(test_mpi_fault rt_fault_victim)
rt_mpi_test(fault 1)

# The whole model on every (dp, cp, tp) grid of issue 3 with <= 4 ranks, against one rank.
rt_mpi_test(model_grid 4)
# All-to-all and the hybrid ring x all-to-all (parallel.cp_a2a) against one rank; cp 8 with 8 ranks (oversubscribed).
rt_mpi_test(a2a_grid 4)
rt_mpi_test(a2a_grid 8 --gtest_filter=*cp8*)
# The head exchange pipelined by head groups equals the blocking one bit for bit; its exposed time is reported.
rt_mpi_test(a2a_overlap 4)
# Ring attention timing: compute vs exposed communication, with a late neighbour.
rt_mpi_test(ring_timing 2)
# The real binary through launch/train.sh: bad config refused up front, resume on a different grid.
add_dependencies(test_mpi_train_launch ringtrain)
rt_mpi_test(train_launch 1)
# The dK/dV accumulator as bf16 on the wire: the error it adds, for cp = 4 and cp = 2.
rt_mpi_test(ring_dkv_wire 4)

# GPU suites (labels mpi;gpu; they skip without a CUDA device). Several ranks share the one GPU through the
# mpi communicator (pinned host staging); NCCL with a world of one rank, and its refusal of a shared GPU.
rt_mpi_test(gpu_nccl 1)
rt_mpi_test(gpu_nccl 2)
rt_mpi_test(gpu_ring_attention 4)
rt_mpi_test(gpu_ring_attention 8 --gtest_filter=*zigzag_causal_d128*)  # a ring of 8 on one GPU
rt_mpi_test(gpu_model_grid 4)
# Packed documents on a ring of GPU ranks, the ring and the gather scheme (parallel.cp_scheme), against the CPU.
rt_mpi_test(gpu_ring_gather 4)
# precision fp8 on GPU grids against one GPU rank in fp8 (issue 44).
rt_mpi_test(gpu_fp8_grid 4)
# fp8.attention_kv: e4m3 on a ring of GPU ranks: against one GPU rank, against bf16 K/V, the bytes.
rt_mpi_test(gpu_ring_kv_fp8_wire 4)
# The gather forward's ready flags (issue 46): flags on equal RT_ATTN_READY_FLAGS=0 bit for bit, cp 2 and 4.
rt_mpi_test(gpu_ring_gather_flags 4)
set_tests_properties(mpi_gpu_nccl_np1 mpi_gpu_nccl_np2 mpi_gpu_ring_attention_np4 mpi_gpu_ring_attention_np8
                     mpi_gpu_model_grid_np4 mpi_gpu_ring_gather_np4 mpi_gpu_fp8_grid_np4
                     mpi_gpu_ring_gather_flags_np4 mpi_gpu_ring_kv_fp8_wire_np4 PROPERTIES LABELS "mpi;gpu")
# ZeRO stages 1-3 against stage 0 on (1,2,1), (1,4,1), (2,2,1), (1,2,2).
rt_mpi_test(zero 4)
# Checkpoints written range by range: zero 3 on 4 ranks <-> zero 0 on 1 rank, both ways.
rt_mpi_test(zero_checkpoint 4)
# ZeRO 3 vs 0 and activation offload on the GPU (ranks share one GPU through the mpi communicator).
rt_mpi_test(gpu_zero 2)
rt_mpi_test(gpu_zero 4)
# These compare the GPU's used memory (every process on it) with the plans: another test's allocations on the same
# GPU under `ctest -j` would count as theirs, so they run alone.
set_tests_properties(mpi_gpu_zero_np2 mpi_gpu_zero_np4 PROPERTIES LABELS "mpi;gpu" RUN_SERIAL TRUE)
# Runs that go wrong (issue 17), each through the real binary and launch/train.sh: run-directory ownership,
# lineages and metrics de-duplication; divergence, signals with a slow save, eval against the checkpoint's
# model, bad paths, a stopped rank (the MPI watchdog), errors printed once.
add_dependencies(test_mpi_run_dirs ringtrain)
rt_mpi_test(run_dirs 1)
add_dependencies(test_mpi_run_failures ringtrain)
rt_mpi_test(run_failures 1)
# Each of the two launches 2-rank jobs (TwoRunsIntoOneRunDir holds two at once): they count as 2 processors, so
# that a 2-core CI machine runs nothing else beside them.
set_tests_properties(mpi_run_dirs_np1 mpi_run_failures_np1 PROPERTIES PROCESSORS 2)
# The ring's bytes per layer against the full ring's (start-up line and metrics.jsonl), 2-rank jobs.
add_dependencies(test_mpi_train_ring_bytes ringtrain)
rt_mpi_test(train_ring_bytes 1)
set_tests_properties(mpi_train_ring_bytes_np1 PROPERTIES PROCESSORS 2)
# The exit-code table (framework/base/run_errors.h), each class of failure through the real binary and mpirun.
add_dependencies(test_mpi_exit_codes ringtrain)
rt_mpi_test(exit_codes 1)
set_tests_properties(mpi_exit_codes_np1 PROPERTIES PROCESSORS 2)
# `ringtrain plan`'s memory limits: CPU ranks share the host, the options are obeyed, the device is named.
add_dependencies(test_mpi_plan_limits ringtrain)
rt_mpi_test(plan_limits 1)
# `ringtrain eval --task loss-by-position` on cp 2 (zigzag, striped, balanced with documents), tp 2, cp_a2a 2, dp 2.
rt_mpi_test(eval_tasks 2)
# parallel.cp_a2a: auto through the real binary: the pick is printed, saved as an integer, and trains like one rank.
add_dependencies(test_mpi_train_a2a_auto ringtrain)
rt_mpi_test(train_a2a_auto 1)
set_tests_properties(mpi_train_a2a_auto_np1 PROPERTIES PROCESSORS 2)
# Generation's prefill (the blocks only, forward-only model): the first decode logits equal the training forward's
# last-position logits, one pass and chunked, on one rank and on a cp=2 zigzag ring.
rt_mpi_test(prefill 1)
rt_mpi_test(prefill 2)
# train.precision: fp8 on CPU ranks: the amax reductions bit for bit, every grid against one rank per recipe, fp8
# against f32, and a resume bit for bit (tests/mpi/test_fp8_grids.cpp).
rt_mpi_test(fp8_grids 4)
# fp8.zero3_gather: fp8 (the ZeRO-3 weight all-gather in E4M3) against the bf16 gather on CPU-rank grids
# (tests/mpi/test_fp8_zero_gather.cpp).
rt_mpi_test(fp8_zero_gather 4)
# train.precision: fp8 through the real binary on 2 CPU ranks: bad input is exit 2 naming the layer, dimension and fix;
# a bf16 checkpoint continues under fp8 and back; the start-up line and metrics.jsonl state the precision.
add_dependencies(test_mpi_fp8_train ringtrain)
rt_mpi_test(fp8_train 1)
set_tests_properties(mpi_fp8_train_np1 PROPERTIES PROCESSORS 2)
