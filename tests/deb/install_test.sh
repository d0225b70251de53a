#!/bin/sh
# SPDX-License-Identifier: MIT
# install_test.sh -- the Debian packages, installed on this machine as an
# operator would (apt-get install ./*.deb), then upgraded (the dlockd
# package repacked under a higher version), removed and purged.
#
#   sh tests/deb/install_test.sh build/deb       (make deb-test, as root)
#
# Without systemd as PID 1 (none on the project's machines and CI's) the
# unit itself cannot run; what it would do is done by hand: the installed dlockd is started with the
# unit's own ExecStart line, as an unprivileged user (DynamicUser=) with
# umask 0077, its state in /var/lib/private/dlockd behind /var/lib/dlockd
# (StateDirectory=), a password in $CREDENTIALS_DIRECTORY
# (LoadCredential=) and $NOTIFY_SOCKET (Type=notify), against a private
# redis-server configured with the redis-dlockd.conf the package ships.
# Only the Redis address and the TCP port are added to that command line,
# so that nothing on this machine is in the way.
#
# It changes the system: it refuses to run when any of the packages is
# installed already, and removes what it installed whatever happens.
set -eu
# The installed system as an operator's shell sees it (not a python3 or a
# compiler of one's own earlier in PATH).
PATH=/usr/sbin:/usr/bin:/sbin:/bin
export PATH

out=$(cd "${1:-build/deb}" && pwd)
top=$(cd "$(dirname "$0")/../.." && pwd)
version=$(sed -n 's/^VERSION *:= *//p' "$top/Makefile")
arch=$(dpkg --print-architecture)
multiarch=$(dpkg-architecture -qDEB_HOST_MULTIARCH)
pkgs="dlockd dlock libdlock0 libdlock-dev"
[ -f "$out/python3-dlockd_${version}_all.deb" ] && pkgs="$pkgs python3-dlockd"
[ -f "$out/libdlockd-java_${version}_all.deb" ] && pkgs="$pkgs libdlockd-java"

passed=0
step() { echo "deb-test: $*"; }
ok() { passed=$((passed + 1)); echo "deb-test: ok: $*"; }
fail() {
	echo "deb-test: FAIL: $*" >&2
	echo "deb-test: $passed passed, 1 failed"
	exit 1
}

[ "$(id -u)" = 0 ] || { echo "deb-test: run as root (it installs packages)"; exit 1; }
for p in $pkgs; do
	if dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null |
		grep -qv '^not-installed$'; then
		echo "deb-test: $p is on this machine already; this test installs"
		echo "deb-test: and purges it: apt-get purge $pkgs, then again"
		exit 1
	fi
done
for f in /etc/dlockd /var/lib/dlockd /var/lib/private/dlockd; do
	if [ -e "$f" ] || [ -L "$f" ]; then
		echo "deb-test: $f exists without the package: not ours to touch"
		exit 1
	fi
done

debs=""
for p in $pkgs; do
	a=$arch
	case $p in python3-dlockd | libdlockd-java) a=all ;; esac
	f="$out/${p}_${version}_$a.deb"
	[ -f "$f" ] || fail "no $f (make deb first)"
	debs="$debs $f"
done

dir=$(mktemp -d /tmp/dlockd-deb-test-XXXXXX)
chmod 755 "$dir" # the daemon's user reaches Redis's socket in here
rpid=""
dpid=""
npid=""
made_private=""
installed=""
cleanup() {
	set +e
	for p in $dpid $npid $rpid; do
		kill -KILL "$p" 2>/dev/null
		wait "$p" 2>/dev/null
	done
	if [ -n "$installed" ]; then
		dpkg --purge $pkgs > "$dir/cleanup-purge.log" 2>&1
	fi
	umount "$dir/state" 2>/dev/null
	rm -rf /var/lib/dlockd /var/lib/private/dlockd
	[ -n "$made_private" ] && rmdir /var/lib/private 2>/dev/null
	rm -rf "$dir"
}
trap cleanup EXIT
trap 'exit 1' INT TERM HUP

# ---- install ----

step "apt-get install$debs"
installed=yes
DEBIAN_FRONTEND=noninteractive apt-get install -y -q $debs > "$dir/install.log" 2>&1 ||
	{ cat "$dir/install.log"; fail "apt-get install"; }
