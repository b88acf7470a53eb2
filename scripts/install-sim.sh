#!/usr/bin/env bash
# Install the SimGrid network simulator that `hpccoll simulate` replays schedules in, into the
# active Python environment (run it inside the venv that has hpccoll; `pip install '.[sim]'`
# is then satisfied), and build the replay's compiled controller (hpccoll/sim/controller.cpp)
# against it, as the module hpccoll_sim_controller beside libsimgrid.so.  Idempotent: it does
# nothing when both are there; with SimGrid there and the controller not (or older than its
# source), it builds only the controller (under a minute).
#
# SimGrid 4.1 ships no wheel for Linux: this builds its source release from PyPI with Boost's
# headers, cmake and pybind11 < 3 (as root on Debian/Ubuntu it apt-installs what is missing).
# SimGrid's setup.py passes CMake a fixed list of options; the copy built here adds three that
# leave out what hpccoll does not use and what costs most of the build time: the model checker,
# sthread and link-time optimisation (the simulation kernel keeps -O3).  The controller needs
# SimGrid's headers, which pip does not install: they are taken from the same source release
# (its two configured headers, simgrid/config.h and simgrid/version.h, written here: no public
# header depends on their values).
set -euo pipefail
python=${PYTHON:-python}
source_dir=$(cd "$(dirname "$0")/.." && pwd)
controller_source="$source_dir/hpccoll/sim/controller.cpp"
simgrid_there() {      # pip's output read whole: grep -q stopping early fails pip (pipefail)
    local shown
    shown=$("$python" -m pip show simgrid 2>/dev/null) && grep -qx 'Version: 4.1' <<<"$shown"
}
controller_built() {
    local built
    built=$("$python" -c 'import hpccoll.sim.engine as e; print(e.controller().__file__)' 2>/dev/null) &&
        [ "$built" -nt "$controller_source" ]
}
if simgrid_there && controller_built; then
    echo "SimGrid 4.1 and hpccoll's compiled controller are already installed"
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
if ! simgrid_there; then
    options="'-Denable_model-checking=OFF', '-Denable_sthread=OFF', '-Denable_lto=OFF',"
    sed -i "s/'-Dminimal-bindings=ON',/& $options/" "$work/simgrid-4.1/setup.py"
    grep -q "enable_lto=OFF" "$work/simgrid-4.1/setup.py" || {
        echo "install-sim.sh: SimGrid's setup.py has changed; cannot add the build options" >&2
        exit 1
    }
    "$python" -m pip install -q --no-build-isolation "$work/simgrid-4.1"
fi

# the controller: SimGrid's headers from the source release, its two configured ones written
site=$("$python" -m pip show simgrid | sed -n 's/^Location: //p')
[ -e "$site/libsimgrid.so.4.1" ] || { echo "install-sim.sh: no libsimgrid.so.4.1 in $site" >&2; exit 1; }
headers="$work/simgrid-4.1/include"
sed -e 's/#cmakedefine01 \([A-Z0-9_]*\)/#define \1 0/' -e '/#cmakedefine /d' \
    "$headers/simgrid/config.h.in" > "$headers/simgrid/config.h"
sed -e 's/@GIT_VERSION@/v4.1/' -e 's/@SIMGRID_VERSION_MAJOR@/4/' -e 's/@SIMGRID_VERSION_MINOR@/1/' \
    -e 's/@SIMGRID_VERSION_PATCH@/0/' -e 's/@SIMGRID_VERSION_STRING@/SimGrid version 4.1/' \
    -e "s|@CMAKE_INSTALL_PREFIX@|$site|" "$headers/simgrid/version.h.in" > "$headers/simgrid/version.h"
if grep -q '@[A-Za-z_]*@\|#cmakedefine' "$headers/simgrid/config.h" "$headers/simgrid/version.h"; then
    echo "install-sim.sh: SimGrid's configured headers have changed; cannot write them" >&2
    exit 1
fi
suffix=$("$python" -c 'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX"))')
# shellcheck disable=SC2046  # the include flags are several words
g++ -O2 -std=c++17 -shared -fPIC -fvisibility=hidden $("$python" -m pybind11 --includes) \
    -I"$headers" "$controller_source" -o "$site/hpccoll_sim_controller$suffix" \
    "$site/libsimgrid.so.4.1" -Wl,-rpath,'$ORIGIN'
if "$python" -c 'import hpccoll.sim.engine' 2>/dev/null; then
    "$python" -c 'import hpccoll.sim.engine as e; e.controller(); print("SimGrid", e.version(), "and the compiled controller are ready")'
else
    "$python" -c 'import ctypes, sys; ctypes.CDLL(sys.argv[1], mode=ctypes.RTLD_GLOBAL); import hpccoll_sim_controller' "$site/libsimgrid.so.4.1"
    echo "SimGrid 4.1 and the compiled controller are installed"
fi
