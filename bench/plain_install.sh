#!/usr/bin/env bash
# An ordinary (not editable) install of this checkout into a scratch venv, as users get kview:
# bytecode compiled at install time, no editable import finder. The figures of the small targets
# (`kview --help`, a small trace's kernel summary) count from such an install: an editable
# checkout pays its import finder, and with PYTHONDONTWRITEBYTECODE set (and no __pycache__
# beside the sources) compiles every kview module it imports on every run.
#
#   bash bench/plain_install.sh /tmp/kview-plain && /tmp/kview-plain/bin/kview --help
#
# Dependencies come from the active environment's site-packages (a .pth), nothing is downloaded;
# the build uses that environment's setuptools. Only tracked files are installed.
set -eu
dest=${1:?usage: bash bench/plain_install.sh DEST}
here=$(cd "$(dirname "$0")/.." && pwd)
rm -rf "$dest"
python -m venv "$dest"
sp=$("$dest/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
python -c 'import sys; print("\n".join(p for p in sys.path if p.endswith("site-packages")))' > "$sp/shared.pth"
rm -rf "$sp"/setuptools* "$sp"/pkg_resources "$sp"/_distutils_hack "$sp"/distutils-precedence.pth
src=$(mktemp -d)
trap 'rm -rf "$src"' EXIT
(cd "$here" && git ls-files -z | xargs -0 tar -cf -) | tar -x -C "$src"
env -u PYTHONDONTWRITEBYTECODE "$dest/bin/pip" install -q --no-deps --no-build-isolation "$src"
(cd / && "$dest/bin/python" -c 'import kview, sys; print("kview from", kview.__file__)')
