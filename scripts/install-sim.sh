#!/usr/bin/env bash
# Install the SimGrid network simulator that `hpccoll simulate` replays schedules in, into the
# active Python environment (run it inside the venv that has hpccoll; `pip install '.[sim]'`
# is then satisfied).  Idempotent: it does nothing when `import simgrid` works.
#
# SimGrid 4.1 ships no wheel for Linux: this builds its source release from PyPI with Boost's
# headers, cmake and pybind11 < 3 (as root on Debian/Ubuntu it apt-installs what is missing).
# SimGrid's setup.py passes CMake a fixed list of options; the copy built here adds three that
# leave out what hpccoll does not use and what costs most of the build time: the model checker,
# sthread and link-time optimisation (the simulation kernel keeps -O3).
set -euo pipefail
python=${PYTHON:-python}
if "$python" -m pip show simgrid 2>/dev/null | grep -qx 'Version: 4.1'; then
    echo "SimGrid 4.1 is already installed"
    exit 0
fi
if [ ! -e /usr/include/boost/version.hpp ] || ! command -v cmake >/dev/null || ! command -v g++ >/dev/null; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libboost-dev cmake g++ >/dev/null
    else
        echo "install-sim.sh: Boost's headers, cmake or g++ are missing; install them" \
             "(Debian: apt-get install libboost-dev cmake g++)" >&2
        exit 1
    fi
fi
"$python" -m pip install -q "pybind11<3" setuptools wheel
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$python" -m pip download -q --no-deps --no-binary :all: -d "$work" simgrid==4.1
tar -xzf "$work"/simgrid-4.1.tar.gz -C "$work"
options="'-Denable_model-checking=OFF', '-Denable_sthread=OFF', '-Denable_lto=OFF',"
sed -i "s/'-Dminimal-bindings=ON',/& $options/" "$work/simgrid-4.1/setup.py"
grep -q "enable_lto=OFF" "$work/simgrid-4.1/setup.py" || {
    echo "install-sim.sh: SimGrid's setup.py has changed; cannot add the build options" >&2
    exit 1
}
"$python" -m pip install -q --no-build-isolation "$work/simgrid-4.1"
if "$python" -c 'import hpccoll.sim.engine' 2>/dev/null; then
    "$python" -c 'import hpccoll.sim.engine as e; print("SimGrid", e.version(), "is ready")'
else
    echo "SimGrid 4.1 is installed"
fi
