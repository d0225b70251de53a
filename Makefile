# SPDX-License-Identifier: MIT
# dlockd -- build, test, run and install.
#
#   make            build dlockd, libdlock and dlock into $(O) (build/)
#   make check      install missing Debian packages (announced), then build
#                   and run every suite under -fsanitize=address,undefined
#                   (two at a time), the Python tests, a short fault
#                   campaign and the fuzzers' smoke run
#   make test       the contributors' loop: normal build, the unit suites
#                   and the quicker integration suites, TEST_JOBS at a
#                   time (docs/inside.md); make test-all: every suite
#                   and script, still without sanitizers
#   make run        start a private redis-server and dlockd in the foreground
#   make install    PREFIX=/usr/local DESTDIR= (staged installs welcome);
#                   the configuration goes to PREFIX/etc (/etc for /usr)
#   make bench      benchmarks, dlockd against the Redis recipe (on demand;
#                   BENCH_ONLY=tls: only the TLS rows)
#   make bench-bound  what bounds the durable pairs on a small machine
#   make bench-watch  what a lock change costs to find its watchers
#   make bench-python the Python client against redis-py's Lock
#   make bench-clients the client libraries side by side on one daemon
#   make bench-etcd   dlockd against etcd's lock service (needs etcd-server)
#   make pytest     the Python client's tests (tests/python), against the
#                   build's dlockd and real redis-servers
#   make SAN=1 ...  any target with the sanitizers on (objects in build/san)
#   make deps       only the Debian package step
#   make deb        Debian packages in build/deb (dpkg-buildpackage, lintian)
#   make deb-test   as root: install them, run the daemon, lock, purge
#   make sdist, make wheel   the Python client in build/python

PREFIX     ?= /usr/local
DESTDIR    ?=
BINDIR     ?= $(PREFIX)/bin
SBINDIR    ?= $(PREFIX)/sbin
LIBDIR     ?= $(PREFIX)/lib
INCLUDEDIR ?= $(PREFIX)/include
MANDIR     ?= $(PREFIX)/share/man
# The configuration follows PREFIX (an install into /opt/dlockd or a home
# directory writes nothing outside it), except that /usr's is /etc.
SYSCONFDIR ?= $(if $(filter /usr /usr/,$(PREFIX)),/etc,$(PREFIX)/etc)
DOCDIR     ?= $(PREFIX)/share/doc/dlockd
# Files meant to be used, not read: redis.conf includes redis-dlockd.conf
# from here (slim images, Docker's Debian among them, strip share/doc).
DATADIR    ?= $(PREFIX)/share/dlockd
UNITDIR    ?= $(PREFIX)/lib/systemd/system

CC         ?= cc
PKG_CONFIG ?= pkg-config
OPT        ?= -O2 -g

ifneq ($(SAN),)
O          ?= build/san
SANFLAGS   := -fsanitize=address,undefined -fno-omit-frame-pointer \
              -fno-sanitize-recover=undefined
else
O          ?= build
SANFLAGS   :=
endif

VERSION    := 0.4.0
SOVERSION  := 0

WARN := -Wall -Wextra -Wstrict-prototypes -Wmissing-prototypes -Wshadow \
        -Wwrite-strings -Werror
DEP_CFLAGS := $(shell $(PKG_CONFIG) --cflags libuv hiredis inih openssl 2>/dev/null)
DEP_LIBS   := $(shell $(PKG_CONFIG) --libs libuv hiredis inih openssl 2>/dev/null)
# OpenSSL alone: TLS in libdlock, the TLS tests and the load generator.
SSL_CFLAGS := $(shell $(PKG_CONFIG) --cflags openssl 2>/dev/null)
SSL_LIBS   := $(shell $(PKG_CONFIG) --libs openssl 2>/dev/null)
CRIT_CFLAGS := $(shell $(PKG_CONFIG) --cflags criterion 2>/dev/null)
CRIT_LIBS   := $(shell $(PKG_CONFIG) --libs criterion 2>/dev/null)

CFLAGS   ?=
CPPFLAGS += -I. -D_GNU_SOURCE -DDL_VERSION=\"$(VERSION)\"
ALL_CFLAGS = -std=c11 $(OPT) $(WARN) $(SANFLAGS) -MMD -MP $(CFLAGS)
LDFLAGS  ?=
ALL_LDFLAGS = $(SANFLAGS) $(LDFLAGS)

# ---- sources ---------------------------------------------------------------

PROTO_SRC  := proto/proto.c proto/proto_reply.c proto/desc.c proto/slot.c
# The lock table (server/locktab/): test_locktab links it on its own.
LOCKTAB_SRC := $(addprefix server/locktab/,locktab.c locktab_wait.c locktab_ops.c \
                 locktab_cycle.c locktab_verify.c locktab_side.c \
                 locktab_move.c locktab_index.c locktab_desc.c htab.c wheel.c)
# The store (server/store/): Redis, and what is kept outside it.
STORE_SRC  := $(addprefix server/store/,store.c store_link.c store_load.c \
                store_call.c \
                store_batch.c store_lead.c store_horizon.c store_attest.c \
                store_restart.c store_cluster.c \
                store_find.c store_durable.c store_migrate.c store_probe.c \
                store_resync.c store_uv.c store_part.c record.c bucket.c \
                seen.c)
# The partitions (server/part/): the map, and this daemon's share of it.
PART_SRC   := $(addprefix server/part/,map.c part.c part_move.c)
SERVER_SRC := server/log.c server/config.c server/proof.c \
              server/conn.c server/conn_budget.c server/conn_lines.c server/held.c server/cmd.c \
              server/cmd_info.c server/cmd_reply.c server/cmd_multi.c \
              server/cmd_part.c \
              server/server.c server/notify.c server/stats.c \
              server/metrics.c server/buf.c server/tls.c server/users.c \
              server/access.c server/watchreg.c server/watch.c \
              $(LOCKTAB_SRC) $(STORE_SRC) $(PART_SRC)
# libdlock (client/lib/): the library, and its public header dlock.h.
CLIENT_SRC := $(addprefix client/lib/,dlock.c dlock_ask.c dlock_io.c dlock_req.c \
                dlock_reply.c dlock_tls.c dlock_watch.c dlock_desc.c \
                dlock_err.c dlock_route.c dlock_follow.c dlock_span.c)
# The dlock command (client/cli/), on libdlock.
CLI_SRC    := $(addprefix client/cli/,dlock_cli.c dlock_clicore.c \
                dlock_cmds.c dlock_run.c dlock_guard.c dlock_child.c \
                dlock_watchcmd.c dlock_admin.c)
UNIT_TESTS := test_proto test_wheel test_htab test_locktab test_config test_record \
              test_users test_watchreg test_map
INTEG_TESTS := test_server test_persist test_faults test_ha test_ops \
               test_client test_cli test_layout test_tls test_access \
               test_conformance test_describe test_deadlock test_watch \
               test_lease_end test_forget test_coord test_multi \
               test_partition test_rcluster test_route

PROTO_OBJ  := $(PROTO_SRC:%.c=$(O)/%.o)
SERVER_OBJ := $(SERVER_SRC:%.c=$(O)/%.o)
CLIENT_OBJ := $(CLIENT_SRC:%.c=$(O)/%.o)
# The lock table and what it is made of, for the unit tests.
LOCKTAB_OBJ := $(LOCKTAB_SRC:%.c=$(O)/%.o)
# libdlock.so is built from position-independent copies of its objects.
LIB_PIC_OBJ := $(patsubst %.c,$(O)/pic/%.o,$(CLIENT_SRC) $(PROTO_SRC))
LIBDLOCK_A  := $(O)/libdlock.a
LIBDLOCK_SO := $(O)/libdlock.so.$(SOVERSION)

