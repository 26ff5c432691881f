#!/usr/bin/env bash
# GPU call at HEAD: the [gpu] and [torch] tests, the Python tests, then AdamW's storage figures.
set -u
rm -rf build-run && tar -xJf build-pack/head.tar.xz
nvidia-smi --query-gpu=name,driver_version --format=csv | tee $OUT/gpu_name.txt
git log -1 --format=%h > $OUT/commit.txt 2>/dev/null
( time OUT=$OUT timeout 330 scripts/gpu_session.sh tests ) > $OUT/tests.log 2>&1; echo "rc=$?" >> $OUT/tests.log
tail -12 $OUT/tests.log
echo "elapsed $SECONDS"
( time OUT=$OUT timeout $((585 - SECONDS)) scripts/gpu_session.sh python ) > $OUT/python.log 2>&1; echo "rc=$?" >> $OUT/python.log
tail -15 $OUT/python.log
echo "elapsed $SECONDS"
