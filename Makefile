# mq: a durable message queue as small Unix programs over SQLite (and,
# built with libpq, PostgreSQL).

PREFIX ?= /usr/local
BINDIR ?= $(PREFIX)/bin
MANDIR ?= $(PREFIX)/share/man
BASHCOMPDIR ?= $(PREFIX)/share/bash-completion/completions
ZSHCOMPDIR ?= $(PREFIX)/share/zsh/site-functions
FISHCOMPDIR ?= $(PREFIX)/share/fish/vendor_completions.d
EXAMPLEDIR ?= $(PREFIX)/share/doc/mq/examples
PKG_CONFIG ?= pkg-config

CFLAGS ?= -O2 -g
override CFLAGS := -std=c11 -D_DEFAULT_SOURCE -D_GNU_SOURCE \
	-Wall -Wextra -Wshadow -Wstrict-prototypes -Wmissing-prototypes \
	-Wno-unused-parameter $(CFLAGS)
# Asked when a recipe runs, not when make starts: t/deps.sh (below) may
# have installed them in between.
DEPCFLAGS = $(shell $(PKG_CONFIG) --cflags sqlite3 libbsd-overlay)
DEPLIBS = $(shell $(PKG_CONFIG) --libs sqlite3 libbsd-overlay)
# The PostgreSQL backend is built when libpq's header is there (PG=no:
# never); $(B)/pgflags says whether it was, and changes only when that
# does.  It is not linked with libpq but loads it when a PostgreSQL
# database is opened (common/pg/pq.c): loading it at every start cost
# 10 ms of CPU, SQLite or not.  dlopen is in glibc's libc since 2.34;
# an older one wants LDLIBS=-ldl.
PG ?= auto
PGFLAGS = $(shell cat $(B)/pgflags 2>/dev/null)

B ?= build
PROGS = mq-send mq-recv mq-ack mq-topic mq-replay mq-purge mq-lag
LIBSRC = common/err.c common/parse.c common/cli.c common/sig.c common/host.c \
	common/admin.c common/header.c \
	common/policy.c common/backend.c common/follow.c common/exec.c \
	common/out.c common/input.c common/table.c common/lag.c common/list.c \
	common/replay.c common/outbox.c \
	common/sqlite/sqlite.c common/sqlite/open.c common/sqlite/engine.c common/sqlite/topic.c \
	common/sqlite/deliver.c common/sqlite/log.c common/sqlite/wait.c \
	common/sqlite/combine.c common/sqlite/mark.c common/sqlite/backup.c \
	common/sqlite/outbox.c common/sqlite/appdb.c
PGSRC = common/pg/pg.c common/pg/topic.c common/pg/deliver.c \
	common/pg/log.c common/pg/wait.c common/pg/mark.c common/pg/outbox.c \
	common/pg/combine.c common/pg/pq.c
LIBOBJ = $(LIBSRC:common/%.c=$(B)/%.o)
PGOBJ = $(PGSRC:common/%.c=$(B)/%.o)
HDRS = common/mq.h common/atomic.h common/backend.h common/sqlite/sq.h common/sqlite/shm.h
BINS = $(PROGS:%=$(B)/%)
MAN1 = $(PROGS:%=man/%.1)

# The tests' own tools: a fault injector, a kernel without FUTEX_WAITV
# and a power-cut recorder (LD_PRELOAD shims), and the tool that rebuilds
# files after a power cut.
TOOLS = $(B)/t/faultshim.so $(B)/t/oldkernel.so $(B)/t/pcshim.so \
	$(B)/t/powercut

all: $(BINS)

# Nothing is compiled before t/deps.sh has found what the build needs:
# plain make only says what is missing (and the apt-get line that adds
# it); make demo, make test and make lint install it when run as root.
NEED = check build
demo: NEED = install build
test test-asan check fuzz-check: NEED = install test
lint: NEED = install lint

need:
	@sh t/deps.sh $(NEED)

$(B)/schema.h $(LIBOBJ) $(PGOBJ) $(BINS) $(TOOLS): | need