TEST_BINS  := $(addprefix $(O)/tests/,$(UNIT_TESTS) $(INTEG_TESTS))
# What an integration test links besides itself: the harness reads the
# daemon's keys with the store's own bucket function.
HARNESS_OBJ := $(O)/tests/harness.o $(O)/tests/rcluster.o \
               $(O)/server/store/bucket.o
# rcluster.c asks the Redis Cluster through hiredis.
HARNESS_LIBS := $(shell $(PKG_CONFIG) --libs hiredis 2>/dev/null)

.PHONY: all check test test-all test-bins unit integ scripts run run-ha \
        run-cluster conformance-parts \
        install uninstall clean deps \
        java javatest bench bench-clients bench-election bench-multilock bench-partitions bench-failover bench-etcd bench-bound bench-watch bench-slow-watchers bench-deadlock-tenant bench-tls-flood bench-bins fuzz fuzz-smoke format faults faults-parts faults-short faults-selftest \
        faults-check-test deb deb-test sdist wheel pytest gotest bench-python \
        format-check lint shape \
        bench-deadlock
all: $(O)/dlockd $(LIBDLOCK_A) $(LIBDLOCK_SO) $(O)/dlock \
     $(O)/examples/stock

# ---- build rules -------------------------------------------------------------

$(O)/%.o: %.c
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS) $(DEP_CFLAGS) $(ALL_CFLAGS) -c -o $@ $<

$(O)/tests/%.o: tests/%.c
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS) $(DEP_CFLAGS) $(CRIT_CFLAGS) $(ALL_CFLAGS) -c -o $@ $<

$(O)/pic/%.o: %.c
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS) $(SSL_CFLAGS) -fPIC -fvisibility=hidden \
	  -DDLOCK_BUILDING $(ALL_CFLAGS) -c -o $@ $<

$(O)/dlockd: $(O)/server/main.o $(SERVER_OBJ) $(PROTO_OBJ)
	$(CC) $(ALL_LDFLAGS) -o $@ $^ $(DEP_LIBS) -lm

# ---- libdlock and dlock --------------------------------------------------------

$(LIBDLOCK_A): $(CLIENT_OBJ) $(PROTO_OBJ)
	rm -f $@
	ar rcs $@ $^

$(LIBDLOCK_SO): $(LIB_PIC_OBJ)
	$(CC) $(ALL_LDFLAGS) -shared -Wl,-soname,libdlock.so.$(SOVERSION) \
	  -o $@ $^ $(SSL_LIBS) -lpthread
	ln -sf libdlock.so.$(SOVERSION) $(O)/libdlock.so

$(O)/dlock: $(CLI_SRC:%.c=$(O)/%.o) $(LIBDLOCK_A)
	$(CC) $(ALL_LDFLAGS) -o $@ $^ $(SSL_LIBS) -lpthread

# The example includes <dlock.h> as a program built against an installed
# libdlock-dev does (its copy is in /usr/share/doc/libdlock-dev/examples).
$(O)/client/examples/stock.o: CPPFLAGS += -Iclient/lib
$(O)/examples/stock: $(O)/client/examples/stock.o $(LIBDLOCK_A)
	@mkdir -p $(@D)
	$(CC) $(ALL_LDFLAGS) -o $@ $^ $(SSL_LIBS) -lpthread


# ---- tests -------------------------------------------------------------------

$(O)/tests/test_proto: $(O)/tests/test_proto.o $(PROTO_OBJ)
	$(CC) $(ALL_LDFLAGS) -o $@ $^ $(CRIT_LIBS)
$(O)/tests/test_wheel: $(O)/tests/test_wheel.o $(O)/server/locktab/wheel.o
	$(CC) $(ALL_LDFLAGS) -o $@ $^ $(CRIT_LIBS)
$(O)/tests/test_htab: $(O)/tests/test_htab.o $(O)/server/locktab/htab.o
	$(CC) $(ALL_LDFLAGS) -o $@ $^ $(CRIT_LIBS)
$(O)/tests/test_map: $(O)/tests/test_map.o $(O)/server/part/map.o $(PROTO_OBJ)
	$(CC) $(ALL_LDFLAGS) -o $@ $^ $(CRIT_LIBS)
$(O)/tests/test_watchreg: $(O)/tests/test_watchreg.o $(O)/server/watchreg.o \
                          $(O)/server/locktab/htab.o
	$(CC) $(ALL_LDFLAGS) -o $@ $^ $(CRIT_LIBS)
$(O)/tests/test_locktab: $(O)/tests/test_locktab.o $(LOCKTAB_OBJ) \
                         $(PROTO_OBJ)
	$(CC) $(ALL_LDFLAGS) -o $@ $^ $(CRIT_LIBS)
$(O)/tests/test_config: $(O)/tests/test_config.o $(O)/server/config.o \
                        $(O)/server/log.o $(O)/server/part/map.o \
                        $(PROTO_OBJ)
	$(CC) $(ALL_LDFLAGS) -o $@ $^ $(DEP_LIBS) $(CRIT_LIBS)
$(O)/tests/test_record: $(O)/tests/test_record.o $(O)/server/store/record.o \
                        $(O)/server/buf.o $(O)/server/store/bucket.o \
                        $(LOCKTAB_OBJ) $(PROTO_OBJ)
	$(CC) $(ALL_LDFLAGS) -o $@ $^ $(CRIT_LIBS)
$(O)/tests/test_users: $(O)/tests/test_users.o $(O)/server/users.o \
                       $(PROTO_OBJ)
	$(CC) $(ALL_LDFLAGS) -o $@ $^ $(DEP_LIBS) $(CRIT_LIBS)
$(O)/tests/test_server: $(O)/tests/test_server.o $(HARNESS_OBJ) \
                        $(PROTO_OBJ)
	$(CC) $(ALL_LDFLAGS) -o $@ $^ $(CRIT_LIBS) $(HARNESS_LIBS) -lpthread
$(O)/tests/test_describe: $(O)/tests/test_describe.o $(HARNESS_OBJ) \
                          $(PROTO_OBJ)
	$(CC) $(ALL_LDFLAGS) -o $@ $^ $(CRIT_LIBS) $(HARNESS_LIBS) -lpthread
$(O)/tests/test_persist: $(O)/tests/test_persist.o $(HARNESS_OBJ) \
                         $(PROTO_OBJ)
	$(CC) $(ALL_LDFLAGS) -o $@ $^ $(CRIT_LIBS) $(HARNESS_LIBS) -lpthread
$(O)/tests/test_forget: $(O)/tests/test_forget.o $(HARNESS_OBJ) \
                        $(LIBDLOCK_A)
	$(CC) $(ALL_LDFLAGS) -o $@ $^ $(CRIT_LIBS) $(HARNESS_LIBS) $(SSL_LIBS) -lpthread
$(O)/tests/test_faults: $(O)/tests/test_faults.o $(HARNESS_OBJ) \
                        $(O)/tests/netns.o $(PROTO_OBJ)
	$(CC) $(ALL_LDFLAGS) -o $@ $^ $(CRIT_LIBS) $(HARNESS_LIBS) -lpthread
$(O)/tests/test_ha: $(O)/tests/test_ha.o $(HARNESS_OBJ) \
                    $(LIBDLOCK_A)
	$(CC) $(ALL_LDFLAGS) -o $@ $^ $(CRIT_LIBS) $(HARNESS_LIBS) $(SSL_LIBS) -lpthread
