#!/usr/bin/env bash
# Builds peers/clean.tar (the working tree) and peers/tl.tar (the same with the bwd timeline patch).
set -e
cd /work/main
C=$(git stash create); C=${C:-HEAD}
git archive $C -o peers/clean.tar
rm -rf /tmp/tlsrc && mkdir -p /tmp/tlsrc && tar -xf peers/clean.tar -C /tmp/tlsrc
python3 /work/main/peers/tl_patch.py /tmp/tlsrc && (cd /tmp/tlsrc && patch -p1 -s < /work/main/peers/tl_bench.diff)
tar -cf peers/tl.tar -C /tmp/tlsrc .
echo "trees from $C"