$(B)/pgflags: FORCE | need
	@mkdir -p $(B); f=; \
	if [ "$(PG)" != no ] && $(PKG_CONFIG) --exists libpq; then \
		f="-DMQ_PG $$($(PKG_CONFIG) --cflags libpq)"; \
	elif [ "$(PG)" != no ]; then \
		echo "mq: no libpq: building without PostgreSQL support" >&2; \
	fi; \
	[ "$$(cat $@ 2>/dev/null)" = "$$f" ] || printf '%s' "$$f" >$@

$(B)/pgschema.h: common/pg/schema.sql common/pg/lease.sql common/pg/send.sql
	@mkdir -p $(B)
	{ printf '#define PG_SCHEMA_VERSION %s\n' \
	    "$$(sed -n 's/^-- version: *//p' common/pg/schema.sql)"; \
	  printf 'static const char pg_schema_sql[] =\n'; \
	  sed 's/\\/\\\\/g; s/"/\\"/g; s/^/"/; s/$$/\\n"/' common/pg/schema.sql; \
	  printf ';\nstatic const char pg_lease_sql[] =\n'; \
	  sed 's/\\/\\\\/g; s/"/\\"/g; s/^/"/; s/$$/\\n"/' common/pg/lease.sql; \
	  printf ';\nstatic const char pg_send_sql[] =\n'; \
	  sed 's/\\/\\\\/g; s/"/\\"/g; s/^/"/; s/$$/\\n"/' common/pg/send.sql; \
	  printf ';\n'; } > $@

$(B)/schema.h: schema.sql
	@mkdir -p $(B)
	{ printf '#define SCHEMA_VERSION %s\n' \
	    "$$(sed -n 's/^-- version: *//p' schema.sql)"; \
	  printf 'static const char schema_sql[] =\n'; \
	  sed 's/\\/\\\\/g; s/"/\\"/g; s/^/"/; s/$$/\\n"/' schema.sql; \
	  printf ';\n'; } > $@

$(B)/%.o: common/%.c $(HDRS) $(B)/schema.h $(B)/pgflags
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) $(DEPCFLAGS) $(PGFLAGS) -I$(B) -Icommon -c -o $@ $<

# Without libpq these are empty objects.
$(B)/pg/%.o: common/pg/%.c common/pg/pg.h common/pg/pq.h $(HDRS) $(B)/pgschema.h $(B)/pgflags
	@mkdir -p $(@D)
	$(if $(PGFLAGS),$(CC) $(CFLAGS) $(DEPCFLAGS) $(PGFLAGS) -I$(B) -Icommon \
	    -c -o $@ $<,$(CC) -c -x c -o $@ /dev/null)

$(B)/libmq.a: $(LIBOBJ) $(PGOBJ) Makefile
	rm -f $@
	$(AR) rcs $@ $(LIBOBJ) $(PGOBJ)

$(B)/mq-%: cmd/mq-%.c $(B)/libmq.a common/mq.h
	$(CC) $(CFLAGS) $(DEPCFLAGS) -Icommon $(LDFLAGS) -o $@ $< $(B)/libmq.a \
	    $(LDLIBS) $(DEPLIBS)

# The same build with AddressSanitizer and UBSan, in its own directory.
asan: need
	$(MAKE) B=build-asan CFLAGS="-O1 -g -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined" \
	    LDFLAGS="-fsanitize=address,undefined"

deps:
	@sh t/deps.sh install all

tools: $(TOOLS)