$(O)/tests/test_ops: $(O)/tests/test_ops.o $(HARNESS_OBJ) $(PROTO_OBJ)
	$(CC) $(ALL_LDFLAGS) -o $@ $^ $(CRIT_LIBS) $(HARNESS_LIBS) -lpthread
$(O)/tests/test_deadlock: $(O)/tests/test_deadlock.o $(HARNESS_OBJ) \
                          $(PROTO_OBJ)
	$(CC) $(ALL_LDFLAGS) -o $@ $^ $(CRIT_LIBS) $(HARNESS_LIBS) -lpthread
$(O)/tests/test_client: $(O)/tests/test_client.o $(HARNESS_OBJ) \
                        $(LIBDLOCK_A)
	$(CC) $(ALL_LDFLAGS) -o $@ $^ $(CRIT_LIBS) $(HARNESS_LIBS) $(SSL_LIBS) -lpthread
# The conformance scenarios (tests/conformance), libdlock's runner.
$(O)/tests/test_conformance: $(O)/tests/test_conformance.o $(HARNESS_OBJ) \
                             $(LIBDLOCK_A)
	$(CC) $(ALL_LDFLAGS) -o $@ $^ $(CRIT_LIBS) $(HARNESS_LIBS) $(SSL_LIBS) -lpthread
$(O)/tests/test_tls: $(O)/tests/test_tls.o $(HARNESS_OBJ) $(LIBDLOCK_A)
	$(CC) $(ALL_LDFLAGS) -o $@ $^ $(CRIT_LIBS) $(HARNESS_LIBS) $(SSL_LIBS) -lpthread
$(O)/tests/test_layout: $(O)/tests/test_layout.o $(HARNESS_OBJ) \
                        $(PROTO_OBJ)
	$(CC) $(ALL_LDFLAGS) -o $@ $^ $(CRIT_LIBS) $(HARNESS_LIBS) -lpthread
$(O)/tests/test_access: $(O)/tests/test_access.o $(HARNESS_OBJ) \
                        $(PROTO_OBJ)
	$(CC) $(ALL_LDFLAGS) -o $@ $^ $(CRIT_LIBS) $(HARNESS_LIBS) -lpthread
$(O)/tests/test_lease_end: $(O)/tests/test_lease_end.o $(HARNESS_OBJ) \
                           $(PROTO_OBJ)
	$(CC) $(ALL_LDFLAGS) -o $@ $^ $(CRIT_LIBS) $(HARNESS_LIBS) -lpthread
$(O)/tests/test_cli: $(O)/tests/test_cli.o $(HARNESS_OBJ) \
                     $(PROTO_OBJ)
	$(CC) $(ALL_LDFLAGS) -o $@ $^ $(CRIT_LIBS) $(HARNESS_LIBS) -lpthread
$(O)/tests/test_watch: $(O)/tests/test_watch.o $(HARNESS_OBJ) \
                       $(PROTO_OBJ)
	$(CC) $(ALL_LDFLAGS) -o $@ $^ $(CRIT_LIBS) $(HARNESS_LIBS) -lpthread
$(O)/tests/test_coord: $(O)/tests/test_coord.o $(HARNESS_OBJ) \
                       $(PROTO_OBJ)
	$(CC) $(ALL_LDFLAGS) -o $@ $^ $(CRIT_LIBS) $(HARNESS_LIBS) -lpthread
$(O)/tests/test_multi: $(O)/tests/test_multi.o $(HARNESS_OBJ) \
                       $(PROTO_OBJ)
	$(CC) $(ALL_LDFLAGS) -o $@ $^ $(CRIT_LIBS) $(HARNESS_LIBS) -lpthread
$(O)/tests/test_partition: $(O)/tests/test_partition.o $(HARNESS_OBJ) \
                           $(PROTO_OBJ)
	$(CC) $(ALL_LDFLAGS) -o $@ $^ $(CRIT_LIBS) $(HARNESS_LIBS) -lpthread
$(O)/tests/test_rcluster: $(O)/tests/test_rcluster.o $(HARNESS_OBJ) \
                          $(PROTO_OBJ)
	$(CC) $(ALL_LDFLAGS) -o $@ $^ $(CRIT_LIBS) $(HARNESS_LIBS) -lpthread
# libdlock and dlock against a partitioned service.
$(O)/tests/test_route: $(O)/tests/test_route.o $(HARNESS_OBJ) $(LIBDLOCK_A)
	$(CC) $(ALL_LDFLAGS) -o $@ $^ $(CRIT_LIBS) $(HARNESS_LIBS) $(SSL_LIBS) -lpthread

# Criterion forks one process per test; -j1 keeps integration tests (which
# start daemons on their own ports) from crowding the two cores.
CRIT_ARGS ?= --jobs 2
unit: $(addprefix $(O)/tests/,$(UNIT_TESTS))
	@set -e; for t in $(UNIT_TESTS); do echo "== $$t"; \
	  $(O)/tests/$$t $(CRIT_ARGS); done

# Suites that run twice, with persistence off and on (suite-<name>.redis):
# the same behaviour is required of both.
REDIS_TOO := test_server test_describe test_watch test_lease_end \
             test_coord test_multi
INTEG_RUNS := $(INTEG_TESTS) $(addsuffix .redis,$(REDIS_TOO)) \
              test_conformance.parts
INTEG_ENV = DLOCKD=$(O)/dlockd DLOCK=$(O)/dlock DLOCK_EXAMPLES=$(O)/examples \
            LSAN_OPTIONS=suppressions=$(CURDIR)/tests/lsan.supp
integ: all $(addprefix $(O)/tests/,$(INTEG_TESTS))
	@$(MAKE) --no-print-directory $(addprefix suite-,$(INTEG_RUNS))

