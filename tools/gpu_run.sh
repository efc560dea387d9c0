#!/usr/bin/env bash
# One call on the GPU machine: import time, the GPU suite (8 workers; the tests marked
# device_memory alone, after it), memcheck over $MEMFILES (6 workers, limit $MEMT s), then
# benchmarks/bench_<name>.py for each name in $BENCHES. Needs .whl/
# (../shared/hooks/gpu-wheels.sh) carried; writes $OUT/r.tgz.
# MEMK is a pytest -k expression for the memcheck (the 20-million-lane private-table case
# takes minutes under the sanitizer: MEMK="not 20000003").
# Example: MEMFILES="tests/test_ints_gpu.py" BENCHES="scatter kan" bash tools/gpu_run.sh
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
R=/tmp/r; mkdir -p $R
T0=$(date +%s)
stamp() { echo "=== [$(( $(date +%s) - T0 ))s] $*"; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
stamp import
for i in 1 2 3 4 5; do python3 -c "import time; t=time.perf_counter(); import eagle, eagle.plan, hawk; print(f'import {time.perf_counter()-t:.3f} s')"; done
stamp suite
timeout 260 python3 -m pytest -q -m "gpu and not device_memory" -n 8 -p no:cacheprovider tests 2>&1 | tee $R/suite.log | tail -45
stamp device_memory
timeout 90 python3 -m pytest -q -m device_memory -p no:cacheprovider tests 2>&1 | tail -3
stamp memcheck
# torch test files crash the sanitizer under pytest-xdist: give those -n 0 via MEMWORKERS
timeout ${MEMT:-170} /usr/local/cuda/bin/compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 1 python3 -m pytest -q -m "gpu and not device_memory" -n ${MEMWORKERS:-6} -p no:cacheprovider ${MEMK:+-k "$MEMK"} ${MEMFILES:-tests/test_ints_gpu.py} 2>&1 | tee $R/memcheck.log | grep -E "passed|failed|ERROR SUMMARY|Invalid|error" | tail -12
for b in ${BENCHES:-}; do
  stamp "$b"; timeout ${BENCHT:-150} python3 benchmarks/bench_$b.py $R/$b.json ${BENCHARGS:-} 2>&1 | tail -40
done
stamp done
tar -czf $OUT/r.tgz -C $R .
