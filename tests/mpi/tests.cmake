# Rank counts per MPI suite (rt_mpi_test is defined in tests/CMakeLists.txt). At most 4 ranks per test.
rt_mpi_test(comm 2)
rt_mpi_test(comm 3)
rt_mpi_test(comm 4)
rt_mpi_test(ring_attention 4)
rt_mpi_test(tensor_parallel 2)