# Each with the shell its first line names (bash or sh).
scripts: $(O)/dlockd $(O)/dlock
	@set -e; for s in tests/scripts/*.sh; do echo "== $$s"; \
	  case $$(head -1 $$s) in *bash*) i=bash ;; *) i=sh ;; esac; \
	  DLOCKD=$(O)/dlockd DLOCK=$(O)/dlock $$i $$s; done

# One suite, named suite-<binary> (suite-test_server.redis: test_server
# with persistence on, DL_TEST_PERSIST=redis; suite-test_conformance.parts:
# the scenarios on a partitioned service): its output goes to
# $(O)/tests/<suite>.log and is shown when it fails; otherwise its summary
# and how long it took. Unit suites run CRIT_ARGS tests at a time. Each
# integration test starts its own Redis and daemons on ports of its own;
# those of WAITING_SUITES mostly wait for leases and leaderships to run
# out, and run INTEG_JOBS at a time (test_ha under the sanitizers took
# 400 s one at a time, 143 s three at a time, with a load average under
# 0.5 on two cores); the others, one at a time (their stress tests need
# the CPU: a PING after 400 connections' worth of output waited more
# than 5 s beside five other tests).
INTEG_JOBS ?= 1
WAITING_SUITES := test_ha test_persist test_forget test_cli test_client \
                  test_conformance.parts
suite-%:
	@t=$*; set --; case $$t in *.redis) t=$${t%.redis}; \
	  set -- DL_TEST_PERSIST=redis;; *.parts) t=$${t%.parts}; \
	  set -- DL_CONFORMANCE_PARTS=1;; esac; \
	case " $(UNIT_TESTS) " in *" $$t "*) j="$(CRIT_ARGS)";; \
	  *) case " $(WAITING_SUITES) " in *" $$t "* | *" $* "*) \
	    j="--jobs $(INTEG_JOBS)";; *) j="--jobs 1";; esac;; esac; \
	start=$$(date +%s); \
	if env "$$@" $(INTEG_ENV) $(O)/tests/$$t $$j > $(O)/tests/$*.log 2>&1; \
	then echo "== $*: $$(grep 'Synthesis: ' $(O)/tests/$*.log | \
	  tail -n 1 | sed 's/^.*Synthesis: //; s/ *$$//'), in $$(( $$(date +%s) - start )) s"; \
	else cat $(O)/tests/$*.log; echo "== $*: FAILED"; exit 1; fi

# The contributors' loop: the unit suites and the integration suites
# that take seconds rather than minutes -- the protocol (test_server,
# persistence off), libdlock, dlock, users and rights, the operator's
# tools, the conformance scenarios. Left to test-all and make check:
# suites that start Redis replicas and Sentinels, kill and pause daemons
# or wait out leases, the scripts, the sanitizers, the fault campaign and
# fuzzing. TEST_JOBS suites at a time.
QUICK_INTEG := test_server test_client test_cli test_access test_ops \
               test_conformance
QUICK_SUITES := $(UNIT_TESTS) $(QUICK_INTEG)
TEST_JOBS ?= 3
test: all $(addprefix $(O)/tests/,$(QUICK_SUITES))
	@$(MAKE) --no-print-directory -j$(TEST_JOBS) \
	  $(addprefix suite-,$(QUICK_SUITES))

# Every suite and script of the build in $(O), TEST_JOBS suites at a time,
# the longest first so that the last to start are short; then the suites
# that measure the daemon against Redis's pace with a tight redis_timeout
# (test_layout: a bucket of 120,000 locks re-synced, leases expiring
# between re-sync calls), alone: beside another sanitized suite on two
# cores they missed their bounds.
SOLO_SUITES := test_layout
ALL_SUITES := test_ha test_persist test_forget test_faults test_cli \
              test_client \
              test_access test_tls test_server.redis \
              test_server test_describe.redis test_describe test_deadlock \
              test_watch.redis test_watch test_ops test_conformance \
              test_conformance.parts \
              test_lease_end.redis test_lease_end test_coord.redis \
              test_coord test_multi.redis test_multi test_partition \
              test_rcluster test_route \
              $(UNIT_TESTS)
test-bins: all $(TEST_BINS)
test-all: test-bins
	@$(MAKE) --no-print-directory -j$(TEST_JOBS) \
	  $(addprefix suite-,$(ALL_SUITES))
	@$(MAKE) --no-print-directory $(addprefix suite-,$(SOLO_SUITES))
	@$(MAKE) --no-print-directory scripts

# The Python client (client/python): its tests and the conformance
# scenarios' Python runner, against this build's dlockd. Debian's Python:
# the packages below (DEB_PKGS) install pytest there.
PYTHON ?= /usr/bin/python3
pytest: $(O)/dlockd $(O)/dlock
	DLOCKD=$(O)/dlockd DLOCK=$(O)/dlock $(PYTHON) -m pytest -q tests/python

# The Go client (client/go): go vet, then its tests under the race
# detector against this build's dlockd. Debian's Go (golang-go, in
# DEB_PKGS), offline (no module is fetched: it uses the standard library
# only), its caches under $(O).
GO ?= go
GO_CACHE_ENV = HOME=$(abspath $(O))/go/home \
  GOCACHE=$(abspath $(O))/go/cache GOPATH=$(abspath $(O))/go/path \
  GOFLAGS=-mod=mod GOPROXY=off
GO_ENV = cd client/go && $(GO_CACHE_ENV)
gotest: $(O)/dlockd
	$(GO_ENV) $(GO) vet ./...
	$(GO_ENV) DLOCKD=$(abspath $(O)/dlockd) $(GO) test -race -count=1 ./...

# The Java client (client/java, its rules in client/java/java.mk): make
# java builds $(O)/java/dlockd.jar with Debian's JDK (javac --release 17,
# no warning), make javatest runs its JUnit 5 tests (Debian's junit5)
# against this build's dlockd.
include client/java/java.mk

# The conformance scenarios on a partitioned service in the Go, Java and
# Python runners (DL_CONFORMANCE_PARTS=1: Redis and partitions p0, p1, p2,
# the clients knowing p0, each scenario's names on p1 or p2), about 70 s
# in all. make check runs the C runner's (test_conformance.parts) and
# leaves these to this target, to stay near ten minutes.
conformance-parts: $(O)/dlockd $(O)/dlock javatest-parts
	$(GO_ENV) DLOCKD=$(abspath $(O)/dlockd) DL_CONFORMANCE_PARTS=1 \
	  $(GO) test -race -count=1 -parallel 3 -run '^TestConformance$$' ./...
	DLOCKD=$(O)/dlockd DLOCK=$(O)/dlock DL_CONFORMANCE_PARTS=1 \
	  $(PYTHON) -m pytest -q tests/python/test_conformance.py

# The front door for CI and for people: packages, a normal build with its
# unit tests, then the whole suite under AddressSanitizer and UBSan.
check: deps
	$(MAKE) lint
	$(MAKE) -j2 all bench-bins
	$(MAKE) -j2 SAN=1 test-bins
	$(MAKE) SAN=1 TEST_JOBS=3 INTEG_JOBS=3 test-all
	$(MAKE) pytest
	$(MAKE) gotest
	$(MAKE) javatest
	$(MAKE) faults-short
	$(MAKE) fuzz-smoke

# ---- Debian packages -----------------------------------------------------------

DEB_PKGS := gcc make pkg-config libuv1-dev libhiredis-dev libinih-dev \
            libssl-dev openssl \
            libcriterion-dev redis-server redis-tools redis-sentinel \
            netcat-openbsd stunnel4 jq \
            systemd man-db faketime iproute2 nftables clang \
            libclang-rt-14-dev clang-format \
            build-essential dpkg-dev debhelper fakeroot lintian \
            dh-python python3 python3-all python3-setuptools python3-build \
            python3-wheel pybuild-plugin-pyproject python3-pytest \
            python3-pytest-asyncio python3-redis golang-go \
            default-jdk-headless junit5

deps:
	@missing=""; for p in $(DEB_PKGS); do \
	  dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q 'ok installed' \
	    || missing="$$missing $$p"; done; \
	if [ -z "$$missing" ]; then exit 0; fi; \
	echo "make deps: installing Debian packages:$$missing"; \
	if [ "$$(id -u)" = 0 ]; then SUDO=; \
	elif command -v sudo >/dev/null; then SUDO=sudo; \
	else echo "make deps: not root and no sudo; run as root:"; \
	  echo "  apt-get install -y$$missing"; exit 1; fi; \
	export DEBIAN_FRONTEND=noninteractive; \
	$$SUDO apt-get install -y --no-install-recommends $$missing \
	  || { $$SUDO apt-get update && \
	       $$SUDO apt-get install -y --no-install-recommends $$missing; }

# ---- run ---------------------------------------------------------------------

# A private redis-server (own session, so Ctrl-C reaches only dlockd, which
# drains; the trap then stops Redis) with its data under run/ (git-ignored),
# reached over a unix socket; dlockd in the foreground on 127.0.0.1:7420.
RUN_DIR := $(CURDIR)/run
# make run PORT=7421: dlockd on another port (the private Redis listens
# on a unix socket only, so two trees' make run do not clash there).
PORT = 7420
run: deps
	$(MAKE) all
	@mkdir -p $(RUN_DIR)/redis; sock=$(RUN_DIR)/redis.sock; rm -f $$sock; \
	setsid redis-server $(CURDIR)/conf/redis.conf --dir $(RUN_DIR)/redis \
	  --unixsocket $$sock > $(RUN_DIR)/redis.log 2>&1 & rpid=$$!; \
	trap 'kill $$rpid 2>/dev/null; wait $$rpid 2>/dev/null' EXIT INT TERM; \
	i=0; while [ ! -S $$sock ]; do i=$$((i+1)); sleep 0.05; \
	  if [ $$i -gt 200 ]; then echo "make run: redis-server did not" \
	    "start, see run/redis.log"; exit 1; fi; done; \
	echo "make run: redis-server pid $$rpid on $$sock (data in run/redis)"; \
	echo "make run: dlockd on 127.0.0.1:$(PORT) -- try: nc 127.0.0.1 $(PORT);" \
	  "Ctrl-C stops both"; \
	$(O)/dlockd -c conf/dlockd.conf --redis unix://$$sock \
	  --state-dir $(RUN_DIR) --port $(PORT)

# The highly available setup on one machine (conf/run-ha.sh): Redis with
# two replicas and three Sentinels, two dlockd (active and standby).
run-ha: deps
	$(MAKE) all
	BUILD=$(CURDIR)/$(O) bash conf/run-ha.sh

# A partitioned service on one machine (conf/run-cluster.sh): a Redis
# Cluster of 3 primaries and 3 replicas, 3 partitions each with an
# active and a standby dlockd.
run-cluster: deps
	$(MAKE) all
	BUILD=$(CURDIR)/$(O) bash conf/run-cluster.sh

# Coverage-guided fuzzing (clang's libFuzzer), three targets:
#   fuzz_proto   the wire codec;
#   fuzz_engine  request streams through codec, dispatch, lock table, wheel
#                and store (no sockets, a fake clock), invariants checked
#                after every step;
#   fuzz_client  libdlock's handling of replies and events.
# make fuzz FUZZ_SECONDS=600 runs each that long (crashes: build/fuzz/);
# make fuzz-smoke, part of make check, runs each briefly from its seed
# corpus in tests/fuzz/corpus/{proto,engine,client} (keep crash inputs
# there, fixed).
FUZZ_SECONDS ?= 60
FUZZ_SMOKE_SECONDS ?= 10
FUZZ_CC = clang -std=c11 -D_GNU_SOURCE -I. -g -O1 \
          -fsanitize=fuzzer,address,undefined -DDL_VERSION=\"$(VERSION)\"
FUZZ_ENGINE_SRC := $(filter-out server/conn.c server/conn_budget.c \
                     server/server.c server/tls.c \
                     server/metrics.c server/notify.c,$(SERVER_SRC)) \
                   $(PROTO_SRC)
FUZZ_TARGETS := fuzz_proto fuzz_engine fuzz_client

build/fuzz/fuzz_proto: tests/fuzz/fuzz_proto.c $(PROTO_SRC)
	@mkdir -p $(@D)
	$(FUZZ_CC) $^ -o $@
build/fuzz/fuzz_engine: tests/fuzz/fuzz_engine.c $(FUZZ_ENGINE_SRC)
	@mkdir -p $(@D)
	$(FUZZ_CC) $(DEP_CFLAGS) $^ -o $@ $(DEP_LIBS)
build/fuzz/fuzz_client: tests/fuzz/fuzz_client.c $(CLIENT_SRC) $(PROTO_SRC)
	@mkdir -p $(@D)
	$(FUZZ_CC) $(SSL_CFLAGS) $^ -o $@ $(SSL_LIBS) -lpthread

fuzz: $(addprefix build/fuzz/,$(FUZZ_TARGETS))
	bash tests/fuzz/run.sh $(FUZZ_SECONDS)

fuzz-smoke:
	@if ! command -v clang >/dev/null || \
	    ! echo 'int LLVMFuzzerTestOneInput(const char *d, long n) { return 0; }' | \
	      clang -x c -fsanitize=fuzzer - -o /dev/null 2>/dev/null; then \
	  echo "fuzz-smoke: clang with libFuzzer is missing (apt-get install clang libclang-rt-14-dev): skipped"; \
	else $(MAKE) -j2 $(addprefix build/fuzz/,$(FUZZ_TARGETS)) && \
	  bash tests/fuzz/run.sh $(FUZZ_SMOKE_SECONDS); fi

# ---- the fault campaign (tests/faults) -----------------------------------------

# Lock workers (libdlock) and the history checker. The campaign drives the
# build's dlockd and dlock; make faults uses the normal build, the short
# campaign of make check the one being checked.
$(O)/faults/worker: tests/faults/worker.c $(LIBDLOCK_A)
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS) $(ALL_CFLAGS) $(ALL_LDFLAGS) -o $@ $< $(LIBDLOCK_A) \
	  $(SSL_LIBS) -lpthread
$(O)/faults/check: tests/faults/check.c
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS) $(ALL_CFLAGS) $(ALL_LDFLAGS) -o $@ $<

# The Go client's worker (tests/faults/goworker: its own module, on
# client/go by a replace), built offline as gotest builds.
$(O)/faults/goworker: tests/faults/goworker/main.go tests/faults/goworker/go.mod \
                      $(wildcard client/go/*.go)
	@mkdir -p $(@D)
	cd tests/faults/goworker && $(GO_CACHE_ENV) $(GO) build -o $(abspath $@) .

# The Java client's worker (tests/faults/javaworker): a class directory,
# run as java -cp $(O)/java/dlockd.jar:$@ JavaWorker lock ...
$(O)/faults/javaworker: tests/faults/javaworker/JavaWorker.java $(JAVA_OUT)/dlockd.jar
	rm -rf $@ && mkdir -p $@
	$(JAVAC) $(JAVAC_FLAGS) -cp $(JAVA_OUT)/dlockd.jar -d $@ $<

FAULT_BINS = $(O)/dlockd $(O)/dlock $(O)/faults/worker $(O)/faults/check \
             $(O)/faults/goworker $(O)/faults/javaworker
FAULT_ENV = DLOCKD=$(O)/dlockd DLOCK=$(O)/dlock WORKER=$(O)/faults/worker \
            CHECK=$(O)/faults/check PYTHON=$(PYTHON) \
            GOWORKER=$(O)/faults/goworker JAVA=$(JAVA) \
            JAVAWORKER=$(O)/faults/javaworker DLOCKD_JAR=$(O)/java/dlockd.jar

# The checker judged on hand-written histories (tests/faults/fixtures).
faults-check-test: $(O)/faults/check
	@CHECK=$(O)/faults/check sh tests/faults/check_test.sh

# make faults FAULT_MINUTES=30 [SEED=n]: a long campaign, every fault kind.
FAULT_MINUTES ?= 30
faults: deps
	$(MAKE) $(FAULT_BINS)
	$(FAULT_ENV) DURATION=$$(($(FAULT_MINUTES) * 60)) \
	  bash tests/faults/campaign.sh

# The campaign on a partitioned service (tests/faults/campaign_parts.sh):
# a Redis Cluster of 3 primaries and 3 replicas, 3 partitions of an
# active and a standby; shard fail-overs, slot migrations and partition
# moves under load. make faults-parts FAULT_MINUTES=15 [SEED=n].
faults-parts: deps
	$(MAKE) $(O)/dlockd $(O)/dlock $(O)/faults/worker $(O)/faults/check
	DLOCKD=$(O)/dlockd DLOCK=$(O)/dlock WORKER=$(O)/faults/worker \
	  CHECK=$(O)/faults/check DURATION=$$(($(FAULT_MINUTES) * 60)) \
	  bash tests/faults/campaign_parts.sh

# Under a minute, for make check: a fixed seed, then a random one (printed).
faults-short: $(FAULT_BINS) faults-check-test
	$(FAULT_ENV) DURATION=20 SEED=20261123 bash tests/faults/campaign.sh
	$(FAULT_ENV) DURATION=20 bash tests/faults/campaign.sh

# The campaign must catch planted bugs: dlockd built to acknowledge grants
# before Redis has them, to restore leases by the wall clock, to let a
# reentry shrink a lease's TTL, to take a Redis that went back for the
# truth, or to let a client claim an owner id without its key; dlock
# whose guard stops with the command and stays stopped. The shared id is
# caught where worker 0 holds what a copycat asks for: its run keeps every
# worker on L0 (elections drew a quarter of them away, and it went
# uncaught at seeds 1 and 3).
faults-selftest: $(FAULT_BINS)
	$(MAKE) O=build/plant-ack CFLAGS=-DDL_PLANT_ACK_EARLY build/plant-ack/dlockd
	$(MAKE) O=build/plant-wall CFLAGS=-DDL_PLANT_WALL_RESTORE \
	  build/plant-wall/dlockd
	$(MAKE) O=build/plant-jobctl CFLAGS=-DDL_PLANT_STOP_MIRROR \
	  build/plant-jobctl/dlock
	$(FAULT_ENV) DLOCKD=build/plant-ack/dlockd DURATION=30 SEED=1 \
	  FAULTS="crash_in_partition" WORKERS=12 LOCKS=8 STALL_MS=450 \
	  bash tests/faults/campaign.sh; \
	  test $$? = 1 || { echo "faults-selftest: ack-before-durable not caught"; exit 1; }
	$(FAULT_ENV) DLOCKD=build/plant-wall/dlockd DURATION=30 SEED=1 \
	  FAULTS="clock_step" CLOCK_STEPS=forward bash tests/faults/campaign.sh; \
	  test $$? = 1 || { echo "faults-selftest: wall-clock restore not caught"; exit 1; }
	$(MAKE) O=build/plant-shrink CFLAGS=-DDL_PLANT_REENTRY_SHRINK \
	  build/plant-shrink/dlockd
	$(FAULT_ENV) DLOCKD=build/plant-shrink/dlockd DURATION=90 SEED=2 \
	  WORKER_TTLS=5000 LOCKS=1 RWLOCKS=0 SEMAPHORES=0 FAULTS="kill9_dlockd" \
	  bash tests/faults/campaign.sh; \
	  test $$? = 1 || { echo "faults-selftest: a reentry shrinking the TTL not caught"; exit 1; }
	$(MAKE) O=build/plant-forget CFLAGS=-DDL_PLANT_FORGET \
	  build/plant-forget/dlockd
	$(FAULT_ENV) DLOCKD=build/plant-forget/dlockd DURATION=30 SEED=1 \
	  FAULTS="forget_while_down" bash tests/faults/campaign.sh; \
	  test $$? = 1 || { echo "faults-selftest: a Redis that went back not caught"; exit 1; }
	$(MAKE) O=build/plant-close CFLAGS=-DDL_PLANT_SHORT_CLOSE \
	  build/plant-close/dlockd
	$(FAULT_ENV) DLOCKD=build/plant-close/dlockd DURATION=60 SEED=1 \
	  WORKER_TTLS=5000 FAULTS="forget_paused" bash tests/faults/campaign.sh; \
	  test $$? = 1 || { echo "faults-selftest: a closure that reopens early not caught"; exit 1; }
	$(MAKE) O=build/plant-owner CFLAGS=-DDL_PLANT_SHARED_OWNER \
	  build/plant-owner/dlockd
	$(FAULT_ENV) DLOCKD=build/plant-owner/dlockd DURATION=30 SEED=1 \
	  LOCKS=1 RWLOCKS=0 SEMAPHORES=0 ELECTIONS=0 FAULTS="kill_worker" \
	  bash tests/faults/campaign.sh; \
	  test $$? = 1 || { echo "faults-selftest: a shared owner id not caught"; exit 1; }
	$(FAULT_ENV) DLOCK=build/plant-jobctl/dlock DURATION=60 SEED=2 \
	  FAULTS="jobctl_run" bash tests/faults/campaign.sh; \
	  test $$? = 1 || { echo "faults-selftest: a stopped guard not caught"; exit 1; }
	@echo "faults-selftest: every planted bug caught"

# ---- install ----------------------------------------------------------------

MAN_PAGES := client/cli/dlock.1 server/dlockd.conf.5 server/dlockd.8
# The documents README.md lists, installed as docs/ beside it so that its
# links hold in the doc directory too.
DOC_PAGES := docs/guide.md docs/operations.md docs/security.md docs/ha.md \
  docs/testing.md docs/performance.md docs/inside.md docs/design.md

# An existing $(SYSCONFDIR)/dlockd/dlockd.conf is the operator's: never
# overwritten.
# dlock.pc and the unit carry install paths, so they are written here, with
# this install's PREFIX, never taken from an earlier build.
install: all
	install -d $(DESTDIR)$(SBINDIR) $(DESTDIR)$(BINDIR) \
	  $(DESTDIR)$(LIBDIR)/pkgconfig $(DESTDIR)$(INCLUDEDIR) \
	  $(DESTDIR)$(MANDIR)/man1 $(DESTDIR)$(MANDIR)/man5 \
	  $(DESTDIR)$(MANDIR)/man8 $(DESTDIR)$(SYSCONFDIR)/dlockd \
	  $(DESTDIR)$(UNITDIR) $(DESTDIR)$(DOCDIR) $(DESTDIR)$(DOCDIR)/docs \
	  $(DESTDIR)$(DATADIR)
	install -m 755 $(O)/dlockd $(DESTDIR)$(SBINDIR)/dlockd
	install -m 755 $(O)/dlock $(DESTDIR)$(BINDIR)/dlock
	install -m 644 $(LIBDLOCK_A) $(DESTDIR)$(LIBDIR)/libdlock.a
	install -m 755 $(LIBDLOCK_SO) $(DESTDIR)$(LIBDIR)/libdlock.so.$(SOVERSION)
	ln -sf libdlock.so.$(SOVERSION) $(DESTDIR)$(LIBDIR)/libdlock.so
	install -m 644 client/lib/dlock.h $(DESTDIR)$(INCLUDEDIR)/dlock.h
	sed -e 's|@PREFIX@|$(PREFIX)|; s|@LIBDIR@|$(LIBDIR)|' \
	    -e 's|@INCLUDEDIR@|$(INCLUDEDIR)|; s|@VERSION@|$(VERSION)|' \
	    client/lib/dlock.pc.in > $(DESTDIR)$(LIBDIR)/pkgconfig/dlock.pc
	install -m 644 client/cli/dlock.1 $(DESTDIR)$(MANDIR)/man1/dlock.1
	install -m 644 server/dlockd.conf.5 $(DESTDIR)$(MANDIR)/man5/dlockd.conf.5
	install -m 644 server/dlockd.8 $(DESTDIR)$(MANDIR)/man8/dlockd.8
	install -m 644 README.md $(DESTDIR)$(DOCDIR)/README.md
	install -m 644 CHANGELOG.md $(DESTDIR)$(DOCDIR)/CHANGELOG.md
	install -m 644 $(DOC_PAGES) $(DESTDIR)$(DOCDIR)/docs
	install -m 644 proto/PROTOCOL.md $(DESTDIR)$(DOCDIR)/PROTOCOL.md
	install -m 644 LICENSE $(DESTDIR)$(DOCDIR)/LICENSE
	install -m 644 conf/redis-dlockd.conf \
	  $(DESTDIR)$(DATADIR)/redis-dlockd.conf
	sed -e 's|@SBINDIR@|$(SBINDIR)|g; s|@SYSCONFDIR@|$(SYSCONFDIR)|g' \
	    systemd/dlockd.service.in > $(DESTDIR)$(UNITDIR)/dlockd.service
	@if [ -e $(DESTDIR)$(SYSCONFDIR)/dlockd/dlockd.conf ]; then \
	  echo "install: kept the existing $(DESTDIR)$(SYSCONFDIR)/dlockd/dlockd.conf"; \
	else \
	  echo "install -m 644 conf/dlockd.conf $(DESTDIR)$(SYSCONFDIR)/dlockd/dlockd.conf"; \
	  install -m 644 conf/dlockd.conf $(DESTDIR)$(SYSCONFDIR)/dlockd/dlockd.conf; \
	fi

# The configuration stays (it may hold the operator's changes).
uninstall:
	rm -f $(DESTDIR)$(SBINDIR)/dlockd $(DESTDIR)$(BINDIR)/dlock \
	  $(DESTDIR)$(LIBDIR)/libdlock.a $(DESTDIR)$(LIBDIR)/libdlock.so \
	  $(DESTDIR)$(LIBDIR)/libdlock.so.$(SOVERSION) \
	  $(DESTDIR)$(LIBDIR)/pkgconfig/dlock.pc $(DESTDIR)$(INCLUDEDIR)/dlock.h \
	  $(DESTDIR)$(MANDIR)/man1/dlock.1 $(DESTDIR)$(MANDIR)/man5/dlockd.conf.5 \
	  $(DESTDIR)$(MANDIR)/man8/dlockd.8 $(DESTDIR)$(UNITDIR)/dlockd.service \
	  $(DESTDIR)$(DOCDIR)/PROTOCOL.md $(DESTDIR)$(DATADIR)/redis-dlockd.conf \
	  $(DESTDIR)$(DOCDIR)/LICENSE $(DESTDIR)$(DOCDIR)/README.md \
	  $(DESTDIR)$(DOCDIR)/CHANGELOG.md \
	  $(addprefix $(DESTDIR)$(DOCDIR)/,$(DOC_PAGES))

# ---- Debian packages and the Python client -------------------------------------

# make deb: the packages of debian/ (dlockd, dlock, libdlock0, libdlock-dev
# and, once client/python/pyproject.toml exists, python3-dlockd), built by
# dpkg-buildpackage from a copy of the tree's files (tracked and new, not
# ignored; without git, all but build/ and run/), so that the build and
# its clean never touch this checkout.
# Everything lands in build/deb; lintian must find no error or warning.
DEB_OUT := build/deb
DEB_SRC := $(DEB_OUT)/dlockd-$(VERSION)
DEB_PROFILES := $(if $(wildcard client/python/pyproject.toml),,-Pnopython)
# The distribution's tools only, as in a build chroot: a python3 of one's
# own earlier in PATH (pyenv, a virtualenv) has not Debian's modules.
DEB_PATH := /usr/sbin:/usr/bin:/sbin:/bin
deb: deps
	@sh tests/scripts/version.sh
	rm -rf $(DEB_OUT)
	mkdir -p $(DEB_SRC)
	if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then \
	  git ls-files -z --cached --others --exclude-standard; \
	else find . \( -path ./build -o -path ./run -o -path ./.git \) -prune \
	  -o \( -type f -o -type l \) -print0; fi | \
	  tar --null -T - --ignore-failed-read -cf - 2>/dev/null | \
	  tar -x -C $(DEB_SRC)
	cd $(DEB_SRC) && PATH=$(DEB_PATH) dpkg-buildpackage -us -uc -j2 \
	  $(DEB_PROFILES)
	lintian --allow-root --fail-on error,warning --info --display-info \
	  $(DEB_OUT)/dlockd_$(VERSION)_*.changes

# make deb-test (as root): install the packages on this machine, check
# where everything lands, run the installed daemon as its unit would
# against a private redis-server, take locks with the installed clients,
# then remove and purge (tests/deb/install_test.sh says what is checked).
# It changes the system, so make check does not run it; .ci/run does.
deb-test: deb
	sh tests/deb/install_test.sh $(DEB_OUT)

# The Python client's source distribution and wheel, from Debian's
# python3 and python3-build without a virtual environment, in build/python
# (setuptools' own build/ and *.egg-info in client/python are removed). Their
# version is the Makefile's (tests/scripts/version.sh checks it).
PY_OUT := build/python
sdist wheel: deps
	@test -f client/python/pyproject.toml || \
	  { echo "make $@: there is no client/python/pyproject.toml"; exit 1; }
	@sh tests/scripts/version.sh
	@mkdir -p $(PY_OUT)
	cd client/python && /usr/bin/python3 -m build --no-isolation --$@ \
	  --outdir $(CURDIR)/$(PY_OUT)
	rm -rf client/python/build client/python/*.egg-info

clean:
	rm -rf build

# The C sources as .clang-format says (clang-format 14, make deps); make
# check fails on any difference, and make format applies it.
FORMAT_SRC = proto/*.[ch] server/*.[ch] server/locktab/*.[ch] \
             server/store/*.[ch] client/lib/*.[ch] client/cli/*.[ch] \
             tests/*.[ch] tests/*/*.[ch]