for p in $pkgs; do
	s=$(dpkg-query -W -f='${db:Status-Abbrev}${Version}' "$p")
	[ "$s" = "ii $version" ] || fail "$p: dpkg says \"$s\", not installed at $version"
done
ok "installed cleanly: $pkgs at $version"

# ---- files ----

expect_files() { # package, the paths it must hold (other than docs)
	p=$1
	shift
	for f in "$@"; do
		dpkg -L "$p" | grep -qx "$f" || fail "$p does not hold $f"
		[ -e "$f" ] || fail "$f ($p) is not on the disk"
	done
}
expect_files dlockd /usr/sbin/dlockd /etc/dlockd/dlockd.conf \
	/lib/systemd/system/dlockd.service \
	/usr/share/man/man8/dlockd.8.gz /usr/share/man/man5/dlockd.conf.5.gz \
	/usr/share/doc/dlockd/README.md /usr/share/doc/dlockd/PROTOCOL.md \
	/usr/share/doc/dlockd/CHANGELOG.md /usr/share/doc/dlockd/docs/guide.md \
	/usr/share/doc/dlockd/docs/operations.md \
	/usr/share/doc/dlockd/docs/security.md /usr/share/doc/dlockd/docs/ha.md \
	/usr/share/doc/dlockd/docs/testing.md \
	/usr/share/doc/dlockd/docs/performance.md \
	/usr/share/doc/dlockd/docs/inside.md /usr/share/doc/dlockd/docs/design.md \
	/usr/share/dlockd/redis-dlockd.conf /usr/share/doc/dlockd/copyright
expect_files dlock /usr/bin/dlock /usr/share/man/man1/dlock.1.gz
expect_files libdlock0 "/usr/lib/$multiarch/libdlock.so.0"
expect_files libdlock-dev /usr/include/dlock.h \
	"/usr/lib/$multiarch/libdlock.so" "/usr/lib/$multiarch/libdlock.a" \
	"/usr/lib/$multiarch/pkgconfig/dlock.pc"
ok "every file where it belongs"

dpkg-query -W -f='${Conffiles}\n' dlockd | grep -q '^ /etc/dlockd/dlockd.conf ' ||
	fail "/etc/dlockd/dlockd.conf is not a conffile"
perm=$(stat -c '%a %U:%G' /etc/dlockd/dlockd.conf)
[ "$perm" = "644 root:root" ] || fail "/etc/dlockd/dlockd.conf is $perm, not 644 root:root"
perm=$(stat -c '%a %U:%G' /etc/dlockd)
[ "$perm" = "755 root:root" ] || fail "/etc/dlockd is $perm, not 755 root:root"
ok "/etc/dlockd/dlockd.conf: a conffile, 644 root:root (secrets go to /etc/credstore)"

