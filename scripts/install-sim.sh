#!/usr/bin/env bash
# Install the SimGrid network simulator that `hpccoll simulate` replays schedules in, into the
# active Python environment (run it inside the venv that has hpccoll; `pip install '.[sim]'`
# then finds SimGrid already there).  Idempotent: it does nothing when `import simgrid` works.
# SimGrid 4.1 ships no wheel for Linux: pip builds it from source (about 10 minutes on 2 cores)
# with Boost's headers and pybind11 < 3.  As root on Debian/Ubuntu it installs the headers with
# apt-get; otherwise install `libboost-dev` (or your distribution's Boost headers) first.
set -euo pipefail
python=${PYTHON:-python}
if "$python" -c 'import simgrid' 2>/dev/null; then
    echo "SimGrid is already installed: $("$python" -c 'import simgrid; print(simgrid.__file__)')"
    exit 0
fi
if [ ! -e /usr/include/boost/version.hpp ] || ! command -v cmake >/dev/null; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
        apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libboost-dev cmake >/dev/null
    else
        echo "install-sim.sh: Boost's headers or cmake are missing; install them (Debian: apt-get install libboost-dev cmake)" >&2
        exit 1
    fi
fi
"$python" -m pip install -q "pybind11<3" setuptools wheel
MAKEFLAGS=${MAKEFLAGS:--j$(nproc)} "$python" -m pip install -q --no-build-isolation simgrid==4.1
"$python" -c 'import hpccoll.sim.engine as e; e.load(); print("SimGrid", e.version(), "ready")' 2>/dev/null \
    || "$python" -c 'import simgrid; print("SimGrid installed:", simgrid.__file__)'