format:
	clang-format -i $(FORMAT_SRC)
format-check:
	@clang-format --dry-run -Werror $(FORMAT_SRC) || \
	  { echo "format-check: run make format (clang-format 14)"; exit 1; }

# Habits make check keeps: the format, and no constant left without a
# use (tests/scripts/dead.sh). make shape prints the code's shape (files
# over 800 lines, functions over 80, the largest structs) for review.
lint: format-check
	@command -v gofmt >/dev/null || { echo "lint: no gofmt (make deps)"; exit 1; }
	@out=$$(gofmt -l client/go tests/faults/goworker tests/bench/gobench \
	  tests/bench/etcdbench); \
	  test -z "$$out" || \
	  { echo "gofmt: $$out (run gofmt -w on it)"; exit 1; }
	@bash tests/scripts/dead.sh
	@bash tests/scripts/doc_paths.sh
shape:
	@bash tests/scripts/shape.sh

# ---- benchmarks (on demand) ------------------------------------------------------

# The load generator links only the codec (never libdlock), and OpenSSL
# for the TLS rows. make bench
# always measures the normal build in build/ (no sanitizers), whatever SAN
# or O say; the table goes to build/bench/results.txt.
$(O)/tests/bench/bench: $(O)/tests/bench/bench.o $(PROTO_OBJ)
	$(CC) $(ALL_LDFLAGS) -o $@ $^ $(SSL_LIBS)