$(B)/t/%.so: t/*/%.c
	@mkdir -p $(@D)
	$(CC) -O2 -Wall -Wextra -shared -fPIC -o $@ $< -ldl

$(B)/t/powercut: t/powercut/powercut.c t/powercut/pclog.h
	@mkdir -p $(@D)
	$(CC) -O2 -Wall -Wextra -o $@ t/powercut/powercut.c

# The suite runs on SQLite, then on PostgreSQL (a cluster of its own, when
# this build has libpq and the server is installed); t/suite.sh counts
# each run's skips and prints them.  Before them, the fuzz targets are
# built without clang and given their seeds once (fuzz-check).
test: all tools fuzz-check
	sh t/suite.sh sqlite $(CURDIR)/$(B) $(CURDIR)/$(B)/t
	sh t/suite.sh pg $(CURDIR)/$(B) $(CURDIR)/$(B)/t

test-asan: asan tools
	ASAN_OPTIONS=detect_leaks=0 sh t/suite.sh sqlite \
	    $(CURDIR)/build-asan $(CURDIR)/$(B)/t
	ASAN_OPTIONS=detect_leaks=0 sh t/suite.sh pg \
	    $(CURDIR)/build-asan $(CURDIR)/$(B)/t

check: test test-asan

demo: all
	@sh bench/demo.sh $(B) $(DEMO_DB)

bench: all
	@sh bench/run.sh $(B)
	@sh bench/pg.sh $(B)

# The PostgreSQL benchmarks alone: a throwaway cluster of their own
# (t/pgcluster.sh); one line and nothing else without libpq or the server.
bench-pg: all
	@sh bench/pg.sh $(B)

lint: need
	mandoc -Tlint -Wwarning man/*.[0-9]
	shellcheck -x t/*.bats t/*.bash t/*.sh t/fuzz/run.sh bench/*.sh

# libFuzzer targets for every parser and output round trip (t/fuzz/),
# FUZZ_SECONDS each (default 10); clang is installed like the rest.
fuzz: need
	sh t/fuzz/run.sh

# Each fuzz target built with $(CC) and no libFuzzer, its seeds replayed:
# what make fuzz would fail to build is found by make test.
fuzz-check: need
	FUZZ_BUILD=$(CURDIR)/$(B)/fuzz-check CC="$(CC)" sh t/fuzz/run.sh -c

install: all
	mkdir -p $(DESTDIR)$(BINDIR) $(DESTDIR)$(MANDIR)/man1 \
	    $(DESTDIR)$(MANDIR)/man5 $(DESTDIR)$(MANDIR)/man7 \
	    $(DESTDIR)$(BASHCOMPDIR) $(DESTDIR)$(ZSHCOMPDIR) \
	    $(DESTDIR)$(FISHCOMPDIR) $(DESTDIR)$(EXAMPLEDIR)
	cp $(BINS) $(DESTDIR)$(BINDIR)/
	cp man/*.1 $(DESTDIR)$(MANDIR)/man1/
	-cp man/*.5 $(DESTDIR)$(MANDIR)/man5/ 2>/dev/null
	-cp man/*.7 $(DESTDIR)$(MANDIR)/man7/ 2>/dev/null
	cp completions/mq.bash $(DESTDIR)$(BASHCOMPDIR)/mq-send
	for p in $(PROGS); do [ $$p = mq-send ] || \
	    ln -sf mq-send $(DESTDIR)$(BASHCOMPDIR)/$$p; done
	cp completions/_mq $(DESTDIR)$(ZSHCOMPDIR)/_mq
	cp completions/mq.fish $(DESTDIR)$(FISHCOMPDIR)/mq-send.fish
	for p in $(PROGS); do [ $$p = mq-send ] || \
	    ln -sf mq-send.fish $(DESTDIR)$(FISHCOMPDIR)/$$p.fish; done
	cp examples/*.service examples/*.timer $(DESTDIR)$(EXAMPLEDIR)/

uninstall:
	for p in $(PROGS); do rm -f $(DESTDIR)$(BINDIR)/$$p \
	    $(DESTDIR)$(MANDIR)/man1/$$p.1 $(DESTDIR)$(BASHCOMPDIR)/$$p \
	    $(DESTDIR)$(FISHCOMPDIR)/$$p.fish; done
	rm -f $(DESTDIR)$(ZSHCOMPDIR)/_mq $(DESTDIR)$(MANDIR)/man7/mq.7 \
	    $(DESTDIR)$(MANDIR)/man5/mq.5
	rm -f $(DESTDIR)$(EXAMPLEDIR)/mq-worker.service \
	    $(DESTDIR)$(EXAMPLEDIR)/mq-batch.service \
	    $(DESTDIR)$(EXAMPLEDIR)/mq-batch.timer
	-rmdir $(DESTDIR)$(EXAMPLEDIR) 2>/dev/null

clean:
	rm -rf build build-asan

FORCE:

.PHONY: all need tools asan deps fuzz fuzz-check test test-asan check demo bench bench-pg lint install uninstall clean