for m in dlockd.8 dlockd.conf.5 dlock.1; do
	name=${m%.*}
	sect=${m##*.}
	man -w "$sect" "$name" > /dev/null 2>&1 || fail "man $sect $name finds nothing"
done
ok "man dlockd, man dlockd.conf, man dlock"

v=$(/usr/sbin/dlockd --version)
[ "$v" = "dlockd $version" ] || fail "dlockd --version says \"$v\""
v=$(dlock --version)
[ "$v" = "dlock $version (libdlock $version)" ] || fail "dlock --version says \"$v\""
ok "dlockd --version and dlock --version say $version"

# ---- the unit: enabled, not started ----

[ -L /etc/systemd/system/multi-user.target.wants/dlockd.service ] ||
	fail "dlockd.service is not enabled (no multi-user.target.wants link)"
s=$(systemctl --root=/ is-enabled dlockd.service 2>&1 || true)
[ "$s" = enabled ] || fail "systemctl is-enabled dlockd says \"$s\""
for p in /proc/[0-9]*; do
	if [ "$(readlink "$p/exe" 2>/dev/null)" = /usr/sbin/dlockd ]; then
		fail "the installation started /usr/sbin/dlockd (${p#/proc/})"
	fi
done
ok "dlockd.service enabled, and not started by the installation"

unit=/lib/systemd/system/dlockd.service
sed "s|^ExecStart=/usr/sbin/dlockd|ExecStart=/bin/true|" "$unit" > "$dir/dlockd.service"
systemd-analyze verify "$dir/dlockd.service" > "$dir/verify.log" 2>&1 ||
	{ cat "$dir/verify.log"; fail "systemd-analyze verify of the installed unit"; }
ok "systemd-analyze verify accepts the installed unit"

# ---- the library, as a program's build would use it ----

cflags=$(pkg-config --cflags dlock)
libs=$(pkg-config --libs dlock)
cc -Wall -Werror -o "$dir/lock" "$top/tests/deb/lock.c" $cflags $libs ||
	fail "cannot build against libdlock-dev: $cflags $libs"
so=$(ldd "$dir/lock" | sed -n 's/^[[:space:]]*libdlock.so.0 => \([^ ]*\) .*/\1/p')
[ -n "$so" ] && [ "$(readlink -f "$so")" = "/usr/lib/$multiarch/libdlock.so.0" ] ||
	fail "the program loads \"$so\", not /usr/lib/$multiarch/libdlock.so.0"
# Static: libdlock.a, and what pkg-config --static says it needs.
static=$(pkg-config --static --libs dlock | sed 's/-ldlock//')
cc -Wall -Werror -o "$dir/lock-static" "$top/tests/deb/lock.c" $cflags \
	-Wl,-Bstatic -ldlock -Wl,-Bdynamic $static ||
	fail "cannot link libdlock.a with: $static"
if ldd "$dir/lock-static" | grep -q libdlock; then
	fail "the static program loads libdlock.so"
fi
example=/usr/share/doc/libdlock-dev/examples/stock.c
cc -Wall -Werror -o "$dir/stock" "$example" $cflags $libs -lpthread ||
	fail "$example does not build"
ok "pkg-config dlock: programs build, shared and static, and so does $example"

# ---- the daemon, as the unit would run it ----

exec_start=$(sed -n 's/^ExecStart=//p' "$unit")
case $exec_start in
/usr/sbin/dlockd\ *) ;;
*) fail "ExecStart=$exec_start: not /usr/sbin/dlockd" ;;
esac
$exec_start --check-config > "$dir/check.log" 2>&1 ||
	{ cat "$dir/check.log"; fail "$exec_start --check-config"; }
ok "$exec_start --check-config: the installed configuration checks"

# The dynamic user: one with no business on this machine.
uid=$(id -u nobody)
gid=$(id -g nobody)

mkdir -p "$dir/redis"
cat > "$dir/redis.conf" <<EOF
include /usr/share/dlockd/redis-dlockd.conf
port 0
unixsocket $dir/redis.sock
unixsocketperm 777
dir $dir/redis
save ""
daemonize no
logfile ""
EOF
redis-server "$dir/redis.conf" > "$dir/redis.log" 2>&1 &
rpid=$!
i=0
until [ -S "$dir/redis.sock" ]; do
	i=$((i + 1))
	[ "$i" -gt 100 ] && { cat "$dir/redis.log"; fail "redis-server did not start"; }
	sleep 0.1
done
aof=$(redis-cli -s "$dir/redis.sock" CONFIG GET appendonly | tail -n 1)
[ "$aof" = yes ] || fail "redis-dlockd.conf did not turn appendonly on ($aof)"

# StateDirectory=dlockd with DynamicUser=yes, as systemd lays it out.
[ -d /var/lib/private ] || { made_private=yes; mkdir -m 700 /var/lib/private; }
install -d -m 700 -o "$uid" -g "$gid" /var/lib/private/dlockd
ln -s private/dlockd /var/lib/dlockd
# LoadCredential=dlockd.password, copied by systemd into a directory of
# the service's own.
install -d -m 700 -o "$uid" -g "$gid" "$dir/creds"
password="deb-test-$(od -An -N8 -tx8 /dev/urandom | tr -d ' ')"
echo "$password" > "$dir/creds/dlockd.password"
chown "$uid:$gid" "$dir/creds/dlockd.password"
chmod 400 "$dir/creds/dlockd.password"
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')

# Type=notify: what the daemon tells systemd, collected from the socket.
python3 - "$dir/notify" "$uid" > "$dir/notify.log" 2>&1 <<'PY' &
import os, socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
s.bind(sys.argv[1])
os.chown(sys.argv[1], int(sys.argv[2]), -1)
s.settimeout(60)
try:
    while True:
        for line in s.recv(4096).decode().split("\n"):
            print(line, flush=True)
except socket.timeout:
    pass
