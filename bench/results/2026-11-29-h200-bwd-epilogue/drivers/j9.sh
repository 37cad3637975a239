#!/usr/bin/env bash
# Session driver (not project code): re-run the attention GPU tests after the test refactor.
R=$OUT/r; mkdir -p $R
S=$SECONDS
rm -rf /tmp/f && mkdir -p /tmp/f && tar -xf peers/clean.tar -C /tmp/f && cd /tmp/f
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release > $R/cmake.log 2>&1 && \
  cmake --build build-gpu -j16 --target test_gpu > $R/build.log 2>&1; echo "build rc $? at $((SECONDS-S)) s"
timeout 150 build-gpu/tests/test_gpu --gtest_filter="*Attention*" > $R/test_attention.log 2>&1; echo "tests rc $? at $((SECONDS-S)) s"; tail -1 $R/test_attention.log; grep "FAILED\|Failure" $R/test_attention.log | head
