# Hugging Face import/export, init_from and uint32 shards (tests/hf/test_hf_cpu.py): CPU, NumPy only.
# The python3 that has NumPy is used (PATH's first, then the system one); CI installs python3-numpy.
set(RT_HF_PYTHON "")
foreach(candidate python3 /usr/bin/python3)
  find_program(rt_hf_py_${candidate} NAMES ${candidate} NO_CACHE)
  if(rt_hf_py_${candidate} AND NOT RT_HF_PYTHON)
    execute_process(COMMAND ${rt_hf_py_${candidate}} -c "import numpy" RESULT_VARIABLE rt_hf_np OUTPUT_QUIET ERROR_QUIET)
    if(rt_hf_np EQUAL 0)
      set(RT_HF_PYTHON ${rt_hf_py_${candidate}})
    endif()
  endif()
endforeach()
if(NOT RT_HF_PYTHON)
  set(RT_HF_PYTHON python3)  # the tests then fail saying that NumPy is missing
endif()
foreach(case forward roundtrip init_from uint32 refusals)
  add_test(NAME hf_${case}
           COMMAND ${RT_HF_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/test_hf_cpu.py --ringtrain $<TARGET_FILE:ringtrain>
                   --mpirun ${MPIEXEC_EXECUTABLE} ${case})
  set_tests_properties(hf_${case} PROPERTIES LABELS "integration;hf" ENVIRONMENT "${RT_MPI_ENV}" TIMEOUT 600)
endforeach()
set_tests_properties(hf_init_from PROPERTIES PROCESSORS 2)

# import-hf / export-hf / eval --dump-logits on bad --out paths and options, a full disk (RLIMIT_FSIZE) and models
# training cannot use (issue 31, rows 4, 6, 8, 10): exit 2 for refusals, nothing half-written or left behind.
foreach(case out_paths disk_full bad_models)
  add_test(NAME hf_failures_${case}
           COMMAND ${RT_HF_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/test_hf_failures.py --ringtrain $<TARGET_FILE:ringtrain>
                   ${case})
  set_tests_properties(hf_failures_${case} PROPERTIES LABELS "integration;hf" ENVIRONMENT "${RT_MPI_ENV}" TIMEOUT 300)
endforeach()

# launch/prepare_data.py (needs the `tokenizers` package: launch/install-deps.sh --prepare-data; skips without it).
add_test(NAME hf_prepare_data
         COMMAND ${RT_HF_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/test_prepare_data.py --ringtrain $<TARGET_FILE:ringtrain>)
set_tests_properties(hf_prepare_data PROPERTIES LABELS "integration;hf" SKIP_RETURN_CODE 77 TIMEOUT 300)

# launch/prepare_data.py on bad inputs and options (issue 31, rows 2, 5, 12): exit 2, one line, no hang, nothing
# half-written. A stand-in `tokenizers` module comes with the test, so it runs without the package.
add_test(NAME hf_prepare_data_errors
         COMMAND ${RT_HF_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/test_prepare_data_errors.py --python ${RT_HF_PYTHON})
set_tests_properties(hf_prepare_data_errors PROPERTIES LABELS "unit;hf" TIMEOUT 300)

# ringtrain generate (tests/hf/test_generate.py): greedy ids against a NumPy full re-forward of the exported fixture,
# every grid against cp 1 (mpirun), prompt-extension consistency and seeded sampling, bad prompts, the chunked
# prefill against the one-pass prefill on every grid. The transformers case runs where torch and transformers import
# (exit 77 = skipped otherwise).
foreach(case reference grids consistency refusals plan chunks transformers)
  add_test(NAME hf_generate_${case}
           COMMAND ${RT_HF_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/test_generate.py --ringtrain $<TARGET_FILE:ringtrain>
                   --mpirun ${MPIEXEC_EXECUTABLE} ${case})
  set_tests_properties(hf_generate_${case} PROPERTIES LABELS "integration;hf" ENVIRONMENT "${RT_MPI_ENV}"
                       SKIP_RETURN_CODE 77 TIMEOUT 900)
endforeach()
set_tests_properties(hf_generate_grids hf_generate_plan hf_generate_chunks PROPERTIES PROCESSORS 2)

# bench/generate_side_by_side.py --self-test: the end-to-end generate benchmark's tiny CPU run (the synthetic model
# through import-hf / export-hf, `ringtrain generate` rows, the table and JSONL) and its refusal without torch.
# Seconds; NumPy only (transformers' rows run on the CPU where it imports, else are marked skipped).
add_test(NAME bench_generate_side_by_side
         COMMAND ${RT_HF_PYTHON} ${CMAKE_SOURCE_DIR}/bench/generate_side_by_side.py --ringtrain $<TARGET_FILE:ringtrain>
                 --self-test --cuda-graph both)
set_tests_properties(bench_generate_side_by_side PROPERTIES LABELS "integration;hf" ENVIRONMENT "${RT_MPI_ENV}"
                     TIMEOUT 300)