PY
npid=$!
i=0
until [ -S "$dir/notify" ]; do
	i=$((i + 1))
	[ "$i" -gt 100 ] && fail "the notify listener did not start"
	sleep 0.1
done

step "as uid $uid, umask 077: $exec_start --redis unix://$dir/redis.sock --port $port"
# /var/lib/private is 0700 on the host; systemd lets the service through
# it in the service's own mount namespace. So does this one: the state
# directory bind-mounted into a tmpfs over /var/lib/private.
mkdir "$dir/state"
mount --bind /var/lib/private/dlockd "$dir/state"
unshare -m sh -c '
	set -e
	mount --make-rprivate /
	mount -t tmpfs -o mode=755 dlockd-private /var/lib/private
	mkdir /var/lib/private/dlockd
	mount --bind "$1" /var/lib/private/dlockd
	shift
	umask 077
	cd /
	exec "$@"' sh "$dir/state" \
	env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin \
	STATE_DIRECTORY=/var/lib/dlockd \
	CREDENTIALS_DIRECTORY="$dir/creds" \
	NOTIFY_SOCKET="$dir/notify" \
	WATCHDOG_USEC=10000000 \
	setpriv --reuid="$uid" --regid="$gid" --clear-groups \
	$exec_start --redis "unix://$dir/redis.sock" --port "$port" \
	> "$dir/dlockd.log" 2>&1 &
dpid=$!
i=0
until grep -qx 'READY=1' "$dir/notify.log"; do
	i=$((i + 1))
	if [ "$i" -gt 150 ] || ! kill -0 "$dpid" 2>/dev/null; then
		cat "$dir/dlockd.log"
		fail "dlockd sent no READY=1"
	fi
	sleep 0.1
done
ok "the installed dlockd started as the unit would, and said READY=1"

# ---- locks with the installed clients ----

export DLOCK_PORT="$port"
s=$(dlock ping 2>&1 || true)
case $s in
*"requires a password"*) ;;
*) fail "without the credential's password, dlock ping said \"$s\"" ;;
esac
echo "$password" > "$dir/password"
dl() { dlock --password-file "$dir/password" "$@"; }
dl ping > /dev/null || fail "dlock ping with the password"
token=$(dl run deb-test/cli -- sh -c 'echo "$DLOCK_TOKEN"') ||
	fail "dlock run deb-test/cli"
[ -n "$token" ] || fail "dlock run passed no DLOCK_TOKEN"
ok "dlock: the password comes from the credential; dlock run held a lock (token $token)"

for prog in lock lock-static; do
	t=$(DLOCK_PASSWORD_FILE="$dir/password" "$dir/$prog" "deb-test/$prog") ||
		fail "$prog (libdlock) could not lock"
	[ "$t" -gt "$token" ] || fail "$prog got token $t, not above $token"
done
ok "libdlock.so.0 and libdlock.a: a program took and released a lock"

if [ -n "${pkgs##*python3-dlockd*}" ]; then
	step "python3-dlockd was not built (no client/python/pyproject.toml): skipped"
else
	v=$(cd / && python3 -c 'import importlib.metadata as m; print(m.version("dlockd"))')
	[ "$v" = "$version" ] || fail "python3-dlockd's metadata says version $v"
	pyout=$(cd / && DLOCK_TEST_PASSWORD="$password" DLOCK_TEST_PORT="$port" \
		python3 "$top/tests/deb/lock.py" 2>&1) ||
		fail "python3 lock.py: $pyout"
	ok "python3: import dlockd ($(cd / && python3 -c 'import dlockd; print(dlockd.__file__)')), $pyout"
fi

if [ -n "${pkgs##*libdlockd-java*}" ]; then
	step "libdlockd-java was not built (the nojava profile): skipped"
else
	[ -f /usr/share/java/dlockd.jar ] || fail "no /usr/share/java/dlockd.jar"
	# the source launcher compiles and runs Lock.java in one step
	jout=$(cd / && DLOCK_TEST_PASSWORD="$password" DLOCK_TEST_PORT="$port" \
		java -cp /usr/share/java/dlockd.jar "$top/tests/deb/Lock.java" 2>&1) ||
		fail "java Lock.java: $jout"
	ok "java: /usr/share/java/dlockd.jar, $jout"
fi