# The client libraries' drivers of make bench-clients (tests/bench/clients.py).
$(O)/tests/bench/clientbench: $(O)/tests/bench/clientbench.o $(LIBDLOCK_A)
	$(CC) $(ALL_LDFLAGS) -o $@ $^ $(SSL_LIBS) -lpthread
$(O)/tests/bench/javabench: tests/bench/javabench/JavaBench.java $(JAVA_OUT)/dlockd.jar
	rm -rf $@ && mkdir -p $@
	$(JAVAC) $(JAVAC_FLAGS) -cp $(JAVA_OUT)/dlockd.jar -d $@ $<
# dlockd against etcd's lock service (v3lock) at equal durability, by its
# JSON gateway and by gRPC (tests/bench/etcd.py; the table goes to
# build/bench/etcd.txt). Needs Debian's etcd-server, which make deps does
# not install: it is for this comparison only.
$(O)/tests/bench/etcdbench: tests/bench/etcdbench/main.go tests/bench/etcdbench/go.mod
	@mkdir -p $(@D)
	cd tests/bench/etcdbench && $(GO_CACHE_ENV) $(GO) build -o $(abspath $@) .
bench-etcd:
	@command -v etcd >/dev/null || \
	  { echo "bench-etcd: no etcd (apt-get install etcd-server)"; exit 1; }
	$(MAKE) SAN= O=build all build/tests/bench/clientbench \
	  build/tests/bench/gobench build/tests/bench/etcdbench
	DLOCKD=build/dlockd CLIENTBENCH=build/tests/bench/clientbench \
	  GOBENCH=build/tests/bench/gobench ETCDBENCH=build/tests/bench/etcdbench \
	  $(PYTHON) tests/bench/etcd.py --out build/bench/etcd.txt
