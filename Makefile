# rig: the two commands a new user needs are `make run` and `make test`.
# Both install what they need first (Debian packages, then a virtualenv with the package).
PY      ?= python3
VENV    ?= .venv
BIN     := $(VENV)/bin
# What to install beside the core (issue 41 item 6): the core runs the default scenario;
# each feature adds the packages of one part (rig/packages.py FEATURES; `rig doctor` says
# which feature lacks what), e.g. `make install FEATURES="nginx apache"`, or `all`.
# `make test` installs all of them.
FEATURES ?= core
# installed without their recommendations: mininet recommends openvswitch-switch (a daemon
# and a kernel module), which the rig never uses (Linux bridges; docs/scenarios.md "Mininet topologies")
APT_LEAN := mininet
# services a package starts by itself on Debian: the rig installs them stopped and
# disabled (it starts its own instances, in its namespaces, from its own configuration)
APT_QUIET := nginx apache2
SCENARIO ?= scenarios/quick.yaml

.PHONY: install deps venv helpers xrdcl6 run test test-fast lint reference test-netem netem-deps bench clean-leftovers

install: deps venv helpers xrdcl6

# the caching-mode replay's HTTP client (libdavix, libcurl): tools/rig-replay-http
# (feature `replay`, or `all`); the userspace emulation engine's native data path
# (libnetfilter_queue, libmnl): tools/rig-emul-engine (feature `engine`, or `all`; opt-in
# with RIG_ENGINE=native, docs/emulation.md; without it the Python engine runs)
helpers: deps
	@case " $(FEATURES) " in *" all "*|*" replay "*) $(MAKE) -C tools/rig-replay-http;; \
	  *) echo "tools/rig-replay-http not built (feature replay: make install FEATURES=replay)";; esac
	@case " $(FEATURES) " in *" all "*|*" engine "*) $(MAKE) -C tools/rig-emul-engine;; \
	  *) echo "tools/rig-emul-engine not built (feature engine: make install FEATURES=engine)";; esac

# a second XRootD client release: PyPI's xrootd 6.x wheel (XrdCl + Python bindings, no
# xrdcp binary) in a side environment, run by tools/xrdcl-copy (client tool `xrdcl`).
# Without network access the step says so and install goes on; `xrdcl` clients then
# refuse to run with one line.
XRDCL_VENV ?= .venv-xrdcl6
xrdcl6: $(XRDCL_VENV)/bin/python
$(XRDCL_VENV)/bin/python:
	@$(PY) -m venv $(XRDCL_VENV) && $(XRDCL_VENV)/bin/pip install -q 'xrootd>=6,<7' \
	  || { rm -rf $(XRDCL_VENV); echo "make xrdcl6: could not install PyPI's xrootd 6.x (no network?); xrdcl clients will not run"; }

# Debian (apt: what CI runs) or the RHEL 9 family (dnf, with EPEL and CRB); the package
# map is rig/packages.py, run by the system python3 before the virtualenv exists (on EL9:
# make install PY=python3.11). On Debian a package's own service (nginx, apache2) is not
# started by its installation (policy-rc.d answers 101 while apt runs) and is disabled;
# the packages installed are listed in .deps-installed (tests/test_install_quiet.py).
deps:
	@pkgs_debian=$$(python3 -m rig.packages debian $(FEATURES)) || exit 2; \
	pkgs_el9=$$(python3 -m rig.packages el9 $(FEATURES)) || exit 2; \
	if ! command -v apt-get >/dev/null 2>&1 && command -v dnf >/dev/null 2>&1; then \
	  missing=$$(for p in $$pkgs_el9; do rpm -q $$p >/dev/null 2>&1 || echo $$p; done); \
	  if [ -n "$$missing" ]; then \
	    echo "installing EL9 packages:" $$missing; \
	    dnf install -y epel-release && dnf config-manager --set-enabled crb && dnf install -y $$missing; \
	  fi; \
	else \
	  missing=$$(for p in $$pkgs_debian; do dpkg -s $$p >/dev/null 2>&1 || echo $$p; done); \
	  if [ -n "$$missing" ]; then \
	    echo "installing Debian packages:" $$missing; \
	    rest=$$(for p in $$missing; do case " $(APT_LEAN) " in *" $$p "*) ;; *) echo $$p;; esac; done); \
	    lean=$$(for p in $$missing; do case " $(APT_LEAN) " in *" $$p "*) echo $$p;; esac; done); \
	    quiet=""; if [ ! -e /usr/sbin/policy-rc.d ]; then \
	      printf '#!/bin/sh\n# written by the rig'"'"'s make deps while apt runs\nexit 101\n' > /usr/sbin/policy-rc.d && \
	      chmod 755 /usr/sbin/policy-rc.d && quiet=1; fi; \
	    apt-get update -q && \
	    { [ -z "$$rest" ] || DEBIAN_FRONTEND=noninteractive apt-get install -y -q $$rest; } && \
	    { [ -z "$$lean" ] || DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $$lean; }; \
	    rc=$$?; [ -z "$$quiet" ] || rm -f /usr/sbin/policy-rc.d; \
	    for p in $$missing; do case " $(APT_QUIET) " in *" $$p "*) \
	      if command -v systemctl >/dev/null 2>&1; then systemctl disable --now $$p >/dev/null 2>&1 || true; fi;; esac; done; \
	    printf '%s\n' $$missing >> .deps-installed; \
	    [ $$rc -eq 0 ] || exit $$rc; \
	  fi; \
	fi

$(BIN)/rig: setup.cfg pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[test]'
	@touch $@

venv: $(BIN)/rig

run: install
	$(BIN)/rig run $(SCENARIO)

test: FEATURES = all
test: install netem-deps lint
	$(BIN)/pytest -q -rs --durations=30

# The pure tier without the slow pure tests (browser, charts, fuzzing, loopback copies):
# under 30 s on a quiet 2-core machine.
test-fast: venv
	$(BIN)/pytest -q -m "not netns and not e2e and not netemvm and not slow"

lint: venv
	$(BIN)/ruff check rig tests bench
	$(BIN)/mypy rig

# docs/scenario-reference.md, every scenario key, generated from the schema
# (tests/test_scenario_reference.py fails while it is stale)
reference: venv
	$(BIN)/python -m rig.scenario_reference > docs/scenario-reference.md

# The netem backend on a kernel that has sch_netem: Debian's kernel in qemu (TCG, no
# network device), `rig net` and a whole `rig run` through netem inside, ~4-5 min.
# Downloads the kernel package once (not installed on the host).
NETEM_APT_PKGS := qemu-system-x86 busybox-static
netem-deps:
	@missing=$$(for p in $(NETEM_APT_PKGS); do dpkg -s $$p >/dev/null 2>&1 || echo $$p; done); \
	if [ -n "$$missing" ]; then \
	  apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $$missing; \
	fi

test-netem: FEATURES = all
test-netem: install netem-deps
	$(BIN)/pytest -q -rs -s -m netemvm tests/test_netem_vm.py

bench: install
	$(BIN)/python bench/emulation.py

clean-leftovers: venv
	$(BIN)/rig clean
