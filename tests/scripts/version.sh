#!/bin/sh
# SPDX-License-Identifier: MIT
# version.sh -- the Makefile's VERSION is the project's version; the files
# that must spell it out themselves agree with it: the public header
# (DLOCK_VERSION), the man pages' title lines, debian/changelog (the
# packages' version) and the Python client's pyproject.toml (or the module
# attribute it names) and its __version__.
# Part of make scripts; make deb, sdist and wheel run it first.
set -eu
top=$(cd "$(dirname "$0")/../.." && pwd)
cd "$top"
fail=0
version=$(sed -n 's/^VERSION *:= *//p' Makefile)
[ -n "$version" ] || { echo "version.sh: FAIL: no VERSION := in the Makefile"; exit 1; }

check() { # what, the version it says
	if [ "$2" != "$version" ]; then
		echo "version.sh: FAIL: $1 says \"$2\", the Makefile $version"
		fail=1
	fi
}

check client/lib/dlock.h "$(sed -n 's/^#define DLOCK_VERSION "\(.*\)"/\1/p' client/lib/dlock.h)"

for m in client/cli/dlock.1 server/dlockd.8 server/dlockd.conf.5; do
	check "$m" "$(sed -n '1s/^\.TH .* "dlockd* \([^"]*\)".*/\1/p' "$m")"
done

# Native packages: the version is the project's, without a revision.
if [ -f debian/changelog ]; then
	check debian/changelog "$(sed -n '1s/^dlockd (\([^)]*\)).*/\1/p' debian/changelog)"
fi

if [ -f client/python/pyproject.toml ]; then
	check client/python/pyproject.toml "$(python3 - client/python <<'PY'
import pathlib, re, sys, tomllib
root = pathlib.Path(sys.argv[1])
meta = tomllib.loads((root / "pyproject.toml").read_text())
project = meta.get("project", {})
if "version" in project:
    print(project["version"])
    sys.exit(0)
# dynamic = ["version"]: setuptools' attr = "package.module.name", read
# from the source without importing it.
attr = meta.get("tool", {}).get("setuptools", {}).get("dynamic", {}) \
           .get("version", {}).get("attr", "")
mod, _, name = attr.rpartition(".")
for path in (root / mod.replace(".", "/")).with_suffix(".py"), \
            root / mod.replace(".", "/") / "__init__.py", \
            root / "src" / (mod.replace(".", "/") + ".py"), \
            root / "src" / mod.replace(".", "/") / "__init__.py":
    if mod and path.is_file():
        m = re.search(r"^%s\s*=\s*['\"]([^'\"]+)['\"]" % re.escape(name),
                      path.read_text(), re.M)
        if m:
            print(m.group(1))
            sys.exit(0)
print("(no version found)")
PY
)"
	# What the package says of itself at run time.
	for init in client/python/*/__init__.py; do
		[ -f "$init" ] || continue
		v=$(sed -n 's/^__version__ *= *["'"'"']\([^"'"'"']*\)["'"'"'].*/\1/p' "$init")
		[ -z "$v" ] || check "$init (__version__)" "$v"
	done
fi

[ "$fail" = 0 ] || exit 1
echo "version.sh: ok: $version everywhere"