$(O)/tests/bench/gobench: tests/bench/gobench/main.go tests/bench/gobench/go.mod \
                          $(wildcard client/go/*.go)
	@mkdir -p $(@D)
	cd tests/bench/gobench && $(GO_CACHE_ENV) $(GO) build -o $(abspath $@) .

$(O)/tests/bench/fcall: $(O)/tests/bench/fcall.o $(O)/server/store/bucket.o
	$(CC) $(ALL_LDFLAGS) -o $@ $^ $(DEP_LIBS)

$(O)/tests/bench/htab: $(O)/tests/bench/htab.o $(O)/server/locktab/htab.o
	$(CC) $(ALL_LDFLAGS) -o $@ $^

# What the deadlock check costs a LOCK that would wait (docs/performance.md).
$(O)/tests/bench/deadlock: $(O)/tests/bench/deadlock.o $(LOCKTAB_OBJ) $(PROTO_OBJ)
	$(CC) $(ALL_LDFLAGS) -o $@ $^

# What a lock change costs to find its watchers (docs/performance.md);
# make bench-watch [WATCH_EVENTS=n].
$(O)/tests/bench/watch: $(O)/tests/bench/watch.o $(O)/server/watchreg.o \
                        $(O)/server/locktab/htab.o
	$(CC) $(ALL_LDFLAGS) -o $@ $^
WATCH_EVENTS ?= 1000000
bench-watch:
	$(MAKE) SAN= O=build build/tests/bench/watch
	build/tests/bench/watch $(WATCH_EVENTS)

# A Python benchmark of tests/bench against the normal build's dlockd:
# $(PYBENCH) <script>.py <args>.
PYBENCH = $(MAKE) SAN= O=build build/dlockd && \
          DLOCKD=build/dlockd $(PYTHON) tests/bench/

# What watchers that never read cost everyone else (docs/security.md);
# make bench-slow-watchers [SLOW_WATCHERS=n] [SLOW_PAIRS=n].
SLOW_WATCHERS ?= 100
SLOW_PAIRS ?= 20000
bench-slow-watchers:
	$(PYBENCH)slowwatch.py $(SLOW_WATCHERS) $(SLOW_PAIRS)

# What one user's long wait chain costs another user's PINGs, with and
# without the deadlock-check budget (docs/security.md);
# make bench-deadlock-tenant [CHAIN_OWNERS=n] [CHAIN_SECONDS=s].
CHAIN_OWNERS ?= 990
CHAIN_SECONDS ?= 5
bench-deadlock-tenant:
	$(PYBENCH)deadlock_tenant.py $(CHAIN_OWNERS) $(CHAIN_SECONDS)

# What one address's TLS handshakes cost, with and without
# max_connects_per_address (docs/security.md);
# make bench-tls-flood [TLS_FLOOD_SECONDS=s] [TLS_FLOOD_THREADS=n].
TLS_FLOOD_SECONDS ?= 5
TLS_FLOOD_THREADS ?= 4
bench-tls-flood:
	$(PYBENCH)tlsflood.py $(TLS_FLOOD_SECONDS) $(TLS_FLOOD_THREADS)

# The C benchmarks, built (not run) by make check so that they cannot rot.
BENCH_BINS := $(addprefix $(O)/tests/bench/,bench fcall htab deadlock watch \
                authflood outflood clientbench gobench javabench \
                etcdbench)
bench-bins: $(BENCH_BINS)

# Password guesses per second one host gets (docs/security.md); by hand:
# authflood <port> [connections] [seconds] [source addresses].
$(O)/tests/bench/authflood: $(O)/tests/bench/authflood.o
	$(CC) $(ALL_LDFLAGS) -o $@ $^
# What clients that pipeline and never read cost (docs/operations.md,
# Limits):
# outflood <port> <dlockd pid> [connections] [seconds].
$(O)/tests/bench/outflood: $(O)/tests/bench/outflood.o
	$(CC) $(ALL_LDFLAGS) -o $@ $^

bench:
	$(MAKE) SAN= O=build all build/tests/bench/bench build/tests/bench/fcall \
	  build/tests/bench/htab
	DLOCKD=build/dlockd BENCH=build/tests/bench/bench \
	  FCALL=build/tests/bench/fcall HTAB=build/tests/bench/htab \
	  OUT=build/bench \
	  sh tests/bench/run.sh
	@[ -n "$(BENCH_ONLY)" ] || $(MAKE) --no-print-directory bench-python
	@[ -n "$(BENCH_ONLY)" ] || $(MAKE) --no-print-directory bench-clients

# How long an election hands over (tests/bench/election.py): a leader's
# resign and its kill -9, at the default TTL (30s) and at 5s.
bench-election:
	$(MAKE) SAN= O=build all
	DLOCKD=build/dlockd DLOCK=build/dlock python3 tests/bench/election.py

# Fail-overs in a row: how soon each new active answers its first
# TRYLOCK (tests/bench/failover.py).
bench-failover:
	$(MAKE) SAN= O=build all
	DLOCKD=build/dlockd python3 tests/bench/failover.py

# Several locks at once (LOCK a b ...) against as many LOCKs and the
# Redis recipe's SET NX one after the other, k = 2, 8, 64
# (tests/bench/multilock.py).
bench-multilock:
	$(MAKE) SAN= O=build all
	DLOCKD=build/dlockd python3 tests/bench/multilock.py

# The client libraries side by side on one daemon: pairs/s and contended
# hand-offs through libdlock, Go (and Java) (tests/bench/clients.py; the
# table goes to build/bench/clients.txt).
bench-clients:
	$(MAKE) SAN= O=build all build/tests/bench/clientbench \
	  build/tests/bench/gobench build/tests/bench/javabench
	DLOCKD=build/dlockd CLIENTBENCH=build/tests/bench/clientbench \
	  GOBENCH=build/tests/bench/gobench \
	  JAVABENCH="$(JAVA) -cp build/java/dlockd.jar:build/tests/bench/javabench JavaBench" \
	  $(PYTHON) tests/bench/clients.py --out build/bench/clients.txt

# The Python client against redis-py's Lock on a Redis of equal durability
# (tests/bench/pybench.py; the table goes to build/bench/python.txt).
bench-python:
	$(PYBENCH)pybench.py --out build/bench/python.txt

# What partitions cost and buy, on a Redis Cluster (docs/performance.md).
bench-partitions:
	$(MAKE) SAN= O=build all build/tests/bench/bench
	DLOCKD=build/dlockd BENCH=build/tests/bench/bench \
	  bash tests/bench/partitions.sh

# What bounds the durable pairs on a small machine (docs/performance.md).
bench-bound:
	$(MAKE) SAN= O=build all build/tests/bench/bench
	DLOCKD=build/dlockd BENCH=build/tests/bench/bench \
	  sh tests/bench/bound.sh

# The deadlock check's worst case, on the lock table alone
# (docs/performance.md).
bench-deadlock:
	$(MAKE) SAN= O=build build/tests/bench/deadlock
	build/tests/bench/deadlock

# (build/deb holds the package build's own tree, with its own .d files.)
-include $(shell find $(O) -path build/deb -prune -o -name '*.d' -print \
            2>/dev/null)
