#!/bin/sh
# SPDX-License-Identifier: MIT
# install.sh -- `make install DESTDIR=...` installs the documented files and
# only those, keeps an operator's existing configuration, produces a library
# that a program can build against with pkg-config, and a systemd unit that
# `systemd-analyze verify` accepts, with a low exposure score.
set -eu
top=$(cd "$(dirname "$0")/../.." && pwd)
stage=$(mktemp -d /tmp/dlockd-install-XXXXXX)
trap 'rm -rf "$stage"' EXIT
cd "$top"
fail() { echo "install.sh: FAIL: $*" >&2; exit 1; }

# What users install is the normal build, also when the suite itself runs
# under the sanitizers (SAN=1 would reach this make through MAKEFLAGS; a
# sanitized libdlock.so cannot be loaded by an uninstrumented program).
install() {
	${MAKE:-make} -s install SAN= O=build DESTDIR="$stage" PREFIX=/usr \
		UNITDIR=/usr/lib/systemd/system >/dev/null
}
echo "install.sh: make install DESTDIR=$stage PREFIX=/usr"
install

expected="etc/dlockd/dlockd.conf
usr/bin/dlock
usr/include/dlock.h
usr/lib/libdlock.a
usr/lib/libdlock.so
usr/lib/libdlock.so.0
usr/lib/pkgconfig/dlock.pc
usr/lib/systemd/system/dlockd.service
usr/sbin/dlockd
usr/share/dlockd/redis-dlockd.conf
usr/share/doc/dlockd/CHANGELOG.md
usr/share/doc/dlockd/LICENSE
usr/share/doc/dlockd/PROTOCOL.md
usr/share/doc/dlockd/README.md
usr/share/doc/dlockd/docs/design.md
usr/share/doc/dlockd/docs/guide.md
usr/share/doc/dlockd/docs/ha.md
usr/share/doc/dlockd/docs/inside.md
usr/share/doc/dlockd/docs/operations.md
usr/share/doc/dlockd/docs/performance.md
usr/share/doc/dlockd/docs/security.md
usr/share/doc/dlockd/docs/testing.md
usr/share/man/man1/dlock.1
usr/share/man/man5/dlockd.conf.5
usr/share/man/man8/dlockd.8"
actual=$(cd "$stage" && find . \( -type f -o -type l \) | sed 's|^\./||' | LC_ALL=C sort)
[ "$actual" = "$expected" ] || {
	printf 'expected:\n%s\ngot:\n%s\n' "$expected" "$actual" >&2
	fail "installed file list differs"
}
echo "install.sh: ok: the 25 documented files, nothing else"

echo "; the operator's own line" >> "$stage/etc/dlockd/dlockd.conf"
install
grep -q "the operator's own line" "$stage/etc/dlockd/dlockd.conf" ||
	fail "a second install overwrote the configuration"
echo "install.sh: ok: an existing dlockd.conf is kept"

# Any other PREFIX holds everything, the configuration in PREFIX/etc: staged
# first (what lands outside the prefix shows in the stage), then for real
# into a directory of our own, where every file must be.
${MAKE:-make} -s install SAN= O=build DESTDIR="$stage/p" \
	PREFIX=/opt/dlockd-test >/dev/null
outside=$(cd "$stage/p" && find . -mindepth 1 ! -path ./opt \
	! -path ./opt/dlockd-test ! -path './opt/dlockd-test/*')
[ -z "$outside" ] || fail "make install PREFIX=/opt/dlockd-test wrote outside it: $outside"
[ -f "$stage/p/opt/dlockd-test/etc/dlockd/dlockd.conf" ] ||
	fail "PREFIX=/opt/dlockd-test: no etc/dlockd/dlockd.conf in it"
grep -q "^ExecStart=/opt/dlockd-test/sbin/dlockd -c /opt/dlockd-test/etc/dlockd/dlockd.conf" \
	"$stage/p/opt/dlockd-test/lib/systemd/system/dlockd.service" ||
	fail "PREFIX=/opt/dlockd-test: the unit does not read PREFIX/etc/dlockd/dlockd.conf"
${MAKE:-make} -s install SAN= O=build PREFIX="$stage/own" >/dev/null ||
	fail "make install PREFIX=$stage/own"
n=$(cd "$stage/own" && find . \( -type f -o -type l \) | wc -l)
[ "$n" -eq 25 ] && [ -f "$stage/own/etc/dlockd/dlockd.conf" ] ||
	fail "make install PREFIX=$stage/own: $n files in it, not the 25"
echo "install.sh: ok: PREFIX=/opt/... and PREFIX=<a directory> write nothing outside it"

"$stage/usr/sbin/dlockd" -c "$stage/etc/dlockd/dlockd.conf" --check-config \
	>/dev/null || fail "the installed dlockd.conf does not check"
echo "install.sh: ok: the installed configuration checks"

cat > "$stage/prog.c" <<'PROG'
#include <dlock.h>
#include <stdio.h>
int main(void)
{
	printf("%s\n", dlock_strerror(DLOCK_EBUSY));
	return 0;
}
PROG
flags=$(PKG_CONFIG_PATH="$stage/usr/lib/pkgconfig" \
	PKG_CONFIG_SYSROOT_DIR="$stage" pkg-config --cflags --libs dlock)
cc -o "$stage/prog" "$stage/prog.c" $flags -Wl,-rpath,"$stage/usr/lib" ||
	fail "cannot build against the installed library ($flags)"
LD_LIBRARY_PATH="$stage/usr/lib" "$stage/prog" >/dev/null ||
	fail "a program linked with libdlock.so does not run"
echo "install.sh: ok: pkg-config --cflags --libs dlock builds and runs a program"

# The unit as installed, with ExecStart pointing into the stage so that
# verify finds the binary; man pages for Documentation= from the stage.
sed "s|/usr/sbin/dlockd|$stage/usr/sbin/dlockd|" \
	"$stage/usr/lib/systemd/system/dlockd.service" > "$stage/dlockd.service"
MANPATH="$stage/usr/share/man" systemd-analyze verify "$stage/dlockd.service" ||
	fail "systemd-analyze verify"
echo "install.sh: ok: systemd-analyze verify"
score=$(systemd-analyze security --offline=true "$stage/dlockd.service" 2>&1 |
	sed -n 's/.*Overall exposure level for dlockd.service: \([0-9.]*\).*/\1/p')
[ -n "$score" ] || fail "no exposure score"
awk -v s="$score" 'BEGIN { exit !(s <= 1.5) }' ||
	fail "exposure $score is above 1.5"
echo "install.sh: ok: systemd-analyze security (offline) exposure $score"