kill -TERM "$dpid"
rc=0
wait "$dpid" || rc=$?
dpid=""
[ "$rc" = 0 ] || { cat "$dir/dlockd.log"; fail "dlockd exited $rc on SIGTERM"; }
grep -qx 'STOPPING=1' "$dir/notify.log" || fail "dlockd did not say STOPPING=1"
# The state file is named after the keyspace's cluster id:
# dlockd.<cluster id>.state, one per keyspace this daemon has served.
set -- /var/lib/dlockd/dlockd.*.state
[ "$#" = 1 ] && [ -f "$1" ] ||
	fail "not one dlockd.<cluster id>.state in /var/lib/dlockd: $(ls -A /var/lib/dlockd)"
state=$1
perm=$(stat -c '%a %u' "$state")
[ "$perm" = "600 $uid" ] || fail "$state is $perm, not 600 $uid"
ok "SIGTERM: drained, STOPPING=1, exit 0; $state written (600, the daemon's user)"
umount "$dir/state"
kill -TERM "$npid" "$rpid" 2>/dev/null || true
wait "$npid" "$rpid" 2>/dev/null || true
npid=""
rpid=""

# ---- upgrade ----

# The same dlockd package under a higher version: what an upgrade keeps.
echo "; the operator's own line" >> /etc/dlockd/dlockd.conf
dpkg-deb -R "$out/dlockd_${version}_$arch.deb" "$dir/up"
sed -i "s/^Version: .*/Version: $version+up/" "$dir/up/DEBIAN/control"
dpkg-deb -b "$dir/up" "$dir/dlockd_$version+up_$arch.deb" > /dev/null
DEBIAN_FRONTEND=noninteractive apt-get install -y -q \
	"$dir/dlockd_$version+up_$arch.deb" > "$dir/upgrade.log" 2>&1 ||
	{ cat "$dir/upgrade.log"; fail "apt-get install of $version+up"; }
s=$(dpkg-query -W -f='${db:Status-Abbrev}${Version}' dlockd)
[ "$s" = "ii $version+up" ] || fail "dlockd is \"$s\" after the upgrade"
grep -q "the operator's own line" /etc/dlockd/dlockd.conf ||
	fail "the upgrade did not keep the changed /etc/dlockd/dlockd.conf"
[ -L /etc/systemd/system/multi-user.target.wants/dlockd.service ] ||
	fail "the upgrade disabled dlockd.service"
[ -f "$state" ] || fail "the upgrade deleted $state"
ok "upgrade to $version+up: the changed dlockd.conf, the enablement and the state stay"

# ---- remove, then purge ----

DEBIAN_FRONTEND=noninteractive apt-get remove -y -q $pkgs > "$dir/remove.log" 2>&1 ||
	{ cat "$dir/remove.log"; fail "apt-get remove"; }
for f in /usr/sbin/dlockd /usr/bin/dlock /lib/systemd/system/dlockd.service \
	"/usr/lib/$multiarch/libdlock.so.0" /usr/include/dlock.h; do
	if [ -e "$f" ]; then fail "$f is still there after apt-get remove"; fi
done
grep -q "the operator's own line" /etc/dlockd/dlockd.conf ||
	fail "apt-get remove did not keep the changed /etc/dlockd/dlockd.conf"
s=$(dpkg-query -W -f='${db:Status-Abbrev}' dlockd)
[ "$s" = "rc " ] || fail "dlockd is \"$s\" after remove, not rc"
[ -f "$state" ] || fail "apt-get remove deleted $state"
ok "apt-get remove: the programs are gone; dlockd.conf and the state stay"

# Only dlockd has conffiles: the others are gone with the remove.
DEBIAN_FRONTEND=noninteractive apt-get purge -y -q dlockd > "$dir/purge.log" 2>&1 ||
	{ cat "$dir/purge.log"; fail "apt-get purge dlockd"; }
installed=""
for f in /etc/dlockd /var/lib/dlockd /var/lib/private/dlockd \
	/etc/systemd/system/multi-user.target.wants/dlockd.service \
	/etc/systemd/system/dlockd.service; do
	if [ -e "$f" ] || [ -L "$f" ]; then
		fail "$f is still there after apt-get purge"
	fi
done
for p in $pkgs; do
	s=$(dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null || echo not-installed)
	[ "$s" = not-installed ] || fail "$p is \"$s\" after purge"
done
ok "apt-get purge dlockd: configuration, state and the unit's links are gone"

echo "deb-test: $passed passed, 0 failed"
